"""Topic ids in ZooKeeper: one stable non-zero id per topic, kept where Kafka 2.8+ keeps it."""

from __future__ import annotations

import json
import threading
import uuid

import pytest

from core.errors import UnknownTopic
from topics.registry import add_partitions, create_topic, delete_topic, describe, topic_id
from topics.topic_ids import ZERO, ensure_topic_id, from_kafka_string, kafka_string


def test_a_topic_registered_by_another_tool_gets_one_id_written_into_its_registration(zk):
    zk.create("/brokers/topics/old", b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}', makepath=True)
    first = ensure_topic_id(zk, "old")
    assert first != ZERO
    data = zk.get("/brokers/topics/old")[0]
    body = json.loads(data)
    assert body == {"version": 1, "topic_id": kafka_string(first), "partitions": {"1": [2, 3], "0": [1, 2]}}
    assert ensure_topic_id(zk, "old") == first  # stable: read back, not minted again
    assert zk.get("/brokers/topics/old")[0] == data
    assert describe(zk, "old").partitions == {0: (1, 2), 1: (2, 3)}  # 0.8 readers see the same map


def test_a_groupshift_topic_is_known_by_the_id_of_its_data_directory(zk):
    hex_id = uuid.uuid4().hex
    create_topic(zk, "mine", 2, topic_id=hex_id)
    assert ensure_topic_id(zk, "mine") == uuid.UUID(hex=hex_id) == uuid.UUID(hex=topic_id(zk, "mine"))


def test_adding_partitions_keeps_the_id_and_a_recreated_topic_gets_a_new_one(zk):
    create_topic(zk, "grow", 2)
    first = ensure_topic_id(zk, "grow")
    add_partitions(zk, "grow", 4)
    assert ensure_topic_id(zk, "grow") == first
    assert describe(zk, "grow").num_partitions == 4
    delete_topic(zk, "grow")
    create_topic(zk, "grow", 1)
    assert ensure_topic_id(zk, "grow") not in (first, ZERO)


def test_nodes_minting_at_once_agree_on_one_id(zk_connect, zk):
    from core.zk import connect

    zk.create("/brokers/topics/race", b'{"version":1,"partitions":{"0":[0]}}', makepath=True)
    clients = [connect(zk_connect, session_timeout=6.0) for _ in range(4)]
    got: list[uuid.UUID] = []
    try:
        threads = [
            threading.Thread(target=lambda c=c: got.append(ensure_topic_id(c, "race"))) for c in clients
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
    finally:
        for c in clients:
            c.stop()
            c.close()
    assert len(got) == 4 and len(set(got)) == 1


def test_kafka_string_form_round_trips_and_an_unknown_topic_is_refused(zk):
    u = uuid.uuid4()
    assert from_kafka_string(kafka_string(u)) == u and "=" not in kafka_string(u)
    with pytest.raises(UnknownTopic):
        ensure_topic_id(zk, "nothing-here")
