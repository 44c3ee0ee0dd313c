"""The node's wire codec, version 0 (docs/protocol.md): framing, envelopes, the field rules.

A frame is a 4-byte big-endian length and one MessagePack map. Requests are
`{"api", "v", "id", "client_id", "body"}`, responses `{"id", "body"}`. A body is decoded once,
straight into the API's struct of `coordinator/wire/schema.py`; a body that lacks a key or has a
value of the wrong type is answered with INVALID_REQUEST (42), an unknown api or version with
UNSUPPORTED_VERSION (35), and a frame whose correlation id cannot be read closes the connection.

    decoder = FrameDecoder(max_frame_bytes=1 << 20)
    for payload in decoder.feed(data):             # raises FrameTooLarge
        request = decode_request(payload)          # raises BadFrame (close) / RequestError (answer)
        ...                                        # request.body is e.g. a schema.HeartbeatRequest
        out = encode_response(request.id, HeartbeatResponse(error_code=0))

The rules are this codec's, not the structs': each API's request is read through a *view*
generated from its struct (`_wire_view`) that lists exactly the keys of docs/protocol.md, every
one required, group ids never nil; unknown keys are ignored everywhere (forward compatibility);
`bytes` fields are MessagePack bin. Another codec (Kafka's binary protocol) maps its own wire
onto the same structs.
"""

from __future__ import annotations

import functools
import operator
import struct
import types
import typing
from dataclasses import dataclass
from typing import Annotated, Any

import msgspec

# Kafka's API keys and error codes: one definition each, shared with the core.
from coordinator.wire import errors as ErrorCode  # ErrorCode.NONE, ErrorCode.NOT_COORDINATOR, ...
from coordinator.wire.schema import (
    API_NAMES,
    API_VERSIONS,
    APIS,
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_CLUSTER,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    NULL_GROUP_ID,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SERVER_HEARTBEAT,
    SERVER_JOIN_GROUP,
    SYNC_GROUP,
    WATCH_GROUP,
    ApiVersionsKey,
    ApiVersionsResponse,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
    DescribedConsumerGroup,
    DescribedGroup,
    ErrorResponse,
    FindCoordinatorResponse,
    HeartbeatResponse,
    Int32,
    JoinGroupResponse,
    LeaveGroupResponse,
    Message,
    OffsetCommitResponse,
    OffsetDeleteResponse,
    OffsetFetchResponse,
    ServerHeartbeatResponse,
    ServerJoinGroupResponse,
    SyncGroupResponse,
    WatchGroupResponse,
)

__all__ = [
    "API_NAMES",
    "API_VERSIONS",
    "CONSUMER_GROUP_HEARTBEAT",
    "DELETE_GROUPS",
    "DESCRIBE_CLUSTER",
    "DESCRIBE_GROUPS",
    "ERROR_NAMES",
    "ErrorCode",
    "FIND_COORDINATOR",
    "HEARTBEAT",
    "JOIN_GROUP",
    "LEAVE_GROUP",
    "LIST_GROUPS",
    "OFFSET_COMMIT",
    "OFFSET_DELETE",
    "OFFSET_FETCH",
    "SASL_AUTHENTICATE",
    "SASL_HANDSHAKE",
    "SERVER_HEARTBEAT",
    "SERVER_JOIN_GROUP",
    "SYNC_GROUP",
    "WATCH_GROUP",
]

VERSION = 0
DEFAULT_MAX_FRAME_BYTES = 1 << 20

ERROR_NAMES = ErrorCode.NAMES

# Every API this node serves, all at version 0 only (the ApiVersions answer).
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    key: (api.min_version, api.max_version) for key, api in APIS.items()
}

# Fields of the structs that Kafka has in later versions and version 0 of our wire does not carry
# (docs/protocol.md "Not part of version 0"): a client that sends them has them ignored.
_NOT_ON_WIRE: dict[int, frozenset[str]] = {
    OFFSET_COMMIT: frozenset({"retention_time_ms"}),
    OFFSET_FETCH: frozenset({"require_stable", "member_id", "member_epoch"}),
    LIST_GROUPS: frozenset({"types_filter"}),
    CONSUMER_GROUP_HEARTBEAT: frozenset({"instance_id", "rack_id", "subscribed_topic_regex"}),
    CONSUMER_GROUP_DESCRIBE: frozenset({"include_authorized_operations"}),
}


def _wire_type(tp: Any) -> Any:
    """`tp` as version 0 carries it: a group id is never nil, every key of an entry is required."""
    origin = typing.get_origin(tp)
    if origin is Annotated:
        inner, *meta = typing.get_args(tp)
        if any(m is NULL_GROUP_ID for m in meta):
            return str
        return Annotated[(_wire_type(inner), *meta)]
    if origin is list:
        return list[_wire_type(typing.get_args(tp)[0])]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_wire_type(a) for a in typing.get_args(tp)))
    if isinstance(tp, type) and issubclass(tp, Message):
        return _entry_view(tp)
    return tp


def _entry_view(cls: type[Message]) -> type[Message]:
    """A nested entry (a leaving member, a committed partition) as version 0 reads it: the
    schema's struct itself, or a subclass of it with every field required and narrowed, so a
    decoded entry needs no conversion afterwards."""
    hints = typing.get_type_hints(cls, include_extras=True)
    fields = [(f, _wire_type(hints[f])) for f in cls.__struct_fields__]
    if not cls.__struct_defaults__ and all(t == hints[f] for f, t in fields):
        return cls
    return msgspec.defstruct(f"{cls.__name__}V{VERSION}", fields, bases=(cls,), kw_only=True)


def _wire_view(api: int) -> tuple[type[msgspec.Struct], tuple[str, ...]]:
    """The version-0 view of `api`'s request struct: its wire keys, in order, all required.

    Nested entries (protocols, partitions, ...) are the schema's own structs, shared as they are.
    """
    cls = APIS[api].request
    hints = typing.get_type_hints(cls, include_extras=True)
    names = tuple(f for f in cls.__struct_fields__ if f not in _NOT_ON_WIRE.get(api, ()))
    view = msgspec.defstruct(
        f"{cls.__name__}V{VERSION}", [(f, _wire_type(hints[f])) for f in names], frozen=True
    )
    return view, names


_VIEWS = {api: _wire_view(api) for api in APIS}

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
_body_decoders = {
    api: (msgspec.msgpack.Decoder(view), APIS[api].request) for api, (view, _) in _VIEWS.items()
}
_response_body_decoders = {key: msgspec.msgpack.Decoder(api.response) for key, api in APIS.items()}
_asdict = msgspec.structs.asdict


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

    def body(self) -> ErrorResponse:
        return ErrorResponse(error_code=self.code, error_message=self.message)


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


# What decoding a hostile frame can raise: msgspec's own errors, invalid UTF-8 in a string, and
# nesting deeper than the decoder's recursion limit. Each is a bad frame, never a crash.
_DECODE_ERRORS = (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError, RecursionError)


def decode_request(payload: bytes) -> Request:
    """Decode and validate one request frame.

    Raises `BadFrame` when the id cannot be read (close the connection) and `RequestError`
    (INVALID_REQUEST or UNSUPPORTED_VERSION, answer it) otherwise.
    """
    try:
        env = _envelope_decoder.decode(payload)
    except _DECODE_ERRORS as exc:
        raise _envelope_error(payload, exc) from None
    body_decoder = _body_decoders.get(env.api)
    if body_decoder is None:
        raise RequestError(env.id, ErrorCode.UNSUPPORTED_VERSION, f"unknown api {env.api}", env.api)
    if env.v != VERSION:
        raise RequestError(
            env.id,
            ErrorCode.UNSUPPORTED_VERSION,
            f"{API_NAMES[env.api]} version {env.v} is not served (only {VERSION})",
            env.api,
        )
    decoder, request_type = body_decoder
    try:
        body = request_type(**_asdict(decoder.decode(env.body)))
    except _DECODE_ERRORS as exc:
        raise RequestError(
            env.id, ErrorCode.INVALID_REQUEST, f"invalid {API_NAMES[env.api]} body: {exc}", env.api
        ) from None
    return Request(env.api, env.v, env.id, env.client_id, body)


def peek_api(payload: bytes) -> int | None:
    """The api key of a request frame, from its envelope alone (None when the envelope is unreadable):
    a connection that has not authenticated has only a few APIs' bodies decoded."""
    try:
        return _envelope_decoder.decode(payload).api
    except _DECODE_ERRORS:
        return None


def _envelope_error(payload: bytes, exc: Exception) -> ProtocolError:
    try:
        obj = _any_decoder.decode(payload)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return BadFrame(f"not a MessagePack frame: {exc}")
    if not isinstance(obj, dict):
        return BadFrame("the frame is not a map")
    rid = obj.get("id")
    if type(rid) is not int or not -(2**31) <= rid < 2**31:
        return BadFrame(f"the request has no readable id: {exc}")
    return RequestError(rid, ErrorCode.INVALID_REQUEST, f"invalid request: {exc}")


def encode_request(api: int, id: int, body: Any, client_id: str = "", v: int = VERSION) -> bytes:
    """A complete request frame (length prefix included).

    `body` is the API's request struct (sent with exactly the keys of version 0) or, for test
    tooling that sends what a struct cannot hold, any MessagePack-able value as it is.
    """
    if isinstance(body, Message):
        _, names = _VIEWS[api]
        body = {name: getattr(body, name) for name in names}
    return frame(_encoder.encode({"api": api, "v": v, "id": id, "client_id": client_id, "body": body}))


def encode_response(id: int, body: Any) -> bytes:
    """A complete response frame (length prefix included); `body` is a response struct."""
    return frame(_encoder.encode({"id": id, "body": body}))


def decode_response(payload: bytes) -> tuple[int, dict[str, Any]]:
    """A response frame's id and its body as a plain dict (for tooling that checks raw answers)."""
    obj = _any_decoder.decode(payload)
    if not isinstance(obj, dict) or type(obj.get("id")) is not int or not isinstance(obj.get("body"), dict):
        raise BadFrame("malformed response frame")
    return obj["id"], obj["body"]


def decode_response_body(api: int, payload: bytes) -> tuple[int, Message]:
    """A response frame's id and its body as the API's response struct.

    A generic error answer (INVALID_REQUEST, UNSUPPORTED_VERSION) comes back as the API's struct
    with that `error_code` and every other field at its default. Raises `BadFrame`.
    """
    try:
        env = _response_decoder.decode(payload)
        return env.id, _response_body_decoders[api].decode(env.body)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise BadFrame(f"malformed {API_NAMES.get(api, api)} response: {exc}") from None


def api_versions_body() -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=0,
        api_keys=[
            ApiVersionsKey(api_key=api, min_version=lo, max_version=hi)
            for api, (lo, hi) in sorted(SUPPORTED_VERSIONS.items())
        ],
    )


def precheck_error_body(api: int, body: Any, code: int, message: str | None = None) -> Message:
    """The response to a coordinator-level pre-check failure (the node is unavailable, loading, or not
    the group's coordinator).

    SyncGroup turns COORDINATOR_LOAD_IN_PROGRESS into REBALANCE_IN_PROGRESS and Heartbeat into
    NONE, as Kafka does for clients that do not know the load error.
    """
    if api == JOIN_GROUP:
        return JoinGroupResponse(error_code=code, member_id=body.member_id)
    if api == SYNC_GROUP:
        if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            code = ErrorCode.REBALANCE_IN_PROGRESS
        return SyncGroupResponse(error_code=code)
    if api == HEARTBEAT:
        return HeartbeatResponse(
            error_code=ErrorCode.NONE if code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS else code
        )
    if api == LEAVE_GROUP:
        return LeaveGroupResponse(error_code=code)
    if api == OFFSET_COMMIT:
        return OffsetCommitResponse.with_error(body, code)
    if api == OFFSET_FETCH:
        return OffsetFetchResponse(error_code=code)
    if api == OFFSET_DELETE:
        return OffsetDeleteResponse(error_code=code)
    if api == FIND_COORDINATOR:
        return FindCoordinatorResponse(error_code=code, error_message=message)
    if api == SERVER_JOIN_GROUP:
        return ServerJoinGroupResponse(error_code=code, consumer_id=body.consumer_id)
    if api == CONSUMER_GROUP_HEARTBEAT:
        return ConsumerGroupHeartbeatResponse(
            error_code=code, error_message=message, member_id=body.member_id
        )
    if api == CONSUMER_GROUP_DESCRIBE:
        return ConsumerGroupDescribeResponse(
            groups=[described_consumer_error(g, code, message) for g in body.group_ids]
        )
    if api == SERVER_HEARTBEAT:  # COORDINATOR_LOAD_IN_PROGRESS is the draft's CoordinatorStartupNotComplete
        return ServerHeartbeatResponse(error_code=code)
    if api == WATCH_GROUP:
        return WatchGroupResponse(error_code=code)
    raise ValueError(f"no per-group pre-check for api {api}")


def described_consumer_error(group_id: str, code: int, message: str | None = None) -> DescribedConsumerGroup:
    """A ConsumerGroupDescribe entry for a group that cannot be described: fully formed, as Kafka
    clients parse every field of it."""
    return DescribedConsumerGroup(
        error_code=code,
        error_message=message,
        group_id=group_id,
        group_state="Dead",
        group_epoch=-1,
        assignment_epoch=-1,
        assignor_name="",
    )


def described_error(group_id: str | None, code: int) -> DescribedGroup:
    """A DescribeGroups entry for a group whose pre-check failed."""
    return DescribedGroup(error_code=code, group_id=group_id)
