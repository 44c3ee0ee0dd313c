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

import logging
import os
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from pipeline.backends import rebalancer_of
from pipeline.consumer import Consumer
from pipeline.limits import MAX_RECORDS_PER_BATCH
from pipeline.spark.output import publish, recover, staging_dir
from pipeline.spark.segments import read_ranges

log = logging.getLogger(__name__)


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


def _is_spark_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith(("py4j", "pyspark"))
