"""The log's writing: produce into a partition under its lock, append to the active segment, roll.

One writer per partition at a time holds `partition=<p>/.lock` (`flock`, `_PartitionLock`), so
producers in different processes append consecutive, non-overlapping offsets. Small batches go to
the active segment (`topics.active`), which is rolled to an immutable Parquet segment
(`topics.segment`) by size and age (`segment_records`, `segment_bytes`, `segment_ms`, as Kafka's
segment.bytes and segment.ms); a whole segment's worth into an empty active segment is written
straight to Parquet. The lock file's token tells a writer whether its cached view of the
partition (`_Writer`) is still current. `LogWriter` is a base of `topics.log.Log`; docs/topics.md
gives the crash-safety argument.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from core.errors import GroupshiftError
from core.types import TopicPartition
from topics.active import ACTIVE_SUFFIX, ActiveSegment, Records, active_paths
from topics.arrow import int64_array, int64_values, null_mask
from topics.errors import UnknownPartition
from topics.limits import MAX_SEGMENT_BYTES, MAX_SEGMENT_MS, MAX_SEGMENT_RECORDS, MIN_SEGMENT_BYTES
from topics.log_index import _RACY_NS, PARTITION_PREFIX
from topics.log_input import to_table
from topics.registry import validate_topic_name
from topics.segment import SCHEMA, SegmentInfo, write_segment

LOCK_NAME = ".lock"


class ProduceResult(NamedTuple):
    """Where a produced batch landed: `count` records at offsets `base_offset..base_offset+count-1`."""

    partition: int
    base_offset: int
    count: int


class _Writer:
    """What the partition's writer knows between produce calls, valid while the lock file's token
    is the one it saw: the active segment (None: the next append starts one) or the log end; and,
    during a produce call, the active segment's files, open."""

    __slots__ = ("token", "directory", "active", "parquet_end", "fds")

    def __init__(self, token: bytes, directory: str, active: ActiveSegment | None, parquet_end: int):
        self.token, self.directory, self.active, self.parquet_end = token, directory, active, parquet_end
        self.fds: tuple[int, int, int] | None = None

    @property
    def end(self) -> int:
        return self.active.end if self.active is not None else self.parquet_end

    def close(self) -> None:
        fds, self.fds = self.fds, None
        for fd in fds or ():
            os.close(fd)


class LogWriter:
    """Producing into the log (see the module docstring)."""

    def produce(self, topic: str, records: Any, partition: int | None = None) -> list[ProduceResult]:
        """Append records; one `ProduceResult` per partition written, in partition order.

        `records` is an Arrow table/record batch with a `value` column and optional `key` and
        `timestamp` columns (the fast path), or an iterable of values, `(key, value)`,
        `(key, value, timestamp)` or `{"key", "value", "timestamp"}` dicts. Keys and values are
        bytes or str (UTF-8); timestamps are datetimes or Kafka's epoch milliseconds (default: now).
        With `partition=None` the key chooses the partition (Kafka's default partitioner).
        """
        table = to_table(records)
        n = table.num_rows
        if n == 0:
            return []
        if partition is not None:
            validate_topic_name(topic)  # a name is never a path
            tp = TopicPartition(topic, partition)
            if not 0 <= partition:
                raise UnknownPartition(tp, self.partitions(topic))
            return [self._append(tp, table)]
        num_partitions = self._partition_count(topic)
        parts = self.partitioner.partition_batch(table.column("key"), num_partitions, n)
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        table = table.take(int64_array(order))
        results = []
        for p in np.unique(sorted_parts):
            lo, hi = np.searchsorted(sorted_parts, [p, p + 1])
            results.append(self._append(TopicPartition(topic, int(p)), table.slice(lo, hi - lo)))
        return results

    def _partition_count(self, topic: str) -> int:
        """`partitions(topic)`, cached while the topic directory's mtime is unchanged (and old enough)."""
        path = self._topic_dir(topic)
        mtime = os.stat(path).st_mtime_ns
        with self._lock:
            cached = self._counts.get(topic)
        if cached and cached[0] == mtime and cached[1] - mtime > _RACY_NS:
            return cached[2]
        listed_at = time.time_ns()
        count = self.partitions(topic)
        with self._lock:
            self._counts[topic] = (mtime, listed_at, count)
        return count

    def _append(self, tp: TopicPartition, table: pa.Table) -> ProduceResult:
        """Append under the partition lock: small batches to the active segment, rolled by size and
        age; whole segments' worth into an empty active segment go straight to Parquet."""
        directory = f"{self.root}{os.sep}{tp.topic}{os.sep}{PARTITION_PREFIX}{tp.partition}"
        try:
            lock = _PartitionLock(directory).__enter__()
        except FileNotFoundError:
            self.partition_dir(tp)  # raises UnknownTopic / UnknownPartition
            raise
        w = None
        try:
            w = self._writer(tp, lock)
            base, n, pos = w.end, table.num_rows, 0
            records = None
            while pos < n:
                a = w.active
                have = a.count if a is not None else 0
                if have == 0 and n - pos >= self.segment_records:
                    if a is not None:
                        self._roll(w, lock)  # an empty active segment: removed
                    self._write_parquet(w, lock, table.slice(pos, self.segment_records))
                    pos += self.segment_records
                    continue
                if records is None:
                    records = Records(table)
                room = self.segment_bytes - (a.size if a is not None else 0)
                take = min(n - pos, self.segment_records - have, records.fitting(pos, room))
                if have and (take <= 0 or self._too_old(a, records, pos, pos + take)):
                    self._roll(w, lock)
                    continue
                take = max(take, 1)  # a record larger than segment_bytes goes alone
                self._write_active(w, lock, records, pos, pos + take)
                pos += take
                a = w.active
                if a.count >= self.segment_records or a.size >= self.segment_bytes:
                    self._roll(w, lock)
        except BaseException:
            with self._lock:
                self._writers.pop(tp, None)  # whatever happened, the next produce looks afresh
            raise
        finally:
            if w is not None:
                w.close()
            lock.__exit__()
        return ProduceResult(tp.partition, base, n)

    def _too_old(self, active: ActiveSegment, records: Records, i: int, j: int) -> bool:
        """Kafka's segment.ms: the newest record of `[i, j)` is more than `segment_ms` younger than
        the active segment's oldest record."""
        return records.time_range(i, j)[1] - active.min_timestamp > self.segment_ms * 1000

    def _writer(self, tp: TopicPartition, lock: _PartitionLock) -> _Writer:
        """The writer's view of the partition, revalidated (we hold the lock): rebuilt from a fresh
        listing when the lock file's token changed, and the active segment's files opened and
        counted up to date (another process may have appended). A writer that died mid-append
        left bytes past the last whole append: in the keys or values file they are truncated; in
        the index (never rewritten in place, see docs/topics.md) they close the segment — its
        whole appends are rolled to Parquet, and the next append starts a new active segment."""
        token = lock.token()
        with self._lock:
            w = self._writers.get(tp)
        if w is None or not token or w.token != token:
            w = self._rebuild_writer(tp, lock, token)
        a = w.active
        if a is None:
            return w
        try:
            w.fds = a.open(os.O_RDWR)
        except FileNotFoundError:  # removed by a hand other than a writer's: start over
            with self._lock:
                self._writers.pop(tp, None)
            return self._rebuild_writer(tp, lock, b"")
        try:
            index, keys, values = w.fds
            st = os.fstat(index)
            if a.stale(st, decode=False):
                a.refresh(w.fds, decode=False, st=st)
            if st.st_size != a.index_end:
                self._roll(w, lock)
                return w
            for fd, end in ((keys, a.key_end), (values, a.value_end)):
                if os.fstat(fd).st_size > end:
                    os.ftruncate(fd, end)  # bytes of an append whose index entries were never written
        except BaseException:
            w.close()
            raise
        return w

    def _rebuild_writer(self, tp: TopicPartition, lock: _PartitionLock, token: bytes) -> _Writer:
        lst = self._listing(tp, fresh=True)
        directory = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}"
        if lst.stale or not token:
            token = lock.bump()
            for name in lst.stale:  # we hold the lock, so their writer died
                try:
                    os.unlink(directory / name)
                except FileNotFoundError:
                    pass
        active, end = None, 0
        if lst.bases:
            if lst.names[-1].endswith(ACTIVE_SUFFIX):
                active = self._active(directory / lst.names[-1], lst.inodes[-1], lst.bases[-1], decode=False)
            else:
                end = self._info(tp, lst, len(lst.bases) - 1).end
        w = _Writer(token, str(directory), active, end)
        with self._lock:
            self._writers[tp] = w
        return w

    def _write_active(self, w: _Writer, lock: _PartitionLock, records: Records, i: int, j: int) -> None:
        """Append records `[i, j)` to the active segment, creating it (values, keys, then the index
        file, which makes it a segment) if there is none."""
        a = w.active
        created = a is None
        if created:
            w.token = lock.bump()  # new files in the directory
            index, keys, values = active_paths(w.directory, w.end)
            fds = []
            try:
                for path in (values, keys):  # an orphan of the same name was left by a writer that died
                    fds.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644))
                fds.append(os.open(index, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644))
            except BaseException:
                for fd in fds:
                    os.close(fd)
                raise
            w.fds = (fds[2], fds[1], fds[0])
            a = ActiveSegment(index, w.end, os.fstat(fds[2]).st_ino)
            with self._lock:
                self._actives[(str(index), a.inode)] = a
            w.active = a
        a.append(w.fds, records, i, j, self.fsync)
        if created and self.fsync:
            _fsync_dir(w.directory)

    def _roll(self, w: _Writer, lock: _PartitionLock) -> None:
        """Publish the active segment's whole appends as a Parquet segment of the same base, then
        remove its files (the index first).

        A crash in between leaves both: readers prefer the Parquet segment, which holds the same
        records, and the next writer removes the active segment's files."""
        a = w.active
        w.token = lock.bump()
        if a.count:
            if a.decoded < a.count:
                fds = w.fds if w.fds is not None else a.open()
                try:
                    a.refresh(fds)
                finally:
                    if fds is not w.fds:
                        for fd in fds:
                            os.close(fd)
            table = a.table()
            path = write_segment(
                Path(w.directory), a.base, table, row_group_records=self.row_group_records, fsync=self.fsync
            )
            self._remember(path, a.base, table)
        w.close()
        for path in (a.path, a.keys_path, a.values_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        with self._lock:
            self._actives.pop((str(a.path), a.inode), None)
        w.parquet_end, w.active = a.end, None

    def _write_parquet(self, w: _Writer, lock: _PartitionLock, chunk: pa.Table) -> None:
        w.token = lock.bump()
        seg = pa.Table.from_batches([_segment_batch(chunk, w.end)]) if chunk.num_rows else chunk
        path = write_segment(
            Path(w.directory), w.end, seg, row_group_records=self.row_group_records, fsync=self.fsync
        )
        self._remember(path, w.end, seg)
        w.parquet_end += seg.num_rows

    def _remember(self, path: Path, base: int, seg: pa.Table) -> None:
        # The writer knows the footer's contents; caching them saves re-reading what it just wrote.
        st = path.stat()
        ts = _present(seg.column("timestamp"))
        lo, hi = (int(ts.min()), int(ts.max())) if len(ts) else (None, None)
        rg = tuple(range(base, base + seg.num_rows, self.row_group_records))
        info = SegmentInfo(path, base, base + seg.num_rows, st.st_size, lo, hi, rg, st.st_ino)
        with self._lock:
            self._infos[(str(path), st.st_ino)] = info


def _present(col: pa.ChunkedArray) -> np.ndarray:
    """The non-null values of an int64 or timestamp column, as numpy int64."""
    values = int64_values(col)
    return values[~null_mask(col)] if col.null_count else values


class _PartitionLock:
    """`flock` on `partition=<p>/.lock`: one writer per partition across threads and processes.

    The lock file also holds a token that every writer rewrites before it changes which files the
    directory holds (a new active segment, a roll, a Parquet segment, retention, clean-up): a
    writer whose cached view carries the current token knows nothing changed since."""

    _TOKEN = 16

    def __init__(self, directory: Path | str):
        self.path = os.path.join(directory, LOCK_NAME)

    def __enter__(self) -> _PartitionLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self.fd)
            raise
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)

    def token(self) -> bytes:
        return os.pread(self.fd, self._TOKEN, 0)

    def bump(self) -> bytes:
        token = os.urandom(self._TOKEN)
        os.pwrite(self.fd, token, 0)
        return token


def _segment_batch(chunk: pa.Table, base: int) -> pa.RecordBatch:
    """`chunk` (key, value, timestamp) as one record batch of the segment schema, offsets from `base`."""
    offsets = int64_array(np.arange(base, base + chunk.num_rows, dtype=np.int64))
    columns = [chunk.column(name) for name in ("key", "value", "timestamp")]
    arrays = [c.chunk(0) if c.num_chunks == 1 else c.combine_chunks() for c in columns]
    return pa.RecordBatch.from_arrays([offsets, *arrays], schema=SCHEMA)


def _fsync_dir(directory: str) -> None:
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _check_roll(segment_records: int, segment_bytes: int, segment_ms: int) -> None:
    """Refuse roll settings out of their bounds (topics/limits.py) before anything is written."""
    for name, value, low, top in (
        ("segment_records", segment_records, 1, MAX_SEGMENT_RECORDS),
        ("segment_bytes", segment_bytes, MIN_SEGMENT_BYTES, MAX_SEGMENT_BYTES),
        ("segment_ms", segment_ms, 1, MAX_SEGMENT_MS),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= top:
            raise GroupshiftError(f"{name} must be between {low} and {top}, not {value!r}")
