"""`groupshift migrate ... --to kafka` and `offsets export|import --bootstrap` against two Kafka-protocol
brokers: groupshift's own Kafka listener (a node process with --kafka-listen) and librdkafka's mock
cluster shipped in the confluent-kafka wheel (a broker nobody here wrote).

Scheme-one groups are written in real ZooKeeper (`/consumers/<g>/offsets/<t>/<p>`). Each test
checks the target through an AdminClient of its own: after `run` it holds the scheme-one offsets,
`verify` agrees, `rollback` puts back what it had; refused commands print one line, exit 1 and
change neither ZooKeeper (full tree) nor the target.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, Producer
from confluent_kafka import TopicPartition as KTP
from confluent_kafka.admin import AdminClient

from coordinator.node.process import NodeProcess
from core.types import TopicPartition as TP
from core.zk import connect
from migrate.migration import offline
from migrate.schemes import zk_store as legacy
from tests import cli_fork
from tests.inspect_helpers import REPO
from tests.kill_sweep import every_named, spots
from tests.snapshots import zk_tree
from topics.registry import create_topic
from topics.store import TopicStore

PARTITIONS = 4  # the mock cluster creates topics with 4 partitions when first produced to


@pytest.fixture(scope="module")
def zk(module_zk_connect):
    connect_string = module_zk_connect
    client = connect(connect_string, session_timeout=6.0)
    client.connect_string = connect_string
    yield client
    client.stop()
    client.close()


@pytest.fixture(scope="module")
def listener(zk, tmp_path_factory):
    """A node with a Kafka listener on the same chroot as the scheme-one groups."""
    data = tmp_path_factory.mktemp("kafka-data")
    proc = NodeProcess.start(
        zk.connect_string,
        1,
        "--kafka-listen",
        "127.0.0.1:0",
        "--data",
        str(data),
        "--group-initial-rebalance-delay-ms",
        "0",
        "--group-min-session-timeout-ms",
        "100",
        "--shards",
        "4",
        log_path=tmp_path_factory.mktemp("node") / "node-1.log",
    )
    proc.store = TopicStore(data, zk)
    yield proc
    proc.stop()


@pytest.fixture(scope="module")
def mock():
    """librdkafka's mock cluster (3 brokers); alive as long as the client that made it."""
    maker = Producer({"test.mock.num.brokers": 3, "log_level": 0})
    brokers = maker.list_topics(timeout=10).brokers.values()
    yield ",".join(f"{b.host}:{b.port}" for b in sorted(brokers, key=lambda b: b.id))
    maker.flush(5)


class Broker:
    """One of the two targets, as the tests use it."""

    def __init__(self, kind, bootstrap, make_topic):
        self.kind, self.bootstrap, self._make_topic = kind, bootstrap, make_topic
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})

    def topic(self, zk) -> str:
        name = f"t-{uuid.uuid4().hex[:8]}"
        create_topic(zk, name, partitions=PARTITIONS)
        self._make_topic(name)
        return name

    def offsets(self, group: str, topic: str) -> dict[int, int]:
        ask = [KTP(topic, p) for p in range(PARTITIONS)]
        f = self.admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, ask)], request_timeout=10
        )
        got = f[group].result(timeout=20)
        return {tp.partition: tp.offset for tp in got.topic_partitions if tp.offset >= 0}

    def commit(self, group: str, topic: str, offsets: dict[int, int]) -> None:
        tps = [KTP(topic, p, o) for p, o in offsets.items()]
        f = self.admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, tps)], request_timeout=10
        )
        got = f[group].result(timeout=20)
        assert all(tp.error is None for tp in got.topic_partitions), got.topic_partitions


@pytest.fixture(params=["listener", "mock"])
def broker(request, zk):
    if request.param == "listener":
        node = request.getfixturevalue("listener")

        def make_topic(name):
            node.store.log.create(name, PARTITIONS)
            for p in range(PARTITIONS):
                node.store.log.produce(name, [(b"k", b"v")] * 100, partition=p)

        return Broker("listener", node.kafka_bootstrap, make_topic)
    bootstrap = request.getfixturevalue("mock")

    def make_topic(name):
        p = Producer({"bootstrap.servers": bootstrap, "log_level": 0})
        for part in range(PARTITIONS):
            for _ in range(100):
                p.produce(name, b"v", partition=part)
        assert p.flush(20) == 0

    return Broker("mock", bootstrap, make_topic)


def run(*args: str, zk: str | None = None, env: dict | None = None, timeout: float = 120):
    argv = [*args] + (["--zk", zk] if zk else [])
    full = {k: v for k, v in os.environ.items() if k != "GROUPSHIFT_ZK"} | (env or {})
    return cli_fork.shared().run(argv, full, timeout=timeout, cwd=REPO, text=True)


def scheme_one(zk, topic: str, offsets: dict[int, int]) -> str:
    group = f"g-{uuid.uuid4().hex[:8]}"
    legacy.write_offsets(zk, group, {TP(topic, p): o for p, o in offsets.items()}, batch=100)
    return group


def migrate(*args, zk, timeout=120):
    return run("migrate", *args, zk=zk.connect_string, timeout=timeout)


def one_line(r) -> str:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    return lines[0]


def test_run_copies_the_scheme_one_offsets_and_verify_agrees(zk, broker):
    topic = broker.topic(zk)
    source = {0: 10, 1: 20, 2: 30, 3: 40}
    group = scheme_one(zk, topic, source)
    to = ("--from", "zk", "--to", "kafka", "--bootstrap", broker.bootstrap)
    plan = migrate("plan", group, *to, zk=zk)
    assert plan.returncode == 0, plan.stderr
    assert f"to kafka at {broker.bootstrap}" in plan.stdout and "FAIL" not in plan.stdout
    assert broker.offsets(group, topic) == {}  # the plan wrote nothing

    r = migrate("run", group, *to, zk=zk)
    assert r.returncode == 0, r.stderr
    assert ": done;" in r.stdout
    assert broker.offsets(group, topic) == source
    if broker.kind == "listener":  # the listener keeps them as a coordinator group in ZooKeeper
        assert offline.offsets(zk, "coordinator", group) == {TP(topic, p): o for p, o in source.items()}
    assert migrate("verify", group, *to, zk=zk).returncode == 0
    again = migrate("run", group, *to, zk=zk)  # done and still equal: nothing to do
    assert again.returncode == 0 and "nothing to do" in again.stderr

    # a consumer starts where scheme one left off
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "log_level": 0,
            "enable.auto.commit": False,
        }
    )
    try:
        committed = c.committed([KTP(topic, p) for p in range(PARTITIONS)], timeout=20)
    finally:
        c.close()
    assert {tp.partition: tp.offset for tp in committed} == source

    broker.commit(group, topic, {0: 11})  # the target moves on: verify says so
    differ = migrate("verify", group, *to, zk=zk)
    assert differ.returncode == 1 and "1 partition(s) differ" in differ.stdout


@pytest.mark.parametrize("stop_at", ["copy:1", "before:done"])
def test_rollback_restores_the_target_offsets(zk, broker, stop_at):
    topic = broker.topic(zk)
    group = scheme_one(zk, topic, {0: 10, 1: 20, 2: 30, 3: 40})
    prior = {0: 1, 1: 2, 2: 3, 3: 4}
    broker.commit(group, topic, prior)
    to = ("--from", "zk", "--to", "kafka", "--bootstrap", broker.bootstrap)
    refused = migrate("run", group, *to, zk=zk)
    assert "--overwrite" in one_line(refused)
    r = run(
        "migrate",
        "run",
        group,
        *to,
        "--overwrite",
        zk=zk.connect_string,
        env={"GROUPSHIFT_MIGRATE_EXIT_AT": stop_at},
    )
    assert r.returncode == 99, r.stderr
    assert broker.offsets(group, topic) == {0: 10, 1: 20, 2: 30, 3: 40}
    status = migrate("status", group, zk=zk)
    assert ": frozen;" in status.stdout and broker.bootstrap in status.stdout  # copied, not switched
    back = migrate("rollback", group, zk=zk)  # the record names the brokers
    assert back.returncode == 0, back.stderr
    assert "rolled_back" in back.stdout
    assert broker.offsets(group, topic) == prior


def test_rollback_of_a_new_target_group(zk, broker):
    topic = broker.topic(zk)
    group = scheme_one(zk, topic, {0: 5, 1: 6})
    to = ("--from", "zk", "--to", "kafka", "--bootstrap", broker.bootstrap)
    stop = {"GROUPSHIFT_MIGRATE_EXIT_AT": "before:done"}
    r = run("migrate", "run", group, *to, zk=zk.connect_string, env=stop)
    assert r.returncode == 99, r.stderr
    assert broker.offsets(group, topic) == {0: 5, 1: 6}
    back = migrate("rollback", group, zk=zk)
    assert back.returncode == 0, back.stderr
    if broker.kind == "listener":  # DeleteGroups: the group is gone again
        assert broker.offsets(group, topic) == {}
    else:  # the mock cluster serves no DeleteGroups: said so, the record is rolled back all the same
        assert "serves no DeleteGroups" in back.stderr
    assert "rolled_back" in back.stdout


def _member(broker, group: str, topic: str) -> Consumer:
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "log_level": 0,
            "session.timeout.ms": 6000,
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while not c.assignment():
        assert time.monotonic() < deadline, "the consumer got no assignment"
        c.poll(0.2)
    return c


def test_bad_input_changes_nothing(zk, broker):
    topic = broker.topic(zk)
    group = scheme_one(zk, topic, {0: 10, 1: 20})
    active = scheme_one(zk, topic, {0: 7})
    broker.commit(active, topic, {0: 3})
    member = _member(broker, active, topic)
    to = ("--from", "zk", "--to", "kafka")
    try:
        member.poll(0.1)
        before = (
            zk_tree(zk.connect_string),
            broker.offsets(group, topic),
            broker.offsets(active, topic),
        )
        # A target group with a live member: the broker itself refuses (each broker in its words).
        cases = {"active target": migrate("run", active, *to, "--bootstrap", broker.bootstrap, zk=zk)}
        if broker.kind == "listener":
            # Refused before any broker answers (the same whichever broker it is): once, not per broker.
            started = time.monotonic()
            cases["unreachable"] = migrate("run", group, *to, "--bootstrap", "127.0.0.1:1", zk=zk)
            assert time.monotonic() - started < 40
            cases |= {
                "no such group": migrate("run", "no-such-group", *to, "--bootstrap", broker.bootstrap, zk=zk),
                "bad bootstrap": migrate("run", group, *to, "--bootstrap", "nonsense", zk=zk),
                "no bootstrap": migrate("run", group, *to, zk=zk),
                "live mode": migrate(
                    "run", group, *to, "--mode", "live", "--bootstrap", broker.bootstrap, zk=zk
                ),
            }
        member.poll(0.1)
        lines = {name: one_line(r) for name, r in cases.items()}
        assert "live member" in lines["active target"] or "refused the commit" in lines["active target"]
        if broker.kind == "listener":
            assert "does not exist under scheme zk" in lines["no such group"]
            assert "cannot reach a Kafka-protocol broker at 127.0.0.1:1" in lines["unreachable"]
            assert "nothing accepts connections there" in lines["unreachable"]  # said at once
            assert "expected HOST:PORT" in lines["bad bootstrap"]
            assert "needs --bootstrap" in lines["no bootstrap"]
            assert "offline" in lines["live mode"]
        after = zk_tree(zk.connect_string), broker.offsets(group, topic), broker.offsets(active, topic)
        assert after == before
    finally:
        member.close()

    # a topic the target does not have (not even registered: the listener serves those it is): refused
    missing = f"t-{uuid.uuid4().hex[:8]}"
    lonely = scheme_one(zk, missing, {0: 1})
    before = zk_tree(zk.connect_string)
    line = one_line(migrate("run", lonely, *to, "--bootstrap", broker.bootstrap, zk=zk))
    assert f"topic {missing!r} does not exist on" in line
    assert zk_tree(zk.connect_string) == before

    if broker.kind == "listener":  # a coordinator group "moved" onto the listener that serves it
        from migrate.schemes.writes import commit

        own = f"g-{uuid.uuid4().hex[:8]}"
        commit(zk, "coordinator", own, {TP(topic, 0): 5})
        before = zk_tree(zk.connect_string)
        for command in ("plan", "run"):
            line = one_line(
                migrate(
                    command,
                    own,
                    "--from",
                    "coordinator",
                    "--to",
                    "kafka",
                    "--bootstrap",
                    broker.bootstrap,
                    zk=zk,
                )
            )
            assert "is the Kafka listener of this ZooKeeper's coordinator nodes" in line
        assert zk_tree(zk.connect_string) == before


def test_offsets_export_and_import_through_the_broker(zk, broker, tmp_path):
    topic = broker.topic(zk)
    group = f"g-{uuid.uuid4().hex[:8]}"
    broker.commit(group, topic, {0: 10, 2: 30})
    out = run("offsets", "export", group, "--bootstrap", broker.bootstrap)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{topic},0,10\n{topic},2,30\n"

    other = f"g-{uuid.uuid4().hex[:8]}"
    f = tmp_path / "offsets.csv"
    f.write_text(f"{topic},1,50\n{topic},3,100\n")
    dry = run("offsets", "import", other, "--from-file", str(f), "--bootstrap", broker.bootstrap)
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stderr and broker.offsets(other, topic) == {}
    wet = run("offsets", "import", other, "--from-file", str(f), "--bootstrap", broker.bootstrap, "--execute")
    assert wet.returncode == 0, wet.stderr
    assert broker.offsets(other, topic) == {1: 50, 3: 100}
    back = run("offsets", "export", other, "--bootstrap", broker.bootstrap)
    assert back.stdout == f.read_text()

    f.write_text(f"{topic},1,101\n")  # past the log end (100 records a partition)
    line = one_line(
        run("offsets", "import", other, "--from-file", str(f), "--bootstrap", broker.bootstrap, "--execute")
    )
    assert "past the log end offset 100" in line
    assert broker.offsets(other, topic) == {1: 50, 3: 100}
    assert "no committed offsets" in one_line(
        run("offsets", "export", "nobody", "--bootstrap", broker.bootstrap)
    )


def test_killed_at_a_checkpoint_run_again_finishes_and_rollback_undoes(zk, broker):
    """`GROUPSHIFT_MIGRATE_EXIT_AT=k` ends the process at its k-th checkpoint as a kill would (no
    cleanup, the lock left behind). Then `run` again finishes (the target holds the scheme-one
    offsets, the record is done) or `rollback` puts back what the target had; the source never
    changes. One group per kill point and outcome, all side by side. Killed at every named
    checkpoint against librdkafka's mock cluster (any Kafka-protocol broker), at spot checks around
    the copy and the switch against the listener (tests/kill_sweep.py)."""
    from migrate.migration import record as R
    from migrate.migration import to_kafka

    topic = broker.topic(zk)
    source = {0: 10, 1: 20, 2: 30, 3: 40}
    prior = {0: 1, 1: 2, 2: 3, 3: 4}
    to = ("--from", "zk", "--to", "kafka", "--bootstrap", broker.bootstrap, "--batch", "1", "--overwrite")

    counted = scheme_one(zk, topic, source)
    broker.commit(counted, topic, prior)
    offline.passed.clear()
    to_kafka.run(zk, counted, "zk", broker.bootstrap, batch=1, overwrite=True)
    names = list(offline.passed)
    points = every_named(names) if broker.kind == "mock" else spots(names)

    env = {k_: v for k_, v in os.environ.items() if k_ != "GROUPSHIFT_ZK"}

    def spawn(*args: str, exit_at: int | None = None) -> subprocess.Popen:
        extra = {} if exit_at is None else {"GROUPSHIFT_MIGRATE_EXIT_AT": str(exit_at)}
        cmd = [sys.executable, "-m", "cli", "migrate", *args, "--zk", zk.connect_string]
        return subprocess.Popen(
            cmd, cwd=REPO, env=env | extra, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    def finish(procs: dict) -> dict:
        return {g: (p.wait(180), p.communicate()[1]) for g, p in procs.items()}

    kinds = {}
    killed = {}
    for k in points:
        for kind in ("resume", "undo"):
            group = scheme_one(zk, topic, source)
            broker.commit(group, topic, prior)
            kinds[group] = kind
            killed[group] = spawn("run", group, *to, exit_at=k)
    for group, (code, err) in finish(killed).items():
        assert code == offline.EXIT_CODE, (group, code, err)
        assert offline.offsets(zk, "zk", group) == {TP(topic, p): o for p, o in source.items()}

    again = {g: spawn("run", g, *to) if kinds[g] == "resume" else spawn("rollback", g) for g in killed}
    for group, (code, err) in finish(again).items():
        rec, _ = offline.read_record(zk, group)
        if kinds[group] == "resume":
            assert code == 0, (group, err)
            assert rec is not None and rec.state == R.DONE, (group, rec)
            assert broker.offsets(group, topic) == source, group
            assert offline.lock_holder(zk, group) is None, group
        elif rec is None:  # killed before its first record: nothing copied, nothing to roll back
            assert code == 1 and "nothing to roll back" in err, (group, err)
            assert broker.offsets(group, topic) == prior, group
        elif rec.state == R.DONE:  # killed after the last transition: done
            assert code == 1 and "is done" in err, (group, err)
            assert broker.offsets(group, topic) == source, group
        else:
            assert code == 0, (group, err)
            assert rec.state == R.ROLLED_BACK, (group, rec)
            assert broker.offsets(group, topic) == prior, group
            assert offline.lock_holder(zk, group) is None, group


def test_a_coordinator_group_moves_to_another_kafka_cluster(zk, mock):
    """--from coordinator: a scheme-three group's offsets (groupshift's ZooKeeper shards) into a
    group on another Kafka-protocol cluster (librdkafka's mock); run and verify, the source unchanged."""
    from migrate.schemes.writes import commit

    broker = Broker("mock", mock, lambda name: None)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    create_topic(zk, topic, partitions=PARTITIONS)
    p = Producer({"bootstrap.servers": mock, "log_level": 0})
    for part in range(PARTITIONS):
        for _ in range(50):
            p.produce(topic, b"v", partition=part)
    assert p.flush(20) == 0
    group = f"g-{uuid.uuid4().hex[:8]}"
    source = {0: 7, 1: 8, 2: 9, 3: 10}
    commit(zk, "coordinator", group, {TP(topic, q): o for q, o in source.items()})
    to = ("--from", "coordinator", "--to", "kafka", "--bootstrap", mock)
    r = migrate("run", group, *to, zk=zk)
    assert r.returncode == 0, r.stderr
    assert broker.offsets(group, topic) == source
    assert migrate("verify", group, *to, zk=zk).returncode == 0
    assert offline.offsets(zk, "coordinator", group) == {TP(topic, q): o for q, o in source.items()}
    status = migrate("status", group, zk=zk)
    assert "done" in status.stdout and mock in status.stdout
