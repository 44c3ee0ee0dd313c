"""Legacy DStream code on groupshift: `KafkaUtils.createStream`, Spark Streaming's Kafka 0.8 receiver
API, as a member of a consumer group under any scheme.

Code written against the 0.8 receiver changes only its import; one keyword moves it to the
coordinator:

    from pipeline.spark.kafka_utils import KafkaUtils    # was: from pyspark.streaming.kafka import KafkaUtils
    stream = KafkaUtils.createStream(ssc, "zk1:2181", "billing", {"clicks": 1})   # DStream of (key, value)
    stream.map(lambda kv: kv[1]).foreachRDD(save)
    # KafkaUtils.createStream(..., rebalancer="coordinator")   (or "server"): schemes three and two

PySpark has no receiver API for Python code, so there is no receiver: the driver holds the group
membership (a `pipeline.Consumer` whose partitions stay paused) and
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

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from core.errors import GroupshiftError
from core.scheme import Rebalancer
from pipeline.spark.dstream import GroupStream
from pipeline.spark.kafka_params import settings_from, storage_level, utf8_decoder

__all__ = ["KafkaUtils", "utf8_decoder"]

log = logging.getLogger(__name__)


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
        settings = settings_from(
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
        level = storage_level(storageLevel)
        if log is None:
            from topics.log import Log

            log = Log(log_root)  # None: the groupshift data root
        stream = GroupStream(ssc, settings, log=log, bootstrap=bootstrap)
        return stream.dstream(level)
