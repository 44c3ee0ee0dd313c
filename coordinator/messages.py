"""What crosses the core's boundary besides requests and responses: outputs and persisted records.

Requests and responses are the structs of `coordinator/schema.py`. Outputs are what the core asks
its driver to do: `Respond` (answer a request, now or later), `Persist` (write group metadata or
offsets, then report back with `persisted`), `StateChanged` (metrics) and `Discarded` (a parked
request Kafka never answers). Records (`GroupRecord`, `MemberRecord`, `OffsetRecord`) are plain
msgspec structs: what the store writes and what a node taking a shard over loads back with
`GroupCoordinator.load_group`.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple

import msgspec

from coordinator.schema import Response
from core.types import TopicPartition

# ------------------------------------------------------------------------------------- outputs


class Respond(NamedTuple):
    """Send `body` as the response to the request the driver registered as `request_token`."""

    request_token: Any
    body: Response


class Persist(NamedTuple):
    """Write something durable, then call `GroupCoordinator.persisted(token, ok, now_ms)`.

    kind / payload:
      "group"           GroupRecord: the group's metadata (members, generation, assignments).
      "offsets"         list[OffsetRecord]: committed offsets to upsert.
      "offsets_deleted" list[TopicPartition]: offsets to remove (expiry, OffsetDelete, topic deletion).
      "group_deleted"   None: remove the group and all of its offsets.
    `token` is None when the core does not care about the outcome (Kafka ignores it there);
    otherwise the driver must report the outcome exactly once.
    """

    kind: Literal["group", "offsets", "offsets_deleted", "group_deleted"]
    group_id: str
    payload: Any
    token: int | None


class StateChanged(NamedTuple):
    group_id: str
    old: str
    new: str


class Discarded(NamedTuple):
    """A parked JoinGroup/SyncGroup that the coordinator will never answer (Kafka drops it).

    Happens when the same member parks a second JoinGroup/SyncGroup (§14 item 6) or when a member
    with a parked SyncGroup is removed. Clients time out such requests; the driver may release them.
    """

    request_token: Any


Output = Respond | Persist | StateChanged | Discarded

# ------------------------------------------------------------------------------------- records


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
    # Explicit expiry (Kafka v2-v4 retention_time_ms); None = the group's retention rules (§11).
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
