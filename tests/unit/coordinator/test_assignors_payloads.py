"""Consumer protocol payloads (docs/protocol.md): subscriptions, assignments, sticky user data, in
Kafka's binary ConsumerProtocol (checked against kafka-python's schema-generated classes) and the
older MessagePack form, still read."""

from __future__ import annotations

import msgspec
import pytest

# kafka-python's classes, generated from Kafka's own JSON schemas: an implementation we did not write
from kafka.coordinator.assignors.sticky.user_data import StickyAssignorUserData as KafkaStickyUserData  # noqa: E402
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment as KafkaAssignment  # noqa: E402
from kafka.protocol.consumer.metadata import ConsumerProtocolSubscription as KafkaSubscription  # noqa: E402

from coordinator.assignors import Subscription
from coordinator.assignors.payloads import (
    MemberAssignment,
    decode_assignment,
    decode_cooperative_user_data,
    decode_sticky_user_data,
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
    subscribed_topics,
)
from core.types import TopicPartition

T0_1, T0_3, T1_0 = TopicPartition("t0", 1), TopicPartition("t0", 3), TopicPartition("t1", 0)


def test_subscription_is_kafkas_consumer_protocol_subscription_v3() -> None:
    """kafka-python's ConsumerProtocolSubscription (generated from Kafka's own schema) reads our bytes."""
    sub = Subscription(
        ["t0", "t1"], owned_partitions=[T0_1, T1_0, T0_3], generation=4, rack="r1", user_data=b"x"
    )
    data = encode_subscription(sub)
    theirs = KafkaSubscription.decode(data)
    assert theirs.version == 3 and theirs.topics == ["t0", "t1"] and theirs.user_data == b"x"
    assert [(p.topic, p.partitions) for p in theirs.owned_partitions] == [("t0", [1, 3]), ("t1", [0])]
    assert (theirs.generation_id, theirs.rack_id) == (4, "r1")
    # and every version a Kafka client may send reads back, later fields defaulted
    for version in range(4):
        kafka = KafkaSubscription(
            version=version,
            topics=["t0"],
            user_data=None,
            owned_partitions=[KafkaSubscription.TopicPartition(topic="t0", partitions=[1, 3])],
            generation_id=9,
            rack_id="r",
        ).encode()
        ours = decode_subscription(kafka)
        assert ours.topics == ("t0",) and ours.user_data == b""
        assert ours.owned_partitions == ((T0_1, T0_3) if version >= 1 else ())
        assert ours.generation == (9 if version >= 2 else -1)
        assert ours.rack == ("r" if version >= 3 else None)


def test_msgpack_subscriptions_of_payload_version_0_are_still_read() -> None:
    old = msgspec.msgpack.encode(
        {
            "version": 0,
            "topics": ["t0", "t1"],
            "user_data": b"x",
            "owned_partitions": [{"topic": "t0", "partitions": [1, 3]}],
            "generation_id": 4,
            "rack_id": "r1",
        }
    )
    sub = decode_subscription(old)
    assert sub.topics == ("t0", "t1") and sub.owned_partitions == (T0_1, T0_3)
    assert (sub.generation, sub.rack, sub.user_data) == (4, "r1", b"x")
    assert subscribed_topics(old) == ["t0", "t1"]


def test_subscription_round_trip_and_defaults() -> None:
    sub = Subscription(["t0"], owned_partitions=[T0_1, T0_3], generation=2, rack="r")
    again = decode_subscription(encode_subscription(sub), group_instance_id="static-1")
    assert again.topics == ("t0",) and again.owned_partitions == (T0_1, T0_3)
    assert (again.generation, again.rack, again.group_instance_id, again.user_data) == (
        2,
        "r",
        "static-1",
        b"",
    )
    minimal = decode_subscription(msgspec.msgpack.encode({"version": 0, "topics": ["t0"]}))
    assert minimal == Subscription(["t0"])


def test_assignment_is_kafkas_consumer_protocol_assignment() -> None:
    data = encode_assignment([T0_1, T0_3, T1_0], user_data=b"u")
    theirs = KafkaAssignment.decode(data)
    assert theirs.version == 3 and theirs.user_data == b"u"
    assert [(p.topic, p.partitions) for p in theirs.assigned_partitions] == [("t0", [1, 3]), ("t1", [0])]
    assert decode_assignment(data) == MemberAssignment([T0_1, T0_3, T1_0], b"u")
    assert decode_assignment(b"") == MemberAssignment([])
    assert KafkaAssignment.decode(encode_assignment([])).user_data is None
    for version in range(4):
        kafka = KafkaAssignment(
            version=version,
            assigned_partitions=[KafkaAssignment.TopicPartition(topic="t1", partitions=[0])],
            user_data=None,
        ).encode()
        assert decode_assignment(kafka) == MemberAssignment([T1_0])
    old = msgspec.msgpack.encode({"version": 0, "assigned_partitions": [{"topic": "t1", "partitions": [0]}]})
    assert decode_assignment(old) == MemberAssignment([T1_0])


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",
        b"\x00\x03\x00\x00\x00\x05\x00\x02t0",  # five topics announced, one there
        b"\x00\x03\x7f\xff\xff\xff",  # an array count past the bound
        b"\x00\x03\x00\x00\x00\x01\x00\x02\xff\xfe",  # a topic name that is not UTF-8
        msgspec.msgpack.encode({"topics": "t0"}),
        msgspec.msgpack.encode({"topics": ["t0"], "generation_id": -5}),
    ],
)
def test_malformed_subscription_bytes_raise_value_error(data: bytes) -> None:
    with pytest.raises(ValueError):
        decode_subscription(data)


def test_malformed_assignment_bytes_raise_value_error() -> None:
    with pytest.raises(ValueError, match="malformed consumer assignment"):
        decode_assignment(b"\xc1")
    with pytest.raises(ValueError, match="malformed consumer assignment"):
        decode_assignment(b"\x00\x03\x00\x00\x00\x01\x00\x02t0\x00\x00\x00\x09\x00")


def test_sticky_user_data_is_kafkas_sticky_assignor_user_data() -> None:
    v1 = encode_sticky_user_data([T0_1, T1_0], generation=7)
    theirs = KafkaStickyUserData.decode(v1, version=1, header=False)
    assert [(p.topic, p.partitions) for p in theirs.previous_assignment] == [("t0", [1]), ("t1", [0])]
    assert theirs.generation == 7
    assert decode_sticky_user_data(v1) == ([T0_1, T1_0], 7)
    v0 = encode_sticky_user_data([T0_1])
    assert decode_sticky_user_data(v0) == ([T0_1], -1)
    kafka_v1 = KafkaStickyUserData(
        previous_assignment=[KafkaStickyUserData.TopicPartition(topic="t1", partitions=[0])], generation=3
    ).encode(header=False)
    assert decode_sticky_user_data(kafka_v1) == ([T1_0], 3)
    old = msgspec.msgpack.encode(
        {"previous_assignment": [{"topic": "t0", "partitions": [1]}], "generation": 2}
    )
    assert decode_sticky_user_data(old) == ([T0_1], 2)
    assert decode_sticky_user_data(b"") == ([], -1)
    assert decode_sticky_user_data(b"\x93garbage") == ([], -1)
    assert decode_sticky_user_data(b"\x00\x00\x00\x09garbage") == ([], -1)


def test_cooperative_user_data_is_an_int32_generation() -> None:
    assert encode_cooperative_user_data(5) == b"\x00\x00\x00\x05"
    assert decode_cooperative_user_data(encode_cooperative_user_data(5)) == 5
    assert decode_cooperative_user_data(encode_cooperative_user_data(-1)) == -1
    assert decode_cooperative_user_data(msgspec.msgpack.encode({"generation": 4})) == 4
    assert decode_cooperative_user_data(b"") is None
    assert decode_cooperative_user_data(b"\xc1") == -1


def test_a_leader_answers_each_member_in_the_payload_version_it_subscribed_in() -> None:
    from coordinator.member.consumer_protocol import join_protocols, perform_assignment
    from coordinator.wire.schema import JoinGroupMember

    new = join_protocols(["range"], ["t0"], owned=[], generation=-1)[0].metadata
    old = msgspec.msgpack.encode({"version": 0, "topics": ["t0"]})
    members = [JoinGroupMember("m-new", None, new), JoinGroupMember("m-old", None, old)]
    assignments, counts = perform_assignment("range", members, lambda topic: 4)
    assert counts == {"t0": 4}
    assert KafkaAssignment.decode(assignments["m-new"]).version == 3
    assert msgspec.msgpack.decode(assignments["m-old"])["version"] == 0
    got = {m: decode_assignment(a).partitions for m, a in assignments.items()}
    assert got == {
        "m-new": [TopicPartition("t0", 0), TopicPartition("t0", 1)],
        "m-old": [TopicPartition("t0", 2), TopicPartition("t0", 3)],
    }
