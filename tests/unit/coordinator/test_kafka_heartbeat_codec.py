"""The Kafka listener's hand-made ConsumerGroupHeartbeat codec agrees with kafka-python's classes:
answers byte for byte, requests decoded to the same fields, malformed requests refused."""

from __future__ import annotations

import random
import uuid

import msgspec

from coordinator.kafka_wire import codec as K
from coordinator.kafka_wire import messages as M
from coordinator.kafka_wire.consumer_group_api import ConsumerGroupHeartbeatRequest as Request
from tests.kafka_helpers import mangled


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


def _random_request(rng: random.Random, version: int) -> Request:
    def text(nullable: bool):
        return rng.choice(([None] if nullable else []) + ["", "m-1", "é" * rng.randrange(200)])

    owned = None
    if rng.random() < 0.7:
        owned = [
            Request.TopicPartitions(
                topic_id=rng.choice([uuid.UUID(int=0), uuid.UUID(int=rng.getrandbits(128))]),
                partitions=[rng.randrange(-(2**31), 2**31) for _ in range(rng.choice([0, 1, 5, 140]))],
            )
            for _ in range(rng.choice([0, 1, 3]))
        ]
    return Request(
        version=version,
        group_id=text(False),
        member_id=text(False),
        member_epoch=rng.randrange(-(2**31), 2**31),
        instance_id=text(True),
        rack_id=text(True),
        rebalance_timeout_ms=rng.randrange(-1, 2**31),
        subscribed_topic_names=rng.choice([None, [], ["a", "b" * 130]]),
        subscribed_topic_regex=text(True) if version >= 1 else None,
        server_assignor=text(True),
        topic_partitions=owned,
    )


def _frame(req: Request, version: int) -> bytes:
    req.with_header(correlation_id=9, client_id="rdkafka")
    return bytes(req.encode(version=version, header=True))


def test_unpacked_heartbeat_request_equals_kafka_pythons():
    rng = random.Random(68)
    for _ in range(300):
        for version in (0, 1):
            frame = _frame(_random_request(rng, version), version)
            assert K.decode_request(frame).body == _kafka_pythons(frame, version)


def test_a_malformed_heartbeat_request_is_refused_never_misread():
    """Byte flips and cuts of well-formed frames: either refused (BadRequest) or, when
    kafka-python's decoder also reads them, read to the same fields."""
    rng = random.Random(69)
    for _ in range(2000):
        version = rng.choice((0, 1))
        frame = mangled(rng, _frame(_random_request(rng, version), version))
        try:
            ours = K.decode_request(frame).body
        except K.BadRequest:
            continue
        assert ours == _kafka_pythons(frame, version)


def _kafka_pythons(frame: bytes, version: int) -> M.KafkaConsumerGroupHeartbeat:
    """The request as kafka-python's generated class decodes it (a zero topic id is None)."""
    start = K._skip_tags(frame, K._client_id(frame)[1])
    theirs = Request.decode(memoryview(frame)[start:], version=version, header=False)
    return msgspec.convert(theirs, M.KafkaConsumerGroupHeartbeat, from_attributes=True)
