"""Black-box conformance suite for the coordinator wire protocol (docs/protocol.md + Kafka's classic
coordinator).

Written from the two specs only: real `groupshift coordinator serve` processes on a real ZooKeeper,
raw TCP with our own framing (4-byte big-endian length + one MessagePack map), nothing imported
from `coordinator/`. Most tests share one fast node (min session 100 ms, no initial delay) and use
their own group ids; tests that need other broker settings, or that stop the node, start their own.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field

import msgspec
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# API keys (docs/protocol.md)
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, JOIN, HEARTBEAT, LEAVE, SYNC = 8, 9, 10, 11, 12, 13, 14
DESCRIBE, LIST, API_VERSIONS, DELETE_GROUPS, OFFSET_DELETE = 15, 16, 18, 42, 47
ALL_APIS = {8, 9, 10, 11, 12, 13, 14, 15, 16, 18, 42, 47}

# Error codes (Kafka's)
NONE = 0
OFFSET_METADATA_TOO_LARGE = 12
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

UUID4 = r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}"
LONG = 20000  # a session / rebalance timeout that never fires during a test

ENC = msgspec.msgpack.Encoder()
DEC = msgspec.msgpack.Decoder()

# 4 shards, not 50: a node starts faster, and no case here depends on the count
FAST = ["--group-min-session-timeout-ms", "100", "--group-initial-rebalance-delay-ms", "0", "--shards", "4"]


# --------------------------------------------------------------------------------------------
# wire


class Closed(Exception):
    pass


class Conn:
    """One TCP connection speaking the framing of docs/protocol.md."""

    def __init__(self, addr: tuple[str, int], client_id: str = "conformance"):
        self.sock = socket.create_connection(addr, timeout=10)
        self.client_id = client_id
        self._next = 0
        self._buf = b""

    def close(self) -> None:
        self.sock.close()

    def send_frame(self, payload: bytes) -> None:
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def send_obj(self, obj) -> None:
        self.send_frame(ENC.encode(obj))

    def send(self, api: int, body: dict, *, v: int = 0, client_id: str | None = None) -> int:
        self._next += 1
        self.send_obj(
            {
                "api": api,
                "v": v,
                "id": self._next,
                "client_id": self.client_id if client_id is None else client_id,
                "body": body,
            }
        )
        return self._next

    def _fill(self, n: int, deadline: float) -> None:
        while len(self._buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError as exc:
                raise TimeoutError from exc
            except (ConnectionResetError, BrokenPipeError) as exc:
                raise Closed from exc
            if not chunk:
                raise Closed
            self._buf += chunk

    def recv_frame(self, timeout: float = 10.0) -> dict:
        deadline = time.monotonic() + timeout
        self._fill(4, deadline)
        (n,) = struct.unpack(">I", self._buf[:4])
        self._fill(4 + n, deadline)
        payload, self._buf = self._buf[4 : 4 + n], self._buf[4 + n :]
        msg = DEC.decode(payload)
        assert isinstance(msg, dict) and set(msg) >= {"id", "body"}, msg
        return msg

    def recv(self, cid: int, timeout: float = 10.0) -> dict:
        msg = self.recv_frame(timeout)
        assert msg["id"] == cid, (msg, cid)
        return msg["body"]

    def call(self, api: int, body: dict, **kw) -> dict:
        return self.recv(self.send(api, body, **kw))

    def silent_for(self, seconds: float) -> bool:
        try:
            self.recv_frame(seconds)
        except TimeoutError:
            return True
        return False

    def is_closed(self, timeout: float = 5.0) -> bool:
        try:
            msg = self.recv_frame(timeout)
        except Closed:
            return True
        except TimeoutError:
            return False
        raise AssertionError(f"expected the connection to be closed, got {msg}")


# --------------------------------------------------------------------------------------------
# nodes


class Node:
    def __init__(self, zk: str, node_id: int, extra: list[str], log_dir: str):
        self.log = open(os.path.join(log_dir, f"node-{node_id}-{uuid.uuid4().hex[:6]}.log"), "w+b")  # noqa: SIM115
        cmd = [sys.executable, "-m", "cli", "coordinator", "serve", "--zk", zk, "--listen", "127.0.0.1:0"]
        cmd += ["--node-id", str(node_id), *extra]
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=self.log)
        line = self._read_line(60.0)
        m = re.fullmatch(r"listening on (\S+):(\d+)", line.strip())
        assert m, f"unexpected first line {line!r}\n{self.stderr()}"
        self.host, self.port = m.group(1), int(m.group(2))
        threading.Thread(target=self.proc.stdout.read, daemon=True).start()  # drain stdout
        self.node_id = node_id
        self.admin = self.connect("admin")

    def _read_line(self, timeout: float) -> str:
        out: list[bytes] = []
        t = threading.Thread(target=lambda: out.append(self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        if not out or not out[0]:
            self.stop()
            raise AssertionError(f"node did not print `listening on`:\n{self.stderr()}")
        return out[0].decode()

    def stderr(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-5000:]

    def connect(self, client_id: str = "conformance") -> Conn:
        return Conn((self.host, self.port), client_id)

    def stop(self) -> int | None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    # admin helpers
    def describe(self, group: str) -> dict:
        body = self.admin.call(DESCRIBE, {"groups": [group]})
        assert len(body["groups"]) == 1
        return body["groups"][0]

    def state(self, group: str) -> str:
        return self.describe(group)["group_state"]

    def wait_state(self, group: str, state: str, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while (current := self.state(group)) != state:
            assert time.monotonic() < deadline, f"group {group} stuck in {current}, wanted {state}"
            time.sleep(0.01)


@pytest.fixture(scope="module")
def node(module_zk_connect, tmp_path_factory):
    """One fast node shared by the module (its own chroot, like `zk_connect`)."""
    zk = module_zk_connect
    n = Node(zk, 1, FAST, str(tmp_path_factory.mktemp("conformance")))
    yield n
    n.stop()


@pytest.fixture
def start_node(zk_connect, tmp_path):
    """Factory for a dedicated node on this test's fresh chroot."""
    nodes: list[Node] = []

    def start(*extra: str, node_id: int = 1) -> Node:
        n = Node(zk_connect, node_id, list(extra), str(tmp_path))
        nodes.append(n)
        return n

    yield start
    for n in nodes:
        n.stop()


def gid(prefix: str = "g") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


# --------------------------------------------------------------------------------------------
# request bodies and a member driver


def subscription(*topics: str) -> bytes:
    return ENC.encode(
        {
            "version": 0,
            "topics": list(topics),
            "user_data": None,
            "owned_partitions": [],
            "generation_id": -1,
            "rack_id": None,
        }
    )


def assignment(topic: str, *parts: int) -> bytes:
    return ENC.encode(
        {
            "version": 0,
            "assigned_partitions": [{"topic": topic, "partitions": list(parts)}],
            "user_data": None,
        }
    )


META = subscription("t1")


def join_body(
    group: str,
    member_id: str = "",
    *,
    instance: str | None = None,
    protocols=(("range", META),),
    session: int = LONG,
    rebalance: int = LONG,
    protocol_type: str = "consumer",
) -> dict:
    return {
        "group_id": group,
        "session_timeout_ms": session,
        "rebalance_timeout_ms": rebalance,
        "member_id": member_id,
        "group_instance_id": instance,
        "protocol_type": protocol_type,
        "protocols": [{"name": n, "metadata": m} for n, m in protocols],
        "reason": None,
    }


def commit_body(
    group: str, generation: int, member_id: str, offsets: dict, instance: str | None = None
) -> dict:
    topics: dict[str, list] = {}
    for (topic, part), off in offsets.items():
        topics.setdefault(topic, []).append(
            {"partition_index": part, "committed_offset": off, "committed_metadata": f"m{off}"}
        )
    return {
        "group_id": group,
        "generation_id": generation,
        "member_id": member_id,
        "group_instance_id": instance,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def commit_errors(resp: dict) -> dict:
    return {
        (t["name"], p["partition_index"]): p["error_code"] for t in resp["topics"] for p in t["partitions"]
    }


def fetch(conn: Conn, group: str, topics: dict | None) -> dict:
    body = {
        "group_id": group,
        "topics": None
        if topics is None
        else [{"name": t, "partition_indexes": ps} for t, ps in topics.items()],
    }
    resp = conn.call(OFFSET_FETCH, body)
    assert resp["error_code"] == NONE, resp
    out = {}
    for t in resp["topics"]:
        for p in t["partitions"]:
            assert p["error_code"] == NONE, resp
            out[(t["name"], p["partition_index"])] = (p["committed_offset"], p["metadata"])
    return out


@dataclass
class Member:
    node: Node
    group: str
    instance: str | None = None
    protocols: tuple = (("range", META),)
    session: int = LONG
    rebalance: int = LONG
    client_id: str = "conformance"
    member_id: str = ""
    generation: int = -1
    leader: str = ""
    last_join: dict = field(default_factory=dict)

    def __post_init__(self):
        self.conn = self.node.connect(self.client_id)

    def _join_body(self) -> dict:
        return join_body(
            self.group,
            self.member_id,
            instance=self.instance,
            protocols=self.protocols,
            session=self.session,
            rebalance=self.rebalance,
        )

    def start_join(self) -> int:
        """Send a JoinGroup (first doing the MEMBER_ID_REQUIRED round for a new dynamic member)."""
        if not self.member_id and self.instance is None:
            r = self.conn.call(JOIN, self._join_body())
            assert r["error_code"] == MEMBER_ID_REQUIRED, r
            assert r["generation_id"] == -1
            self.member_id = r["member_id"]
        return self.conn.send(JOIN, self._join_body())

    def finish_join(self, cid: int, timeout: float = 10.0) -> dict:
        r = self.conn.recv(cid, timeout)
        self.last_join = r
        if r["error_code"] == NONE:
            self.member_id, self.generation, self.leader = r["member_id"], r["generation_id"], r["leader"]
        return r

    def join(self) -> dict:
        return self.finish_join(self.start_join())

    def sync_body(self, assignments: dict | None = None, generation: int | None = None) -> dict:
        return {
            "group_id": self.group,
            "generation_id": self.generation if generation is None else generation,
            "member_id": self.member_id,
            "group_instance_id": self.instance,
            "protocol_type": "consumer",
            "protocol_name": self.last_join.get("protocol_name"),
            "assignments": [{"member_id": m, "assignment": a} for m, a in (assignments or {}).items()],
        }

    def sync(self, assignments: dict | None = None, **kw) -> dict:
        return self.conn.call(SYNC, self.sync_body(assignments, **kw))

    def heartbeat(
        self, generation: int | None = None, member_id: str | None = None, conn: Conn | None = None
    ) -> int:
        body = {
            "group_id": self.group,
            "generation_id": self.generation if generation is None else generation,
            "member_id": self.member_id if member_id is None else member_id,
            "group_instance_id": self.instance,
        }
        return (conn or self.conn).call(HEARTBEAT, body)["error_code"]

    def leave(self) -> dict:
        body = {
            "group_id": self.group,
            "members": [{"member_id": self.member_id, "group_instance_id": self.instance, "reason": None}],
        }
        return self.conn.call(LEAVE, body)

    def commit(self, offsets: dict, generation: int | None = None) -> dict:
        gen = self.generation if generation is None else generation
        resp = self.conn.call(
            OFFSET_COMMIT, commit_body(self.group, gen, self.member_id, offsets, self.instance)
        )
        return commit_errors(resp)


def form_group(node: Node, group: str, members: list[Member], *, sync: bool = True) -> list[Member]:
    """Bring `members` into one generation the way real clients do: each new member joins, the group
    goes PreparingRebalance, the existing members rejoin. Then (optionally) sync: the leader (the
    first member) hands out `assignment(t1, i)`."""
    joined: list[Member] = []
    for m in members:
        cid = m.start_join()
        if joined:
            node.wait_state(group, "PreparingRebalance")
            cids = [(o, o.start_join()) for o in joined]
            for o, c in cids:
                assert o.finish_join(c)["error_code"] == NONE, o.last_join
        assert m.finish_join(cid)["error_code"] == NONE, m.last_join
        joined.append(m)
    gens = {m.generation for m in members}
    assert len(gens) == 1, gens
    if sync:
        sync_all(members)
    return members


def sync_all(members: list[Member]) -> dict:
    leader = next(m for m in members if m.member_id == m.leader)
    followers = [m for m in members if m is not leader]
    pending = [(f, f.conn.send(SYNC, f.sync_body())) for f in followers]
    plan = {m.member_id: assignment("t1", i) for i, m in enumerate(members)}
    r = leader.sync(plan)
    assert r["error_code"] == NONE, r
    out = {leader.member_id: r}
    for f, c in pending:
        out[f.member_id] = f.conn.recv(c)
        assert out[f.member_id]["error_code"] == NONE, out[f.member_id]
    return out


# ============================================================================================
# discovery


def test_api_versions_lists_every_api_at_version_0(node):
    body = node.admin.call(API_VERSIONS, {})
    assert body["error_code"] == NONE
    keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body["api_keys"]}
    assert ALL_APIS <= set(keys), keys
    for api in ALL_APIS:
        assert keys[api] == (0, 0), (api, keys[api])


def test_find_coordinator_names_this_node(node):
    body = node.admin.call(FIND_COORDINATOR, {"key": gid(), "key_type": 0})
    assert body["error_code"] == NONE, body
    assert (body["node_id"], body["host"], body["port"]) == (1, node.host, node.port)


# ============================================================================================
# JoinGroup / SyncGroup


def test_member_id_required_then_join_single_member(node):
    g = gid()
    conn = node.connect("my-client")
    r = conn.call(JOIN, join_body(g))
    assert r["error_code"] == MEMBER_ID_REQUIRED
    assert r["generation_id"] == -1
    assert re.fullmatch(rf"my-client-{UUID4}", r["member_id"]), r["member_id"]
    mid = r["member_id"]
    # no state change, no rebalance: the group has no members yet
    d = node.describe(g)
    assert d["group_state"] in ("Empty", "Dead") and d["members"] == []
    # a second "" join gets another id
    r2 = conn.call(JOIN, join_body(g))
    assert r2["error_code"] == MEMBER_ID_REQUIRED and r2["member_id"] != mid

    r = conn.call(JOIN, join_body(g, mid))
    assert r["error_code"] == NONE, r
    assert r["member_id"] == mid and r["leader"] == mid
    assert r["generation_id"] == 1
    assert r["protocol_type"] == "consumer" and r["protocol_name"] == "range"
    assert r["members"] == [{"member_id": mid, "group_instance_id": None, "metadata": META}]
    # CompletingRebalance until the leader syncs
    assert node.state(g) == "CompletingRebalance"
    s = conn.call(
        SYNC,
        {
            "group_id": g,
            "generation_id": 1,
            "member_id": mid,
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": mid, "assignment": assignment("t1", 0, 1)}],
        },
    )
    assert s == {**s, "error_code": NONE, "protocol_type": "consumer", "protocol_name": "range"}
    assert s["assignment"] == assignment("t1", 0, 1)
    assert node.state(g) == "Stable"


def test_static_member_gets_instance_prefixed_id_without_member_id_required(node):
    g = gid()
    conn = node.connect("cli")
    r = conn.call(JOIN, join_body(g, instance="inst-7"))
    assert r["error_code"] == NONE, r
    assert re.fullmatch(rf"inst-7-{UUID4}", r["member_id"]), r["member_id"]
    assert r["generation_id"] == 1 and r["leader"] == r["member_id"]
    assert r["members"] == [{"member_id": r["member_id"], "group_instance_id": "inst-7", "metadata": META}]


def test_three_members_leader_gets_list_followers_empty_generation_increments(node):
    g = gid()
    ms = [Member(node, g, client_id=f"c{i}") for i in range(3)]
    a, b, c = ms
    assert a.join()["generation_id"] == 1
    # b joins: PreparingRebalance until a rejoins
    cb = b.start_join()
    node.wait_state(g, "PreparingRebalance")
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    assert b.conn.silent_for(0.2)  # parked
    ra = a.join()
    rb = b.finish_join(cb)
    assert ra["generation_id"] == rb["generation_id"] == 2
    # c joins
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    pend = [(m, m.start_join()) for m in (a, b)]
    rc = c.finish_join(cc)
    for m, cid in pend:
        m.finish_join(cid)
    for m in ms:
        r = m.last_join
        assert r["error_code"] == NONE
        assert r["generation_id"] == 3
        assert r["leader"] == a.member_id
        assert r["protocol_name"] == "range" and r["protocol_type"] == "consumer"
    assert {x["member_id"] for x in a.last_join["members"]} == {m.member_id for m in ms}
    assert all(x["metadata"] == META for x in a.last_join["members"])
    assert b.last_join["members"] == [] and rc["members"] == []
    # SyncGroup: followers wait for the leader; a member missing from the plan gets empty bytes
    pending = [(m, m.conn.send(SYNC, m.sync_body())) for m in (b, c)]
    assert b.conn.silent_for(0.2)
    r = a.sync({a.member_id: assignment("t1", 0), b.member_id: assignment("t1", 1), "nobody": b"x"})
    assert r["error_code"] == NONE and r["assignment"] == assignment("t1", 0)
    sb = b.conn.recv(pending[0][1])
    sc = c.conn.recv(pending[1][1])
    assert sb["error_code"] == NONE and sb["assignment"] == assignment("t1", 1)
    assert sb["protocol_name"] == "range"
    assert sc["error_code"] == NONE and sc["assignment"] == b""
    assert node.state(g) == "Stable"
    for m in ms:
        assert m.heartbeat() == NONE
    # a follower rejoining unchanged in Stable is answered at once, no rebalance
    r = b.join()
    assert r["error_code"] == NONE and r["generation_id"] == 3 and r["members"] == []
    assert r["leader"] == a.member_id
    assert node.state(g) == "Stable"
    # SyncGroup in Stable returns the stored assignment, ignoring the request's plan
    r = b.sync({b.member_id: b"ignored"})
    assert r["error_code"] == NONE and r["assignment"] == assignment("t1", 1)


def test_protocol_vote(node):
    g = gid()
    rr = ("roundrobin", META)
    rg = ("range", META)
    a = Member(node, g, protocols=(rg, rr))
    b = Member(node, g, protocols=(rr, rg))
    c = Member(node, g, protocols=(rr, rg))
    form_group(node, g, [a, b, c], sync=False)
    assert {m.last_join["protocol_name"] for m in (a, b, c)} == {"roundrobin"}
    # only common candidate wins even against a first choice
    g2 = gid()
    a = Member(node, g2, protocols=(rg, rr))
    b = Member(node, g2, protocols=(rr, ("blah", META)))
    form_group(node, g2, [a, b], sync=False)
    assert {m.last_join["protocol_name"] for m in (a, b)} == {"roundrobin"}
    # the leader's member list carries the metadata of the selected protocol
    a2 = Member(node, gid(), protocols=(("range", b"R"), ("roundrobin", b"RR")))
    b2 = Member(node, a2.group, protocols=(("roundrobin", b"RR2"),))
    form_group(node, a2.group, [a2, b2], sync=False)
    meta = {x["member_id"]: x["metadata"] for x in a2.last_join["members"]}
    assert meta == {a2.member_id: b"RR", b2.member_id: b"RR2"}


def test_inconsistent_group_protocol(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    conn = node.connect()
    # different protocol type: rejected before a member id is generated
    r = conn.call(JOIN, join_body(g, protocol_type="connect"))
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL and r["member_id"] == ""
    # no protocol shared with every member
    r = conn.call(JOIN, join_body(g, protocols=(("roundrobin", META),)))
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL and r["member_id"] == ""
    # a lone member cannot switch to a disjoint protocol list with its known id
    r = a.conn.call(JOIN, join_body(g, a.member_id, protocols=(("roundrobin", META),)))
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    # Empty group: empty protocol type or empty protocol list is rejected
    g2 = gid()
    r = conn.call(JOIN, join_body(g2, protocol_type=""))
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    r = conn.call(JOIN, join_body(g2, protocols=()))
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    # SyncGroup with a different protocol name
    body = a.sync_body()
    body["protocol_name"] = "roundrobin"
    assert a.conn.call(SYNC, body)["error_code"] == INCONSISTENT_GROUP_PROTOCOL


def test_join_errors_unknown_member_and_known_member_on_absent_group(node):
    g = gid()
    conn = node.connect()
    r = conn.call(JOIN, join_body(g, "ghost"))
    assert r["error_code"] == UNKNOWN_MEMBER_ID
    assert r["generation_id"] == -1
    a = Member(node, g)
    form_group(node, g, [a])
    r = conn.call(JOIN, join_body(g, "ghost"))
    assert r["error_code"] == UNKNOWN_MEMBER_ID


def test_sync_group_errors(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b])
    assert a.sync(generation=a.generation + 1)["error_code"] == ILLEGAL_GENERATION
    body = a.sync_body()
    body["member_id"] = "ghost"
    assert a.conn.call(SYNC, body)["error_code"] == UNKNOWN_MEMBER_ID
    body = a.sync_body()
    body["group_id"] = gid()
    assert a.conn.call(SYNC, body)["error_code"] == UNKNOWN_MEMBER_ID
    # PreparingRebalance -> REBALANCE_IN_PROGRESS
    c = Member(node, g)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    assert b.sync()["error_code"] == REBALANCE_IN_PROGRESS
    # a parked SyncGroup is answered REBALANCE_IN_PROGRESS when a rebalance starts in CompletingRebalance
    pend = [(m, m.start_join()) for m in (a, b)]
    for m, cid in pend:
        assert m.finish_join(cid)["error_code"] == NONE
    assert c.finish_join(cc)["error_code"] == NONE
    cs = b.conn.send(SYNC, b.sync_body())
    assert b.conn.silent_for(0.2)
    d = Member(node, g)
    d.start_join()
    assert b.conn.recv(cs)["error_code"] == REBALANCE_IN_PROGRESS


# ============================================================================================
# Heartbeat


def test_heartbeat_errors_in_each_state(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    # absent group
    assert a.heartbeat(generation=0, member_id="ghost") == UNKNOWN_MEMBER_ID
    form_group(node, g, [a, b])
    gen = a.generation
    # Stable
    assert node.state(g) == "Stable"
    assert a.heartbeat() == NONE
    assert a.heartbeat(generation=gen + 1) == ILLEGAL_GENERATION
    assert a.heartbeat(member_id="ghost") == UNKNOWN_MEMBER_ID
    # PreparingRebalance: matching (old) generation -> REBALANCE_IN_PROGRESS
    c = Member(node, g)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    # c is a member already (its own connection is blocked by its parked JoinGroup)
    assert c.heartbeat(generation=gen, conn=node.admin) == REBALANCE_IN_PROGRESS
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    assert b.heartbeat() == REBALANCE_IN_PROGRESS
    assert a.heartbeat(generation=gen - 1) == ILLEGAL_GENERATION
    assert a.heartbeat(member_id="ghost") == UNKNOWN_MEMBER_ID
    # CompletingRebalance: NONE with the new generation, ILLEGAL_GENERATION with the old
    pend = [(m, m.start_join()) for m in (a, b)]
    for m, cid in pend:
        m.finish_join(cid)
    c.finish_join(cc)
    assert node.state(g) == "CompletingRebalance"
    assert a.generation == gen + 1
    assert a.heartbeat() == NONE
    assert c.heartbeat() == NONE
    assert b.heartbeat(generation=gen) == ILLEGAL_GENERATION
    # a pending member id is not a member
    conn = node.connect()
    pending = conn.call(JOIN, join_body(g))["member_id"]
    assert a.heartbeat(member_id=pending) == UNKNOWN_MEMBER_ID
    # Empty: everyone leaves. The pending member blocks the join phase until it leaves too.
    for m in (a, b, c):
        r = m.leave()
        assert r["error_code"] == NONE and [x["error_code"] for x in r["members"]] == [NONE]
    assert node.state(g) == "PreparingRebalance"
    body = {"group_id": g, "members": [{"member_id": pending, "group_instance_id": None, "reason": None}]}
    assert conn.call(LEAVE, body)["members"][0]["error_code"] == NONE
    node.wait_state(g, "Empty")
    assert a.heartbeat() == UNKNOWN_MEMBER_ID
    assert a.heartbeat(generation=-1) == UNKNOWN_MEMBER_ID


# ============================================================================================
# LeaveGroup


def test_leave_group_batch_with_per_member_errors(node):
    g = gid()
    inst = f"inst-{uuid.uuid4().hex[:6]}"
    a, b, s = Member(node, g), Member(node, g), Member(node, g, instance=inst)
    form_group(node, g, [a, b, s])
    body = {
        "group_id": g,
        "members": [
            {"member_id": b.member_id, "group_instance_id": None, "reason": "bye"},
            {"member_id": "ghost", "group_instance_id": None, "reason": None},
            {"member_id": "", "group_instance_id": "no-such-instance", "reason": None},
            {"member_id": a.member_id, "group_instance_id": "wrong-instance", "reason": None},
            {"member_id": "", "group_instance_id": inst, "reason": None},
        ],
    }
    r = a.conn.call(LEAVE, body)
    assert r["error_code"] == NONE
    assert [(x["member_id"], x["group_instance_id"], x["error_code"]) for x in r["members"]] == [
        (b.member_id, None, NONE),
        ("ghost", None, UNKNOWN_MEMBER_ID),
        ("", "no-such-instance", UNKNOWN_MEMBER_ID),
        (a.member_id, "wrong-instance", UNKNOWN_MEMBER_ID),
        ("", inst, NONE),
    ]
    # a remains, the group rebalances
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    r = a.join()
    assert r["generation_id"] == 4 and [x["member_id"] for x in r["members"]] == [a.member_id]
    # a static member named with its member id and a different instance's id -> FENCED_INSTANCE_ID
    g2 = gid()
    s1 = Member(node, g2, instance="i1")
    s2 = Member(node, g2, instance="i2")
    form_group(node, g2, [s1, s2])
    body = {
        "group_id": g2,
        "members": [{"member_id": s1.member_id, "group_instance_id": "i2", "reason": None}],
    }
    r = s1.conn.call(LEAVE, body)
    assert r["error_code"] == NONE and r["members"][0]["error_code"] == FENCED_INSTANCE_ID
    # absent group: top-level NONE, every member UNKNOWN_MEMBER_ID
    body = {"group_id": gid(), "members": [{"member_id": "x", "group_instance_id": None, "reason": None}] * 2}
    r = a.conn.call(LEAVE, body)
    assert r["error_code"] == NONE
    assert [x["error_code"] for x in r["members"]] == [UNKNOWN_MEMBER_ID] * 2


def test_leave_of_pending_member_and_last_member_empties_group(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    conn = node.connect()
    pending = conn.call(JOIN, join_body(g))["member_id"]
    body = {"group_id": g, "members": [{"member_id": pending, "group_instance_id": None, "reason": None}]}
    r = conn.call(LEAVE, body)
    assert r["members"][0]["error_code"] == NONE
    # the pending id is gone: rejoining with it is an unknown member
    assert conn.call(JOIN, join_body(g, pending))["error_code"] == UNKNOWN_MEMBER_ID
    assert a.leave()["members"][0]["error_code"] == NONE
    node.wait_state(g, "Empty")
    # the last member leaving Stable completes a join phase with no members: generation + 1
    b = Member(node, g)
    assert b.join()["generation_id"] == a.generation + 2


# ============================================================================================
# timers


def test_session_expiry_removes_member_and_rebalances(node):
    g = gid()
    b = Member(node, g, client_id="stays")
    a = Member(node, g, client_id="dies", session=300)
    form_group(node, g, [b, a])
    gen = b.generation
    deadline = time.monotonic() + 5
    while (err := b.heartbeat()) == NONE:
        assert time.monotonic() < deadline, "member with a 300 ms session never expired"
        time.sleep(0.05)
    assert err == REBALANCE_IN_PROGRESS
    r = b.join()
    assert r["error_code"] == NONE and r["generation_id"] == gen + 1
    assert [x["member_id"] for x in r["members"]] == [b.member_id]
    assert [x["member_id"] for x in node.describe(g)["members"]] == [b.member_id]
    assert a.heartbeat() == UNKNOWN_MEMBER_ID
    # a lone member expiring empties the group with generation + 1
    g2 = gid()
    c = Member(node, g2, session=200)
    form_group(node, g2, [c])
    node.wait_state(g2, "Empty", timeout=5)
    d = Member(node, g2)
    assert d.join()["generation_id"] == c.generation + 2


def test_heartbeats_keep_a_member_alive(node):
    g = gid()
    a = Member(node, g, session=400)
    form_group(node, g, [a])
    for _ in range(12):
        assert a.heartbeat() == NONE
        time.sleep(0.1)
    assert node.state(g) == "Stable"


def test_rebalance_timeout_removes_a_dynamic_member_that_does_not_rejoin(node):
    g = gid()
    a = Member(node, g, rebalance=300)
    b = Member(node, g, rebalance=300)
    form_group(node, g, [a, b])
    c = Member(node, g, rebalance=300)
    t0 = time.monotonic()
    cc = c.start_join()
    # only a rejoins; b keeps heartbeating (REBALANCE_IN_PROGRESS) but never rejoins
    node.wait_state(g, "PreparingRebalance")
    ca = a.start_join()
    assert b.heartbeat() == REBALANCE_IN_PROGRESS
    ra = a.finish_join(ca)
    rc = c.finish_join(cc)
    assert time.monotonic() - t0 >= 0.25
    assert ra["generation_id"] == rc["generation_id"] == b.generation + 1
    assert {x["member_id"] for x in ra["members"]} == {a.member_id, c.member_id}
    assert b.heartbeat() == UNKNOWN_MEMBER_ID


def test_pending_sync_timeout_removes_members_that_never_sync(node):
    g = gid()
    a = Member(node, g, rebalance=300)
    b = Member(node, g, rebalance=300)
    form_group(node, g, [a, b], sync=False)
    assert a.sync({a.member_id: b"A", b.member_id: b"B"})["error_code"] == NONE
    assert node.state(g) == "Stable"
    # b never sends SyncGroup: after the rebalance timeout it is removed, a rebalance starts
    deadline = time.monotonic() + 5
    while (err := a.heartbeat()) == NONE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert err == REBALANCE_IN_PROGRESS
    r = a.join()
    assert [x["member_id"] for x in r["members"]] == [a.member_id]


def test_default_initial_rebalance_delay(start_node):
    n = start_node("--group-min-session-timeout-ms", "100")
    g = gid()
    a = Member(n, g, rebalance=3000)
    b = Member(n, g, rebalance=3000)
    t0 = time.monotonic()
    ca = a.start_join()
    time.sleep(0.3)
    assert n.state(g) == "PreparingRebalance"
    cb = b.start_join()
    assert a.conn.silent_for(1.5)
    ra = a.finish_join(ca, timeout=10)
    rb = b.finish_join(cb, timeout=10)
    elapsed = time.monotonic() - t0
    assert 2.8 <= elapsed < 6.0, elapsed
    assert ra["generation_id"] == rb["generation_id"] == 1
    assert ra["leader"] == rb["leader"] == a.member_id
    assert len(ra["members"]) == 2 and rb["members"] == []


def test_initial_delay_is_extended_by_whole_windows(start_node):
    """Initial delay: D=500, T=1500: a member arriving in the first window extends once by D, no more."""
    n = start_node(*["--group-min-session-timeout-ms", "100", "--group-initial-rebalance-delay-ms", "500"])
    g = gid()
    a = Member(n, g, rebalance=1500)
    b = Member(n, g, rebalance=1500)
    t0 = time.monotonic()
    ca = a.start_join()
    time.sleep(0.1)
    cb = b.start_join()
    ra = a.finish_join(ca)
    rb = b.finish_join(cb)
    elapsed = time.monotonic() - t0
    assert 0.95 <= elapsed < 1.4, elapsed  # a third window would end at 1.5 s
    assert ra["generation_id"] == rb["generation_id"] == 1


# ============================================================================================
# static membership


def test_static_member_replacement_in_stable_fences_old_id_without_rebalance(node):
    g = gid()
    inst = f"inst-{uuid.uuid4().hex[:6]}"
    a = Member(node, g)
    s = Member(node, g, instance=inst)
    form_group(node, g, [a, s])
    gen, old = s.generation, s.member_id
    s.commit({("t1", 1): 5})
    s2 = Member(node, g, instance=inst)
    r = s2.join()
    assert r["error_code"] == NONE
    assert r["member_id"] != old and re.fullmatch(rf"{inst}-{UUID4}", r["member_id"])
    assert r["generation_id"] == gen and r["protocol_name"] == "range"
    assert r["leader"] == a.member_id and r["members"] == []
    assert node.state(g) == "Stable"
    assert a.heartbeat() == NONE  # no rebalance
    # the old id is fenced
    assert s.heartbeat() == FENCED_INSTANCE_ID
    assert s.sync()["error_code"] == FENCED_INSTANCE_ID
    assert set(s.commit({("t1", 1): 6}).values()) == {FENCED_INSTANCE_ID}
    assert s.conn.call(JOIN, join_body(g, old, instance=inst))["error_code"] == FENCED_INSTANCE_ID
    # the old id without an instance id is simply unknown
    assert s.heartbeat(member_id=old) == FENCED_INSTANCE_ID
    body = {"group_id": g, "generation_id": gen, "member_id": old, "group_instance_id": None}
    assert s.conn.call(HEARTBEAT, body)["error_code"] == UNKNOWN_MEMBER_ID
    # the new id keeps the old member's assignment and position
    assert s2.heartbeat() == NONE
    r = s2.sync()
    assert r["error_code"] == NONE and r["assignment"] == assignment("t1", 1)
    members = node.describe(g)["members"]
    assert [m["member_id"] for m in members] == [a.member_id, s2.member_id]
    assert members[1]["group_instance_id"] == inst
    # a known member id with an unknown instance id
    body = {"group_id": g, "generation_id": gen, "member_id": a.member_id, "group_instance_id": "nope"}
    assert a.conn.call(HEARTBEAT, body)["error_code"] == UNKNOWN_MEMBER_ID
    # a dynamic request using the static member's id passes
    body = {"group_id": g, "generation_id": gen, "member_id": s2.member_id, "group_instance_id": None}
    assert a.conn.call(HEARTBEAT, body)["error_code"] == NONE


def test_static_member_not_rejoining_is_kept(node):
    g = gid()
    a = Member(node, g, rebalance=300)
    s = Member(node, g, instance=f"i-{uuid.uuid4().hex[:6]}", rebalance=300)
    form_group(node, g, [a, s])
    c = Member(node, g, rebalance=300)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    ra = a.join()
    c.finish_join(cc)
    assert {x["member_id"] for x in ra["members"]} == {a.member_id, s.member_id, c.member_id}
    # the static member missed the generation
    assert s.heartbeat() == ILLEGAL_GENERATION


# ============================================================================================
# offsets


def test_simple_group_commit_and_fetch(node):
    g = gid()
    conn = node.connect()
    r = conn.call(OFFSET_COMMIT, commit_body(g, -1, "", {("t1", 0): 10, ("t1", 1): 11, ("t2", 0): 20}))
    assert set(commit_errors(r).values()) == {NONE}
    got = fetch(conn, g, {"t1": [0, 1, 2], "t3": [0]})
    assert got == {("t1", 0): (10, "m10"), ("t1", 1): (11, "m11"), ("t1", 2): (-1, ""), ("t3", 0): (-1, "")}
    assert fetch(conn, g, None) == {("t1", 0): (10, "m10"), ("t1", 1): (11, "m11"), ("t2", 0): (20, "m20")}
    d = node.describe(g)
    assert d["group_state"] == "Empty" and d["protocol_type"] == "" and d["members"] == []
    # member id / instance id are ignored for generation -1 on an Empty group
    body = commit_body(g, -1, "whoever", {("t1", 0): 12}, instance="whatever")
    assert set(commit_errors(conn.call(OFFSET_COMMIT, body)).values()) == {NONE}
    assert fetch(conn, g, {"t1": [0]}) == {("t1", 0): (12, "m12")}
    # generation >= 0 on an Empty group: no members -> UNKNOWN_MEMBER_ID
    body = commit_body(g, 1, "whoever", {("t1", 0): 13})
    assert set(commit_errors(conn.call(OFFSET_COMMIT, body)).values()) == {UNKNOWN_MEMBER_ID}
    # absent group: generation >= 0 -> ILLEGAL_GENERATION, and fetch answers -1 blindly
    g2 = gid()
    body = commit_body(g2, 3, "m", {("t1", 0): 1, ("t1", 1): 1})
    assert set(commit_errors(conn.call(OFFSET_COMMIT, body)).values()) == {ILLEGAL_GENERATION}
    assert fetch(conn, g2, {"t1": [0]}) == {("t1", 0): (-1, "")}
    assert fetch(conn, g2, None) == {}
    # the empty string is a legal group id for offsets
    r = conn.call(OFFSET_COMMIT, commit_body("", -1, "", {("t1", 0): 1}))
    assert set(commit_errors(r).values()) == {NONE}
    assert fetch(conn, "", {"t1": [0]}) == {("t1", 0): (1, "m1")}


def test_offset_metadata_too_large(node):
    g = gid()
    conn = node.connect()
    body = commit_body(g, -1, "", {("t1", 0): 1, ("t1", 1): 2})
    body["topics"][0]["partitions"][1]["committed_metadata"] = "x" * 5000
    assert commit_errors(conn.call(OFFSET_COMMIT, body)) == {
        ("t1", 0): NONE,
        ("t1", 1): OFFSET_METADATA_TOO_LARGE,
    }
    assert fetch(conn, g, {"t1": [0, 1]}) == {("t1", 0): (1, "m1"), ("t1", 1): (-1, "")}


def test_member_commits_by_state(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b])
    gen = a.generation
    assert set(a.commit({("t1", 0): 100}).values()) == {NONE}
    assert set(a.commit({("t1", 0): 101}, generation=gen + 1).values()) == {ILLEGAL_GENERATION}
    body = commit_body(g, gen, "ghost", {("t1", 0): 102})
    assert set(commit_errors(a.conn.call(OFFSET_COMMIT, body)).values()) == {UNKNOWN_MEMBER_ID}
    # only members can commit to a non-empty group
    body = commit_body(g, -1, "", {("t1", 0): 103})
    assert set(commit_errors(a.conn.call(OFFSET_COMMIT, body)).values()) == {UNKNOWN_MEMBER_ID}
    assert fetch(a.conn, g, {"t1": [0]}) == {("t1", 0): (100, "m100")}
    # PreparingRebalance: accepted with the current (old) generation
    c = Member(node, g)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    assert set(a.commit({("t1", 0): 104}).values()) == {NONE}
    # CompletingRebalance: REBALANCE_IN_PROGRESS even with the new generation
    pend = [(m, m.start_join()) for m in (a, b)]
    for m, cid in pend:
        m.finish_join(cid)
    c.finish_join(cc)
    assert node.state(g) == "CompletingRebalance"
    assert set(a.commit({("t1", 0): 105}).values()) == {REBALANCE_IN_PROGRESS}
    assert set(a.commit({("t1", 0): 105}, generation=gen).values()) == {ILLEGAL_GENERATION}
    assert fetch(a.conn, g, {"t1": [0]}) == {("t1", 0): (104, "m104")}


# ============================================================================================
# admin


def test_describe_groups(node):
    absent = gid()
    body = node.admin.call(DESCRIBE, {"groups": [absent]})
    assert body["groups"] == [
        {
            "error_code": NONE,
            "group_id": absent,
            "group_state": "Dead",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
        }
    ]
    g = gid()
    a = Member(node, g, client_id="desc-a")
    b = Member(node, g, client_id="desc-b", instance="desc-inst")
    form_group(node, g, [a, b], sync=False)
    d = node.describe(g)
    assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == (
        "CompletingRebalance",
        "consumer",
        "",
    )
    assert all(m["member_metadata"] == b"" and m["member_assignment"] == b"" for m in d["members"])
    sync_all([a, b])
    d = node.describe(g)
    assert (d["error_code"], d["group_id"]) == (NONE, g)
    assert (d["group_state"], d["protocol_type"], d["protocol_data"]) == ("Stable", "consumer", "range")
    by_id = {m["member_id"]: m for m in d["members"]}
    assert set(by_id) == {a.member_id, b.member_id}
    ma, mb = by_id[a.member_id], by_id[b.member_id]
    assert (ma["client_id"], ma["group_instance_id"]) == ("desc-a", None)
    assert (mb["client_id"], mb["group_instance_id"]) == ("desc-b", "desc-inst")
    assert isinstance(ma["client_host"], str) and "127.0.0.1" in ma["client_host"]
    assert ma["member_metadata"] == META and ma["member_assignment"] == assignment("t1", 0)
    assert mb["member_assignment"] == assignment("t1", 1)
    # several groups at once, in order
    body = node.admin.call(DESCRIBE, {"groups": [g, absent]})
    assert [x["group_id"] for x in body["groups"]] == [g, absent]


def test_list_groups_with_states_filter(node):
    stable, empty = gid("stable"), gid("empty")
    form_group(node, stable, [Member(node, stable)])
    node.admin.call(OFFSET_COMMIT, commit_body(empty, -1, "", {("t1", 0): 1}))

    def listed(filt):
        body = node.admin.call(LIST, {"states_filter": filt})
        assert body["error_code"] == NONE
        return {x["group_id"]: (x["protocol_type"], x["group_state"]) for x in body["groups"]}

    everything = listed([])
    assert everything[stable] == ("consumer", "Stable")
    assert everything[empty] == ("", "Empty")
    only_stable = listed(["stable"])  # case-insensitive
    assert stable in only_stable and empty not in only_stable
    assert {s for _, s in only_stable.values()} == {"Stable"}
    both = listed(["Empty", "STABLE"])
    assert stable in both and empty in both
    assert listed(["Dead"]) == {}


def test_delete_groups(node):
    empty, busy, absent = gid(), gid(), gid()
    node.admin.call(OFFSET_COMMIT, commit_body(empty, -1, "", {("t1", 0): 7}))
    form_group(node, busy, [Member(node, busy)])
    r = node.admin.call(DELETE_GROUPS, {"groups_names": [empty, busy, absent]})
    assert [(x["group_id"], x["error_code"]) for x in r["results"]] == [
        (empty, NONE),
        (busy, NON_EMPTY_GROUP),
        (absent, GROUP_ID_NOT_FOUND),
    ]
    assert node.state(empty) == "Dead"
    assert fetch(node.admin, empty, {"t1": [0]}) == {("t1", 0): (-1, "")}
    assert node.state(busy) == "Stable"
    # deleted twice: now absent
    r = node.admin.call(DELETE_GROUPS, {"groups_names": [empty]})
    assert r["results"] == [{"group_id": empty, "error_code": GROUP_ID_NOT_FOUND}]


def test_offset_delete(node):
    g = gid()
    a = Member(node, g, protocols=(("range", subscription("t1")),))
    form_group(node, g, [a])
    assert set(a.commit({("t1", 0): 1, ("t2", 0): 2, ("t2", 1): 3}).values()) == {NONE}
    body = {
        "group_id": g,
        "topics": [{"name": "t1", "partitions": [{"partition_index": 0}]}]
        + [{"name": "t2", "partitions": [{"partition_index": 0}]}],
    }
    r = a.conn.call(OFFSET_DELETE, body)
    assert r["error_code"] == NONE
    errs = {(t["name"], p["partition_index"]): p["error_code"] for t in r["topics"] for p in t["partitions"]}
    assert errs == {("t1", 0): GROUP_SUBSCRIBED_TO_TOPIC, ("t2", 0): NONE}
    assert fetch(a.conn, g, None) == {("t1", 0): (1, "m1"), ("t2", 1): (3, "m3")}
    # Empty group: everything listed is deleted
    a.leave()
    node.wait_state(g, "Empty")
    r = a.conn.call(
        OFFSET_DELETE, {"group_id": g, "topics": [{"name": "t1", "partitions": [{"partition_index": 0}]}]}
    )
    assert r["error_code"] == NONE and r["topics"][0]["partitions"][0]["error_code"] == NONE
    assert fetch(a.conn, g, None) == {("t2", 1): (3, "m3")}
    # absent group
    r = a.conn.call(OFFSET_DELETE, {"group_id": gid(), "topics": []})
    assert r["error_code"] == GROUP_ID_NOT_FOUND


# ============================================================================================
# validation


def test_invalid_group_id_for_empty_ids(node):
    conn = node.connect()
    r = conn.call(JOIN, join_body("", "m-1"))
    assert r["error_code"] == INVALID_GROUP_ID and r["member_id"] == "m-1" and r["generation_id"] == -1
    assert conn.call(JOIN, join_body(""))["error_code"] == INVALID_GROUP_ID
    body = {
        "group_id": "",
        "generation_id": 1,
        "member_id": "m",
        "group_instance_id": None,
        "protocol_type": None,
        "protocol_name": None,
        "assignments": [],
    }
    assert conn.call(SYNC, body)["error_code"] == INVALID_GROUP_ID
    hb = {"group_id": "", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    assert conn.call(HEARTBEAT, hb)["error_code"] == INVALID_GROUP_ID
    r = conn.call(
        LEAVE, {"group_id": "", "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]}
    )
    assert r["error_code"] == INVALID_GROUP_ID and r["members"] == []
    r = conn.call(OFFSET_DELETE, {"group_id": "", "topics": []})
    assert r["error_code"] == INVALID_GROUP_ID
    # "" is legal for DescribeGroups (absent -> Dead)
    d = node.describe("")
    assert d["error_code"] == NONE


def test_invalid_session_timeout(start_node):
    n = start_node(*FAST, "--group-max-session-timeout-ms", "5000")
    conn = n.connect()
    g = gid()
    r = conn.call(JOIN, join_body(g, session=99))
    assert r["error_code"] == INVALID_SESSION_TIMEOUT and r["generation_id"] == -1
    assert conn.call(JOIN, join_body(g, session=5001))["error_code"] == INVALID_SESSION_TIMEOUT
    assert conn.call(JOIN, join_body(g, session=5000))["error_code"] == MEMBER_ID_REQUIRED
    assert conn.call(JOIN, join_body(g, session=100))["error_code"] == MEMBER_ID_REQUIRED
    # the rebalance timeout is not validated
    assert conn.call(JOIN, join_body(g, session=100, rebalance=1))["error_code"] == MEMBER_ID_REQUIRED


def test_group_max_size(start_node):
    n = start_node(*FAST, "--group-max-size", "1")
    g = gid()
    a = Member(n, g)
    form_group(n, g, [a])
    # The capacity check comes before the new-member path, so no member id is handed out
    conn = n.connect()
    r = conn.call(JOIN, join_body(g))
    assert r["error_code"] == GROUP_MAX_SIZE_REACHED and r["member_id"] == ""
    assert n.state(g) == "Stable"
    # a static newcomer likewise
    r = conn.call(JOIN, join_body(g, instance="s"))
    assert r["error_code"] == GROUP_MAX_SIZE_REACHED and r["member_id"] == ""
    # the existing member may rejoin
    assert a.join()["error_code"] == NONE
    assert n.state(g) == "CompletingRebalance"


# ============================================================================================
# connection behaviour


def test_requests_on_one_connection_are_answered_in_order_while_join_is_parked(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    b = Member(node, g)
    jb = b.start_join()
    node.wait_state(g, "PreparingRebalance")
    later = b.conn.send(API_VERSIONS, {})
    hb = b.conn.send(
        HEARTBEAT, {"group_id": g, "generation_id": 0, "member_id": "x", "group_instance_id": None}
    )
    assert b.conn.silent_for(0.3)
    # other connections are served meanwhile
    assert node.connect().call(API_VERSIONS, {})["error_code"] == NONE
    a.join()
    r = b.conn.recv_frame()
    assert r["id"] == jb and r["body"]["error_code"] == NONE
    assert b.conn.recv(later)["error_code"] == NONE
    assert b.conn.recv(hb)["error_code"] == UNKNOWN_MEMBER_ID


def test_pipelined_requests_are_answered_in_order(node):
    conn = node.connect()
    ids = [
        conn.send(API_VERSIONS if i % 2 else DESCRIBE, {} if i % 2 else {"groups": [gid()]})
        for i in range(20)
    ]
    assert [conn.recv_frame()["id"] for _ in ids] == ids


def test_malformed_frames(node):
    bystander = node.connect()
    assert bystander.call(API_VERSIONS, {})["error_code"] == NONE

    def closes(payload: bytes) -> None:
        c = node.connect()
        c.send_frame(payload)
        assert c.is_closed(), payload

    def invalid(obj: dict) -> None:
        c = node.connect()
        c.send_obj(obj)
        msg = c.recv_frame()
        assert msg["id"] == obj["id"], msg
        assert msg["body"]["error_code"] == INVALID_REQUEST, msg
        assert isinstance(msg["body"]["error_message"], str)
        # the connection stays usable
        assert c.call(API_VERSIONS, {})["error_code"] == NONE

    ok = {"api": HEARTBEAT, "v": 0, "id": 77, "client_id": "c"}
    hb = {"group_id": "g", "generation_id": 1, "member_id": "m", "group_instance_id": None}
    # not a map / not msgpack / id unreadable -> close
    closes(ENC.encode([1, 2, 3]))
    closes(ENC.encode(5))
    closes(b"\xc1")
    closes(b"")
    closes(ENC.encode({"api": 18, "v": 0, "client_id": "c", "body": {}}))  # no id
    closes(ENC.encode({"api": 18, "v": 0, "id": "7", "client_id": "c", "body": {}}))  # id not an int
    # id readable -> 42
    invalid({"api": 18, "v": 0, "id": 5, "body": {}})  # no client_id
    invalid({"api": 18, "v": 0, "id": 6, "client_id": "c"})  # no body
    invalid({"v": 0, "id": 7, "client_id": "c", "body": {}})  # no api
    invalid({"api": 18, "id": 8, "client_id": "c", "body": {}})  # no v
    invalid({"api": "18", "v": 0, "id": 9, "client_id": "c", "body": {}})
    invalid({"api": 18, "v": 0, "id": 10, "client_id": 3, "body": {}})
    invalid({"api": 18, "v": 0, "id": 11, "client_id": "c", "body": [1]})
    invalid({**ok, "body": {k: v for k, v in hb.items() if k != "generation_id"}})  # missing body key
    invalid({**ok, "body": {**hb, "generation_id": "1"}})  # wrong type in body
    invalid(
        {**ok, "api": JOIN, "body": {**join_body("g"), "protocols": [{"name": "r", "metadata": "not-bin"}]}}
    )
    invalid({**ok, "api": LEAVE, "body": {"group_id": "g", "members": "m"}})
    # unknown api / version -> 35
    c = node.connect()
    assert c.call(999, {})["error_code"] == UNSUPPORTED_VERSION
    assert c.call(API_VERSIONS, {}, v=1)["error_code"] == UNSUPPORTED_VERSION
    assert c.call(HEARTBEAT, hb, v=3)["error_code"] == UNSUPPORTED_VERSION
    assert c.call(API_VERSIONS, {})["error_code"] == NONE
    # oversize length -> close, without sending the body
    c = node.connect()
    c.sock.sendall(struct.pack(">I", 2 * 1024 * 1024))
    assert c.is_closed()
    c = node.connect()
    c.sock.sendall(struct.pack(">I", 0xFFFFFFFF))
    assert c.is_closed()
    # nobody else was affected
    assert bystander.call(API_VERSIONS, {})["error_code"] == NONE
    assert node.proc.poll() is None


def test_max_frame_bytes_option(start_node):
    n = start_node(*FAST, "--max-frame-bytes", "1024")
    c = n.connect()
    c.send_obj({"api": 18, "v": 0, "id": 1, "client_id": "c" * 2000, "body": {}})
    assert c.is_closed()
    assert n.connect().call(API_VERSIONS, {})["error_code"] == NONE


def test_unknown_keys_are_ignored(node):
    c = node.connect()
    c.send_obj({"api": 18, "v": 0, "id": 3, "client_id": "c", "body": {"future": 1}, "trace": {"x": b"y"}})
    assert c.recv(3)["error_code"] == NONE
    g = gid()
    body = {**join_body(g), "future_field": [1, 2]}
    body["protocols"][0]["extra"] = True
    r = c.call(JOIN, body)
    assert r["error_code"] == MEMBER_ID_REQUIRED
    body["member_id"] = r["member_id"]
    assert c.call(JOIN, body)["error_code"] == NONE


def test_sigterm_exits_zero(start_node):
    n = start_node(*FAST)
    g = gid()
    form_group(n, g, [Member(n, g)])
    n.proc.send_signal(signal.SIGTERM)
    assert n.proc.wait(20) == 0


# ============================================================================================
# more join / rebalance details


def test_leader_rejoin_in_completing_rebalance_with_same_protocols_is_answered_at_once(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b], sync=False)
    gen = a.generation
    r = a.join()  # CompletingRebalance, identical protocols
    assert r["error_code"] == NONE and r["generation_id"] == gen and r["leader"] == a.member_id
    assert {x["member_id"] for x in r["members"]} == {a.member_id, b.member_id}
    r = b.join()
    assert r["error_code"] == NONE and r["generation_id"] == gen and r["members"] == []
    assert node.state(g) == "CompletingRebalance"
    # changed metadata in CompletingRebalance starts a rebalance
    b.protocols = (("range", subscription("t1", "t2")),)
    cb = b.start_join()
    node.wait_state(g, "PreparingRebalance")
    a.join()
    assert b.finish_join(cb)["generation_id"] == gen + 1


def test_follower_with_changed_metadata_in_stable_triggers_rebalance(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b])
    gen = a.generation
    b.protocols = (("range", subscription("t9")),)
    cb = b.start_join()
    node.wait_state(g, "PreparingRebalance")
    assert a.heartbeat() == REBALANCE_IN_PROGRESS
    r = a.join()
    assert b.finish_join(cb)["generation_id"] == r["generation_id"] == gen + 1
    meta = {x["member_id"]: x["metadata"] for x in r["members"]}
    assert meta[b.member_id] == subscription("t9")


def test_leader_that_does_not_rejoin_is_replaced(node):
    g = gid()
    a = Member(node, g, rebalance=300)
    b = Member(node, g, rebalance=300)
    form_group(node, g, [a, b])
    # the leader leaves by not rejoining: b forces a rebalance by changing its metadata
    b.protocols = (("range", subscription("t2")),)
    r = b.join()
    assert r["error_code"] == NONE and r["leader"] == b.member_id
    assert [x["member_id"] for x in r["members"]] == [b.member_id]


def test_pending_member_blocks_the_join_phase_until_it_expires(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    conn = node.connect()
    r = conn.call(JOIN, join_body(g, session=400))
    assert r["error_code"] == MEMBER_ID_REQUIRED
    t0 = time.monotonic()
    r = a.join()  # leader rejoin in Stable: rebalance; the pending id must expire first
    assert time.monotonic() - t0 >= 0.3
    assert r["error_code"] == NONE and r["generation_id"] == 2
    assert conn.call(JOIN, join_body(g, r["member_id"] + "x"))["error_code"] == UNKNOWN_MEMBER_ID


def test_repeated_join_replaces_the_parked_one(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b])
    c = Member(node, g)
    c.start_join()
    node.wait_state(g, "PreparingRebalance")
    other = node.connect()
    second = other.send(JOIN, join_body(g, c.member_id))
    time.sleep(0.1)
    pend = [(m, m.start_join()) for m in (a, b)]
    for m, cid in pend:
        assert m.finish_join(cid)["error_code"] == NONE
    r = other.recv(second)
    assert r["error_code"] == NONE and r["member_id"] == c.member_id
    # the replaced request is never answered (as in Kafka); the node may close that connection,
    # which could carry nothing else anyway (answers are in order)
    try:
        assert c.conn.silent_for(0.3)
    except Closed:
        pass
    assert node.connect().call(API_VERSIONS, {})["error_code"] == NONE


def test_leave_answers_a_parked_join_with_unknown_member(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b])
    c = Member(node, g)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    body = {"group_id": g, "members": [{"member_id": c.member_id, "group_instance_id": None, "reason": None}]}
    assert a.conn.call(LEAVE, body)["members"][0]["error_code"] == NONE
    r = c.conn.recv(cc)
    assert r["error_code"] == UNKNOWN_MEMBER_ID and r["member_id"] == ""


def test_describe_while_preparing_rebalance_and_empty_keeps_protocol_type(node):
    g = gid()
    a, b = Member(node, g), Member(node, g)
    form_group(node, g, [a, b])
    c = Member(node, g)
    c.start_join()
    node.wait_state(g, "PreparingRebalance")
    d = node.describe(g)
    assert (d["protocol_type"], d["protocol_data"]) == ("consumer", "")
    assert all(m["member_metadata"] == b"" and m["member_assignment"] == b"" for m in d["members"])
    assert {m["member_id"] for m in d["members"]} == {a.member_id, b.member_id, c.member_id}
    body = {
        "group_id": g,
        "members": [{"member_id": m.member_id, "group_instance_id": None, "reason": None} for m in (a, b, c)],
    }
    assert [x["error_code"] for x in a.conn.call(LEAVE, body)["members"]] == [NONE] * 3
    node.wait_state(g, "Empty")
    d = node.describe(g)
    assert (d["protocol_type"], d["protocol_data"], d["members"]) == ("consumer", "", [])
    listed = {x["group_id"]: x for x in node.admin.call(LIST, {"states_filter": ["empty"]})["groups"]}
    assert listed[g]["protocol_type"] == "consumer"


# ============================================================================================
# more static membership


def test_static_replacement_answers_the_old_parked_join_fenced(node):
    g = gid()
    a = Member(node, g)
    s = Member(node, g, instance="st-1")
    form_group(node, g, [a, s])
    c = Member(node, g)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    cs = s.start_join()  # parked under the old id
    old = s.member_id
    s2 = Member(node, g, instance="st-1")
    c2 = s2.start_join()  # replacement while PreparingRebalance: stays parked
    r = s.conn.recv(cs)
    assert r["error_code"] == FENCED_INSTANCE_ID and r["member_id"] == old and r["generation_id"] == -1
    a.join()
    c.finish_join(cc)
    r = s2.finish_join(c2)
    assert r["error_code"] == NONE and r["member_id"] != old and r["member_id"].startswith("st-1-")
    assert {x["member_id"] for x in a.last_join["members"]} == {a.member_id, c.member_id, s2.member_id}
    by_id = {x["member_id"]: x["group_instance_id"] for x in a.last_join["members"]}
    assert by_id[s2.member_id] == "st-1"


def test_static_replacement_in_completing_rebalance_rebalances(node):
    g = gid()
    a = Member(node, g)
    s = Member(node, g, instance="st-2")
    form_group(node, g, [a, s], sync=False)
    gen = a.generation
    s2 = Member(node, g, instance="st-2")
    c2 = s2.start_join()
    node.wait_state(g, "PreparingRebalance")
    a.join()
    assert s2.finish_join(c2)["generation_id"] == gen + 1


def test_static_replacement_that_changes_the_protocol_rebalances(node):
    g = gid()
    both = (("range", META), ("roundrobin", META))
    a = Member(node, g, protocols=both)
    s = Member(node, g, instance="st-3", protocols=both)
    form_group(node, g, [a, s])
    assert a.last_join["protocol_name"] == "range"
    s2 = Member(node, g, instance="st-3", protocols=(("roundrobin", META),))
    c2 = s2.start_join()
    node.wait_state(g, "PreparingRebalance")
    a.join()
    r = s2.finish_join(c2)
    assert r["error_code"] == NONE and r["generation_id"] == a.generation
    assert a.generation == s.generation + 1


# ============================================================================================
# more offsets / admin


def test_commit_identity_rules(node):
    g = gid()
    inst = "ci-1"
    a, s = Member(node, g), Member(node, g, instance=inst)
    form_group(node, g, [a, s])
    # a valid member with generation -1 on a non-empty group -> ILLEGAL_GENERATION
    assert set(a.commit({("t", 0): 1}, generation=-1).values()) == {ILLEGAL_GENERATION}
    # unknown instance id -> UNKNOWN_MEMBER_ID; instance mapped to another member -> FENCED
    body = commit_body(g, a.generation, a.member_id, {("t", 0): 1}, instance="nope")
    assert set(commit_errors(a.conn.call(OFFSET_COMMIT, body)).values()) == {UNKNOWN_MEMBER_ID}
    body = commit_body(g, a.generation, a.member_id, {("t", 0): 1}, instance=inst)
    assert set(commit_errors(a.conn.call(OFFSET_COMMIT, body)).values()) == {FENCED_INSTANCE_ID}
    assert set(s.commit({("t", 0): 2}).values()) == {NONE}
    # a pending member id is not a member
    pending = node.connect().call(JOIN, join_body(g))["member_id"]
    body = commit_body(g, a.generation, pending, {("t", 0): 3})
    assert set(commit_errors(a.conn.call(OFFSET_COMMIT, body)).values()) == {UNKNOWN_MEMBER_ID}
    assert fetch(a.conn, g, {"t": [0]}) == {("t", 0): (2, "m2")}


def test_commits_keep_a_member_alive(node):
    g = gid()
    a = Member(node, g, session=400)
    form_group(node, g, [a])
    for i in range(10):
        assert set(a.commit({("t", 0): i}).values()) == {NONE}
        time.sleep(0.1)
    assert node.state(g) == "Stable"


def test_offset_delete_non_consumer_and_unparsable_subscription(node):
    g = gid()
    conn = node.connect()
    r = conn.call(JOIN, join_body(g, instance="x", protocol_type="connect", protocols=(("p", b"\x00junk"),)))
    assert r["error_code"] == NONE
    body = {"group_id": g, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    assert conn.call(OFFSET_DELETE, body)["error_code"] == NON_EMPTY_GROUP
    g2 = gid()
    m = Member(node, g2, protocols=(("range", b"\xc1not msgpack"),))
    form_group(node, g2, [m])
    assert set(m.commit({("t", 0): 1}).values()) == {NONE}
    body = {"group_id": g2, "topics": [{"name": "t", "partitions": [{"partition_index": 0}]}]}
    r = conn.call(OFFSET_DELETE, body)
    assert r["error_code"] == NONE
    assert r["topics"][0]["partitions"][0]["error_code"] == GROUP_SUBSCRIBED_TO_TOPIC


def test_list_groups_unknown_state_matches_nothing(node):
    g = gid()
    node.admin.call(OFFSET_COMMIT, commit_body(g, -1, "", {("t", 0): 1}))
    body = node.admin.call(LIST, {"states_filter": ["Bogus"]})
    assert body["error_code"] == NONE and body["groups"] == []


# ============================================================================================
# more wire behaviour


def test_frames_split_and_coalesced(node):
    c = node.connect()
    one = ENC.encode({"api": 18, "v": 0, "id": -5, "client_id": "c", "body": {}})
    frame = struct.pack(">I", len(one)) + one
    for i in range(len(frame)):  # byte by byte
        c.sock.sendall(frame[i : i + 1])
        if i % 7 == 0:
            time.sleep(0.005)
    assert c.recv(-5)["error_code"] == NONE
    two = ENC.encode({"api": 18, "v": 0, "id": 2**31 - 1, "client_id": "c", "body": {}})
    c.sock.sendall(frame + struct.pack(">I", len(two)) + two)
    assert c.recv(-5)["error_code"] == NONE
    assert c.recv(2**31 - 1)["error_code"] == NONE


def test_client_gone_while_join_is_parked(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    b = Member(node, g)
    b.start_join()
    node.wait_state(g, "PreparingRebalance")
    b.conn.close()
    r = a.join()
    assert r["error_code"] == NONE and len(r["members"]) == 2
    assert node.connect().call(API_VERSIONS, {})["error_code"] == NONE


def test_not_coordinator_and_failover_after_sigterm(start_node):
    n1 = start_node(*FAST, node_id=1)
    n2 = start_node(*FAST, node_id=2)
    nodes = {1: n1, 2: n2}
    g = gid()

    def coordinator(asking: Node) -> int:
        r = asking.admin.call(FIND_COORDINATOR, {"key": g, "key_type": 0})
        return r["node_id"] if r["error_code"] == NONE else -1

    deadline = time.monotonic() + 20
    while True:
        owners = {coordinator(n1), coordinator(n2)}
        if len(owners) == 1 and -1 not in owners:
            owner = owners.pop()
            other = nodes[3 - owner]
            if other.describe(g)["error_code"] != NONE and nodes[owner].describe(g)["error_code"] == NONE:
                break
        assert time.monotonic() < deadline, (
            "the nodes never agreed on a coordinator",
            [x.admin.call(FIND_COORDINATOR, {"key": g, "key_type": 0}) for x in (n1, n2)],
            [x.describe(g) for x in (n1, n2)],
        )
        time.sleep(0.2)
    coord = nodes[owner]
    r = coordinator(coord)
    assert r == owner
    fc = coord.admin.call(FIND_COORDINATOR, {"key": g, "key_type": 0})
    assert (fc["host"], fc["port"]) == (coord.host, coord.port)
    # the other node refuses the group (NOT_COORDINATOR)
    c = other.connect()
    r = c.call(JOIN, join_body(g, "m-9"))
    assert r["error_code"] == 16 and r["member_id"] == "m-9" and r["generation_id"] == -1
    assert (
        c.call(HEARTBEAT, {"group_id": g, "generation_id": 1, "member_id": "m", "group_instance_id": None})[
            "error_code"
        ]
        == 16
    )
    r = c.call(OFFSET_FETCH, {"group_id": g, "topics": None})
    assert r["error_code"] == 16
    r = c.call(OFFSET_COMMIT, commit_body(g, -1, "", {("t", 0): 1, ("t", 1): 1}))
    assert set(commit_errors(r).values()) == {16}
    d = other.describe(g)
    assert (d["error_code"], d["group_state"], d["protocol_type"], d["protocol_data"]) == (16, "", "", "")
    r = c.call(DELETE_GROUPS, {"groups_names": [g]})
    assert r["results"] == [{"group_id": g, "error_code": 16}]
    r = c.call(
        LEAVE, {"group_id": g, "members": [{"member_id": "m", "group_instance_id": None, "reason": None}]}
    )
    assert r["error_code"] == 16 and r["members"] == []
    # commit on the coordinator, stop it, the other node takes over with the offsets
    r = coord.admin.call(OFFSET_COMMIT, commit_body(g, -1, "", {("t", 0): 42}))
    assert set(commit_errors(r).values()) == {NONE}
    assert coord.stop() == 0
    deadline = time.monotonic() + 30
    while True:
        r = other.admin.call(
            OFFSET_FETCH, {"group_id": g, "topics": [{"name": "t", "partition_indexes": [0]}]}
        )
        if r["error_code"] == NONE:
            break
        assert time.monotonic() < deadline, r
        time.sleep(0.2)
    assert r["topics"][0]["partitions"][0]["committed_offset"] == 42
    assert coordinator(other) == other.node_id


def test_sigint_exits_zero(start_node):
    n = start_node(*FAST)
    n.proc.send_signal(signal.SIGINT)
    assert n.proc.wait(20) == 0


# ============================================================================================
# error shapes, frame size boundary, persistence and retention


def test_join_error_responses_carry_no_generation_leader_or_members(node):
    conn = node.connect()
    g = gid()
    for r in (
        conn.call(JOIN, join_body(g)),  # MEMBER_ID_REQUIRED
        conn.call(JOIN, join_body(g, "ghost")),  # UNKNOWN_MEMBER_ID
        conn.call(JOIN, join_body(g, session=1)),  # INVALID_SESSION_TIMEOUT
    ):
        assert r["error_code"] != NONE
        assert (r["generation_id"], r["leader"], r["members"]) == (-1, "", []), r
        assert r["protocol_name"] in (None, ""), r


def test_frame_of_exactly_max_frame_bytes_is_accepted(start_node):
    n = start_node(*FAST, "--max-frame-bytes", "1024")

    def frame(size: int) -> bytes:
        base = {"api": 18, "v": 0, "id": 1, "client_id": "", "body": {}}
        pad = size - len(ENC.encode(base))
        for extra in range(pad, pad - 4, -1):  # the str header grows with its length
            payload = ENC.encode({**base, "client_id": "c" * extra})
            if len(payload) == size:
                return payload
        raise AssertionError(size)

    c = n.connect()
    c.send_frame(frame(1024))
    assert c.recv(1)["error_code"] == NONE
    c.send_frame(frame(1025))
    assert c.is_closed()


def test_group_state_and_offsets_survive_a_node_restart(start_node):
    n1 = start_node(*FAST, node_id=1)
    g = gid()
    a, b = Member(n1, g), Member(n1, g)
    form_group(n1, g, [a, b])
    assert set(a.commit({("t1", 0): 9}).values()) == {NONE}
    assert n1.stop() == 0
    n2 = start_node(*FAST, node_id=2)
    d = n2.describe(g)
    assert d["group_state"] == "Stable" and d["protocol_data"] == "range"
    assert {m["member_id"]: m["member_assignment"] for m in d["members"]} == {
        a.member_id: assignment("t1", 0),
        b.member_id: assignment("t1", 1),
    }
    for m in (a, b):
        m.conn = n2.connect()
        assert m.heartbeat() == NONE
    assert fetch(a.conn, g, {"t1": [0]}) == {("t1", 0): (9, "m9")}
    r = b.sync()
    assert r["error_code"] == NONE and r["assignment"] == assignment("t1", 1)


def test_deleted_group_is_recreated_from_generation_zero(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    a.leave()
    node.wait_state(g, "Empty")
    r = node.admin.call(DELETE_GROUPS, {"groups_names": [g]})
    assert r["results"] == [{"group_id": g, "error_code": NONE}]
    assert g not in {x["group_id"] for x in node.admin.call(LIST, {"states_filter": []})["groups"]}
    b = Member(node, g)
    assert b.join()["generation_id"] == 1


def test_offset_retention(start_node):
    n = start_node(*FAST, "--offsets-retention-ms", "600", "--offsets-retention-check-interval-ms", "50")
    simple, consumer = gid("simple"), gid("consumer")
    c = n.connect()
    c.call(OFFSET_COMMIT, commit_body(simple, -1, "", {("t", 0): 1}))
    a = Member(n, consumer)  # subscribes to t1
    form_group(n, consumer, [a])
    assert set(a.commit({("t1", 0): 5, ("t2", 0): 6}).values()) == {NONE}
    time.sleep(0.4)
    c.call(OFFSET_COMMIT, commit_body(simple, -1, "", {("t", 1): 2}))

    def wait(cond, what: str, timeout: float = 5.0):
        deadline = time.monotonic() + timeout
        while not cond():
            assert time.monotonic() < deadline, what
            time.sleep(0.02)

    # simple group: per offset, by commit time
    wait(lambda: ("t", 0) not in fetch(c, simple, None), "simple offset never expired")
    assert fetch(c, simple, None) == {("t", 1): (2, "m2")}
    # Stable consumer group: only offsets of topics nobody subscribes to expire
    wait(lambda: ("t2", 0) not in fetch(c, consumer, None), "unsubscribed offset never expired")
    assert fetch(c, consumer, None) == {("t1", 0): (5, "m5")}
    # an Empty simple group without offsets is removed
    wait(lambda: n.state(simple) == "Dead", "simple group never removed")
    # Empty consumer group: all offsets expire together, then the group is removed
    a.leave()
    n.wait_state(consumer, "Empty")
    assert fetch(c, consumer, None) == {("t1", 0): (5, "m5")}
    wait(lambda: n.state(consumer) == "Dead", "empty consumer group never removed")
    assert fetch(c, consumer, None) == {}


def test_two_nodes_agree_on_coordinators_after_shards_move(start_node):
    """FindCoordinator on either node names the node that actually serves the group, also after
    shards were handed from the first node to the second."""
    opts = [*FAST, "--handoff-delay-ms", "300"]
    n1 = start_node(*opts, node_id=1)
    n2 = start_node(*opts, node_id=2)
    nodes = {1: n1, 2: n2}
    groups = [gid() for _ in range(12)]

    def consistent() -> set[int] | None:
        owners = set()
        for g in groups:
            answers = {n.admin.call(FIND_COORDINATOR, {"key": g, "key_type": 0})["node_id"] for n in (n1, n2)}
            if len(answers) != 1 or answers - {1, 2}:
                return None
            owner = answers.pop()
            if nodes[owner].describe(g)["error_code"] != NONE:
                return None
            if nodes[3 - owner].describe(g)["error_code"] != 16:
                return None
            owners.add(owner)
        return owners

    deadline = time.monotonic() + 20
    while consistent() != {1, 2}:
        assert time.monotonic() < deadline, "FindCoordinator answers never matched the serving nodes"
        time.sleep(0.2)


def test_heartbeats_during_preparing_rebalance_keep_a_member_alive(node):
    g = gid()
    a = Member(node, g, session=300, rebalance=1500)
    b = Member(node, g, rebalance=1500)
    form_group(node, g, [b, a])
    c = Member(node, g, rebalance=1500)
    cc = c.start_join()
    node.wait_state(g, "PreparingRebalance")
    for _ in range(8):
        assert a.heartbeat() == REBALANCE_IN_PROGRESS
        time.sleep(0.1)
    pend = [(m, m.start_join()) for m in (a, b)]
    for m, cid in pend:
        assert m.finish_join(cid)["error_code"] == NONE
    c.finish_join(cc)
    assert {x["member_id"] for x in b.last_join["members"]} == {a.member_id, b.member_id, c.member_id}


def test_static_member_session_expiry_removes_it(node):
    g = gid()
    a = Member(node, g)
    s = Member(node, g, instance="exp-1", session=300)
    form_group(node, g, [a, s])
    deadline = time.monotonic() + 5
    while a.heartbeat() == NONE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    r = a.join()
    assert [x["member_id"] for x in r["members"]] == [a.member_id]
    # the instance id is free again: a new static member with it is added (and rebalances)
    s2 = Member(node, g, instance="exp-1")
    c2 = s2.start_join()
    node.wait_state(g, "PreparingRebalance")
    a.join()
    assert s2.finish_join(c2)["generation_id"] == a.generation


def test_leave_in_completing_rebalance_answers_parked_syncs(node):
    g = gid()
    a, b, c = Member(node, g), Member(node, g), Member(node, g)
    form_group(node, g, [a, b, c], sync=False)
    cs = b.conn.send(SYNC, b.sync_body())
    assert b.conn.silent_for(0.2)
    assert c.leave()["members"][0]["error_code"] == NONE
    r = b.conn.recv(cs)
    assert r["error_code"] == REBALANCE_IN_PROGRESS
    assert node.state(g) == "PreparingRebalance"


def test_known_member_with_other_protocol_type_is_inconsistent(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    r = a.conn.call(JOIN, join_body(g, a.member_id, protocol_type="connect"))
    assert r["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    body = a.sync_body()
    body["protocol_type"] = "connect"
    assert a.conn.call(SYNC, body)["error_code"] == INCONSISTENT_GROUP_PROTOCOL
    body["protocol_type"] = None
    body["protocol_name"] = None
    assert a.conn.call(SYNC, body)["error_code"] == NONE  # null values are not checked


def test_invalid_and_unsupported_requests_are_answered_in_order_too(node):
    g = gid()
    a = Member(node, g)
    form_group(node, g, [a])
    b = Member(node, g)
    jb = b.start_join()
    node.wait_state(g, "PreparingRebalance")
    b.conn.send_obj({"api": HEARTBEAT, "v": 0, "id": 9001, "client_id": "c", "body": {"group_id": 1}})
    b.conn.send_obj({"api": 999, "v": 0, "id": 9002, "client_id": "c", "body": {}})
    b.conn.send_obj({"api": API_VERSIONS, "v": 0, "id": 9003, "client_id": "c", "body": {}})
    assert b.conn.silent_for(0.3)
    a.join()
    assert [b.conn.recv_frame()["id"] for _ in range(4)] == [jb, 9001, 9002, 9003]
