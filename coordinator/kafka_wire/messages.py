"""The data-plane APIs of the Kafka listener as structs: Metadata, ListOffsets, Fetch and Produce.

The group APIs use `coordinator/wire/schema.py`; these four are served by the node itself (not
by the group coordinator core), so they live here. Field names are Kafka's snake_case JSON names,
so `codec` maps them onto the wire by name; fields a version lacks are dropped when encoding.
"""

from __future__ import annotations

import uuid

from coordinator.wire.schema import Int32, Message

# API keys (Kafka's numbering) of the data plane.
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3

# ListOffsets' special timestamps.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2


# KIP-848's APIs, served by the group coordinator core with topic names; on the wire by id.
CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69


class MetadataRequest(Message):
    topics: list[str] | None = None  # None: every topic
    topic_ids: list[uuid.UUID] = []  # v10+: topics asked for by id only (their name null)


class MetadataBroker(Message):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class MetadataPartition(Message):
    error_code: int
    partition_index: int
    leader_id: int = -1
    leader_epoch: int = -1
    replica_nodes: list[int] = []
    isr_nodes: list[int] = []
    offline_replicas: list[int] = []


class MetadataTopic(Message):
    error_code: int
    name: str | None  # null for an unknown topic id (v12+)
    topic_id: uuid.UUID | None = None  # v10+; None encodes as the zero id
    is_internal: bool = False
    partitions: list[MetadataPartition] = []


class MetadataResponse(Message):
    brokers: list[MetadataBroker]
    cluster_id: str | None
    controller_id: int
    topics: list[MetadataTopic]


class ListOffsetsPartition(Message):
    partition_index: int
    timestamp: int


class ListOffsetsTopic(Message):
    name: str
    partitions: list[ListOffsetsPartition]


class ListOffsetsRequest(Message):
    topics: list[ListOffsetsTopic]
    isolation_level: int = 0


class ListOffsetsPartitionResponse(Message):
    partition_index: int
    error_code: int
    timestamp: int = -1
    offset: int = -1
    leader_epoch: int = -1


class ListOffsetsTopicResponse(Message):
    name: str
    partitions: list[ListOffsetsPartitionResponse]


class ListOffsetsResponse(Message):
    topics: list[ListOffsetsTopicResponse]


class FetchPartition(Message):
    partition: int
    fetch_offset: int
    partition_max_bytes: int


class FetchTopic(Message):
    topic: str
    partitions: list[FetchPartition]


class FetchRequest(Message):
    max_wait_ms: int
    min_bytes: int
    topics: list[FetchTopic]
    max_bytes: int = 0x7FFFFFFF
    isolation_level: int = 0
    session_id: int = 0
    session_epoch: int = -1


class FetchPartitionResponse(Message):
    partition_index: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    records: bytes = b""


class FetchTopicResponse(Message):
    topic: str
    partitions: list[FetchPartitionResponse]


class FetchResponse(Message):
    responses: list[FetchTopicResponse]
    error_code: int = 0
    session_id: int = 0  # no fetch sessions: every request is a full one


class ProducePartition(Message):
    index: int
    records: bytes | None


class ProduceTopic(Message):
    name: str
    partition_data: list[ProducePartition]


class ProduceRequest(Message):
    acks: int
    timeout_ms: int
    topic_data: list[ProduceTopic]
    transactional_id: str | None = None


class ProducePartitionResponse(Message):
    index: int
    error_code: int
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    error_message: str | None = None


class ProduceTopicResponse(Message):
    name: str
    partition_responses: list[ProducePartitionResponse]


class ProduceResponse(Message):
    responses: list[ProduceTopicResponse]


# ----------------------------------------------------------------- KIP-848, as Kafka clients send it


class TopicIdPartitions(Message):
    topic_id: uuid.UUID | None  # None: the zero id
    partitions: list[Int32]


class KafkaConsumerGroupHeartbeat(Message, kw_only=True):
    """ConsumerGroupHeartbeat as decoded from a Kafka client: owned partitions by topic id and no
    session timeout (the server's). `kafka_wire.topic_map` turns it into the core's struct."""

    group_id: str
    member_id: str
    member_epoch: Int32
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: Int32 = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    topic_partitions: list[TopicIdPartitions] | None = None


class AssignedTopicPartitions(Message):
    topic_id: uuid.UUID
    topic_name: str
    partitions: list[Int32]


class KafkaAssignment(Message):
    topic_partitions: list[TopicIdPartitions]


class KafkaConsumerGroupHeartbeatResponse(Message):
    error_code: int
    error_message: str | None
    member_id: str | None
    member_epoch: Int32
    heartbeat_interval_ms: Int32
    assignment: KafkaAssignment | None = None


class KafkaDescribedAssignment(Message):
    topic_partitions: list[AssignedTopicPartitions]


class KafkaConsumerGroupMember(Message):
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: Int32
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: KafkaDescribedAssignment
    target_assignment: KafkaDescribedAssignment


class KafkaDescribedConsumerGroup(Message):
    error_code: int
    error_message: str | None
    group_id: str
    group_state: str
    group_epoch: Int32
    assignment_epoch: Int32
    assignor_name: str
    members: list[KafkaConsumerGroupMember]
    authorized_operations: Int32


class KafkaConsumerGroupDescribeResponse(Message):
    groups: list[KafkaDescribedConsumerGroup]
