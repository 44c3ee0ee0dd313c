"""Kafka's AdminClient on a consumer-protocol group (KIP-848), against `groupshift groups`.

Two librdkafka consumers (confluent-kafka 2.16.1, `group.protocol=consumer`) form a scheme-two
incremental group through a node's Kafka listener. `AdminClient.describe_consumer_groups` (which
sends ConsumerGroupDescribe, api 69), the raw ConsumerGroupDescribe answer, `groupshift groups
describe` (the node's DescribeGroups) and the group as stored in ZooKeeper agree on the members,
their assignments and targets, epochs, state, assignor and committed offsets.
`AdminClient.list_consumer_groups` lists the group: the Kafka listener reports its protocol type
`consumer-incremental` as `consumer` (librdkafka lists only `consumer` groups), the native
listener keeps it.
"""

from __future__ import annotations

import socket
import subprocess
import uuid

import pytest
from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, ConsumerGroupType
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient

from coordinator.kafka_wire.codec import LISTED_AS_CONSUMER
from coordinator.kafka_wire.consumer_group_api import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE
from coordinator.wire import schema as S
from migrate.schemes.coordinator_store import read_group
from tests.integ.coordinator.test_kafka_clients import KCAT, _describe
from tests.integ.coordinator.test_kip848_clients import Member, _exchange, _wait_for
from tests.kafka_helpers import kafka_node_in, new_topic, produce


@pytest.fixture
def node(zk_connect, tmp_path):
    with kafka_node_in(zk_connect, tmp_path) as proc:
        yield proc


def _parts(tps) -> set[tuple[str, int]]:
    return {(tp.topic, tp.partition) for tp in tps}


def _raw_describe(node, group: str):
    with socket.create_connection(("127.0.0.1", node.kafka_port), timeout=10) as s:
        req = ConsumerGroupDescribeRequest(version=0, group_ids=[group], include_authorized_operations=False)
        [described] = _exchange(s, req, ConsumerGroupDescribeResponse, 0).groups
    assert described.error_code == 0
    return described


def _two_members_settled(node, topic: str, group: str) -> list[Member]:
    produce(node, topic, 40, partitions=4)
    members = [Member(node, group, topic, f"m{i}") for i in range(2)]
    for m in members:
        m.start()
    _wait_for(
        "the two members split the four partitions and read every record",
        lambda: (
            all(len(m.assigned) == 2 for m in members)
            and sum(len(m.got) for m in members) == 40
            and not members[0].assigned & members[1].assigned
        ),
    )
    _wait_for(
        "the group is Stable with every member at its target",
        lambda: (
            (d := _raw_describe(node, group)).group_state == "Stable"
            and all(
                _wire_parts(m.assignment) == _wire_parts(m.target_assignment)
                and len(_wire_parts(m.assignment)) == 2
                for m in d.members
            )
        ),
    )
    return members


def _wire_parts(assignment) -> set[tuple[str, int]]:
    return {(t.topic_name, p) for t in assignment.topic_partitions for p in t.partitions}


def test_admin_describe_and_groups_describe_agree_on_a_consumer_protocol_group(node):
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    members = _two_members_settled(node, topic, group)
    try:
        admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
        kafka = admin.describe_consumer_groups([group], request_timeout=20)[group].result()
        raw = _raw_describe(node, group)
        [cli] = _describe(node, group, "--members")
        [cli_offsets] = _describe(node, group)
        stored = read_group(node.zk_client, group, live=False)
        request = [ConsumerGroupTopicPartitions(group)]
        committed = admin.list_consumer_group_offsets(request, request_timeout=20)[group].result()
    finally:
        for m in members:
            m.finish()

    # State, type and assignor.
    assert (kafka.state.name, kafka.type.name, kafka.partition_assignor) == ("STABLE", "CONSUMER", "uniform")
    assert not kafka.is_simple_consumer_group and kafka.coordinator.id == 1
    summary = cli["summary"]
    assert (summary["state"], summary["protocol_type"], summary["protocol"]) == (
        "Stable",
        INCREMENTAL_PROTOCOL_TYPE,
        "uniform",
    )
    assert (stored.state, stored.protocol) == ("Stable", "uniform")
    assert summary["generation"] == raw.group_epoch == raw.assignment_epoch == stored.generation
    assert summary["coordinator"].startswith("node 1 ")

    # Members: id, client, host, assignment, target; the epochs from the raw answer.
    by_kafka = {
        m.member_id: (
            m.client_id,
            m.host,
            _parts(m.assignment.topic_partitions),
            _parts(m.target_assignment.topic_partitions),
        )
        for m in kafka.members
    }
    by_cli = {
        m["member_id"]: (
            m["client_id"],
            m["host"],
            {tuple(tp) for tp in m["partitions"]},
            m["target"],
            m["epoch"],
        )
        for m in cli["members"]
    }
    by_raw = {
        m.member_id: (_wire_parts(m.assignment), _wire_parts(m.target_assignment), m.member_epoch)
        for m in raw.members
    }
    by_stored = {
        m.member_id: ({tuple(tp) for tp in m.partitions}, {tuple(tp) for tp in m.target}, m.epoch)
        for m in stored.members
    }
    assert len(by_kafka) == 2 and set(by_kafka) == set(by_cli) == set(by_raw) == set(by_stored)
    for member_id, (client_id, host, assignment, target) in by_kafka.items():
        assert assignment == target and len(assignment) == 2
        partitions = ",".join(str(p) for _, p in sorted(assignment))
        assert by_cli[member_id] == (
            client_id,
            host,
            assignment,
            f"{topic}({partitions})",
            raw_epoch := by_raw[member_id][2],
        )
        assert by_raw[member_id] == (assignment, target, raw_epoch)
        assert by_stored[member_id] == (assignment, target, raw_epoch)
    assert {p for a, *_ in by_raw.values() for p in a} == {(topic, p) for p in range(4)}
    assert all(m.subscribed_topic_names == [topic] for m in raw.members)

    # Committed offsets: every member committed what it read.
    kafka_offsets = {tp.partition: tp.offset for tp in committed.topic_partitions if tp.topic == topic}
    cli_committed = {r["partition"]: r["committed"] for r in cli_offsets["partitions"] if r["topic"] == topic}
    assert kafka_offsets == cli_committed == {p: 10 for p in range(4)}


def test_admin_lists_consumer_protocol_groups_as_consumer_groups(node):
    assert INCREMENTAL_PROTOCOL_TYPE in LISTED_AS_CONSUMER
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    members = _two_members_settled(node, topic, group)
    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})  # kept: a dropped one ends its requests
    try:
        listed = admin.list_consumer_groups(request_timeout=20).result()
        assert not listed.errors
        [mine] = [g for g in listed.valid if g.group_id == group]
        assert not mine.is_simple_consumer_group
        # ListGroups v5: its state and its type, and the filters on both.
        assert (mine.state, mine.type) == (ConsumerGroupState.STABLE, ConsumerGroupType.CONSUMER)

        def listed_ids(**filters) -> set[str]:
            answer = admin.list_consumer_groups(request_timeout=20, **filters).result()
            assert not answer.errors
            return {g.group_id for g in answer.valid}

        assert group in listed_ids(types={ConsumerGroupType.CONSUMER}, states={ConsumerGroupState.STABLE})
        assert group not in listed_ids(types={ConsumerGroupType.CLASSIC})
        assert group not in listed_ids(states={ConsumerGroupState.EMPTY})
        # kafka-python's admin shows the raw ListGroups answer: Kafka's type.
        kp = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=20000)
        try:
            assert {g["group_id"]: g["protocol_type"] for g in kp.list_groups()}[group] == "consumer"
        finally:
            kp.close()
        # The native wire is unchanged: the core's protocol type.
        with node.client() as client:
            native = client.request(S.LIST_GROUPS, {"states_filter": []})
        assert {g["group_id"]: g["protocol_type"] for g in native["groups"]}[
            group
        ] == INCREMENTAL_PROTOCOL_TYPE
        if KCAT is not None:  # kcat's metadata listing beside the group
            out = subprocess.run(
                [KCAT, "-b", node.kafka_bootstrap, "-L", "-t", topic],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0 and f'topic "{topic}" with 4 partitions' in out.stdout, out.stderr
    finally:
        for m in members:
            m.finish()
    # Empty once both left (their offsets stay): still listed, as Kafka lists an empty consumer group.
    _wait_for("the group to be Empty", lambda: _raw_describe(node, group).group_state == "Empty")
    listed = admin.list_consumer_groups(request_timeout=20).result()
    assert group in {g.group_id for g in listed.valid}
