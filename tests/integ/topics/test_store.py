"""TopicStore: ZooKeeper registration and log directories kept together."""

from __future__ import annotations

import pytest

from core.errors import UnknownTopic
from topics.errors import TopicAlreadyExists
from topics.registry import create_topic
from topics.store import TopicStore


def test_store_with_zookeeper(zk, tmp_path):
    store = TopicStore(tmp_path / "data", zk)
    info = store.create_topic("orders", 2)
    assert info.registered and [p.partition for p in info.partitions] == [0, 1]
    assert (tmp_path / "data" / "orders" / "partition=1").is_dir()
    with pytest.raises(TopicAlreadyExists):
        store.create_topic("orders", 2)
    store.log.produce("orders", [b"a", b"b", b"c"], partition=1)
    info = store.add_partitions("orders", 3)
    assert [(p.partition, p.latest) for p in info.partitions] == [(0, 0), (1, 3), (2, 0)]
    assert info.records == 3 and info.partitions[2].replicas == (0,)
    # Registered by someone else (e.g. Kafka's tools): described from ZooKeeper, no data yet.
    create_topic(zk, "legacy", 2)
    assert [p.latest for p in store.describe("legacy").partitions] == [0, 0]
    assert store.list_topics() == ["legacy", "orders"]
    store.delete_topic("orders")
    assert store.list_topics() == ["legacy"] and not (tmp_path / "data" / "orders").exists()
    with pytest.raises(UnknownTopic):
        store.describe("orders")


def test_store_without_zookeeper(tmp_path):
    store = TopicStore(tmp_path / "data")
    store.create_topic("t", 1)
    assert not store.describe("t").registered and store.list_topics() == ["t"]
    with pytest.raises(UnknownTopic):
        store.delete_topic("nope")
