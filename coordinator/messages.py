"""What crosses the core's boundary: request bodies, outputs (effects) and the persisted records.

Request bodies arrive as plain dicts with `PROTOCOL.md`'s field names; `parse_request` validates
one into a typed struct (missing key or wrong type -> `InvalidRequest`, which the core answers
with INVALID_REQUEST). Nullable fields (`group_instance_id`, `reason`, SyncGroup's protocol
fields, OffsetFetch `topics`) may also be omitted. Unknown keys are ignored.

Outputs are what the core asks its driver to do: `Respond` (answer a request, now or later),
`Persist` (write group metadata or offsets, then report back with `persisted`), `StateChanged`
(metrics) and `Discarded` (a parked request Kafka never answers). Records (`GroupRecord`,
`MemberRecord`, `OffsetRecord`) are plain msgspec structs: what the store writes and what a node
taking a shard over loads back with `GroupCoordinator.load_group`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, NamedTuple

import msgspec

from core.types import TopicPartition

Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]

# API keys (Kafka's).
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
HEARTBEAT = 12
LEAVE_GROUP = 13
SYNC_GROUP = 14
DESCRIBE_GROUPS = 15
LIST_GROUPS = 16
API_VERSIONS = 18
DELETE_GROUPS = 42
OFFSET_DELETE = 47


class InvalidRequest(Exception):
    """A request body is not a map, lacks a required key or has a value of the wrong type."""


# ------------------------------------------------------------------------------------ requests


class Protocol(msgspec.Struct, frozen=True):
    name: str
    metadata: bytes


class JoinGroupRequest(msgspec.Struct):
    group_id: str | None
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    member_id: str
    protocol_type: str
    protocols: list[Protocol]
    group_instance_id: str | None = None
    reason: str | None = None


class SyncAssignment(msgspec.Struct):
    member_id: str
    assignment: bytes


class SyncGroupRequest(msgspec.Struct):
    group_id: str | None
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: list[SyncAssignment] | None = None


class HeartbeatRequest(msgspec.Struct):
    group_id: str | None
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


class LeavingMember(msgspec.Struct):
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


class LeaveGroupRequest(msgspec.Struct):
    group_id: str | None
    members: list[LeavingMember]


class CommitPartition(msgspec.Struct):
    partition_index: Int32
    committed_offset: Int64
    committed_metadata: str | None = None


class CommitTopic(msgspec.Struct):
    name: str
    partitions: list[CommitPartition]


class OffsetCommitRequest(msgspec.Struct):
    group_id: str | None
    generation_id: Int32
    member_id: str
    topics: list[CommitTopic]
    group_instance_id: str | None = None
    # Kafka v2-v4 only (explicit per-offset expiry, §10); -1 = group rules (§11).
    retention_time_ms: Int64 = -1


class FetchTopic(msgspec.Struct):
    name: str
    partition_indexes: list[Int32]


class OffsetFetchRequest(msgspec.Struct):
    group_id: str | None
    topics: list[FetchTopic] | None = None
    require_stable: bool = False


class DescribeGroupsRequest(msgspec.Struct):
    groups: list[str | None]


class ListGroupsRequest(msgspec.Struct):
    states_filter: list[str] | None = None
    types_filter: list[str] | None = None


class DeleteGroupsRequest(msgspec.Struct):
    groups_names: list[str | None]


class DeletePartition(msgspec.Struct):
    partition_index: Int32


class DeleteTopic(msgspec.Struct):
    name: str
    partitions: list[DeletePartition]


class OffsetDeleteRequest(msgspec.Struct):
    group_id: str | None
    topics: list[DeleteTopic]


REQUEST_TYPES: dict[int, type] = {
    JOIN_GROUP: JoinGroupRequest,
    SYNC_GROUP: SyncGroupRequest,
    HEARTBEAT: HeartbeatRequest,
    LEAVE_GROUP: LeaveGroupRequest,
    OFFSET_COMMIT: OffsetCommitRequest,
    OFFSET_FETCH: OffsetFetchRequest,
    DESCRIBE_GROUPS: DescribeGroupsRequest,
    LIST_GROUPS: ListGroupsRequest,
    DELETE_GROUPS: DeleteGroupsRequest,
    OFFSET_DELETE: OffsetDeleteRequest,
}

_WIRE_TYPES = (bytes, bytearray, memoryview)


def parse_request(api_key: int, body: Any) -> Any:
    """Validate `body` into the request struct of `api_key`; raises `InvalidRequest`.

    `bytes` fields must be bytes (MessagePack bin), never base64 strings; ints must fit Kafka's
    widths; booleans are not ints.
    """
    try:
        return msgspec.convert(body, REQUEST_TYPES[api_key], builtin_types=_WIRE_TYPES)
    except msgspec.ValidationError as e:
        raise InvalidRequest(str(e)) from None


def invalid_request_body(message: str) -> dict[str, Any]:
    return {"error_code": 42, "error_message": message}


# ------------------------------------------------------------------------------------- outputs


class Respond(NamedTuple):
    """Send `body` as the response to the request the driver registered as `request_token`."""

    request_token: Any
    body: dict[str, Any]


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


# --------------------------------------------------------------------------- response bodies


def join_error(error: int, member_id: str) -> dict[str, Any]:
    return {
        "error_code": error,
        "generation_id": -1,
        "protocol_type": None,
        "protocol_name": None,
        "leader": "",
        "member_id": member_id,
        "members": [],
    }


def sync_error(error: int) -> dict[str, Any]:
    return {"error_code": error, "protocol_type": None, "protocol_name": None, "assignment": b""}


def commit_errors(req: OffsetCommitRequest, error: int) -> dict[str, Any]:
    return {
        "topics": [
            {
                "name": t.name,
                "partitions": [
                    {"partition_index": p.partition_index, "error_code": error} for p in t.partitions
                ],
            }
            for t in req.topics
        ]
    }


def describe_error(group_id: str | None, error: int) -> dict[str, Any]:
    return {
        "error_code": error,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
