"""Consumer protocol payloads (docs/protocol.md): subscriptions, assignments, sticky user data."""

from __future__ import annotations

import msgspec
import pytest

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
)
from core.types import TopicPartition

T0_1, T0_3, T1_0 = TopicPartition("t0", 1), TopicPartition("t0", 3), TopicPartition("t1", 0)


def test_subscription_wire_format_is_the_protocol_map() -> None:
    sub = Subscription(
        ["t0", "t1"], owned_partitions=[T0_1, T1_0, T0_3], generation=4, rack="r1", user_data=b"x"
    )
    raw = msgspec.msgpack.decode(encode_subscription(sub))
    assert raw == {
        "version": 0,
        "topics": ["t0", "t1"],
        "user_data": b"x",
        "owned_partitions": [{"topic": "t0", "partitions": [1, 3]}, {"topic": "t1", "partitions": [0]}],
        "generation_id": 4,
        "rack_id": "r1",
    }


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


def test_assignment_wire_format_and_round_trip() -> None:
    data = encode_assignment([T0_1, T0_3, T1_0], user_data=b"u")
    assert msgspec.msgpack.decode(data) == {
        "version": 0,
        "assigned_partitions": [{"topic": "t0", "partitions": [1, 3]}, {"topic": "t1", "partitions": [0]}],
        "user_data": b"u",
    }
    assert decode_assignment(data) == MemberAssignment([T0_1, T0_3, T1_0], b"u")
    assert decode_assignment(b"") == MemberAssignment([])
    assert msgspec.msgpack.decode(encode_assignment([]))["user_data"] is None


@pytest.mark.parametrize(
    "data",
    [
        b"\xc1",
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


def test_sticky_user_data_versions() -> None:
    v1 = encode_sticky_user_data([T0_1, T1_0], generation=7)
    assert msgspec.msgpack.decode(v1) == {
        "previous_assignment": [{"topic": "t0", "partitions": [1]}, {"topic": "t1", "partitions": [0]}],
        "generation": 7,
    }
    assert decode_sticky_user_data(v1) == ([T0_1, T1_0], 7)
    v0 = encode_sticky_user_data([T0_1])
    assert "generation" not in msgspec.msgpack.decode(v0)
    assert decode_sticky_user_data(v0) == ([T0_1], -1)
    assert decode_sticky_user_data(b"") == ([], -1)
    assert decode_sticky_user_data(b"\x93garbage") == ([], -1)


def test_cooperative_user_data() -> None:
    assert msgspec.msgpack.decode(encode_cooperative_user_data(5)) == {"generation": 5}
    assert decode_cooperative_user_data(encode_cooperative_user_data(5)) == 5
    assert decode_cooperative_user_data(b"") is None
    assert decode_cooperative_user_data(b"\xc1") == -1
