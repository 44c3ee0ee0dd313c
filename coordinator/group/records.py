"""What the core persists, and loads back: group metadata and committed offsets, plain msgspec structs.

`GroupRecord` (Kafka's GroupMetadataValue, with every member's protocols) and `OffsetRecord` are
what a `Write` carries for the store to persist, `coordinator/layout.py` encodes them into their
znodes, and a node taking a shard over loads them back as `GroupSnapshot`s
(`GroupCoordinator.load_group`). Nothing else: importing them (as the layout's readers do, e.g.
`groupshift groups list`) costs no more than the structs. `coordinator.group.messages` re-exports
them.
"""

from __future__ import annotations

import msgspec

from core.types import TopicPartition


class ProtocolRecord(msgspec.Struct):
    name: str
    metadata: bytes


class MemberRecord(msgspec.Struct):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[ProtocolRecord]
    assignment: bytes


class GroupRecord(msgspec.Struct):
    """Group metadata as persisted (Kafka's GroupMetadataValue, with every member's protocols)."""

    group_id: str
    protocol_type: str | None
    protocol_name: str | None
    generation_id: int
    leader_id: str | None
    state_timestamp: int | None
    members: list[MemberRecord]


class OffsetRecord(msgspec.Struct):
    topic: str
    partition: int
    offset: int
    metadata: str
    commit_timestamp: int
    # Explicit expiry (Kafka v2-v4 retention_time_ms); None = the group's retention rules
    # (docs/coordinator-core.md, Offsets).
    expire_timestamp: int | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


class GroupSnapshot(msgspec.Struct):
    """Everything a node needs to take a group over: its metadata (None for offsets-only groups)
    and its committed offsets."""

    group_id: str
    group: GroupRecord | None
    offsets: list[OffsetRecord]
