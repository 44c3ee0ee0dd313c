"""The coordinator client against real coordinator node processes on real ZooKeeper."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator.member.consumer_member import CoordinatorMember
from coordinator.member.state import MemberState
from coordinator.node.process import CoordinatorNodes
from core.errors import CommitFailed
from core.types import OffsetAndMetadata
from core.types import TopicPartition as TP
from topics.registry import create_topic

FAST = dict(
    session_timeout_ms=1500, heartbeat_interval_ms=100, retry_backoff_ms=50, request_timeout_ms=10_000
)


@pytest.fixture
def nodes(zk_connect):
    with CoordinatorNodes(zk_connect, count=1) as n:
        yield n


class Recorder:
    """A listener that records every callback in order."""

    def __init__(self):
        self.events: list[tuple[str, frozenset]] = []
        self.lock = threading.Lock()

    def _add(self, what, tps):
        with self.lock:
            self.events.append((what, frozenset(tps)))

    def on_partitions_revoked(self, tps):
        self._add("revoked", tps)

    def on_partitions_assigned(self, tps):
        self._add("assigned", tps)

    def on_partitions_lost(self, tps):
        self._add("lost", tps)


def member(zk, nodes, group="g", topics=("t",), **kw):
    opts = {**FAST, **kw}
    return CoordinatorMember(group, list(topics), zk=zk, bootstrap=nodes.bootstrap, **opts)


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def all_stable(members, n_partitions):
    owned = [m.assignment() for m in members]
    gens = {m.generation for m in members}
    union = set().union(*owned)
    return (
        len(gens) == 1
        and -1 not in gens
        and sum(len(o) for o in owned) == n_partitions
        and len(union) == n_partitions
    )


def test_three_members_split_the_partitions_and_commit(zk, nodes):
    create_topic(zk, "t", partitions=6)
    members = [member(zk, nodes) for _ in range(3)]
    for m in members:
        m.start()
    try:
        wait_for(lambda: all_stable(members, 6), what="a stable group of three")
        assert all(len(m.assignment()) == 2 for m in members)
        m0 = members[0]
        tp = next(iter(m0.assignment()))
        m0.commit({tp: OffsetAndMetadata(42, "x")}, m0.generation)
        assert members[1].committed([tp]) == {tp: 42}
        with pytest.raises(CommitFailed):
            m0.commit({tp: 43}, m0.generation - 1)
    finally:
        for m in members:
            m.close()


def test_listener_order_eager(zk, nodes):
    create_topic(zk, "t", partitions=4)
    rec = Recorder()
    a = member(zk, nodes, listener=rec)
    a.start()
    wait_for(lambda: len(a.assignment()) == 4, what="a owns everything")
    b = member(zk, nodes)
    b.start()
    try:
        wait_for(lambda: all_stable([a, b], 4), what="two members")
        names = [e[0] for e in rec.events]
        assert names == ["assigned", "revoked", "assigned"], (rec.events, a.stats, b.stats)
        assert rec.events[1][1] == frozenset(TP("t", p) for p in range(4))  # eager: everything
    finally:
        b.close()
        a.close()
    assert rec.events[-1][0] == "revoked"


def test_cooperative_listener_order_revokes_only_what_moves(zk, nodes):
    create_topic(zk, "t", partitions=4)
    ra, rb = Recorder(), Recorder()
    a = member(zk, nodes, assignors=["cooperative-sticky"], listener=ra)
    a.start()
    wait_for(lambda: len(a.assignment()) == 4, what="a owns everything")
    b = member(zk, nodes, assignors=["cooperative-sticky"], listener=rb)
    b.start()
    try:
        wait_for(lambda: all_stable([a, b], 4) and len(b.assignment()) == 2, what="two members, two each")
        everything = frozenset(TP("t", p) for p in range(4))
        kinds = [k for k, _ in ra.events]
        assert kinds[:2] == ["assigned", "revoked"], ra.events
        assert ra.events[1][1] == everything - a.assignment()  # only the partitions that moved
        assert all(tps != everything for k, tps in ra.events if k == "revoked")
        assert [k for k, _ in rb.events] == ["assigned", "assigned"]  # nothing, then the freed partitions
        assert rb.events[0][1] == frozenset() and rb.events[1][1] == b.assignment()
    finally:
        b.close()
        a.close()


def test_the_group_votes_for_an_assignor_every_member_supports(zk, nodes):
    create_topic(zk, "t", partitions=4)
    a = member(zk, nodes, assignors=["range", "roundrobin"])
    b = member(zk, nodes, assignors=["roundrobin"])
    a.start()
    wait_for(lambda: a.protocol_name == "range", what="a alone votes range")
    b.start()
    try:
        wait_for(lambda: all_stable([a, b], 4), what="two members")
        assert a.protocol_name == b.protocol_name == "roundrobin"
        assert a.assignment() == {TP("t", 0), TP("t", 2)} or b.assignment() == {TP("t", 0), TP("t", 2)}
    finally:
        a.close()
        b.close()


def test_leader_rejoins_when_a_subscribed_topic_grows(zk, nodes):
    from topics.registry import add_partitions

    create_topic(zk, "t", partitions=2)
    members = [member(zk, nodes) for _ in range(2)]
    for m in members:
        m.start()
    try:
        wait_for(lambda: all_stable(members, 2), what="two members")
        add_partitions(zk, "t", 6)
        wait_for(lambda: all_stable(members, 6), what="the new partitions assigned")
    finally:
        for m in members:
            m.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_on_the_next_poll(zk, nodes):
    create_topic(zk, "t", partitions=4)
    rec = Recorder()
    slow = member(zk, nodes, max_poll_interval_ms=800, listener=rec)
    busy = member(zk, nodes)
    stop = threading.Event()

    def keep_polling():
        while not stop.is_set():
            busy.record_poll()
            time.sleep(0.05)

    poller = threading.Thread(target=keep_polling, daemon=True)
    slow.start()
    busy.start()
    poller.start()
    try:
        slow.record_poll()
        wait_for(lambda: all_stable([slow, busy], 4), what="two members")
        owned = slow.assignment()
        wait_for(lambda: len(busy.assignment()) == 4, what="the busy member takes everything")
        assert ("lost", frozenset(owned)) in rec.events
        with pytest.raises(CommitFailed):
            slow.commit({next(iter(owned)): 1}, slow.generation)
        slow.record_poll()  # back: rejoin
        wait_for(lambda: all_stable([slow, busy], 4) and len(slow.assignment()) == 2, what="rejoined")
    finally:
        stop.set()
        poller.join()
        slow.close()
        busy.close()


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_member_follows_its_group_to_another_coordinator_node_without_rebalancing(zk_connect, zk, how):
    create_topic(zk, "t", partitions=4)
    # A killed node's shards are claimed once its ZooKeeper session expires (1 s here).
    with CoordinatorNodes(zk_connect, count=2, zk_session_timeout_ms=1000) as nodes:
        members = [member(zk, nodes) for _ in range(2)]
        for m in members:
            m.start()
        try:
            wait_for(lambda: all_stable(members, 4), what="two members")
            generation, owned = members[0].generation, members[0].assignment()
            host, port = members[0]._coordinator
            node_id = next(n.node_id for n in nodes.nodes.values() if (n.host, n.port) == (host, port))
            if how == "sigterm":
                nodes.stop_node(node_id)  # the node releases its shards on the way out
            else:
                nodes.kill(node_id)  # the node vanishes; its shards move when its session expires
            tp = next(iter(owned))
            # the commit finds the new coordinator (NOT_COORDINATOR / dropped connection -> lookup)
            members[0].commit({tp: OffsetAndMetadata(7)}, generation)
            assert members[1].committed([tp]) == {tp: 7}
            assert members[0]._coordinator != (host, port)
            time.sleep(0.5)  # heartbeats reach the new coordinator: still the same generation
            assert all_stable(members, 4)
            assert members[0].generation == generation and members[0].assignment() == owned
        finally:
            for m in members:
                m.close()


def test_eager_sticky_keeps_partitions_across_a_leave(zk, nodes):
    create_topic(zk, "t", partitions=6)
    members = [member(zk, nodes, assignors=["sticky"]) for _ in range(3)]
    for m in members:
        m.start()
    try:
        wait_for(
            lambda: all_stable(members, 6) and all(len(m.assignment()) == 2 for m in members), what="3 x 2"
        )
        before = [m.assignment() for m in members]
        members[2].close()
        wait_for(lambda: all_stable(members[:2], 6), what="two members share six partitions")
        for old, m in zip(before[:2], members[:2], strict=True):
            assert old <= m.assignment()  # everything revoked (eager), then the same partitions back
    finally:
        for m in members[:2]:
            m.close()


def test_a_second_member_with_the_same_instance_id_fences_the_first(zk, nodes):
    from core.errors import RebalanceFailed

    create_topic(zk, "t", partitions=2)
    first = member(zk, nodes, group_instance_id="i-1")
    first.start()
    wait_for(lambda: len(first.assignment()) == 2, what="the first member assigned")
    second = member(zk, nodes, group_instance_id="i-1")
    second.start()
    try:
        wait_for(lambda: len(second.assignment()) == 2, what="the replacement assigned")
        wait_for(lambda: first.fatal_error is not None, what="the first member fenced")
        with pytest.raises(RebalanceFailed, match="group_instance_id"):
            first.record_poll()
    finally:
        first.close()
        second.close()


def test_a_failing_listener_is_reported_by_the_next_poll_and_the_member_carries_on(zk, nodes):
    create_topic(zk, "t", partitions=2)

    class Broken:
        def on_partitions_assigned(self, tps):
            raise ValueError("listener bug")

    m = member(zk, nodes, listener=Broken())
    m.start()
    try:
        # The group thread calls the listener after the assignment is visible: wait until it failed.
        wait_for(
            lambda: len(m.assignment()) == 2 and m._listener_error is not None,
            what="assigned despite the listener",
        )
        with pytest.raises(ValueError, match="listener bug"):
            m.record_poll()
        m.record_poll()  # reported once
        assert m.fatal_error is None
    finally:
        m.close()


def polled(*members: CoordinatorMember, timeout: float = 0.05) -> bool:
    """One `poll(timeout)` of each member in turn, from the calling thread."""
    for m in members:
        m.poll(timeout)
    return True


def test_a_poll_that_times_out_mid_join_leaves_the_join_in_flight_for_the_next_poll(zk, nodes):
    """Kafka's poll(timer): a poll returns when its timeout runs out, the JoinGroup stays in flight
    (same member id, no second JoinGroup), and the next polls complete the same rebalance."""
    create_topic(zk, "t", partitions=4)
    ra, rb = Recorder(), Recorder()
    a = member(zk, nodes, poll_driven=True, max_poll_interval_ms=30_000, listener=ra)
    b = member(zk, nodes, poll_driven=True, max_poll_interval_ms=30_000, listener=rb)
    a.start()
    b.start()
    try:
        wait_for(lambda: polled(a) and len(a.assignment()) == 4, what="a owns everything")
        # b's JoinGroup waits for a to rejoin, and a rejoins only inside its own poll().
        wait_for(
            lambda: polled(b) and b.state == MemberState.PREPARING_REBALANCE and b.member_id != "",
            what="b's JoinGroup in flight",
        )
        member_id, joins = b.member_id, b.stats["joins"]
        for _ in range(10):
            b.poll(0.05)  # each returns after its timeout, the group still rebalancing
        assert (b.state, b.member_id, b.stats["joins"]) == (MemberState.PREPARING_REBALANCE, member_id, joins)
        assert len(a.assignment()) == 4 and b.assignment() == set() and rb.events == []
        wait_for(
            lambda: polled(a, b) and all_stable([a, b], 4) and len(b.assignment()) == 2,
            what="a stable group of two, polled alternately from one thread",
        )
        assert b.member_id == member_id
        assert b.stats["joins"] == joins  # the JoinGroup sent before the ten polls completed the join
        assert [k for k, _ in ra.events] == ["assigned", "revoked", "assigned"]
        assert rb.events == [("assigned", frozenset(b.assignment()))]
    finally:
        b.close()
        a.close()


def test_a_rebalance_a_heartbeat_reports_after_the_member_rejoined_it_is_joined_once(zk, nodes):
    """Kafka's heartbeat handler: REBALANCE_IN_PROGRESS makes only a stable member rejoin. A heartbeat
    sent while stable and answered once the member has rejoined (the answer was on its way) reports
    the rebalance the member is in already: the group completes it with one new generation, and the
    member does not rejoin again after it."""
    create_topic(zk, "t", partitions=2)
    a = member(zk, nodes, poll_driven=True, max_poll_interval_ms=30_000)
    c = member(zk, nodes, poll_driven=True, max_poll_interval_ms=30_000)
    b = member(zk, nodes, poll_driven=True, max_poll_interval_ms=30_000)
    a.start()
    c.start()
    try:
        wait_for(lambda: polled(a, c) and all_stable([a, c], 2), what="a stable group of two")
        gen, conn = a._generation, a._ctl_conn  # what a heartbeat a sends while stable carries
        b.start()
        # b's JoinGroup starts a rebalance; a rejoins in its poll(), c does not poll: the group waits.
        wait_for(lambda: polled(a, b) and a.state == MemberState.PREPARING_REBALANCE, what="a rejoined")
        joins = a.stats["joins"]
        assert not a.heartbeat(conn, gen)  # REBALANCE_IN_PROGRESS, answered to a member that rejoined
        wait_for(lambda: polled(a, b, c) and all_stable([a, b, c], 2), what="a stable group of three")
        settled = a.generation
        for _ in range(5):  # a few heartbeat intervals
            polled(a, b, c)
        assert (a.stats["joins"], a.generation, b.generation) == (joins, settled, settled)
        assert not a.rebalance_in_progress
    finally:
        for m in (b, c, a):
            m.close()


def test_a_pending_response_is_collected_in_slices_and_responses_come_back_in_order(zk, nodes):
    """`Connection.send` + `PendingResponse.result(timeout)`: a parked JoinGroup is collected by a
    later call (None meanwhile), and pipelined responses are matched to their requests."""
    from coordinator.assignors.consumer_protocol import PROTOCOL_TYPE, join_protocols
    from coordinator.member.connection import Connection, parse_address
    from coordinator.wire import codec as wire
    from coordinator.wire.codec import ErrorCode as E
    from coordinator.wire.schema import (
        FindCoordinatorRequest,
        JoinGroupRequest,
        LeaveGroupMember,
        LeaveGroupRequest,
    )

    create_topic(zk, "t", partitions=2)
    host, port = parse_address(nodes.bootstrap.split(",")[0])
    conn = Connection(host, port, "test")
    try:
        first = conn.send(wire.FIND_COORDINATOR, FindCoordinatorRequest(key="g", key_type=0), 10)
        second = conn.send(wire.FIND_COORDINATOR, FindCoordinatorRequest(key="other", key_type=0), 10)
        b = second.result(10)  # reads the first response on the way and keeps it for `first`
        a = first.result(0)
        assert a.error_code == b.error_code == 0 and (a.host, a.port) == (host, port)

        # A poll-driven member rejoins only inside its poll(): until then the newcomer's JoinGroup is parked.
        stable = member(zk, nodes, poll_driven=True, max_poll_interval_ms=30_000)
        stable.start()
        wait_for(lambda: polled(stable) and all_stable([stable], 2), what="one stable member")

        def join(member_id: str) -> JoinGroupRequest:
            return JoinGroupRequest(
                group_id="g",
                session_timeout_ms=10_000,
                rebalance_timeout_ms=10_000,
                member_id=member_id,
                protocol_type=PROTOCOL_TYPE,
                protocols=join_protocols(["range"], ["t"], [], -1),
            )

        required = conn.request(wire.JOIN_GROUP, join(""), 10)
        assert required.error_code == E.MEMBER_ID_REQUIRED
        pending = conn.send(wire.JOIN_GROUP, join(required.member_id), 20)
        assert [pending.result(t) for t in (0, 0.05, 0.2)] == [None, None, None]  # parked, still in flight
        answered = None
        while answered is None:
            stable.poll(0.05)  # the stable member rejoins; the newcomer's JoinGroup is answered
            answered = pending.result(0.05)
        assert answered.error_code == 0, answered
        assert answered.member_id == required.member_id
        leave = LeaveGroupRequest(group_id="g", members=[LeaveGroupMember(member_id=required.member_id)])
        assert conn.request(wire.LEAVE_GROUP, leave, 10).error_code == 0
        stable.close()
    finally:
        conn.close()


def test_a_member_reads_only_well_formed_node_registrations(zk):
    """`zk_bootstrap` (where a member with ZooKeeper looks for nodes) and `to_kafka`'s check of the
    nodes' own Kafka listeners read `/groupshift/coordinators/ids` through the layout's codec: a
    registration that does not decode is skipped, never a crash or a bogus address."""
    from coordinator.layout import COORDINATORS, CoordinatorRecord, coordinator_path, encode_coordinator
    from coordinator.member.connection import zk_bootstrap
    from migrate.migration.to_kafka import _kafka_listeners

    zk.ensure_path(COORDINATORS)
    with_kafka = CoordinatorRecord("h1", 9001, 1, kafka_host="h1", kafka_port=9092)
    zk.create(coordinator_path(1), encode_coordinator(with_kafka))
    zk.create(coordinator_path(2), encode_coordinator(CoordinatorRecord("h2", 9002, 1)))
    zk.create(coordinator_path(3), b"not json")
    zk.create(coordinator_path(4), b'{"host": "h4", "port": "not a port", "started": 1}')
    assert sorted(zk_bootstrap(zk)) == [("h1", 9001), ("h2", 9002)]
    assert _kafka_listeners(zk) == {"h1:9092"}
