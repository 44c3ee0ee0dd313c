"""The Kafka listener's data plane: Metadata, ListOffsets, Fetch and Produce over the Parquet log.

Topics are those registered in ZooKeeper (`/brokers/topics`), their data the node's log root
(`--data`). Every node leads every partition it lists (one broker per node, broker id = node
id; all nodes read the same log root), and Metadata lists every live node with a Kafka listener
so that admin clients reach each group coordinator. Log and ZooKeeper reads run in threads, off
the event loop that serves heartbeats and rebalances.

    plane = DataPlane(node)
    body = await plane.serve(api_key, api_version, request_struct)   # a `messages` response, or None
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import msgspec
from kazoo.exceptions import NoNodeError

from coordinator.kafka_wire import messages as M
from coordinator.kafka_wire.offsets_topic import OFFSETS_TOPIC
from coordinator.kafka_wire.records import InvalidRecords, decode_batches, encode_batch
from coordinator.layout import COORDINATORS, coordinator_path, decode_coordinator
from coordinator.wire import errors as E
from core.errors import GroupshiftError, UnknownTopic
from core.types import TopicPartition
from topics.errors import OffsetOutOfRange, UnknownPartition
from topics.log import Log
from topics.registry import describe, list_topics

# Rows read from the log per step while filling a Fetch answer.
_READ_ROWS = 2000
# How often a long-polling Fetch looks at the log again.
_POLL_S = 0.05


class DataPlane:
    def __init__(self, node: Any, topic_ids: Any):
        self.node = node
        self.topic_ids = topic_ids  # a `kafka_topic_ids.TopicIdResolver`
        self._log: Log | None = None

    @property
    def log(self) -> Log:
        if self._log is None:
            self._log = Log(self.node.config.data)
        return self._log

    async def serve(self, api: int, version: int, req: Any) -> Any:
        if api == M.METADATA:
            body, found = await asyncio.to_thread(self._metadata, req, version >= 10)
            self.topic_ids.learn(found)  # on the event loop, which reads the ids
            return body
        if api == M.LIST_OFFSETS:
            return await asyncio.to_thread(self._list_offsets, req)
        if api == M.FETCH:
            return await self._fetch(req)
        if api == M.PRODUCE:
            body = await asyncio.to_thread(self._produce, req)
            return None if req.acks == 0 else body
        raise ValueError(f"api {api} is not a data-plane api")

    # -- Metadata ------------------------------------------------------------------------------

    def _brokers(self) -> list[M.MetadataBroker]:
        zk = self.node.zk
        out = {}
        try:
            children = zk.get_children(COORDINATORS)
        except NoNodeError:
            children = []
        for child in children:
            if not child.isdigit():
                continue
            try:
                record = decode_coordinator(zk.get(coordinator_path(child))[0])
            except (NoNodeError, msgspec.DecodeError, msgspec.ValidationError):
                continue
            if record.kafka_host:
                out[int(child)] = M.MetadataBroker(
                    node_id=int(child), host=record.kafka_host, port=record.kafka_port
                )
        me = self.node.config.node_id
        host, port = self.node.kafka_endpoint
        out[me] = M.MetadataBroker(node_id=me, host=host, port=port)
        return [out[n] for n in sorted(out)]

    def _metadata(self, req: M.MetadataRequest, with_ids: bool) -> tuple[M.MetadataResponse, dict]:
        """The answer, and the topic ids read for it (v10+ names every topic's id)."""
        zk = self.node.zk
        me = self.node.config.node_id
        names = list_topics(zk) if req.topics is None else list(req.topics)
        found: dict[str, uuid.UUID] = {}
        unknown_ids: list[uuid.UUID] = []
        if req.topic_ids:  # asked by id: the names of the ids the node knows, else of every topic
            known = self.topic_ids.ids
            wanted = {i: known.name_of(i) for i in req.topic_ids}
            if any(n is None for n in wanted.values()):
                found = self.topic_ids.read(list_topics(zk))
                by_id = {u: n for n, u in found.items()}
                wanted = {i: n or by_id.get(i) for i, n in wanted.items()}
            names += [n for n in wanted.values() if n is not None and n not in names]
            unknown_ids = [i for i, n in wanted.items() if n is None]
        topics = []
        for name in names:
            try:
                desc = describe(zk, name)
                if with_ids and name not in found:
                    found.update(self.topic_ids.read([name]))
            except (UnknownTopic, GroupshiftError):
                topics.append(M.MetadataTopic(error_code=E.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                continue
            partitions = [
                M.MetadataPartition(
                    error_code=0, partition_index=p, leader_id=me, replica_nodes=[me], isr_nodes=[me]
                )
                for p in sorted(desc.partitions)
            ]
            internal = name == OFFSETS_TOPIC  # the node's mirror of its commits (offsets_mirror.py)
            topics.append(
                M.MetadataTopic(
                    error_code=0,
                    name=name,
                    topic_id=found.get(name),
                    is_internal=internal,
                    partitions=partitions,
                )
            )
        topics += [M.MetadataTopic(error_code=E.UNKNOWN_TOPIC_ID, name=None, topic_id=i) for i in unknown_ids]
        body = M.MetadataResponse(
            brokers=self._brokers(), cluster_id="groupshift", controller_id=me, topics=topics
        )
        return body, found

    # -- ListOffsets ---------------------------------------------------------------------------

    def _list_offsets(self, req: M.ListOffsetsRequest) -> M.ListOffsetsResponse:
        log = self.log
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.name, p.partition_index)
                try:
                    self._check(tp)
                    if p.timestamp == M.LATEST_TIMESTAMP:
                        answer = M.ListOffsetsPartitionResponse(p.partition_index, 0, -1, log.latest(tp))
                    elif p.timestamp == M.EARLIEST_TIMESTAMP:
                        answer = M.ListOffsetsPartitionResponse(p.partition_index, 0, -1, log.earliest(tp))
                    else:
                        hit = log.offset_for_time(tp, p.timestamp) if p.timestamp >= 0 else None
                        answer = M.ListOffsetsPartitionResponse(
                            p.partition_index,
                            0,
                            -1 if hit is None else hit.timestamp,
                            -1 if hit is None else hit.offset,
                        )
                except (UnknownTopic, UnknownPartition, FileNotFoundError):
                    answer = M.ListOffsetsPartitionResponse(p.partition_index, E.UNKNOWN_TOPIC_OR_PARTITION)
                parts.append(answer)
            topics.append(M.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return M.ListOffsetsResponse(topics=topics)

    def _check(self, tp: TopicPartition) -> None:
        """Raise `UnknownPartition`/`UnknownTopic` unless the log has `tp`."""
        count = self.log.partitions(tp.topic)
        if not 0 <= tp.partition < count:
            raise UnknownPartition(tp, count)

    # -- Fetch ---------------------------------------------------------------------------------

    async def _fetch(self, req: M.FetchRequest) -> M.FetchResponse:
        """Answer once `min_bytes` are there or `max_wait_ms` has passed (re-reading the log)."""
        deadline = time.monotonic() + max(0, req.max_wait_ms) / 1000
        while True:
            body, size, errors = await asyncio.to_thread(self._fetch_once, req)
            if size >= max(1, req.min_bytes) or errors or time.monotonic() >= deadline:
                return body
            await asyncio.sleep(min(_POLL_S, max(0.0, deadline - time.monotonic())))

    def _fetch_once(self, req: M.FetchRequest) -> tuple[M.FetchResponse, int, bool]:
        log = self.log
        budget = req.max_bytes if req.max_bytes > 0 else 0x7FFFFFFF
        total = 0
        errors = False
        topics = []
        for t in req.topics:
            parts = []
            for p in t.partitions:
                tp = TopicPartition(t.topic, p.partition)
                try:
                    self._check(tp)
                    earliest, latest = log.earliest(tp), log.latest(tp)
                    data = self._read(
                        tp, p.fetch_offset, min(p.partition_max_bytes, budget - total), total == 0
                    )
                    parts.append(M.FetchPartitionResponse(p.partition, 0, latest, latest, earliest, data))
                    total += len(data)
                except OffsetOutOfRange as exc:
                    errors = True
                    parts.append(
                        M.FetchPartitionResponse(
                            p.partition, E.OFFSET_OUT_OF_RANGE, exc.latest, exc.latest, exc.earliest
                        )
                    )
                except (UnknownTopic, UnknownPartition, FileNotFoundError):
                    errors = True
                    parts.append(M.FetchPartitionResponse(p.partition, E.UNKNOWN_TOPIC_OR_PARTITION))
            topics.append(M.FetchTopicResponse(topic=t.topic, partitions=parts))
        return M.FetchResponse(responses=topics), total, errors

    def _read(self, tp: TopicPartition, offset: int, max_bytes: int, first: bool) -> bytes:
        """Record batches from `offset`, about `max_bytes` at most (one record at least when `first`)."""
        out: list[bytes] = []
        size = 0
        while True:
            read = self.log.read(tp, offset, _READ_ROWS)
            if read.batch.num_rows == 0:
                break
            room = max_bytes - size
            if room <= 0 and not (first and not out):
                break
            data, taken = encode_batch(read.batch, room)
            if not data or (size + len(data) > max_bytes and not (first and not out)):
                break
            out.append(data)
            size += len(data)
            offset += taken
            if taken < read.batch.num_rows:
                break
        return b"".join(out)

    # -- Produce -------------------------------------------------------------------------------

    def _produce(self, req: M.ProduceRequest) -> M.ProduceResponse:
        topics = []
        for t in req.topic_data:
            parts = []
            for p in t.partition_data:
                parts.append(self._produce_partition(req, t.name, p))
            topics.append(M.ProduceTopicResponse(name=t.name, partition_responses=parts))
        return M.ProduceResponse(responses=topics)

    def _produce_partition(
        self, req: M.ProduceRequest, topic: str, p: M.ProducePartition
    ) -> M.ProducePartitionResponse:
        if req.acks not in (-1, 0, 1):
            return M.ProducePartitionResponse(p.index, E.INVALID_REQUIRED_ACKS)
        if req.transactional_id is not None:
            return M.ProducePartitionResponse(
                p.index, E.INVALID_PRODUCER_ID_MAPPING, error_message="transactions are not served"
            )
        tp = TopicPartition(topic, p.index)
        try:
            self._check(tp)
            table = decode_batches(p.records or b"")
            if table.num_rows == 0:
                return M.ProducePartitionResponse(p.index, E.CORRUPT_MESSAGE, error_message="no records")
            result = self.log.produce(topic, table, partition=p.index)
        except InvalidRecords as exc:
            return M.ProducePartitionResponse(p.index, exc.code, error_message=str(exc))
        except (UnknownTopic, UnknownPartition, FileNotFoundError):
            return M.ProducePartitionResponse(p.index, E.UNKNOWN_TOPIC_OR_PARTITION)
        return M.ProducePartitionResponse(
            p.index, 0, base_offset=result[0].base_offset, log_start_offset=self.log.earliest(tp)
        )
