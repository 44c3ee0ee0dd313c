"""WatchGroup against a real node process: parked until the group has news, and the members that
use it hear of a rebalance when it starts, not at their next heartbeat.

The members here heartbeat every 20 s, and every wait is shorter than that: a member whose watch
did not wake it could not take part in the rebalance in time.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
import uuid

import pytest

from coordinator.member.consumer_member import CoordinatorMember, ServerAssignedMember
from coordinator.member.incremental_member import IncrementalMember
from coordinator.member.wire_client import WireClient, WireError, heartbeat_body, join_body, sync_body
from coordinator.node.process import CoordinatorNodes
from coordinator.wire import codec as P
from core.zk import connect
from topics.registry import create_topic

E = P.ErrorCode
SLOW_HEARTBEAT = dict(session_timeout_ms=60_000, heartbeat_interval_ms=20_000, request_timeout_ms=10_000)
WAIT = 10.0  # half the heartbeat interval


@pytest.fixture(scope="module")
def cluster(module_zk_connect, tmp_path_factory):
    zk = connect(module_zk_connect, session_timeout=6.0)
    with CoordinatorNodes(
        module_zk_connect,
        count=1,
        log_dir=tmp_path_factory.mktemp("nodes"),
        group_consumer_heartbeat_interval_ms=20_000,
        metrics_port=0,
    ) as nodes:
        nodes.zk = zk
        yield nodes
    zk.stop()
    zk.close()


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _wait_for(cond, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.02)


def _watch_body(group: str, member_id: str, generation: int, max_wait_ms: int) -> dict:
    return dict(group_id=group, member_id=member_id, generation_id=generation, max_wait_ms=max_wait_ms)


def _stable_member(c: WireClient, group: str) -> tuple[str, int]:
    r = c.request(P.JOIN_GROUP, join_body(group, ""))
    mid = r["member_id"]
    r = c.request(P.JOIN_GROUP, join_body(group, mid))
    gen = r["generation_id"]
    assert c.request(P.SYNC_GROUP, sync_body(group, gen, mid, {mid: b""}))["error_code"] == 0
    return mid, gen


def _client(cluster, name: str) -> WireClient:
    host, port = cluster.bootstrap.split(",")[0].split(":")
    return WireClient(host, int(port), name)


def test_a_parked_watch_is_answered_when_a_rebalance_starts(cluster):
    group = _name("g")
    with _client(cluster, "a") as a, _client(cluster, "w") as w, _client(cluster, "b") as b:
        mid, gen = _stable_member(a, group)
        rid = w.send(P.WATCH_GROUP, _watch_body(group, mid, gen, 25_000))
        with pytest.raises(WireError):
            w.recv(timeout=0.3)  # parked: nothing has changed
        joiner = b.request(P.JOIN_GROUP, join_body(group, ""))["member_id"]
        with pytest.raises(WireError):
            w.recv(timeout=0.3)  # a member id handed out is no rebalance yet
        b.send(P.JOIN_GROUP, join_body(group, joiner))  # a joiner: the group rebalances
        got, body = w.recv(timeout=WAIT)
        assert (got, body) == (rid, {"error_code": 0, "changed": True})
        # The member is behind the group now: a new watch is answered at once, as its heartbeat is.
        assert w.request(P.WATCH_GROUP, _watch_body(group, mid, gen, 25_000)) == {
            "error_code": 0,
            "changed": True,
        }
        assert (
            a.request(P.HEARTBEAT, heartbeat_body(group, gen, mid))["error_code"] == E.REBALANCE_IN_PROGRESS
        )


def test_a_watch_answers_errors_and_quiet_timeouts_at_once_or_in_time(cluster):
    group = _name("g")
    with _client(cluster, "a") as a, _client(cluster, "w") as w:
        mid, gen = _stable_member(a, group)
        quiet = {"error_code": 0, "changed": False}
        assert w.request(P.WATCH_GROUP, _watch_body(group, mid, gen, 0)) == quiet
        assert w.request(P.WATCH_GROUP, _watch_body(group, mid, gen, 200)) == quiet
        assert w.request(P.WATCH_GROUP, _watch_body(group, mid, gen + 1, 25_000))["changed"] is True
        unknown = w.request(P.WATCH_GROUP, _watch_body(group, "nobody", gen, 25_000))
        assert unknown == {"error_code": E.UNKNOWN_MEMBER_ID, "changed": False}
        nogroup = w.request(P.WATCH_GROUP, _watch_body(_name("none"), mid, gen, 25_000))
        assert nogroup["error_code"] == E.UNKNOWN_MEMBER_ID
        # The same connection serves on after a parked watch was answered.
        assert w.request(P.HEARTBEAT, heartbeat_body(group, gen, mid)) == {"error_code": 0}


def test_a_watch_whose_connection_closed_is_forgotten(cluster):
    """Closed while parked: the node drops it at once (its metrics count no parked watch), and the
    group's next rebalance answers nobody on a dead connection."""
    group = _name("g")
    node = next(iter(cluster.nodes.values()))
    with _client(cluster, "a") as a, _client(cluster, "b") as b:
        mid, gen = _stable_member(a, group)
        w = _client(cluster, "w")
        w.send(P.WATCH_GROUP, _watch_body(group, mid, gen, 25_000))
        _wait_for(lambda: _parked(node) == 1, "the watch to be parked")
        w.close()
        _wait_for(lambda: _parked(node) == 0, "the closed watch to be forgotten")
        joiner = b.request(P.JOIN_GROUP, join_body(group, ""))["member_id"]
        b.send(P.JOIN_GROUP, join_body(group, joiner))  # a rebalance: nobody left to wake
        _wait_for(
            lambda: (
                a.request(P.HEARTBEAT, heartbeat_body(group, gen, mid))["error_code"]
                == E.REBALANCE_IN_PROGRESS
            ),
            "the rebalance to start",
        )
        assert _parked(node) == 0


def _parked(node) -> int:
    """The node's groupshift_coordinator_watches_parked gauge (its metrics port is in its log)."""
    port = next(
        json.loads(line)["metrics_port"]
        for line in node.log_path.read_text().splitlines()
        if line.startswith("{") and '"metrics_port"' in line
    )
    url = f"http://127.0.0.1:{port}/metrics"
    for line in urllib.request.urlopen(url, timeout=5).read().decode().splitlines():
        if line.startswith("groupshift_coordinator_watches_parked "):
            return int(float(line.split()[-1]))
    raise AssertionError("no groupshift_coordinator_watches_parked gauge")


@pytest.mark.parametrize("kind", ["scheme three", "scheme two", "scheme two incremental"])
def test_a_watching_member_hears_of_a_joiner_before_its_next_heartbeat(cluster, kind):
    zk = cluster.zk
    topic, group = _name("t"), _name("g")
    create_topic(zk, topic, partitions=4)
    make = {
        "scheme three": lambda: CoordinatorMember(group, [topic], zk=zk, bootstrap=cluster.bootstrap, **opts),
        "scheme two": lambda: ServerAssignedMember(
            group, [topic], zk=zk, bootstrap=cluster.bootstrap, **opts
        ),
        "scheme two incremental": lambda: IncrementalMember(
            group, [topic], bootstrap=cluster.bootstrap, **opts
        ),
    }[kind]
    opts = dict(SLOW_HEARTBEAT, watch_group=True)
    a = make()
    a.start()
    members = [a]
    try:
        _wait_for(lambda: len(a.assignment()) == 4, "the first member to own every partition")
        b = make()
        members.append(b)
        b.start()
        _wait_for(
            lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
            "the joiner to get half the partitions",
        )
        assert a.stats["watch_wakeups"] >= 1
        # Woken once or twice a rebalance, never beating in a loop (20 s apart otherwise).
        assert a.stats["heartbeats"] <= 10, a.stats
    finally:
        threads = [threading.Thread(target=m.close) for m in members]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


def test_a_watching_member_follows_its_group_to_the_node_that_takes_it_over(zk, zk_connect):
    """The group's node is killed: the broken watch makes the member look its coordinator up at
    once (not at its next heartbeat, 20 s away), and it is woken by the node that took the group
    over when a member joins there."""
    topic, group = _name("t"), _name("g")
    create_topic(zk, topic, partitions=4)
    with CoordinatorNodes(zk_connect, count=2, zk_session_timeout_ms=2000) as nodes:
        opts = dict(SLOW_HEARTBEAT, watch_group=True)
        a = CoordinatorMember(group, [topic], zk=zk, bootstrap=nodes.bootstrap, **opts)
        b = CoordinatorMember(group, [topic], zk=zk, bootstrap=nodes.bootstrap, **opts)
        a.start()
        try:
            _wait_for(lambda: len(a.assignment()) == 4, "the first member to own every partition")
            _wait_for(
                lambda: a.stats["coordinator_lookups"] >= 1 and a._coordinator is not None, "a coordinator"
            )
            first = a._coordinator
            victim = next(n for n, p in nodes.nodes.items() if p.address == f"{first[0]}:{first[1]}")
            nodes.kill(victim)
            _wait_for(lambda: a._coordinator not in (None, first), "the member to find the new coordinator")
            b.start()
            _wait_for(
                lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2,
                "the joiner to get half the partitions",
            )
            assert a.stats["watch_wakeups"] >= 1
        finally:
            b.close()
            a.close()
