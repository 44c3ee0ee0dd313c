"""Unmodified kafka-python clients against a node's Kafka-protocol listener (docs/kafka-listener.md).

One node process on a fresh ZooKeeper chroot with `--kafka-listen 127.0.0.1:0` and a private log
root; each test uses its own topic and group. Records are written with the project's `Log` and
read by KafkaConsumer, or written by KafkaProducer and read back from the `Log`.
"""

from __future__ import annotations

import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from coordinator.kafka_wire import codec as K
from coordinator.layout import BROKERS
from core.types import TopicPartition as TP
from core.zk import connect
from tests.kafka_helpers import (
    KAFKA_PYTHON_POLL_MS,
    KAFKA_PYTHON_TEST_CONSUMER,
    Polling,
    closed_by_peer,
    kafka_node,
    new_topic,
    produce,
    recv_exactly,
    send_and_drain,
)

REPO = Path(__file__).resolve().parents[3]
CONSUMER = dict(KAFKA_PYTHON_TEST_CONSUMER, max_poll_interval_ms=15000)


@pytest.fixture(scope="module")
def node(module_zk_connect, tmp_path_factory):
    zk = module_zk_connect
    data = tmp_path_factory.mktemp("kafka-data")
    with kafka_node(zk, data, tmp_path_factory.mktemp("node") / "node-1.log") as proc:
        yield proc


def _consume(consumer, count: int, timeout: float = 30.0) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + timeout
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=200).values():
            got.extend(r.value for r in records)
    return got


def _why(node, consumer) -> str:
    """For a failed read: what the consumer was assigned, and the end of the node's log."""
    try:
        lines = node.log_path.read_text(errors="replace").splitlines() if node.log_path else []
    except OSError as exc:
        lines = [f"(node log unreadable: {exc})"]
    return f"assignment {sorted(consumer.assignment())}; node log:\n" + "\n".join(lines[-40:])


def test_registration_advertises_the_kafka_endpoint(node):
    client = connect(node.zk, session_timeout=6.0)
    try:
        broker = json.loads(client.get(f"{BROKERS}/1")[0])
    finally:
        client.stop()
        client.close()
    assert broker["version"] == 4 and broker["port"] == node.kafka_port
    assert broker["endpoints"] == [f"PLAINTEXT://{node.kafka_host}:{node.kafka_port}"]


def test_consumer_reads_to_the_end_once_commits_and_resumes(node):
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    first = produce(node, topic, 100)
    c = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **CONSUMER)
    try:
        got = _consume(c, 100)
        assert len(got) == 100 and set(got) == first, _why(node, c)  # every record, none twice
        assert _consume(c, 1, timeout=1.0) == []  # nothing past the end
        c.commit()
        committed = {p: c.committed(TopicPartition(topic, p)) for p in (0, 1)}
        assert committed == {0: 50, 1: 50}
    finally:
        c.close()
    second = produce(node, topic, 20, start=100)
    c = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **CONSUMER)
    try:
        got = _consume(c, 20)
        assert sorted(got) == sorted(second)  # resumed from the commit, not from the beginning
    finally:
        c.close()


def _assigned(c) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def test_two_consumers_share_the_partitions_and_rebalance(node):
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"

    def polling(c: KafkaConsumer) -> Polling:
        # Each consumer polls in a thread of its own: alternating polls in one thread starve a
        # rebalance (kafka-python drops a SyncGroup answer that arrives after its poll timed out).
        return Polling(
            lambda: c.poll(timeout_ms=KAFKA_PYTHON_POLL_MS) and [], lambda: _assigned(c), lambda: None
        )

    def wait(what: str, cond) -> None:
        deadline = time.monotonic() + 40
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.05)

    c1 = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **CONSUMER)
    c2 = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **CONSUMER)
    p1, p2 = polling(c1), polling(c2)
    try:
        p1.start()
        wait("c1 holds every partition", lambda: p1.assigned == {0, 1, 2, 3})
        p2.start()
        wait(
            "c1 and c2 share the partitions",
            lambda: (
                len(p1.assigned) == 2 and len(p2.assigned) == 2 and p1.assigned | p2.assigned == {0, 1, 2, 3}
            ),
        )
        p2.finish()
        c2.close()
        wait("the leave gave c1 every partition again", lambda: p1.assigned == {0, 1, 2, 3})
        p1.finish()
    finally:
        for p in (p1, p2):
            p.stop.set()
            if p.is_alive():
                p.join(30)
        c1.close()
        c2.close()


def test_admin_client_agrees_with_groups_describe(node):
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    produce(node, topic, 10)
    c = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **CONSUMER)
    admin = KafkaAdminClient(bootstrap_servers=node.kafka_bootstrap, request_timeout_ms=20000)
    try:
        assert len(_consume(c, 10)) == 10
        c.commit()
        listed = admin.list_groups()
        assert group in {g["group_id"] for g in listed}
        described = admin.describe_groups([group])[group]
        assert described["group_state"] == "Stable" and len(described["members"]) == 1
        member = described["members"][0]
        assert member["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0, 1]}]
        offsets = admin.list_group_offsets(group)[group]
        kafka_view = {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic}
    finally:
        c.close()
        admin.close()
    assert kafka_view == {0: 5, 1: 5}
    out = subprocess.run(
        [sys.executable, "-m", "cli", "groups", "describe", group, "--zk", node.zk, "--data", str(node.data)]
        + ["--output", "json"],
        cwd=REPO,
        env=dict(os.environ, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    rows = [r for view in json.loads(out.stdout) for r in view.get("partitions", [])]
    ours = {r["partition"]: r["committed"] for r in rows if r["topic"] == topic}
    assert ours == kafka_view


def test_producer_writes_into_the_log(node):
    topic = new_topic(node, 2)
    producer = KafkaProducer(
        bootstrap_servers=node.kafka_bootstrap, acks=1, enable_idempotence=False, request_timeout_ms=20000
    )
    try:
        futures = [producer.send(topic, value=f"p-{i}".encode(), key=b"k", partition=1) for i in range(25)]
        producer.flush(timeout=30)
        metas = [f.get(timeout=30) for f in futures]
    finally:
        producer.close()
    assert [m.offset for m in metas] == list(range(25))
    assert _read_values(node.store.log, TP(topic, 1), 0) == [f"p-{i}".encode() for i in range(25)]
    assert node.store.log.latest(TP(topic, 0)) == 0


def _read_values(log, tp, start: int) -> list[bytes]:
    """Every value from `start` to the log end (`Log.read` stops at row-group boundaries, and each
    Produce request may have become its own row group)."""
    out: list[bytes] = []
    while True:
        read = log.read(tp, start, 1000)
        if read.batch.num_rows == 0:
            return out
        out.extend(read.batch.column("value").to_pylist())
        start = read.next_offset


def _api_versions(port: int) -> int:
    """Send ApiVersions v0 on a fresh connection; return the error code of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        header = struct.pack(">hhih", 18, 0, 42, 1) + b"x"
        s.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", recv_exactly(s, 4))[0]
        body = recv_exactly(s, size)
    correlation, error = struct.unpack_from(">ih", body)
    assert correlation == 42
    return error


def test_malformed_frames_never_crash_the_node(node):
    rng = random.Random(7)
    port = node.kafka_port
    frames = [
        b"\x00\x00\x00\x02\x00",  # shorter than its header
        struct.pack(">i", 4) + b"\x00\x0b\x00\x05",  # JoinGroup header cut short
        struct.pack(">ihhi", 10, 99, 0, 1) + b"\x00\x00",  # unknown api
        struct.pack(">ihhi", 10, 11, 0, 1) + b"\x00\x00",  # JoinGroup v0: not served
    ]
    for _ in range(40):
        api = rng.choice(list(K.VERSIONS))
        lo, hi = K.VERSIONS[api]
        payload = struct.pack(">hhi", api, rng.randint(lo, hi), 1) + rng.randbytes(rng.randint(0, 200))
        frames.append(struct.pack(">i", len(payload)) + payload)
    for frame in frames:
        send_and_drain(port, frame)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # a size beyond any limit
        s.sendall(struct.pack(">i", 0x7FFFFFF0) + b"xx")
        assert closed_by_peer(s)
    assert node.alive
    assert _api_versions(port) == 0
    # ApiVersions above our maximum: the KIP-511 answer (v0 body, UNSUPPORTED_VERSION), not a close.
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        header = struct.pack(">hhih", 18, 9, 5, 0)
        s.sendall(struct.pack(">i", len(header)) + header)
        body = recv_exactly(s, struct.unpack(">i", recv_exactly(s, 4))[0])
    assert struct.unpack_from(">ih", body) == (5, 35)
