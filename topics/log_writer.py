"""The partitioned, offset-addressed log: produce, offsets, read and retention over segments.

Layout: `<root>/<topic>/partition=<p>/segment-<base:020d>.parquet` (see `topics.segment`) and
one active segment, `segment-<base:020d>.index` / `.keys` / `.values` (see `topics.active`), that
takes small appends and is rolled to Parquet by size and age (`segment_records`, `segment_bytes`,
`segment_ms`, as Kafka's segment.bytes and segment.ms). One writer per partition at a time holds
`partition=<p>/.lock` (`flock`), so producers in different processes append consecutive,
non-overlapping offsets. Readers take no lock: Parquet segments are immutable and published by
rename, and readers of the active segment stop at the last append whose index entries are whole.
docs/topics.md gives the crash-safety argument.

    log = Log("/data/groupshift")
    log.create("clicks", partitions=3)
    log.produce("clicks", [(b"user-1", b"{...}"), (b"user-2", b"{...}")])   # keyed: murmur2
    log.produce("clicks", pa.table({"value": values}), partition=0)          # columnar, no per-record work
    batch, next_offset = log.read(TopicPartition("clicks", 0), 0, 500)     # across segments
    log.earliest(tp), log.latest(tp), log.offset_for_time(tp, ts_ms)
    log.retain("clicks", max_age=7 * 86400)

Every method is safe to call from several threads; caches (directory listings, footers, decoded
row groups) are revalidated against the directory's mtime, so changes made by other processes
are seen on the next call.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import shutil
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from core.errors import GroupshiftError, UnknownTopic
from core.types import TopicPartition
from topics.active import (
    ACTIVE_SUFFIX,
    INDEX_SUFFIX,
    ActiveSegment,
    Records,
    active_paths,
    parse_active_part,
)
from topics.arrow import (
    TIMESTAMP_US,
    binary_array,
    empty_batch,
    int64_array,
    int64_values,
    null_mask,
    timestamp_array,
    timestamps_from_millis,
)
from topics.errors import InvalidPartitions, OffsetOutOfRange, TopicAlreadyExists, UnknownPartition
from topics.limits import (
    MAX_RETAIN_AGE_S,
    MAX_RETAIN_BYTES,
    MAX_RETAIN_SEGMENTS,
    MAX_SEGMENT_BYTES,
    MAX_SEGMENT_MS,
    MAX_SEGMENT_RECORDS,
    MIN_SEGMENT_BYTES,
)
from topics.partitioner import DefaultPartitioner
from topics.registry import check_partitions, validate_topic_name
from topics.root import default_root
from topics.segment import (
    SCHEMA,
    TMP_SUFFIX,
    SegmentInfo,
    parse_segment_name,
    read_info,
    read_row_group,
    write_segment,
)

PARTITION_PREFIX = "partition="
LOCK_NAME = ".lock"
TOPIC_ID_NAME = ".topic-id"
# A listing is trusted while the directory's mtime is unchanged, but only if it was taken well
# after that mtime: file systems stamp mtimes with a coarse clock, so two renames within one
# tick would otherwise look like one.
_RACY_NS = 1_000_000_000
_TS_TYPE = TIMESTAMP_US
# A read concatenates at most this many slices (row groups, active-segment chunks).
_MAX_READ_PIECES = 4096


class ProduceResult(NamedTuple):
    """Where a produced batch landed: `count` records at offsets `base_offset..base_offset+count-1`."""

    partition: int
    base_offset: int
    count: int


class ReadResult(NamedTuple):
    """Records read from one partition (schema `topics.segment.SCHEMA`) and the offset after them."""

    batch: pa.RecordBatch
    next_offset: int


class OffsetAndTimestamp(NamedTuple):
    """Kafka's answer to `offsetsForTimes`: the first offset at or after a time, and its timestamp (ms)."""

    offset: int
    timestamp: int


class _Listing(NamedTuple):
    topic_id: str  # a deleted and re-created topic is a new one, even if inodes are reused
    mtime: int
    listed_at: int
    bases: list[int]
    names: list[str]
    inodes: list[int]
    stale: list[str]  # hidden temporary files, active files rolled already or orphaned (a writer died)


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


class Log:
    """The topics under one root directory. See the module docstring for an example."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        segment_records: int = 100_000,
        segment_bytes: int = 32 << 20,
        segment_ms: int = 3_600_000,
        row_group_records: int = 25_000,
        cache_bytes: int = 256 << 20,
        fsync: bool = False,
        partitioner: DefaultPartitioner | None = None,
    ):
        _check_roll(segment_records, segment_bytes, segment_ms)
        self.root = Path(root) if root is not None else default_root()
        self.segment_records = segment_records
        self.segment_bytes = segment_bytes
        self.segment_ms = segment_ms
        self.row_group_records = row_group_records
        self.fsync = fsync
        self.partitioner = partitioner or DefaultPartitioner()
        self._lock = threading.RLock()
        self._listings: dict[TopicPartition, _Listing] = {}
        self._infos: dict[tuple[str, int], SegmentInfo] = {}
        self._actives: dict[tuple[str, int], ActiveSegment] = {}
        self._writers: dict[TopicPartition, _Writer] = {}
        self._counts: dict[str, tuple[int, int, int]] = {}  # topic -> (dir mtime, listed at, partitions)
        self._batches: OrderedDict[tuple[str, int, int], pa.RecordBatch] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._cached_bytes = 0

    # -- topics -----------------------------------------------------------------------------

    def create(self, topic: str, partitions: int) -> str:
        """Create a topic's directories and return its new id; raises `TopicAlreadyExists`.

        Atomic: the whole tree is built under a hidden name and renamed into place, and removed
        again if building it fails, so a failed create leaves nothing behind.
        """
        validate_topic_name(topic)
        check_partitions(partitions)
        final = self.root / topic
        if final.exists():
            raise TopicAlreadyExists(f"topic {topic!r} already exists in {self.root}")
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".{topic}.creating-{os.getpid()}-{threading.get_ident()}"
        topic_id = uuid.uuid4().hex
        try:
            try:
                for p in range(partitions):
                    (staging / f"{PARTITION_PREFIX}{p}").mkdir(parents=True, exist_ok=True)
                (staging / TOPIC_ID_NAME).write_text(topic_id)
            except OSError as exc:
                raise GroupshiftError(
                    f"cannot create the directories of topic {topic!r} in {self.root}: {exc.strerror or exc}"
                ) from None
            try:
                os.rename(staging, final)
            except OSError:
                if final.exists():
                    raise TopicAlreadyExists(f"topic {topic!r} already exists in {self.root}") from None
                raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return topic_id

    def topic_id(self, topic: str) -> str:
        """The id written when the topic's directory was created ("" for one made by other tools)."""
        return _topic_id(self._topic_dir(topic))

    def add_partitions(self, topic: str, partitions: int) -> list[Path]:
        """Grow a topic to `partitions` partitions (never shrinks; raises `InvalidPartitions`).

        Returns the directories created (all of them are removed again if one cannot be made).
        """
        check_partitions(partitions)
        current = self.partitions(topic)
        if partitions <= current:
            raise InvalidPartitions(
                f"topic {topic!r} has {current} partitions; the number can only be increased"
            )
        made: list[Path] = []
        try:
            for p in range(current, partitions):
                path = self.root / topic / f"{PARTITION_PREFIX}{p}"
                path.mkdir()
                made.append(path)
        except OSError:
            self.remove_partitions(made)
            raise
        return made

    def remove_partitions(self, directories: list[Path]) -> None:
        """Undo `add_partitions` (its directories hold no segments yet)."""
        for path in reversed(directories):
            shutil.rmtree(path, ignore_errors=True)

    def delete(self, topic: str) -> None:
        """Delete a topic and all its segments."""
        path = self._topic_dir(topic)
        shutil.rmtree(path)
        with self._lock:
            for tp in [tp for tp in self._listings if tp.topic == topic]:
                del self._listings[tp]
            for tp in [tp for tp in self._writers if tp.topic == topic]:
                del self._writers[tp]

    def topics(self) -> list[str]:
        """Topics under the root, sorted."""
        if not self.root.is_dir():
            return []
        return sorted(e.name for e in os.scandir(self.root) if e.is_dir() and not e.name.startswith("."))

    def exists(self, topic: str) -> bool:
        validate_topic_name(topic)
        return (self.root / topic).is_dir()

    def partitions(self, topic: str) -> int:
        """The number of partitions of a topic; raises `UnknownTopic`."""
        n = 0
        for e in os.scandir(self._topic_dir(topic)):
            if e.name.startswith(PARTITION_PREFIX) and e.name[len(PARTITION_PREFIX) :].isdigit():
                n += 1
        return n

    def _topic_dir(self, topic: str) -> Path:
        validate_topic_name(topic)  # a name is never a path: no '/', '..' or absolute names
        path = self.root / topic
        if not path.is_dir():
            raise UnknownTopic(f"topic {topic!r} does not exist in {self.root}; create it first")
        return path

    def partition_dir(self, tp: TopicPartition) -> Path:
        """The directory holding a partition's segments; raises `UnknownTopic` / `UnknownPartition`."""
        path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}"
        if not path.is_dir():
            raise UnknownPartition(tp, self.partitions(tp.topic))
        return path

    # -- produce ----------------------------------------------------------------------------

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

    # -- offsets ----------------------------------------------------------------------------

    def segments(self, tp: TopicPartition) -> list[SegmentInfo]:
        """The partition's published segments, oldest first (footers read once, then cached)."""
        return self._segments(tp)[1]

    def earliest(self, tp: TopicPartition) -> int:
        """The log start offset: the base of the oldest segment (0 for an empty partition)."""
        lst = self._listing(tp)
        return lst.bases[0] if lst.bases else 0

    def latest(self, tp: TopicPartition) -> int:
        """The log end offset (the next offset to be written), from the newest segment's footer."""
        return self._latest(tp)

    def _latest(self, tp: TopicPartition, fresh: bool = False) -> int:
        for _ in range(3):
            lst = self._listing(tp, fresh=fresh)
            if not lst.bases:
                return 0
            try:
                return self._info(tp, lst, len(lst.bases) - 1).end
            except FileNotFoundError:
                fresh = True  # deleted under us (topic deleted, or retention of a newer segment)
        raise UnknownPartition(tp, self.partitions(tp.topic))

    def offset_for_time(self, tp: TopicPartition, timestamp: int | datetime) -> OffsetAndTimestamp | None:
        """The earliest offset whose timestamp is >= `timestamp` (ms or datetime), or None (Kafka's rule)."""
        target = _to_micros(timestamp)
        for info in self.segments(tp):
            if info.max_timestamp is None or info.max_timestamp < target:
                continue  # the footer (or what the active segment holds) rules it out unread
            if info.path.name.endswith(ACTIVE_SUFFIX):
                hit = self._active(info.path, info.inode, info.base, decode=True).offset_for_time(target)
                if hit is not None:
                    return OffsetAndTimestamp(hit[0], hit[1] // 1000)
                continue
            for i in range(len(info.row_group_bases)):
                batch = self._row_group(info, i)
                ts = int64_values(batch.column(3))
                at = ts >= target
                if batch.column(3).null_count:
                    at &= ~null_mask(batch.column(3))
                hits = np.flatnonzero(at)
                if len(hits):
                    hit = int(hits[0])
                    return OffsetAndTimestamp(batch.column(0)[hit].as_py(), int(ts[hit]) // 1000)
        return None

    def offsets_for_times(
        self, timestamps: dict[TopicPartition, int | datetime]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """`offset_for_time` for several partitions, as `KafkaConsumer.offsetsForTimes`."""
        return {tp: self.offset_for_time(tp, ts) for tp, ts in timestamps.items()}

    # -- read -------------------------------------------------------------------------------

    def read(self, tp: TopicPartition, start: int, max_records: int) -> ReadResult:
        """Up to `max_records` records from `start`, across segment boundaries.

        Returns an empty batch at the log end; raises `OffsetOutOfRange` below the earliest or
        beyond the latest offset, and `CorruptSegment` naming a file that cannot be read. One
        slice of a row group or of the active segment is returned as it is (no copy); records from
        several are concatenated (at most `_MAX_READ_PIECES` slices per read).
        """
        fresh = False
        for _ in range(3):
            lst = self._listing(tp, fresh=fresh)
            try:
                earliest = lst.bases[0] if lst.bases else 0
                # Reading from the active segment: decode it now, not in a second refresh.
                last = len(lst.bases) - 1
                latest = self._info(tp, lst, last, decode=start >= lst.bases[last]).end if lst.bases else 0
                if not earliest <= start <= latest:
                    raise OffsetOutOfRange(tp, start, earliest, latest)
                if start == latest or max_records <= 0:
                    return ReadResult(_EMPTY, start)
                pieces = self._pieces(tp, lst, start, min(max_records, latest - start))
            except FileNotFoundError:
                fresh = True  # retention or a roll removed a file after we listed it
                continue
            n = sum(p.num_rows for p in pieces)
            batch = pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)
            return ReadResult(batch, start + n)
        raise OffsetOutOfRange(tp, start, self.earliest(tp), self.latest(tp))

    def _pieces(self, tp: TopicPartition, lst: _Listing, start: int, want: int) -> list[pa.RecordBatch]:
        """Slices of consecutive records from `start`, `want` at most (at least one record)."""
        pieces: list[pa.RecordBatch] = []
        i = bisect.bisect_right(lst.bases, start) - 1
        while want > 0 and i < len(lst.bases) and len(pieces) < _MAX_READ_PIECES:
            if lst.names[i].endswith(ACTIVE_SUFFIX):  # decoded up to date: one stat, no SegmentInfo
                path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}" / lst.names[i]
                active = self._active(path, lst.inodes[i], lst.bases[i], decode=True)
                if start >= active.end:
                    i += 1
                    continue
                got = active.slices(start, min(want, active.end - start))[: _MAX_READ_PIECES - len(pieces)]
            else:
                info = self._info(tp, lst, i)
                if start >= info.end:
                    i += 1
                    continue
                rg = bisect.bisect_right(info.row_group_bases, start) - 1
                batch = self._row_group(info, rg)
                skip = start - info.row_group_bases[rg]
                take = min(want, batch.num_rows - skip)
                got = [batch if take == batch.num_rows else batch.slice(skip, take)]
            if not got:
                break
            pieces += got
            n = sum(p.num_rows for p in got)
            start += n
            want -= n
        return pieces

    # -- retention --------------------------------------------------------------------------

    def retain(
        self,
        topic: str,
        *,
        max_age: float | timedelta | None = None,
        max_segments: int | None = None,
        max_bytes: int | None = None,
        now: int | datetime | None = None,
    ) -> dict[TopicPartition, int]:
        """Delete whole old segments; returns each partition's earliest offset afterwards.

        A segment goes when its newest record is older than `max_age` (seconds), when more than
        `max_segments` remain, or while the partition is larger than `max_bytes` — oldest first,
        and never the newest segment, which carries the log end offset (Kafka keeps its active
        segment too).
        """
        if isinstance(max_age, timedelta):
            max_age = max_age.total_seconds()
        _check_retention(max_age, max_segments, max_bytes)
        now_us = _to_micros(now) if now is not None else time.time_ns() // 1000
        out = {}
        for p in range(self.partitions(topic)):
            tp = TopicPartition(topic, p)
            directory = self.partition_dir(tp)
            with _PartitionLock(directory) as lock:
                infos = self._segments(tp, fresh=True)[1]
                total = sum(i.size for i in infos)
                remaining = len(infos)
                for info in infos[:-1]:  # never the newest: the active segment, or the log end's
                    old = max_age is not None and info.max_timestamp < now_us - max_age * 1_000_000
                    many = max_segments is not None and remaining > max_segments
                    big = max_bytes is not None and total > max_bytes
                    if not (old or many or big):
                        break
                    if remaining == len(infos):
                        lock.bump()  # writers: the directory changes
                    os.unlink(info.path)
                    total -= info.size
                    remaining -= 1
                out[tp] = self._listing(tp, fresh=True).bases[0] if infos else 0
        return out

    # -- caches -----------------------------------------------------------------------------

    def _listing(self, tp: TopicPartition, fresh: bool = False) -> _Listing:
        directory = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}"
        try:
            st = os.stat(directory)
        except FileNotFoundError:
            self.partition_dir(tp)  # raises UnknownTopic / UnknownPartition
            raise
        with self._lock:
            cached = self._listings.get(tp)
        mtime = st.st_mtime_ns
        if not fresh and cached and cached.mtime == mtime and cached.listed_at - mtime > _RACY_NS:
            return cached
        parquet, active, parts, stale = {}, {}, {}, []
        with os.scandir(directory) as it:
            for e in it:
                name = e.name
                base = parse_segment_name(name)
                if base is not None:
                    parquet[base] = (name, e.inode())
                elif (part := parse_active_part(name)) is not None:
                    if part[1] == INDEX_SUFFIX:
                        active[part[0]] = (name, e.inode())
                    else:
                        parts.setdefault(part[0], []).append(name)
                elif name.startswith(".segment-") and name.endswith(TMP_SUFFIX):
                    stale.append(name)
        rolled = set(parquet)
        for base, entry in active.items():  # a roll's Parquet segment replaces its active segment
            if base in rolled:
                stale.append(entry[0])
            else:
                parquet[base] = entry
        for base, names in parts.items():  # keys and values files without a live index
            if base in rolled or base not in active:
                stale += sorted(names)
        found = sorted((base, name, inode) for base, (name, inode) in parquet.items())
        listing = _Listing(
            _topic_id(self.root / tp.topic),
            mtime,
            time.time_ns(),
            [f[0] for f in found],
            [f[1] for f in found],
            [f[2] for f in found],
            stale,
        )
        with self._lock:
            self._listings[tp] = listing
            if cached and cached.topic_id != listing.topic_id:
                prefix = str(directory) + os.sep
                for key in [k for k in self._infos if k[0].startswith(prefix)]:
                    del self._infos[key]
                for key in [k for k in self._batches if k[0].startswith(prefix)]:
                    self._cached_bytes -= self._batches.pop(key).nbytes
                for key in [k for k in self._actives if k[0].startswith(prefix)]:
                    del self._actives[key]
            elif cached and cached.names != listing.names:
                gone = {str(directory / n) for n in set(cached.names) - set(listing.names)}
                for key in [k for k in self._infos if k[0] in gone]:
                    del self._infos[key]
                for key in [k for k in self._actives if k[0] in gone]:
                    del self._actives[key]
        return listing

    def _info(self, tp: TopicPartition, lst: _Listing, i: int, decode: bool = False) -> SegmentInfo:
        path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}" / lst.names[i]
        if lst.names[i].endswith(ACTIVE_SUFFIX):
            a = self._active(path, lst.inodes[i], lst.bases[i], decode)
            return SegmentInfo(
                path, a.base, a.end, a.size, a.min_timestamp, a.max_timestamp, (a.base,), a.inode
            )
        key = (str(path), lst.inodes[i])
        with self._lock:
            info = self._infos.get(key)
        if info is None:
            info = read_info(path, lst.bases[i])
            with self._lock:
                self._infos[key] = info
        return info

    def _active(self, path: Path, inode: int, base: int, decode: bool) -> ActiveSegment:
        """An active segment, counted (and with `decode`, decoded) up to what its index holds now
        (FileNotFoundError once rolled)."""
        key = (str(path), inode)
        with self._lock:
            a = self._actives.get(key)
            if a is None:
                a = self._actives[key] = ActiveSegment(path, base, inode)
        st = os.stat(path)
        if st.st_ino != inode:
            raise FileNotFoundError(path)  # another file by that name now: the listing is stale
        if a.stale(st, decode):
            fds = a.open()
            try:
                a.refresh(fds, decode)
            finally:
                for fd in fds:
                    os.close(fd)
        return a

    def _segments(self, tp: TopicPartition, fresh: bool = False) -> tuple[_Listing, list[SegmentInfo]]:
        for _ in range(3):
            lst = self._listing(tp, fresh=fresh)
            try:
                return lst, [self._info(tp, lst, i) for i in range(len(lst.bases))]
            except FileNotFoundError:
                fresh = True
        raise OffsetOutOfRange(tp, 0, 0, 0)  # the partition kept changing under us; caller retries

    def _row_group(self, info: SegmentInfo, index: int) -> pa.RecordBatch:
        key = (str(info.path), info.inode, index)
        with self._lock:
            batch = self._batches.get(key)
            if batch is not None:
                self._batches.move_to_end(key)
                return batch
        batch = read_row_group(info, index)
        with self._lock:
            if key not in self._batches:
                self._batches[key] = batch
                self._cached_bytes += batch.nbytes
                while self._cached_bytes > self._cache_bytes and len(self._batches) > 1:
                    _, old = self._batches.popitem(last=False)
                    self._cached_bytes -= old.nbytes
        return batch


def _check_retention(max_age: float | None, max_segments: int | None, max_bytes: int | None) -> None:
    """Refuse retention settings that are nonsensical, so a typo never deletes segments."""
    if max_age is None and max_segments is None and max_bytes is None:
        raise GroupshiftError("give at least one of max_age, max_segments, max_bytes")
    if max_age is not None and not (0 <= max_age <= MAX_RETAIN_AGE_S):  # also refuses NaN
        raise GroupshiftError(f"max_age must be between 0 and {MAX_RETAIN_AGE_S:.0f} s, not {max_age}")
    for name, value, low, top in (
        ("max_segments", max_segments, 1, MAX_RETAIN_SEGMENTS),
        ("max_bytes", max_bytes, 0, MAX_RETAIN_BYTES),
    ):
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not low <= value <= top
        ):
            raise GroupshiftError(f"{name} must be between {low} and {top}, not {value!r}")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EMPTY = empty_batch(SCHEMA)


def _present(col: pa.ChunkedArray) -> np.ndarray:
    """The non-null values of an int64 or timestamp column, as numpy int64."""
    values = int64_values(col)
    return values[~null_mask(col)] if col.null_count else values


def _topic_id(topic_dir: Path) -> str:
    """The id written when the topic was created ("" for a directory made by other tools)."""
    try:
        return (topic_dir / TOPIC_ID_NAME).read_text()
    except FileNotFoundError:
        return ""


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


# -- records in -------------------------------------------------------------------------------


def to_table(records: Any) -> pa.Table:
    """Normalise produce input to a table `key binary, value binary, timestamp timestamp[us, UTC]`."""
    if isinstance(records, pa.RecordBatch):
        records = pa.Table.from_batches([records])
    if isinstance(records, pa.Table):
        n = records.num_rows
        names = records.column_names
        if "value" not in names:
            raise GroupshiftError(f"records need a 'value' column; got columns {names}")
        value = _binary(records.column("value"))
        key = _binary(records.column("key")) if "key" in names else pa.nulls(n, pa.binary())
        if "timestamp" in names:
            ts = _timestamps(records.column("timestamp"))
        else:
            ts = timestamp_array(np.full(n, time.time_ns() // 1000, dtype=np.int64))
        return pa.table({"key": key, "value": value, "timestamp": ts})
    if isinstance(records, bytes | bytearray | str):
        raise GroupshiftError("records must be an iterable of records, not a single bytes/str value")
    keys: list[Any] = []
    values: list[Any] = []
    stamps: list[Any] = []
    now_us = time.time_ns() // 1000
    for r in _iter(records):
        if isinstance(r, bytes | bytearray | memoryview | str):
            k, v, t = None, r, None
        elif isinstance(r, dict):
            k, v, t = r.get("key"), r["value"], r.get("timestamp")
        elif isinstance(r, tuple | list) and len(r) in (2, 3):
            k, v, t = r[0], r[1], (r[2] if len(r) == 3 else None)
        else:
            raise GroupshiftError(
                f"cannot produce {r!r}: expected a value, (key, value[, timestamp]) or a dict"
            )
        keys.append(k.encode() if isinstance(k, str) else k)
        values.append(v.encode() if isinstance(v, str) else v)
        stamps.append(now_us if t is None else _to_micros(t))
    return pa.table(
        {"key": binary_array(keys), "value": binary_array(values), "timestamp": timestamp_array(stamps)}
    )


def _iter(records: Iterable[Any]) -> Iterable[Any]:
    try:
        return iter(records)
    except TypeError:
        raise GroupshiftError(
            f"records must be iterable or an Arrow table, not {type(records).__name__}"
        ) from None


def _binary(col: pa.ChunkedArray) -> pa.ChunkedArray:
    if pa.types.is_binary(col.type):
        return col
    if (
        pa.types.is_string(col.type)
        or pa.types.is_large_string(col.type)
        or pa.types.is_large_binary(col.type)
    ):
        return col.cast(pa.binary())
    if pa.types.is_null(col.type):
        return col.cast(pa.binary())
    raise GroupshiftError(f"key and value must be binary or string columns, not {col.type}")


def _timestamps(col: pa.ChunkedArray) -> pa.ChunkedArray:
    """A timestamp or epoch-ms column as timestamp[us, UTC]; a null (no time given) is now."""
    if pa.types.is_timestamp(col.type):
        us = col.cast(pa.timestamp("us", tz=col.type.tz or "UTC")).cast(_TS_TYPE)
    elif pa.types.is_integer(col.type):  # Kafka's epoch milliseconds
        us = timestamps_from_millis(col.cast(pa.int64()))
    else:
        raise GroupshiftError(f"timestamp must be a timestamp or integer (epoch ms) column, not {col.type}")
    if not us.null_count:
        return us
    values = int64_values(us).copy()
    values[null_mask(us)] = time.time_ns() // 1000
    return pa.chunked_array([timestamp_array(values)], _TS_TYPE)


def _to_micros(ts: int | float | datetime) -> int:
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            raise GroupshiftError(f"timestamp {ts} has no time zone; use an aware datetime (e.g. UTC)")
        return (ts - _EPOCH) // timedelta(microseconds=1)
    return int(ts) * 1000  # Kafka's epoch milliseconds
