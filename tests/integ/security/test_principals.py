"""SASL and TLS principals meet the ACLs: who a client proves to be decides what it may do.

One node serves the module: the native listener `SASL_TLS://`, the Kafka listener `SASL_SSL://`,
`--authorizer acl --super-users User:admin`, certificates from `testing.certs`. Users `alice`,
`bob` and `admin` are added with `groupshift users add` (PLAIN and both SCRAMs), and before the
node starts `groupshift acls add` gives alice Read on the groups `a-*` (a prefixed ACL) and on
the topic `clicks`; bob has no ACL, admin needs none. Every client is a real one: kafka-python and
confluent-kafka over SASL_SSL, groupshift's own consumer over SASL_TLS, the CLI with
`--command-config`. A second node (`SSL://`, `--tls-client-auth required`) checks that a client
certificate's subject is the principal an ACL names. A refused request changes nothing: the
znodes of the group it named are compared before and after.
"""

from __future__ import annotations

import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import GroupAuthorizationFailedError, TopicAuthorizationFailedError
from kafka.structs import OffsetAndMetadata

from coordinator.layout import MIGRATIONS, group_path, offset_path
from core.errors import GroupAuthorizationFailed
from core.types import TopicPartition as TP
from migrate.migration.kafka_target import TIMEOUT_S
from pipeline.consumer import Consumer
from security.client_config import ClientSecurity
from testing.certs import make_certs
from tests.inspect_helpers import ok, run
from tests.kafka_helpers import (
    CONFLUENT_TEST_CONSUMER,
    KAFKA_PYTHON_TEST_CONSUMER,
    assert_group_admin_refused,
    ck_consume,
    ck_error,
    kafka_node_in,
    kp_consume,
    produce,
)
from tests.snapshots import changes, zk_tree
from zk_rebalance.layout import offset_path as legacy_offset_path

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_principals")

USERS = ("alice", "bob", "admin")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
TOPIC, HIDDEN = "clicks", "secret"  # alice may read the first; nobody but admin the second


def _password_file(tmp, user: str) -> str:
    path = tmp / f"{user}.password"
    path.write_text(f"{user}-secret\n")
    path.chmod(0o600)
    return str(path)


@pytest.fixture(scope="module")
def node(module_zk_connect, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("principals")
    certs = make_certs(tmp / "tls")
    zk = f"{module_zk_connect}/principals"
    alice = ("acls", "add", "--allow-principal", "User:alice", "--operation", "Read")
    ok(*alice, "--group", "a-", "--resource-pattern-type", "prefixed", zk=zk)  # (creates the chroot)
    ok(*alice, "--topic", TOPIC, zk=zk)

    def add(user: str) -> None:
        password = _password_file(tmp, user)
        for mechanism in MECHANISMS:
            ok("users", "add", user, "--mechanism", mechanism, "--password-file", password, zk=zk)

    with ThreadPoolExecutor(len(USERS)) as pool:  # a user's mechanisms in turn, the users at once
        list(pool.map(add, USERS))
    with kafka_node_in(
        zk,
        tmp,
        *certs.node_args("none"),
        "--authorizer",
        "acl",
        "--super-users",
        "User:admin",
        listen="SASL_TLS://127.0.0.1:0",
        kafka_listen="SASL_SSL://127.0.0.1:0",
    ) as n:
        n.certs, n.tmp = certs, tmp
        for topic, partitions in ((TOPIC, 2), (HIDDEN, 1)):
            n.store.create_topic(topic, partitions)
            produce(n, topic, 20, partitions=partitions)
        yield n


def security(node, user: str, mechanism: str = "SCRAM-SHA-256") -> ClientSecurity:
    return ClientSecurity(
        protocol="SASL_SSL", mechanism=mechanism, username=user, password=f"{user}-secret", ca=node.certs.ca
    )


def command_config(node, user: str, mechanism: str = "SCRAM-SHA-256") -> str:
    """A client properties file (docs/security.md, "Clients") for `user`, 0600."""
    path = node.tmp / f"{user}-{mechanism}.properties"
    path.write_text(
        f"security.protocol=SASL_SSL\nsasl.mechanism={mechanism}\nsasl.username={user}\n"
        f"sasl.password={user}-secret\nssl.ca.location={node.certs.ca}\n"
    )
    path.chmod(0o600)
    return str(path)


def kp_consumer(node, user: str, mechanism: str, *topics: str, **kw) -> KafkaConsumer:
    settings = {**KAFKA_PYTHON_TEST_CONSUMER, **security(node, user, mechanism).kafka_python(), **kw}
    return KafkaConsumer(*topics, bootstrap_servers=node.kafka_bootstrap, **settings)


def kp_admin(node, user: str, mechanism: str) -> KafkaAdminClient:
    return KafkaAdminClient(
        bootstrap_servers=node.kafka_bootstrap,
        request_timeout_ms=20000,
        **security(node, user, mechanism).kafka_python(),
    )


def ck_config(node, user: str, mechanism: str) -> dict:
    return {"bootstrap.servers": node.kafka_bootstrap, **security(node, user, mechanism).confluent()}


def ck_consumer(node, user: str, mechanism: str, group: str) -> CKConsumer:
    return CKConsumer({**ck_config(node, user, mechanism), **CONFLUENT_TEST_CONSUMER, "group.id": group})


def wait_for(what: str, condition, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def token() -> str:
    return uuid.uuid4().hex[:8]


def snapshot(node, *paths: str) -> dict:
    return {p: zk_tree(f"{node.zk}{p}", around=False) for p in paths}


def unchanged(node, before: dict) -> None:
    after = snapshot(node, *before)
    for path in before:
        assert after[path] == before[path], changes(before[path], after[path])


def committed_by_admin(node, group: str, offsets: dict[int, int]) -> None:
    """Give `group` offsets on `clicks` as the super user (a group alice and bob must not touch)."""
    c = kp_consumer(node, "admin", "SCRAM-SHA-512", group_id=group)
    try:
        c.commit({TopicPartition(TOPIC, p): OffsetAndMetadata(o, "", -1) for p, o in offsets.items()})
    finally:
        c.close()
    assert node.zk_client.exists(offset_path(group, TOPIC, 0))


# ------------------------------------------------------------------------ Kafka clients, SASL_SSL


@pytest.mark.parametrize(
    "client, mechanism",
    [
        ("kafka-python", "PLAIN"),
        ("kafka-python", "SCRAM-SHA-512"),
        ("confluent-kafka", "PLAIN"),
        ("confluent-kafka", "SCRAM-SHA-256"),
    ],
)
def test_alice_consumes_and_commits_in_her_groups(node, client, mechanism):
    group = f"a-{token()}"
    if client == "kafka-python":
        c = kp_consumer(node, "alice", mechanism, TOPIC, group_id=group)
        try:
            assert len(set(kp_consume(c, 20))) == 20
            c.commit()
            assert c.committed(TopicPartition(TOPIC, 0)) == 10
        finally:
            c.close()
    else:
        ck = ck_consumer(node, "alice", mechanism, group)
        ck.subscribe([TOPIC])
        try:
            assert len(set(ck_consume(ck, 20))) == 20
            ck.commit(asynchronous=False)
            done = ck.committed([CKTopicPartition(TOPIC, p) for p in (0, 1)], timeout=20)
            assert {tp.partition: tp.offset for tp in done} == {0: 10, 1: 10}
        finally:
            ck.close()
    assert node.zk_client.exists(offset_path(group, TOPIC, 1))


def test_alice_is_refused_a_group_outside_her_prefix(node):
    group = f"b-{token()}"
    committed_by_admin(node, group, {0: 3})
    before = snapshot(node, group_path(group))
    tp = TopicPartition(TOPIC, 0)

    joining = kp_consumer(node, "alice", "PLAIN", TOPIC, group_id=group)
    with pytest.raises(GroupAuthorizationFailedError):
        kp_consume(joining, 1, timeout=20)
    joining.close()
    committing = kp_consumer(node, "alice", "PLAIN", group_id=group)
    committing.assign([tp])
    with pytest.raises(GroupAuthorizationFailedError):
        committing.commit({tp: OffsetAndMetadata(7, "", -1)})
    committing.close()
    ck = ck_consumer(node, "alice", "SCRAM-SHA-256", group)
    ck.subscribe([TOPIC])
    try:
        assert ck_error(ck).name() == "GROUP_AUTHORIZATION_FAILED"
    finally:
        ck.close()
    assert_group_admin_refused(
        kp_admin(node, "alice", "SCRAM-SHA-512"),
        AdminClient(ck_config(node, "alice", "SCRAM-SHA-256")),
        group,
    )
    unchanged(node, before)


def test_alice_is_refused_a_topic_she_may_not_read(node):
    group = f"a-{token()}"  # her group: only the topic is refused
    c = kp_consumer(node, "alice", "SCRAM-SHA-256", group_id=group)
    c.assign([TopicPartition(HIDDEN, 0)])
    try:
        assert c.topics() == {TOPIC}  # a listing shows only the topics she may describe
        with pytest.raises(TopicAuthorizationFailedError):
            c.commit({TopicPartition(HIDDEN, 0): OffsetAndMetadata(2, "", -1)})
    finally:
        c.close()
    ck = ck_consumer(node, "alice", "PLAIN", group)
    ck.subscribe([HIDDEN])
    try:  # (kafka-python only logs a subscribed topic's refusal and waits: librdkafka says it)
        assert ck_error(ck).name() == "TOPIC_AUTHORIZATION_FAILED"
        with pytest.raises(KafkaException) as refused:
            ck.commit(offsets=[CKTopicPartition(HIDDEN, 0, 2)], asynchronous=False)
        assert refused.value.args[0].name() == "TOPIC_AUTHORIZATION_FAILED"
    finally:
        ck.close()
    assert not node.zk_client.exists(offset_path(group, HIDDEN, 0))


def test_bob_is_refused_everything(node):
    group = f"a-{token()}"  # alice's prefix: bob has no ACL anywhere
    committed_by_admin(node, group, {0: 4, 1: 4})
    before = snapshot(node, group_path(group))
    c = kp_consumer(node, "bob", "SCRAM-SHA-256", group_id=group)
    c.assign([TopicPartition(TOPIC, 0)])
    try:
        assert c.topics() == set()  # he may describe no topic
        with pytest.raises(GroupAuthorizationFailedError):
            c.commit({TopicPartition(TOPIC, 0): OffsetAndMetadata(9, "", -1)})
    finally:
        c.close()
    ck = ck_consumer(node, "bob", "SCRAM-SHA-512", group)
    ck.subscribe([TOPIC])
    try:  # FindCoordinator, before a join: Group Describe
        assert ck_error(ck).name() == "GROUP_AUTHORIZATION_FAILED"
    finally:
        ck.close()
    ck_admin = AdminClient(ck_config(node, "bob", "PLAIN"))
    assert_group_admin_refused(kp_admin(node, "bob", "SCRAM-SHA-256"), ck_admin, group)
    assert not ck_admin.list_topics(timeout=20).topics  # no topic he may describe
    unchanged(node, before)


def test_the_super_user_may_do_anything(node):
    group = f"b-{token()}"  # no ACL names the group or the topic
    ck = ck_consumer(node, "admin", "SCRAM-SHA-256", group)
    ck.subscribe([HIDDEN])
    try:
        assert len(ck_consume(ck, 20)) == 20
        ck.commit(asynchronous=False)
    finally:
        ck.close()
    assert node.zk_client.exists(offset_path(group, HIDDEN, 0))
    ck_admin = AdminClient(ck_config(node, "admin", "PLAIN"))
    described = ck_admin.describe_consumer_groups([group])[group].result(timeout=30)
    assert described.group_id == group
    ck_admin.delete_consumer_groups([group])[group].result(timeout=30)
    wait_for("the group's znodes deleted", lambda: not node.zk_client.exists(group_path(group)))


# ------------------------------------------------------------- a TLS client certificate's principal


@pytest.fixture(scope="module")
def mutual_node(module_zk_connect, node, tmp_path_factory):
    """`SSL://` with `--tls-client-auth required`, and ACLs for the client certificate's subject."""
    tmp = tmp_path_factory.mktemp("mutual")
    zk = f"{module_zk_connect}/mutual"
    principal = node.certs.client_principal  # User:CN=alice,OU=eng
    grant = ("acls", "add", "--allow-principal", principal, "--operation", "Read")
    ok(*grant, "--group", "c-", "--resource-pattern-type", "prefixed", zk=zk)
    ok(*grant, "--topic", TOPIC, zk=zk)
    with kafka_node_in(
        zk,
        tmp,
        *node.certs.node_args("required"),
        "--authorizer",
        "acl",
        listen="TLS://127.0.0.1:0",
        kafka_listen="SSL://127.0.0.1:0",
    ) as n:
        n.store.create_topic(TOPIC, 1)
        produce(n, TOPIC, 5, partitions=1)
        yield n


def test_a_client_certificate_is_the_principal_its_acl_names(node, mutual_node):
    certs = node.certs
    tls = ClientSecurity(protocol="SSL", ca=certs.ca, cert=certs.client_cert, key=certs.client_key)
    assert tls.principal == "User:CN=alice,OU=eng"
    group = f"c-{token()}"
    c = KafkaConsumer(
        TOPIC,
        group_id=group,
        bootstrap_servers=mutual_node.kafka_bootstrap,
        **KAFKA_PYTHON_TEST_CONSUMER,
        **tls.kafka_python(),
    )
    try:
        assert len(kp_consume(c, 5)) == 5
        c.commit()
    finally:
        c.close()
    assert mutual_node.zk_client.exists(offset_path(group, TOPIC, 0))
    ck = CKConsumer(
        {
            "bootstrap.servers": mutual_node.kafka_bootstrap,
            **tls.confluent(),
            **CONFLUENT_TEST_CONSUMER,
            "group.id": f"a-{token()}",  # alice's SASL prefix is not the certificate's
        }
    )
    ck.subscribe([TOPIC])
    try:
        assert ck_error(ck).name() == "GROUP_AUTHORIZATION_FAILED"
    finally:
        ck.close()


# ------------------------------------------------------------ groupshift's consumer, SASL_TLS


def groupshift_consumer(node, user: str, group: str, rebalancer: str) -> Consumer:
    return Consumer(
        group,
        [TOPIC],
        rebalancer=rebalancer,
        zk=node.zk,
        bootstrap=node.bootstrap,
        log_root=node.data,
        security=command_config(node, user),
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        coordinator_timeout_ms=10_000,
    )


@pytest.mark.parametrize("rebalancer", ["coordinator", "server"])
def test_groupshift_consumer_as_alice_and_as_bob(node, rebalancer):
    group = f"a-{token()}"
    c = groupshift_consumer(node, "alice", group, rebalancer)
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += [r.value for rs in c.poll(200).values() for r in rs]
        assert len(set(got)) == 20
        c.commit()
        assert {p: c.committed(TP(TOPIC, p)) for p in (0, 1)} == {0: 10, 1: 10}
    finally:
        c.close(autocommit=False)

    refused = groupshift_consumer(node, "bob", f"a-{token()}", rebalancer)
    started = time.monotonic()
    try:
        with pytest.raises(GroupAuthorizationFailed, match="GROUP_AUTHORIZATION_FAILED.*groupshift acls add"):
            while time.monotonic() - started < 20:
                refused.poll(timeout_ms=200)
    finally:
        refused.close(autocommit=False)
    assert time.monotonic() - started < 10  # at once, not after the coordinator timeout


# ---------------------------------------------------------------- the CLI through the Kafka listener


def one_line(r, *words: str) -> str:
    """A refusal: a non-zero exit, one line on stderr holding `words`, nothing on stdout."""
    assert r.returncode != 0 and r.stdout == "", (r.returncode, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
    for word in words:
        assert word in r.stderr, r.stderr
    return r.stderr


def test_offsets_export_and_import_through_the_node_honour_the_acls(node):
    group = f"a-{token()}"
    offsets = node.tmp / f"{group}.csv"
    offsets.write_text(f"{TOPIC},0,6\n{TOPIC},1,7\n")
    alice, bob = command_config(node, "alice", "PLAIN"), command_config(node, "bob")

    def offsets_cli(command: str, g: str, config: str, *args: str):
        return run(
            "offsets", command, g, *args, "--bootstrap", node.kafka_bootstrap, "--command-config", config
        )

    def importing(g: str, config: str):
        return offsets_cli("import", g, config, "--from-file", str(offsets), "--execute")

    assert importing(group, alice).returncode == 0
    out = offsets_cli("export", group, alice)
    assert out.returncode == 0 and out.stdout.splitlines() == [f"{TOPIC},0,6", f"{TOPIC},1,7"], out.stderr
    before = snapshot(node, group_path(group))

    started = time.monotonic()
    line = one_line(
        offsets_cli("export", group, bob),
        "GROUP_AUTHORIZATION_FAILED",
        f"groupshift acls add --allow-principal User:bob --operation Describe --group {group}",
    )
    assert "within" not in line and time.monotonic() - started < TIMEOUT_S  # an answer, not a timeout
    one_line(
        importing(group, bob),
        "TOPIC_AUTHORIZATION_FAILED",
        f"--allow-principal User:bob --operation Read --topic {TOPIC}",
    )
    other = f"b-{token()}"  # alice may read the topic, not that group
    one_line(
        importing(other, alice),
        "GROUP_AUTHORIZATION_FAILED",
        f"--allow-principal User:alice --operation Describe --group {other}",
    )
    unchanged(node, before)
    assert not node.zk_client.exists(group_path(other))


def test_migrate_to_the_node_honours_the_acls_and_knows_its_listener(node):
    group, other = f"a-{token()}", f"b-{token()}"
    for g in (group, other):  # scheme-one groups (0.8's /consumers) to move onto the node
        for partition, offset in ((0, 2), (1, 3)):
            node.zk_client.create(legacy_offset_path(g, TOPIC, partition), b"%d" % offset, makepath=True)
    paths = [f"/consumers/{g}" for g in (group, other)]
    paths += [f"{MIGRATIONS}/{g}" for g in (group, other)] + [group_path(group), group_path(other)]
    before = snapshot(node, *paths)

    def migrate(g: str, user: str, source: str = "zk"):
        args = ("migrate", "run", g, "--from", source, "--to", "kafka", "--bootstrap", node.kafka_bootstrap)
        return run(*args, "--command-config", command_config(node, user), zk=node.zk)

    one_line(migrate(group, "bob"), "TOPIC_AUTHORIZATION_FAILED", "--allow-principal User:bob")
    one_line(migrate(other, "alice"), "GROUP_AUTHORIZATION_FAILED", f"--group {other}")
    unchanged(node, before)
    # What alice may do, she does: the legacy group's offsets land in her group on the node.
    assert migrate(group, "alice").returncode == 0
    for partition, offset in ((0, 2), (1, 3)):
        assert json.loads(node.zk_client.get(offset_path(group, TOPIC, partition))[0])["offset"] == offset
    # A coordinator group cannot be "moved" onto the Kafka listener of its own nodes, secured or not
    # (migrate finds the listener in the nodes' registrations, which name its protocol).
    one_line(
        migrate(group, "alice", "coordinator"), "is the Kafka listener of this ZooKeeper's coordinator nodes"
    )
