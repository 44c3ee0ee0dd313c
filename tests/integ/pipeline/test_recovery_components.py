"""Every long-lived component under a ZooKeeper outage, on a ZooKeeper container of this module's own.

One scenario runs, on one chroot: a coordinator node process, a bare scheme-one member
(`ZkGroupMember`), and pairs of `pipeline.Consumer`s with `rebalancer="zk"`, `"server"` (scheme
two, and its incremental form) and `"coordinator"`, each pair a group reading a topic that a
producer thread keeps writing to. Then ZooKeeper goes away, in one of three ways:

* `short`: the container is stopped and started again within the session timeout. Sessions
  survive; nothing is lost; scheme three does not rebalance (same generation).
* `long`: stopped for longer than the session timeout, then started. The restarted server
  revives the sessions (ZooKeeper restores them from its log), but every client was suspended for
  longer than its session timeout: the node must have given its shards up and take them again.
* `expiry`: stopped, started, and the clients kept away until the server has expired every
  session. Every component must notice, open a new session and come back by itself.

After `long` and `expiry` every component must be back within session timeout + 10 s of
ZooKeeper's return, and each group must consume on from its committed offsets, skipping nothing.
Stopping the container would disturb other tests, hence the module-scoped server.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import defaultdict

import pytest

from coordinator.member.wire_client import WireClient, WireError, join_body
from coordinator.node.process import CoordinatorNodes
from coordinator.wire import codec as P
from core.errors import GroupshiftError
from core.types import TopicPartition as TP
from core.zk import connect
from pipeline.consumer import Consumer
from testing.zookeeper import ZkServer
from topics.log import Log
from topics.registry import create_topic
from zk_rebalance.member import ZkGroupMember

pytestmark = pytest.mark.faults  # a ZooKeeper container of its own, stopped, cut off and expired

SESSION_MS = 4000  # ZooKeeper sessions of every component (`long`, `expiry`)
SHORT_SESSION_MS = 10_000  # `short`: the stop/start (about 3 s) stays well inside it
PARTITIONS = 4
COORDINATED = ("server", "incremental", "coordinator")  # the groups with one generation for all members
UNAVAILABLE = {
    P.ErrorCode.COORDINATOR_NOT_AVAILABLE,
    P.ErrorCode.NOT_COORDINATOR,
    P.ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
}


@pytest.fixture(scope="module")
def own_zk():
    server = ZkServer.start_single()
    yield server
    server.remove()


@pytest.fixture
def own_zk_running(own_zk):
    yield own_zk
    own_zk.wrapped.reload()
    if own_zk.wrapped.status != "running":
        own_zk.start()
    try:
        own_zk.restore_clients()
    except Exception:  # noqa: BLE001 - no rule to remove
        pass
    own_zk.wait_until(own_zk.ruok, 60, "ZooKeeper back for the next test")


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


class Worker(threading.Thread):
    """poll, record (when, partition, offset), commit; commit errors during the outage are counted."""

    def __init__(self, consumer: Consumer, name: str):
        super().__init__(daemon=True, name=name)
        self.consumer = consumer
        self.delivered: list[tuple[float, TP, int]] = []
        self.commit_errors = 0
        self.stop_event = threading.Event()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                got = self.consumer.poll(timeout_ms=50)
                now = time.monotonic()
                for tp, records in got.items():
                    self.delivered.extend((now, tp, r.offset) for r in records)
                if got:
                    try:
                        self.consumer.commit()
                    except GroupshiftError:  # CommitFailed, coordinator unavailable
                        self.commit_errors += 1
            self.consumer.close()
        except BaseException as exc:  # surfaced by stop()
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error


class Scenario:
    """The components of one test on a fresh chroot of the module's ZooKeeper."""

    def __init__(self, server: ZkServer, tmp_path, session_ms: int):
        self.server = server
        self.session_ms = session_ms
        self.connect = f"{server.connect_string}/rec-{uuid.uuid4().hex[:8]}"
        self.log = Log(tmp_path / "log")
        self.admin = connect(self.connect, session_timeout=30.0)
        create_topic(self.admin, "t", partitions=PARTITIONS)
        self.log.create("t", PARTITIONS)
        self.tps = [TP("t", p) for p in range(PARTITIONS)]
        self.nodes = CoordinatorNodes(
            self.connect, count=1, zk_session_timeout_ms=session_ms, claim_grace_ms=300
        ).start()
        self.member = ZkGroupMember(
            self.connect,
            "bare",
            ["t"],
            consumer_id="bare",
            session_timeout_ms=session_ms,
            rebalance_backoff_ms=200,
            rebalance_max_retries=50,
            auto_commit=False,
            event_log=str(tmp_path / "bare.jsonl"),
        ).start()
        # The coordinator consumers' own ZooKeeper client (bootstrap, partition counts) gets the
        # same session timeout, so that in `expiry` it expires as well.
        self.co_zk = connect(self.connect, session_timeout=session_ms / 1000)
        self.workers: dict[str, list[Worker]] = {"zk": [], "server": [], "incremental": [], "coordinator": []}
        groups = (("zk", "g-zk"), ("server", "g-sv"), ("incremental", "g-inc"), ("coordinator", "g-co"))
        for rebalancer, group in groups:
            for i in range(2):
                c = Consumer(group, ["t"], log=self.log, **self._options(rebalancer))
                self.workers[rebalancer].append(Worker(c, f"{rebalancer}-{i}"))
        self.stop_producing = threading.Event()
        self.producer = threading.Thread(target=self._produce, daemon=True)

    def _options(self, rebalancer: str) -> dict:
        opts = dict(
            rebalancer="server" if rebalancer == "incremental" else rebalancer,
            incremental=rebalancer == "incremental",
            max_poll_records=50,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        if rebalancer == "zk":
            opts.update(
                zk=self.connect,
                session_timeout_ms=self.session_ms,
                membership_options={
                    "rebalance_backoff_ms": 200,
                    "rebalance_max_retries": 50,
                    "fence_commits": True,
                },
            )
        else:
            opts.update(
                zk=self.co_zk,
                bootstrap=self.nodes.bootstrap,
                session_timeout_ms=10_000,
                heartbeat_interval_ms=300,
                membership_options={"retry_backoff_ms": 100},
            )
        return opts

    def _produce(self) -> None:
        while not self.stop_producing.is_set():
            for p in range(PARTITIONS):
                self.log.produce("t", [(b"k", b"v")] * 5, partition=p)
            time.sleep(0.1)

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        self.producer.start()
        for ws in self.workers.values():
            for w in ws:
                w.start()
        wait_for(self.member_ok, 30, "the bare scheme-one member owning every partition")
        for rebalancer in self.workers:
            wait_for(lambda r=rebalancer: self.consuming(r, 0.0), 30, f"the {rebalancer} group consuming")
        wait_for(self.node_serves, 30, "the node serving")

    def close(self) -> None:
        self.stop_producing.set()
        for ws in self.workers.values():
            for w in ws:
                if w.is_alive():
                    w.stop_event.set()
        for ws in self.workers.values():
            for w in ws:
                w.join(30)
        self.member.close()
        self.nodes.close()
        for client in (self.co_zk, self.admin):
            client.stop()
            client.close()

    # -- probes -------------------------------------------------------------------------------

    def member_ok(self) -> bool:
        return self.member.is_stable() and self.member.assignment() == set(self.tps)

    def consuming(self, rebalancer: str, since: float) -> bool:
        """Every partition delivered a record to the group after `since`."""
        seen = {tp for w in self.workers[rebalancer] for t, tp, _ in list(w.delivered) if t > since}
        return seen == set(self.tps)

    def node_serves(self) -> bool:
        """FindCoordinator names the node and a JoinGroup is served (MEMBER_ID_REQUIRED)."""
        node = self.nodes.nodes[1]
        try:
            with WireClient(node.host, node.port, "probe", timeout=2.0) as c:
                found = c.request(P.FIND_COORDINATOR, {"key": "g-co", "key_type": 0})
                joined = c.request(P.JOIN_GROUP, join_body(f"probe-{uuid.uuid4().hex[:6]}", ""))
        except (WireError, OSError):
            return False
        return (
            found["error_code"] == 0
            and found["port"] == node.port
            and joined["error_code"] == P.ErrorCode.MEMBER_ID_REQUIRED
        )

    def committed(self, rebalancer: str) -> dict[TP, int | None]:
        for w in self.workers[rebalancer]:
            if w.is_alive():
                try:
                    return w.consumer.committed(self.tps)
                except GroupshiftError:
                    return {}
        return {}

    def generations(self) -> list[int]:
        return [w.consumer.generation for r in COORDINATED for w in self.workers[r]]

    def settled(self) -> bool:
        """Each coordinator group's members on one generation, owning every partition once between them
        (an incremental group still reconciling a join is not settled)."""
        for r in COORDINATED:
            ws = self.workers[r]
            owned = [w.consumer.assignment() for w in ws]
            if len({w.consumer.generation for w in ws}) != 1 or not all(owned):
                return False
            if sum(map(len, owned)) != len(self.tps) or set().union(*owned) != set(self.tps):
                return False
        return True

    def node_log(self) -> str:
        return "\n".join(self.nodes.nodes[1].output)

    # -- the fault ----------------------------------------------------------------------------

    def outage(self, kind: str) -> float:
        """Take ZooKeeper away (see the module docstring); returns when it came back (monotonic)."""
        server = self.server
        server.stop()
        if kind == "short":
            time.sleep(1.0)
            server.start()
        elif kind == "long":
            time.sleep(self.session_ms / 1000 + 2)
            server.start()
        else:
            time.sleep(self.session_ms / 1000 + 2)
            server.start()
            server.cut_clients()  # before it listens: the restarted server expires every session
            server.wait_until(server.ruok, 30, "ZooKeeper restarted")
            time.sleep(self.session_ms / 1000 + 2)
            server.restore_clients()
            return time.monotonic()
        back = time.monotonic()
        server.wait_until(server.ruok, 30, "ZooKeeper restarted")
        return back

    def finish(self) -> None:
        """Stop producing, let both groups commit the log end, stop the consumers."""
        self.stop_producing.set()
        self.producer.join()
        ends = {tp: self.log.latest(tp) for tp in self.tps}
        for rebalancer in self.workers:
            wait_for(
                lambda r=rebalancer: self.committed(r) == ends,
                60,
                f"the {rebalancer} group committing the end",
            )
        for ws in self.workers.values():
            for w in ws:
                w.stop()
        self.ends = ends

    def check_nothing_skipped(self, rebalancer: str, committed_before: dict[TP, int | None]) -> None:
        """Every record delivered; a record delivered twice only from the committed offset on."""
        counts: dict[tuple[TP, int], int] = defaultdict(int)
        for w in self.workers[rebalancer]:
            for _, tp, off in w.delivered:
                counts[(tp, off)] += 1
        missing = [(tp, o) for tp, end in self.ends.items() for o in range(end) if (tp, o) not in counts]
        assert not missing, f"{rebalancer}: {len(missing)} records skipped, e.g. {missing[:5]}"
        early = [(tp, o) for (tp, o), n in counts.items() if n > 1 and o < (committed_before.get(tp) or 0)]
        assert not early, f"{rebalancer}: redelivered below the committed offset: {sorted(early)[:5]}"


@pytest.mark.parametrize("kind", ["short", "long", "expiry"])
def test_every_component_comes_back_by_itself(own_zk_running, tmp_path, kind):
    session_ms = SHORT_SESSION_MS if kind == "short" else SESSION_MS
    sc = Scenario(own_zk_running, tmp_path, session_ms)
    try:
        sc.start()
        wait_for(sc.settled, 30, "every coordinator group settled on one generation")
        generations = sc.generations()
        committed_before = {r: sc.committed(r) for r in sc.workers}
        back = sc.outage(kind)
        limit = session_ms / 1000 + 10
        wait_for(sc.node_serves, limit, "the node serving FindCoordinator and JoinGroup again")
        wait_for(sc.member_ok, limit, "the bare scheme-one member owning every partition again")
        for rebalancer in sc.workers:
            wait_for(
                lambda r=rebalancer: sc.consuming(r, back), limit, f"the {rebalancer} group consuming again"
            )
        # Read before finish() stops the consumers one by one: the first to leave its group makes
        # the other rebalance, which would read as a rebalance during the outage.
        after_outage = sc.generations()
        sc.finish()
        for rebalancer in sc.workers:
            sc.check_nothing_skipped(rebalancer, committed_before[rebalancer])
        events = sc.member.events.counters
        log = sc.node_log()
        if kind == "short":
            assert after_outage == generations, (
                "a coordinator group rebalanced during a short outage; the node's log ends:\n" + log[-4000:]
            )
            assert events["session_expired"] == 0
            assert "giving up" not in log
        elif kind == "long":
            assert events["session_expired"] == 0  # the restarted server revived the sessions
            assert "ZooKeeper was away longer than the session timeout" in log or "suspended longer" in log
        else:
            assert events["session_expired"] >= 1
            assert "ZooKeeper session LOST" in log
    finally:
        sc.close()
