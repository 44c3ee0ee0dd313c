"""Topic registration in ZooKeeper: Kafka 0.8's `/brokers/topics/<t>` JSON, byte for byte."""

from __future__ import annotations

import time

import pytest

from core.errors import UnknownTopic
from topics.errors import InvalidPartitions, InvalidReplicationFactor, InvalidTopic, TopicAlreadyExists
from topics.registry import (
    add_partitions,
    assign_replicas,
    create_topic,
    delete_topic,
    describe,
    list_topics,
    validate_topic_name,
)


def test_create_writes_kafka_08_json_byte_exact(zk):
    create_topic(zk, "clicks", 3)
    data, _ = zk.get("/brokers/topics/clicks")
    assert data == b'{"version":1,"partitions":{"0":[0],"1":[0],"2":[0]}}'
    assert zk.get("/config/topics/clicks")[0] == b'{"version":1,"config":{}}'


def test_replicas_follow_kafka_assign_replicas_to_brokers(zk):
    for b in (1, 2, 3):
        zk.create(f"/brokers/ids/{b}", b"{}", makepath=True, ephemeral=True)
    create_topic(zk, "t", 4, replication_factor=2, start_index=0)
    # brokers [1,2,3], start 0: leaders 1,2,3,1; follower shift 0 then 1 after n partitions.
    assert (
        zk.get("/brokers/topics/t")[0]
        == b'{"version":1,"partitions":{"0":[1,2],"1":[2,3],"2":[3,1],"3":[1,3]}}'
    )


def test_assign_replicas_matches_kafka_worked_example():
    # AdminUtils' scaladoc: 5 brokers, 10 partitions, rf 3, start index 0.
    a = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0)
    assert [a[p][0] for p in range(10)] == [0, 1, 2, 3, 4, 0, 1, 2, 3, 4]
    assert a[0] == (0, 1, 2) and a[4] == (4, 0, 1) and a[5] == (0, 2, 3) and a[9] == (4, 1, 2)


def test_read_a_tree_written_by_kafka(zk):
    # Kafka writes partitions in hash-map order and may add partition state children.
    zk.create("/brokers/topics/old", b'{"version":1,"partitions":{"1":[2,3],"0":[1,2]}}', makepath=True)
    zk.create("/brokers/topics/old/partitions/0/state", b"{}", makepath=True)
    d = describe(zk, "old")
    assert d.partitions == {0: (1, 2), 1: (2, 3)} and d.replication_factor == 2
    assert list_topics(zk) == ["old"]


def test_add_partitions_rewrites_the_znode_and_fires_the_data_watch(zk):
    create_topic(zk, "grow", 2)
    seen = []
    zk.DataWatch("/brokers/topics/grow", lambda data, stat: seen.append(data))
    add_partitions(zk, "grow", 4)
    assert (
        zk.get("/brokers/topics/grow")[0] == b'{"version":1,"partitions":{"0":[0],"1":[0],"2":[0],"3":[0]}}'
    )
    assert describe(zk, "grow").num_partitions == 4
    with pytest.raises(InvalidPartitions):
        add_partitions(zk, "grow", 4)
    deadline = time.monotonic() + 5
    while len(seen) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(seen) == 2


def test_create_twice_list_delete(zk):
    create_topic(zk, "a", 1)
    create_topic(zk, "b.c_d-e", 1)
    with pytest.raises(TopicAlreadyExists):
        create_topic(zk, "a", 1)
    assert list_topics(zk) == ["a", "b.c_d-e"]
    delete_topic(zk, "a")
    assert list_topics(zk) == ["b.c_d-e"] and not zk.exists("/config/topics/a")
    with pytest.raises(UnknownTopic):
        describe(zk, "a")
    with pytest.raises(UnknownTopic):
        delete_topic(zk, "a")


def test_bad_counts(zk):
    with pytest.raises(InvalidPartitions):
        create_topic(zk, "z", 0)
    with pytest.raises(InvalidReplicationFactor):
        create_topic(zk, "z", 1, replication_factor=2)
    assert not zk.exists("/brokers/topics/z")


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a" * 250, "has space", "slash/x", "colon:x", "ümlaut", "a,b"]
)
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopic):
        validate_topic_name(name)


@pytest.mark.parametrize("name", ["a", "a" * 249, "A-b_c.9", "...", "_"])
def test_legal_topic_names(name):
    assert validate_topic_name(name) == name
