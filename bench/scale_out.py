"""Benchmark: what more coordinator nodes buy (1, 2 and 3 node processes on one ZooKeeper).

Run on demand: `.venv/bin/python -m bench.scale_out [--zk HOST:PORT] [--members 2000] [--seconds 5]`.
Without `--zk` its own ZooKeeper container; the nodes are child processes (`groupshift coordinator
serve`, 50 shards, Kafka's handoff delay and session defaults), the load comes from this process
over loopback.
About 4 minutes.

1. Heartbeats per CPU-second of the nodes: `--members` members in 100 groups (formed through
   JoinGroup/SyncGroup on node 1), heartbeating closed loop to each group's coordinator, with the
   same connections and heartbeats in flight per node whatever the node count; the nodes' own CPU
   time (/proc/<pid>/stat) over the window. On 2 cores the nodes and this client share the CPU, so
   the heartbeats/s of the whole cluster cannot grow: the figure to compare is per CPU-second.
   Target: 3 nodes >= 0.8x one node's (a node serves a third of the groups on a third of the
   connections: it may batch a little less per wake-up, nothing more).
   One node's OffsetCommits per CPU-second are measured the same way (one partition each).
2. Shard moves: node 2 joins, node 3 joins, node 3 leaves (SIGTERM), node 2 crashes (SIGKILL).
   Each group is watched (a heartbeat every 50 ms to its coordinator, FindCoordinator on
   NOT_COORDINATOR); an event is over when every group is served by its new preferred node:
   DescribeGroups there says Stable with the same members, and a heartbeat with the generation of
   their formation is answered NONE. Any REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID or
   ILLEGAL_GENERATION is a member rebalance (target: none). Printed per event: the time until
   the last group is served again, and that time beyond the wait the design imposes (a joining
   node gets its shards once it has been live for `--handoff-delay-ms`; a crashed node's shards
   are claimed once its ZooKeeper session expired), and the longest a group went unserved (from
   its old coordinator's first NOT_COORDINATOR or closed connection to its new one serving it).
   Target: within 2 s beyond that wait.
3. Capacity: one node, members in 100 groups a step, heartbeating every 3 s (Kafka's
   heartbeat.interval.ms), open loop; each step adds members in 100 more groups, doubling the
   count (at most 80,000 more a step), until the p99 of heartbeat latency reaches 20 ms, the node
   falls behind, `--capacity-max` or `--capacity-budget-s`. Printed per step with the node's and
   this client's CPU. Target: >= 10,000 members (issue 7's 10k members).
4. ZooKeeper's rate of commit-shaped transactions (`check` epoch, `check` leader, `set_data` of 1
   offset; and of 10 offsets) from 3 kazoo clients, 200 in flight each; then the 10-node projection
   (`bench/scale_model.py`, docs/coordinator.md "Scaling out").
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import signal
import sys
import time
import uuid
from pathlib import Path

import msgspec

from bench.coordinator import Conn, HeartbeatLoad, form_group, measure_heartbeats, stop_load
from bench.scale_model import HEARTBEAT_INTERVAL_S, PerNode, project
from bench.zk_writes import zk_commit_rate
from coordinator.layout import DEFAULT_SHARDS, shard_of
from coordinator.member.wire_client import commit_body, heartbeat_body
from coordinator.node.process import CoordinatorNodes
from coordinator.node.shards import preferred_nodes
from coordinator.wire import codec as P
from coordinator.wire.errors import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    NOT_COORDINATOR,
)

EFFICIENCY_TARGET = 0.8  # heartbeats per node CPU-second, 3 nodes / 1 node
MOVE_TARGET_S = 2.0  # a shard move, beyond the wait the design imposes
MEMBERS_TARGET = 10_000  # members one node holds at p99 < 20 ms
P99_LIMIT_MS = 20.0
GROUPS = 100
STEP_MAX = 80_000  # members added by one capacity step
FORMING_CONNECTIONS = 6_000  # connections open while groups form
POLL_S = 0.05
NODE_OPTIONS = {
    "shards": DEFAULT_SHARDS,
    "group_initial_rebalance_delay_ms": 200,
    "log_level": "warning",
    "max_connections": 20_000,
}
MOVED = {NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS}
TICK_S = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime: fields 14 and 15


class Group:
    """One bench group: its members (id, generation of the first run) and its coordinator now."""

    def __init__(self, name: str, members: list[tuple[str, int]], coordinator: int):
        self.name, self.members, self.coordinator = name, members, coordinator
        self.generation = members[0][1]
        self.served_at: float | None = None  # when its expected node first served it (an event)
        self.refused_at: float | None = None  # when its old coordinator first turned it away


class Cluster:
    """Node processes on one ZooKeeper chroot, and the bench's connections to them."""

    def __init__(self, zk: str, log_dir: Path):
        self.nodes = CoordinatorNodes(zk, 0, log_dir=log_dir, **NODE_OPTIONS)

    def live(self) -> tuple[int, ...]:
        return tuple(sorted(i for i, n in self.nodes.nodes.items() if n.alive))

    def address(self, node_id: int) -> tuple[str, int]:
        n = self.nodes.nodes[node_id]
        return n.host, n.port

    def cpu(self) -> dict[int, float]:
        return {i: cpu_seconds(self.nodes.nodes[i].proc.pid) for i in self.live()}


class MoveWatch:
    """Watches every group through its coordinator (see the module docstring, 2.)."""

    def __init__(self, cluster: Cluster, groups: list[Group]):
        self.cluster, self.groups = cluster, groups
        self.expected: dict[str, int] = {}
        self.rebalanced: dict[int, int] = {}  # error code -> count (should stay empty)
        self.lookups = 0
        self.paused = True
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self.tasks = [asyncio.create_task(self._watch(g)) for g in self.groups]

    async def stop(self) -> None:
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)

    async def event(self, what, live_after: tuple[int, ...], wait_s: float, from_ready: bool) -> dict:
        """Run `what()` (a blocking call: start or stop a node) and time until every group is
        served by its preferred node among `live_after`: from the call's start, or with
        `from_ready` from its return (a joining node counts from its `listening on`). `wait_s`:
        the wait the design imposes."""
        owner = preferred_nodes(DEFAULT_SHARDS, live_after)
        self.expected = {g.name: owner[shard_of(g.name, DEFAULT_SHARDS)] for g in self.groups}
        before, lookups = dict(self.rebalanced), self.lookups
        moved = sum(1 for g in self.groups if g.coordinator != self.expected[g.name])
        for g in self.groups:
            g.served_at = g.refused_at = None
        t0 = time.monotonic()
        self.paused = False
        await asyncio.to_thread(what)
        if from_ready:
            t0 = time.monotonic()
        deadline = time.monotonic() + 60
        while any(g.served_at is None for g in self.groups) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_S)
        self.paused = True
        done = [max(0.0, g.served_at - t0) for g in self.groups if g.served_at is not None]
        every = len(done) == len(self.groups)
        outages = [g.served_at - g.refused_at for g in self.groups if g.served_at and g.refused_at]
        return {
            "seconds": round(max(done), 2) if every else None,
            "beyond_wait_s": round(max(done) - wait_s, 2) if every else None,
            "groups_served": len(done),
            "outage_s": round(max(outages), 2) if outages else 0.0,
            "lookups": self.lookups - lookups,
            "moved_groups": moved,
            "rebalanced": {
                k: v - before.get(k, 0) for k, v in self.rebalanced.items() if v - before.get(k, 0)
            },
        }

    async def _watch(self, g: Group) -> None:
        conns: dict[int, Conn] = {}
        mid = g.members[0][0]
        while True:
            await asyncio.sleep(POLL_S)
            if self.paused or g.served_at is not None:
                continue
            try:
                conn = await self._conn(conns, g.coordinator)
                r = await conn.request(P.HEARTBEAT, heartbeat_body(g.name, g.generation, mid))
                code = r["error_code"]
                if code == 0 and g.coordinator == self.expected.get(g.name) and await self._same(conn, g):
                    g.served_at = time.monotonic()
                elif code in MOVED:
                    g.refused_at = g.refused_at or time.monotonic()
                    await self._find(conns, g)
                elif code:
                    self.rebalanced[code] = self.rebalanced.get(code, 0) + 1
            except (OSError, asyncio.IncompleteReadError, KeyError):
                conns.pop(g.coordinator, None)  # its node went away: ask another one
                g.refused_at = g.refused_at or time.monotonic()
                await self._find(conns, g)

    async def _same(self, conn: Conn, g: Group) -> bool:
        """The coordinator holds the group as loaded: Stable, the same members, and a heartbeat
        with the first generation answered NONE (a loading shard answers heartbeats unchecked)."""
        d = (await conn.request(P.DESCRIBE_GROUPS, {"groups": [g.name]}))["groups"][0]
        if d["error_code"] or d["group_state"] != "Stable":
            return False
        if {m["member_id"] for m in d["members"]} != {m for m, _ in g.members}:
            self.rebalanced[-1] = self.rebalanced.get(-1, 0) + 1  # other members: not the same group
            return False
        r = await conn.request(P.HEARTBEAT, heartbeat_body(g.name, g.generation, g.members[-1][0]))
        if r["error_code"]:
            self.rebalanced[r["error_code"]] = self.rebalanced.get(r["error_code"], 0) + 1
        return r["error_code"] == 0

    async def _find(self, conns: dict[int, Conn], g: Group) -> None:
        for node_id in self.cluster.live():
            try:
                conn = await self._conn(conns, node_id)
                r = await conn.request(P.FIND_COORDINATOR, {"key": g.name, "key_type": 0})
            except (OSError, asyncio.IncompleteReadError):
                conns.pop(node_id, None)
                continue
            self.lookups += 1
            if r["error_code"] == 0:
                g.coordinator = r["node_id"]
            return

    async def _conn(self, conns: dict[int, Conn], node_id: int) -> Conn:
        c = conns.get(node_id)
        if c is None:
            c = conns[node_id] = await Conn.open(*self.cluster.address(node_id), "scale-watch")
        return c


class CommitLoad(HeartbeatLoad):
    """Closed-loop OffsetCommits: an answer's error is its partition's."""

    @staticmethod
    def error_of(payload: bytes) -> int:
        body = msgspec.msgpack.decode(payload)["body"]
        if "topics" not in body:
            return body["error_code"]
        return max((p["error_code"] for t in body["topics"] for p in t["partitions"]), default=0)


async def per_cpu_second(
    cluster: Cluster,
    frames: dict[int, list[bytes]],
    connections: int,
    window: int,
    seconds: float,
    load=HeartbeatLoad,
) -> dict:
    """Closed loop: `connections` x `window` in flight to each node (its own frames), `seconds`
    after a 1 s warm-up; the answers per CPU-second of the nodes over that window."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    errors: dict[int, int] = {}
    protos = []
    for node_id, mine in frames.items():
        for c in range(connections):
            part = mine[c::connections]
            if part:
                factory = lambda part=part: load(part, window, 0.0, latencies, errors)  # noqa: E731
                protos.append((await loop.create_connection(factory, *cluster.address(node_id)))[1])
    await asyncio.sleep(1.0)
    latencies.clear()
    cpu0, own0, t0 = cluster.cpu(), _own_cpu(), time.perf_counter()
    await asyncio.sleep(seconds)
    count, cpu1, own1, elapsed = len(latencies), cluster.cpu(), _own_cpu(), time.perf_counter() - t0
    sample = sorted(latencies[:count])
    await stop_load(protos)
    node_cpu = sum(cpu1[i] - cpu0[i] for i in cpu1)
    return {
        "nodes": len(frames),
        "per_s": round(count / elapsed),
        "node_cpu_per_s": round(node_cpu / elapsed, 2),
        "client_cpu_per_s": round((own1 - own0) / elapsed, 2),
        "per_cpu_s": round(count / node_cpu) if node_cpu else 0,
        "p99_ms": round(1000 * sample[int(len(sample) * 0.99)], 2) if sample else None,
        "errors": errors,
    }


def _own_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def heartbeat_frames(groups: list[Group]) -> dict[int, list[bytes]]:
    """Every member's heartbeat, by the node that coordinates its group now."""
    out: dict[int, list[bytes]] = {}
    for g in groups:
        mine = out.setdefault(g.coordinator, [])
        for m, gen in g.members:
            mine.append(P.encode_request(P.HEARTBEAT, len(mine), heartbeat_body(g.name, gen, m), "scale-hb"))
    return out


def commit_frames(groups: list[Group]) -> dict[int, list[bytes]]:
    """A one-partition OffsetCommit per member (its own partition), by coordinator."""
    out: dict[int, list[bytes]] = {}
    for g in groups:
        mine = out.setdefault(g.coordinator, [])
        for i, (m, gen) in enumerate(g.members):
            body = commit_body(g.name, gen, m, {("scale-topic", i): 1000 + i})
            mine.append(P.encode_request(P.OFFSET_COMMIT, len(mine), body, "scale-commit"))
    return out


async def form_groups(host: str, port: int, prefix: str, members: int, node_id: int = 1) -> list[Group]:
    """`members` members in `GROUPS` groups on the node at host:port. A parked JoinGroup holds its
    connection, so a group forms over a connection per member: a few workers (`FORMING_CONNECTIONS` in
    all) form the groups one after the other, each over the same connections."""
    per_group = max(1, members // GROUPS)
    names = [f"{prefix}-{i}" for i in range(GROUPS)]
    formed: dict[str, Group] = {}

    async def worker(w: int) -> None:
        conns = [await Conn.open(host, port, f"scale-{w}-{i}") for i in range(per_group)]
        try:
            while names:
                name = names.pop()
                formed[name] = Group(name, await form_group(host, port, name, per_group, conns), node_id)
        finally:
            for c in conns:
                c.close()

    await asyncio.gather(*(worker(w) for w in range(max(1, FORMING_CONNECTIONS // per_group))))
    return list(formed.values())


async def scale_phase(zk: str, log_dir: Path, args) -> dict:
    """1. and 2. of the module docstring, on one cluster that grows to 3 nodes and shrinks back."""
    cluster = Cluster(zk, log_dir)
    try:
        await asyncio.to_thread(cluster.nodes.start_node, 1)
        groups = await form_groups(*cluster.address(1), f"so-{uuid.uuid4().hex[:6]}", args.members)
        watch = MoveWatch(cluster, groups)
        watch.start()
        shape = (args.connections, args.window, args.seconds)
        eff = {1: await per_cpu_second(cluster, heartbeat_frames(groups), *shape)}
        commits = await per_cpu_second(cluster, commit_frames(groups), *shape, load=CommitLoad)
        handoff = 3.0  # NodeConfig.handoff_delay_ms (the default)
        session = 10.0  # NodeConfig.zk_session_timeout_ms (the default)
        events = []
        for n in (2, 3):
            r = await watch.event(
                lambda n=n: cluster.nodes.start_node(n), (*cluster.live(), n), handoff, True
            )
            events.append((f"node {n} joins", handoff, r))
            eff[n] = await per_cpu_second(cluster, heartbeat_frames(groups), *shape)
        r = await watch.event(lambda: cluster.nodes.stop_node(3), (1, 2), 0.0, False)
        events.append(("node 3 leaves (SIGTERM)", 0.0, r))
        r = await watch.event(lambda: cluster.nodes.stop_node(2, sig=signal.SIGKILL), (1,), session, False)
        events.append(("node 2 crashes (SIGKILL)", session, r))
        await watch.stop()
        return {
            "efficiency": eff,
            "commits": commits,
            "events": events,
            "members": sum(len(g.members) for g in groups),
        }
    finally:
        await asyncio.to_thread(cluster.nodes.close)


async def capacity_phase(zk: str, log_dir: Path, args) -> dict:
    """3. of the module docstring: one node; each step adds members in 100 new groups (at most
    `STEP_MAX` at a time, so that the members formed earlier, silent meanwhile, stay well within
    their session) and all of them heartbeat every 3 s, open loop."""
    steps: list[dict] = []
    good = first_over = 0
    groups: list[Group] = []
    cluster = Cluster(zk, log_dir)
    started = time.monotonic()
    try:
        await asyncio.to_thread(cluster.nodes.start_node, 1)
        host, port = cluster.address(1)
        pid = cluster.nodes.nodes[1].proc.pid
        target = args.capacity_start
        while True:
            t0 = time.monotonic()
            prefix = f"cap{len(steps)}-{uuid.uuid4().hex[:6]}"
            groups += await form_groups(host, port, prefix, target - sum(len(g.members) for g in groups))
            setup = round(time.monotonic() - t0, 1)
            frames = heartbeat_frames(groups)[1]
            rate = len(frames) / HEARTBEAT_INTERVAL_S
            cpu0, own0, t0 = cpu_seconds(pid), _own_cpu(), time.monotonic()
            r = await measure_heartbeats(host, port, frames, args.connections, 1, rate, args.seconds)
            took = time.monotonic() - t0
            step = {
                **r,
                "members": len(frames),
                "rate": rate,
                "setup_s": setup,
                "node_cpu_per_s": round((cpu_seconds(pid) - cpu0) / took, 2),
                "client_cpu_per_s": round((_own_cpu() - own0) / took, 2),
                "rss_mb": round(cluster.nodes.nodes[1].rss_mb()),
            }
            if step["p99_ms"] >= P99_LIMIT_MS:  # disturbed? measured once more
                again = await measure_heartbeats(host, port, frames, args.connections, 1, rate, args.seconds)
                step = {**step, **again, "first_run": {k: r[k] for k in ("p99_ms", "heartbeats_per_s")}}
            steps.append(step)
            print(
                f"  {step['members']:,} members ({rate:,.0f} heartbeats/s offered): "
                f"{step['heartbeats_per_s']:,}/s answered, p50 {step['p50_ms']} ms, p99 {step['p99_ms']} ms, "
                f"errors {step['errors']}{_first(step)}; node CPU {step['node_cpu_per_s']} s/s, "
                f"RSS {step['rss_mb']} MB, "
                f"client CPU {step['client_cpu_per_s']} s/s (added in {setup} s)",
                flush=True,
            )
            kept_up = step["heartbeats_per_s"] >= 0.95 * rate
            if step["p99_ms"] < P99_LIMIT_MS and not step["errors"] and kept_up:
                good = step["members"]
            else:
                first_over = step["members"]
                break
            target += min(target, STEP_MAX)
            if target > args.capacity_max or time.monotonic() - started > args.capacity_budget_s:
                break
    finally:
        await asyncio.to_thread(cluster.nodes.close)
    return {"members": good, "first_over": first_over, "steps": steps}


def _first(step: dict) -> str:
    """A step measured twice (its first p99 over the limit) says what the first run gave."""
    if "first_run" not in step:
        return ""
    return f" (measured twice: the first run gave p99 {step['first_run']['p99_ms']} ms)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zk", default=None, help="ZooKeeper connect string (default: start a container)")
    ap.add_argument("--members", type=int, default=2000, help="members of the scale-out runs (in 100 groups)")
    ap.add_argument("--connections", type=int, default=20, help="connections per node")
    ap.add_argument("--window", type=int, default=4, help="heartbeats in flight per connection")
    ap.add_argument("--seconds", type=float, default=5.0, help="each measurement window")
    ap.add_argument("--capacity-start", type=int, default=10_000)
    ap.add_argument("--capacity-max", type=int, default=320_000)
    ap.add_argument("--capacity-budget-s", type=float, default=150.0, help="no new step after this")
    ap.add_argument("--no-capacity", dest="capacity", action="store_false")
    args = ap.parse_args(argv)

    server = None
    if args.zk is None:
        from testing.zookeeper import ZkServer

        server = ZkServer.start_single()
    log_dir = Path("/tmp") / f"bench-scale-out-{uuid.uuid4().hex[:6]}"
    try:
        zk = args.zk or server.connect_string
        scale = asyncio.run(scale_phase(f"{zk}/bench-scale-{uuid.uuid4().hex[:8]}", log_dir, args))
        _print_scale(scale)
        capacity = None
        if args.capacity:
            print("capacity: one node, members heartbeating every 3 s, open loop:", flush=True)
            chroot = f"{zk}/bench-scale-cap-{uuid.uuid4().hex[:8]}"
            capacity = asyncio.run(capacity_phase(chroot, log_dir, args))
        zk_rates = {k: zk_commit_rate(zk, k, 3.0) for k in (1, 10)}
    finally:
        if server is not None:
            server.remove()
    return _summary(scale, capacity, zk_rates)


def _print_scale(scale: dict) -> None:
    print(f"{scale['members']:,} members in {GROUPS} groups, closed loop per node:", flush=True)
    for n, e in scale["efficiency"].items():
        print(
            f"  {n} node(s): {e['per_s']:,} heartbeats/s, nodes' CPU {e['node_cpu_per_s']} s/s, "
            f"client's {e['client_cpu_per_s']} s/s: {e['per_cpu_s']:,} heartbeats per node CPU-second, "
            f"p99 {e['p99_ms']} ms, errors {e['errors']}",
            flush=True,
        )
    c = scale["commits"]
    print(
        f"  OffsetCommits (1 partition), 1 node: {c['per_s']:,}/s, nodes' CPU {c['node_cpu_per_s']} s/s: "
        f"{c['per_cpu_s']:,} per node CPU-second, p99 {c['p99_ms']} ms, errors {c['errors']}",
        flush=True,
    )
    print("shard moves (each group watched every 50 ms):", flush=True)
    for what, wait, r in scale["events"]:
        print(
            f"  {what}: every group served by its new node after {r['seconds']} s "
            f"({r['beyond_wait_s']} s beyond the {wait:g} s wait); {r['moved_groups']} groups moved, "
            f"none unserved longer than {r['outage_s']} s, "
            f"{r['lookups']} FindCoordinator; member rebalances {r['rebalanced'] or 'none'}",
            flush=True,
        )


def _summary(scale: dict, capacity: dict | None, zk_rates: dict[int, float]) -> int:
    eff = scale["efficiency"]
    ratio = eff[3]["per_cpu_s"] / max(1, eff[1]["per_cpu_s"])
    events = scale["events"]
    worst = max(
        (r["beyond_wait_s"] if r["beyond_wait_s"] is not None else float("inf")) for _, _, r in events
    )
    rebalanced = sum(sum(r["rebalanced"].values()) for _, _, r in events)
    print(
        f"ZooKeeper: {zk_rates[1]:,.0f} commit transactions/s of 1 offset, {zk_rates[10]:,.0f} of 10 "
        "(3 kazoo clients, 200 in flight each)"
    )
    results = [
        (
            f"heartbeats per node CPU-second, 3 nodes / 1 node: {eff[3]['per_cpu_s']:,} / "
            f"{eff[1]['per_cpu_s']:,} = {ratio:.2f}",
            f">= {EFFICIENCY_TARGET}",
            ratio >= EFFICIENCY_TARGET,
        ),
        (
            f"shard moves: slowest {worst:.2f} s beyond its wait, {rebalanced} member rebalances",
            f"<= {MOVE_TARGET_S:g} s, none",
            worst <= MOVE_TARGET_S and rebalanced == 0,
        ),
    ]
    if capacity is not None:
        results.append(
            (
                f"members one node holds at p99 < {P99_LIMIT_MS:g} ms: {capacity['members']:,} "
                + (
                    f"(over at {capacity['first_over']:,})"
                    if capacity["first_over"]
                    else "(the bench's bound: not reached)"
                ),
                f">= {MEMBERS_TARGET:,}",
                capacity["members"] >= MEMBERS_TARGET,
            )
        )
        per_node = PerNode(capacity["members"], eff[3]["per_cpu_s"], scale["commits"]["per_cpu_s"])
        p = project(per_node, zk_rates[1])
        print(
            f"10 nodes (projection, bench/scale_model.py): {p.members:,} members committing every 5 s "
            f"({p.members_per_node:,} a node), {p.heartbeats_per_s:,} heartbeats/s, {p.commits_per_s:,} "
            f"commits/s = {p.zk_share:.0%} of ZooKeeper's rate; ZooKeeper is the ceiling from "
            f"{p.zk_bound_nodes:g} nodes"
        )
    ok = True
    for figure, target, met in results:
        print(f"{figure}  [{target}: {'met' if met else 'MISSED'}]")
        ok = ok and met
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
