"""`pipeline.Consumer` end to end on real ZooKeeper (and real coordinator node processes).

The group tests run the same body under `rebalancer="zk"` (scheme one), `"server"` (scheme two:
the coordinator assigns; `incremental=True` too) and `"coordinator"` (scheme three). Static membership and
cooperative-sticky are scheme three's.

Run as a script (`python tests/integ/pipeline/test_consumer.py --worker ...`) this module is the consumer
process the pause test stops with SIGSTOP.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

if __name__ == "__main__":  # the worker process: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pytest

from coordinator.node.process import CoordinatorNodes
from core.errors import CommitFailed, GroupshiftError
from core.types import TopicPartition as TP
from pipeline.consumer import Consumer
from topics.log import Log
from topics.registry import create_topic

SESSION_MS = 1500
HEARTBEAT_MS = 100


def zk_options() -> dict:
    """Scheme one's knobs for fast tests (rebalance backoff ~100 ms)."""
    # fence_commits: scheme one's opt-in fix that makes a zombie's commit raise CommitFailed
    return {"rebalance_backoff_ms": 150, "rebalance_max_retries": 20, "fence_commits": True}


def consumer_options(rebalancer: str, bootstrap: str | None, **kw) -> dict:
    opts = dict(
        rebalancer=rebalancer,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=HEARTBEAT_MS,
        max_poll_interval_ms=10_000,
        auto_offset_reset="earliest",
    )
    if rebalancer == "incremental":  # scheme two's incremental form
        opts.update(rebalancer="server", incremental=True)
    if rebalancer in ("coordinator", "server", "incremental"):
        opts["bootstrap"] = bootstrap
        opts["membership_options"] = {"retry_backoff_ms": 50}
    else:
        opts["membership_options"] = zk_options()
    opts.update(kw)
    return opts


class Env:
    """One test's topic data, ZooKeeper chroot and (scheme three) coordinator nodes."""

    def __init__(self, rebalancer: str, zk, zk_connect: str, root: Path, nodes: CoordinatorNodes | None):
        self.rebalancer, self.zk, self.zk_connect, self.root, self.nodes = (
            rebalancer,
            zk,
            zk_connect,
            root,
            nodes,
        )
        self.log = Log(root)
        self.consumers: list[Consumer] = []

    @property
    def bootstrap(self) -> str | None:
        return self.nodes.bootstrap if self.nodes else None

    def topic(self, name: str, partitions: int, per_partition: int = 0) -> None:
        create_topic(self.zk, name, partitions=partitions)
        self.log.create(name, partitions)
        for p in range(partitions):
            self.produce(name, p, per_partition)

    def produce(self, topic: str, partition: int, n: int) -> None:
        if n:
            self.log.produce(topic, [(b"k", f"{partition}".encode()) for _ in range(n)], partition=partition)

    def end_offsets(self, topic: str, partitions: int) -> dict[TP, int]:
        return {TP(topic, p): self.log.latest(TP(topic, p)) for p in range(partitions)}

    def consumer(self, group: str, topics, **kw) -> Consumer:
        c = Consumer(
            group,
            topics,
            zk=self.zk_connect,
            log=self.log,
            **consumer_options(self.rebalancer, self.bootstrap, **kw),
        )
        self.consumers.append(c)
        return c

    def close(self) -> None:
        for c in self.consumers:
            try:
                c.close()
            except GroupshiftError:
                pass


@pytest.fixture(params=["zk", "server", "incremental", "coordinator"])
def env(request, zk, zk_connect, tmp_path):
    rebalancer = request.param
    if rebalancer == "zk":
        pytest.importorskip("zk_rebalance.member", reason="scheme one's ZkGroupMember has not landed")
        e = Env(rebalancer, zk, zk_connect, tmp_path, None)
        yield e
        e.close()
        return
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        e = Env(rebalancer, zk, zk_connect, tmp_path, nodes)
        yield e
        e.close()


@pytest.fixture
def coordinator_env(zk, zk_connect, tmp_path):
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        e = Env("coordinator", zk, zk_connect, tmp_path, nodes)
        yield e
        e.close()


class Worker(threading.Thread):
    """A consumer loop: poll, commit, and record what was delivered — in `delivered` when the commit
    succeeded, in `retracted` when it raised CommitFailed (those records are delivered again)."""

    def __init__(self, consumer: Consumer, delivered: list, name: str):
        # With auto-commit a rebalance commits what poll() returned, so a CommitFailed would not
        # mean "delivered again" and the bookkeeping below would miss records.
        assert not consumer.enable_auto_commit, "a Worker commits explicitly"
        super().__init__(daemon=True, name=name)
        self.consumer, self.delivered = consumer, delivered
        self.stop_event = threading.Event()
        self.commit_failures = 0
        self.retracted: list = []
        self.snapshots: list[tuple[float, frozenset]] = []
        self.fetched: list[tuple[float, TP]] = []  # (when, partition) of every non-empty poll
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                got = self.consumer.poll(timeout_ms=50)
                now = time.monotonic()
                batch = [(tp, r.offset, self.name) for tp, records in got.items() for r in records]
                self.fetched.extend((now, tp) for tp in got)
                self.snapshots.append((time.monotonic(), frozenset(self.consumer.assignment())))
                if got:
                    try:
                        self.consumer.commit()
                        self.delivered.extend(batch)
                    except CommitFailed:
                        self.commit_failures += 1
                        self.retracted.extend(batch)
            self.consumer.close()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(20)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


def wait_for(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def polled(*consumers: Consumer) -> bool:
    """Poll each consumer once (scheme three rebalances only inside poll(), as Kafka does)."""
    for c in consumers:
        c.poll(0)
    return True


def committed_all(env: Env, group: str, ends: dict[TP, int]) -> bool:
    probe = next(c for c in env.consumers if not c._closed and c.group_id == group)
    try:
        return probe.committed(list(ends)) == ends
    except GroupshiftError:
        return False


def assert_exactly_once(delivered, ends: dict[TP, int]) -> None:
    counts = Counter((tp, off) for tp, off, _ in delivered)
    twice = [k for k, n in counts.items() if n > 1]
    assert not twice, f"{len(twice)} records delivered twice, e.g. {sorted(twice)[:5]}"
    missing = [(tp, o) for tp, end in ends.items() for o in range(end) if (tp, o) not in counts]
    assert not missing, f"{len(missing)} records never delivered, e.g. {missing[:5]}"


# ---------------------------------------------------------------------------------------------


def test_three_consumers_read_a_topic_to_its_end_exactly_once(env):
    env.topic("t", partitions=6)
    delivered: list = []
    workers = [
        Worker(env.consumer("g3", ["t"], max_poll_records=50, enable_auto_commit=False), delivered, f"w{i}")
        for i in range(3)
    ]
    for w in workers:
        w.start()
    try:
        wait_for(
            lambda: all(len(w.consumer.assignment()) == 2 for w in workers),
            what="three members, two partitions each",
        )
        for p in range(6):
            env.produce("t", p, 300)
        ends = env.end_offsets("t", 6)
        wait_for(lambda: len(delivered) >= sum(ends.values()), what="every record delivered")
        wait_for(lambda: committed_all(env, "g3", ends), what="committed offsets at the log end")
    finally:
        for w in workers:
            w.stop()
    assert_exactly_once(delivered, ends)
    assert {name for _, _, name in delivered} == {"w0", "w1", "w2"}  # the work was shared


def test_a_consumer_joins_and_another_leaves_during_consumption(env):
    env.topic("t", partitions=4, per_partition=100)
    delivered: list = []
    w0 = Worker(env.consumer("gj", ["t"], max_poll_records=20, enable_auto_commit=False), delivered, "w0")
    w1 = Worker(env.consumer("gj", ["t"], max_poll_records=20, enable_auto_commit=False), delivered, "w1")
    w0.start()
    w1.start()
    stop_producing = threading.Event()

    def produce():
        while not stop_producing.is_set():
            for p in range(4):
                env.produce("t", p, 10)
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    try:
        wait_for(lambda: {n for *_, n in delivered} >= {"w0", "w1"}, what="both consumers reading")
        w2 = Worker(env.consumer("gj", ["t"], max_poll_records=20, enable_auto_commit=False), delivered, "w2")
        w2.start()
        wait_for(lambda: any(n == "w2" for *_, n in delivered), what="the joined consumer reading")
        w0.stop()  # leaves the group (close: commit, revoke, leave)
        time.sleep(0.5)
        stop_producing.set()
        producer.join()
        ends = env.end_offsets("t", 4)
        wait_for(lambda: len(delivered) >= sum(ends.values()), timeout=60, what="every record delivered")
        wait_for(lambda: committed_all(env, "gj", ends), what="committed offsets at the log end")
    finally:
        stop_producing.set()
        for w in (w1, w2):
            w.stop()
    assert_exactly_once(delivered, ends)


def test_a_consumer_paused_past_its_session_timeout_is_fenced(env, tmp_path):
    """SIGSTOP a consumer process holding uncommitted records: the records go to the new owner,
    and the paused consumer's commit fails with CommitFailed once it runs again."""
    env.topic("t", partitions=2, per_partition=50)
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--worker",
            json.dumps(
                {
                    "rebalancer": env.rebalancer,
                    "zk": env.zk_connect,
                    "bootstrap": env.bootstrap,
                    "log": str(env.root),
                    "group": "gp",
                    "topic": "t",
                }
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        polled = json.loads(proc.stdout.readline())  # the worker polled a batch and waits to commit
        assert polled["records"], polled
        proc.send_signal(signal.SIGSTOP)
        delivered: list = []
        w = Worker(env.consumer("gp", ["t"], enable_auto_commit=False), delivered, "new-owner")
        w.start()
        try:
            wait_for(lambda: len(delivered) >= 100, timeout=60, what="the new owner reading everything")
        finally:
            w.stop()
        again = {(r[0], r[1]) for r in polled["records"]}
        assert again <= {(tp.topic + "-" + str(tp.partition), off) for tp, off, _ in delivered}
        proc.send_signal(signal.SIGCONT)
        proc.stdin.write("commit\n")
        proc.stdin.flush()
        result = json.loads(proc.stdout.readline())
        assert result == {"commit": "CommitFailed"}, result
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)


def worker_main(spec: dict) -> None:
    """The paused-consumer process: poll one batch, report it, commit when told to."""
    opts = consumer_options(
        spec["rebalancer"], spec["bootstrap"], max_poll_records=10, enable_auto_commit=False
    )
    c = Consumer(spec["group"], [spec["topic"]], zk=spec["zk"], log=Log(spec["log"]), **opts)
    got: dict = {}
    deadline = time.monotonic() + 30
    while not got and time.monotonic() < deadline:
        got = c.poll(timeout_ms=100)
    print(json.dumps({"records": [[str(tp), r.offset] for tp, rs in got.items() for r in rs]}), flush=True)
    sys.stdin.readline()
    try:
        c.commit()
        print(json.dumps({"commit": "ok"}), flush=True)
    except CommitFailed:
        print(json.dumps({"commit": "CommitFailed"}), flush=True)
    os._exit(0)


def test_rebalance_in_progress_until_the_group_settles_the_assignment(env):
    """What `consume --until-idle` relies on: a member not yet given its partitions is rebalancing,
    not idle; a second member's join unsettles the first until both hold theirs."""
    env.topic("t", partitions=2)
    c1 = env.consumer("gs", ["t"])
    if env.rebalancer != "zk":
        assert c1.rebalance_in_progress  # nothing joined before the first poll()

    def settled(*cs: Consumer, each: int) -> bool:
        polled(*cs)
        return all(not c.rebalance_in_progress and len(c.assignment()) == each for c in cs)

    wait_for(lambda: settled(c1, each=2), timeout=30, what="the first member settled on both partitions")
    c2 = env.consumer("gs", ["t"])
    wait_for(lambda: settled(c1, c2, each=1), timeout=30, what="both members settled on one partition each")
    manual = env.consumer("gs-manual", [])
    manual.assign([TP("t", 0)])
    assert not manual.rebalance_in_progress


def test_manual_assignment_commits_to_the_group_without_joining(env):
    env.topic("t", partitions=2, per_partition=10)
    c = env.consumer("gm", [])
    c.assign([TP("t", 0)])
    got: dict = {}
    wait_for(lambda: got.update(c.poll(100)) or got, what="records")
    assert [r.offset for r in got[TP("t", 0)]] == list(range(10))
    c.commit()
    assert c.committed(TP("t", 0)) == 10
    c.close()
    c2 = env.consumer("gm", [])
    c2.assign([TP("t", 0), TP("t", 1)])
    assert c2.position(TP("t", 0)) == 10  # resumes from the group's committed offset
    assert c2.position(TP("t", 1)) == 0


def test_position_seek_pause_resume_and_async_and_auto_commits(env):
    env.topic("t", partitions=2, per_partition=20)
    t0, t1 = TP("t", 0), TP("t", 1)
    c = env.consumer("ga", ["t"], max_poll_records=100, auto_commit_interval_ms=100)
    wait_for(lambda: polled(c) and c.assignment() == {t0, t1}, what="both partitions assigned")
    c.seek_to_beginning()  # the polls that completed the join may have returned records already

    def drain(timeout=3.0):
        out: dict = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = c.poll(200)
            if not got and out:
                break  # caught up with the log end
            for tp, rs in got.items():
                out.setdefault(tp, []).extend(r.offset for r in rs)
        return out

    c.pause(t1)
    got = drain()
    assert got == {t0: list(range(20))}  # nothing of the paused partition
    assert c.position(t0) == 20 and c.position(t1) == 0
    c.resume(t1)
    c.seek(t0, 15)
    got = drain()
    assert got[t0] == list(range(15, 20)) and got[t1] == list(range(20))
    done = threading.Event()
    results = []
    c.commit_async({t0: 5}, callback=lambda offsets, exc: (results.append((offsets, exc)), done.set()))
    assert done.wait(10) and results[0][1] is None
    assert c.committed(t0) == 5
    # auto-commit: poll() commits the positions every auto_commit_interval_ms
    wait_for(lambda: c.poll(50) is not None and c.committed([t0, t1]) == {t0: 20, t1: 20}, what="auto-commit")


# ---------------------------------------------------------------------------------------------
# scheme three only


def test_static_member_restarted_within_its_session_timeout_causes_no_rebalance(coordinator_env):
    env = coordinator_env
    env.topic("t", partitions=4)
    a = env.consumer("gs", ["t"], group_instance_id="a", session_timeout_ms=5000)
    b = env.consumer("gs", ["t"], group_instance_id="b", session_timeout_ms=5000)
    wait_for(
        lambda: (
            polled(a, b)
            and len(a.assignment()) == 2
            and len(b.assignment()) == 2
            and a.generation == b.generation
        ),
        what="two static members stable",
    )
    generation, a_parts, b_gens = a.generation, a.assignment(), list(b.generations)
    a.close()  # a static member sends no LeaveGroup
    a2 = env.consumer("gs", ["t"], group_instance_id="a", session_timeout_ms=5000)
    wait_for(lambda: polled(a2) and len(a2.assignment()) == 2, what="the restarted static member assigned")
    a2.poll(0)
    time.sleep(1.0)  # several heartbeats: no REBALANCE_IN_PROGRESS may reach b
    assert a2.assignment() == a_parts
    assert a2.generation == generation
    assert b.generation == generation and b.generations == b_gens  # b never rebalanced


def test_two_consumers_polled_alternately_from_one_thread_split_the_partitions_and_read_everything(
    coordinator_env,
):
    """A poll that must rejoin returns after its timeout (the JoinGroup stays in flight), so one
    thread can drive two members of one group: each poll lets the other's rebalance go on."""
    env = coordinator_env
    env.topic("t", partitions=4)
    a = env.consumer("g1", ["t"], max_poll_records=25, enable_auto_commit=False)
    b = env.consumer("g1", ["t"], max_poll_records=25, enable_auto_commit=False)
    delivered: list = []

    def poll_both() -> bool:
        for name, c in (("a", a), ("b", b)):
            got = c.poll(timeout_ms=50)
            for tp, batch in got.items():
                delivered.extend((tp, r.offset, name) for r in batch)
            if got:
                c.commit()
        return True

    wait_for(
        lambda: (
            poll_both()
            and len(a.assignment()) == 2
            and len(b.assignment()) == 2
            and a.generation == b.generation != -1
        ),
        what="a stable group of two, polled alternately from one thread",
    )
    generation, owners = a.generation, {"a": a.assignment(), "b": b.assignment()}
    assert owners["a"] | owners["b"] == {TP("t", p) for p in range(4)}
    for p in range(4):
        env.produce("t", p, 200)
    ends = env.end_offsets("t", 4)
    wait_for(lambda: poll_both() and committed_all(env, "g1", ends), what="everything read and committed")
    assert_exactly_once(delivered, ends)
    assert all(tp in owners[name] for tp, _, name in delivered)
    assert a.generation == b.generation == generation  # no rebalance while they consumed


def test_cooperative_sticky_moves_only_what_must_move(coordinator_env):
    env = coordinator_env
    env.topic("t", partitions=6, per_partition=0)
    delivered: list = []
    events: dict[str, list] = {"w0": [], "w1": [], "w2": []}

    class Listener:
        def __init__(self, name):
            self.name = name

        def on_partitions_revoked(self, tps):
            events[self.name].append(("revoked", frozenset(tps)))

        def on_partitions_assigned(self, tps):
            events[self.name].append(("assigned", frozenset(tps)))

    def coop(name):
        return env.consumer(
            "gc", ["t"], assignors=["cooperative-sticky"], listener=Listener(name), enable_auto_commit=False
        )

    stop_producing = threading.Event()

    def produce():
        while not stop_producing.is_set():
            for p in range(6):
                env.produce("t", p, 5)
            time.sleep(0.02)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    w0, w1 = Worker(coop("w0"), delivered, "w0"), Worker(coop("w1"), delivered, "w1")
    w0.start()
    w1.start()
    try:
        wait_for(
            lambda: len(w0.consumer.assignment()) == 3 and len(w1.consumer.assignment()) == 3,
            what="two cooperative members with three partitions each",
        )
        before = {"w0": w0.consumer.assignment(), "w1": w1.consumer.assignment()}
        for e in events.values():
            e.clear()
        joined_at = time.monotonic()
        w2 = Worker(coop("w2"), delivered, "w2")
        w2.start()
        wait_for(lambda: len(w2.consumer.assignment()) == 2, what="the new member gets its two partitions")
        w2_assigned_at = time.monotonic()
        time.sleep(0.5)
        settled_at = time.monotonic()
        stop_producing.set()
        after = {n: w.consumer.assignment() for n, w in (("w0", w0), ("w1", w1))}
        for name in ("w0", "w1"):
            kept = before[name] & after[name]
            moved = before[name] - after[name]
            assert len(after[name]) == 2 and len(moved) == 1
            revoked = set().union(*(tps for what, tps in events[name] if what == "revoked"))
            assert revoked == moved, (name, events[name])  # only the partition that moved
            # the kept partitions were assigned (hence fetched) in every poll of the rebalance
            worker = w0 if name == "w0" else w1
            during = [s for t, s in worker.snapshots if joined_at <= t <= settled_at]
            assert during and all(kept <= s for s in during)
            # ... and records of the kept partitions kept arriving while the group rebalanced
            # (the producer appends every 20 ms): between the join and the new member's assignment,
            # and after it, every kept partition was fetched.
            for tp in kept:
                times = [t for t, p in worker.fetched if p == tp]
                assert any(joined_at <= t <= w2_assigned_at for t in times), (name, tp, "not fetched")
                assert any(w2_assigned_at < t <= settled_at for t in times), (name, tp, "not fetched after")
    finally:
        stop_producing.set()
        for w in (w0, w1):
            w.stop()
        if "w2" in locals():
            w2.stop()
    # Every record committed exactly once. A commit racing the group's move to the next generation
    # (its JoinGroup answer not yet collected by a poll) fails and its records come again (retracted).
    counts = Counter((tp, off) for tp, off, _ in delivered)
    assert all(n == 1 for n in counts.values())


def test_no_coordinator_node_raises_coordinator_unavailable_saying_what_to_do(zk, zk_connect, tmp_path):
    from coordinator.member.connection import CoordinatorUnavailable

    env = Env("coordinator", zk, zk_connect, tmp_path, None)  # no coordinator node runs
    env.topic("t", partitions=1, per_partition=5)
    c = env.consumer("gu", ["t"], coordinator_timeout_ms=300)
    try:
        with pytest.raises(CoordinatorUnavailable) as raised:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                assert c.poll(100) == {}
        message = str(raised.value)
        chroot = zk_connect[zk_connect.index("/") :]
        assert "FindCoordinator" in message and "'gu'" in message and chroot in message
        assert "groupshift coordinator serve --zk" in message
    finally:
        env.close()


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "30000", 10**12])
def test_a_bad_coordinator_timeout_is_refused(zk_connect, tmp_path, bad):
    with pytest.raises(GroupshiftError, match="coordinator_timeout_ms"):
        Consumer(
            "g", [], rebalancer="coordinator", zk=zk_connect, log=Log(tmp_path), coordinator_timeout_ms=bad
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker", required=True)
    worker_main(json.loads(ap.parse_args().worker))
