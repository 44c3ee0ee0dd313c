"""groupshift's own clients on a secured node: its consumer over TLS + SASL under schemes two and
three, the CLI's admin commands through the Kafka listener with `--command-config`, and a wrong
password stopping a consumer with one error and nothing written.

One node for the module: the native listener `SASL_TLS://`, the Kafka listener `SASL_SSL://`,
user `alice` under SCRAM-SHA-256 and PLAIN; certificates from `testing.certs`.
"""

from __future__ import annotations

import time

import pytest

from coordinator.member.authenticate import AuthenticationFailed
from core.types import TopicPartition as TP
from pipeline.consumer import Consumer
from testing.certs import make_certs
from tests.inspect_helpers import ok, run
from tests.kafka_helpers import kafka_node, new_topic, produce
from tests.snapshots import zk_tree

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_secured_clients")

PASSWORD = "pencil"


@pytest.fixture(scope="module")
def node(module_zk_connect, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("secured")
    certs = make_certs(tmp / "tls")
    password = tmp / "password"
    password.write_text(PASSWORD + "\n")
    password.chmod(0o600)
    zk = f"{module_zk_connect}/secured"
    for mechanism in ("SCRAM-SHA-256", "PLAIN"):
        ok("users", "add", "alice", "--mechanism", mechanism, "--password-file", str(password), zk=zk)
    data = tmp / "data"
    data.mkdir()
    with kafka_node(
        zk,
        data,
        tmp / "node.log",
        *certs.node_args("none"),
        listen="SASL_TLS://127.0.0.1:0",
        kafka_listen="SASL_SSL://127.0.0.1:0",
    ) as n:
        n.certs, n.tmp = certs, tmp
        yield n


def client_config(node, mechanism: str = "SCRAM-SHA-256", password: str = PASSWORD) -> str:
    path = node.tmp / f"client-{mechanism}-{password}.properties"
    path.write_text(
        "security.protocol=SASL_SSL\n"
        f"sasl.mechanism={mechanism}\nsasl.username=alice\nsasl.password={password}\n"
        f"ssl.ca.location={node.certs.ca}\n"
    )
    path.chmod(0o600)
    return str(path)


def consumer(node, group: str, topic: str, rebalancer: str, security: str) -> Consumer:
    kind = {"incremental": dict(rebalancer="server", incremental=True)}.get(
        rebalancer, {"rebalancer": rebalancer}
    )
    return Consumer(
        group,
        [topic],
        **kind,
        zk=node.zk,
        bootstrap=f"{node.host}:{node.port}",
        log_root=node.data,
        security=security,
        session_timeout_ms=6000,
        heartbeat_interval_ms=200,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        coordinator_timeout_ms=10_000,
    )


def read(c: Consumer, n: int, timeout: float = 30.0) -> list[bytes]:
    values: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(values) < n and time.monotonic() < deadline:
        for records in c.poll(200).values():
            values.extend(r.value for r in records)
    return values


@pytest.mark.parametrize(
    "rebalancer, mechanism",
    [("coordinator", "SCRAM-SHA-256"), ("server", "PLAIN"), ("incremental", "SCRAM-SHA-256")],
)
def test_groupshift_consumer_over_tls_and_sasl(node, rebalancer, mechanism):
    topic = new_topic(node, 2)
    sent = produce(node, topic, 20)
    group = f"g-{rebalancer}-{topic}"
    c = consumer(node, group, topic, rebalancer, client_config(node, mechanism))
    try:
        got = read(c, 20)
        assert sorted(got) == sorted(sent) and len(got) == 20
        c.commit()
        assert {p: c.committed(TP(topic, p)) for p in (0, 1)} == {0: 10, 1: 10}
    finally:
        c.close(autocommit=False)
    # The CLI reads the same offsets through the Kafka listener, authenticated by --command-config.
    out = ok(
        "offsets",
        "export",
        group,
        "--bootstrap",
        node.kafka_bootstrap,
        "--command-config",
        client_config(node),
    )
    assert f"{topic},0,10" in out and f"{topic},1,10" in out


def test_a_wrong_password_stops_the_consumer_and_writes_nothing(node):
    topic = new_topic(node, 1)
    produce(node, topic, 3, partitions=1)
    before = zk_tree(node.zk)
    c = consumer(node, f"g-wrong-{topic}", topic, "coordinator", client_config(node, password="wrong"))
    try:
        with pytest.raises(AuthenticationFailed, match="refused the credentials of 'alice'"):
            read(c, 1, timeout=10)
    finally:
        c.close(autocommit=False)
    assert zk_tree(node.zk) == before


def test_the_cli_without_the_right_credentials_is_one_line(node):
    bad = client_config(node, password="wrong")
    r = run("offsets", "export", "nobody", "--bootstrap", node.kafka_bootstrap, "--command-config", bad)
    assert r.returncode != 0 and r.stderr.count("\n") == 1, r.stderr
    assert "authentication" in r.stderr.lower(), r.stderr
    loose = node.tmp / "loose.properties"
    loose.write_text(f"security.protocol=SASL_SSL\nsasl.username=alice\nsasl.password={PASSWORD}\n")
    loose.chmod(0o644)
    r = run(
        "offsets", "export", "nobody", "--bootstrap", node.kafka_bootstrap, "--command-config", str(loose)
    )
    assert r.returncode == 2 and "readable by others" in r.stderr and r.stderr.count("\n") == 1, r.stderr
