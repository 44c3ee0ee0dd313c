"""TLS on both listeners of real node processes, with certificates made by `testing.certs`.

Three nodes, each in a namespace of its own below the module's chroot and with its own log root:
`open_node` (`--listen TLS://`, `--kafka-listen SSL://`, `--tls-client-auth none`), `mutual_node`
(the same with `required`, logging at debug level so that each connection's principal can be
read) and `sasl_node` (`SASL_TLS://` and `SASL_SSL://`, user `alice` under every mechanism).
kafka-python and confluent-kafka consume and commit through the Kafka listener, the native
listener answers a group's dance over TLS, and what must be refused is: a client that does not
speak TLS, a client that does not trust the node's CA, and, on the mutual node, a client without
a certificate or with one from another CA. A refused connection changes nothing in ZooKeeper.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CKTopicPartition
from kafka import KafkaConsumer, TopicPartition
from kazoo.client import KazooClient

from coordinator.layout import BROKERS, COORDINATORS, decode_coordinator, group_path
from coordinator.member.wire_client import (
    WireClient,
    commit_body,
    committed,
    fetch_body,
    join_body,
    sync_body,
)
from coordinator.node.process import NodeProcess
from coordinator.wire import codec as P
from testing.certs import make_certs
from tests.inspect_helpers import ok, wait_for
from tests.kafka_helpers import (
    CONFLUENT_TEST_CONSUMER,
    KAFKA_PYTHON_POLL_MS,
    KAFKA_PYTHON_TEST_CONSUMER,
    ck_consume,
    kafka_node,
    new_topic,
    produce,
    recv_exactly,
)
from tests.snapshots import zk_tree

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_tls")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("tls"))


TLS, SSL = "TLS://127.0.0.1:0", "SSL://127.0.0.1:0"


@contextlib.contextmanager
def _node(zk: str, tmp, *extra: str, listen: str = TLS, kafka_listen: str = SSL) -> Iterator[NodeProcess]:
    """Node 1 in the namespace `zk`, its log root and output in `tmp`."""
    data = tmp / "data"
    data.mkdir()
    with kafka_node(zk, data, tmp / "node.log", *extra, listen=listen, kafka_listen=kafka_listen) as node:
        yield node


@pytest.fixture(scope="module")
def open_node(module_zk_connect, certs, tmp_path_factory):
    args = [*certs.node_args("none"), "--frame-timeout-ms", "1000"]
    with _node(f"{module_zk_connect}/open", tmp_path_factory.mktemp("open"), *args) as node:
        yield node


@pytest.fixture(scope="module")
def mutual_node(module_zk_connect, certs, tmp_path_factory):
    args = [*certs.node_args("required"), "--log-level", "debug"]
    with _node(f"{module_zk_connect}/mutual", tmp_path_factory.mktemp("mutual"), *args) as node:
        yield node


@pytest.fixture(scope="module")
def sasl_node(module_zk_connect, certs, tmp_path_factory):
    """Both listeners SASL over TLS; user `alice` (password `pencil`) under every mechanism."""
    tmp = tmp_path_factory.mktemp("sasl")
    zk = f"{module_zk_connect}/sasl"
    password = tmp / "password"
    password.write_text("pencil\n")
    password.chmod(0o600)
    for mechanism in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
        ok("users", "add", "alice", "--mechanism", mechanism, "--password-file", str(password), zk=zk)
    args = certs.node_args("none")
    with _node(
        zk, tmp, *args, listen="SASL_TLS://127.0.0.1:0", kafka_listen="SASL_SSL://127.0.0.1:0"
    ) as node:
        yield node


def _client_context(certs, ca: str | None = None, cert: str | None = None, key: str | None = None):
    ctx = ssl.create_default_context(cafile=ca or certs.ca)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _api_versions_frame() -> bytes:
    """A Kafka ApiVersions v0 request, framed (what every Kafka client sends first)."""
    body = struct.pack(">hhih", 18, 0, 1, 4) + b"test"
    return struct.pack(">i", len(body)) + body


def _refused(port: int, ctx: ssl.SSLContext | None) -> bool:
    """Whether the listener at `port` refuses this client: over TLS with `ctx` (or in clear text
    with None) it sends ApiVersions and gets no answer before the connection ends."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        try:
            s = ctx.wrap_socket(raw, server_hostname="127.0.0.1") if ctx else raw
            s.sendall(_api_versions_frame())
            return s.recv(4) == b""
        except (ssl.SSLError, ConnectionResetError, BrokenPipeError):
            return True


# ------------------------------------------------------------------------------ registration


def test_registrations_name_each_listeners_security_protocol(open_node):
    zk = open_node.zk_client
    record = decode_coordinator(zk.get(f"{COORDINATORS}/1")[0])
    assert (record.protocol, record.kafka_protocol) == ("TLS", "SSL")
    assert (record.kafka_host, record.kafka_port) == (open_node.kafka_host, open_node.kafka_port)
    broker = json.loads(zk.get(f"{BROKERS}/1")[0])
    assert broker["endpoints"] == [f"SSL://{open_node.kafka_host}:{open_node.kafka_port}"]
    assert broker["listener_security_protocol_map"] == {"SSL": "SSL"}
    assert (broker["host"], broker["port"]) == (None, -1)  # no PLAINTEXT endpoint for 0.8 readers


# ------------------------------------------------------------------------------ the native listener


def test_native_listener_over_tls_serves_a_group(open_node, certs):
    c = WireClient(open_node.host, open_node.port, "tls-client")
    c.sock = _client_context(certs).wrap_socket(c.sock, server_hostname="127.0.0.1")  # the client over TLS
    group = f"g-{uuid.uuid4().hex[:8]}"
    with c:
        assert c.request(P.API_VERSIONS, {})["error_code"] == 0
        member = c.request(P.JOIN_GROUP, join_body(group, ""))["member_id"]
        joined = c.request(P.JOIN_GROUP, join_body(group, member))
        assert joined["error_code"] == 0
        assert (
            c.request(P.SYNC_GROUP, sync_body(group, joined["generation_id"], member, {member: b""}))[
                "error_code"
            ]
            == 0
        )
        r = c.request(P.OFFSET_COMMIT, commit_body(group, joined["generation_id"], member, {("t", 0): 7}))
        assert all(p["error_code"] == 0 for t in r["topics"] for p in t["partitions"])
        assert committed(c.request(P.OFFSET_FETCH, fetch_body(group, {"t": [0]}))) == {("t", 0): 7}


def test_native_listener_refuses_clear_text(open_node):
    before = zk_tree(open_node.zk)
    frame = P.encode_request(P.API_VERSIONS, 1, {}, "plain")
    with socket.create_connection((open_node.host, open_node.port), timeout=10) as s:
        s.sendall(frame)
        try:
            assert s.recv(4) == b""  # the TLS handshake fails: closed without an answer
        except ConnectionResetError:
            pass
    assert zk_tree(open_node.zk) == before


# ------------------------------------------------------------------------------ Kafka clients


def _left(node, group: str) -> None:
    """Wait until the node has written `group` Empty after its consumer closed: a LeaveGroup is
    answered before that write lands, and the tests after this one compare the node's tree."""
    zk = KazooClient(hosts=node.zk, timeout=10.0)
    zk.start(timeout=10)
    try:
        empty = lambda: json.loads(zk.get(group_path(group))[0]).get("members") == []  # noqa: E731
        wait_for(empty, 30, f"{group} written Empty")
    finally:
        zk.stop()
        zk.close()


def _kp_consume_and_commit(node, protocol: str = "SSL", **ssl_settings) -> None:
    """kafka-python reads a fresh topic to its end as a group and commits, over `protocol`."""
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 100)
    c = KafkaConsumer(
        topic,
        group_id=group,
        bootstrap_servers=node.kafka_bootstrap,
        security_protocol=protocol,
        **ssl_settings,
        **KAFKA_PYTHON_TEST_CONSUMER,
    )
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 40
        while len(got) < 100 and time.monotonic() < deadline:
            for records in c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values():
                got.extend(r.value for r in records)
        assert sorted(got) == sorted(values)
        c.commit()
        assert {p: c.committed(TopicPartition(topic, p)) for p in (0, 1)} == {0: 50, 1: 50}
    finally:
        c.close()
    _left(node, group)


def _ck_consume_and_commit(node, conf: dict) -> None:
    """confluent-kafka reads a fresh topic to its end as a group and commits (`conf`: its SSL)."""
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 100)
    c = Consumer(
        {"bootstrap.servers": node.kafka_bootstrap, "group.id": group, **CONFLUENT_TEST_CONSUMER, **conf}
    )
    c.subscribe([topic])
    try:
        got = ck_consume(c, 100)
        assert sorted(got) == sorted(values)
        c.commit(asynchronous=False)
        done = c.committed([CKTopicPartition(topic, p) for p in (0, 1)], timeout=20)
        assert {tp.partition: tp.offset for tp in done} == {0: 50, 1: 50}
    finally:
        c.close()
    _left(node, group)


def test_kafka_python_consumes_and_commits_over_ssl(open_node, certs):
    _kp_consume_and_commit(open_node, ssl_cafile=certs.ca)


def test_confluent_consumes_and_commits_over_ssl(open_node, certs):
    _ck_consume_and_commit(open_node, {"security.protocol": "SSL", "ssl.ca.location": certs.ca})


def test_a_client_that_does_not_trust_the_nodes_ca_refuses_it(open_node, certs):
    before = zk_tree(open_node.zk)
    ctx = _client_context(certs, ca=certs.other_ca)
    with socket.create_connection(("127.0.0.1", open_node.kafka_port), timeout=10) as raw:
        with pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
            ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    assert zk_tree(open_node.zk) == before


def test_kafka_listener_refuses_clear_text(open_node):
    before = zk_tree(open_node.zk)
    assert _refused(open_node.kafka_port, None)
    assert zk_tree(open_node.zk) == before


# ------------------------------------------------------------------------------ client certificates


def test_confluent_with_a_client_certificate_consumes_and_commits(mutual_node, certs):
    conf = {
        "security.protocol": "SSL",
        "ssl.ca.location": certs.ca,
        "ssl.certificate.location": certs.client_cert,
        "ssl.key.location": certs.client_key,
    }
    _ck_consume_and_commit(mutual_node, conf)
    # Kafka's default principal: the certificate's subject in RFC 2253 form.
    assert any(
        f"TLS connection from /127.0.0.1: {certs.client_principal}" in line for line in mutual_node.output
    )


def test_kafka_python_with_a_client_certificate_consumes_and_commits(mutual_node, certs):
    _kp_consume_and_commit(
        mutual_node, ssl_cafile=certs.ca, ssl_certfile=certs.client_cert, ssl_keyfile=certs.client_key
    )


@pytest.mark.parametrize("who", ["no certificate", "a certificate of another CA"])
@pytest.mark.parametrize("listener", ["native", "kafka"])
def test_required_client_auth_refuses(mutual_node, certs, who, listener):
    cert = (certs.stranger_cert, certs.stranger_key) if who != "no certificate" else (None, None)
    port = mutual_node.port if listener == "native" else mutual_node.kafka_port
    before = zk_tree(mutual_node.zk)
    assert _refused(port, _client_context(certs, None, *cert))
    assert zk_tree(mutual_node.zk) == before


def test_a_handshake_not_completed_within_the_frame_timeout_is_dropped(open_node):
    with socket.create_connection((open_node.host, open_node.port), timeout=10) as s:
        t0 = time.monotonic()
        assert s.recv(1) == b""  # no ClientHello: closed after --frame-timeout-ms (1 s here)
        assert 0.5 < time.monotonic() - t0 < 8


def test_a_forged_record_or_a_close_notify_ends_only_that_connection(open_node, certs):
    """After the handshake: bytes that are no TLS record close the connection, a client's
    close_notify is answered with the node's and the connection closes; others are served."""
    ctx = _client_context(certs)
    with socket.create_connection((open_node.host, open_node.kafka_port), timeout=10) as raw:
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(_api_versions_frame())
        assert s.recv(4)
        raw_copy = socket.socket(fileno=os.dup(s.fileno()))  # the socket beneath TLS
        with raw_copy:
            raw_copy.sendall(b"\x17\x03\x03\x00\x20" + b"\x00" * 32)  # application data, forged
            s.settimeout(5)  # (a connection left open ends the test with TimeoutError)
            try:
                while s.recv(1 << 16):  # the rest of the answer, then the end
                    pass
            except (ssl.SSLError, ConnectionResetError):  # an alert, or a reset: closed as well
                pass
    with socket.create_connection((open_node.host, open_node.kafka_port), timeout=10) as raw:
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(_api_versions_frame())
        assert recv_exactly(s, struct.unpack(">i", recv_exactly(s, 4))[0])  # the whole answer
        plain = s.unwrap()  # sends close_notify and waits for the node's
        assert plain.recv(1) == b""  # then the node closes
    assert not _refused(open_node.kafka_port, ctx)


def test_a_tls_connection_costs_tens_of_kilobytes(open_node, certs):
    """The node's TLS layer holds no read buffer of its own (about 16 KiB a connection: OpenSSL's
    state); asyncio's TLS transport held 256 KiB, or about 50 KiB with its buffer bounded."""
    ctx, n = _client_context(certs), 100
    before = open_node.rss_mb()
    conns = []
    try:
        for _ in range(n):
            raw = socket.create_connection((open_node.host, open_node.port), timeout=10)
            conns.append(ctx.wrap_socket(raw, server_hostname="127.0.0.1"))
        conns[-1].sendall(P.encode_request(P.API_VERSIONS, 1, {}, "last"))
        assert conns[-1].recv(4)  # every handshake done, the node answering
        per_connection_kib = (open_node.rss_mb() - before) * 1024 / n
    finally:
        for c in conns:
            c.close()
    assert per_connection_kib < 40, per_connection_kib


# ------------------------------------------------------------------------------ SASL inside TLS


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_kafka_python_over_sasl_ssl_consumes_and_commits(sasl_node, certs, mechanism):
    _kp_consume_and_commit(
        sasl_node,
        "SASL_SSL",
        ssl_cafile=certs.ca,
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password="pencil",
    )


def test_confluent_over_sasl_ssl_consumes_and_commits(sasl_node, certs):
    conf = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": certs.ca,
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": "alice",
        "sasl.password": "pencil",
    }
    _ck_consume_and_commit(sasl_node, conf)


def test_sasl_tls_listener_asks_for_sasl_inside_tls(sasl_node, certs):
    """Inside TLS, a request other than ApiVersions and SASL's is refused as on SASL_PLAINTEXT."""
    before = zk_tree(sasl_node.zk)
    with socket.create_connection((sasl_node.host, sasl_node.port), timeout=10) as raw:
        s = _client_context(certs).wrap_socket(raw, server_hostname="127.0.0.1")
        s.sendall(P.encode_request(P.API_VERSIONS, 1, {}, "tls"))
        assert s.recv(4)  # answered: ApiVersions is allowed before authenticating
        s.sendall(P.encode_request(P.LIST_GROUPS, 2, {"states_filter": []}, "tls"))
        while True:  # the rest of the ApiVersions answer, then the close
            try:
                if not s.recv(65536):
                    break
            except (ssl.SSLError, ConnectionResetError):
                break
    assert zk_tree(sasl_node.zk) == before
