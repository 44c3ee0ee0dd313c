"""Coordinator nodes across a ZooKeeper session expiry: fencing of stale epochs, no double leadership.

* The store: a leader epoch is valid only in the ZooKeeper session that claimed it. A write with
  it after the session expired is refused, even before any other node has claimed the shard.
* Two node processes: node 1 reaches ZooKeeper through a TCP proxy that the test cuts for longer
  than the session timeout, so only node 1's session expires. Node 2 takes its shards, node 1
  comes back by itself and takes its preferred shards back (handoff). From both nodes' event
  logs: no shard is ever served by two nodes at once, and every claim has a higher epoch.
  A probe asking both nodes about the same groups never finds both answering as coordinator.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import defaultdict

import pytest

from coordinator.group.messages import OffsetRecord
from coordinator.layout import offset_path, shard_of
from coordinator.member.wire_client import WireClient, WireError, fetch_body
from coordinator.node.process import NodeProcess
from coordinator.node.store import CoordinatorStore
from coordinator.node.zk_async import Fenced
from coordinator.wire import codec as P
from core.zk import connect
from testing.zookeeper import expire_session
from tests.zk_proxy import ZkProxy

SHARDS = 4


def wait_for(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


def group_in_shard(shard: int, shards: int) -> str:
    return next(g for g in (f"g{i}" for i in range(10_000)) if shard_of(g, shards) == shard)


def test_a_write_with_an_epoch_from_an_expired_session_is_refused(zk_server, zk_connect):
    group = group_in_shard(2, SHARDS)

    def record(offset: int) -> list[OffsetRecord]:
        return [OffsetRecord("t", 0, offset, "", int(time.time() * 1000))]

    async def scenario(a_zk, b_zk) -> None:
        a = CoordinatorStore(a_zk, node_id=1, shards=SHARDS)
        await a.start()
        epoch = await a.claim_shard(2, "127.0.0.1", 1)
        await a.commit_offsets(2, epoch, group, record(10))
        session = a_zk.client_id[0]
        await asyncio.to_thread(expire_session, zk_server.connect_string, a_zk)
        await asyncio.to_thread(
            wait_for, lambda: a_zk.connected and a_zk.client_id[0] != session, 30, "a new session for node 1"
        )
        # Nobody has claimed shard 2 since: the epoch is unchanged, but its session is gone.
        with pytest.raises(Fenced):
            await a.commit_offsets(2, epoch, group, record(20))
        b = CoordinatorStore(b_zk, node_id=2, shards=SHARDS)
        await b.start()
        epoch_b = await b.claim_shard(2, "127.0.0.1", 2)
        assert epoch_b == epoch + 1
        await b.commit_offsets(2, epoch_b, group, record(30))
        with pytest.raises(Fenced):
            await a.commit_offsets(2, epoch, group, record(40))
        assert await a.claim_shard(2, "127.0.0.1", 1) is None  # node 2 leads it now

    a_zk = connect(zk_connect, session_timeout=4.0)
    b_zk = connect(zk_connect, session_timeout=4.0)
    try:
        asyncio.run(scenario(a_zk, b_zk))
        assert json.loads(b_zk.get(offset_path(group, "t", 0))[0])["offset"] == 30
    finally:
        for c in (a_zk, b_zk):
            c.stop()
            c.close()


def test_a_node_reclaims_its_own_leadership_with_a_new_epoch(zk_connect):
    """Same session, shards given up meanwhile (ZooKeeper was away too long): reclaim = new epoch."""

    async def scenario(zk) -> None:
        store = CoordinatorStore(zk, node_id=1, shards=SHARDS)
        await store.start()
        epoch = await store.claim_shard(1, "127.0.0.1", 1)
        again = await store.claim_shard(1, "127.0.0.1", 1)
        assert again == epoch + 1
        with pytest.raises(Fenced):
            await store.commit_offsets(1, epoch, group_in_shard(1, SHARDS), [OffsetRecord("t", 0, 1, "", 0)])
        assert (await store.read_leader(1)).epoch == again

    zk = connect(zk_connect, session_timeout=4.0)
    try:
        asyncio.run(scenario(zk))
    finally:
        zk.stop()
        zk.close()


# ---------------------------------------------------------------------------------------------


def events(path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def serving_intervals(evs: list[dict], end: float) -> dict[int, list[tuple[float, float, int]]]:
    """Per shard, the (from, to, epoch) intervals in which the node led it while connected."""
    leading: dict[int, tuple[float, int]] = {}
    connected = True
    out: dict[int, list] = defaultdict(list)
    opened: dict[int, float] = {}
    for e in evs:
        ev, ts = e.get("event"), e["ts"]
        if ev == "shard_loaded":
            leading[e["shard"]] = (ts, e["epoch"])
            if connected:
                opened[e["shard"]] = ts
        elif ev == "shard_released":
            held = leading.pop(e["shard"], None)
            if e["shard"] in opened:
                out[e["shard"]].append((opened.pop(e["shard"]), ts, held[1] if held else -1))
        elif ev == "zk_state":
            up = e["state"] == "CONNECTED"
            if connected and not up:
                for s, since in opened.items():
                    out[s].append((since, ts, leading[s][1]))
                opened = {}
            elif up and not connected:
                opened = dict.fromkeys(leading, ts)
            connected = up
    for s, since in opened.items():
        out[s].append((since, end, leading[s][1]))
    return out


NODE_ARGS = (
    "--zk-session-timeout-ms",
    "2000",
    "--claim-grace-ms",
    "300",
    "--handoff-delay-ms",
    "1000",
    "--shards",
    "8",
)


def test_two_nodes_never_both_lead_a_shard_across_an_expiry(zk_server, zk_connect, tmp_path):
    chroot = zk_connect[len(zk_server.connect_string) :]
    host, port = zk_server.connect_string.rsplit(":", 1)
    proxy = ZkProxy(host, int(port))
    groups = [group_in_shard(s, 8) for s in range(8)]
    nodes: list[NodeProcess] = []
    probes: list[tuple[str, bool, bool]] = []
    stop = threading.Event()

    def probe() -> None:
        clients: list[WireClient | None] = [None, None]

        def leads(i: int, group: str) -> bool:
            try:
                if clients[i] is None:
                    clients[i] = nodes[i].client(f"probe-{i + 1}", 2.0)
                return clients[i].request(P.OFFSET_FETCH, fetch_body(group))["error_code"] == 0
            except (WireError, OSError):
                if clients[i] is not None:
                    clients[i].close()
                clients[i] = None
                return False

        while not stop.is_set():
            for g in groups:
                probes.append((g, leads(0, g), leads(1, g)))
        for c in clients:
            if c is not None:
                c.close()

    try:
        nodes.append(
            NodeProcess.start(
                f"127.0.0.1:{proxy.port}{chroot}", 1, *NODE_ARGS, log_path=tmp_path / "node-1.log"
            )
        )
        nodes.append(NodeProcess.start(zk_connect, 2, *NODE_ARGS, log_path=tmp_path / "node-2.log"))

        def coordinators() -> set[int]:
            found = set()
            with nodes[1].client("find", 2.0) as c:
                for g in groups:
                    r = c.request(P.FIND_COORDINATOR, {"key": g, "key_type": 0})
                    if r["error_code"] == 0:
                        found.add(r["node_id"])
            return found

        wait_for(lambda: coordinators() == {1, 2}, 30, "the shards spread over both nodes")
        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        time.sleep(0.5)
        proxy.cut()  # node 1 alone loses ZooKeeper; its session expires after 2 s
        wait_for(lambda: coordinators() == {2}, 20, "node 2 leading every shard")
        time.sleep(1.0)
        proxy.restore()
        wait_for(lambda: coordinators() == {1, 2}, 30, "node 1 back, leading its shards again")
        time.sleep(0.5)
        stop.set()
        prober.join(10)
    finally:
        stop.set()
        for n in nodes:
            n.terminate()
        proxy.close()

    log1 = events(tmp_path / "node-1.log")
    assert any(e.get("event") == "zk_state" and e["state"] == "LOST" for e in log1), "no session expiry"
    both = [p for p in probes if p[1] and p[2]]
    assert probes and not both, f"both nodes answered as coordinator: {both[:5]}"
    end = time.time()
    by_node = {1: serving_intervals(log1, end), 2: serving_intervals(events(tmp_path / "node-2.log"), end)}
    for shard in range(8):
        spans = sorted((a, b, epoch, n) for n, per in by_node.items() for a, b, epoch in per.get(shard, []))
        assert len({n for *_, n in spans}) == 2, f"shard {shard} never moved: {spans}"
        for k, (a1, b1, e1, n1) in enumerate(spans):
            for a2, b2, e2, n2 in spans[k + 1 :]:
                if n1 != n2:
                    assert max(a1, a2) >= min(b1, b2), f"shard {shard}: nodes {n1} and {n2} at once: {spans}"
                    assert e2 > e1, f"shard {shard}: the epoch did not grow from node {n1} to {n2}: {spans}"
