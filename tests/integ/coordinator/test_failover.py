"""Several coordinator nodes on one ZooKeeper: a node dies (SIGKILL), another takes its shards over.

Node 1 starts first and leads every shard (handoff off); nodes 2 and 3 stand by. The ZooKeeper
session of a node is 2 s, so a killed node's shards are free about 2 s after the kill.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from coordinator.layout import shard_of
from coordinator.member.wire_client import (
    WireClient,
    WireError,
    commit_body,
    committed,
    fetch_body,
    heartbeat_body,
    join_body,
    sync_body,
)
from coordinator.node.process import NodeProcess
from coordinator.wire import codec as P

E = P.ErrorCode
ARGS = (
    "--zk-session-timeout-ms",
    "2000",
    "--claim-grace-ms",
    "300",
    "--group-initial-rebalance-delay-ms",
    "200",
    "--group-min-session-timeout-ms",
    "100",
)
SESSION_MS = 15_000  # members' sessions comfortably outlive the failover


@pytest.fixture
def cluster(zk_connect, tmp_path):
    nodes = [NodeProcess.start(zk_connect, 1, *ARGS, "--no-shard-handoff", log_path=tmp_path / "node-1.log")]
    for i in (2, 3):
        nodes.append(
            NodeProcess.start(zk_connect, i, *ARGS, "--no-shard-handoff", log_path=tmp_path / f"node-{i}.log")
        )
    yield nodes
    for n in nodes:
        n.kill()


def find_coordinator(
    nodes, group: str, timeout: float = 20.0, exclude: int | None = None
) -> tuple[int, str, int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for n in nodes:
            if not n.alive:
                continue
            try:
                with n.client(timeout=2.0) as c:
                    r = c.request(P.FIND_COORDINATOR, {"key": group, "key_type": 0})
            except (WireError, OSError):
                continue
            if r["error_code"] == 0 and r["node_id"] != exclude:
                return r["node_id"], r["host"], r["port"]
        time.sleep(0.1)
    raise AssertionError(f"no coordinator for {group!r} within {timeout}s")


def stable_group(host: str, port: int, group: str, n: int = 3):
    """n members through join and sync; returns (clients, member ids, generation)."""
    clients = [WireClient(host, port, f"m{i}") for i in range(n)]
    ids = []
    for c in clients:
        r = c.request(P.JOIN_GROUP, join_body(group, "", session_timeout_ms=SESSION_MS))
        assert r["error_code"] == E.MEMBER_ID_REQUIRED
        ids.append(r["member_id"])
    gen, leader = rejoin_all(clients, ids, group)
    sync_all(clients, ids, group, gen, leader)
    return clients, ids, gen, leader


def rejoin_all(clients, ids, group):
    for c, mid in zip(clients, ids, strict=True):
        c.send(
            P.JOIN_GROUP,
            join_body(group, mid, protocols=[("range", mid.encode())], session_timeout_ms=SESSION_MS),
        )
    joins = [c.recv(timeout=15)[1] for c in clients]
    assert [j["error_code"] for j in joins] == [0] * len(clients), joins
    gens = {j["generation_id"] for j in joins}
    assert len(gens) == 1
    return gens.pop(), joins[0]["leader"]


def sync_all(clients, ids, group, gen, leader):
    assignment = {mid: f"assigned-to-{mid}".encode() for mid in ids}
    order = [i for i, mid in enumerate(ids) if mid != leader] + [ids.index(leader)]
    for i in order:
        clients[i].send(P.SYNC_GROUP, sync_body(group, gen, ids[i], assignment if ids[i] == leader else None))
    for i, c in enumerate(clients):
        r = c.recv(timeout=15)[1]
        assert r["error_code"] == 0 and r["assignment"] == assignment[ids[i]]


def reconnect(clients, host, port):
    for c in clients:
        c.close()
    return [WireClient(host, port, c.client_id) for c in clients]


def wait_state(c: WireClient, group: str, state: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if c.request(P.DESCRIBE_GROUPS, {"groups": [group]})["groups"][0]["group_state"] == state:
            return
        time.sleep(0.02)
    raise AssertionError(f"{group} never reached {state}")


def heartbeat_until_served(c: WireClient, group: str, gen: int, mid: str, timeout: float = 10.0) -> int:
    """Heartbeat until the new coordinator has loaded the group (a load in progress answers NONE
    blindly, so ask DescribeGroups first), then return the heartbeat's error code."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        d = c.request(P.DESCRIBE_GROUPS, {"groups": [group]})["groups"][0]
        if d["error_code"] == 0:
            return c.request(P.HEARTBEAT, heartbeat_body(group, gen, mid))["error_code"]
        time.sleep(0.05)
    raise AssertionError("the group was never loaded")


def test_stable_group_survives_its_coordinator_being_killed(cluster, zk):
    g = f"g-{uuid.uuid4().hex[:8]}"
    node_id, host, port = find_coordinator(cluster, g)
    assert node_id == 1
    clients, ids, gen, _ = stable_group(host, port, g)
    offsets = {("orders", i): 1000 + i for i in range(3)}
    for i, (c, mid) in enumerate(zip(clients, ids, strict=True)):
        r = c.request(P.OFFSET_COMMIT, commit_body(g, gen, mid, {("orders", i): offsets[("orders", i)]}))
        assert r["topics"][0]["partitions"][0]["error_code"] == 0

    t_kill = time.monotonic()
    cluster[0].kill()
    new_id, host, port = find_coordinator(cluster, g, exclude=1)
    took = time.monotonic() - t_kill
    assert new_id in (2, 3)
    assert took < 10, took
    clients = reconnect(clients, host, port)
    try:
        for c, mid in zip(clients, ids, strict=True):
            assert heartbeat_until_served(c, g, gen, mid) == 0
        d = clients[0].request(P.DESCRIBE_GROUPS, {"groups": [g]})["groups"][0]
        assert d["group_state"] == "Stable"
        assert sorted(m["member_id"] for m in d["members"]) == sorted(ids)
        assert {m["member_id"]: m["member_assignment"] for m in d["members"]} == {
            mid: f"assigned-to-{mid}".encode() for mid in ids
        }
        assert committed(clients[0].request(P.OFFSET_FETCH, fetch_body(g))) == offsets
        # Members go on committing with the same generation; the new leader's epoch is higher.
        r = clients[1].request(P.OFFSET_COMMIT, commit_body(g, gen, ids[1], {("orders", 1): 2001}))
        assert r["topics"][0]["partitions"][0]["error_code"] == 0
        assert committed(clients[2].request(P.OFFSET_FETCH, fetch_body(g)))[("orders", 1)] == 2001
        leader = json.loads(zk.get(f"/groupshift/shards/{shard_of(g, 50)}/leader")[0])
        assert leader["node"] == new_id and leader["epoch"] >= 2
    finally:
        for c in clients:
            c.close()


def test_node_killed_during_completing_rebalance(cluster):
    g = f"g-{uuid.uuid4().hex[:8]}"
    _, host, port = find_coordinator(cluster, g)
    clients, ids, gen, leader = stable_group(host, port, g)
    offsets = {("clicks", i): 10 * (i + 1) for i in range(3)}
    for i, (c, mid) in enumerate(zip(clients, ids, strict=True)):
        r = c.request(P.OFFSET_COMMIT, commit_body(g, gen, mid, {("clicks", i): offsets[("clicks", i)]}))
        assert r["topics"][0]["partitions"][0]["error_code"] == 0

    # A fourth member joins: everyone rejoins and the group waits for the leader's SyncGroup.
    newcomer = WireClient(host, port, "m3")
    r = newcomer.request(P.JOIN_GROUP, join_body(g, "", session_timeout_ms=SESSION_MS))
    new_id = r["member_id"]
    newcomer.send(P.JOIN_GROUP, join_body(g, new_id, session_timeout_ms=SESSION_MS))
    wait_state(clients[0], g, "PreparingRebalance")
    for c, mid in zip(clients, ids, strict=True):
        assert c.request(P.HEARTBEAT, heartbeat_body(g, gen, mid))["error_code"] == E.REBALANCE_IN_PROGRESS
    gen2, _ = rejoin_all(clients, ids, g)
    assert newcomer.recv(timeout=15)[1]["generation_id"] == gen2 == gen + 1
    with WireClient(host, port) as admin:
        assert (
            admin.request(P.DESCRIBE_GROUPS, {"groups": [g]})["groups"][0]["group_state"]
            == "CompletingRebalance"
        )

    cluster[0].kill()
    newcomer.close()
    _, host, port = find_coordinator(cluster, g, exclude=1)
    clients = reconnect(clients, host, port)
    try:
        # The new node has the group as last persisted: Stable, generation `gen`, three members.
        # Heartbeats with that (current) generation are accepted; generation gen+1 never existed
        # durably, so it is refused and the members rejoin.
        for c, mid in zip(clients, ids, strict=True):
            assert heartbeat_until_served(c, g, gen, mid) == 0
        assert (
            clients[0].request(P.HEARTBEAT, heartbeat_body(g, gen2, ids[0]))["error_code"]
            == E.ILLEGAL_GENERATION
        )
        d = clients[0].request(P.DESCRIBE_GROUPS, {"groups": [g]})["groups"][0]
        assert d["group_state"] == "Stable" and sorted(m["member_id"] for m in d["members"]) == sorted(ids)
        assert committed(clients[0].request(P.OFFSET_FETCH, fetch_body(g))) == offsets

        # The members rebalance again on the new node: the leader rejoins, the others hear of it
        # from their heartbeats.
        li = ids.index(leader)
        body = join_body(g, leader, protocols=[("range", leader.encode())], session_timeout_ms=SESSION_MS)
        clients[li].send(P.JOIN_GROUP, body)
        others = [i for i in range(3) if i != li]
        wait_state(clients[others[0]], g, "PreparingRebalance")
        for i in others:
            code = clients[i].request(P.HEARTBEAT, heartbeat_body(g, gen, ids[i]))["error_code"]
            assert code == E.REBALANCE_IN_PROGRESS
            body = join_body(g, ids[i], protocols=[("range", ids[i].encode())], session_timeout_ms=SESSION_MS)
            clients[i].send(P.JOIN_GROUP, body)
        joins = [c.recv(timeout=15)[1] for c in clients]
        assert [j["error_code"] for j in joins] == [0, 0, 0]
        gen3 = joins[0]["generation_id"]
        assert gen3 == gen + 1
        sync_all(clients, ids, g, gen3, joins[0]["leader"])
        r = clients[0].request(P.OFFSET_COMMIT, commit_body(g, gen3, ids[0], {("clicks", 0): 11}))
        assert r["topics"][0]["partitions"][0]["error_code"] == 0
        assert committed(clients[1].request(P.OFFSET_FETCH, fetch_body(g))) == {**offsets, ("clicks", 0): 11}
    finally:
        for c in clients:
            c.close()


def test_a_stale_node_answers_not_coordinator(cluster):
    g = f"g-{uuid.uuid4().hex[:8]}"
    with cluster[1].client() as c:  # node 2 leads nothing while node 1 lives
        assert c.request(P.HEARTBEAT, heartbeat_body(g, 1, "m"))["error_code"] == E.NOT_COORDINATOR
        assert c.request(P.JOIN_GROUP, join_body(g))["error_code"] == E.NOT_COORDINATOR
        r = c.request(P.OFFSET_COMMIT, commit_body(g, -1, "", {("t", 0): 1}))
        assert r["topics"][0]["partitions"][0]["error_code"] == E.NOT_COORDINATOR
        r = c.request(P.DESCRIBE_GROUPS, {"groups": [g]})
        assert r["groups"][0]["error_code"] == E.NOT_COORDINATOR


def test_shards_spread_over_nodes_and_move_on_clean_shutdown(zk_connect, zk, tmp_path):
    args = (*ARGS, "--shards", "12", "--handoff-delay-ms", "300")
    nodes = [NodeProcess.start(zk_connect, i, *args, log_path=tmp_path / f"n{i}.log") for i in (1, 2, 3)]
    try:

        def leaders() -> dict[int, int]:
            out = {}
            for s in range(12):
                try:
                    out[s] = json.loads(zk.get(f"/groupshift/shards/{s}/leader")[0])["node"]
                except Exception:  # noqa: BLE001 - moving
                    pass
            return out

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            led = leaders()
            if len(led) == 12 and set(led.values()) == {1, 2, 3}:
                break
            time.sleep(0.2)
        assert set(leaders().values()) == {1, 2, 3}
        assert nodes[0].terminate() == 0
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            led = leaders()
            if len(led) == 12 and set(led.values()) <= {2, 3}:
                break
            time.sleep(0.1)
        assert len(leaders()) == 12 and set(leaders().values()) <= {2, 3}
    finally:
        for n in nodes:
            n.kill()
