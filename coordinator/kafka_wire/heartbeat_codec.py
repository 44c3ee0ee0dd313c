"""ConsumerGroupHeartbeat packed and unpacked by hand: the Kafka listener's hottest request.

A KIP-848 member sends one every heartbeat interval, so its frames skip kafka-python's generic
codec (about 14 µs to encode an answer and 4 µs to decode a request, against a few for these).
Both functions produce exactly what kafka-python's classes do (tests/unit/coordinator/
test_kafka_heartbeat_codec.py checks them against `consumer_group_api` on random messages);
`decode_request` refuses a malformed body with `ValueError` and never reads past the frame.

    req = decode_request(frame, start, version)       # M.KafkaConsumerGroupHeartbeat
    body = encode_response(M.KafkaConsumerGroupHeartbeatResponse(...))   # the body, v0 and v1

`skip_tags` (a tagged-field section) also reads the flexible request header of every API.
"""

from __future__ import annotations

import struct
import uuid

from coordinator.kafka_wire import messages as M

NO_TAGS = b"\x00"  # an empty tagged-field section
# Bounds of what a heartbeat may carry: far above any real member (Kafka's own limits are the
# frame size), low enough that a forged count cannot make the node allocate for it.
MAX_ITEMS = 1 << 20

_I32 = struct.Struct(">i")
_FIXED = struct.Struct(">ih")  # throttle_time_ms (0), error_code
_EPOCHS = struct.Struct(">ii")  # member_epoch, heartbeat_interval_ms
_ZERO = uuid.UUID(int=0)


# ---------------------------------------------------------------------------- decoding


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes, pos: int):
        self.data, self.pos = data, pos

    def uvarint(self) -> int:
        data, pos = self.data, self.pos
        value = shift = 0
        while True:
            if pos >= len(data) or shift > 28:
                raise ValueError("a varint runs past the frame")
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return value
            shift += 7

    def int32(self) -> int:
        pos = self.pos
        if pos + 4 > len(self.data):
            raise ValueError("an int32 runs past the frame")
        self.pos = pos + 4
        return _I32.unpack_from(self.data, pos)[0]

    def string(self, nullable: bool) -> str | None:
        n = self.uvarint()
        if n == 0:
            if nullable:
                return None
            raise ValueError("a null string where one is required")
        start, end = self.pos, self.pos + n - 1
        if end > len(self.data):
            raise ValueError("a string runs past the frame")
        self.pos = end
        return bytes(self.data[start:end]).decode("utf-8")

    def count(self) -> int | None:
        """A compact array's length (None: null)."""
        n = self.uvarint()
        if n - 1 > MAX_ITEMS:
            raise ValueError(f"an array of {n - 1} items")
        return None if n == 0 else n - 1

    def skip_tags(self, most: int = MAX_ITEMS) -> None:
        count = self.uvarint()
        if count > most:
            raise ValueError(f"{count} tagged fields")
        for _ in range(count):
            self.uvarint()
            size = self.uvarint()
            self.pos += size
            if self.pos > len(self.data):
                raise ValueError("a tagged field runs past the frame")

    def uuid(self) -> uuid.UUID | None:
        pos = self.pos
        if pos + 16 > len(self.data):
            raise ValueError("a UUID runs past the frame")
        self.pos = pos + 16
        u = uuid.UUID(bytes=bytes(self.data[pos : pos + 16]))
        return None if u == _ZERO else u  # as kafka-python decodes the zero id


def skip_tags(data: bytes, pos: int, most: int = MAX_ITEMS) -> int:
    """Where a tagged-field section at `pos` ends (a flexible request header's too)."""
    r = _Reader(data, pos)
    r.skip_tags(most)
    return r.pos


def decode_request(data: bytes, pos: int, version: int) -> M.KafkaConsumerGroupHeartbeat:
    """The request body at `pos` of `data` (v0 or v1); ValueError if it is malformed."""
    r = _Reader(data, pos)
    group_id = r.string(False)
    member_id = r.string(False)
    member_epoch = r.int32()
    instance_id = r.string(True)
    rack_id = r.string(True)
    rebalance_timeout_ms = r.int32()
    n = r.count()
    names = None if n is None else [r.string(False) for _ in range(n)]
    regex = r.string(True) if version >= 1 else None
    assignor = r.string(True)
    n = r.count()
    owned = None
    if n is not None:
        owned = []
        for _ in range(n):
            topic_id = r.uuid()
            k = r.count()
            if k is None:
                raise ValueError("a null partition list")
            if r.pos + 4 * k > len(data):
                raise ValueError("a partition list runs past the frame")
            partitions = list(struct.unpack_from(f">{k}i", data, r.pos))
            r.pos += 4 * k
            r.skip_tags()
            owned.append(M.TopicIdPartitions(topic_id=topic_id, partitions=partitions))
    r.skip_tags()
    return M.KafkaConsumerGroupHeartbeat(
        group_id=group_id,
        member_id=member_id,
        member_epoch=member_epoch,
        instance_id=instance_id,
        rack_id=rack_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=names,
        subscribed_topic_regex=regex,
        server_assignor=assignor,
        topic_partitions=owned,
    )


# ---------------------------------------------------------------------------- encoding


def uvarint_bytes(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _compact_string(s: str | None) -> bytes:
    if s is None:
        return b"\x00"
    raw = s.encode()
    return uvarint_bytes(len(raw) + 1) + raw


def encode_response(body: M.KafkaConsumerGroupHeartbeatResponse) -> bytes:
    """The response body, v0 and v1 alike (the same fields, all flexible)."""
    out = [
        _FIXED.pack(0, body.error_code),
        _compact_string(body.error_message),
        _compact_string(body.member_id),
        _EPOCHS.pack(body.member_epoch, body.heartbeat_interval_ms),
    ]
    a = body.assignment
    if a is None:
        out.append(b"\xff")  # a null struct: int8 -1
    else:
        out.append(b"\x01")
        out.append(uvarint_bytes(len(a.topic_partitions) + 1))
        for t in a.topic_partitions:
            out.append(t.topic_id.bytes)
            out.append(uvarint_bytes(len(t.partitions) + 1))
            out.append(struct.pack(f">{len(t.partitions)}i", *t.partitions))
            out.append(NO_TAGS)
        out.append(NO_TAGS)  # the assignment's tagged fields
    out.append(NO_TAGS)  # the body's
    return b"".join(out)
