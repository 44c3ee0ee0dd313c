"""A node started with `--authorizer acl` enforces Kafka's ACLs on both listeners (docs/security.md).

One node process (a Kafka listener, its own chroot and log root) serves the module; every test
uses groups and topics of its own, and the ACLs are for `User:ANONYMOUS` — the principal of a
client that did not authenticate — or `User:*`. ACLs are written into ZooKeeper in Kafka's layout
(`security.acl_store.AclStore`, what `groupshift acls` writes) and the node picks them up from the
change notifications: `sync` waits until it has. Clients are unmodified kafka-python and
confluent-kafka (the Kafka listener) and groupshift's own consumer (the native listener).
"""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

from cli.cmd_coordinator import OPEN_NOTICE
from coordinator.layout import group_path, offset_path
from coordinator.node.process import NodeProcess
from coordinator.wire import codec as P
from coordinator.wire.errors import GROUP_AUTHORIZATION_FAILED
from core.errors import GroupAuthorizationFailed
from security.acl_store import AclStore
from security.acls import (
    ALLOW,
    CLUSTER,
    CLUSTER_NAME,
    DENY,
    DESCRIBE,
    GROUP,
    PREFIXED,
    READ,
    TOPIC,
    AccessControlEntry,
    ResourcePattern,
)
from tests.kafka_helpers import CONFLUENT_TEST_CONSUMER as CK
from tests.kafka_helpers import KAFKA_PYTHON_TEST_CONSUMER as KP
from tests.kafka_helpers import (
    assert_group_admin_refused,
    ck_consume,
    ck_error,
    kafka_node,
    kp_consume,
    new_topic,
    produce,
)
from tests.snapshots import zk_tree

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_acl_enforcement")

REPO = Path(__file__).resolve().parents[3]
ANONYMOUS = "User:ANONYMOUS"


@pytest.fixture(scope="module")
def node(module_zk_connect, tmp_path_factory):
    data = tmp_path_factory.mktemp("acl-data")
    log = tmp_path_factory.mktemp("acl-node") / "node-1.log"
    with kafka_node(module_zk_connect, data, log, "--authorizer", "acl") as proc:
        proc.acls = AclStore(proc.zk_client)
        yield proc


def _token() -> str:
    return uuid.uuid4().hex[:8]


def allow(principal: str, *ops, host: str = "*") -> list[AccessControlEntry]:
    return [AccessControlEntry(principal, host, op, ALLOW) for op in ops]


def find_coordinator(node, group: str) -> int:
    with node.client() as c:
        return c.request(P.FIND_COORDINATOR, {"key": group, "key_type": 0})["error_code"]


def wait_for(what: str, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def sync(node) -> None:
    """Wait until the node applied every ACL change written so far: a literal and a prefixed
    sentinel (each change root is applied in order) become visible to FindCoordinator."""
    token = _token()
    node.acls.add(ResourcePattern(GROUP, f"sync-{token}"), allow(ANONYMOUS, DESCRIBE))
    node.acls.add(ResourcePattern(GROUP, f"psync-{token}", PREFIXED), allow(ANONYMOUS, DESCRIBE))
    wait_for(
        "the node applies the ACL changes",
        lambda: (
            find_coordinator(node, f"sync-{token}") == 0 and find_coordinator(node, f"psync-{token}-x") == 0
        ),
    )


def grant(node, *acls: tuple[ResourcePattern, list[AccessControlEntry]]) -> None:
    for pattern, entries in acls:
        node.acls.add(pattern, entries)
    sync(node)


# ------------------------------------------------------------------------------ Kafka listener


def test_kafka_clients_consume_and_commit_where_the_acls_allow(node):
    token = _token()
    topic = new_topic(node, 2)
    values = produce(node, topic, 40)
    grant(
        node,
        (ResourcePattern(GROUP, f"a-{token}", PREFIXED), allow(ANONYMOUS, READ)),
        (ResourcePattern(TOPIC, topic), allow(ANONYMOUS, READ)),
    )
    kp = KafkaConsumer(topic, group_id=f"a-{token}-kp", bootstrap_servers=node.kafka_bootstrap, **KP)
    try:
        assert set(kp_consume(kp, 40)) == values
        kp.commit()
        assert kp.committed(TopicPartition(topic, 0)) == 20
    finally:
        kp.close()
    ck = CKConsumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": f"a-{token}-ck", **CK})
    ck.subscribe([topic])
    try:
        assert set(ck_consume(ck, 40)) == values
        ck.commit(asynchronous=False)
        done = ck.committed([CKTopicPartition(topic, p) for p in (0, 1)], timeout=20)
        assert {tp.partition: tp.offset for tp in done} == {0: 20, 1: 20}
    finally:
        ck.close()


def test_another_group_is_refused_for_join_commit_describe_and_delete(node):
    token = _token()
    topic = new_topic(node, 1)
    produce(node, topic, 10, partitions=1)
    allowed_b = ResourcePattern(GROUP, f"b-{token}")
    grant(node, (allowed_b, allow(ANONYMOUS, READ)), (ResourcePattern(TOPIC, topic), allow(ANONYMOUS, READ)))
    c = KafkaConsumer(topic, group_id=f"b-{token}", bootstrap_servers=node.kafka_bootstrap, **KP)
    try:  # while it was allowed, group b got a member's commit
        assert len(kp_consume(c, 10)) == 10
        c.commit()
    finally:
        c.close()
    node.acls.remove(allowed_b)
    wait_for("b refused", lambda: find_coordinator(node, f"b-{token}") == GROUP_AUTHORIZATION_FAILED)
    group, tp = f"b-{token}", TopicPartition(topic, 0)
    before = zk_tree(f"{node.zk}{group_path(group)}", around=False)

    joining = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **KP)
    with pytest.raises(GroupAuthorizationFailedError):
        kp_consume(joining, 1, timeout=20)
    joining.close()
    committing = KafkaConsumer(group_id=group, bootstrap_servers=node.kafka_bootstrap, **KP)
    committing.assign([tp])
    with pytest.raises(GroupAuthorizationFailedError):
        committing.commit({tp: OffsetAndMetadata(3, "", -1)})
    committing.close()
    ck = CKConsumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": group, **CK})
    ck.subscribe([topic])
    try:
        assert ck_error(ck).name() == "GROUP_AUTHORIZATION_FAILED"
    finally:
        ck.close()
    assert_group_admin_refused(
        KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=20000),
        AdminClient({"bootstrap.servers": node.kafka_bootstrap}),
        group,
    )

    assert zk_tree(f"{node.zk}{group_path(group)}", around=False) == before  # nothing changed


def test_a_topic_without_read_is_refused_on_fetch_and_commit(node):
    token = _token()
    readable, described, hidden = new_topic(node, 1), new_topic(node, 1), new_topic(node, 1)
    produce(node, described, 5, partitions=1)
    group = f"t-{token}"
    grant(
        node,
        (ResourcePattern(GROUP, group), allow(ANONYMOUS, READ)),
        (ResourcePattern(TOPIC, readable), allow(ANONYMOUS, READ)),
        (ResourcePattern(TOPIC, described), allow(ANONYMOUS, DESCRIBE)),
    )
    c = KafkaConsumer(described, group_id=group, bootstrap_servers=node.kafka_bootstrap, **KP)
    try:
        with pytest.raises(TopicAuthorizationFailedError):  # Fetch
            kp_consume(c, 1, timeout=20)
        listed = c.topics()  # Metadata: only the topics it may describe
        assert {readable, described} <= listed and hidden not in listed
    finally:
        c.close()
    c = KafkaConsumer(group_id=group, bootstrap_servers=node.kafka_bootstrap, **KP)
    c.assign([TopicPartition(readable, 0), TopicPartition(described, 0)])
    try:
        with pytest.raises(TopicAuthorizationFailedError):  # OffsetCommit: per partition
            c.commit({TopicPartition(described, 0): OffsetAndMetadata(2, "", -1)})
        c.commit({TopicPartition(readable, 0): OffsetAndMetadata(0, "", -1)})  # the readable one is fine
    finally:
        c.close()
    producer = KafkaProducer(bootstrap_servers=node.kafka_bootstrap, retries=0)
    try:  # Produce needs Write
        with pytest.raises(TopicAuthorizationFailedError):
            producer.send(described, b"x").get(timeout=20)
    finally:
        producer.close()

    ck = CKConsumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": group, **CK})
    ck.subscribe([described])
    try:
        assert ck_error(ck).name() == "TOPIC_AUTHORIZATION_FAILED"
        committed = ck.commit(offsets=[CKTopicPartition(described, 0, 2)], asynchronous=False)
        assert committed[0].error is not None and committed[0].error.name() == "TOPIC_AUTHORIZATION_FAILED"
    except KafkaException as exc:  # librdkafka may raise the partition's error instead
        assert exc.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    finally:
        ck.close()
    assert not node.zk_client.exists(offset_path(group, described, 0))  # no offset written


def test_prefixed_acls_and_a_deny_that_beats_an_allow(node):
    token = _token()
    grant(
        node,
        (ResourcePattern(GROUP, f"d-{token}", PREFIXED), allow("User:*", READ)),
        (ResourcePattern(GROUP, f"d-{token}-denied"), [AccessControlEntry(ANONYMOUS, "*", READ, DENY)]),
    )
    join = {
        "session_timeout_ms": 6000,
        "rebalance_timeout_ms": 6000,
        "member_id": "",
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "reason": None,
    }
    with node.client() as c:
        ok = c.request(P.JOIN_GROUP, {"group_id": f"d-{token}-ok", **join})
        denied = c.request(P.JOIN_GROUP, {"group_id": f"d-{token}-denied", **join})
    assert ok["error_code"] != GROUP_AUTHORIZATION_FAILED and ok["member_id"]  # admitted (MEMBER_ID_REQUIRED)
    assert denied["error_code"] == GROUP_AUTHORIZATION_FAILED
    assert find_coordinator(node, f"d-{token}-denied") == 0  # a Read deny leaves the implied Describe
    assert find_coordinator(node, f"e-{token}") == GROUP_AUTHORIZATION_FAILED  # outside the prefix


def test_an_acl_added_while_the_node_runs_takes_effect(node):
    token = _token()
    group, topic = f"late-{token}", new_topic(node, 1)
    produce(node, topic, 3, partitions=1)
    assert find_coordinator(node, group) == GROUP_AUTHORIZATION_FAILED

    def acls(*args: str) -> None:
        done = subprocess.run(
            [sys.executable, "-m", "cli", "acls", *args, "--zk", node.zk],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr

    acls("add", "--allow-principal", ANONYMOUS, "--operation", "Read", "--group", group, "--topic", topic)
    wait_for("the new ACL applies", lambda: find_coordinator(node, group) == 0)
    c = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **KP)
    try:
        assert len(kp_consume(c, 3)) == 3
        c.commit()
    finally:
        c.close()
    acls("remove", "--force", "--group", group)
    wait_for("the removal applies", lambda: find_coordinator(node, group) == GROUP_AUTHORIZATION_FAILED)


def test_list_groups_needs_cluster_describe_to_see_every_group(node):
    token = _token()
    hidden, topic = f"h-{token}", new_topic(node, 1)
    grant(
        node,
        (ResourcePattern(GROUP, hidden), allow(ANONYMOUS, READ)),
        (ResourcePattern(TOPIC, topic), allow(ANONYMOUS, READ)),
    )
    with node.client() as c:  # a commit makes the group exist
        assert (
            c.request(P.OFFSET_COMMIT, _commit(hidden, topic))["topics"][0]["partitions"][0]["error_code"]
            == 0
        )
    node.acls.remove(ResourcePattern(GROUP, hidden))
    sync(node)
    with node.client() as c:
        assert hidden not in {
            g["group_id"] for g in c.request(P.LIST_GROUPS, {"states_filter": []})["groups"]
        }
    cluster = ResourcePattern(CLUSTER, CLUSTER_NAME)
    grant(node, (cluster, allow(ANONYMOUS, DESCRIBE)))
    try:
        with node.client() as c:
            assert hidden in {
                g["group_id"] for g in c.request(P.LIST_GROUPS, {"states_filter": []})["groups"]
            }
    finally:
        node.acls.remove(cluster)
        sync(node)


def _commit(group: str, topic: str) -> dict:
    """A standalone OffsetCommit (no member) of one offset, on the native wire."""
    return {
        "group_id": group,
        "generation_id": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1,
                                                          "committed_metadata": ""}]}],
    }  # fmt: skip


# ----------------------------------------------------------------------------- native listener


@pytest.mark.parametrize(
    "rebalancer, incremental", [("coordinator", False), ("server", False), ("server", True)]
)
def test_groupshift_consumers_refused_say_so_in_one_error(node, rebalancer, incremental):
    from pipeline.consumer import Consumer

    token = _token()
    topic = new_topic(node, 1)
    grant(node, (ResourcePattern(GROUP, f"ok-{token}"), allow(ANONYMOUS, READ)))
    common = dict(
        rebalancer=rebalancer,
        incremental=incremental,
        zk=node.zk,
        log_root=node.data,
        bootstrap=node.bootstrap,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        enable_auto_commit=False,
    )
    refused = Consumer(f"no-{token}", [topic], **common)
    started = time.monotonic()
    try:
        with pytest.raises(GroupAuthorizationFailed, match="GROUP_AUTHORIZATION_FAILED.*groupshift acls add"):
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                refused.poll(timeout_ms=200)
    finally:
        refused.close()
    assert time.monotonic() - started < 10  # at once, not after the coordinator timeout
    allowed = Consumer(f"ok-{token}", [topic], **common)
    try:  # a group it may read, a topic it may not: the commit is refused with the topic's error
        wait_for("assigned", lambda: allowed.poll(timeout_ms=200) is not None and allowed.assignment())
        with pytest.raises(Exception, match="TOPIC_AUTHORIZATION_FAILED"):
            allowed.commit({t: 0 for t in allowed.assignment()})
    finally:
        allowed.close()


# ------------------------------------------------------------------------- other nodes' settings


def test_super_users_bypass_the_acls_and_no_authorizer_says_everything_is_open(zk_connect, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with kafka_node(zk_connect, data, tmp_path / "su.log", "--authorizer", "acl", "--super-users",
                    "User:admin;User:ANONYMOUS") as su:  # fmt: skip
        topic = new_topic(su, 1)
        produce(su, topic, 5, partitions=1)
        c = KafkaConsumer(topic, group_id="anything", bootstrap_servers=su.kafka_bootstrap, **KP)
        try:  # no ACL at all
            assert len(kp_consume(c, 5)) == 5
            c.commit()
        finally:
            c.close()
        assert not any(OPEN_NOTICE in line for line in su.output)
    open_node = NodeProcess.start(zk_connect, 2, "--shards", "1", log_path=tmp_path / "open.log")
    try:
        assert any(line.strip() == OPEN_NOTICE for line in open_node.output)
        with open_node.client() as c:
            assert c.request(P.FIND_COORDINATOR, {"key": "anything", "key_type": 0})["error_code"] == 0
    finally:
        open_node.stop()
