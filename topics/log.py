"""The partitioned, offset-addressed log: produce, offsets, read and retention over Parquet segments.

Layout: `<root>/<topic>/partition=<p>/segment-<base:020d>.parquet` (see `topics.segment`). One
writer per partition at a time holds `partition=<p>/.lock` (`flock`), so producers in different
processes append consecutive, non-overlapping offsets. Readers take no lock: segments are
immutable and published by rename.

    log = Log("/data/groupshift")
    log.create("clicks", partitions=3)
    log.produce("clicks", [(b"user-1", b"{...}"), (b"user-2", b"{...}")])   # keyed: murmur2
    log.produce("clicks", pa.table({"value": values}), partition=0)          # columnar, no per-record work
    batch, next_offset = log.read(TopicPartition("clicks", 0), 0, 500)
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
from topics.limits import MAX_RETAIN_AGE_S, MAX_RETAIN_BYTES, MAX_RETAIN_SEGMENTS
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
    tmp: list[str]  # hidden temporary files (a writer is busy, or died holding the lock)


class Log:
    """The topics under one root directory. See the module docstring for an example."""

    def __init__(
        self,
        root: str | os.PathLike[str] | None = None,
        *,
        segment_records: int = 100_000,
        row_group_records: int = 25_000,
        cache_bytes: int = 256 << 20,
        fsync: bool = False,
        partitioner: DefaultPartitioner | None = None,
    ):
        self.root = Path(root) if root is not None else default_root()
        self.segment_records = segment_records
        self.row_group_records = row_group_records
        self.fsync = fsync
        self.partitioner = partitioner or DefaultPartitioner()
        self._lock = threading.RLock()
        self._listings: dict[TopicPartition, _Listing] = {}
        self._infos: dict[tuple[str, int], SegmentInfo] = {}
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
        num_partitions = self.partitions(topic)
        if partition is not None:
            if not 0 <= partition < num_partitions:
                raise UnknownPartition(TopicPartition(topic, partition), num_partitions)
            return [self._append(TopicPartition(topic, partition), table)]
        parts = self.partitioner.partition_batch(table.column("key"), num_partitions, n)
        order = np.argsort(parts, kind="stable")
        sorted_parts = parts[order]
        table = table.take(int64_array(order))
        results = []
        for p in np.unique(sorted_parts):
            lo, hi = np.searchsorted(sorted_parts, [p, p + 1])
            results.append(self._append(TopicPartition(topic, int(p)), table.slice(lo, hi - lo)))
        return results

    def _append(self, tp: TopicPartition, table: pa.Table) -> ProduceResult:
        directory = self.partition_dir(tp)
        with _PartitionLock(directory):
            lst = self._listing(tp, fresh=True)
            for name in lst.tmp:  # we hold the lock, so their writer died
                os.unlink(directory / name)
            base = end = self._info(tp, lst, len(lst.bases) - 1).end if lst.bases else 0
            for start in range(0, table.num_rows, self.segment_records):
                chunk = table.slice(start, self.segment_records)
                offsets = int64_array(np.arange(end, end + chunk.num_rows, dtype=np.int64))
                seg = pa.Table.from_arrays(
                    [offsets, chunk.column("key"), chunk.column("value"), chunk.column("timestamp")],
                    schema=SCHEMA,
                )
                path = write_segment(
                    directory, end, seg, row_group_records=self.row_group_records, fsync=self.fsync
                )
                self._remember(path, end, seg)
                end += chunk.num_rows
        return ProduceResult(tp.partition, base, table.num_rows)

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
            if info.max_timestamp < target:
                continue  # the footer rules the segment out without reading it
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
        """Up to `max_records` records from `start` (fewer at a segment or row-group boundary).

        Returns an empty batch at the log end; raises `OffsetOutOfRange` below the earliest or
        beyond the latest offset, and `CorruptSegment` naming a file that cannot be read.
        """
        fresh = False
        for _ in range(3):
            # Only two footers matter: the newest (log end) and the one holding `start`.
            lst = self._listing(tp, fresh=fresh)
            try:
                earliest = lst.bases[0] if lst.bases else 0
                latest = self._info(tp, lst, len(lst.bases) - 1).end if lst.bases else 0
                if not earliest <= start <= latest:
                    raise OffsetOutOfRange(tp, start, earliest, latest)
                if start == latest or max_records <= 0:
                    return ReadResult(_EMPTY, start)
                info = self._info(tp, lst, bisect.bisect_right(lst.bases, start) - 1)
                rg = bisect.bisect_right(info.row_group_bases, start) - 1
                batch = self._row_group(info, rg)
            except FileNotFoundError:
                fresh = True  # retention deleted a segment after we listed it
                continue
            skip = start - info.row_group_bases[rg]
            n = min(max_records, batch.num_rows - skip)
            return ReadResult(batch.slice(skip, n), start + n)
        raise OffsetOutOfRange(tp, start, self.earliest(tp), self.latest(tp))

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
            with _PartitionLock(directory):
                infos = self._segments(tp, fresh=True)[1]
                total = sum(i.size for i in infos)
                remaining = len(infos)
                for info in infos[:-1]:
                    old = max_age is not None and info.max_timestamp < now_us - max_age * 1_000_000
                    many = max_segments is not None and remaining > max_segments
                    big = max_bytes is not None and total > max_bytes
                    if not (old or many or big):
                        break
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
        found, tmp = [], []
        with os.scandir(directory) as it:
            for e in it:
                base = parse_segment_name(e.name)
                if base is not None:
                    found.append((base, e.name, e.inode()))
                elif e.name.startswith(".segment-") and e.name.endswith(TMP_SUFFIX):
                    tmp.append(e.name)
        found.sort()
        listing = _Listing(
            _topic_id(self.root / tp.topic),
            mtime,
            time.time_ns(),
            [f[0] for f in found],
            [f[1] for f in found],
            [f[2] for f in found],
            tmp,
        )
        with self._lock:
            self._listings[tp] = listing
            if cached and cached.topic_id != listing.topic_id:
                prefix = str(directory) + os.sep
                for key in [k for k in self._infos if k[0].startswith(prefix)]:
                    del self._infos[key]
                for key in [k for k in self._batches if k[0].startswith(prefix)]:
                    self._cached_bytes -= self._batches.pop(key).nbytes
            elif cached and cached.names != listing.names:
                gone = {str(directory / n) for n in set(cached.names) - set(listing.names)}
                for key in [k for k in self._infos if k[0] in gone]:
                    del self._infos[key]
        return listing

    def _info(self, tp: TopicPartition, lst: _Listing, i: int) -> SegmentInfo:
        path = self.root / tp.topic / f"{PARTITION_PREFIX}{tp.partition}" / lst.names[i]
        key = (str(path), lst.inodes[i])
        with self._lock:
            info = self._infos.get(key)
        if info is None:
            info = read_info(path, lst.bases[i])
            with self._lock:
                self._infos[key] = info
        return info

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
    """`flock` on `partition=<p>/.lock`: one writer per partition across threads and processes."""

    def __init__(self, directory: Path):
        self.path = directory / LOCK_NAME

    def __enter__(self) -> _PartitionLock:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


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
    if pa.types.is_timestamp(col.type):
        return col.cast(pa.timestamp("us", tz=col.type.tz or "UTC")).cast(_TS_TYPE)
    if pa.types.is_integer(col.type):  # Kafka's epoch milliseconds
        return timestamps_from_millis(col.cast(pa.int64()))
    raise GroupshiftError(f"timestamp must be a timestamp or integer (epoch ms) column, not {col.type}")


def _to_micros(ts: int | float | datetime) -> int:
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            raise GroupshiftError(f"timestamp {ts} has no time zone; use an aware datetime (e.g. UTC)")
        return (ts - _EPOCH) // timedelta(microseconds=1)
    return int(ts) * 1000  # Kafka's epoch milliseconds
