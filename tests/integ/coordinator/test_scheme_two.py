"""Scheme two (the coordinator assigns): the core's answers, and real nodes and consumers.

The first tests drive `ServerAssignedCoordinator` directly (pure: requests, topic sizes and the time
in, outputs out). The others run coordinator node processes on real ZooKeeper with
`pipeline.Consumer(rebalancer="server")`; the consumer tests shared by every scheme are in
tests/integ/pipeline/test_consumer.py.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from coordinator.assignors.payloads import decode_assignment
from coordinator.group.messages import GroupSnapshot
from coordinator.node.process import CoordinatorNodes
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DESCRIBE_GROUPS,
    JOIN_GROUP,
    SERVER_HEARTBEAT,
    SERVER_JOIN_GROUP,
    DescribeGroupsRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    ServerHeartbeatRequest,
    ServerJoinGroupRequest,
)
from core.four_letter import four_letter
from core.types import TopicPartition as TP
from pipeline.consumer import Consumer
from tests.commit_loop import CommitLoop as Loop
from tests.unit.coordinator.incremental_core import Core as IncrementalCore
from topics.log import Log
from topics.registry import add_partitions, create_topic

# -- the core -----------------------------------------------------------------------------------


class Core(IncrementalCore):
    """The node's core (both forms of scheme two around the classic one) whose writes all succeed
    at once; answers kept by request."""

    def _run(self, outputs) -> None:
        self.run(outputs)

    def join(self, token: str, consumer_id: str = "", topics=("t",), strategy: str = "range"):
        body = ServerJoinGroupRequest(
            group_id="g",
            consumer_id=consumer_id,
            session_timeout_ms=10_000,
            topics=list(topics),
            strategy=strategy,
            owned=[],
        )
        return self.send(SERVER_JOIN_GROUP, body, token)

    def beat(self, token: str, generation: int, consumer_id: str):
        body = ServerHeartbeatRequest(group_id="g", generation_id=generation, consumer_id=consumer_id)
        return self.send(SERVER_HEARTBEAT, body, token)

    def hb(self, token: str, member_id: str = "", epoch: int = 0, owned=None, topics=("t",), assignor=None):
        """A ConsumerGroupHeartbeat (epoch 0 joins with `topics`; `owned` None: unchanged)."""
        return self.heartbeat(member_id, epoch, owned, topics, assignor=assignor, token=token)


def partitions(answer) -> list[TP]:
    return [TP(t.topic, p) for t in answer.assignment for p in t.partitions]


def test_one_answer_carries_the_consumer_id_the_generation_and_the_partitions():
    c = Core()
    assert c.join("a1") is None  # parked: the coordinator needs the topic's size first
    assert c.watched == ["t"]
    c.sizes(t=4)
    a = c.answers["a1"]
    assert a.error_code == 0 and a.generation_id == 1 and a.consumer_id and a.strategy == "range"
    assert partitions(a) == [TP("t", p) for p in range(4)]
    # A second member: the first learns of the rebalance from its heartbeat (the draft's
    # ILLEGAL_GENERATION), rejoins with its id, and both get their share in one answer each.
    assert c.join("b1") is None
    assert c.beat("hb", 1, a.consumer_id).error_code == E.ILLEGAL_GENERATION
    c.join("a2", consumer_id=a.consumer_id)
    a2, b = c.answers["a2"], c.answers["b1"]
    assert a2.consumer_id == a.consumer_id and a2.generation_id == b.generation_id == 2
    assert sorted(partitions(a2) + partitions(b)) == [TP("t", p) for p in range(4)]
    assert len(partitions(a2)) == len(partitions(b)) == 2
    assert c.beat("hb", 2, b.consumer_id).error_code == 0
    assert c.watched == ["t"]  # one watch per topic, whatever the number of members
    described = c.send(DESCRIBE_GROUPS, DescribeGroupsRequest(groups=["g"]), "d").groups[0]
    assert (described.group_state, described.protocol_type) == ("Steady", "consumer-server")
    assert {m.member_id for m in described.members} == {a.consumer_id, b.consumer_id}
    assigned = {m.member_id: decode_assignment(m.member_assignment).partitions for m in described.members}
    assert sorted(assigned[b.consumer_id]) == partitions(b)


def test_strategies_consumer_ids_and_classic_clients_are_checked():
    c = Core()
    c.sizes(t=2)
    assert c.join("x", strategy="cooperative-sticky").error_code == E.UNKNOWN_PARTITIONING_STRATEGY
    a = c.join("a")
    assert a.error_code == 0
    # A member naming another strategy than the group's: InconsistentPartitioningStrategy.
    c.beat("hb", a.generation_id, a.consumer_id)
    assert c.join("r", strategy="roundrobin").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # An id the coordinator never gave: UnknownConsumer, for joins and heartbeats alike.
    assert c.join("u", consumer_id="g-nobody").error_code == E.UNKNOWN_MEMBER_ID
    assert c.beat("hb", a.generation_id, "g-nobody").error_code == E.UNKNOWN_MEMBER_ID
    # A scheme-three client cannot join (and so lead) a server-assigned group.
    classic = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupProtocol(name="range", metadata=b"")],
    )
    assert c.send(JOIN_GROUP, classic, "classic").error_code == E.INCONSISTENT_GROUP_PROTOCOL


def test_a_grown_topic_rebalances_and_old_generations_cannot_commit():
    c = Core()
    c.sizes(t=2)
    a = c.join("a")
    assert len(partitions(a)) == 2
    c.sizes(t=5)  # what the node's watch on /brokers/topics/t reports
    assert c.beat("hb", a.generation_id, a.consumer_id).error_code == E.ILLEGAL_GENERATION
    # The draft's "offset commit during rebalance": the current generation still commits...
    assert commit(c, a.generation_id, a.consumer_id) == E.NONE
    a2 = c.join("a2", consumer_id=a.consumer_id)
    assert a2.generation_id == a.generation_id + 1 and len(partitions(a2)) == 5
    # ...and once the next generation started, the old one is refused.
    assert commit(c, a.generation_id, a.consumer_id) == E.ILLEGAL_GENERATION
    assert commit(c, a2.generation_id, a.consumer_id) == E.NONE
    c.sizes(t=5)  # the same size again: nothing happens
    assert c.beat("hb", a2.generation_id, a.consumer_id).error_code == E.NONE


def commit(c: Core, generation: int, consumer_id: str) -> int:
    return c.commit(consumer_id, generation)


# -- real nodes and consumers ---------------------------------------------------------------------

SESSION_MS = 1500


def server_consumer(zk_connect, nodes, log, group="g2", incremental=False, **kw) -> Consumer:
    return Consumer(
        group,
        ["t"],
        rebalancer="server",
        incremental=incremental,
        zk=zk_connect,
        bootstrap=nodes.bootstrap,
        log=log,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=100,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        membership_options={"retry_backoff_ms": 50},
        **kw,
    )


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def watchers(zk_server, chroot: str) -> dict[str, set[str]]:
    """ZooKeeper's `wchc`: session id -> the paths under `chroot` it watches."""
    host, port = zk_server.connect_string.split(":")
    out: dict[str, set[str]] = {}
    session = None
    for line in four_letter(host, int(port), "wchc", timeout=5.0).splitlines():
        if line.startswith("0x"):
            session = line.strip()
        elif line.strip().startswith(chroot + "/") and session:
            out.setdefault(session, set()).add(line.strip()[len(chroot) :])
    return out


@pytest.mark.parametrize("incremental", [False, True], ids=["draft", "incremental"])
def test_only_the_coordinator_watches_zookeeper_and_a_grown_topic_reaches_the_members(
    zk_server, zk, zk_connect, tmp_path, incremental
):
    chroot = "/" + zk_connect.split("/", 1)[1]
    create_topic(zk, "t", partitions=4)
    log = Log(tmp_path)
    log.create("t", 4)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        consumers = [server_consumer(zk_connect, nodes, log, incremental=incremental) for _ in range(3)]
        try:
            wait_for(
                lambda: (
                    [c.poll(0) for c in consumers]
                    and sorted(tp for c in consumers for tp in c.assignment())
                    == [TP("t", p) for p in range(4)]
                ),
                30,
                "three members sharing four partitions",
            )
            by_session = watchers(zk_server, chroot)
            # One session — the coordinator node's — watches the topic; no member has a session.
            topic_watchers = [s for s, paths in by_session.items() if "/brokers/topics/t" in paths]
            assert len(topic_watchers) == 1, by_session
            assert list(by_session) == topic_watchers, by_session
            assert all(c._zk_owned is None for c in consumers)
            add_partitions(zk, "t", 7)
            log.add_partitions("t", 7)
            wait_for(
                lambda: (
                    [c.poll(0) for c in consumers]
                    and sorted(tp for c in consumers for tp in c.assignment())
                    == [TP("t", p) for p in range(7)]
                ),
                30,
                "the members to get the three new partitions",
            )
        finally:
            for c in consumers:
                c.close()


@pytest.mark.parametrize("incremental", [False, True], ids=["draft", "incremental"])
def test_a_coordinator_node_killed_mid_rebalance_the_group_recovers_on_another(
    zk, zk_connect, tmp_path, incremental
):
    create_topic(zk, "t", partitions=6)
    log = Log(tmp_path)
    log.create("t", 6)
    for p in range(6):
        log.produce("t", [(b"k", b"v")] * 200, partition=p)
    with CoordinatorNodes(zk_connect, count=2) as nodes:
        delivered: list = []
        loops = [
            Loop(
                server_consumer(zk_connect, nodes, log, incremental=incremental, max_poll_records=20),
                delivered,
                f"m{i}",
            )
            for i in range(2)
        ]
        for lp in loops:
            lp.start()
        try:
            wait_for(lambda: len(delivered) > 200, 30, "two members consuming")
            with nodes.nodes[1].client() as wc:
                found = wc.request(P.FIND_COORDINATOR, {"key": "g2", "key_type": 0})
            coordinator = found["node_id"]
            joiner = Loop(
                server_consumer(zk_connect, nodes, log, incremental=incremental, max_poll_records=20),
                delivered,
                "m2",
            )
            joiner.start()  # its ServerJoinGroup starts a rebalance...
            loops.append(joiner)
            wait_for(lambda: joiner.consumer._membership is not None, 10, "the joiner to start")
            time.sleep(0.05)
            nodes.kill(coordinator)  # ...and the coordinator dies in the middle of it
            wait_for(lambda: len(delivered) >= 1200, 90, "every record consumed after the failover")
            wait_for(
                lambda: (
                    sorted(tp for lp in loops for tp in lp.consumer.assignment())
                    == [TP("t", p) for p in range(6)]
                    and all(lp.consumer.assignment() for lp in loops)
                ),
                60,
                "three members sharing the six partitions on the surviving node",
            )
        finally:
            for lp in loops:
                lp.stop()
    counts = Counter(delivered)
    assert not [k for k, n in counts.items() if n > 1], "a record committed twice"
    assert set(counts) == {(TP("t", p), o) for p in range(6) for o in range(200)}


@pytest.mark.parametrize(
    "strategy, incremental", [("roundrobin", False), ("sticky", False), ("range", True), ("uniform", True)]
)
def test_every_server_strategy_serves_a_group(zk, zk_connect, tmp_path, strategy, incremental):
    create_topic(zk, "t", partitions=5)
    log = Log(tmp_path)
    log.create("t", 5)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        consumers = [
            server_consumer(zk_connect, nodes, log, assignors=[strategy], incremental=incremental)
            for _ in range(2)
        ]
        try:
            wait_for(
                lambda: (
                    [c.poll(0) for c in consumers]
                    and sorted(tp for c in consumers for tp in c.assignment())
                    == [TP("t", p) for p in range(5)]
                    and all(c.assignment() for c in consumers)
                ),
                30,
                f"two members sharing five partitions by {strategy}",
            )
        finally:
            for c in consumers:
                c.close()


def test_members_starting_at_once_rejoin_under_the_ids_the_coordinator_gave_them(zk, zk_connect):
    """The coordinator answers a first ServerJoinGroup caught by another member's join with
    REBALANCE_IN_PROGRESS and the consumer id it admitted; a member that rejoined without that id
    would be a stranger, and the group would wait out the admitted one's session (90 s here)."""
    from coordinator.member.consumer_member import CoordinatorMember
    from coordinator.member.state import MemberState

    create_topic(zk, "t", partitions=8)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        members = [
            CoordinatorMember(
                "g-at-once",
                ["t"],
                bootstrap=nodes.bootstrap,
                server_assigned=True,
                session_timeout_ms=90_000,
                heartbeat_interval_ms=100,
                retry_backoff_ms=20,
            )
            for _ in range(4)
        ]
        try:
            for m in members:
                m.start()
            wait_for(
                lambda: (
                    all(m.state == MemberState.STABLE for m in members)
                    and len({m.generation for m in members}) == 1
                    and sorted(tp for m in members for tp in m.assignment()) == [TP("t", p) for p in range(8)]
                ),
                60,  # well inside the 90 s session a stranger's rejoin would make the group wait out
                "four members started at once forming one generation",
            )
        finally:
            for m in members:
                m.close()


# -- the incremental form: the core -------------------------------------------------------------


def test_a_join_moves_only_what_must_move_and_a_partition_only_once_released():
    c = Core()
    c.sizes(t=6)
    a = c.hb("a")
    assert (a.error_code, a.member_epoch, len(partitions(a))) == (0, 1, 6)
    a_owned = set(partitions(a))
    b = c.hb("b")  # one round trip: B is in the group at the new epoch, with what is free (nothing yet)
    assert b.error_code == 0 and b.member_epoch == 2 and partitions(b) == []
    # A's next heartbeat: keep 3, give up 3 (still at its old epoch until it has let them go).
    a2 = c.hb("a2", a.member_id, a.member_epoch, owned=a_owned)
    kept = set(partitions(a2))
    assert len(kept) == 3 and kept < a_owned and a2.member_epoch == 1
    # B asks again before A let go: nothing moves to it yet — never two owners.
    assert partitions(c.hb("b2", b.member_id, b.member_epoch, owned=set())) == []
    # A commits at its epoch, then heartbeats without the revoked partitions: now at epoch 2.
    assert commit_epoch(c, a.member_id, a.member_epoch) == E.NONE
    a3 = c.hb("a3", a.member_id, a.member_epoch, owned=kept)
    assert a3.member_epoch == 2 and set(partitions(a3)) == kept
    b3 = c.hb("b3", b.member_id, b.member_epoch, owned=set())
    assert set(partitions(b3)) == a_owned - kept  # exactly the three that had to move
    described = c.send(DESCRIBE_GROUPS, DescribeGroupsRequest(groups=["g"]), "d").groups[0]
    assert (described.group_state, described.protocol_type) == ("Stable", "consumer-incremental")
    # Commits are fenced by member epoch.
    assert commit_epoch(c, a.member_id, 1) == E.STALE_MEMBER_EPOCH
    assert commit_epoch(c, a.member_id, 2) == E.NONE
    assert commit_epoch(c, "g-nobody", 2) == E.UNKNOWN_MEMBER_ID


def test_incremental_errors_and_a_member_that_stops_heartbeating():
    c = Core()
    c.sizes(t=4)
    assert c.hb("x", assignor="cooperative-sticky").error_code == E.UNSUPPORTED_ASSIGNOR
    a = c.hb("a")
    assert c.hb("z", a.member_id, a.member_epoch + 5).error_code == E.FENCED_MEMBER_EPOCH
    assert c.hb("u", "g-nobody", 3).error_code == E.UNKNOWN_MEMBER_ID
    # A classic JoinGroup without a consumer subscription cannot join it (classic members with one
    # can: test_incremental_upgrade.py), and its members cannot use the draft's join either.
    classic = JoinGroupRequest(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupProtocol(name="range", metadata=b"")],
    )
    assert c.send(JOIN_GROUP, classic, "classic").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert c.join("draft").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    b = c.hb("b")
    c.hb("a2", a.member_id, a.member_epoch, owned=set(partitions(a)))  # A revokes two
    # A stops heartbeating: after its session timeout it is removed and B gets everything, even
    # the partitions A never released (A is gone: it cannot fetch them any more).
    c.now += 600
    assert c.hb("tick", b.member_id, b.member_epoch, owned=set()).error_code == 0  # B is alive
    c.now += 600  # A's session (1 s) is over
    b2 = c.hb("b2", b.member_id, b.member_epoch, owned=set())
    b3 = c.hb("b3", b.member_id, b2.member_epoch, owned=set(partitions(b2)))
    assert set(partitions(b3)) == {TP("t", p) for p in range(4)}
    assert c.hb("late", a.member_id, a.member_epoch).error_code == E.UNKNOWN_MEMBER_ID


def commit_epoch(c: Core, member_id: str, epoch: int) -> int:
    return commit(c, epoch, member_id)


def test_incremental_join_moves_one_partition_and_the_others_never_pause(zk, zk_connect, tmp_path):
    """Three members on six partitions, a fourth joins while records flow: one partition moves
    (uniform is sticky), and the members that keep theirs go on fetching without a pause."""
    create_topic(zk, "t", partitions=6)
    log = Log(tmp_path)
    log.create("t", 6)
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            for p in range(6):
                log.produce("t", [(b"k", b"v")] * 2, partition=p)
            time.sleep(0.01)

    producer = threading.Thread(target=produce, daemon=True)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        delivered: list = []
        loops = [
            Loop(
                server_consumer(zk_connect, nodes, log, incremental=True, max_poll_records=50),
                delivered,
                f"m{i}",
            )
            for i in range(3)
        ]
        for lp in loops:
            lp.start()
        producer.start()
        try:
            wait_for(lambda: all(len(lp.consumer.assignment()) == 2 for lp in loops), 30, "2 partitions each")
            time.sleep(0.5)
            before = {lp.name: frozenset(lp.consumer.assignment()) for lp in loops}
            joined_at = time.monotonic()
            joiner = Loop(server_consumer(zk_connect, nodes, log, incremental=True), delivered, "m3")
            joiner.start()
            loops.append(joiner)
            wait_for(lambda: joiner.consumer.assignment(), 30, "the joiner to get a partition")
            time.sleep(1.0)
            after = {lp.name: frozenset(lp.consumer.assignment()) for lp in loops}
        finally:
            stop.set()
            producer.join()
            for lp in loops:
                lp.stop()
    moved = [n for n in before if after[n] != before[n]]
    assert len(moved) == 1 and len(after["m3"]) == 1, (before, after)
    assert after["m3"] < before[moved[0]]  # the partition came from the one member that gave it up
    for lp in loops[:3]:
        if lp.name in moved:
            continue
        times = [t for t in lp.fetched_at if t >= joined_at - 0.5]
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert gaps and max(gaps) < 0.5, f"{lp.name} paused {max(gaps):.2f}s during the join"
    counts = Counter(delivered)
    assert not [k for k, n in counts.items() if n > 1], "a record committed twice"


def test_another_node_takes_an_incremental_group_over_from_its_record():
    c = Core()
    c.sizes(t=4)
    a = c.hb("a")
    b = c.hb("b")
    a2 = c.hb("a2", a.member_id, a.member_epoch, owned=set(partitions(a)))
    a3 = c.hb("a3", a.member_id, a2.member_epoch, owned=set(partitions(a2)))  # released: epoch 2
    b2 = c.hb("b2", b.member_id, b.member_epoch, owned=set())
    assert a3.member_epoch == b2.member_epoch == 2 and len(partitions(b2)) == 2
    # The node dies; another loads the group from what was written and carries on: same epochs,
    # same partitions, nothing moves.
    other = Core()
    other._run(other.core.load_group(GroupSnapshot("g", c.records["g"], []), other.now))
    other.sizes(t=4)
    a4 = other.hb("a4", a.member_id, a3.member_epoch, owned=set(partitions(a3)))
    b3 = other.hb("b3", b.member_id, b2.member_epoch, owned=set(partitions(b2)))
    assert (a4.error_code, b3.error_code) == (0, 0)
    assert set(partitions(a4)) == set(partitions(a3)) and set(partitions(b3)) == set(partitions(b2))
    assert commit(other, b3.member_epoch, b.member_id) == E.NONE
    # A zombie's epoch from beyond what the group knows is fenced.
    assert other.hb("z", a.member_id, 99, owned=set()).error_code == E.FENCED_MEMBER_EPOCH


def test_the_native_listener_describes_consumer_protocol_groups(zk, zk_connect):
    """ConsumerGroupDescribe (69) on the native wire: an incremental group with its epochs and
    assignments, and GROUP_ID_NOT_FOUND for any other group id."""
    create_topic(zk, "t", partitions=3)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        node = next(iter(nodes.nodes.values()))
        with node.client() as c:
            beat = {
                "group_id": "g69",
                "member_id": "",
                "member_epoch": 0,
                "session_timeout_ms": 10_000,
                "rebalance_timeout_ms": 10_000,
                "subscribed_topic_names": ["t"],
                "server_assignor": "range",
                "topic_partitions": None,
            }
            answer = c.request(CONSUMER_GROUP_HEARTBEAT, beat)
            beat.update(member_id=answer["member_id"], subscribed_topic_names=None, server_assignor=None)

            def assigned() -> bool:
                nonlocal answer
                beat["member_epoch"] = answer["member_epoch"]
                answer = c.request(CONSUMER_GROUP_HEARTBEAT, beat)
                return answer["error_code"] == 0 and bool(answer["assignment"])

            wait_for(assigned, 30, "the member to get t's partitions")
            described = c.request(CONSUMER_GROUP_DESCRIBE, {"group_ids": ["g69", "nobody"]})["groups"]
        g, nobody = described
        assert (g["error_code"], g["group_state"], g["assignor_name"]) == (0, "Stable", "range")
        assert g["group_epoch"] == g["assignment_epoch"] == answer["member_epoch"]
        (m,) = g["members"]
        assert (m["member_id"], m["member_epoch"], m["subscribed_topic_names"]) == (
            answer["member_id"],
            answer["member_epoch"],
            ["t"],
        )
        assert m["assignment"] == m["target_assignment"] == [{"topic": "t", "partitions": [0, 1, 2]}]
        assert (nobody["error_code"], nobody["group_state"], nobody["members"]) == (
            E.GROUP_ID_NOT_FOUND,
            "Dead",
            [],
        )
        assert "background task failed" not in "\n".join(node.output)  # the node's topic watches
