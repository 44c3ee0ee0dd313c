"""One `groupshift` stream started into the exactly-once writer, and what it did so far.

    job = StreamJob.start(spark, "billing", ["clicks"], out="/data/out", checkpoint="/data/ck/1",
                          zk="zk1:2181", rebalancer="coordinator")
    job.progress()      # committed records and batches, from the writer; the member's state, from Spark
    job.stop()          # stops the query; its reader leaves the group

What `groupshift consume`, the main job and the benchmarks run. The member's assignment, lag and
generation come from Spark's own `StreamingQueryProgress` (the source reports them as its latest
offset); the committed records from the writer, in this process.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.scheme import Rebalancer
from core.types import TopicPartition
from pipeline.spark.commit_service import Outcome, Settled
from pipeline.spark.offsets import StreamOffset
from pipeline.spark.sink import write_exactly_once


@dataclass
class Progress:
    batches: int = 0  # committed and published
    records: int = 0
    abandoned: int = 0  # fenced, or replays of a gone reader
    started: float = field(default_factory=time.monotonic)
    first_commit: float | None = None  # monotonic
    assignment: frozenset[TopicPartition] = frozenset()
    generation: int = -1
    lag: int | None = None
    settled: bool = False  # the member holds an assignment and no rebalance is under way
    last_batch: float | None = None

    @property
    def rate(self) -> float:
        return self.records / max(time.monotonic() - self.started, 1e-9)


class StreamJob:
    def __init__(self, query: Any, progress: Progress):
        self.query = query
        self._progress = progress
        self._lock = threading.Lock()

    @classmethod
    def start(
        cls,
        spark: Any,
        group: str,
        topics: Sequence[str],
        *,
        out: str | Path,
        checkpoint: str | Path,
        zk: str,
        rebalancer: str | Rebalancer = Rebalancer.ZK,
        incremental: bool = False,
        bootstrap: str | None = None,
        log_root: str | Path | None = None,
        max_offsets_per_trigger: int | None = None,
        transform: Callable[[Any], Any] | None = None,
        trigger: dict | None = None,
        name: str | None = None,
        options: dict | None = None,
    ) -> StreamJob:
        reader = (
            spark.readStream.format("groupshift")
            .option("zk", zk)
            .option("group", group)
            .option("subscribe", ",".join(topics))
            .option("rebalancer", Rebalancer(rebalancer).value)
        )
        extra = dict(options or {})
        if incremental:
            extra["incremental"] = "true"
        if bootstrap:
            extra["bootstrap"] = bootstrap
        if log_root is not None:
            extra["logRoot"] = str(log_root)
        if max_offsets_per_trigger:
            extra["maxOffsetsPerTrigger"] = str(max_offsets_per_trigger)
        for key, value in extra.items():
            reader = reader.option(key, str(value))
        job = cls(None, Progress())
        job.query = write_exactly_once(
            reader.load(),
            out,
            checkpoint,
            transform=transform,
            trigger=trigger,
            query_name=name,
            on_batch=job._on_batch,
        )
        return job

    def _on_batch(self, batch_id: int, offset: StreamOffset, settled: Settled) -> None:
        with self._lock:
            p = self._progress
            if settled.outcome is Outcome.COMMITTED:
                p.batches += 1
                p.records += sum(e - s for tp, (s, e) in offset.ranges.items() if settled.committed(tp))
                now = time.monotonic()
                p.last_batch = now
                if p.first_commit is None:
                    p.first_commit = now
            else:
                p.abandoned += 1

    def progress(self) -> Progress:
        """The counts so far, with the member's state from the query's last progress report."""
        state = member_state(self.query.lastProgress)
        with self._lock:
            p = self._progress
            if state is not None:
                p.assignment = state["assignment"]
                p.generation = state["generation"]
                p.lag = state["lag"]
                p.settled = state["settled"]
            return p

    def stop(self) -> None:
        self.query.stop()

    @property
    def error(self) -> BaseException | None:
        return self.query.exception() if not self.query.isActive else None


def member_state(progress: Any) -> dict | None:
    """The source's report (`GroupStreamReader.reportLatestOffset`) in a `StreamingQueryProgress`."""
    if not progress:
        return None
    sources = progress["sources"] if isinstance(progress, dict) else progress.sources
    for source in sources:
        latest = source["latestOffset"] if isinstance(source, dict) else source.latestOffset
        try:
            data = json.loads(latest) if isinstance(latest, str) else latest
        except (TypeError, ValueError):
            continue
        if isinstance(data, dict) and "member_state" in data:
            s = data["member_state"]
            return {
                "assignment": frozenset(TopicPartition(t, int(p)) for t, p in s.get("assignment", [])),
                "generation": int(s.get("generation", -1)),
                "lag": s.get("lag"),
                "settled": bool(s.get("settled")),
            }
    return None
