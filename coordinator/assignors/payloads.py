"""Wire encodings of the consumer protocol: subscriptions, assignments and the sticky assignors' user data.

Two payload formats (docs/protocol.md, "Consumer protocol payloads"):

* **version 1, Kafka's binary ``ConsumerProtocol``** — what every member writes: a subscription is
  ``ConsumerProtocolSubscription`` v3 (topics, user data, owned partitions, generation, rack), an
  assignment ``ConsumerProtocolAssignment`` v3, eager ``sticky`` user data Kafka's
  ``StickyAssignorUserData`` V1 (no header) and ``cooperative-sticky`` user data an int32 generation.
  The same bytes a Java, librdkafka or kafka-python member sends, so they share a group with ours.
* **version 0, MessagePack maps** — what groupshift wrote before; still read (groups stored by an
  older node, members of an older release).

Readers tell them apart by the first byte: a MessagePack map starts with 0x80..0x8f, 0xde or 0xdf,
which no Kafka payload does (a version int16 or an array length int32 starts with 0x00; a negative
generation with 0xff).

>>> from core.types import TopicPartition
>>> sub = Subscription(["t0"], owned_partitions=[TopicPartition("t0", 1)], generation=3)
>>> data = encode_subscription(sub)
>>> data[:2], decode_subscription(data) == sub
(b'\\x00\\x03', True)
>>> decode_sticky_user_data(encode_sticky_user_data([TopicPartition("t0", 1)], generation=3))
([TopicPartition(topic='t0', partition=1)], 3)
>>> decode_sticky_user_data(b"not a payload")
([], -1)
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Iterable
from itertools import repeat

import msgspec

from coordinator.assignors.base import DEFAULT_GENERATION, Subscription, make_tp
from core.types import TopicPartition

#: The payload format members write (1: Kafka's binary ConsumerProtocol; 0: MessagePack, read only).
PAYLOAD_VERSION = 1
#: The ConsumerProtocolSubscription / ConsumerProtocolAssignment versions written (Kafka's highest).
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3
#: Bounds a reader enforces before allocating: topics in one payload, partitions per topic.
MAX_TOPICS = 1_000_000
MAX_PARTITIONS = 1_000_000


class TopicPartitions(msgspec.Struct, frozen=True, gc=False):
    """One topic's partitions, the unit in which every payload lists partitions.

    Not tracked by the garbage collector (it holds a name and a list of ints, so it cannot be part of a
    reference cycle): a sticky member's user data decodes to one of these per owned topic, a million in a
    large group, and tracked ones would make the collector's full passes walk them all.
    """

    topic: str
    partitions: list[int]


class MemberAssignment(msgspec.Struct, frozen=True):
    """A decoded assignment: the member's partitions and the assignor's user data."""

    partitions: list[TopicPartition]
    user_data: bytes = b""


def group_by_topic(partitions: Iterable[TopicPartition]) -> list[TopicPartitions]:
    """Partitions grouped per topic, topics in first-seen order, partitions in the given order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    return [TopicPartitions(t, ps) for t, ps in by_topic.items()]


def flatten(groups: Iterable[TopicPartitions]) -> list[TopicPartition]:
    """The inverse of `group_by_topic`."""
    out: list[TopicPartition] = []
    for g in groups:  # make_tp: no Python-level NamedTuple __new__ call per partition
        partitions = g.partitions
        if len(partitions) == 1:  # common in large groups: one partition of each of many topics
            out.append(make_tp((g.topic, partitions[0])))
        else:
            out.extend(map(make_tp, zip(repeat(g.topic), partitions)))
    return out


# ------------------------------------------------------------------ version 1: Kafka's binary format

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32X2 = struct.Struct(">ii")
_SWAP = sys.byteorder == "little"


def _string(s: str) -> bytes:
    raw = s.encode()
    return _I16.pack(len(raw)) + raw


def _nullable_bytes(b: bytes | None) -> bytes:
    return _I32.pack(-1) if b is None else _I32.pack(len(b)) + b


def _int32s(values: list[int]) -> bytes:
    a = array("i", values)
    if _SWAP:
        a.byteswap()
    return _I32.pack(len(values)) + a.tobytes()


def _topic_partitions(partitions: Iterable[TopicPartition]) -> bytes:
    groups = group_by_topic(partitions)
    return _I32.pack(len(groups)) + b"".join(_string(g.topic) + _int32s(g.partitions) for g in groups)


class _Reader:
    """Kafka's non-flexible primitive types off a byte string; `ValueError` when they run out or lie."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes) -> None:
        self.buf, self.pos = bytes(buf), 0  # a memoryview or bytearray too (no copy for bytes)

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def int16(self) -> int:
        (v,) = _I16.unpack_from(self.buf, self.pos)
        self.pos += 2
        return v

    def int32(self) -> int:
        (v,) = _I32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return v

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise ValueError(f"a field of {n} bytes runs past the payload's end")
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out

    def string(self, nullable: bool = False) -> str | None:
        n = self.int16()
        if n == -1 and nullable:
            return None
        return self._take(n).decode()

    def nullable_bytes(self) -> bytes | None:
        n = self.int32()
        return None if n == -1 else self._take(n)

    def count(self, bound: int) -> int:
        n = self.int32()
        if not 0 <= n <= bound:
            raise ValueError(f"an array of {n} entries (at most {bound:,})")
        return n

    def strings(self) -> list[str]:
        return [self.string() or "" for _ in range(self.count(MAX_TOPICS))]

    def topic_partitions(self, names: dict[bytes, str] | None = None) -> list[TopicPartition]:
        out, self.pos = _read_topic_partitions(self.buf, self.pos, {} if names is None else names)
        return out


def _read_topic_partitions(buf: bytes, pos: int, names: dict[bytes, str]) -> tuple[list[TopicPartition], int]:
    """`[{topic: string, partitions: [int32]}]` at `pos`, flattened, and the position after it.

    The hot loop of a large group's rebalance (a sticky leader reads every member's previous
    assignment: a million entries at once), so it is one tight loop: one unpack for a topic's
    partition count and its first partition, each topic name decoded once (``names``, raw name to
    name, is the caller's cache: one payload's, or all of a rebalance's)."""
    (n,) = _I32.unpack_from(buf, pos)
    pos += 4
    if not 0 <= n <= MAX_TOPICS:
        raise ValueError(f"an array of {n} topics (at most {MAX_TOPICS:,})")
    size = len(buf)
    out: list[TopicPartition] = []
    append, extend = out.append, out.extend
    i16, i32, i32x2 = _I16.unpack_from, _I32.unpack_from, _I32X2.unpack_from
    for _ in range(n):
        (length,) = i16(buf, pos)
        end = pos + 2 + length
        if length < 0 or end > size:
            raise ValueError(f"a topic name of {length} bytes runs past the payload's end")
        raw = buf[pos + 2 : end]
        topic = names.get(raw)
        if topic is None:
            topic = names[raw] = raw.decode()
        if end + 8 <= size:
            count, first = i32x2(buf, end)
        else:
            (count,), first = i32(buf, end), None  # too short for one partition: checked below
        if count == 1 and first is not None:
            append(make_tp((topic, first)))
            pos = end + 8
            continue
        pos = end + 4 + 4 * count
        if not 0 <= count <= MAX_PARTITIONS or pos > size:
            raise ValueError(f"an array of {count} partitions of {topic!r} runs past the payload's end")
        a = array("i")
        a.frombytes(buf[end + 4 : pos])
        if _SWAP:
            a.byteswap()
        extend(map(make_tp, zip(repeat(topic), a.tolist())))
    return out, pos


def _is_msgpack_map(data: bytes) -> bool:
    first = data[0]
    return 0x80 <= first <= 0x8F or first in (0xDE, 0xDF)


def _read(what: str, data: bytes, parse):
    try:
        return parse(_Reader(data))
    except (struct.error, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"malformed consumer {what}: {e}") from e


# ------------------------------------------------------------------ version 0: MessagePack (read)


class _SubscriptionV0(msgspec.Struct, frozen=True):
    version: int = 0
    topics: list[str] = []
    user_data: bytes | None = None
    owned_partitions: list[TopicPartitions] = []
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None


class _AssignmentV0(msgspec.Struct, frozen=True):
    version: int = 0
    assigned_partitions: list[TopicPartitions] = []
    user_data: bytes | None = None


class _StickyUserDataV1(msgspec.Struct, frozen=True):
    previous_assignment: list[TopicPartitions]
    generation: int


class _StickyUserDataV0(msgspec.Struct, frozen=True):
    previous_assignment: list[TopicPartitions]


class _CooperativeUserData(msgspec.Struct, frozen=True):
    generation: int


_msgpack_encoder = msgspec.msgpack.Encoder()
_subscription_v0 = msgspec.msgpack.Decoder(_SubscriptionV0)
_assignment_v0 = msgspec.msgpack.Decoder(_AssignmentV0)
_sticky_v1 = msgspec.msgpack.Decoder(_StickyUserDataV1)
_sticky_v0 = msgspec.msgpack.Decoder(_StickyUserDataV0)
_cooperative_v0 = msgspec.msgpack.Decoder(_CooperativeUserData)


def _msgpack(what: str, decoder: msgspec.msgpack.Decoder, data: bytes):
    try:
        return decoder.decode(data)
    except (msgspec.DecodeError, ValueError) as e:
        raise ValueError(f"malformed consumer {what}: {e}") from e


# ------------------------------------------------------------------ the payloads


def encode_subscription(subscription: Subscription) -> bytes:
    """JoinGroup metadata for a subscription (the group instance id travels outside it):
    ConsumerProtocolSubscription v3."""
    rack = subscription.rack
    return b"".join(
        (
            _I16.pack(SUBSCRIPTION_VERSION),
            _I32.pack(len(subscription.topics)),
            *map(_string, subscription.topics),
            _nullable_bytes(subscription.user_data or None),
            _topic_partitions(subscription.owned_partitions),
            _I32.pack(subscription.generation),
            _I16.pack(-1) if rack is None else _string(rack),
        )
    )


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """A `Subscription` from JoinGroup metadata of either format; `ValueError` on malformed bytes."""
    if not data:
        raise ValueError("malformed consumer subscription: empty")
    if _is_msgpack_map(data):
        v0 = _msgpack("subscription", _subscription_v0, data)
        return Subscription(
            topics=v0.topics,
            owned_partitions=flatten(v0.owned_partitions),
            generation=v0.generation_id,
            group_instance_id=group_instance_id,
            rack=v0.rack_id,
            user_data=v0.user_data or b"",
        )

    def parse(r: _Reader) -> Subscription:
        version = r.int16()
        if version < 0:
            raise ValueError(f"version {version}")
        topics, user_data = r.strings(), r.nullable_bytes()
        # Later fields are read only when the version has them (Kafka: "ignorable", default if absent).
        owned = r.topic_partitions() if version >= 1 else []
        generation = r.int32() if version >= 2 else DEFAULT_GENERATION
        rack = r.string(nullable=True) if version >= 3 else None
        return Subscription(
            topics=topics,
            owned_partitions=owned,
            generation=generation,
            group_instance_id=group_instance_id,
            rack=rack,
            user_data=user_data or b"",
        )

    return _read("subscription", data, parse)


def subscribed_topics(data: bytes) -> list[str]:
    """Only the topics of JoinGroup metadata (what the coordinator reads); `ValueError` if malformed."""
    if data and _is_msgpack_map(data):
        return _msgpack("subscription", _subscription_v0, data).topics

    def parse(r: _Reader) -> list[str]:
        if r.int16() < 0:
            raise ValueError("negative version")
        return r.strings()

    return _read("subscription", data, parse)


def payload_version(data: bytes) -> int:
    """The payload version of a subscription (or any payload): 0 for MessagePack, else 1."""
    return 0 if data and _is_msgpack_map(data) else 1


def encode_assignment(
    partitions: Iterable[TopicPartition], user_data: bytes = b"", version: int = PAYLOAD_VERSION
) -> bytes:
    """SyncGroup assignment bytes for one member: ConsumerProtocolAssignment v3, or (payload
    version 0, for a member that subscribed in it) the MessagePack map it reads."""
    if version == 0:
        return _msgpack_encoder.encode(_AssignmentV0(0, group_by_topic(partitions), user_data or None))
    return _I16.pack(ASSIGNMENT_VERSION) + _topic_partitions(partitions) + _nullable_bytes(user_data or None)


def decode_assignment(data: bytes) -> MemberAssignment:
    """A member's assignment from SyncGroup bytes of either format; empty bytes mean no partitions
    (Kafka's convention)."""
    if not data:
        return MemberAssignment([])
    if _is_msgpack_map(data):
        v0 = _msgpack("assignment", _assignment_v0, data)
        return MemberAssignment(flatten(v0.assigned_partitions), v0.user_data or b"")

    def parse(r: _Reader) -> MemberAssignment:
        if r.int16() < 0:
            raise ValueError("negative version")
        partitions = r.topic_partitions()
        user_data = r.nullable_bytes() if r.remaining() else None
        return MemberAssignment(partitions, user_data or b"")

    return _read("assignment", data, parse)


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None = None) -> bytes:
    """Eager sticky user data: Kafka's StickyAssignorUserData, the member's previous assignment and
    (V1) its generation; no version header, as Kafka writes it."""
    data = _topic_partitions(partitions)
    return data if generation is None else data + _I32.pack(generation)


def decode_sticky_user_data(
    data: bytes, names: dict[bytes, str] | None = None
) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation) as Kafka's `StickyAssignor.memberData` reads them.

    Empty data: nothing owned, no generation (-1). V0 data (no generation field): -1. Unreadable
    data: ignored, i.e. nothing owned and generation -1. ``names`` (UTF-8 name to name) is a cache of
    topic names shared by the payloads of one rebalance, so each name is decoded once, not once per
    member (see `topic_name_cache`).
    """
    if not data:
        return [], DEFAULT_GENERATION
    if _is_msgpack_map(data):
        try:
            v1 = _sticky_v1.decode(data)
            return flatten(v1.previous_assignment), v1.generation
        except (msgspec.DecodeError, ValueError):
            pass
        try:
            return flatten(_sticky_v0.decode(data).previous_assignment), DEFAULT_GENERATION
        except (msgspec.DecodeError, ValueError):
            return [], DEFAULT_GENERATION
    r = _Reader(data)
    try:
        owned = r.topic_partitions(names)
        return owned, r.int32() if r.remaining() >= 4 else DEFAULT_GENERATION
    except (struct.error, ValueError, UnicodeDecodeError):
        return [], DEFAULT_GENERATION


def topic_name_cache(topics: Iterable[str]) -> dict[bytes, str]:
    """A `decode_sticky_user_data` name cache holding ``topics`` (the very same `str` objects, so that
    dictionary look-ups by the decoded names compare identities). A name that cannot be UTF-8 encoded
    (a lone surrogate) is left out: it cannot be read from a payload either."""
    names: dict[bytes, str] = {}
    for topic in topics:
        try:
            names[topic.encode()] = topic
        except UnicodeEncodeError:
            pass
    return names


def encode_cooperative_user_data(generation: int) -> bytes:
    """Cooperative sticky user data: only the generation, an int32 (read when the protocol has none)."""
    return _I32.pack(generation)


def decode_cooperative_user_data(data: bytes) -> int | None:
    """The generation in cooperative user data: None without data, -1 if unreadable (as Kafka)."""
    if not data:
        return None
    if _is_msgpack_map(data):
        try:
            return _cooperative_v0.decode(data).generation
        except (msgspec.DecodeError, ValueError):
            return DEFAULT_GENERATION
    if len(data) < 4:
        return DEFAULT_GENERATION
    return _I32.unpack_from(data)[0]
