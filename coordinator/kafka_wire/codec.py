"""Kafka's binary protocol onto the node's structs: the one module that imports kafka-python's classes.

A request frame (the 4-byte size already stripped) is decoded with kafka-python 3.0.12's
generated request class for its api key and version, then turned into the project's struct:
`coordinator/wire/schema.py` for the group APIs (the same structs the native codec produces, so
the same core serves both listeners), `messages` for the data plane. A response struct goes the
other way: its fields are renamed where Kafka's names differ, the fields the answered version
lacks are dropped, and the result is encoded with the matching response class and header.

    req = decode_request(frame)            # raises Unsupported / BadRequest: close the connection
    req.api_key, req.api_version, req.correlation_id, req.client_id, req.body
    out = encode_response(req.api_key, req.api_version, req.correlation_id, body, req.body)

The versions served are `VERSIONS`; the flexible ones among them (tagged fields, request header v2,
response header v1) are looked up in `_FLEXIBLE_REQUESTS`/`_FLEXIBLE_RESPONSES`. ApiVersions above
v2 is answered the KIP-511 way: a v0 body with UNSUPPORTED_VERSION and the supported ranges
(`api_versions_fallback`), which every client reads and retries at our maximum. Any other api or
version closes the connection, as Kafka does.
"""

from __future__ import annotations

import struct
import uuid
from dataclasses import dataclass
from typing import Any

import msgspec
from kafka.protocol.admin.groups import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.metadata.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from coordinator.kafka_wire import group_codec, heartbeat_codec
from coordinator.kafka_wire import messages as M
from coordinator.kafka_wire.consumer_group_api import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from coordinator.wire import schema as S

# (min, max) served per api, flexible versions included where a client needs them. Produce is
# advertised from v3 because librdkafka fetches only from brokers that have it; ListOffsets and
# Metadata keep v0 for 0.8-era tools (Burrow); the other minima are Kafka 4.0's. JoinGroup below v4
# predates MEMBER_ID_REQUIRED (KIP-394): the listener takes that round trip for the member.
# SaslHandshake is v1 only: v0 switches the connection to unframed SASL tokens, which Kafka 4.0
# dropped (KIP-896) and no client that knows SaslAuthenticate sends.
VERSIONS: dict[int, tuple[int, int]] = {
    M.PRODUCE: (3, 8),
    M.FETCH: (4, 11),
    M.LIST_OFFSETS: (0, 5),
    M.METADATA: (0, 12),
    S.OFFSET_COMMIT: (2, 9),
    S.OFFSET_FETCH: (1, 9),
    S.FIND_COORDINATOR: (0, 2),
    S.JOIN_GROUP: (2, 5),
    S.HEARTBEAT: (0, 3),
    S.LEAVE_GROUP: (0, 3),
    S.SYNC_GROUP: (0, 3),
    S.DESCRIBE_GROUPS: (0, 4),
    S.LIST_GROUPS: (0, 5),
    S.API_VERSIONS: (0, 2),
    S.DELETE_GROUPS: (0, 1),
    M.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    M.CONSUMER_GROUP_DESCRIBE: (0, 0),
    S.SASL_HANDSHAKE: (1, 1),
    S.SASL_AUTHENTICATE: (0, 2),
}

# api key -> (request class, response class, project request struct)
_CLASSES: dict[int, tuple[Any, Any, type[S.Message]]] = {
    M.PRODUCE: (ProduceRequest, ProduceResponse, M.ProduceRequest),
    M.FETCH: (FetchRequest, FetchResponse, M.FetchRequest),
    M.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse, M.ListOffsetsRequest),
    M.METADATA: (MetadataRequest, MetadataResponse, M.MetadataRequest),
    S.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse, S.OffsetCommitRequest),
    S.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse, S.OffsetFetchRequest),
    S.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse, S.FindCoordinatorRequest),
    S.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse, S.JoinGroupRequest),
    S.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse, S.HeartbeatRequest),
    S.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse, S.LeaveGroupRequest),
    S.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse, S.SyncGroupRequest),
    S.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse, S.DescribeGroupsRequest),
    S.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse, S.ListGroupsRequest),
    S.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse, S.ApiVersionsRequest),
    S.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse, S.DeleteGroupsRequest),
    M.CONSUMER_GROUP_HEARTBEAT: (
        ConsumerGroupHeartbeatRequest,
        ConsumerGroupHeartbeatResponse,
        M.KafkaConsumerGroupHeartbeat,
    ),
    M.CONSUMER_GROUP_DESCRIBE: (
        ConsumerGroupDescribeRequest,
        ConsumerGroupDescribeResponse,
        S.ConsumerGroupDescribeRequest,
    ),
    S.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse, S.SaslHandshakeRequest),
    S.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse, S.SaslAuthenticateRequest),
}

NAMES: dict[int, str] = {
    M.PRODUCE: "Produce",
    M.FETCH: "Fetch",
    M.LIST_OFFSETS: "ListOffsets",
    M.METADATA: "Metadata",
    **{k: S.API_NAMES[k] for k in VERSIONS if k in S.API_NAMES},
}

_PEEK = struct.Struct(">hhi")
_HEADER = struct.Struct(">hhih")  # request header v1: api key, version, correlation id, client id length
_I16 = struct.Struct(">h")
_CLIENT_ID_AT = 8  # the client id's length, in request header v1
_RESPONSE_HEAD = struct.Struct(">ii")  # frame size, response header v0 (correlation id)
_NO_TAGS = b"\x00"  # an empty tagged-field section: response header v1 is v0 plus one
# The most tagged fields a request header may carry (Kafka's clients send none or one).
MAX_HEADER_TAGS = 64
# Protocol types the Kafka listener reports as `consumer` in ListGroups: scheme two's incremental
# form (`server_side.incremental_groups.INCREMENTAL_PROTOCOL_TYPE`) is KIP-848's consumer group,
# and Kafka's clients list only groups of type `consumer` (or none). The native wire keeps it.
LISTED_AS_CONSUMER = frozenset({"consumer-incremental"})
# The (api, version) pairs whose request header (v2) and response header (v1) carry tagged fields.
_FLEXIBLE_REQUESTS = frozenset(
    (api, v)
    for api, (lo, hi) in VERSIONS.items()
    for v in range(lo, hi + 1)
    if _CLASSES[api][0].flexible_version_q(v)
)
_FLEXIBLE_RESPONSES = frozenset(
    (api, v)
    for api, (lo, hi) in VERSIONS.items()
    for v in range(lo, hi + 1)
    if api != S.API_VERSIONS and _CLASSES[api][1].flexible_version_q(v)  # ApiVersions answers with v0
)


# Requests whose fields differ from the project struct's (`_fix_request`); the others convert
# straight from the decoded message's attributes.
_FIXED = frozenset(
    {
        M.METADATA,
        S.OFFSET_COMMIT,
        S.OFFSET_FETCH,
        S.LEAVE_GROUP,
        S.FIND_COORDINATOR,
        M.LIST_OFFSETS,
        M.PRODUCE,
    }
)


class BadRequest(Exception):
    """A frame that cannot be answered: the connection is closed (Kafka's rule)."""


class Unsupported(BadRequest):
    """An api or version this listener does not serve (other than ApiVersions)."""


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond per request
class KafkaRequest:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str
    body: Any  # the project struct; None for an ApiVersions version answered with the fallback

    @property
    def name(self) -> str:
        return NAMES.get(self.api_key, str(self.api_key))


def peek_api(frame: bytes) -> int | None:
    """A request frame's api key, from its header alone (None for a frame too short to have one)."""
    return _PEEK.unpack_from(frame)[0] if len(frame) >= _PEEK.size else None


def decode_request(frame: bytes) -> KafkaRequest:
    """Decode one request frame (header and body); raises `BadRequest` or `Unsupported`."""
    if len(frame) < _PEEK.size:
        raise BadRequest(f"request of {len(frame)} bytes has no header")
    api, version, correlation_id = _PEEK.unpack_from(frame)
    fast = group_codec.DECODERS.get((api, version))
    if fast is not None:  # Heartbeat, OffsetCommit: straight into the project struct
        client_id, start = _client_id(frame)
        try:
            body = fast(frame, start, version)
        except (ValueError, struct.error) as exc:
            raise BadRequest(f"undecodable {NAMES[api]} v{version}: {exc}") from None
        return KafkaRequest(api, version, correlation_id, client_id, body)
    served = VERSIONS.get(api)
    if api == S.API_VERSIONS and version > served[1]:
        return KafkaRequest(api, version, correlation_id, "", None)
    if served is None or not served[0] <= version <= served[1]:
        raise Unsupported(f"api {api} version {version} is not served")
    request_class, _, struct_type = _CLASSES[api]
    client_id, start = _client_id(frame)
    if (api, version) in _FLEXIBLE_REQUESTS:  # header v2: v1 plus a tagged-field section
        start = start + 1 if start < len(frame) and frame[start] == 0 else _skip_tags(frame, start)
    if api == M.CONSUMER_GROUP_HEARTBEAT:  # the hottest request: unpacked by hand
        try:
            body = heartbeat_codec.decode_request(frame, start, version)
        except ValueError as exc:
            raise BadRequest(f"undecodable ConsumerGroupHeartbeat v{version}: {exc}") from None
        return KafkaRequest(api, version, correlation_id, client_id, body)
    try:  # the body only: the header is read above
        msg = request_class.decode(memoryview(frame)[start:], version=version, header=False)
        values = msg.to_dict(json=False) if api in _FIXED else msg
    except Exception as exc:  # kafka-python raises whatever its decoder hits on bad bytes
        raise BadRequest(f"undecodable {NAMES[api]} v{version}: {type(exc).__name__}: {exc}") from None
    try:
        if api in _FIXED:
            _fix_request(api, version, values)
            body = msgspec.convert(values, struct_type)
        else:  # same field names: read the decoded message's attributes, no dict in between
            body = msgspec.convert(values, struct_type, from_attributes=True)
    except (msgspec.ValidationError, TypeError) as exc:
        raise BadRequest(f"invalid {NAMES[api]} v{version}: {exc}") from None
    return KafkaRequest(api, version, correlation_id, client_id, body)


def _client_id(frame: bytes) -> tuple[str, int]:
    """Request header v1's nullable client id, and where the body starts."""
    if len(frame) < _HEADER.size:
        raise BadRequest(f"request of {len(frame)} bytes has no client id")
    n = _I16.unpack_from(frame, _CLIENT_ID_AT)[0]
    if n <= 0:
        if n < -1:
            raise BadRequest(f"a client id of {n} bytes")
        return "", _HEADER.size
    start = _HEADER.size + n
    if start > len(frame):
        raise BadRequest(f"a client id of {n} bytes in a request of {len(frame)}")
    return str(frame[_HEADER.size : start], "utf-8", "replace"), start


def _skip_tags(frame: bytes, pos: int) -> int:
    """Skip request header v2's tagged fields (none are defined for requests): where the body starts."""
    try:
        return heartbeat_codec.skip_tags(frame, pos, MAX_HEADER_TAGS)
    except ValueError as exc:
        raise BadRequest(f"request header: {exc}") from None


def _fix_request(api: int, version: int, d: dict[str, Any]) -> None:  # for the apis in _FIXED
    """Kafka's request fields -> the project struct's, where they differ."""
    if api == M.METADATA:
        topics = d.get("topics")
        names = None if topics is None else [t["name"] for t in topics if t.get("name") is not None]
        if topics:  # v10+: a topic asked for by id has a null name
            d["topic_ids"] = [t["topic_id"] for t in topics if t.get("name") is None and t.get("topic_id")]
        d["topics"] = None if (version == 0 and not names) else names  # v0: empty means all
    elif api == S.OFFSET_FETCH and version >= 8:
        groups = d.pop("groups", None) or []
        if len(groups) != 1:  # Kafka's clients ask for one group per request
            raise BadRequest(f"OffsetFetch v{version} for {len(groups)} groups; this listener takes one")
        g = groups[0]
        d["group_id"] = g["group_id"]
        d["topics"] = g.get("topics")
        d["member_id"] = g.get("member_id")
        d["member_epoch"] = g.get("member_epoch", -1)
    elif api == S.OFFSET_COMMIT:
        d["generation_id"] = d.pop("generation_id_or_member_epoch", -1)
    elif api == S.LEAVE_GROUP and version < 3:
        d["members"] = [{"member_id": d.pop("member_id", "")}]
    elif api == S.FIND_COORDINATOR:
        d.setdefault("key_type", 0)
    elif api == M.LIST_OFFSETS:
        for t in d.get("topics") or []:
            for p in t["partitions"]:
                p.setdefault("timestamp", M.LATEST_TIMESTAMP)
    elif api == M.PRODUCE:
        for t in d.get("topic_data") or []:
            for p in t["partition_data"]:
                if p.get("records") is not None:
                    p["records"] = bytes(p["records"])


# ------------------------------------------------------------------------------ responses


def api_versions_body(error_code: int = 0) -> S.ApiVersionsResponse:
    return S.ApiVersionsResponse(
        error_code=error_code,
        api_keys=[
            S.ApiVersionsKey(api_key=api, min_version=lo, max_version=hi)
            for api, (lo, hi) in sorted(VERSIONS.items())
        ],
    )


def api_versions_fallback(correlation_id: int) -> bytes:
    """The answer to ApiVersions above our maximum: a v0 body with UNSUPPORTED_VERSION (KIP-511)."""
    return encode_response(S.API_VERSIONS, 0, correlation_id, api_versions_body(E.UNSUPPORTED_VERSION), None)


def error_body(api: int, request: Any, code: int, message: str | None = None) -> S.Message:
    """`api`'s response carrying `code` (for an `ErrorResponse` of the core, or an unavailable node)."""
    if api == S.DESCRIBE_GROUPS:
        return S.DescribeGroupsResponse(groups=[P.described_error(g, code) for g in request.groups])
    if api == S.LIST_GROUPS:
        return S.ListGroupsResponse(error_code=code)
    if api == S.DELETE_GROUPS:
        return S.DeleteGroupsResponse(
            results=[S.DeleteGroupsResult(group_id=g, error_code=code) for g in request.groups_names]
        )
    if api == S.API_VERSIONS:
        return api_versions_body(code)
    return P.precheck_error_body(api, request, code, message)


def encode_response(api: int, version: int, correlation_id: int, body: S.Message, request: Any) -> bytes:
    """The framed Kafka response (size, header, body) of `body` to `api` at `version`.

    `body` is the project struct; for KIP-848's APIs, the Kafka form `kafka_wire.topic_map` makes."""
    if isinstance(body, S.ErrorResponse):
        body = error_body(api, request, body.error_code, body.error_message)
    fast = group_codec.ENCODERS.get((api, version))
    if fast is not None and type(body) is fast[0]:  # Heartbeat, OffsetCommit: packed directly
        return fast[1](version, correlation_id, body)
    if api == M.CONSUMER_GROUP_HEARTBEAT and type(body) is M.KafkaConsumerGroupHeartbeatResponse:
        body_bytes = _NO_TAGS + heartbeat_codec.encode_response(body)  # response header v1, the body
        return _RESPONSE_HEAD.pack(len(body_bytes) + 4, correlation_id) + body_bytes
    values = msgspec.to_builtins(body, builtin_types=(bytes, bytearray, memoryview, uuid.UUID))
    _fix_response(api, version, values, request)
    response_class = _CLASSES[api][1]
    body_bytes = bytes(_build(response_class, values, version).encode(version=version, header=False))
    if (api, version) in _FLEXIBLE_RESPONSES:
        body_bytes = _NO_TAGS + body_bytes  # response header v1 (ApiVersions always answers with v0)
    return _RESPONSE_HEAD.pack(len(body_bytes) + 4, correlation_id) + body_bytes


def _fix_response(api: int, version: int, d: dict[str, Any], request: Any) -> None:
    """The project struct's response fields -> Kafka's, per version."""
    if api == S.JOIN_GROUP:
        if d.get("protocol_name") is None:
            d["protocol_name"] = ""
    elif api == S.LIST_GROUPS:
        for g in d.get("groups", []):
            consumer = g["protocol_type"] in LISTED_AS_CONSUMER
            g["group_type"] = "consumer" if consumer else "classic"  # v5
            if consumer:
                g["protocol_type"] = "consumer"
    elif api == S.LEAVE_GROUP and version < 3:
        for m in d.get("members", []):
            if not d["error_code"] and m["error_code"]:
                d["error_code"] = m["error_code"]
    elif api == S.OFFSET_FETCH and version >= 8:  # one group per request (see `_fix_request`)
        group = request.group_id if request is not None else ""
        d["groups"] = [
            {"group_id": group, "topics": d.pop("topics", []), "error_code": d.pop("error_code", 0)}
        ]
    elif api == S.OFFSET_FETCH and version < 2 and d.get("error_code"):
        # v1 has no top-level error: the group's error goes to every requested partition.
        d["topics"] = [
            {
                "name": t.name,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "metadata": "",
                        "error_code": d["error_code"],
                    }
                    for p in t.partition_indexes
                ],
            }
            for t in (request.topics or [])
        ]
    elif api == M.LIST_OFFSETS and version == 0:
        for t in d["topics"]:
            for p in t["partitions"]:
                p["old_style_offsets"] = [p["offset"]] if p["offset"] >= 0 else []


def _build(container: Any, values: dict[str, Any], version: int | None) -> Any:
    """A kafka-python data container from a dict: unknown keys dropped, nested structs built."""
    fields = container._struct.fields
    kwargs = {}
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            continue
        if value is not None and field.is_struct_array():
            value = [_build(field.data_class, v, None) for v in value]
        elif value is not None and field.is_struct():
            value = _build(field.data_class, value, None)
        kwargs[name] = value
    return container(version=version, **kwargs)
