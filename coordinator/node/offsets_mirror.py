"""The node's mirror of its offset commits into the topic `__consumer_offsets`, for Kafka tooling.

Monitoring tools that watch Kafka-coordinated groups (Burrow's `kafka` consumer module, lag
exporters) read committed offsets from `__consumer_offsets`, not from the coordinator. A node with
a Kafka listener and a log root (`--kafka-listen ... --data DIR`) therefore appends every commit
it has stored in ZooKeeper to a topic of that name in the log, in Kafka's record format
(`coordinator/kafka_wire/offsets_topic.py`), where its Fetch serves it like any topic.

ZooKeeper stays the truth: the mirror is written after the commit is stored, off the event loop,
coalesced per (group, partition) and flushed every `FLUSH_S`; a failed append is logged and
retried with the next flush. The topic is not compacted: each partition keeps its newest
`MAX_SEGMENTS` segments (flushes append to the partition's active segment, which the log rolls by
size and age), so a reader that starts from the oldest record sees every group that committed
within that window.

    mirror = OffsetsMirror(log, zk, node_id)
    mirror.ensure_topic()                            # before the listener is announced
    mirror.offer(group_id, offset_records)           # after the ZooKeeper write succeeded
    mirror.forget(group_id, topic_partitions)        # tombstones (OffsetDelete)
    task = create_task(mirror.run())                 # until cancelled; mirror.flush() at the end
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

from coordinator.kafka_wire.offsets_topic import OFFSETS_TOPIC, offset_key, offset_value, partition_for
from core.types import TopicPartition
from core.zk import REFUSALS
from topics import registry
from topics.errors import TopicAlreadyExists

if TYPE_CHECKING:
    from topics.log import Log

log = logging.getLogger("groupshift.coordinator")

PARTITIONS = 50  # Kafka's offsets.topic.num.partitions default
FLUSH_S = 0.5
MAX_SEGMENTS = 500
#: Distinct (group, partition) keys waiting for a flush; beyond it new keys are dropped and counted.
MAX_PENDING = 1_000_000

Key = tuple[str, str, int]


class OffsetsMirror:
    def __init__(self, log_: Log, zk: Any, node_id: int, metrics: Any = None):
        self.log, self.zk, self.node_id, self.metrics = log_, zk, node_id, metrics
        self.ready = False
        self._pending: dict[Key, bytes | None] = {}
        self._partitions = PARTITIONS
        self._flushes = 0

    def offer(self, group_id: str, records: list) -> None:
        """Stored commits (`OffsetRecord`s) of one group, to append with the next flush."""
        for r in records:
            value = offset_value(r.offset, r.metadata, r.commit_timestamp)
            self._put((group_id, r.topic, r.partition), value)

    def forget(self, group_id: str, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self._put((group_id, tp.topic, tp.partition), None)

    def _put(self, key: Key, value: bytes | None) -> None:
        if key not in self._pending and len(self._pending) >= MAX_PENDING:
            if self.metrics is not None:
                self.metrics.inc("offsets_mirror_dropped")
            return
        self._pending[key] = value

    def ensure_topic(self) -> None:
        """Create `__consumer_offsets` (log and registration) where either is missing; idempotent,
        and safe against another node doing the same at once. Sets `ready`."""
        if not self.log.exists(OFFSETS_TOPIC):
            try:
                self.log.create(OFFSETS_TOPIC, PARTITIONS)
            except TopicAlreadyExists:  # another node was first
                pass
        self._partitions = self.log.partitions(OFFSETS_TOPIC)
        if self.zk.exists(registry.topic_path(OFFSETS_TOPIC)) is None:
            try:
                registry.create_topic(
                    self.zk,
                    OFFSETS_TOPIC,
                    self._partitions,
                    1,
                    brokers=[self.node_id],
                    topic_id=self.log.topic_id(OFFSETS_TOPIC),
                )
            except TopicAlreadyExists:
                pass
        self.ready = True

    def flush(self) -> int:
        """Append what is pending (blocking: run it in a thread); the number of records written."""
        pending, self._pending = self._pending, {}
        by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
        for (group, topic, partition), value in pending.items():
            p = partition_for(group, self._partitions)
            by_partition.setdefault(p, []).append((offset_key(group, topic, partition), value))
        try:
            for p, records in sorted(by_partition.items()):
                self.log.produce(OFFSETS_TOPIC, records, partition=p)
        except Exception:
            for key, item in pending.items():  # retried with the next flush, newer values kept
                self._pending.setdefault(key, item)
            raise
        self._flushes += 1
        if by_partition and self._flushes % 20 == 0:
            self.log.retain(OFFSETS_TOPIC, max_segments=MAX_SEGMENTS)
        return sum(map(len, by_partition.values()))

    async def run(self) -> None:
        """Flush every `FLUSH_S` until cancelled (the node flushes once more when it stops)."""
        while True:
            await asyncio.sleep(FLUSH_S)
            if self.ready and not self._pending:
                continue
            try:
                if not self.ready:
                    await asyncio.to_thread(self.ensure_topic)
                if self._pending:
                    await asyncio.to_thread(self.flush)
            except REFUSALS:
                raise  # not away: refused (the node stops, saying so)
            except Exception as exc:  # noqa: BLE001 - ZooKeeper or disk away: try again next time
                log.warning("offsets mirror: %s", exc, extra={"event": "offsets_mirror_failed"})
