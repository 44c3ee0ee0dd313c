"""The Kafka listener's hand-made Heartbeat and OffsetCommit codec agrees with kafka-python's classes,
version by version: answers byte for byte, requests decoded to the same structs as the generic
path (kafka-python's decode, then the conversion every other request takes), malformed requests
refused or read alike."""

from __future__ import annotations

import random

import msgspec
import pytest
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
)

from coordinator.kafka_wire import codec as K
from coordinator.kafka_wire import group_codec as G
from coordinator.wire import schema as S
from tests.kafka_helpers import mangled

HEARTBEAT_VERSIONS = sorted(v for api, v in G.DECODERS if api == S.HEARTBEAT)
OFFSET_COMMIT_VERSIONS = sorted(v for api, v in G.DECODERS if api == S.OFFSET_COMMIT)


def test_the_fast_versions_are_the_served_non_flexible_ones():
    for api, request_class in ((S.HEARTBEAT, HeartbeatRequest), (S.OFFSET_COMMIT, OffsetCommitRequest)):
        lo, hi = K.VERSIONS[api]
        rigid = [v for v in range(lo, hi + 1) if not request_class.flexible_version_q(v)]
        assert sorted(v for a, v in G.DECODERS if a == api) == rigid
        assert sorted(v for a, v in G.ENCODERS if a == api) == rigid


# ---------------------------------------------------------------------------- answers


def _generic_answer(api: int, version: int, correlation_id: int, body: S.Message) -> bytes:
    """The answer as kafka-python's generated class encodes it (how every other answer is made)."""
    values = msgspec.to_builtins(body)
    K._fix_response(api, version, values, None)
    data = bytes(K._build(K._CLASSES[api][1], values, version).encode(version=version, header=False))
    return K._RESPONSE_HEAD.pack(len(data) + 4, correlation_id) + data


def _text(rng: random.Random) -> str:
    return rng.choice(["", "t", "orders-é", "x" * rng.randrange(300)])


@pytest.mark.parametrize("version", HEARTBEAT_VERSIONS)
def test_packed_heartbeat_answer_equals_kafka_pythons(version):
    for code in (0, 22, 25, 27, 79, 82, -1, 32767, -32768):
        body = S.HeartbeatResponse(error_code=code)
        packed = K.encode_response(S.HEARTBEAT, version, code & 0x7FFFFFFF, body, None)
        assert packed == _generic_answer(S.HEARTBEAT, version, code & 0x7FFFFFFF, body)
        theirs = HeartbeatResponse.decode(packed[8:], version=version)
        assert theirs.error_code == code


@pytest.mark.parametrize("version", OFFSET_COMMIT_VERSIONS)
def test_packed_offset_commit_answer_equals_kafka_pythons(version):
    rng = random.Random(version)
    for i in range(200):
        body = S.OffsetCommitResponse(
            topics=[
                S.TopicPartitionResults(
                    name=_text(rng),
                    partitions=[
                        S.PartitionResult(
                            partition_index=rng.randrange(-(2**31), 2**31),
                            error_code=rng.choice([0, 22, 29, -1]),
                        )
                        for _ in range(rng.choice([0, 1, 7, 300]))
                    ],
                )
                for _ in range(rng.choice([0, 1, 3]))
            ]
        )
        packed = K.encode_response(S.OFFSET_COMMIT, version, i, body, None)
        assert packed == _generic_answer(S.OFFSET_COMMIT, version, i, body)
        theirs = OffsetCommitResponse.decode(packed[8:], version=version)
        assert [
            (t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in theirs.topics
        ] == [(t.name, [(p.partition_index, p.error_code) for p in t.partitions]) for t in body.topics]


def test_an_error_response_is_answered_in_the_apis_shape():
    """The core's ErrorResponse becomes the API's own answer before the packed encoder sees it."""
    error = S.ErrorResponse(error_code=42, error_message="invalid")
    assert K.encode_response(S.HEARTBEAT, 3, 5, error, None) == _generic_answer(
        S.HEARTBEAT, 3, 5, S.HeartbeatResponse(error_code=42)
    )
    request = K.decode_request(_frame(_random_offset_commit(random.Random(1), 7), 7)).body
    assert K.encode_response(S.OFFSET_COMMIT, 7, 5, error, request) == _generic_answer(
        S.OFFSET_COMMIT, 7, 5, S.OffsetCommitResponse.with_error(request, 42)
    )


# ---------------------------------------------------------------------------- requests


def _maybe_null(rng: random.Random) -> str | None:
    return rng.choice([None, _text(rng)])


def _random_heartbeat(rng: random.Random, version: int) -> HeartbeatRequest:
    return HeartbeatRequest(
        version=version,
        group_id=_text(rng),
        generation_id=rng.randrange(-(2**31), 2**31),
        member_id=_text(rng),
        group_instance_id=_maybe_null(rng) if version >= 3 else None,
    )


def _random_offset_commit(rng: random.Random, version: int) -> OffsetCommitRequest:
    topic = OffsetCommitRequest.OffsetCommitRequestTopic
    partition = topic.OffsetCommitRequestPartition
    fields = {
        "group_id": _text(rng),
        "generation_id_or_member_epoch": rng.randrange(-(2**31), 2**31),
        "member_id": _text(rng),
        "topics": [
            topic(
                name=_text(rng),
                partitions=[
                    partition(
                        partition_index=rng.randrange(-(2**31), 2**31),
                        committed_offset=rng.randrange(-(2**63), 2**63),
                        committed_leader_epoch=rng.randrange(-(2**31), 2**31),
                        committed_metadata=_maybe_null(rng),
                    )
                    for _ in range(rng.choice([0, 1, 5, 120]))
                ],
            )
            for _ in range(rng.choice([0, 1, 3]))
        ],
    }
    if version <= 4:
        fields["retention_time_ms"] = rng.randrange(-(2**63), 2**63)
    if version >= 7:
        fields["group_instance_id"] = _maybe_null(rng)
    return OffsetCommitRequest(version=version, **fields)


RANDOM = {S.HEARTBEAT: _random_heartbeat, S.OFFSET_COMMIT: _random_offset_commit}
REQUESTS = {S.HEARTBEAT: HeartbeatRequest, S.OFFSET_COMMIT: OffsetCommitRequest}
CASES = [(S.HEARTBEAT, v) for v in HEARTBEAT_VERSIONS] + [
    (S.OFFSET_COMMIT, v) for v in OFFSET_COMMIT_VERSIONS
]


def _frame(req, version: int, client_id: str | None = "consumer-1") -> bytes:
    req.with_header(correlation_id=9, client_id=client_id)
    return bytes(req.encode(version=version, header=True))


def _generic(api: int, version: int, frame: bytes) -> S.Message:
    """The request as the generic path reads it: kafka-python's class, then the conversion."""
    start = K._client_id(frame)[1]
    msg = REQUESTS[api].decode(memoryview(frame)[start:], version=version, header=False)
    if api == S.HEARTBEAT:
        return msgspec.convert(msg, S.HeartbeatRequest, from_attributes=True)
    values = msg.to_dict(json=False)
    K._fix_request(api, version, values)
    return msgspec.convert(values, S.OffsetCommitRequest)


@pytest.mark.parametrize(("api", "version"), CASES)
def test_unpacked_request_equals_the_generic_paths(api, version):
    rng = random.Random(api * 100 + version)
    for i in range(150):
        frame = _frame(RANDOM[api](rng, version), version, client_id=[None, "", "rdkafka-é"][i % 3])
        req = K.decode_request(frame)
        assert (req.api_key, req.api_version, req.correlation_id) == (api, version, 9)
        assert req.client_id == ["", "", "rdkafka-é"][i % 3]
        assert type(req.body) is type(_generic(api, version, frame))
        assert req.body == _generic(api, version, frame)


@pytest.mark.parametrize(("api", "version"), CASES)
def test_a_malformed_request_is_refused_never_misread(api, version):
    """Byte flips and cuts of well-formed frames: either refused (BadRequest) or, when the generic
    path also reads them, read to the same struct; a frame the generic path refuses is refused."""
    rng = random.Random(api * 1000 + version)
    for _ in range(400):
        frame = mangled(rng, _frame(RANDOM[api](rng, version), version))
        try:
            generic = _generic(api, version, frame)
        except Exception:  # noqa: BLE001 - whatever kafka-python or the conversion raises: refused
            generic = None
        try:
            ours = K.decode_request(frame).body
        except K.BadRequest:
            continue
        assert generic is not None and ours == generic


def test_null_required_fields_are_refused():
    for member_id, topic in ((None, "t"), ("m", None)):
        req = OffsetCommitRequest(
            version=7,
            group_id="g",
            generation_id_or_member_epoch=1,
            member_id=member_id,
            group_instance_id=None,
            topics=[OffsetCommitRequest.OffsetCommitRequestTopic(name=topic, partitions=[])],
        )
        with pytest.raises(K.BadRequest):
            K.decode_request(_frame(req, 7))
    heartbeat = HeartbeatRequest(
        version=3, group_id="g", generation_id=1, member_id=None, group_instance_id=None
    )
    with pytest.raises(K.BadRequest):
        K.decode_request(_frame(heartbeat, 3))


@pytest.mark.parametrize(("api", "version"), CASES)
def test_a_frame_cut_inside_its_last_string_is_refused(api, version):
    """kafka-python reads a string cut short by the frame's end as what is there; these refuse it."""
    rng = random.Random(7)
    req = RANDOM[api](rng, version)
    if api == S.HEARTBEAT:
        req.member_id, req.group_instance_id = "member-1", None
        cut = 2 if version >= 3 else 1  # inside member_id (v3: behind it, a null group_instance_id)
    else:
        req.topics = []
        req.member_id = "member-1"
        cut = 4 + 1 + (8 if version <= 4 else 0) + (2 if version >= 7 else 0)  # inside member_id
    frame = _frame(req, version)[:-cut]
    with pytest.raises(K.BadRequest):
        K.decode_request(frame)
