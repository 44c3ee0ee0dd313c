"""Wire encodings of the consumer protocol: subscriptions, assignments and the sticky assignors' user data.

All are MessagePack maps (docs/protocol.md, "Consumer protocol payloads"):

* subscription (JoinGroup ``protocols[].metadata``): ``{"version", "topics", "user_data",
  "owned_partitions": [{"topic", "partitions"}], "generation_id", "rack_id"}``;
* assignment (SyncGroup): ``{"version", "assigned_partitions": [{"topic", "partitions"}], "user_data"}``;
* eager ``sticky`` user data, V1 ``{"previous_assignment": [{"topic", "partitions"}], "generation"}``
  (V0 has no generation);
* ``cooperative-sticky`` user data ``{"generation"}``, for members whose protocol carries no generation.

>>> from core.types import TopicPartition
>>> sub = Subscription(["t0"], owned_partitions=[TopicPartition("t0", 1)], generation=3)
>>> decode_subscription(encode_subscription(sub)) == sub
True
>>> decode_sticky_user_data(encode_sticky_user_data([TopicPartition("t0", 1)], generation=3))
([TopicPartition(topic='t0', partition=1)], 3)
>>> decode_sticky_user_data(b"not msgpack")
([], -1)
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat

import msgspec

from coordinator.assignors.base import DEFAULT_GENERATION, Subscription, make_tp
from core.types import TopicPartition

CONSUMER_PROTOCOL_VERSION = 0


class TopicPartitions(msgspec.Struct, frozen=True, gc=False):
    """One topic's partitions, the unit in which every payload lists partitions.

    Not tracked by the garbage collector (it holds a name and a list of ints, so it cannot be part of a
    reference cycle): a sticky member's user data decodes to one of these per owned topic, a million in a
    large group, and tracked ones would make the collector's full passes walk them all.
    """

    topic: str
    partitions: list[int]


class SubscriptionPayload(msgspec.Struct, frozen=True):
    version: int = CONSUMER_PROTOCOL_VERSION
    topics: list[str] = []
    user_data: bytes | None = None
    owned_partitions: list[TopicPartitions] = []
    generation_id: int = DEFAULT_GENERATION
    rack_id: str | None = None


class AssignmentPayload(msgspec.Struct, frozen=True):
    version: int = CONSUMER_PROTOCOL_VERSION
    assigned_partitions: list[TopicPartitions] = []
    user_data: bytes | None = None


class StickyUserDataV1(msgspec.Struct, frozen=True):
    previous_assignment: list[TopicPartitions]
    generation: int


class StickyUserDataV0(msgspec.Struct, frozen=True):
    previous_assignment: list[TopicPartitions]


class CooperativeUserData(msgspec.Struct, frozen=True):
    generation: int


class MemberAssignment(msgspec.Struct, frozen=True):
    """A decoded assignment: the member's partitions and the assignor's user data."""

    partitions: list[TopicPartition]
    user_data: bytes = b""


_encoder = msgspec.msgpack.Encoder()
_subscription_decoder = msgspec.msgpack.Decoder(SubscriptionPayload)
_assignment_decoder = msgspec.msgpack.Decoder(AssignmentPayload)
_sticky_v1 = msgspec.msgpack.Decoder(StickyUserDataV1)
_sticky_v0 = msgspec.msgpack.Decoder(StickyUserDataV0)
_cooperative = msgspec.msgpack.Decoder(CooperativeUserData)


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


def encode_subscription(subscription: Subscription) -> bytes:
    """JoinGroup metadata for a subscription (the group instance id travels outside it)."""
    return _encoder.encode(
        SubscriptionPayload(
            topics=list(subscription.topics),
            user_data=subscription.user_data or None,
            owned_partitions=group_by_topic(subscription.owned_partitions),
            generation_id=subscription.generation,
            rack_id=subscription.rack,
        )
    )


def decode_subscription(data: bytes, group_instance_id: str | None = None) -> Subscription:
    """A `Subscription` from JoinGroup metadata; raises `ValueError` on malformed bytes."""
    try:
        payload = _subscription_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise ValueError(f"malformed consumer subscription: {e}") from e
    return Subscription(
        topics=payload.topics,
        owned_partitions=flatten(payload.owned_partitions),
        generation=payload.generation_id,
        group_instance_id=group_instance_id,
        rack=payload.rack_id,
        user_data=payload.user_data or b"",
    )


def encode_assignment(partitions: Iterable[TopicPartition], user_data: bytes = b"") -> bytes:
    """SyncGroup assignment bytes for one member."""
    return _encoder.encode(
        AssignmentPayload(assigned_partitions=group_by_topic(partitions), user_data=user_data or None)
    )


def decode_assignment(data: bytes) -> MemberAssignment:
    """A member's assignment from SyncGroup bytes; empty bytes mean no partitions (Kafka's convention)."""
    if not data:
        return MemberAssignment([])
    try:
        payload = _assignment_decoder.decode(data)
    except msgspec.DecodeError as e:
        raise ValueError(f"malformed consumer assignment: {e}") from e
    return MemberAssignment(flatten(payload.assigned_partitions), payload.user_data or b"")


def encode_sticky_user_data(partitions: Iterable[TopicPartition], generation: int | None = None) -> bytes:
    """Eager sticky user data: the member's previous assignment and (V1) its generation."""
    groups = group_by_topic(partitions)
    if generation is None:
        return _encoder.encode(StickyUserDataV0(groups))
    return _encoder.encode(StickyUserDataV1(groups, generation))


def decode_sticky_user_data(data: bytes) -> tuple[list[TopicPartition], int]:
    """(previous assignment, generation) as Kafka's `StickyAssignor.memberData` reads them.

    Empty data: nothing owned, no generation (-1). V0 data: no generation (-1). Unparsable data:
    ignored, i.e. nothing owned and generation -1.
    """
    if not data:
        return [], DEFAULT_GENERATION
    try:
        v1 = _sticky_v1.decode(data)
        return flatten(v1.previous_assignment), v1.generation
    except (msgspec.DecodeError, ValueError):
        pass
    try:
        return flatten(_sticky_v0.decode(data).previous_assignment), DEFAULT_GENERATION
    except (msgspec.DecodeError, ValueError):
        return [], DEFAULT_GENERATION


def encode_cooperative_user_data(generation: int) -> bytes:
    """Cooperative sticky user data: only the generation (read when the protocol has none)."""
    return _encoder.encode(CooperativeUserData(generation))


def decode_cooperative_user_data(data: bytes) -> int | None:
    """The generation in cooperative user data: None without data, -1 if unparsable (as Kafka)."""
    if not data:
        return None
    try:
        return _cooperative.decode(data).generation
    except (msgspec.DecodeError, ValueError):
        return DEFAULT_GENERATION
