"""Heartbeat and OffsetCommit packed and unpacked by hand: the classic group APIs' hottest requests.

Every member of a classic group sends a Heartbeat each `heartbeat.interval.ms` and, with
auto-commit, an OffsetCommit each `auto.commit.interval.ms`: their frames skip kafka-python's
generic codec (a decode into its message class, then a conversion into the project struct)
and are read straight into the structs the native listener hands the core
(`coordinator/wire/schema.py`), and their answers are packed directly. Only the non-flexible
versions are here (Heartbeat v0-v3, OffsetCommit v2-v7: `DECODERS`, `ENCODERS`); the others go
through the generic codec. tests/unit/coordinator/test_kafka_group_codec.py checks both
directions against kafka-python's classes across these versions.

    body = decode_heartbeat(frame, start, version)           # S.HeartbeatRequest
    body = decode_offset_commit(frame, start, version)       # S.OffsetCommitRequest
    frame = encode_heartbeat(version, correlation_id, S.HeartbeatResponse(error_code=0))

A decoder raises `ValueError` (or `struct.error`) for a body it cannot read, and never reads
past the frame: where kafka-python silently reads a string cut short by the end of the frame,
or a negative array length as an empty array, these refuse the frame. A null field the project struct requires
(a member id, a topic name) is refused as the generic conversion refuses it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

from coordinator.wire import schema as S

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_PARTITION_V2 = struct.Struct(">iq")  # partition_index, committed_offset
_PARTITION_V6 = struct.Struct(">iqi")  # ... and committed_leader_epoch (read, not kept)
_HEAD = struct.Struct(">ii")  # frame size, response header v0 (the correlation id)
_HEARTBEAT_V0 = struct.Struct(">iih")  # size, correlation id, error_code
_HEARTBEAT_V1 = struct.Struct(">iiih")  # ... throttle_time_ms (0) before error_code
_RESULT = struct.Struct(">ih")  # partition_index, error_code


# ---------------------------------------------------------------------------- decoding


def _string(data: bytes, pos: int, what: str, nullable: bool = False) -> tuple[str | None, int]:
    """A STRING / NULLABLE_STRING (int16 length, -1 for null) at `pos`: its value, where it ends."""
    n = _I16.unpack_from(data, pos)[0]
    pos += 2
    end = pos + n
    if n < 0 or end > len(data):
        if n == -1 and nullable:
            return None, pos
        raise ValueError(f"{what} is null" if n == -1 else f"{what} of {n} bytes runs past the frame")
    return str(data[pos:end], "utf-8"), end


def _count(data: bytes, pos: int, what: str, item_bytes: int) -> int:
    """An ARRAY's length at `pos` (null refused: the struct's lists are required). `item_bytes`:
    the least one item takes, so that a forged length is refused before any item is read."""
    n = _I32.unpack_from(data, pos)[0]
    if n < 0 or pos + 4 + n * item_bytes > len(data):
        raise ValueError(f"{what} is null" if n == -1 else f"{what} of {n} items runs past the frame")
    return n


def decode_heartbeat(data: bytes, pos: int, version: int) -> S.HeartbeatRequest:
    """Heartbeat v0-v3's body at `pos` of `data`; ValueError (or struct.error: a fixed-size field
    past the frame) if it is malformed. The two strings every heartbeat has are read inline (the
    listener's hottest lines); anything unusual about them goes to `_string`, which says what."""
    size = len(data)
    n = _I16.unpack_from(data, pos)[0]
    end = pos + 2 + n
    if n < 0 or end > size:
        group_id, end = _string(data, pos, "group_id", nullable=True)  # null: INVALID_GROUP_ID, as Kafka
    else:
        group_id = str(data[pos + 2 : end], "utf-8")
    generation_id = _I32.unpack_from(data, end)[0]
    pos = end + 4
    n = _I16.unpack_from(data, pos)[0]
    end = pos + 2 + n
    if n < 0 or end > size:
        member_id, end = _string(data, pos, "member_id")
    else:
        member_id = str(data[pos + 2 : end], "utf-8")
    instance_id = _string(data, end, "group_instance_id", nullable=True)[0] if version >= 3 else None
    return S.HeartbeatRequest(
        group_id=group_id, generation_id=generation_id, member_id=member_id, group_instance_id=instance_id
    )


def decode_offset_commit(data: bytes, pos: int, version: int) -> S.OffsetCommitRequest:
    """OffsetCommit v2-v7's body at `pos` of `data`; ValueError (or struct.error) if it is malformed."""
    group_id, pos = _string(data, pos, "group_id", nullable=True)
    generation_id = _I32.unpack_from(data, pos)[0]
    member_id, pos = _string(data, pos + 4, "member_id")
    retention_time_ms = -1
    if version <= 4:
        retention_time_ms = _I64.unpack_from(data, pos)[0]
        pos += 8
    instance_id = None
    if version >= 7:
        instance_id, pos = _string(data, pos, "group_instance_id", nullable=True)
    fixed = _PARTITION_V6 if version >= 6 else _PARTITION_V2
    unpack, size = fixed.unpack_from, fixed.size
    topics = []
    n_topics = _count(data, pos, "topics", 6)  # a topic: its name's length, its partition count
    pos += 4
    for _ in range(n_topics):
        name, pos = _string(data, pos, "a topic name")
        n = _count(data, pos, "partitions", size + 2)
        pos += 4
        partitions = []
        for _ in range(n):
            index, offset = unpack(data, pos)[:2]  # (struct.error past the frame)
            metadata, pos = _string(data, pos + size, "committed_metadata", nullable=True)
            partitions.append(
                S.OffsetCommitPartition(
                    partition_index=index, committed_offset=offset, committed_metadata=metadata
                )
            )
        topics.append(S.OffsetCommitTopic(name=name, partitions=partitions))
    return S.OffsetCommitRequest(
        group_id=group_id,
        generation_id=generation_id,
        member_id=member_id,
        group_instance_id=instance_id,
        topics=topics,
        retention_time_ms=retention_time_ms,
    )


# ---------------------------------------------------------------------------- encoding


def encode_heartbeat(version: int, correlation_id: int, body: S.HeartbeatResponse) -> bytes:
    """The framed answer (size, header, body) of Heartbeat v0-v3."""
    if version == 0:
        return _HEARTBEAT_V0.pack(6, correlation_id, body.error_code)
    return _HEARTBEAT_V1.pack(10, correlation_id, 0, body.error_code)


def _string_bytes(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


def encode_offset_commit(version: int, correlation_id: int, body: S.OffsetCommitResponse) -> bytes:
    """The framed answer (size, header, body) of OffsetCommit v2-v7."""
    out = [b"", _I32.pack(0)] if version >= 3 else [b""]  # the head, throttle_time_ms
    out.append(_I32.pack(len(body.topics)))
    for t in body.topics:
        out.append(_string_bytes(t.name))
        out.append(_I32.pack(len(t.partitions)))
        out.extend(_RESULT.pack(p.partition_index, p.error_code) for p in t.partitions)
    size = sum(map(len, out))
    out[0] = _HEAD.pack(size + 4, correlation_id)
    return b"".join(out)


# api key -> (the versions served here, the decoder of a request body, the encoder of its answer)
Decoder = Callable[[bytes, int, int], Any]
Encoder = Callable[[int, int, Any], bytes]
DECODERS: dict[tuple[int, int], Decoder] = {
    **{(S.HEARTBEAT, v): decode_heartbeat for v in range(4)},
    **{(S.OFFSET_COMMIT, v): decode_offset_commit for v in range(2, 8)},
}
# The answer types each encoder packs (anything else, an ErrorResponse, goes the generic way).
ENCODERS: dict[tuple[int, int], tuple[type, Encoder]] = {
    **{(S.HEARTBEAT, v): (S.HeartbeatResponse, encode_heartbeat) for v in range(4)},
    **{(S.OFFSET_COMMIT, v): (S.OffsetCommitResponse, encode_offset_commit) for v in range(2, 8)},
}
