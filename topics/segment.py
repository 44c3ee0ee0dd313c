"""One segment file: the Parquet schema, atomic publish, and what its footer says.

A segment is `segment-<base:020d>.parquet` holding consecutive offsets `base..end-1` in columns
`offset int64, key binary, value binary, timestamp timestamp[us, UTC]`. It is written under a
hidden temporary name (`.segment-<base>.parquet.tmp`, skipped by Spark and by our listing) and
renamed into place, so a reader sees a whole segment or none. Everything the log needs to know
without reading data — base, end, record count, time range, row-group boundaries — comes from
the footer, and a footer that contradicts the file name is a `CorruptSegment`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from topics.arrow import empty_batch
from topics.errors import CorruptSegment

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
SEGMENT_RE = re.compile(r"segment-(\d{20})\.parquet")
TMP_SUFFIX = ".tmp"
# Statistics only where the footer answers questions (offsets, time); values would bloat it.
_STATS_COLUMNS = ["offset", "timestamp"]


def segment_name(base: int) -> str:
    return f"segment-{base:020d}.parquet"


def parse_segment_name(name: str) -> int | None:
    """The base offset of a published segment's file name, or None for any other file."""
    m = SEGMENT_RE.fullmatch(name)
    return int(m.group(1)) if m else None


@dataclass(frozen=True)
class SegmentInfo:
    """A published segment as its footer describes it. Offsets `[base, end)`; times in µs since epoch."""

    path: Path
    base: int
    end: int
    size: int
    min_timestamp: int
    max_timestamp: int
    row_group_bases: tuple[int, ...]
    inode: int = 0

    @property
    def count(self) -> int:
        return self.end - self.base


def write_segment(
    directory: Path, base: int, table: pa.Table, *, row_group_records: int, fsync: bool
) -> Path:
    """Write `table` (SCHEMA, offsets from `base`) as a segment and publish it atomically."""
    final = directory / segment_name(base)
    tmp = directory / f".{final.name}{TMP_SUFFIX}"
    pq.write_table(
        table,
        tmp,
        row_group_size=row_group_records,
        compression="snappy",
        use_dictionary=False,
        write_statistics=_STATS_COLUMNS,
    )
    if fsync:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    os.rename(tmp, final)  # atomic within a directory: readers see the whole file or nothing
    if fsync:
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    return final


def read_info(path: Path, base: int) -> SegmentInfo:
    """Describe a segment from its footer alone; raises `CorruptSegment` naming the file."""
    try:
        st = path.stat()
        size = st.st_size
        md = pq.read_metadata(path)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptSegment(path, f"unreadable footer ({exc})") from None
    try:
        if md.schema.to_arrow_schema().remove_metadata() != SCHEMA.remove_metadata():
            raise CorruptSegment(path, f"schema is {md.schema.to_arrow_schema()}, expected {SCHEMA}")
        rg_bases, lo, hi, tmin, tmax = [], None, None, None, None
        for i in range(md.num_row_groups):
            rg = md.row_group(i)
            if rg.num_rows == 0:
                continue
            o, t = rg.column(0).statistics, rg.column(3).statistics
            if o is None or not o.has_min_max or t is None or not t.has_min_max:
                raise CorruptSegment(path, f"row group {i} has no offset/timestamp statistics")
            if o.max_raw - o.min_raw + 1 != rg.num_rows or (hi is not None and o.min_raw != hi + 1):
                raise CorruptSegment(
                    path, f"row group {i} offsets {o.min_raw}..{o.max_raw} are not consecutive"
                )
            rg_bases.append(o.min_raw)
            lo = o.min_raw if lo is None else lo
            hi = o.max_raw
            tmin = t.min_raw if tmin is None else min(tmin, t.min_raw)
            tmax = t.max_raw if tmax is None else max(tmax, t.max_raw)
    except CorruptSegment:
        raise
    except Exception as exc:  # a damaged footer can fail in many ways; none may pass silently
        raise CorruptSegment(path, f"bad footer ({exc.__class__.__name__}: {exc})") from None
    if lo is None:
        raise CorruptSegment(path, "segment holds no records")
    if lo != base:
        raise CorruptSegment(path, f"first offset {lo} does not match the base offset {base} in its name")
    return SegmentInfo(path, base, hi + 1, size, tmin, tmax, tuple(rg_bases), st.st_ino)


def read_row_group(info: SegmentInfo, index: int) -> pa.RecordBatch:
    """Decode one row group of a segment as a single record batch; raises `CorruptSegment`."""
    try:
        table = pq.ParquetFile(info.path, memory_map=True).read_row_group(index)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as exc:
        raise CorruptSegment(info.path, f"row group {index} unreadable ({exc})") from None
    batch = table.combine_chunks().to_batches()
    batch = batch[0] if len(batch) == 1 else empty_batch(SCHEMA)
    first = info.row_group_bases[index]
    last = info.row_group_bases[index + 1] if index + 1 < len(info.row_group_bases) else info.end
    if batch.num_rows != last - first or (batch.num_rows and batch.column(0)[0].as_py() != first):
        raise CorruptSegment(info.path, f"row group {index} does not hold offsets {first}..{last - 1}")
    return batch.cast(SCHEMA) if batch.schema != SCHEMA else batch
