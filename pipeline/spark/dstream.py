"""The DStream behind `KafkaUtils.createStream`: the driver-side group member that plans each batch
interval's RDD, and the listener that commits a batch once its output operations completed (see
`pipeline.spark.kafka_utils` for the whole story)."""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from core.errors import CommitFailed, GroupshiftError
from core.types import TopicPartition
from pipeline.spark.kafka_params import GRACEFUL_STOP_SECONDS, UNSUBMITTED_SECONDS, Settings, utf8_decoder

log = logging.getLogger(__name__)


@dataclass
class Batch:
    """One planned batch: its batch time, the generation it was planned under, its ranges."""

    time_ms: int
    generation: int
    ranges: dict[TopicPartition, tuple[int, int]]  # empty ranges too: a reset start to commit
    planned_at: float = field(default_factory=time.monotonic)
    submitted: bool = False

    @property
    def records(self) -> int:
        return sum(e - s for s, e in self.ranges.values())


@dataclass
class Progress:
    """What a stream has done (for inspection: `group_streams(ssc)`)."""

    batches: int = 0  # committed batches
    records: int = 0  # records of committed batches
    failed: int = 0  # batches whose output failed (not committed: read again)
    abandoned: int = 0  # batches whose commit was refused or unknown (read again)


_STREAMS: dict[str, GroupStream] = {}  # key -> every stream this process created
_STREAMS_LOCK = threading.Lock()


class GroupStream:
    """The driver-side group member behind one `createStream` DStream (see the module docstring)."""

    def __init__(self, ssc: Any, settings: Settings, *, log: Any, bootstrap: str | None):
        from pyspark.sql import SparkSession

        self.ssc = ssc
        self.settings = settings
        self.log = log
        self.bootstrap = bootstrap
        self.key = f"{settings.group}-{uuid.uuid4().hex[:12]}"
        self.spark = SparkSession.builder.getOrCreate()  # the StreamingContext's SparkContext's
        self.consumer: Any = None  # joined at the first batch, as 0.8's receiver at ssc.start()
        self.progress = Progress()
        self.interval = 1.0
        self._cond = threading.Condition()
        self._pending: Batch | None = None  # planned, its commit (or refusal) not known yet
        self._planned: dict[int, Batch] = {}  # the last batches, by batch time
        self._stopping = False
        self._closed = False

    # -- the DStream -------------------------------------------------------------------------------

    def dstream(self, level: Any) -> Any:
        """The stream: a tick at every batch time (Spark's ConstantInputDStream, which checkpointing
        accepts), transformed on the driver into the batch's RDD, persisted at `level`; a no-op
        output makes Spark compute it at every batch time, so batches are planned one per interval
        in order; the listener commits; `ssc.stop()` closes the consumer."""
        from pyspark.streaming.dstream import DStream, TransformedDStream

        ssc, sc = self.ssc, self.ssc.sparkContext
        jvm = sc._jvm
        tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Object().getClass())
        tick = jvm.org.apache.spark.streaming.dstream.ConstantInputDStream(
            ssc._jssc.ssc(), sc.emptyRDD()._jrdd.rdd(), tag
        )
        ticks = DStream(jvm.org.apache.spark.streaming.api.java.JavaDStream(tick, tag), ssc, sc.serializer)
        self.interval = ticks._slideDuration
        # Persisted, so that derived streams never fold this function into theirs (each would plan).
        stream = TransformedDStream(ticks, _Compute(self.key)).persist(level)
        stream.foreachRDD(_touch)
        ssc.addStreamingListener(_Listener(self.key))
        _hook_stop(ssc, self)
        with _STREAMS_LOCK:
            _STREAMS[self.key] = self
        return stream

    def compute(self, t: datetime) -> Any:
        """The RDD of the batch at time `t` (the JobGenerator's thread, through py4j)."""
        time_ms = round(t.timestamp() * 1000)
        with self._cond:
            batch = self._planned.get(time_ms)  # computed again (Spark forgot it): the same ranges
            if batch is None:
                self._await_pending()
                if self._stopping:
                    return self._empty()
                if self.consumer is None:
                    self.consumer = self._join()
                self._group_turn()
                batch = self._plan(time_ms)
                if batch.ranges:
                    self._pending = batch
                self._planned[time_ms] = batch
                for old in sorted(self._planned)[:-8]:
                    del self._planned[old]
        try:
            return self._read(batch)
        except BaseException:
            with self._cond:
                if self._pending is batch:
                    self._pending = None  # no jobs for this batch: nothing will complete it
                    self._cond.notify_all()
            raise

    def _await_pending(self) -> None:
        """Wait until the previous batch's commit or refusal is known (the wait releases the lock)."""
        while self._pending is not None and not self._stopping:
            batch = self._pending
            if not batch.submitted and time.monotonic() - batch.planned_at > UNSUBMITTED_SECONDS:
                log.warning(
                    "group %s: the batch at %d was never submitted (its jobs were not generated); "
                    "its records are read again",
                    self.settings.group,
                    batch.time_ms,
                )
                self._pending = None
                self.progress.abandoned += 1
                break
            self._cond.wait(0.2)

    def _join(self) -> Any:
        from pipeline.consumer import Consumer

        s = self.settings
        pauser = _Pauser()
        consumer = Consumer(
            s.group,
            list(s.threads),
            rebalancer=s.rebalancer,
            zk=s.zk,
            log=self.log,
            bootstrap=self.bootstrap,
            enable_auto_commit=False,
            auto_offset_reset="earliest" if s.reset == "smallest" else "latest",
            listener=pauser,
            **s.consumer_options,
        )
        pauser.consumer = consumer  # scheme one may have assigned partitions already: pause them
        consumer.pause(*consumer.assignment())
        return consumer

    def _group_turn(self) -> None:
        """Pending rebalances and their callbacks (schemes two and three run them in `poll`); a
        rebalance under way gets up to half a batch interval to complete."""
        self.consumer.poll(0)
        deadline = time.monotonic() + min(self.interval / 2, 2.0)
        while self.consumer.rebalance_in_progress and time.monotonic() < deadline:
            self.consumer.poll(50)

    def _plan(self, time_ms: int) -> Batch:
        generation = self.consumer.generation
        owned = sorted(self.consumer.assignment())
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        if owned:
            committed = self.consumer.committed(owned)
            budget = self.settings.max_records
            for tp in owned:
                earliest, end = self.log.earliest(tp), self.log.latest(tp)
                start, reset = committed.get(tp), False
                if start is None or not earliest <= start <= end:  # 0.8: no offset, or out of range
                    start, reset = (earliest if self.settings.reset == "smallest" else end), True
                take = min(end - start, budget)
                if take > 0 or reset:
                    ranges[tp] = (start, start + take)
                    budget -= take
        return Batch(time_ms, generation, ranges)

    def _read(self, batch: Batch) -> Any:
        """The batch's records as an RDD of decoded (key, value)."""
        by_topic: dict[str, dict[int, tuple[int, int]]] = {}
        for tp, (s, e) in sorted(batch.ranges.items()):
            if e > s:
                by_topic.setdefault(tp.topic, {})[tp.partition] = (s, e)
        if not by_topic:
            return self._empty()
        from pipeline.spark.segments import read_ranges

        decode = _decoder(self.settings.key_decoder, self.settings.value_decoder)
        rdds = []
        for topic, ranges in by_topic.items():
            df = read_ranges(self.spark, Path(self.log.root) / topic, ranges)
            df = df.repartition(self.settings.threads[topic], "partition").sortWithinPartitions(
                "partition", "offset"
            )
            rdds.append(df.select("key", "value").rdd.map(decode))
        return rdds[0] if len(rdds) == 1 else self.ssc.sparkContext.union(rdds)

    def _empty(self) -> Any:
        return self.ssc.sparkContext.emptyRDD()

    # -- the listener ------------------------------------------------------------------------------

    def on_batch_submitted(self, time_ms: int) -> None:
        with self._cond:
            if self._pending is not None and self._pending.time_ms <= time_ms:
                self._pending.submitted = True

    def on_batch_completed(self, time_ms: int, failures: list[str]) -> None:
        """Batch `time_ms` is done: commit its ranges if every output operation succeeded."""
        with self._cond:
            batch = self._pending
            if batch is None or time_ms < batch.time_ms:
                return
            try:
                if time_ms != batch.time_ms or self._closed:
                    self.progress.abandoned += 1
                elif failures:
                    log.warning(
                        "group %s: an output of the batch at %d failed; nothing committed, its "
                        "records are read again: %s",
                        self.settings.group,
                        time_ms,
                        _reason(failures[0]),
                    )
                    self.progress.failed += 1
                else:
                    self._commit(batch)
            finally:
                self._pending = None
                self._cond.notify_all()

    def _commit(self, batch: Batch) -> None:
        offsets = {tp: end for tp, (_, end) in batch.ranges.items()}
        try:
            self.consumer.commit_planned(offsets, batch.generation)
        except CommitFailed as exc:
            log.info("group %s: batch at %d not committed: %s", self.settings.group, batch.time_ms, exc)
            self.progress.abandoned += 1
        except Exception as exc:  # ZooKeeper or the coordinator away: the outcome is unknown, the
            # records may come again (a listener callback must not raise into Spark's listener bus)
            log.warning(
                "group %s: commit of the batch at %d failed: %s", self.settings.group, batch.time_ms, exc
            )
            self.progress.abandoned += 1
        else:
            self.progress.batches += 1
            self.progress.records += batch.records

    # -- stopping ----------------------------------------------------------------------------------

    def stopping(self, graceful: bool) -> None:
        """`ssc.stop()` was called: plan nothing more; graceful: let the batch in flight commit."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            deadline = time.monotonic() + GRACEFUL_STOP_SECONDS
            while graceful and self._pending is not None and time.monotonic() < deadline:
                self._cond.wait(0.2)

    def close(self) -> None:
        """Leave the group (idempotent)."""
        with self._cond:
            if self._closed:
                return
            self._closed = self._stopping = True
            self._cond.notify_all()
            consumer, self.consumer = self.consumer, None
            if consumer is not None:
                consumer.close(autocommit=False)

    @property
    def closed(self) -> bool:
        return self._closed


def group_streams(ssc: Any) -> list[GroupStream]:
    """The `createStream` streams of a StreamingContext (their consumers and progress)."""
    return list(getattr(ssc, "_groupshift_streams", ()))


def _hook_stop(ssc: Any, stream: GroupStream) -> None:
    """`ssc.stop()` closes the streams' consumers once the context stopped."""
    streams = getattr(ssc, "_groupshift_streams", None)
    if streams is not None:
        streams.append(stream)
        return
    streams = ssc._groupshift_streams = [stream]
    original = ssc.stop

    def stop(stopSparkContext: bool = True, stopGraceFully: bool = False) -> None:  # noqa: N803
        for s in list(streams):
            s.stopping(stopGraceFully)
        try:
            original(stopSparkContext, stopGraceFully)
        finally:
            for s in list(streams):
                s.close()

    stop.__doc__ = original.__doc__
    ssc.stop = stop


@atexit.register
def close_all() -> None:
    """Leave the group with every stream of this process still open: runs at exit, for a process
    that ends without `ssc.stop()`."""
    with _STREAMS_LOCK:
        streams = [s for s in _STREAMS.values() if not s.closed]
    for s in streams:
        try:
            s.close()
        except Exception as exc:  # at exit: say it, close the others
            log.warning("group %s: leaving the group at exit failed: %s", s.settings.group, exc)


class _Compute:
    """The stream's transform function: picklable (a checkpoint holds the key only)."""

    def __init__(self, key: str):
        self.key = key

    def __call__(self, t: datetime, _rdd: Any) -> Any:
        stream = _STREAMS.get(self.key)
        if stream is None:
            raise GroupshiftError(
                "this KafkaUtils stream's group member is not in this process (the stream was "
                "recovered from a checkpoint): create the stream again in a new StreamingContext"
            )
        return stream.compute(t)


def _touch(rdd: Any) -> None:
    """The no-op output that makes Spark compute the stream at every batch time."""


class _Listener:
    """Commits a batch when Spark reports it complete (a py4j StreamingListener)."""

    def __init__(self, key: str):
        self.key = key

    def _stream(self) -> GroupStream | None:
        return _STREAMS.get(self.key)

    def onBatchSubmitted(self, submitted: Any) -> None:  # noqa: N802
        if (s := self._stream()) is not None:
            s.on_batch_submitted(submitted.batchInfo().batchTime().milliseconds())

    def onBatchCompleted(self, completed: Any) -> None:  # noqa: N802
        if (s := self._stream()) is None:
            return
        info = completed.batchInfo()
        outputs = info.outputOperationInfos()
        failures = [r for r in (outputs[k].failureReason() for k in outputs) if r is not None]
        s.on_batch_completed(info.batchTime().milliseconds(), failures)

    def __getattr__(self, name: str) -> Callable[[Any], None]:
        if name.startswith("on"):  # the listener's other events
            return lambda event: None
        raise AttributeError(name)

    class Java:
        implements = ["org.apache.spark.streaming.api.java.PythonStreamingListener"]


class _Pauser:
    """The consumer's listener: newly assigned partitions are paused (Spark reads them)."""

    consumer: Any = None  # set once the consumer is built

    def on_partitions_assigned(self, partitions):
        if self.consumer is not None:
            self.consumer.pause(*partitions)

    def on_partitions_revoked(self, partitions):
        pass

    def on_partitions_lost(self, partitions):
        pass


def _reason(failure: str) -> str:
    """The line of an output's failure that says what failed (a Python exception's last line comes
    before the JVM's stack)."""
    lines = [line for line in failure.splitlines() if line.strip()]
    cut = next((i for i, line in enumerate(lines) if line.lstrip().startswith("at ")), len(lines))
    top = [line for line in lines[:cut] if not line.startswith(" ")]
    return top[-1] if top else (lines[0] if lines else "")


def _decoder(key_decoder: Callable, value_decoder: Callable) -> Callable[[Any], tuple[Any, Any]]:
    """Row(key, value) → (key_decoder(bytes), value_decoder(bytes)), shipped to Spark's workers by
    value: the default UTF-8 decoding is inlined, so a worker needs nothing of groupshift."""
    kd = None if key_decoder is utf8_decoder else key_decoder
    vd = None if value_decoder is utf8_decoder else value_decoder

    def decode(row):
        k, v = row
        k = None if k is None else bytes(k)
        v = None if v is None else bytes(v)
        return (
            (k if k is None else k.decode("utf-8")) if kd is None else kd(k),
            (v if v is None else v.decode("utf-8")) if vd is None else vd(v),
        )

    return decode
