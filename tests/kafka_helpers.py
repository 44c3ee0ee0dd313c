"""Shared by the Kafka-listener tests: a coordinator node with a Kafka listener, topics, records."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from coordinator.node.process import NodeProcess
from core.zk import connect
from migrate.migration.kafka_target import recv_exactly  # noqa: F401 - the Kafka tests' frame reader
from topics.store import TopicStore

# kafka-python 3.0.12 can lose an assignment: when a poll's time runs out while a rebalance it
# started is in flight (the JoinGroup sent, the SyncGroup not yet answered), the next poll finds
# nothing left to rejoin and never applies the SyncGroup's assignment, so the consumer sits with
# no partitions. A rebalance takes a few milliseconds and starts when a poll begins, so a poll of
# 1 s (where tests used 100-500 ms) keeps its end out of one: 0 lost in 100 tries, against 1 in 6
# with 100 ms polls.
KAFKA_PYTHON_POLL_MS = 1000
# Consumers of the tests: from the beginning, commits by hand, short sessions (a test node allows
# >= 100 ms) and short fetch waits.
KAFKA_PYTHON_TEST_CONSUMER = dict(
    auto_offset_reset="earliest",
    enable_auto_commit=False,
    session_timeout_ms=6000,
    heartbeat_interval_ms=300,
    request_timeout_ms=20000,
    fetch_max_wait_ms=200,
)
CONFLUENT_TEST_CONSUMER = {
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 300,
    "fetch.wait.max.ms": 200,
    "check.crcs": True,
}


@contextlib.contextmanager
def kafka_node(
    zk: str,
    data: Path,
    log_path: Path,
    *extra: str,
    listen: str = "127.0.0.1:0",
    kafka_listen: str = "127.0.0.1:0",
) -> Iterator[NodeProcess]:
    """Node 1 with `--kafka-listen 127.0.0.1:0` on the log root `data` (and `extra` options);
    `.zk`, `.data`, `.store` set."""
    proc = NodeProcess.start(
        zk,
        1,
        "--kafka-listen",
        kafka_listen,
        "--data",
        str(data),
        "--group-initial-rebalance-delay-ms",
        "0",
        "--group-min-session-timeout-ms",
        "100",
        "--shards",  # as TEST_DEFAULTS: no Kafka-listener test depends on the count
        "4",
        *extra,
        listen=listen,
        log_path=log_path,
    )
    proc.zk = zk
    proc.data = data
    client = connect(zk, session_timeout=6.0)
    proc.zk_client = client
    proc.store = TopicStore(data, client)
    try:
        yield proc
    finally:
        proc.stop()
        client.stop()
        client.close()


@contextlib.contextmanager
def kafka_node_in(
    zk: str, tmp_path: Path, *extra: str, data: Path | None = None, **listeners: str
) -> Iterator[NodeProcess]:
    """`kafka_node` on the log root `data` (default `tmp_path/data`), created; its output in
    `tmp_path`; `listeners`: `listen=`, `kafka_listen=` as `kafka_node` takes them."""
    data = data or tmp_path / "data"
    data.mkdir()
    with kafka_node(zk, data, tmp_path / "node-1.log", *extra, **listeners) as proc:
        yield proc


def new_topic(node: NodeProcess, partitions: int) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    node.store.create_topic(name, partitions)
    return name


def produce(node: NodeProcess, topic: str, n: int, start: int = 0, partitions: int = 2) -> set[bytes]:
    """`n` records v-<i>, spread round-robin over the partitions, written with the project's Log."""
    values = [f"v-{i}".encode() for i in range(start, start + n)]
    for p in range(partitions):
        node.store.log.produce(topic, [(b"k", v) for v in values[p::partitions]], partition=p)
    return set(values)


class Polling(threading.Thread):
    """Polls one consumer in a thread of its own (neither client is thread-safe, and a long poll of
    one must not starve the other's rebalance): values read, the current assignment, and a commit
    when stopped."""

    def __init__(self, poll, assigned, commit):
        super().__init__(daemon=True)
        self.poll, self.assigned_of, self.commit = poll, assigned, commit
        self.got: list[bytes] = []
        self.assigned: set[int] = set()
        self.stop = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.got.extend(self.poll())
                self.assigned = self.assigned_of()
            self.commit()
        except BaseException as exc:  # reported by the test
            self.error = exc

    def finish(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive() and self.error is None, self.error


def kp_consume(c, count: int, timeout: float = 30.0) -> list[bytes]:
    """Poll a kafka-python consumer until `count` values arrived or `timeout` passed."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got += [r.value for rs in c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS).values() for r in rs]
    return got


def ck_error(c, timeout: float = 20.0):
    """The first error event a confluent-kafka consumer reports (AssertionError if none in `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is not None and m.error():
            return m.error()
    raise AssertionError("no error reported")


def assert_group_admin_refused(kp_admin, ck_admin, group: str) -> None:
    """kafka-python's `KafkaAdminClient` (closed here) and confluent-kafka's `AdminClient` are both
    refused describing and deleting `group` (GROUP_AUTHORIZATION_FAILED), and ListGroups leaves it
    out (a client lists only the groups it may describe)."""
    import pytest
    from confluent_kafka import KafkaException
    from kafka.errors import GroupAuthorizationFailedError

    try:
        with pytest.raises(GroupAuthorizationFailedError):
            kp_admin.describe_groups([group])
        with pytest.raises(GroupAuthorizationFailedError):
            kp_admin.delete_groups([group])
        assert group not in {g["group_id"] for g in kp_admin.list_groups()}
    finally:
        kp_admin.close()
    for futures in (ck_admin.describe_consumer_groups([group]), ck_admin.delete_consumer_groups([group])):
        with pytest.raises(KafkaException) as refused:
            futures[group].result(timeout=30)
        assert refused.value.args[0].name() == "GROUP_AUTHORIZATION_FAILED"


def ck_poll(c, timeout: float = 0.1) -> list[bytes]:
    """One confluent-kafka `consume` call's values (an error record raises KafkaException)."""
    from confluent_kafka import KafkaException

    out = []
    for msg in c.consume(num_messages=500, timeout=timeout):
        if msg.error():
            raise KafkaException(msg.error())
        out.append(msg.value())
    return out


def ck_consume(c, count: int, timeout: float = 40.0) -> list[bytes]:
    """Poll a confluent-kafka consumer until `count` values arrived or `timeout` passed."""
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        got.extend(ck_poll(c, 0.2))
    return got


def closed_by_peer(s) -> bool:
    """Whether the node closes the socket `s` (reads one chunk; waits up to 10 s)."""
    s.settimeout(10)
    try:
        return s.recv(65536) == b""
    except ConnectionResetError:
        return True


def send_and_drain(port: int, frame: bytes) -> None:
    """Send `frame` on a fresh connection to the local `port` and read until the node answers and
    closes, or closes at once (a refused frame): never raises for either."""
    import socket

    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(frame)
        s.shutdown(socket.SHUT_WR)
        s.settimeout(10)
        try:
            while s.recv(65536):
                pass
        except (ConnectionResetError, TimeoutError):
            pass


def mangled(rng, frame: bytes) -> bytes:
    """A well-formed request frame with one to three bytes flipped past its api key and version,
    and cut short three times in ten: what the hand-made codecs must refuse or read as
    kafka-python's classes do."""
    out = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        out[rng.randrange(8, len(out))] = rng.randrange(256)
    if rng.random() < 0.3:
        out = out[: rng.randrange(8, len(out))]
    return bytes(out)
