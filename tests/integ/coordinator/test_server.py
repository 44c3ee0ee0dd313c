"""A coordinator node process over the wire: every API, a 3-member group, bad input, metrics, shutdown."""

from __future__ import annotations

import json
import random
import select
import socket
import struct
import time
import urllib.request
import uuid

import msgspec
import pytest

from coordinator.layout import BROKERS, COORDINATORS
from coordinator.member.wire_client import (
    WireClient,
    WireError,
    commit_body,
    committed,
    fetch_body,
    heartbeat_body,
    join_body,
    leave_body,
    sync_body,
)
from coordinator.node.process import NodeProcess
from coordinator.wire import codec as P
from core.zk import connect

E = P.ErrorCode
NODE_ARGS = (
    "--group-initial-rebalance-delay-ms",
    "300",
    "--group-min-session-timeout-ms",
    "100",
    "--zk-session-timeout-ms",
    "2000",
    "--frame-timeout-ms",
    "1000",
    "--metrics-port",
    "0",
    "--shards",  # 4, not 50: a node starts faster, and no case here depends on the count
    "4",
)


@pytest.fixture(scope="module")
def node(module_zk_connect, tmp_path_factory):
    zk = module_zk_connect
    log = tmp_path_factory.mktemp("node") / "node-1.log"
    proc = NodeProcess.start(zk, 1, *NODE_ARGS, log_path=log)
    proc.zk = zk
    yield proc
    proc.stop()


def _group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def _join_new(c: WireClient, group: str, **kw) -> str:
    """JoinGroup with member_id "" -> MEMBER_ID_REQUIRED carrying the id to use."""
    r = c.request(P.JOIN_GROUP, join_body(group, "", **kw))
    assert r["error_code"] == E.MEMBER_ID_REQUIRED
    assert r["member_id"].startswith(c.client_id + "-")
    return r["member_id"]


def _single_member_group(node, group: str) -> tuple[WireClient, str, int]:
    c = node.client("solo")
    mid = _join_new(c, group)
    r = c.request(P.JOIN_GROUP, join_body(group, mid))
    assert r["error_code"] == 0 and r["leader"] == mid
    gen = r["generation_id"]
    r = c.request(P.SYNC_GROUP, sync_body(group, gen, mid, {mid: b"a0"}))
    assert r == {"error_code": 0, "protocol_type": "consumer", "protocol_name": "range", "assignment": b"a0"}
    return c, mid, gen


# ------------------------------------------------------------------------------ round trips


def test_api_versions_lists_every_api_at_version_0(node):
    with node.client() as c:
        r = c.request(P.API_VERSIONS, {})
    assert r["error_code"] == 0
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
    apis = (8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 36, 42, 47, 60, 68, 69, 1000, 1001, 1002)
    assert keys == {api: (0, 0) for api in apis}


def test_find_coordinator_names_this_node(node):
    with node.client() as c:
        r = c.request(P.FIND_COORDINATOR, {"key": "any-group", "key_type": 0})
        assert r == {
            "error_code": 0,
            "error_message": None,
            "node_id": 1,
            "host": node.host,
            "port": node.port,
        }
        assert c.request(P.FIND_COORDINATOR, {"key": "x", "key_type": 1})["error_code"] == E.INVALID_REQUEST


def test_every_group_api_round_trip(node):
    g = _group()
    c, mid, gen = _single_member_group(node, g)
    with c:
        assert c.request(P.HEARTBEAT, heartbeat_body(g, gen, mid)) == {"error_code": 0}
        assert c.request(P.HEARTBEAT, heartbeat_body(g, gen + 5, mid)) == {"error_code": E.ILLEGAL_GENERATION}
        assert c.request(P.HEARTBEAT, heartbeat_body(g, gen, "who")) == {"error_code": E.UNKNOWN_MEMBER_ID}

        r = c.request(
            P.OFFSET_COMMIT, commit_body(g, gen, mid, {("t1", 0): 10, ("t1", 1): 11, ("t2", 0): 20})
        )
        assert all(p["error_code"] == 0 for t in r["topics"] for p in t["partitions"])
        r = c.request(P.OFFSET_FETCH, fetch_body(g))
        assert committed(r) == {("t1", 0): 10, ("t1", 1): 11, ("t2", 0): 20}
        r = c.request(P.OFFSET_FETCH, fetch_body(g, {"t1": [1, 5]}))
        assert r["error_code"] == 0
        parts = {p["partition_index"]: p["committed_offset"] for p in r["topics"][0]["partitions"]}
        assert parts == {1: 11, 5: -1}

        r = c.request(P.DESCRIBE_GROUPS, {"groups": [g]})
        (d,) = r["groups"]
        assert (d["error_code"], d["group_state"], d["protocol_type"], d["protocol_data"]) == (
            0,
            "Stable",
            "consumer",
            "range",
        )
        assert [(m["member_id"], m["client_id"], m["member_assignment"]) for m in d["members"]] == [
            (mid, "solo", b"a0")
        ]
        r = c.request(P.LIST_GROUPS, {"states_filter": ["stable"]})
        assert {"group_id": g, "protocol_type": "consumer", "group_state": "Stable"} in r["groups"]

        # OffsetDelete on a non-empty consumer group: subscribed topics are refused. The subscription
        # of this member is empty bytes (unparseable), so every topic counts as subscribed.
        r = c.request(
            P.OFFSET_DELETE,
            {"group_id": g, "topics": [{"name": "t2", "partitions": [{"partition_index": 0}]}]},
        )
        assert r["error_code"] == 0
        assert r["topics"][0]["partitions"][0]["error_code"] == E.GROUP_SUBSCRIBED_TO_TOPIC
        assert c.request(P.DELETE_GROUPS, {"groups_names": [g]})["results"] == [
            {"group_id": g, "error_code": E.NON_EMPTY_GROUP}
        ]

        r = c.request(P.LEAVE_GROUP, leave_body(g, mid))
        assert r == {
            "error_code": 0,
            "members": [{"member_id": mid, "group_instance_id": None, "error_code": 0}],
        }
        assert c.request(P.DESCRIBE_GROUPS, {"groups": [g]})["groups"][0]["group_state"] == "Empty"
        r = c.request(
            P.OFFSET_DELETE,
            {"group_id": g, "topics": [{"name": "t2", "partitions": [{"partition_index": 0}]}]},
        )
        assert r["topics"][0]["partitions"][0]["error_code"] == 0
        assert committed(c.request(P.OFFSET_FETCH, fetch_body(g))) == {("t1", 0): 10, ("t1", 1): 11}

        missing = _group()
        assert c.request(P.DELETE_GROUPS, {"groups_names": [g, missing]})["results"] == [
            {"group_id": g, "error_code": 0},
            {"group_id": missing, "error_code": E.GROUP_ID_NOT_FOUND},
        ]
        assert committed(c.request(P.OFFSET_FETCH, fetch_body(g))) == {}


def test_delete_groups_and_offsets_of_a_simple_group_reach_zookeeper(node):
    g = _group()
    with node.client() as c:
        r = c.request(P.OFFSET_COMMIT, commit_body(g, -1, "", {("t", 3): 42}, metadata="m"))
        assert r["topics"][0]["partitions"][0]["error_code"] == 0
        zk = connect(node.zk, session_timeout=4.0)
        try:
            from coordinator.layout import offset_path

            stored = json.loads(zk.get(offset_path(g, "t", 3))[0])
            assert stored["offset"] == 42 and stored["metadata"] == "m" and stored["generation"] == -1
            missing = _group()
            # Enough offsets that deleting them takes several transactions (500 znodes each).
            many = {("t", p): p for p in range(1500)}
            r = c.request(P.OFFSET_COMMIT, commit_body(g, -1, "", many))
            assert {p["error_code"] for p in r["topics"][0]["partitions"]} == {0}
            r = c.request(P.DELETE_GROUPS, {"groups_names": [g, missing]})
            assert r["results"] == [{"group_id": g, "error_code": 0}, {"group_id": missing, "error_code": 69}]
            # Answered once the deletion is written: a group said deleted is gone from ZooKeeper.
            assert not zk.exists(f"/groupshift/groups/{g}")
        finally:
            zk.stop()
            zk.close()


def test_pre_check_errors(node):
    with node.client() as c:
        r = c.request(P.JOIN_GROUP, join_body(""))
        assert r["error_code"] == E.INVALID_GROUP_ID
        r = c.request(P.JOIN_GROUP, join_body(_group(), session_timeout_ms=50))
        assert r["error_code"] == E.INVALID_SESSION_TIMEOUT
        assert c.request(P.HEARTBEAT, heartbeat_body(_group(), 1, "m"))["error_code"] == E.UNKNOWN_MEMBER_ID


# ------------------------------------------------------------------------- a 3-member group


def test_three_members_join_sync_heartbeat_commit_leave(node):
    g = _group()
    clients = [node.client(f"c{i}") for i in range(3)]
    try:
        ids = [_join_new(c, g) for c in clients]
        for c, mid in zip(clients, ids, strict=True):
            c.send(P.JOIN_GROUP, join_body(g, mid, protocols=[("range", mid.encode())]))
        joins = [c.recv()[1] for c in clients]  # parked until the initial delay completes the round
        assert {j["error_code"] for j in joins} == {0}
        gen = joins[0]["generation_id"]
        assert gen >= 1 and {j["generation_id"] for j in joins} == {gen}
        leader = joins[0]["leader"]
        assert leader in ids and {j["leader"] for j in joins} == {leader}
        for j, mid in zip(joins, ids, strict=True):
            assert j["member_id"] == mid
            if mid == leader:
                # Join order, which is arrival order across three sockets here.
                assert sorted(m["member_id"] for m in j["members"]) == sorted(ids)
                assert all(m["metadata"] == m["member_id"].encode() for m in j["members"])
            else:
                assert j["members"] == []

        # Followers sync first and wait; the leader's assignment releases everyone.
        li = ids.index(leader)
        order = [i for i in range(3) if i != li] + [li]
        assignment = {mid: f"part-{i}".encode() for i, mid in enumerate(ids)}
        for i in order:
            c = clients[i]
            c.send(P.SYNC_GROUP, sync_body(g, gen, ids[i], assignment if i == li else None))
        for i, c in enumerate(clients):
            r = c.recv()[1]
            assert r == {
                "error_code": 0,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignment": assignment[ids[i]],
            }
        for c, mid in zip(clients, ids, strict=True):
            assert c.request(P.HEARTBEAT, heartbeat_body(g, gen, mid))["error_code"] == 0
        for i, (c, mid) in enumerate(zip(clients, ids, strict=True)):
            r = c.request(P.OFFSET_COMMIT, commit_body(g, gen, mid, {("events", i): 100 + i}))
            assert r["topics"][0]["partitions"][0]["error_code"] == 0
        assert committed(clients[0].request(P.OFFSET_FETCH, fetch_body(g))) == {
            ("events", 0): 100,
            ("events", 1): 101,
            ("events", 2): 102,
        }

        # One member leaves: the others learn about the rebalance from their heartbeats and rejoin.
        assert clients[2].request(P.LEAVE_GROUP, leave_body(g, ids[2]))["members"][0]["error_code"] == 0
        for c, mid in zip(clients[:2], ids[:2], strict=True):
            assert (
                c.request(P.HEARTBEAT, heartbeat_body(g, gen, mid))["error_code"] == E.REBALANCE_IN_PROGRESS
            )
        for c, mid in zip(clients[:2], ids[:2], strict=True):
            c.send(P.JOIN_GROUP, join_body(g, mid, protocols=[("range", mid.encode())]))
        joins = [c.recv()[1] for c in clients[:2]]
        assert {j["generation_id"] for j in joins} == {gen + 1}
        new_leader = joins[0]["leader"]
        for c, mid in zip(clients[:2], ids[:2], strict=True):
            c.send(
                P.SYNC_GROUP,
                sync_body(g, gen + 1, mid, {ids[0]: b"x", ids[1]: b"y"} if mid == new_leader else None),
            )
        assert [c.recv()[1]["assignment"] for c in clients[:2]] == [b"x", b"y"]
        desc = clients[0].request(P.DESCRIBE_GROUPS, {"groups": [g]})["groups"][0]
        assert desc["group_state"] == "Stable" and len(desc["members"]) == 2

        r = clients[0].request(P.LEAVE_GROUP, leave_body(g, ids[0], ids[1]))
        assert [m["error_code"] for m in r["members"]] == [0, 0]
        assert clients[0].request(P.DESCRIBE_GROUPS, {"groups": [g]})["groups"][0]["group_state"] == "Empty"
        assert committed(clients[0].request(P.OFFSET_FETCH, fetch_body(g)))[("events", 2)] == 102
    finally:
        for c in clients:
            c.close()


def test_a_parked_join_holds_back_later_requests_of_its_connection_only(node):
    g = _group()
    with node.client("a") as a, node.client("b") as b:
        mid = _join_new(a, g)
        t_join = time.monotonic()
        a.send(P.JOIN_GROUP, join_body(g, mid))  # parked for the initial rebalance delay (300 ms)
        a.send(P.API_VERSIONS, {})
        assert b.request(P.API_VERSIONS, {})["error_code"] == 0  # another connection is not held back
        if time.monotonic() - t_join < 0.25:  # (the machine was not too slow to tell)
            assert not select.select([a.sock], [], [], 0)[0]  # a's ApiVersions waits behind its join
        first_id, first = a.recv()
        second_id, _ = a.recv()
        assert first["error_code"] == 0 and first_id < second_id  # in order


# ------------------------------------------------------------------------------- bad input


def _raw(obj) -> bytes:
    return P.frame(msgspec.msgpack.encode(obj))


def _bystander(node):
    """A healthy member on its own connection, to show bad input elsewhere does not affect it."""
    g = _group()
    c, mid, gen = _single_member_group(node, g)
    return c, lambda: c.request(P.HEARTBEAT, heartbeat_body(g, gen, mid))["error_code"] == 0


ANSWERED = [
    (
        "wrong type",
        {"api": 12, "v": 0, "id": 7, "client_id": "x", "body": {"group_id": 5}},
        E.INVALID_REQUEST,
    ),
    (
        "missing key",
        {"api": 12, "v": 0, "id": 7, "client_id": "x", "body": {"group_id": "g"}},
        E.INVALID_REQUEST,
    ),
    ("body not a map", {"api": 18, "v": 0, "id": 7, "client_id": "x", "body": [1, 2]}, E.INVALID_REQUEST),
    (
        "bytes as str",
        {
            "api": 11,
            "v": 0,
            "id": 7,
            "client_id": "x",
            "body": {**join_body("g"), "protocols": [{"name": "r", "metadata": "s"}]},
        },
        E.INVALID_REQUEST,
    ),
    ("no client_id", {"api": 18, "v": 0, "id": 7, "body": {}}, E.INVALID_REQUEST),
    (
        "bool as int",
        {
            "api": 12,
            "v": 0,
            "id": 7,
            "client_id": "x",
            "body": {**heartbeat_body("g", 1, "m"), "generation_id": True},
        },
        E.INVALID_REQUEST,
    ),
    (
        "int32 overflow",
        {"api": 12, "v": 0, "id": 7, "client_id": "x", "body": heartbeat_body("g", 2**31, "m")},
        E.INVALID_REQUEST,
    ),
    ("unknown api", {"api": 99, "v": 0, "id": 7, "client_id": "x", "body": {}}, E.UNSUPPORTED_VERSION),
    (
        "unknown version",
        {"api": 12, "v": 3, "id": 7, "client_id": "x", "body": heartbeat_body("g", 1, "m")},
        E.UNSUPPORTED_VERSION,
    ),
]


@pytest.mark.parametrize("name,request_map,code", ANSWERED, ids=[a[0] for a in ANSWERED])
def test_malformed_requests_are_answered(node, name, request_map, code):
    with node.client() as c:
        c.send_raw(_raw(request_map))
        rid, body = c.recv()
        assert rid == 7 and body["error_code"] == code and isinstance(body["error_message"], str)
        assert c.request(P.API_VERSIONS, {})["error_code"] == 0  # the connection stays usable


CLOSED = [
    ("not messagepack", P.frame(b"\xc1\xc1\xc1")),
    ("not a map", _raw([1, 2, 3])),
    ("no id", _raw({"api": 18, "v": 0, "client_id": "x", "body": {}})),
    ("id not int", _raw({"api": 18, "v": 0, "id": "7", "client_id": "x", "body": {}})),
    ("id out of range", _raw({"api": 18, "v": 0, "id": 2**40, "client_id": "x", "body": {}})),
    ("empty frame", P.frame(b"")),
    ("oversize", struct.pack(">I", (1 << 20) + 1) + b"\x80" * 100),
    ("trailing bytes", P.frame(msgspec.msgpack.encode({"api": 18}) + b"\x00")),
]


@pytest.mark.parametrize("name,data", CLOSED, ids=[c[0] for c in CLOSED])
def test_unreadable_frames_close_only_their_connection(node, name, data):
    other, healthy = _bystander(node)
    with other, node.client() as c:
        c.send_raw(data)
        assert c.is_closed_by_peer(5.0)
        assert healthy()


def test_truncated_frame_is_closed_after_the_frame_timeout(node):
    other, healthy = _bystander(node)
    with other, node.client() as c:
        full = P.encode_request(P.API_VERSIONS, 1, {})
        c.send_raw(full[: len(full) - 3])
        t0 = time.monotonic()
        assert healthy()
        assert c.is_closed_by_peer(5.0)
        assert 0.8 < time.monotonic() - t0 < 4.0
        assert healthy()


def test_a_thousand_mutated_frames_never_stop_the_node(node):
    rng = random.Random(7)
    other, healthy = _bystander(node)
    g = _group()
    seeds = [
        msgspec.msgpack.encode({"api": api, "v": 0, "id": i, "client_id": "fz", "body": body})
        for i, (api, body) in enumerate(
            [
                (P.JOIN_GROUP, join_body(g, "")),
                (P.SYNC_GROUP, sync_body(g, 1, "m", {"m": b"x"})),
                (P.HEARTBEAT, heartbeat_body(g, 1, "m")),
                (P.OFFSET_COMMIT, commit_body(g, -1, "", {("t", 0): 1})),
                (P.OFFSET_FETCH, fetch_body(g, {"t": [0]})),
                (P.LEAVE_GROUP, leave_body(g, "m")),
                (P.DESCRIBE_GROUPS, {"groups": [g]}),
                (P.LIST_GROUPS, {"states_filter": []}),
                (P.DELETE_GROUPS, {"groups_names": [g]}),
                (
                    P.OFFSET_DELETE,
                    {"group_id": g, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]},
                ),
                (P.FIND_COORDINATOR, {"key": g, "key_type": 0}),
                (P.API_VERSIONS, {}),
            ]
        )
    ]
    sent = 0
    c = None
    with other:
        while sent < 1000:
            if c is None:
                c = node.client("fuzz", timeout=2.0)
            payload = bytearray(rng.choice(seeds))
            for _ in range(rng.randint(1, 4)):
                if not payload:
                    break
                op = rng.random()
                pos = rng.randrange(len(payload))
                if op < 0.5:
                    payload[pos] = rng.randrange(256)
                elif op < 0.7:
                    del payload[pos]
                elif op < 0.9:
                    payload.insert(pos, rng.randrange(256))
                else:
                    payload = payload[:pos]
            try:
                c.send_raw(P.frame(bytes(payload)))
                sent += 1
                c.recv(timeout=0.5)  # answered, or closed (WireError), or parked (a valid JoinGroup)
            except (WireError, OSError):
                c.close()
                c = None
        if c is not None:
            c.close()
        assert node.alive
        assert healthy()
        with node.client() as fresh:
            assert fresh.request(P.API_VERSIONS, {})["error_code"] == 0


def test_connection_flood_is_bounded(zk_connect, tmp_path):
    with NodeProcess.start(zk_connect, 5, "--max-connections", "20", log_path=tmp_path / "n5.log") as n:
        socks = [socket.create_connection((n.host, n.port)) for _ in range(40)]
        try:
            time.sleep(0.5)
            answered = 0
            for s in socks:
                s.settimeout(2.0)
                try:
                    s.sendall(P.encode_request(P.API_VERSIONS, 1, {}))
                    if s.recv(4):
                        answered += 1
                except OSError:
                    pass
            assert answered == 20
        finally:
            for s in socks:
                s.close()
        with n.client() as c:  # slots free again once the flood is gone
            assert c.request(P.API_VERSIONS, {})["error_code"] == 0


def test_idle_connections_are_closed(zk_connect, tmp_path):
    with NodeProcess.start(
        zk_connect, 6, "--connections-max-idle-ms", "800", log_path=tmp_path / "n6.log"
    ) as n:
        with n.client() as c:
            assert c.request(P.API_VERSIONS, {})["error_code"] == 0
            assert c.is_closed_by_peer(5.0)


# ------------------------------------------------------------------------ metrics, shutdown


def test_metrics_endpoint_reports_groups_latency_and_errors(node):
    g = _group()
    c, mid, gen = _single_member_group(node, g)
    with c:
        c.request(P.HEARTBEAT, heartbeat_body(g, gen + 1, mid))  # an ILLEGAL_GENERATION
        port = _metrics_port(node)
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'groupshift_coordinator_groups{state="Stable"}' in text
    assert "groupshift_coordinator_members " in text
    assert "groupshift_coordinator_rebalances_total" in text
    assert 'groupshift_coordinator_request_latency_seconds_bucket{api="Heartbeat",le="+Inf"}' in text
    assert 'groupshift_coordinator_errors_total{api="Heartbeat",code="22"}' in text
    stable = [
        ln for ln in text.splitlines() if ln.startswith('groupshift_coordinator_groups{state="Stable"}')
    ]
    assert int(stable[0].split()[-1]) >= 1


def _metrics_port(node) -> int:
    for line in node.log_path.read_text().splitlines():
        if not line.startswith("{"):
            continue  # the node's stdout (`listening on ...`) shares the log
        rec = json.loads(line)
        if rec.get("metrics_port"):
            return rec["metrics_port"]
    raise AssertionError("no metrics port logged")


def test_sigterm_releases_shards_and_registrations(zk, zk_connect, tmp_path):
    n = NodeProcess.start(zk_connect, 7, "--shards", "8", log_path=tmp_path / "n7.log")
    assert zk.exists(f"{BROKERS}/7") and zk.exists(f"{COORDINATORS}/7")
    leaders = [json.loads(zk.get(f"/groupshift/shards/{s}/leader")[0]) for s in range(8)]
    assert {(ld["node"], ld["port"]) for ld in leaders} == {(7, n.port)}
    assert n.terminate() == 0
    assert not zk.exists(f"{BROKERS}/7") and not zk.exists(f"{COORDINATORS}/7")
    assert not any(zk.exists(f"/groupshift/shards/{s}/leader") for s in range(8))
