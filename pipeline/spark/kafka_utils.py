"""Legacy DStream code on groupshift: `KafkaUtils.createStream`, Spark Streaming's Kafka 0.8 receiver
API, as a member of a consumer group under any scheme.

Code written against the 0.8 receiver changes only its import; one keyword moves it to the
coordinator:

    from pipeline.spark.kafka_utils import KafkaUtils    # was: from pyspark.streaming.kafka import KafkaUtils
    stream = KafkaUtils.createStream(ssc, "zk1:2181", "billing", {"clicks": 1})   # DStream of (key, value)
    stream.map(lambda kv: kv[1]).foreachRDD(save)
    # KafkaUtils.createStream(..., rebalancer="coordinator")   (or "server"): schemes three and two

PySpark has no receiver API for Python code, so there is no receiver: the driver holds the group
membership (a `pipeline.Consumer` whose partitions stay paused, as `pipeline.spark.loop` does) and
the stream's RDD of each batch interval is planned there and read by Spark from the topic's
segments. One batch, at the batch time T:

1. **wait** until the previous batch's commit (or its refusal) is known: a batch is never planned
   from offsets that a batch in flight is about to move;
2. **the group**: pending rebalances run (`poll`, on this thread for schemes two and three);
3. **plan** from the generation G, the owned partitions, the group's committed offsets and the log
   ends: half-open ranges `[start, end)`, at most `max_records_per_batch` records in all. A
   partition without a committed offset, or whose offset is outside the log, starts at
   `auto.offset.reset` (`largest`, 0.8's default: the log end; `smallest`: the log start), and that
   start is committed with the batch;
4. **read**: the ranges through `pipeline.spark.segments.read_ranges`, each topic in `numThreads`
   RDD partitions, a Kafka partition's records in one of them in offset order; keys and values
   decoded by `keyDecoder` / `valueDecoder` (bytes or None in, like 0.8's);
5. **the user's output operations** run on that RDD (persisted at `storageLevel`, so several
   outputs read it once);
6. **commit** `{partition: end}` fenced by G once Spark reports batch T complete with every output
   operation successful (a `StreamingListener`). A failed output commits nothing: the next batch
   reads the same records again. A refused commit (`CommitFailed`: the group moved on) commits
   nothing of the partitions that moved (scheme one's fence is per partition: it may still commit
   those the member kept): their new owner reads them again.

The guarantee is at-least-once, like the 0.8 receiver's: a record's offset is committed only after
the output of the batch that held it completed. Whatever happens between an output and its commit
(the driver dies, `ssc.stop()` cuts the batch short, the group rebalances, ZooKeeper or the
coordinator is away) delivers that batch's records again — to this stream's next batch or to the
partitions' next owner — so the output may see them twice, never zero times. Outputs of windowed
or stateful operations see a record in a later batch than the one that committed it; a crash in
between loses it from them, as it did with the receiver without a write-ahead log.

Stopping: `ssc.stop()` (also through `StreamingContext.getActive()`) stops the stream and then
closes the consumer, which leaves the group; `stopGraceFully=True` first lets the batch in flight
complete and commit. A process that ends without `ssc.stop()` leaves the group at exit.

`ssc.checkpoint(dir)` works (stateful operations need it), but a stream cannot be recovered from
a checkpoint (`StreamingContext.getOrCreate`): its group member lives in the driver process that
created it. Start a new context instead; it resumes from the group's committed offsets.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from core.errors import CommitFailed, GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from pipeline.backends import rebalancer_of
from pipeline.limits import MAX_RECORDS_PER_BATCH

log = logging.getLogger(__name__)

#: kafkaParams keys this stream applies (others are accepted and ignored, with a warning, as 0.8's
#: ConsumerConfig ignored properties it did not know).
APPLIED_PARAMS = (
    "zookeeper.connect",
    "group.id",
    "auto.offset.reset",
    "zookeeper.session.timeout.ms",
    "rebalance.backoff.ms",
    "rebalance.max.retries",
    "partition.assignment.strategy",
)
#: Set by pyspark's own createStream, or 0.8 settings with no meaning here: accepted silently.
SILENT_PARAMS = ("zookeeper.connection.timeout.ms", "auto.commit.enable", "auto.commit.interval.ms")
#: Consumer options the stream sets itself (`consumer_options` may not).
OWN_OPTIONS = (
    "group_id",
    "topics",
    "rebalancer",
    "zk",
    "log",
    "log_root",
    "bootstrap",
    "listener",
    "enable_auto_commit",
    "auto_offset_reset",
    "session_timeout_ms",
    "assignors",
)
#: How long `ssc.stop(stopGraceFully=True)` waits for the batch in flight to commit.
GRACEFUL_STOP_SECONDS = 60.0
#: A planned batch that Spark has not reported as submitted after this long (its jobs were not
#: generated: another stream's or an output's driver-side code failed) is given up: read again.
UNSUBMITTED_SECONDS = 30.0


def utf8_decoder(s: bytes | None) -> str | None:
    """Decode bytes as UTF-8 (None stays None): the default key and value decoder, as in 0.8."""
    if s is None:
        return None
    return s.decode("utf-8")


class KafkaUtils:
    """`createStream`, the 0.8 receiver's entry point (see the module docstring)."""

    @staticmethod
    def createStream(  # noqa: N802 - the legacy API's name
        ssc: Any,
        zkQuorum: str,  # noqa: N803
        groupId: str,  # noqa: N803
        topics: Mapping[str, int],
        kafkaParams: Mapping[str, Any] | None = None,  # noqa: N803
        storageLevel: Any = None,  # noqa: N803
        keyDecoder: Callable[[bytes | None], Any] = utf8_decoder,  # noqa: N803
        valueDecoder: Callable[[bytes | None], Any] = utf8_decoder,  # noqa: N803
        *,
        rebalancer: str | Rebalancer = "zk",
        log_root: str | Path | None = None,
        log: Any = None,
        bootstrap: str | None = None,
        max_records_per_batch: int = 100_000,
        consumer_options: Mapping[str, Any] | None = None,
    ) -> Any:
        """A DStream of `(key, value)`: the records of `topics` that group `groupId` assigns to this
        driver, one RDD per batch interval, their offsets committed to the group once the batch's
        output operations completed (at-least-once: a failure between an output and its commit
        delivers that batch's records again).

        `zkQuorum`: the ZooKeeper connect string (`host:port,...[/chroot]`); scheme one keeps the
        group there in 0.8's layout (`/consumers/<group>/...`), schemes two and three find the
        coordinator there (or at `bootstrap`).
        `topics`: `{topic: numThreads}`. In 0.8 numThreads was the receiver's consumer threads for
        the topic; here it is the number of RDD partitions a batch spreads the topic's records
        over (each Kafka partition's records in one of them, in offset order), and under scheme one
        also the streams the member registers for the topic, which weigh the range assignment as
        in 0.8.
        `kafkaParams`: `group.id` and `zookeeper.connect` must agree with `groupId` and `zkQuorum`;
        `auto.offset.reset` (`largest`, the default, or `smallest`), `zookeeper.session.timeout.ms`
        (the group session), `rebalance.backoff.ms` and `rebalance.max.retries` (scheme one),
        `partition.assignment.strategy` (`range`, `roundrobin`) apply; other keys are ignored.
        `storageLevel`: how each batch's RDD is kept for its output operations (default
        `StorageLevel.MEMORY_AND_DISK`).
        `rebalancer`: `"zk"` (scheme one, Kafka 0.8's ZooKeeper consumer), `"server"` or
        `"coordinator"`. `log_root`/`log`: the topics' log (default: the groupshift data root).
        `max_records_per_batch`: the most records one batch reads. `consumer_options`: further
        `pipeline.Consumer` options (e.g. `heartbeat_interval_ms`, `membership_options`).
        Bad input raises `GroupshiftError`.
        """
        settings = _settings(
            zkQuorum,
            groupId,
            topics,
            kafkaParams,
            keyDecoder,
            valueDecoder,
            rebalancer,
            max_records_per_batch,
            consumer_options,
        )
        from pyspark.streaming import StreamingContext

        if not isinstance(ssc, StreamingContext):
            raise GroupshiftError(f"ssc must be a pyspark StreamingContext, not {type(ssc).__name__}")
        level = _storage_level(storageLevel)
        if log is None:
            from topics.log import Log

            log = Log(log_root)  # None: the groupshift data root
        stream = GroupStream(ssc, settings, log=log, bootstrap=bootstrap)
        return stream.dstream(level)


@dataclass(frozen=True)
class Settings:
    """createStream's arguments, checked."""

    zk: str
    group: str
    threads: dict[str, int]
    reset: str  # "smallest" | "largest"
    rebalancer: Rebalancer
    max_records: int
    key_decoder: Callable[[bytes | None], Any]
    value_decoder: Callable[[bytes | None], Any]
    consumer_options: dict[str, Any] = field(default_factory=dict)


def _settings(
    zk_quorum: Any,
    group_id: Any,
    topics: Any,
    kafka_params: Any,
    key_decoder: Any,
    value_decoder: Any,
    rebalancer: Any,
    max_records: Any,
    consumer_options: Any,
) -> Settings:
    """Check createStream's arguments; a GroupshiftError of one line for the first bad one."""
    from zk_rebalance.assignors import ASSIGNORS
    from zk_rebalance.layout import validate_group_id, validate_topic

    kind = rebalancer_of(rebalancer)
    if not isinstance(zk_quorum, str) or not zk_quorum.strip() or any(c.isspace() for c in zk_quorum):
        raise GroupshiftError(
            f"zkQuorum must be a ZooKeeper connect string 'host:port,...', not {zk_quorum!r}"
        )
    validate_group_id(group_id)
    if not isinstance(topics, Mapping) or not topics:
        raise GroupshiftError(f"topics must be a non-empty dict {{topic: numThreads}}, not {topics!r}")
    threads: dict[str, int] = {}
    for topic, n in topics.items():
        validate_topic(topic)
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise GroupshiftError(f"numThreads of topic {topic} must be an integer of at least 1, not {n!r}")
        threads[topic] = n
    if kafka_params is None:
        kafka_params = {}
    if not isinstance(kafka_params, Mapping):
        raise GroupshiftError(f"kafkaParams must be a dict of Kafka 0.8 settings, not {kafka_params!r}")
    params = {str(k): v for k, v in kafka_params.items()}
    for key, given in (("zookeeper.connect", zk_quorum), ("group.id", group_id)):
        if key in params and str(params[key]) != given:
            raise GroupshiftError(
                f"kafkaParams {key}={params[key]!r} disagrees with the argument {given!r}: pass one value"
            )
    reset = str(params.get("auto.offset.reset", "largest"))
    if reset not in ("smallest", "largest"):
        raise GroupshiftError(
            f"auto.offset.reset must be 'smallest' or 'largest' (Kafka 0.8's spellings), not {reset!r}"
        )
    options = dict(consumer_options or {}) if isinstance(consumer_options, Mapping | None) else None
    if options is None:
        raise GroupshiftError(
            f"consumer_options must be a dict of pipeline.Consumer options, not {consumer_options!r}"
        )
    own = sorted(set(options) & set(OWN_OPTIONS))
    if own:
        raise GroupshiftError(
            f"consumer_options may not set {', '.join(own)}: createStream sets it from its arguments"
        )
    membership = dict(options.pop("membership_options", None) or {})
    if "zookeeper.session.timeout.ms" in params:
        options["session_timeout_ms"] = _positive(params, "zookeeper.session.timeout.ms")
    if "partition.assignment.strategy" in params:
        strategy = str(params["partition.assignment.strategy"])
        if strategy not in ASSIGNORS:
            raise GroupshiftError(
                f"partition.assignment.strategy must be one of {', '.join(ASSIGNORS)}, not {strategy!r}"
            )
        options["assignors"] = [strategy]
    if kind is Rebalancer.ZK:
        # Scheme one's opt-in fix: a member that lost a partition cannot commit it any more.
        membership.setdefault("fence_commits", True)
        if any(n > 1 for n in threads.values()):
            membership.setdefault("topic_streams", dict(threads))
        for key, option in (
            ("rebalance.backoff.ms", "rebalance_backoff_ms"),
            ("rebalance.max.retries", "rebalance_max_retries"),
        ):
            if key in params:
                membership[option] = _positive(params, key)
    options["membership_options"] = membership
    ignored = sorted(set(params) - set(APPLIED_PARAMS) - set(SILENT_PARAMS))
    if ignored:
        log.warning(
            "group %s: kafkaParams %s have no effect here and are ignored", group_id, ", ".join(ignored)
        )
    for name, fn in (("keyDecoder", key_decoder), ("valueDecoder", value_decoder)):
        if not callable(fn):
            raise GroupshiftError(f"{name} must be a function of bytes (or None), not {fn!r}")
    if (
        isinstance(max_records, bool)
        or not isinstance(max_records, int)
        or not 0 < max_records <= MAX_RECORDS_PER_BATCH
    ):
        raise GroupshiftError(
            f"max_records_per_batch must be between 1 and {MAX_RECORDS_PER_BATCH}, not {max_records!r}"
        )
    return Settings(
        zk=zk_quorum,
        group=group_id,
        threads=threads,
        reset=reset,
        rebalancer=kind,
        max_records=max_records,
        key_decoder=key_decoder,
        value_decoder=value_decoder,
        consumer_options=options,
    )


def _positive(params: Mapping[str, Any], key: str) -> int:
    value = params[key]
    try:
        n = int(str(value))
    except ValueError:
        n = 0
    if isinstance(value, bool) or n < 1:
        raise GroupshiftError(f"kafkaParams {key} must be a positive integer, not {value!r}")
    return n


def _storage_level(level: Any) -> Any:
    from pyspark.storagelevel import StorageLevel

    if level is None:
        return StorageLevel.MEMORY_AND_DISK
    if not isinstance(level, StorageLevel):
        raise GroupshiftError(f"storageLevel must be a pyspark StorageLevel, not {level!r}")
    return level


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
