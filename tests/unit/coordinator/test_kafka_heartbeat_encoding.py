"""The Kafka listener's packed ConsumerGroupHeartbeat answer is byte for byte kafka-python's."""

from __future__ import annotations

import random
import uuid

import msgspec

from coordinator.kafka_wire import codec as K
from coordinator.kafka_wire import messages as M


def _generic(version: int, correlation_id: int, body: M.KafkaConsumerGroupHeartbeatResponse) -> bytes:
    """The answer as kafka-python's generated class encodes it (how every other answer is made)."""
    values = msgspec.to_builtins(body, builtin_types=(uuid.UUID,))
    response_class = K._CLASSES[M.CONSUMER_GROUP_HEARTBEAT][1]
    data = K._NO_TAGS + bytes(K._build(response_class, values, version).encode(version=version, header=False))
    return K._RESPONSE_HEAD.pack(len(data) + 4, correlation_id) + data


def _random_body(rng: random.Random) -> M.KafkaConsumerGroupHeartbeatResponse:
    assignment = None
    if rng.random() < 0.8:
        topics = [
            M.TopicIdPartitions(
                topic_id=uuid.UUID(int=rng.getrandbits(128)),
                partitions=[rng.randrange(-(2**31), 2**31) for _ in range(rng.choice([0, 1, 3, 200]))],
            )
            for _ in range(rng.choice([0, 1, 2, 130]))
        ]
        assignment = M.KafkaAssignment(topic_partitions=topics)
    return M.KafkaConsumerGroupHeartbeatResponse(
        error_code=rng.choice([0, 25, 110, -1]),
        error_message=rng.choice([None, "", "fenced", "é" * rng.randrange(300)]),
        member_id=rng.choice([None, "", str(uuid.uuid4()), "m" * 200]),
        member_epoch=rng.randrange(-(2**31), 2**31),
        heartbeat_interval_ms=rng.randrange(-1, 2**31),
        assignment=assignment,
    )


def test_packed_heartbeat_answer_equals_kafka_pythons():
    rng = random.Random(848)
    for i in range(300):
        body = _random_body(rng)
        for version in (0, 1):
            packed = K.encode_response(M.CONSUMER_GROUP_HEARTBEAT, version, i, body, None)
            assert packed == _generic(version, i, body)
