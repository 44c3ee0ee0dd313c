"""SASL on both listeners of one node (`SASL_PLAINTEXT://`), against users made by `groupshift users add`.

One node process serves the module (its native and Kafka listeners both SASL_PLAINTEXT, every
mechanism enabled) on a namespace holding user `alice` (PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512,
password `pencil`) and a topic of 2 partitions. kafka-python and confluent-kafka consume and commit
with each mechanism; a wrong password, an unknown mechanism and a client without SASL are refused
with Kafka's codes and leave no group behind; raw connections check the handshake's order and
codes on both listeners; a removed user cannot authenticate on a new connection.
"""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from confluent_kafka import Consumer
from kafka import KafkaConsumer
from kafka.errors import KafkaTimeoutError
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from coordinator.layout import GROUPS, decode_offset, group_path, offset_path
from coordinator.member.wire_client import WireClient, join_body
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from security.scram import ScramClient
from tests.inspect_helpers import ok, run
from tests.kafka_helpers import (
    KAFKA_PYTHON_POLL_MS,
    ck_consume,
    closed_by_peer,
    kafka_node,
    new_topic,
    recv_exactly,
)
from tests.snapshots import zk_tree

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_sasl")

REPO = Path(__file__).resolve().parents[3]
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
RECORDS = 40  # 20 a partition
BOOTSTRAP = "Unable to bootstrap"  # kafka-python's error when no connection could complete its set-up


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        stderr=subprocess.PIPE,
        text=True,
    )


def _password_file(directory: Path, password: str) -> Path:
    path = directory / f"pw-{uuid.uuid4().hex[:6]}"
    path.write_text(password + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture(scope="module")
def world(module_zk_connect, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sasl")
    zk = module_zk_connect
    pw = _password_file(tmp, "pencil")
    adds = [
        _spawn("users", "add", "alice", "--mechanism", m, "--password-file", str(pw), "--zk", zk)
        for m in MECHANISMS
    ]
    for p in adds:
        assert p.wait(60) == 0, p.stderr.read()
    data = tmp / "data"
    data.mkdir()
    sasl = "SASL_PLAINTEXT://127.0.0.1:0"
    with kafka_node(zk, data, tmp / "node-1.log", listen=sasl, kafka_listen=sasl) as node:
        topic = new_topic(node, 2)
        for p in range(2):
            node.store.log.produce(
                topic, [(b"k", f"v-{p}-{i}".encode()) for i in range(RECORDS // 2)], partition=p
            )
        yield SimpleNamespace(zk=zk, client=node.zk_client, node=node, topic=topic, tmp=tmp)


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def _committed(world, group: str) -> dict[int, int]:
    out = {}
    for p in range(2):
        stat = world.client.exists(offset_path(group, world.topic, p))
        if stat is not None:
            out[p] = decode_offset(
                world.topic, p, world.client.get(offset_path(group, world.topic, p))[0]
            ).offset
    return out


def _no_trace_of(world, group: str, groups_before: set[str]) -> None:
    assert world.client.exists(group_path(group)) is None
    assert set(world.client.get_children(GROUPS)) <= groups_before


def _groups(world) -> set[str]:
    return set(world.client.get_children(GROUPS)) if world.client.exists(GROUPS) else set()


# ------------------------------------------------------------------------------ real clients


def _kafka_python(world, group: str, **conf) -> KafkaConsumer:
    return KafkaConsumer(
        world.topic,
        bootstrap_servers=world.node.kafka_bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        **conf,
    )


def _sasl_kp(mechanism: str, password: str = "pencil") -> dict:
    return dict(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username="alice",
        sasl_plain_password=password,
    )


def _sasl_ck(mechanism: str, password: str = "pencil") -> dict:
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": "alice",
        "sasl.password": password,
    }


def _confluent(world, group: str, conf: dict, errors: list | None = None) -> Consumer:
    extra = {"error_cb": errors.append} if errors is not None else {}
    c = Consumer(
        {
            "bootstrap.servers": world.node.kafka_bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            **conf,
            **extra,
        }
    )
    c.subscribe([world.topic])
    return c


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_kafka_python_consumes_and_commits(world, mechanism):
    group = _group()
    c = _kafka_python(world, group, **_sasl_kp(mechanism))
    try:
        got: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(got) < RECORDS and time.monotonic() < deadline:
            for records in c.poll(KAFKA_PYTHON_POLL_MS).values():
                got.extend(r.value for r in records)
        assert len(got) == RECORDS == len(set(got))
        c.commit()
    finally:
        c.close()
    assert _committed(world, group) == {0: RECORDS // 2, 1: RECORDS // 2}


@pytest.mark.parametrize("mechanism", MECHANISMS)
def test_confluent_consumes_and_commits(world, mechanism):
    group = _group()
    c = _confluent(world, group, _sasl_ck(mechanism))
    try:
        got = ck_consume(c, RECORDS, timeout=30)
        assert len(got) == RECORDS == len(set(got))
        c.commit(asynchronous=False)
    finally:
        c.close()
    assert _committed(world, group) == {0: RECORDS // 2, 1: RECORDS // 2}


def _confluent_errors(world, group: str, conf: dict, seconds: float = 15) -> list:
    """The errors a confluent-kafka consumer with `conf` reports (waits for the first), and it
    never held a partition."""
    errors: list = []
    c = _confluent(world, group, conf, errors)
    try:
        deadline = time.monotonic() + seconds
        while not errors and time.monotonic() < deadline:
            c.poll(0.1)
        assert not c.assignment()
    finally:
        c.close()
    assert errors, "librdkafka reported no error"
    return errors


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused_and_changes_nothing(world, mechanism, caplog):
    group, before = _group(), _groups(world)
    with caplog.at_level(logging.ERROR, logger="kafka"), pytest.raises(KafkaTimeoutError, match=BOOTSTRAP):
        c = _kafka_python(world, group, bootstrap_timeout_ms=1000, **_sasl_kp(mechanism, "wrong"))
        c.poll(500)  # not reached: the consumer cannot bootstrap
    assert "[Error 58] SaslAuthenticationFailedError" in caplog.text
    assert "invalid credentials" in caplog.text
    errors = _confluent_errors(world, group, _sasl_ck(mechanism, "wrong"))
    assert "SASL authentication error: Authentication failed" in errors[0].str(), errors
    _no_trace_of(world, group, before)


def test_an_unknown_mechanism_is_refused(world):
    group, before = _group(), _groups(world)
    conf = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice",
    }
    errors = _confluent_errors(world, group, conf)
    assert "Broker: Unsupported SASL mechanism" in errors[0].str(), errors
    _no_trace_of(world, group, before)
    with _kafka_socket(world) as s:  # the codes themselves
        handshake = _kafka_call(s, SaslHandshakeRequest(mechanism="GSSAPI", version=1), SaslHandshakeResponse)
        assert handshake.error_code == E.UNSUPPORTED_SASL_MECHANISM
        assert sorted(handshake.mechanisms) == sorted(MECHANISMS)
        assert closed_by_peer(s)


def test_a_client_without_sasl_is_refused(world):
    group, before = _group(), _groups(world)
    with pytest.raises(KafkaTimeoutError, match=BOOTSTRAP):  # its Metadata request closes the connection
        c = _kafka_python(world, group, bootstrap_timeout_ms=1000)
        c.poll(500)
    errors = _confluent_errors(world, group, {})  # its first request past ApiVersions was closed
    assert any("brokers are down" in e.str() or "Disconnected" in e.str() for e in errors), errors
    _no_trace_of(world, group, before)


# ------------------------------------------------------------------------------ raw Kafka frames


def _kafka_socket(world) -> socket.socket:
    return socket.create_connection(("127.0.0.1", world.node.kafka_port), timeout=10)


_ids = iter(range(1, 1 << 30))


def _kafka_call(s: socket.socket, request, response_class):
    request.with_header(correlation_id=next(_ids), client_id="t")
    s.sendall(request.encode(framed=True, header=True))
    frame = recv_exactly(s, struct.unpack(">i", recv_exactly(s, 4))[0])
    return response_class.decode(memoryview(frame)[4:], version=request.API_VERSION, header=False)


def test_kafka_listener_closes_a_request_before_authentication(world):
    with _kafka_socket(world) as s:
        request = MetadataRequest(topics=None, version=4)
        request.with_header(correlation_id=1, client_id="t")
        s.sendall(request.encode(framed=True, header=True))
        assert closed_by_peer(s)
    with _kafka_socket(world) as s:  # SaslAuthenticate before SaslHandshake: answered, then closed
        answer = _kafka_call(
            s, SaslAuthenticateRequest(auth_bytes=b"\0alice\0pencil", version=1), SaslAuthenticateResponse
        )
        assert answer.error_code == E.ILLEGAL_SASL_STATE
        assert closed_by_peer(s)


def test_kafka_listener_plain_then_a_second_handshake_is_illegal_state(world):
    with _kafka_socket(world) as s:
        assert (
            _kafka_call(
                s, SaslHandshakeRequest(mechanism="PLAIN", version=1), SaslHandshakeResponse
            ).error_code
            == 0
        )
        answer = _kafka_call(
            s, SaslAuthenticateRequest(auth_bytes=b"\0alice\0pencil", version=1), SaslAuthenticateResponse
        )
        assert (answer.error_code, answer.session_lifetime_ms) == (0, 0)
        again = _kafka_call(s, SaslHandshakeRequest(mechanism="PLAIN", version=1), SaslHandshakeResponse)
        assert again.error_code == E.ILLEGAL_SASL_STATE  # authenticated already: answered, connection kept
        metadata = _kafka_call(s, MetadataRequest(topics=None, version=4), MetadataResponse)
        assert world.topic in {t.name for t in metadata.topics}


# ------------------------------------------------------------------------------ the native listener


def _native(world) -> WireClient:
    return WireClient(world.node.host, world.node.port, client_id="sasl-test")


def _scram(c: WireClient, mechanism: str, user: str, password: str) -> dict:
    """SaslHandshake and SCRAM over the native wire with groupshift's own ScramClient."""
    assert c.request(P.SASL_HANDSHAKE, {"mechanism": mechanism})["error_code"] == 0
    scram = ScramClient(mechanism, user, password)
    first = c.request(P.SASL_AUTHENTICATE, {"auth_bytes": scram.first_message()})
    assert first["error_code"] == 0, first
    final = c.request(P.SASL_AUTHENTICATE, {"auth_bytes": scram.final_message(first["auth_bytes"])})
    if final["error_code"] == 0:
        scram.verify(final["auth_bytes"])
    return final


def _plain(c: WireClient, user: str, password: str) -> dict:
    assert c.request(P.SASL_HANDSHAKE, {"mechanism": "PLAIN"})["error_code"] == 0
    return c.request(P.SASL_AUTHENTICATE, {"auth_bytes": f"\0{user}\0{password}".encode()})


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_native_scram_then_a_group_request(world, mechanism):
    group = _group()
    with _native(world) as c:
        versions = c.request(P.API_VERSIONS, {})  # answered before the handshake
        assert {P.SASL_HANDSHAKE, P.SASL_AUTHENTICATE} <= {k["api_key"] for k in versions["api_keys"]}
        assert _scram(c, mechanism, "alice", "pencil")["error_code"] == 0
        found = c.request(P.FIND_COORDINATOR, {"key": group, "key_type": 0})
        assert (found["error_code"], found["port"]) == (0, world.node.port)
        join = c.request(P.JOIN_GROUP, join_body(group, member_id=""))
        assert join["error_code"] == E.MEMBER_ID_REQUIRED  # the core answered: the request got through


def test_native_wrong_password_and_requests_before_authentication(world):
    with _native(world) as c:
        final = _scram(c, "SCRAM-SHA-256", "alice", "wrong")
        assert final["error_code"] == E.SASL_AUTHENTICATION_FAILED
        assert c.is_closed_by_peer()
    with _native(world) as c:  # a group request first: closed unanswered
        c.send(P.JOIN_GROUP, join_body(_group(), member_id=""))
        assert c.is_closed_by_peer()
    with _native(world) as c:  # after the handshake, only SaslAuthenticate
        assert c.request(P.SASL_HANDSHAKE, {"mechanism": "PLAIN"})["error_code"] == 0
        c.send(P.LIST_GROUPS, {"states_filter": []})
        assert c.is_closed_by_peer()
    with _native(world) as c:
        answer = c.request(P.SASL_HANDSHAKE, {"mechanism": "SCRAM-SHA-1"})
        assert (answer["error_code"], sorted(answer["mechanisms"])) == (
            E.UNSUPPORTED_SASL_MECHANISM,
            sorted(MECHANISMS),
        )
        assert c.is_closed_by_peer()


def test_a_removed_user_cannot_authenticate_on_a_new_connection(world):
    user = f"dave-{uuid.uuid4().hex[:6]}"
    pw = _password_file(world.tmp, "d4ve")
    ok("users", "add", user, "--mechanism", "PLAIN", "--password-file", str(pw), zk=world.zk)
    with _native(world) as c:
        assert _plain(c, user, "d4ve")["error_code"] == 0
        ok("users", "remove", user, zk=world.zk)
        deadline = time.monotonic() + 15
        while True:  # the node learns of the removal from its change notification
            with _native(world) as fresh:
                code = _plain(fresh, user, "d4ve")["error_code"]
            if code == E.SASL_AUTHENTICATION_FAILED or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert code == E.SASL_AUTHENTICATION_FAILED
        # The connection that authenticated before stays authenticated, as in Kafka.
        assert c.request(P.LIST_GROUPS, {"states_filter": []})["error_code"] == 0


@pytest.mark.parametrize(
    "args, says",
    [
        (("--sasl-enabled-mechanisms", "PLAIN,GSSAPI"), "unknown SASL mechanism 'GSSAPI'"),
        (("--sasl-enabled-mechanisms", ""), "unknown SASL mechanism"),
        (("--kafka-listen", "SASL_SCRAM://127.0.0.1:0"), "unknown security protocol 'SASL_SCRAM'"),
    ],
)
def test_serve_refuses_bad_sasl_settings_before_zookeeper(zk_connect, args, says):
    before = zk_tree(zk_connect)
    done = run(
        "coordinator",
        "serve",
        "--node-id",
        "1",
        "--listen",
        "SASL_PLAINTEXT://127.0.0.1:0",
        *args,
        zk=zk_connect,
    )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and says in lines[0], done.stderr
    assert zk_tree(zk_connect) == before  # nothing registered, nothing created
