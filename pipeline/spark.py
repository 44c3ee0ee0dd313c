"""Spark consumers: a PySpark micro-batch loop that is a member of a consumer group under any scheme.

The driver process holds the group membership — a `pipeline.Consumer` that never fetches (its
partitions stay paused): it only runs the group protocol of the scheme it was given
(`rebalancer="zk" | "server" | "coordinator"`) — and Spark is a stateless engine over explicit
offset ranges. One batch:

1. **the group**: the consumer's `poll(0)` runs pending rebalances and the listener callbacks,
   between batches (scheme one's member changes hands on its own thread; a batch whose
   partitions moved meanwhile is refused at commit and abandoned);
2. **plan**: the generation G, the owned partitions, their committed offsets (or
   `auto_offset_reset`) and log ends give half-open ranges `[start, end)`, together at most
   `max_records_per_batch` records;
3. **read**: the segment files overlapping each range, picked by name, through Spark's built-in
   Parquet reader with `partition` and `offset` filters (partition pruning, row-group skipping);
4. **transform and write**: the user's function (DataFrame → DataFrame), each range to a staging
   directory of its own, `<out>/<topic>/partition=<p>/_staging-offsets=<start>-<end>-<id>`;
5. **commit** `{tp: end}` fenced by G, then **publish**: each staging directory is renamed to
   `offsets=<start:020d>-<end:020d>`. `CommitFailed` (the group moved on) or a failed write: the
   staging output is removed and the records go to the partitions' owner, which writes them again.

Only a member whose commit passed the fence publishes, so a zombie never publishes over its
successor. A consumer that dies between its commit and its publish leaves a committed staging
output: whoever plans the partition next publishes it (`recover`) and removes every other staging
output of it (never committed). So once the consumers are gone the output holds every record
exactly once, whatever joins, leaves, crashes and rebalances happened (scheme one runs with its
`fence_commits` fix; keep a batch well under the session timeout with `max_records_per_batch`).

    spark = spark_session()
    job = SparkConsumer(spark, "billing", ["clicks"], out="/data/out", rebalancer="coordinator",
                        zk="127.0.0.1:2181", log_root="/data/groupshift", transform=my_fn)
    job.run(until=lambda: stop.is_set())
    job.close()
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from pipeline.backends import rebalancer_of
from pipeline.consumer import Consumer
from pipeline.limits import MAX_RECORDS_PER_BATCH
from topics.segment import parse_segment_name

log = logging.getLogger(__name__)

OUTPUT_RE = re.compile(r"offsets=(\d{20})-(\d{20})")
STAGING_RE = re.compile(r"_staging-offsets=(\d{20})-(\d{20})-[0-9a-f]{12}")


def spark_session(
    app: str = "groupshift", master: str = "local[2]", jvm_log: str | os.PathLike | None = None, **conf: str
):
    """A SparkSession with the settings that keep a small driver fast (one per process; reused).

    `jvm_log`: a file that receives what the JVM writes to stderr (its start-up notices), so that
    a command's own stderr stays one line per message."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": " ".join(
            ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=64m")
        ),
        "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
        **conf,
    }
    builder = SparkSession.builder.appName(app).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_log is None:
        spark = builder.getOrCreate()
    else:
        Path(jvm_log).parent.mkdir(parents=True, exist_ok=True)
        saved = os.dup(2)
        with open(jvm_log, "ab") as f:
            os.dup2(f.fileno(), 2)  # the JVM started now inherits this as its stderr
            try:
                spark = builder.getOrCreate()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def load_transform(spec: str | None) -> Callable[[Any], Any] | None:
    """`module:function` → the function (DataFrame → DataFrame); None → no transformation."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not module or not name:
        raise GroupshiftError(f"--transform must be MODULE:FUNCTION, not {spec!r}")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise GroupshiftError(f"cannot load transform {spec!r}: {exc}") from None
    if not callable(fn):
        raise GroupshiftError(f"transform {spec!r} is not a function")
    return fn


def with_value_length(df: Any) -> Any:
    """An example transformation (`--transform pipeline.spark:with_value_length`): adds the length
    of each record's value."""
    from pyspark.sql import functions as F

    return df.withColumn("value_length", F.length("value"))


@dataclass
class Batch:
    """One planned batch: the generation it was planned under and its ranges."""

    generation: int
    ranges: dict[TopicPartition, tuple[int, int]]
    records: int = 0
    seconds: float = 0.0
    committed: bool = False
    outputs: list[Path] = field(default_factory=list)


@dataclass
class Progress:
    batches: int = 0
    records: int = 0
    abandoned: int = 0
    started: float = field(default_factory=time.monotonic)
    assignment: frozenset[TopicPartition] = frozenset()
    lag: int = 0

    @property
    def rate(self) -> float:
        return self.records / max(time.monotonic() - self.started, 1e-9)


class SparkConsumer:
    """A group member that consumes with Spark (see the module docstring)."""

    def __init__(
        self,
        spark: Any,
        group_id: str,
        topics: Sequence[str],
        *,
        out: str | os.PathLike,
        transform: Callable[[Any], Any] | None = None,
        max_records_per_batch: int = 100_000,
        rebalancer: str | Rebalancer = "zk",
        incremental: bool = False,
        zk: Any = None,
        log: Any = None,
        log_root: str | os.PathLike | None = None,
        bootstrap: str | None = None,
        auto_offset_reset: str = "earliest",
        consumer_options: dict | None = None,
    ):
        if (
            isinstance(max_records_per_batch, bool)
            or not 0 < int(max_records_per_batch) <= MAX_RECORDS_PER_BATCH
        ):
            raise GroupshiftError(
                f"max_records_per_batch must be between 1 and {MAX_RECORDS_PER_BATCH}, "
                f"not {max_records_per_batch!r}"
            )
        self.spark = spark
        self.out = Path(out)
        self.transform = transform
        self.max_records = int(max_records_per_batch)
        self.auto_offset_reset = auto_offset_reset
        options = dict(consumer_options or {})
        if rebalancer_of(rebalancer) is Rebalancer.ZK:
            # Scheme one's opt-in fix: a member that lost a partition cannot commit it any more, so
            # an abandoned batch is never published over its successor's.
            membership = dict(options.pop("membership_options", {}) or {})
            membership.setdefault("fence_commits", True)
            options["membership_options"] = membership
        self.consumer = Consumer(
            group_id,
            topics,
            rebalancer=rebalancer,
            incremental=incremental,
            zk=zk,
            log=log,
            log_root=log_root,
            bootstrap=bootstrap,
            enable_auto_commit=False,
            auto_offset_reset=auto_offset_reset,
            listener=_Pauser(self),
            **options,
        )
        self.log = self.consumer.log
        self.progress = Progress()
        self.history: list[Batch] = []  # every batch run, in order (bounded by the caller's run)

    # -- the loop --------------------------------------------------------------------------------

    def run(self, until: Callable[[], bool], idle_sleep: float = 0.05, on_batch=None) -> Progress:
        """Run batches until `until()` is true; `on_batch(batch, progress)` after each."""
        while not until():
            batch = self.run_batch()
            if batch is None:
                time.sleep(idle_sleep)
                continue
            if on_batch is not None:
                on_batch(batch, self.progress)
        return self.progress

    def run_batch(self) -> Batch | None:
        """One batch: the group, plan, read, transform, write, commit, publish. None when there was
        nothing to read."""
        self.consumer.poll(0)  # rebalances and their callbacks happen here, between batches
        batch = self.plan()
        if batch is None:
            return None
        t0 = time.monotonic()
        try:
            self._write(batch)
            self.consumer.commit_planned({tp: end for tp, (_, end) in batch.ranges.items()}, batch.generation)
        except Exception as exc:  # CommitFailed (the group moved on), or Spark failed to write
            if not isinstance(exc, GroupshiftError) and not _is_spark_error(exc):
                raise
            log.info("group %s: batch abandoned: %s", self.consumer.group_id, exc)
            for path in batch.outputs:
                shutil.rmtree(path, ignore_errors=True)
            batch.outputs = []
            self.progress.abandoned += 1
        else:
            batch.committed = True
            batch.outputs = [publish(path) for path in batch.outputs]
            self.progress.records += batch.records
            self.progress.batches += 1
        batch.seconds = time.monotonic() - t0
        self.history.append(batch)
        return batch

    def plan(self) -> Batch | None:
        generation = self.consumer.generation
        owned = sorted(self.consumer.assignment())
        self.progress.assignment = frozenset(owned)
        if not owned:
            self.progress.lag = 0
            return None
        committed = self.consumer.committed(owned)
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        budget, lag = self.max_records, 0
        for tp in owned:
            end = self.log.latest(tp)
            start = committed.get(tp)
            if start is None:
                start = self.log.earliest(tp) if self.auto_offset_reset == "earliest" else end
            else:
                recover(self.out / tp.topic / f"partition={tp.partition}", start)
            lag += max(end - start, 0)
            take = min(end - start, budget)
            if take > 0:
                ranges[tp] = (start, start + take)
                budget -= take
        self.progress.lag = lag
        if not ranges:
            return None
        return Batch(generation, ranges, records=sum(e - s for s, e in ranges.values()))

    def _write(self, batch: Batch) -> None:
        """Write each range to a staging directory of its own (published once committed)."""
        from pyspark.sql import functions as F

        by_topic: dict[str, dict[int, tuple[int, int]]] = {}
        for tp, r in batch.ranges.items():
            by_topic.setdefault(tp.topic, {})[tp.partition] = r
        for topic, ranges in sorted(by_topic.items()):
            df = read_ranges(self.spark, self.log.root / topic, ranges)
            if self.transform is not None:
                df = self.transform(df)
            for p, (s, e) in sorted(ranges.items()):
                staging = staging_dir(self.out, topic, p, s, e)
                batch.outputs.append(staging)
                part = df.where(F.col("partition") == p) if "partition" in df.columns else df
                part.drop("partition").write.parquet(str(staging))

    def close(self) -> None:
        self.consumer.close(autocommit=False)


class _Pauser:
    """The consumer's listener: newly assigned partitions are paused (Spark reads them)."""

    def __init__(self, job: SparkConsumer):
        self.job = job

    def on_partitions_assigned(self, partitions):
        self.job.consumer.pause(*partitions)

    def on_partitions_revoked(self, partitions):
        pass

    def on_partitions_lost(self, partitions):
        pass


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


def _is_spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("py4j", "pyspark"))


def output_dir(out: Path, topic: str, partition: int, start: int, end: int) -> Path:
    return out / topic / f"partition={partition}" / f"offsets={start:020d}-{end:020d}"


def staging_dir(out: Path, topic: str, partition: int, start: int, end: int) -> Path:
    """Where a batch writes before its commit ("_" names are skipped by Spark and `outputs`)."""
    name = f"_staging-offsets={start:020d}-{end:020d}-{uuid.uuid4().hex[:12]}"
    return out / topic / f"partition={partition}" / name


def publish(staging: Path) -> Path:
    """Give a committed batch's staging directory its final name (a consumer recovering it may have
    done so first: then it is only removed)."""
    m = STAGING_RE.fullmatch(staging.name)
    final = staging.parent / f"offsets={m.group(1)}-{m.group(2)}"
    try:
        staging.rename(final)
    except OSError:  # published already, or removed as abandoned
        shutil.rmtree(staging, ignore_errors=True)
    return final


def recover(partition_dir: Path, committed: int) -> None:
    """Before planning from the committed offset: publish the staging output of a batch that was
    committed but not published (its consumer died in between), and remove every other staging
    output (batches never committed: a crash, a fenced commit, a failed write)."""
    if not partition_dir.is_dir():
        return
    for d in sorted(partition_dir.iterdir()):
        m = STAGING_RE.fullmatch(d.name)
        if m is None:
            continue
        final = partition_dir / f"offsets={m.group(1)}-{m.group(2)}"
        if int(m.group(2)) <= committed and not final.exists():
            publish(d)
        else:
            shutil.rmtree(d, ignore_errors=True)


def outputs(out: Path, topic: str) -> Iterable[tuple[int, int, int, Path]]:
    """(partition, start, end, dir) of every output of `topic` under `out`."""
    root = Path(out) / topic
    if not root.is_dir():
        return []
    found = []
    for pdir in sorted(root.iterdir()):
        if not pdir.name.startswith("partition="):
            continue
        p = int(pdir.name.split("=", 1)[1])
        for d in sorted(pdir.iterdir()):
            m = OUTPUT_RE.fullmatch(d.name)
            if m:
                found.append((p, int(m.group(1)), int(m.group(2)), d))
    return found
