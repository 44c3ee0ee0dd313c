"""A Kafka 0.8 group migrated live into scheme two, then consumed by librdkafka's consumer protocol.

The whole way from scheme one to KIP-848's clients, on real processes and one node with a Kafka
listener whose log root (`--data`) is the consumers' own: three legacy consumer processes consume
while records are produced; `migrate run --to server --mode live` bridges the group; each legacy
consumer is replaced by a scheme-two incremental consumer process; `migrate run` switches the
group (done). Then two confluent-kafka consumers with `group.protocol=consumer` join the same
group through the Kafka listener and take partitions from the groupshift members, which then stop
one by one until the librdkafka members hold everything. They commit what they read after every
batch and before giving a partition up. Every record is committed exactly once over all phases:
the bridged period's checks of `live_harness.check_run`, and every partition's commits — the
processes' and the librdkafka members' — follow each other from offset 0 to the log end.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient

from core.types import TopicPartition as TP
from tests.integ.coordinator.test_kip848_clients import Member, _owners
from tests.integ.migrate import live_harness as H
from tests.kafka_helpers import kafka_node_in

LIVE = ["--from", "zk", "--to", "server", "--mode", "live"]


@pytest.fixture
def kafka_node_on_the_log(zk_connect, tmp_path):
    """Node 1 with a Kafka listener, serving Fetch from the log root `legacy_world` writes."""
    with kafka_node_in(zk_connect, tmp_path, data=tmp_path / "log") as proc:
        yield proc


def test_a_migrated_group_is_taken_over_by_librdkafka_consumer_protocol_members(
    zk, zk_connect, kafka_node_on_the_log, tmp_path
):
    from migrate.migration import offline as O

    node = kafka_node_on_the_log
    log, spec, producer = H.legacy_world(zk, zk_connect, tmp_path)
    assert log.root == node.data  # what the librdkafka members fetch is what the processes read
    procs: list[H.Proc] = []
    rdkafka: list[Member] = []
    try:
        legacy = H.start_legacy(tmp_path, spec, producer, procs)
        started = H.cli("migrate", "run", "billing", *LIVE, "--zk", zk_connect, "-o", "json")
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["state"] == "bridged"
        spec = {**spec, "bootstrap": node.bootstrap, "incremental": True}
        members = H.replace_legacy(zk, tmp_path, spec, legacy, procs, rebalancer="server")
        H.switch(zk, zk_connect, "server")

        # librdkafka's consumer protocol joins the migrated group beside the groupshift members.
        rdkafka = [Member(node, "billing", "events", f"rdkafka-{i}") for i in range(2)]
        for m in rdkafka:
            m.start()
        H.wait_for(lambda: all(m.assigned for m in rdkafka), 30, "the librdkafka members to get partitions")
        assert all(m.popen.poll() is None for m in members)  # taken from live groupshift members
        for m in members:  # which leave one by one (each commits what it read, then leaves)
            m.stop()
        H.wait_for(
            lambda: (
                sorted(_owners(rdkafka)) == list(range(H.PARTITIONS))
                and all(len(owners) == 1 for owners in _owners(rdkafka).values())
            ),
            30,
            "the librdkafka members to hold every partition",
        )
        producer.stop_event.set()
        producer.join(5)
        want = {TP("events", p): log.latest(TP("events", p)) for p in range(H.PARTITIONS)}
        H.wait_for(lambda: O.offsets(zk, "server", "billing") == want, 30, "the librdkafka members to finish")
        admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
        request = [ConsumerGroupTopicPartitions("billing")]
        seen = admin.list_consumer_group_offsets(request, request_timeout=20)["billing"].result()
        assert {TP(tp.topic, tp.partition): tp.offset for tp in seen.topic_partitions} == want
        for m in rdkafka:
            m.finish()
    finally:
        H.end_run(producer, procs)
        for m in rdkafka:
            m.stop.set()
            m.join(30)
    assert all(m.commits for m in rdkafka)
    extra = [(m.name, p, lo, hi) for m in rdkafka for p, lo, hi in m.commits]
    H.check_run(zk, zk_connect, procs, members, want, extra_spans=extra)
    H.check_tiling([*H.committed_spans(procs), *extra], {tp.partition: end for tp, end in want.items()})
