"""Reading a topic's records by offset range with Spark: the Parquet segments chosen by name.

A partition's closed segments are Parquet files named by their base offset
(`partition=<p>/segment-<base:020d>.parquet`); records past the active segment's base are not in
any Parquet file yet and are read through the log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from core.types import TopicPartition
from topics.segment import parse_segment_name


def read_ranges(spark: Any, topic_dir: Path, ranges: dict[int, tuple[int, int]]) -> Any:
    """The records of `ranges` ({partition: (start, end)}) of the topic in `topic_dir` as a
    DataFrame: only the Parquet segments that may hold them, filtered on `partition` and `offset`
    so that Spark prunes partitions and skips row groups by their offset statistics. Records in a
    partition's active segment (not Parquet yet; at most one segment's worth) are read here on the
    driver through the log and joined to them."""
    from functools import reduce

    from pyspark.sql import functions as F

    files, tails = [], []
    for p, (s, e) in sorted(ranges.items()):
        parquet, active = _segments(topic_dir / f"partition={p}")
        files += [str(f) for f in _overlapping(parquet, s, min(e, active) if active is not None else e)]
        if active is not None and e > active:
            tails.append(_active_records(topic_dir, p, max(s, active), e))
    cond = reduce(
        lambda a, b: a | b,
        [
            (F.col("partition") == p) & (F.col("offset") >= s) & (F.col("offset") < e)
            for p, (s, e) in sorted(ranges.items())
        ],
    )
    frames = [spark.read.option("basePath", str(topic_dir)).parquet(*files)] if files else []
    if tails:
        import pyarrow as pa

        frames.append(spark.createDataFrame(pa.concat_tables(tails)))
    return reduce(lambda a, b: a.unionByName(b), frames).where(cond)


def segment_files(topic_dir: Path, partition: int, start: int, end: int) -> list[Path]:
    """The Parquet segments of a partition that may hold offsets in `[start, end)`, chosen by file
    name (records past the active segment's base are in it, not in any Parquet file)."""
    parquet, active = _segments(topic_dir / f"partition={partition}")
    return _overlapping(parquet, start, min(end, active) if active is not None else end)


def _segments(pdir: Path) -> tuple[list[tuple[int, Path]], int | None]:
    """A partition's Parquet segments by base, and the base of its active segment (None: none),
    found by its index file (its keys and values files follow it). An active segment beside a
    Parquet segment of the same base was rolled already (a crash left it)."""
    from topics.active import parse_active_name

    parquet, actives = [], []
    for f in pdir.iterdir():
        if f.name.startswith("."):
            continue
        if (b := parse_segment_name(f.name)) is not None:
            parquet.append((b, f))
        elif (b := parse_active_name(f.name)) is not None:
            actives.append(b)
    parquet.sort()
    bases = {b for b, _ in parquet}
    live = [b for b in actives if b not in bases]
    return parquet, (max(live) if live else None)


def _overlapping(bases: list[tuple[int, Path]], start: int, end: int) -> list[Path]:
    if start >= end:
        return []
    chosen = []
    for i, (base, f) in enumerate(bases):
        nxt = bases[i + 1][0] if i + 1 < len(bases) else None
        if base < end and (nxt is None or nxt > start):
            chosen.append(f)
    return chosen


def _active_records(topic_dir: Path, partition: int, start: int, end: int) -> Any:
    """Records `[start, end)` of a partition read through the log (from its active segment, or from
    the Parquet segment it was rolled into meanwhile), as an Arrow table with a `partition` column."""
    import pyarrow as pa

    from topics.log import Log
    from topics.segment import SCHEMA

    log = Log(topic_dir.parent)
    tp = TopicPartition(topic_dir.name, partition)
    batches = []
    while start < end:
        batch, start = log.read(tp, start, end - start)
        if batch.num_rows == 0:
            break
        batches.append(batch)
    table = pa.Table.from_batches(batches, schema=SCHEMA)
    return table.append_column("partition", pa.array([partition] * table.num_rows, pa.int32()))


# -- the streaming source's executors ----------------------------------------------------------

#: The `groupshift` source's columns, as Spark's Kafka source names them.
STREAM_SCHEMA = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp"
MAX_SLICE_RECORDS = 1_000_000  # a range longer than this is read as several Spark partitions


def split_at_segments(topic_dir: Path, partition: int, start: int, end: int) -> list[tuple[int, int]]:
    """`[start, end)` cut at the partition's segment bases (and every `MAX_SLICE_RECORDS`), so that
    executors read the pieces in parallel, each from one segment."""
    parquet, active = _segments(topic_dir / f"partition={partition}")
    cuts = sorted({b for b, _ in parquet} | ({active} if active is not None else set()))
    bounds = [start, *[c for c in cuts if start < c < end], end]
    pieces = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        while b - a > MAX_SLICE_RECORDS:
            pieces.append((a, a + MAX_SLICE_RECORDS))
            a += MAX_SLICE_RECORDS
        if b > a:
            pieces.append((a, b))
    return pieces


def read_slice(root: str, topic: str, partition: int, start: int, end: int) -> Any:
    """Records `[start, end)` of a partition as Arrow batches in the stream's columns, read through
    the log (Parquet segments by row group, the active segment's tail) on an executor."""
    import pyarrow as pa

    from topics.log import Log

    log = Log(Path(root))
    tp = TopicPartition(topic, partition)
    schema = _arrow_stream_schema()
    while start < end:
        batch, nxt = log.read(tp, start, end - start)
        if batch.num_rows == 0:
            break
        n = batch.num_rows
        yield pa.RecordBatch.from_arrays(
            [
                batch.column(1),
                batch.column(2),
                pa.array([topic] * n, pa.string()),
                pa.array([partition] * n, pa.int32()),
                batch.column(0),
                batch.column(3),
            ],
            schema=schema,
        )
        start = nxt


def _arrow_stream_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("key", pa.binary()),
            pa.field("value", pa.binary()),
            pa.field("topic", pa.string()),
            pa.field("partition", pa.int32()),
            pa.field("offset", pa.int64()),
            pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        ]
    )
