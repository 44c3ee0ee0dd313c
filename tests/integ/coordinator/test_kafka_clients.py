"""Unmodified third-party Kafka clients against a node's Kafka listener (docs/kafka-listener.md).

confluent-kafka (librdkafka bundled in its wheel), kcat (Debian, its own librdkafka) and Burrow
(Debian; sarama with kafka-version 0.8) against one node process per test, on a fresh ZooKeeper
chroot (`zk_connect`) and a private log root. kafka-python is the listener's own first client
(test_kafka_listener.py, in this folder); here it also shares a group with confluent-kafka and groupshift's
own consumer (each of them leading in turn) and joins with an old JoinGroup version. kcat and
Burrow tests are skipped where the binaries are missing (`scripts/setup.sh` installs them).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as CKTopicPartition
from confluent_kafka.admin import AdminClient
from kafka import KafkaConsumer
from kafka.coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.broker_version_data import BROKER_API_VERSIONS
from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse

from core.types import TopicPartition
from tests import cli_fork
from tests.kafka_helpers import (
    CONFLUENT_TEST_CONSUMER,
    KAFKA_PYTHON_POLL_MS,
    KAFKA_PYTHON_TEST_CONSUMER,
    Polling,
    ck_consume,
    ck_poll,
    kafka_node,
    new_topic,
    produce,
    recv_exactly,
)
from tests.ports import on_a_free_port
from zk_rebalance.layout import offset_path
from zk_rebalance.member import ZkGroupMember

REPO = Path(__file__).resolve().parents[3]
KCAT = shutil.which("kcat")
BURROW = shutil.which("Burrow") or shutil.which("burrow")

# librdkafka: CRCs checked (its default is off), short sessions (the node allows >= 100 ms).
CK = {**CONFLUENT_TEST_CONSUMER, "max.poll.interval.ms": 30000}
KP = dict(KAFKA_PYTHON_TEST_CONSUMER, max_poll_interval_ms=30000)


@pytest.fixture
def node(zk_connect, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with kafka_node(zk_connect, data, tmp_path / "node-1.log") as proc:
        yield proc


def _read_values(log, tp: TopicPartition, start: int) -> list[bytes]:
    """Every value from `start` to the log end (`Log.read` stops at row-group boundaries)."""
    out: list[bytes] = []
    while True:
        read = log.read(tp, start, 1000)
        if read.batch.num_rows == 0:
            return out
        out.extend(read.batch.column("value").to_pylist())
        start = read.next_offset


def _cli(node, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    out = cli_fork.shared().run(list(args), env, timeout=120, cwd=REPO, text=True)
    if check:
        assert out.returncode == 0, out.stderr
    return out


def _describe(node, group: str, *extra: str) -> list[dict]:
    out = _cli(
        node, "groups", "describe", group, "--zk", node.zk, "--data", str(node.data), "-o", "json", *extra
    )
    return json.loads(out.stdout)


def _committed(node, group: str, topic: str, *extra: str) -> dict[int, int]:
    rows = [r for view in _describe(node, group, *extra) for r in view.get("partitions", [])]
    return {r["partition"]: r["committed"] for r in rows if r["topic"] == topic}


def _ck_consumer(node, group: str, topic: str, **conf) -> Consumer:
    c = Consumer({"bootstrap.servers": node.kafka_bootstrap, "group.id": group, **CK, **conf})
    c.subscribe([topic])
    return c


def _ck_assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


# ------------------------------------------------------------------------------ confluent-kafka


def test_confluent_consumer_reads_once_commits_and_resumes(node):
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    first = produce(node, topic, 200)
    c = _ck_consumer(node, group, topic)
    try:
        got = ck_consume(c, 200)
        assert len(got) == 200 and set(got) == first  # every record, none twice
        assert ck_consume(c, 1, timeout=1.5) == []  # nothing past the end
        c.commit(asynchronous=False)
        committed = c.committed([CKTopicPartition(topic, p) for p in (0, 1)], timeout=20)
        assert {tp.partition: tp.offset for tp in committed} == {0: 100, 1: 100}
    finally:
        c.close()
    assert _committed(node, group, topic) == {0: 100, 1: 100}
    second = produce(node, topic, 30, start=200)
    c = _ck_consumer(node, group, topic)
    try:
        got = ck_consume(c, 30)
        assert sorted(got) == sorted(second)  # resumed from the commit
        assert ck_consume(c, 1, timeout=1.5) == []
    finally:
        c.close()


def _wait_split(consumers: list, assigned, partitions: set[int], polls, timeout: float = 40.0) -> None:
    """Poll every consumer until their assignments are non-empty, disjoint and cover `partitions`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for poll in polls:
            poll()
        views = [assigned(c) for c in consumers]
        if all(views) and sum(len(v) for v in views) == len(partitions) and set().union(*views) == partitions:
            return
    raise AssertionError(f"no split of {sorted(partitions)}: {[sorted(assigned(c)) for c in consumers]}")


def test_confluent_consumers_share_partitions_and_rebalance(node):
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    c1 = _ck_consumer(node, group, topic)
    c2 = None
    try:
        _wait_split([c1], _ck_assigned, {0, 1, 2, 3}, [lambda: ck_poll(c1)])
        c2 = _ck_consumer(node, group, topic)
        _wait_split([c1, c2], _ck_assigned, {0, 1, 2, 3}, [lambda: ck_poll(c1), lambda: ck_poll(c2)])
        assert len(_ck_assigned(c1)) == 2 and len(_ck_assigned(c2)) == 2
        c2.close()
        c2 = None
        _wait_split([c1], _ck_assigned, {0, 1, 2, 3}, [lambda: ck_poll(c1)])  # the leave rebalanced
    finally:
        c1.close()
        if c2 is not None:
            c2.close()


def _kp_values(c: KafkaConsumer, timeout_ms: int = KAFKA_PYTHON_POLL_MS) -> list[bytes]:
    return [r.value for records in c.poll(timeout_ms=timeout_ms).values() for r in records]


def _wait_for(what: str, condition, timeout: float = 90.0) -> None:  # generous: loaded runners
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


KP_ASSIGNORS = {"range": RangePartitionAssignor, "cooperative-sticky": CooperativeStickyAssignor}


def _member(node, kind: str, group: str, topic: str, strategy: str) -> tuple[Polling, object]:
    """One member of a mixed group polled in a thread of its own: groupshift's own consumer (the
    project's native listener, payload version 1), kafka-python or confluent-kafka (Kafka listener)."""
    if kind == "groupshift":
        from pipeline.consumer import Consumer as GroupshiftConsumer

        gs = GroupshiftConsumer(
            group,
            [topic],
            rebalancer="coordinator",
            zk=node.zk,
            log_root=node.data,
            bootstrap=node.bootstrap,
            assignors=[strategy],
            client_id="groupshift",
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )

        def gs_poll() -> list[bytes]:
            return [r.value for records in gs.poll(timeout_ms=200).values() for r in records]

        return Polling(gs_poll, lambda: {tp.partition for tp in gs.assignment()}, gs.commit), gs
    if kind == "kafka-python":
        kp = KafkaConsumer(
            topic,
            group_id=group,
            bootstrap_servers=node.kafka_bootstrap,
            partition_assignment_strategy=(KP_ASSIGNORS[strategy],),
            **KP,
        )
        return Polling(
            lambda: _kp_values(kp), lambda: {tp.partition for tp in kp.assignment()}, kp.commit
        ), kp
    ck = _ck_consumer(node, group, topic, **{"partition.assignment.strategy": strategy})
    return Polling(
        lambda: ck_poll(ck, 0.5), lambda: _ck_assigned(ck), lambda: ck.commit(asynchronous=False)
    ), ck


@pytest.mark.parametrize(
    "strategy, leader",
    [
        ("range", "groupshift"),
        ("range", "confluent-kafka"),
        ("cooperative-sticky", "groupshift"),
        ("cooperative-sticky", "kafka-python"),
    ],
)
def test_groupshift_kafka_python_and_confluent_share_a_group(node, strategy, leader):
    """Every member speaks Kafka's binary ConsumerProtocol (groupshift's own consumer through the
    native listener, the others through the Kafka listener), so any of them can lead: the first
    member to join an empty group leads it, and a leader that rejoins keeps leading."""
    topic, group = new_topic(node, 6), f"g-{uuid.uuid4().hex[:8]}"
    kinds = [leader] + [k for k in ("groupshift", "kafka-python", "confluent-kafka") if k != leader]
    members: list[tuple[Polling, object]] = []
    try:
        members.append(_member(node, kinds[0], group, topic, strategy))
        members[0][0].start()
        _wait_for(f"the {leader} leader alone holds all six", lambda: members[0][0].assigned == set(range(6)))
        for kind in kinds[1:]:
            members.append(_member(node, kind, group, topic, strategy))
            members[-1][0].start()
        threads = [t for t, _ in members]

        def split() -> bool:
            held = [t.assigned for t in threads]
            return all(len(h) == 2 for h in held) and set().union(*held) == set(range(6))

        _wait_for(f"a 2/2/2 split: {[sorted(t.assigned) for t in threads]}", split)
        values = produce(node, topic, 600, partitions=6)
        _wait_for("600 records read", lambda: sum(len(t.got) for t in threads) >= 600)
        time.sleep(1.0)  # nothing more arrives
        for t in threads:
            t.finish()  # and commits
        got = [t.got for t in threads]
        assert sum(map(len, got)) == 600 and set().union(*map(set, got)) == values
        assert [len(g) for g in got] == [200, 200, 200]
        assert _committed(node, group, topic) == {p: 100 for p in range(6)}
        [view] = _describe(node, group, "--members")
        assert view["summary"]["members"] == 3
    finally:
        for t, client in members:
            t.stop.set()
            t.join(30)
            client.close()


def test_confluent_admin_agrees_with_groups_describe(node):
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    produce(node, topic, 10)
    c = _ck_consumer(node, group, topic)
    admin = AdminClient({"bootstrap.servers": node.kafka_bootstrap})
    try:
        assert len(ck_consume(c, 10)) == 10
        c.commit(asynchronous=False)
        listed = admin.list_consumer_groups(request_timeout=20).result()
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group], request_timeout=20)[group].result()
        assert described.state.name == "STABLE" and len(described.members) == 1
        member = described.members[0]
        assert {(tp.topic, tp.partition) for tp in member.assignment.topic_partitions} == {
            (topic, 0),
            (topic, 1),
        }
        from confluent_kafka import ConsumerGroupTopicPartitions

        request = [ConsumerGroupTopicPartitions(group)]
        offsets = admin.list_consumer_group_offsets(request, request_timeout=20)[group].result()
        kafka_view = {tp.partition: tp.offset for tp in offsets.topic_partitions if tp.topic == topic}
    finally:
        c.close()
    assert kafka_view == {0: 5, 1: 5}
    assert _committed(node, group, topic) == kafka_view


# ------------------------------------------------------------------------------ kcat

needs_kcat = pytest.mark.skipif(KCAT is None, reason="kcat is not installed (scripts/setup.sh installs it)")


def _kcat(node, *args: str, input: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    out = subprocess.run(
        [KCAT, "-b", node.kafka_bootstrap, *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert out.returncode == 0, out.stderr
    return out


@needs_kcat
def test_kcat_lists_reads_consumes_as_a_group_and_produces(node):
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    values = produce(node, topic, 50)
    meta = json.loads(_kcat(node, "-L", "-J").stdout)
    [listed] = [t for t in meta["topics"] if t["topic"] == topic]
    assert sorted(p["partition"] for p in listed["partitions"]) == [0, 1]
    assert [b["id"] for b in meta["brokers"]] == [1]

    read = _kcat(node, "-C", "-t", topic, "-e", "-f", "%s\\n", "-X", "check.crcs=true").stdout.split()
    assert len(read) == 50 and {v.encode() for v in read} == values

    # A balanced consumer: -e exits once every assigned partition is at its end, committing on close.
    read = _kcat(
        node,
        "-G",
        group,
        topic,
        "-e",
        "-f",
        "%s\\n",
        "-X",
        "check.crcs=true",
        "-X",
        "auto.offset.reset=earliest",
        "-X",
        "session.timeout.ms=6000",
    ).stdout.split()
    assert len(read) == 50 and {v.encode() for v in read} == values
    assert _committed(node, group, topic) == {0: 25, 1: 25}

    _kcat(node, "-P", "-t", topic, "-p", "1", input="".join(f"kc-{i}\n" for i in range(10)))
    assert _read_values(node.store.log, TopicPartition(topic, 1), 25) == [
        f"kc-{i}".encode() for i in range(10)
    ]


# ------------------------------------------------------------------------------ Burrow

needs_burrow = pytest.mark.skipif(
    BURROW is None, reason="Burrow is not installed (scripts/setup.sh installs it)"
)


def _burrow_config(node, tmp: Path, http_port: int, offsets_topic: bool = False) -> Path:
    """Burrow 1.2.1 with its defaults' kafka-version 0.8 (Metadata v0, ListOffsets v0, no ApiVersions):
    a kafka cluster module on the Kafka listener, a kafka_zk consumer module on the chroot's
    /consumers, coordination under a private path in the same chroot (removed with it)."""
    servers, _, chroot = node.zk.partition("/")
    zk_servers = ", ".join(f'"{s}"' for s in servers.split(","))
    config = tmp / "burrow.toml"
    config.write_text(
        f"""
[general]
pidfile="{tmp}/burrow.pid"

[logging]
level="debug"

[zookeeper]
servers=[{zk_servers}]
timeout=6
root-path="/{chroot}/burrow-{uuid.uuid4().hex[:8]}"

[client-profile.modern]
kafka-version="1.0.0"
client-id="burrow-test"

[cluster.gs]
class-name="kafka"
servers=["{node.kafka_bootstrap}"]
topic-refresh=1
offset-refresh=1
{'client-profile="modern"' if offsets_topic else ""}

[consumer.gszk]
class-name="kafka_zk"
cluster="gs"
servers=[{zk_servers}]
zookeeper-path="/{chroot}"
zookeeper-timeout=6

{_burrow_offsets_consumer(node) if offsets_topic else ""}
[httpserver.default]
address="127.0.0.1:{http_port}"

[storage.default]
class-name="inmemory"
intervals=10
min-distance=1

[evaluator.default]
class-name="caching"
expire-cache=1
"""
    )
    return config


def _burrow_offsets_consumer(node) -> str:
    """Burrow's `kafka` consumer module: it reads the committed offsets of Kafka-coordinated
    groups from `__consumer_offsets` (Fetch v4+ record batches, hence kafka-version 1.0.0)."""
    return f"""
[consumer.gskafka]
class-name="kafka"
cluster="gs"
servers=["{node.kafka_bootstrap}"]
client-profile="modern"
offsets-topic="__consumer_offsets"
start-latest=false
"""


def _http_json(url: str) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as exc:  # Burrow answers 404 with a JSON error body
        try:
            return json.loads(exc.read())
        except ValueError:
            return None
    except (OSError, ValueError):
        return None


class _Burrow:
    """Burrow 1.2.1 as a process on `node`, with its HTTP API on a free port."""

    def __init__(self, node, tmp_path: Path, offsets_topic: bool = False):
        self.tmp = tmp_path
        self.out = None
        port, self.proc = on_a_free_port(
            lambda p: self._start(node, p, offsets_topic), taken=lambda proc: proc is None
        )
        self.base = f"http://127.0.0.1:{port}/v3/kafka/gs"

    def _start(self, node, port: int, offsets_topic: bool) -> subprocess.Popen | None:
        """Burrow with its HTTP API on `port`, once it answers there; None when the port was taken."""
        config = _burrow_config(node, self.tmp, port, offsets_topic)
        if self.out is not None:
            self.out.close()
        self.out = open(self.tmp / "burrow.out", "w")  # noqa: SIM115 - closed in stop()
        proc = subprocess.Popen(
            [BURROW, "--config-dir", str(config.parent)],
            cwd=self.tmp,
            stdout=self.out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while _http_json(f"http://127.0.0.1:{port}/v3/kafka") is None and proc.poll() is None:
            assert time.monotonic() < deadline, "Burrow never answered on its HTTP port: " + self.output()
            time.sleep(0.05)
        if proc.poll() is not None:
            assert "address already in use" in self.output(), self.output()
            return None
        return proc

    def output(self) -> str:
        return (self.tmp / "burrow.out").read_text()[-3000:]

    def wait_for_topic(self, topic: str) -> None:
        """Burrow drops consumer offsets until it has the broker's: wait until it lists the topic."""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if topic in (_http_json(f"{self.base}/topic") or {}).get("topics", []):
                return
            assert self.proc.poll() is None, self.output()
            time.sleep(0.2)
        raise AssertionError("Burrow never listed the topic: " + self.output())

    def lag(self, group: str, partitions: int) -> dict:
        """The group's lag once Burrow has an offset for every partition of its topic."""
        lag = None
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            lag = _http_json(f"{self.base}/consumer/{group}/lag")
            parts = (lag or {}).get("status", {}).get("partitions") or []
            if len(parts) == partitions and all((p.get("end") or {}).get("offset") for p in parts):
                return lag
            time.sleep(0.3)
        raise AssertionError(f"Burrow has no lag for {group}: {lag}\n{self.output()}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()


def _assert_burrow_agrees(node, lag: dict, group: str, topic: str, *describe_args: str) -> None:
    assert not lag.get("error"), lag
    burrow_view = {p["partition"]: p["current_lag"] for p in lag["status"]["partitions"]}
    assert burrow_view == {0: 10, 1: 5}
    assert lag["status"]["totallag"] == 15
    assert {p["partition"]: p["end"]["offset"] for p in lag["status"]["partitions"]} == {0: 40, 1: 45}
    [ours] = _describe(node, group, *describe_args)
    assert ours["summary"]["total_lag"] == lag["status"]["totallag"]
    assert {p["partition"]: p["lag"] for p in ours["partitions"] if p["topic"] == topic} == burrow_view


@needs_burrow
def test_burrow_lag_of_a_scheme_one_group_agrees_with_groups_describe(node, tmp_path):
    topic, group = new_topic(node, 2), f"legacy-{uuid.uuid4().hex[:8]}"
    produce(node, topic, 100)  # log end 50 on each partition
    # kafka_zk lists /consumers once at start and gives up if it is missing (a 0.8 cluster has it).
    node.zk_client.ensure_path("/consumers")
    burrow = _Burrow(node, tmp_path)
    member = ZkGroupMember(node.zk, group, {topic: 1}, rebalance_backoff_ms=200, auto_commit=False)
    try:
        burrow.wait_for_topic(topic)
        member.start()
        assert member.wait_for_stable(30)
        member.commit({TopicPartition(topic, 0): 40, TopicPartition(topic, 1): 45}, member.generation)
        _assert_burrow_agrees(node, burrow.lag(group, 2), group, topic, "--scheme", "zk")
    finally:
        member.close()
        burrow.stop()


@needs_burrow
def test_burrow_reads_a_coordinator_groups_commits_from_the_offsets_topic(node, tmp_path):
    """The node mirrors its commits into `__consumer_offsets`, where Burrow's `kafka` consumer module
    (sarama, an implementation nobody here wrote) decodes them as it does on a Kafka cluster."""
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    produce(node, topic, 100)
    c = _ck_consumer(node, group, topic)
    burrow = None
    try:
        _wait_for("the consumer's assignment", lambda: (c.poll(0.2), _ck_assigned(c))[1] == {0, 1})
        burrow = _Burrow(node, tmp_path, offsets_topic=True)
        burrow.wait_for_topic(topic)
        c.commit(offsets=[CKTopicPartition(topic, 0, 40), CKTopicPartition(topic, 1, 45)], asynchronous=False)
        _assert_burrow_agrees(node, burrow.lag(group, 2), group, topic)
        status = _http_json(f"{burrow.base}/consumer/{group}/status")
        assert status and status["status"]["group"] == group and status["status"]["status"] != "NOTFOUND", (
            status
        )
    finally:
        c.close()
        if burrow is not None:
            burrow.stop()


# ------------------------------------------------------------------------------ JoinGroup v2


def test_old_join_group_version_is_admitted_without_member_id_required(node):
    """kafka-python told the broker is Kafka 1.0 joins with JoinGroup v2 (before KIP-394): the
    listener takes the MEMBER_ID_REQUIRED round trip for it, and it shares a group with a v5 member."""
    assert BROKER_API_VERSIONS[(1, 0)][11] == (0, 2)  # JoinGroup v2 at most
    topic, group = new_topic(node, 4), f"g-{uuid.uuid4().hex[:8]}"
    old = KafkaConsumer(
        topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, api_version=(1, 0), **KP
    )
    new = KafkaConsumer(topic, group_id=group, bootstrap_servers=node.kafka_bootstrap, **KP)
    threads = [
        Polling(lambda c=c: _kp_values(c), lambda c=c: {tp.partition for tp in c.assignment()}, lambda: None)
        for c in (old, new)
    ]
    try:
        for t in threads:
            t.start()

        def split() -> bool:
            a, b = (t.assigned for t in threads)
            return len(a) == 2 and len(b) == 2 and a | b == {0, 1, 2, 3}

        _wait_for(f"a 2/2 split: {[sorted(t.assigned) for t in threads]}", split)
        values = produce(node, topic, 100, partitions=4)
        _wait_for("100 records read", lambda: sum(len(t.got) for t in threads) >= 100)
        time.sleep(1.0)
        for t in threads:
            t.finish()
        got = threads[0].got + threads[1].got
        assert len(got) == 100 and set(got) == values
        [view] = _describe(node, group, "--members")
        assert view["summary"]["members"] == 2
    finally:
        for t in threads:
            t.stop.set()
            t.join(30)
        old.close()
        new.close()


def _round_trip(port: int, request, version: int, response_class):
    request.with_header(correlation_id=7, client_id="raw")
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(bytes(request.encode(header=True, framed=True)))
        size = int.from_bytes(recv_exactly(s, 4), "big")
        frame = recv_exactly(s, size)
    return response_class.decode(frame, version=version, header=True)


@pytest.mark.parametrize("version", [2, 3, 4])
def test_join_group_v2_v3_answer_a_new_member_with_its_generation(node, version):
    group = f"g-{uuid.uuid4().hex[:8]}"
    request = JoinGroupRequest(
        version=version,
        group_id=group,
        session_timeout_ms=6000,
        rebalance_timeout_ms=6000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x00")],
    )
    answer = _round_trip(node.kafka_port, request, version, JoinGroupResponse)
    assert answer.header.correlation_id == 7
    if version >= 4:  # KIP-394: the id round trip is the member's
        assert answer.error_code == 79 and answer.member_id
    else:  # admitted at once, as Kafka does below v4
        assert answer.error_code == 0 and answer.member_id and answer.generation_id == 1
        assert answer.leader == answer.member_id and len(answer.members) == 1


def _stalled_status_agrees(node, burrow, group: str, topic: str, commit, *scheme: str) -> None:
    """Commit the same offsets behind the log end every 1.1 s (`commit()`) while `groups watch` keeps
    a window; until Burrow and `groups describe` both say ERR with STALL on both partitions (60 s)."""
    samples = burrow.tmp / "window.json"
    watch = subprocess.Popen(
        [sys.executable, "-m", "cli", "groups", "watch", group, *scheme, "--zk", node.zk, "--data",
         str(node.data), "--interval", "1", "--count", "30", "--samples", str(samples)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        theirs = ours = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            commit()
            time.sleep(1.1)
            status = (_http_json(f"{burrow.base}/consumer/{group}/status") or {}).get("status") or {}
            theirs = (
                status.get("status"),
                {p["partition"]: p["status"] for p in status.get("partitions") or []},
            )
            [view] = _describe(node, group, *scheme, "--samples", str(samples))
            ours = (
                view["summary"]["status"],
                {p["partition"]: p["status"] for p in view["partitions"] if p["topic"] == topic},
            )
            if theirs == ours == ("ERR", {0: "STALL", 1: "STALL"}):
                break
        assert theirs == ours == ("ERR", {0: "STALL", 1: "STALL"}), (theirs, ours, burrow.output())
    finally:
        watch.terminate()
        watch.wait(10)


@needs_burrow
def test_burrow_status_of_a_stalled_coordinator_group_agrees_with_groups_describe(node, tmp_path):
    """A live member that commits the same offsets again and again behind the log end: a window of
    commits both Burrow (from `__consumer_offsets`) and `groups watch` (from ZooKeeper) evaluate
    with Burrow's rules — STALL on every partition, ERR for the group, in both."""
    topic, group = new_topic(node, 2), f"g-{uuid.uuid4().hex[:8]}"
    produce(node, topic, 100)  # log end 50 on each partition, no more
    c = _ck_consumer(node, group, topic)
    burrow = None

    def commit() -> None:
        c.commit(offsets=[CKTopicPartition(topic, 0, 40), CKTopicPartition(topic, 1, 45)], asynchronous=False)
        c.poll(0.05)

    try:
        _wait_for("the consumer's assignment", lambda: (c.poll(0.2), _ck_assigned(c))[1] == {0, 1})
        burrow = _Burrow(node, tmp_path, offsets_topic=True)
        burrow.wait_for_topic(topic)
        _stalled_status_agrees(node, burrow, group, topic, commit)
    finally:
        c.close()
        if burrow is not None:
            burrow.stop()


@needs_burrow
def test_burrow_status_of_a_stalled_scheme_one_group_agrees_with_groups_describe(node, tmp_path):
    """A scheme-one group whose consumer writes the same offsets to its offset znodes again and again
    behind the log end (a 0.8.0 consumer's auto-commit writes whether or not they changed): Burrow's
    `kafka_zk` module and `groups watch` both order the writes by the znodes' mzxid, and both say
    STALL on every partition and ERR for the group."""
    topic, group = new_topic(node, 2), f"legacy-{uuid.uuid4().hex[:8]}"
    produce(node, topic, 100)  # log end 50 on each partition, no more
    node.zk_client.ensure_path("/consumers")  # kafka_zk lists it once at start
    burrow = _Burrow(node, tmp_path)
    member = ZkGroupMember(node.zk, group, {topic: 1}, rebalance_backoff_ms=200, auto_commit=False)

    def commit() -> None:
        for p, offset in ((0, 40), (1, 45)):
            node.zk_client.set(offset_path(group, topic, p), str(offset).encode())

    try:
        burrow.wait_for_topic(topic)
        member.start()
        assert member.wait_for_stable(30)
        member.commit({TopicPartition(topic, 0): 40, TopicPartition(topic, 1): 45}, member.generation)
        _stalled_status_agrees(node, burrow, group, topic, commit, "--scheme", "zk")
    finally:
        member.close()
        burrow.stop()
