"""The coordinator's messages: one frozen struct per request and per response of every API.

These structs are what the core (`coordinator/group/coordinator.py`) takes and returns, what the node's
codec (`coordinator/wire/codec.py`, docs/protocol.md) decodes frames into and encodes answers
from, and what the member client builds and reads. `APIS` is the one table of APIs: key, name,
versions served, request type, response type.

A struct holds an API's *meaning*, not one wire's layout, the way Kafka's generated `*Data`
classes hold the fields of every version. Each codec decides which fields its wire carries and
how strictly (docs/protocol.md for ours):

* fields Kafka has in later versions than ours (OffsetCommit `retention_time_ms`, OffsetFetch
  `require_stable`, ListGroups `types_filter`) have Kafka's default and are not on our wire;
* a `GroupId` may be None, the null group id that Kafka's coordinator answers with
  INVALID_GROUP_ID; our wire cannot carry it (a nil group id is INVALID_REQUEST there);
* nullable request fields default to None, so a struct built in code may leave them out; our
  wire nevertheless requires every key it lists.

    req = HeartbeatRequest(group_id="g", generation_id=3, member_id="m-1")
    APIS[HEARTBEAT].response   # -> HeartbeatResponse
"""

from __future__ import annotations

from typing import Annotated, NamedTuple

from msgspec import UNSET, UnsetType

from coordinator.wire.message import Int8, Int32, Int64, Message
from coordinator.wire.sasl_schema import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)


class _NullGroupId:
    """Marks a group id Kafka's coordinator may receive as null (see the module docstring)."""

    def __repr__(self) -> str:
        return "NULL_GROUP_ID"


NULL_GROUP_ID = _NullGroupId()
GroupId = Annotated[str | None, NULL_GROUP_ID]

# API keys (Kafka's numbering).
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
DESCRIBE_CLUSTER = 60  # the live nodes, so a member follows a cluster whose nodes are replaced
DELETE_GROUPS = 42
OFFSET_DELETE = 47
CONSUMER_GROUP_HEARTBEAT = 68  # KIP-848's API, version 0's fields (docs/protocol.md)
CONSUMER_GROUP_DESCRIBE = 69  # KIP-848's describe: epochs, current and target assignments
# groupshift's own APIs (keys from 1000, outside Kafka's numbering): scheme two, the coordinator
# assigns (docs/protocol.md "Server-assigned groups").
SERVER_JOIN_GROUP = 1000
SERVER_HEARTBEAT = 1001
# A member asks to be told when its group changes, instead of learning it at its next heartbeat
# (docs/protocol.md "WatchGroup"): schemes two and three, the native wire only.
WATCH_GROUP = 1002


# ============================================================================ requests


class ApiVersionsRequest(Message):
    pass


class FindCoordinatorRequest(Message):
    key: str
    key_type: Int8


class DescribeClusterRequest(Message):
    pass


class JoinGroupProtocol(Message):
    name: str
    metadata: bytes


class JoinGroupRequest(Message, kw_only=True):
    group_id: GroupId
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str
    protocols: list[JoinGroupProtocol]
    reason: str | None = None


class SyncGroupAssignment(Message):
    member_id: str
    assignment: bytes


class SyncGroupRequest(Message):
    group_id: GroupId
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignments: list[SyncGroupAssignment] = []


class HeartbeatRequest(Message):
    group_id: GroupId
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None


class ServerAssignedTopic(Message):
    topic: str
    partitions: list[Int32]


class ServerJoinGroupRequest(Message, kw_only=True):
    """Scheme two's JoinGroup: the member names its topics and the strategy; the coordinator assigns.

    `consumer_id` is empty on the first join; `owned` is what the member held in its last
    generation (the sticky strategy keeps it where it can)."""

    group_id: GroupId
    consumer_id: str
    session_timeout_ms: Int32
    topics: list[str]
    strategy: str
    owned: list[ServerAssignedTopic] = []


class ConsumerGroupHeartbeatRequest(Message, kw_only=True):
    """The incremental form of scheme two (KIP-848): join (epoch 0), heartbeat, leave (epoch -1).

    Nil fields are "unchanged since the last heartbeat"; a join must give the subscription."""

    group_id: GroupId
    member_id: str
    member_epoch: Int32
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    subscribed_topic_names: list[str] | None = None
    server_assignor: str | None = None
    topic_partitions: list[ServerAssignedTopic] | None = None
    # Kafka's later fields, sent by Kafka clients through the Kafka listener only (not on the
    # native wire's version 0): a static member's id, its rack, and a regex subscription
    # (full-match over topic names; "" is no regex, as librdkafka sends it).
    instance_id: str | None = None
    rack_id: str | None = None
    subscribed_topic_regex: str | None = None


class ConsumerGroupDescribeRequest(Message):
    group_ids: list[str]
    include_authorized_operations: bool = False


class ServerHeartbeatRequest(Message):
    group_id: GroupId
    generation_id: Int32
    consumer_id: str


class WatchGroupRequest(Message):
    """Park until the group has news for `member_id`, at most `max_wait_ms`: a rebalance started
    (classic groups) or the group's assignments changed (the incremental form).

    `generation_id` is what the member holds (its generation, or its member epoch): when the group
    has moved past it already, the answer comes at once."""

    group_id: GroupId
    member_id: str
    generation_id: Int32
    max_wait_ms: Int32


class LeaveGroupMember(Message):
    member_id: str
    group_instance_id: str | None = None
    reason: str | None = None


class LeaveGroupRequest(Message):
    group_id: GroupId
    members: list[LeaveGroupMember]


class OffsetCommitPartition(Message):
    partition_index: Int32
    committed_offset: Int64
    committed_metadata: str | None = None


class OffsetCommitTopic(Message):
    name: str
    partitions: list[OffsetCommitPartition]


class OffsetCommitRequest(Message, kw_only=True):
    group_id: GroupId
    generation_id: Int32
    member_id: str
    group_instance_id: str | None = None
    topics: list[OffsetCommitTopic]
    # Kafka v2-v4 only (explicit per-offset expiry); -1 = the group's retention rules.
    retention_time_ms: Int64 = -1


class OffsetFetchTopic(Message):
    name: str
    partition_indexes: list[Int32]


class OffsetFetchRequest(Message):
    group_id: GroupId
    topics: list[OffsetFetchTopic] | None = None  # None: every committed offset of the group
    require_stable: bool = False  # Kafka v7+
    # Kafka v9+ (the Kafka listener only): a consumer-protocol member's id and epoch, checked
    # against the incremental group's (nil, -1: not checked).
    member_id: str | None = None
    member_epoch: Int32 = -1


class DescribeGroupsRequest(Message):
    groups: list[GroupId]


class ListGroupsRequest(Message):
    states_filter: list[str] = []
    types_filter: list[str] = []  # Kafka v5+


class DeleteGroupsRequest(Message):
    groups_names: list[GroupId]


class OffsetDeletePartition(Message):
    partition_index: Int32


class OffsetDeleteTopic(Message):
    name: str
    partitions: list[OffsetDeletePartition]


class OffsetDeleteRequest(Message):
    group_id: GroupId
    topics: list[OffsetDeleteTopic]


# =========================================================================== responses
#
# Defaults are the error shape: `JoinGroupResponse(error_code=E, member_id=m)` is a complete
# error answer, and a generic error answer (`ErrorResponse`, e.g. INVALID_REQUEST) read as an
# API's response leaves every other field at its default.


class ErrorResponse(Message):
    """The answer to a request that cannot be served at all (INVALID_REQUEST, UNSUPPORTED_VERSION,
    an internal error): it has none of the API's own response fields."""

    error_code: int
    error_message: str


class ApiVersionsKey(Message):
    api_key: int
    min_version: int
    max_version: int


class ApiVersionsResponse(Message):
    error_code: int
    api_keys: list[ApiVersionsKey] = []


class FindCoordinatorResponse(Message):
    error_code: int
    error_message: str | None = None
    node_id: int = -1
    host: str = ""
    port: int = -1


class DescribeClusterBroker(Message):
    broker_id: int
    host: str
    port: int


class DescribeClusterResponse(Message):
    """The coordinator nodes alive in the cluster, as the answering node sees them (itself included)."""

    error_code: int
    error_message: str | None = None
    cluster_id: str = ""
    controller_id: int = -1  # the answering node
    brokers: list[DescribeClusterBroker] = []


class JoinGroupMember(Message):
    member_id: str
    group_instance_id: str | None
    metadata: bytes


class JoinGroupResponse(Message):
    error_code: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = []
    skip_assignment: bool | UnsetType = UNSET  # Kafka v9+ only: not on our wire unless set


class SyncGroupResponse(Message):
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class HeartbeatResponse(Message):
    error_code: int


class ServerJoinGroupResponse(Message):
    """The consumer id, the new generation and the member's partitions, in one answer."""

    error_code: int
    generation_id: Int32 = -1
    consumer_id: str = ""
    strategy: str | None = None
    assignment: list[ServerAssignedTopic] = []


class ConsumerGroupHeartbeatResponse(Message):
    error_code: int
    error_message: str | None = None
    member_id: str = ""
    member_epoch: Int32 = -1
    heartbeat_interval_ms: Int32 = -1
    assignment: list[ServerAssignedTopic] | None = None


class ConsumerGroupMember(Message):
    """One member of a consumer-protocol group as ConsumerGroupDescribe shows it."""

    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: Int32
    client_id: str
    client_host: str
    subscribed_topic_names: list[str]
    subscribed_topic_regex: str | None
    assignment: list[ServerAssignedTopic]  # what it holds now
    target_assignment: list[ServerAssignedTopic]  # what the group's target gives it


# Kafka's "authorized operations not asked for" (INT32_MIN).
AUTHORIZED_OPERATIONS_OMITTED = -(2**31)


class DescribedConsumerGroup(Message):
    error_code: int
    error_message: str | None
    group_id: str
    group_state: str  # Empty, Assigning, Reconciling, Stable, Dead
    group_epoch: Int32
    assignment_epoch: Int32
    assignor_name: str
    members: list[ConsumerGroupMember] = []
    authorized_operations: Int32 = AUTHORIZED_OPERATIONS_OMITTED


class ConsumerGroupDescribeResponse(Message):
    groups: list[DescribedConsumerGroup]


class ServerHeartbeatResponse(Message):
    error_code: int


class WatchGroupResponse(Message):
    """`changed`: heartbeat now, the answer has news; not changed: `max_wait_ms` passed quietly."""

    error_code: int
    changed: bool = False


class LeaveGroupMemberResponse(Message):
    member_id: str
    group_instance_id: str | None
    error_code: int


class LeaveGroupResponse(Message):
    error_code: int
    members: list[LeaveGroupMemberResponse] = []


class PartitionResult(Message):
    partition_index: int
    error_code: int


class TopicPartitionResults(Message):
    name: str
    partitions: list[PartitionResult]


class OffsetCommitResponse(Message):
    topics: list[TopicPartitionResults] = []
    error_code: int | UnsetType = UNSET  # only in an ErrorResponse read as this API's

    @classmethod
    def with_error(cls, request: OffsetCommitRequest, error_code: int) -> OffsetCommitResponse:
        """The answer carrying `error_code` for every requested partition (there is no
        top-level error in an OffsetCommit answer)."""
        return cls(
            topics=[
                TopicPartitionResults(
                    name=t.name,
                    partitions=[
                        PartitionResult(partition_index=p.partition_index, error_code=error_code)
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )


class OffsetFetchPartition(Message):
    partition_index: int
    committed_offset: int
    metadata: str | None
    error_code: int


class OffsetFetchTopicResponse(Message):
    name: str
    partitions: list[OffsetFetchPartition]


class OffsetFetchResponse(Message):
    error_code: int
    topics: list[OffsetFetchTopicResponse] = []


class DescribedMember(Message):
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    member_metadata: bytes
    member_assignment: bytes


class DescribedGroup(Message):
    error_code: int
    group_id: GroupId
    group_state: str = ""
    protocol_type: str = ""
    protocol_data: str = ""
    members: list[DescribedMember] = []


class DescribeGroupsResponse(Message):
    groups: list[DescribedGroup] = []
    error_code: int | UnsetType = UNSET  # only in an ErrorResponse read as this API's


class ListedGroup(Message):
    group_id: str
    protocol_type: str
    group_state: str


class ListGroupsResponse(Message):
    error_code: int
    groups: list[ListedGroup] = []


class DeleteGroupsResult(Message):
    group_id: GroupId
    error_code: int


class DeleteGroupsResponse(Message):
    results: list[DeleteGroupsResult] = []
    error_code: int | UnsetType = UNSET  # only in an ErrorResponse read as this API's


class OffsetDeleteResponse(Message):
    error_code: int
    topics: list[TopicPartitionResults] = []


# ============================================================================ the table


class Api(NamedTuple):
    key: int
    name: str
    min_version: int
    max_version: int
    request: type[Message]
    response: type[Message]


APIS: dict[int, Api] = {
    api.key: api
    for api in (
        Api(OFFSET_COMMIT, "OffsetCommit", 0, 0, OffsetCommitRequest, OffsetCommitResponse),
        Api(OFFSET_FETCH, "OffsetFetch", 0, 0, OffsetFetchRequest, OffsetFetchResponse),
        Api(FIND_COORDINATOR, "FindCoordinator", 0, 0, FindCoordinatorRequest, FindCoordinatorResponse),
        Api(JOIN_GROUP, "JoinGroup", 0, 0, JoinGroupRequest, JoinGroupResponse),
        Api(HEARTBEAT, "Heartbeat", 0, 0, HeartbeatRequest, HeartbeatResponse),
        Api(LEAVE_GROUP, "LeaveGroup", 0, 0, LeaveGroupRequest, LeaveGroupResponse),
        Api(SYNC_GROUP, "SyncGroup", 0, 0, SyncGroupRequest, SyncGroupResponse),
        Api(DESCRIBE_GROUPS, "DescribeGroups", 0, 0, DescribeGroupsRequest, DescribeGroupsResponse),
        Api(LIST_GROUPS, "ListGroups", 0, 0, ListGroupsRequest, ListGroupsResponse),
        Api(API_VERSIONS, "ApiVersions", 0, 0, ApiVersionsRequest, ApiVersionsResponse),
        Api(DELETE_GROUPS, "DeleteGroups", 0, 0, DeleteGroupsRequest, DeleteGroupsResponse),
        Api(DESCRIBE_CLUSTER, "DescribeCluster", 0, 0, DescribeClusterRequest, DescribeClusterResponse),
        Api(OFFSET_DELETE, "OffsetDelete", 0, 0, OffsetDeleteRequest, OffsetDeleteResponse),
        Api(
            CONSUMER_GROUP_HEARTBEAT,
            "ConsumerGroupHeartbeat",
            0,
            0,
            ConsumerGroupHeartbeatRequest,
            ConsumerGroupHeartbeatResponse,
        ),
        Api(
            CONSUMER_GROUP_DESCRIBE,
            "ConsumerGroupDescribe",
            0,
            0,
            ConsumerGroupDescribeRequest,
            ConsumerGroupDescribeResponse,
        ),
        Api(SERVER_JOIN_GROUP, "ServerJoinGroup", 0, 0, ServerJoinGroupRequest, ServerJoinGroupResponse),
        Api(SERVER_HEARTBEAT, "ServerHeartbeat", 0, 0, ServerHeartbeatRequest, ServerHeartbeatResponse),
        Api(WATCH_GROUP, "WatchGroup", 0, 0, WatchGroupRequest, WatchGroupResponse),
        Api(SASL_HANDSHAKE, "SaslHandshake", 0, 0, SaslHandshakeRequest, SaslHandshakeResponse),
        Api(SASL_AUTHENTICATE, "SaslAuthenticate", 0, 0, SaslAuthenticateRequest, SaslAuthenticateResponse),
    )
}

API_NAMES: dict[int, str] = {key: api.name for key, api in APIS.items()}

# The APIs the node answers itself, without the group coordinator core (which serves the others).
NODE_APIS = frozenset({API_VERSIONS, FIND_COORDINATOR, DESCRIBE_CLUSTER, SASL_HANDSHAKE, SASL_AUTHENTICATE})
GROUP_APIS = frozenset(APIS) - NODE_APIS

Request = (
    ApiVersionsRequest
    | FindCoordinatorRequest
    | DescribeClusterRequest
    | JoinGroupRequest
    | SyncGroupRequest
    | HeartbeatRequest
    | LeaveGroupRequest
    | OffsetCommitRequest
    | OffsetFetchRequest
    | DescribeGroupsRequest
    | ListGroupsRequest
    | DeleteGroupsRequest
    | OffsetDeleteRequest
    | ServerJoinGroupRequest
    | ServerHeartbeatRequest
    | WatchGroupRequest
    | ConsumerGroupHeartbeatRequest
    | ConsumerGroupDescribeRequest
    | SaslHandshakeRequest
    | SaslAuthenticateRequest
)

Response = (
    ErrorResponse
    | ApiVersionsResponse
    | FindCoordinatorResponse
    | DescribeClusterResponse
    | JoinGroupResponse
    | SyncGroupResponse
    | HeartbeatResponse
    | LeaveGroupResponse
    | OffsetCommitResponse
    | OffsetFetchResponse
    | DescribeGroupsResponse
    | ListGroupsResponse
    | DeleteGroupsResponse
    | OffsetDeleteResponse
    | ServerJoinGroupResponse
    | ServerHeartbeatResponse
    | WatchGroupResponse
    | ConsumerGroupHeartbeatResponse
    | ConsumerGroupDescribeResponse
    | SaslHandshakeResponse
    | SaslAuthenticateResponse
)
