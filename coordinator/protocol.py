"""The coordinator wire protocol, version 0 (PROTOCOL.md): framing, typed messages, validation.

A frame is a 4-byte big-endian length and one MessagePack map. Requests are
`{"api", "v", "id", "client_id", "body"}`, responses `{"id", "body"}`. Bodies are decoded into the
msgspec structs below, one per API; a body that lacks a key or has a value of the wrong type is
answered with INVALID_REQUEST (42), an unknown api or version with UNSUPPORTED_VERSION (35), and a
frame whose correlation id cannot be read closes the connection.

    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    for payload in decoder.feed(data):             # raises FrameTooLarge
        request = decode_request(payload)          # raises BadFrame (close) / InvalidRequest (answer)
        ...
        out = encode_response(request.id, {"error_code": 0})

Unknown keys are ignored everywhere (forward compatibility); `bytes` fields are MessagePack bin.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

# Kafka's API keys and error codes: one definition each, shared with the core.
from coordinator import error_codes as ErrorCode  # ErrorCode.NONE, ErrorCode.NOT_COORDINATOR, ...
from coordinator.messages import (
    API_VERSIONS,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)

VERSION = 0
DEFAULT_MAX_FRAME_BYTES = 1 << 20

API_NAMES = {
    OFFSET_COMMIT: "OffsetCommit",
    OFFSET_FETCH: "OffsetFetch",
    FIND_COORDINATOR: "FindCoordinator",
    JOIN_GROUP: "JoinGroup",
    HEARTBEAT: "Heartbeat",
    LEAVE_GROUP: "LeaveGroup",
    SYNC_GROUP: "SyncGroup",
    DESCRIBE_GROUPS: "DescribeGroups",
    LIST_GROUPS: "ListGroups",
    API_VERSIONS: "ApiVersions",
    DELETE_GROUPS: "DeleteGroups",
    OFFSET_DELETE: "OffsetDelete",
}


ERROR_NAMES = ErrorCode.NAMES

Int8 = Annotated[int, msgspec.Meta(ge=-(2**7), le=2**7 - 1)]
Int32 = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class Message(msgspec.Struct, frozen=True):
    """Base of every body struct: all listed keys are required, unknown keys are ignored."""


# ---------------------------------------------------------------------------------------------
# Request bodies


class ApiVersionsRequest(Message):
    pass


class FindCoordinatorRequest(Message):
    key: str
    key_type: Int8


class JoinGroupProtocol(Message):
    name: str
    metadata: bytes


class JoinGroupRequest(Message):
    group_id: str
    session_timeout_ms: Int32
    rebalance_timeout_ms: Int32
    member_id: str
    group_instance_id: str | None
    protocol_type: str
    protocols: list[JoinGroupProtocol]
    reason: str | None


class SyncGroupAssignment(Message):
    member_id: str
    assignment: bytes


class SyncGroupRequest(Message):
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None
    protocol_type: str | None
    protocol_name: str | None
    assignments: list[SyncGroupAssignment]


class HeartbeatRequest(Message):
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None


class LeaveGroupMember(Message):
    member_id: str
    group_instance_id: str | None
    reason: str | None


class LeaveGroupRequest(Message):
    group_id: str
    members: list[LeaveGroupMember]


class OffsetCommitPartition(Message):
    partition_index: Int32
    committed_offset: Int64
    committed_metadata: str | None


class OffsetCommitTopic(Message):
    name: str
    partitions: list[OffsetCommitPartition]


class OffsetCommitRequest(Message):
    group_id: str
    generation_id: Int32
    member_id: str
    group_instance_id: str | None
    topics: list[OffsetCommitTopic]


class OffsetFetchTopic(Message):
    name: str
    partition_indexes: list[Int32]


class OffsetFetchRequest(Message):
    group_id: str
    topics: list[OffsetFetchTopic] | None


class DescribeGroupsRequest(Message):
    groups: list[str]


class ListGroupsRequest(Message):
    states_filter: list[str]


class DeleteGroupsRequest(Message):
    groups_names: list[str]


class OffsetDeletePartition(Message):
    partition_index: Int32


class OffsetDeleteTopic(Message):
    name: str
    partitions: list[OffsetDeletePartition]


class OffsetDeleteRequest(Message):
    group_id: str
    topics: list[OffsetDeleteTopic]


REQUEST_TYPES: dict[int, type[Message]] = {
    API_VERSIONS: ApiVersionsRequest,
    FIND_COORDINATOR: FindCoordinatorRequest,
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

# Every API this node serves, all at version 0 only (the ApiVersions answer).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {api: (VERSION, VERSION) for api in REQUEST_TYPES}

# ---------------------------------------------------------------------------------------------
# Response bodies (the server encodes the core's dicts directly; these structs document the shape
# and let clients decode responses typed: `decode_response_body(api, raw)`).


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


class SyncGroupResponse(Message):
    error_code: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class HeartbeatResponse(Message):
    error_code: int


class LeaveGroupMemberResponse(Message):
    member_id: str
    group_instance_id: str | None
    error_code: int


class LeaveGroupResponse(Message):
    error_code: int
    members: list[LeaveGroupMemberResponse] = []


class PartitionError(Message):
    partition_index: int
    error_code: int


class TopicPartitionErrors(Message):
    name: str
    partitions: list[PartitionError]


class OffsetCommitResponse(Message):
    topics: list[TopicPartitionErrors] = []
    error_code: int = 0  # only in INVALID_REQUEST / UNSUPPORTED_VERSION answers


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
    group_id: str
    group_state: str
    protocol_type: str
    protocol_data: str
    members: list[DescribedMember]


class DescribeGroupsResponse(Message):
    groups: list[DescribedGroup] = []
    error_code: int = 0


class ListedGroup(Message):
    group_id: str
    protocol_type: str
    group_state: str


class ListGroupsResponse(Message):
    error_code: int
    groups: list[ListedGroup] = []


class DeleteGroupsResult(Message):
    group_id: str
    error_code: int


class DeleteGroupsResponse(Message):
    results: list[DeleteGroupsResult] = []
    error_code: int = 0


class OffsetDeleteResponse(Message):
    error_code: int
    topics: list[TopicPartitionErrors] = []


RESPONSE_TYPES: dict[int, type[Message]] = {
    API_VERSIONS: ApiVersionsResponse,
    FIND_COORDINATOR: FindCoordinatorResponse,
    JOIN_GROUP: JoinGroupResponse,
    SYNC_GROUP: SyncGroupResponse,
    HEARTBEAT: HeartbeatResponse,
    LEAVE_GROUP: LeaveGroupResponse,
    OFFSET_COMMIT: OffsetCommitResponse,
    OFFSET_FETCH: OffsetFetchResponse,
    DESCRIBE_GROUPS: DescribeGroupsResponse,
    LIST_GROUPS: ListGroupsResponse,
    DELETE_GROUPS: DeleteGroupsResponse,
    OFFSET_DELETE: OffsetDeleteResponse,
}

# ---------------------------------------------------------------------------------------------
# Envelopes and framing


class _RequestEnvelope(msgspec.Struct):
    api: int
    v: int
    id: Int32
    client_id: str
    body: msgspec.Raw


class _ResponseEnvelope(msgspec.Struct):
    id: int
    body: msgspec.Raw


_HEADER = struct.Struct(">I")
_encoder = msgspec.msgpack.Encoder()
_envelope_decoder = msgspec.msgpack.Decoder(_RequestEnvelope)
_response_decoder = msgspec.msgpack.Decoder(_ResponseEnvelope)
_any_decoder = msgspec.msgpack.Decoder()
_body_decoders = {api: msgspec.msgpack.Decoder(t) for api, t in REQUEST_TYPES.items()}
_response_body_decoders = {api: msgspec.msgpack.Decoder(t) for api, t in RESPONSE_TYPES.items()}


class ProtocolError(Exception):
    """A frame this node cannot serve."""


class FrameTooLarge(ProtocolError):
    """The length prefix exceeds `max_frame_bytes`: the connection is closed."""


class BadFrame(ProtocolError):
    """The frame's correlation id cannot be read: the connection is closed."""


class RequestError(ProtocolError):
    """The correlation id is readable but the request cannot be served: answered, connection kept."""

    def __init__(self, id: int, code: int, message: str, api: int | None = None):
        super().__init__(message)
        self.id = id
        self.code = code
        self.message = message
        self.api = api

    def body(self) -> dict[str, Any]:
        return {"error_code": self.code, "error_message": self.message}


@dataclass(slots=True)
class Request:
    """One decoded request: `body` is the API's typed struct."""

    api: int
    v: int
    id: int
    client_id: str
    body: Any

    @property
    def name(self) -> str:
        return API_NAMES.get(self.api, str(self.api))


class FrameDecoder:
    """Splits a byte stream into frame payloads; keeps a partial frame between `feed` calls."""

    __slots__ = ("max_frame_bytes", "_buf")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES):
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buf
        buf += data
        frames = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (length,) = _HEADER.unpack_from(buf, pos)
            if length > self.max_frame_bytes:
                raise FrameTooLarge(f"frame of {length} bytes exceeds max_frame_bytes={self.max_frame_bytes}")
            if end - pos - 4 < length:
                break
            frames.append(bytes(buf[pos + 4 : pos + 4 + length]))
            pos += 4 + length
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        return len(self._buf)


def frame(payload: bytes) -> bytes:
    return _HEADER.pack(len(payload)) + payload


def decode_request(payload: bytes) -> Request:
    """Decode and validate one request frame.

    Raises `BadFrame` when the id cannot be read (close the connection) and `RequestError`
    (INVALID_REQUEST or UNSUPPORTED_VERSION, answer it) otherwise.
    """
    try:
        env = _envelope_decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise _envelope_error(payload, exc) from None
    decoder = _body_decoders.get(env.api)
    if decoder is None:
        raise RequestError(env.id, ErrorCode.UNSUPPORTED_VERSION, f"unknown api {env.api}", env.api)
    if env.v != VERSION:
        raise RequestError(
            env.id,
            ErrorCode.UNSUPPORTED_VERSION,
            f"{API_NAMES[env.api]} version {env.v} is not served (only {VERSION})",
            env.api,
        )
    try:
        body = decoder.decode(env.body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise RequestError(
            env.id, ErrorCode.INVALID_REQUEST, f"invalid {API_NAMES[env.api]} body: {exc}", env.api
        ) from None
    return Request(env.api, env.v, env.id, env.client_id, body)


def _envelope_error(payload: bytes, exc: Exception) -> ProtocolError:
    try:
        obj = _any_decoder.decode(payload)
    except msgspec.DecodeError:
        return BadFrame(f"not a MessagePack frame: {exc}")
    if not isinstance(obj, dict):
        return BadFrame("the frame is not a map")
    rid = obj.get("id")
    if type(rid) is not int or not -(2**31) <= rid < 2**31:
        return BadFrame(f"the request has no readable id: {exc}")
    return RequestError(rid, ErrorCode.INVALID_REQUEST, f"invalid request: {exc}")


def encode_request(api: int, id: int, body: Any, client_id: str = "", v: int = VERSION) -> bytes:
    """A complete request frame (length prefix included); `body` is a struct or a dict."""
    return frame(_encoder.encode({"api": api, "v": v, "id": id, "client_id": client_id, "body": body}))


def encode_response(id: int, body: Any) -> bytes:
    """A complete response frame (length prefix included); `body` is a struct or a dict."""
    return frame(_encoder.encode({"id": id, "body": body}))


def decode_response(payload: bytes) -> tuple[int, dict[str, Any]]:
    """A response frame's id and its body as a plain dict."""
    obj = _any_decoder.decode(payload)
    if not isinstance(obj, dict) or type(obj.get("id")) is not int or not isinstance(obj.get("body"), dict):
        raise BadFrame("malformed response frame")
    return obj["id"], obj["body"]


def decode_response_body(api: int, payload: bytes) -> tuple[int, Message]:
    """A response frame's id and its body as the API's typed response struct."""
    env = _response_decoder.decode(payload)
    return env.id, _response_body_decoders[api].decode(env.body)


def to_builtins(body: Message) -> dict[str, Any]:
    """A request struct as the plain dict (PROTOCOL.md field names, bytes kept) the core takes."""
    return msgspec.to_builtins(body, builtin_types=(bytes,))


def api_versions_body() -> dict[str, Any]:
    return {
        "error_code": 0,
        "api_keys": [
            {"api_key": api, "min_version": lo, "max_version": hi}
            for api, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ],
    }


def precheck_error_body(api: int, body: Any, code: int, message: str | None = None) -> dict[str, Any]:
    """The response to a coordinator-level pre-check failure (coordinator-spec.md §2.1 table).

    SyncGroup turns COORDINATOR_LOAD_IN_PROGRESS into REBALANCE_IN_PROGRESS and Heartbeat into
    NONE, as Kafka does for clients that do not know the load error.
    """
    if api == JOIN_GROUP:
        return {
            "error_code": code,
            "generation_id": -1,
            "protocol_type": None,
            "protocol_name": None,
            "leader": "",
            "member_id": body.member_id,
            "members": [],
        }
    if api == SYNC_GROUP:
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            code = ErrorCode.REBALANCE_IN_PROGRESS
        return {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}
    if api == HEARTBEAT:
        return {"error_code": ErrorCode.NONE if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else code}
    if api == LEAVE_GROUP:
        return {"error_code": code, "members": []}
    if api == OFFSET_COMMIT:
        return {
            "topics": [
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": p.partition_index, "error_code": code} for p in t.partitions
                    ],
                }
                for t in body.topics
            ]
        }
    if api == OFFSET_FETCH:
        return {"error_code": code, "topics": []}
    if api == OFFSET_DELETE:
        return {"error_code": code, "topics": []}
    if api == FIND_COORDINATOR:
        return {"error_code": code, "error_message": message, "node_id": -1, "host": "", "port": -1}
    raise ValueError(f"no per-group pre-check for api {api}")


def described_error(group_id: str, code: int) -> dict[str, Any]:
    """A DescribeGroups entry for a group whose pre-check failed."""
    return {
        "error_code": code,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
