"""Benchmark of a coordinator node over loopback: heartbeat throughput/latency, and rebalance time.

Run on demand: `python -m bench.coordinator [--zk HOST:PORT] [--members 1000,10000] [--groups 1000]`.
Without `--zk` a ZooKeeper container is started (testing/zookeeper.py). One coordinator node
runs as a child process (`groupshift coordinator serve`); the load comes from *another* process
(this one), over loopback:

* heartbeats: `members` members spread over `groups` Stable groups, formed through the real
  JoinGroup/SyncGroup dance; then for `--seconds` each of `--connections` connections keeps
  `--window` heartbeats in flight (closed loop: the node's maximum throughput), and then the
  same connections offer `--rates` heartbeats/s open loop (the latency at that load).
  Reports heartbeats/s and p50/p99/max latency. Targets (issue 7): >= 20,000 heartbeats/s,
  p99 < 20 ms at 10k members.
* secured (unless `--no-secured`): the first member count again on a second node whose native
  listener is `SASL_TLS://` (TLS, then SASL SCRAM-SHA-256 once per connection) and which enforces
  Kafka's ACLs (`--authorizer acl`), against the plaintext node's figures. Target: >= 70 % of the
  plaintext heartbeats/s (bench/secured.py makes the certificates, the user and its ACLs).
* rebalance: a Stable 200-member group (one connection per member, heartbeating every
  `--heartbeat-interval-ms`) gets one more member; reported is the time from that JoinGroup to
  the last member's SyncGroup answer (every member learns of the rebalance by heartbeat).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections import deque
from pathlib import Path

import msgspec

from bench.secured import USER as BENCH_USER
from bench.secured import SecuredSetup, allow, connect_protocol, open_stream
from coordinator.member.wire_client import heartbeat_body, join_body, sync_body
from coordinator.node.process import NodeProcess
from coordinator.wire import codec as P

HEARTBEATS_TARGET = 20_000
SECURED_RATIO_TARGET = 0.7  # heartbeats/s over TLS + SASL (+ ACLs) vs plaintext
P99_TARGET_MS = 20.0
SESSION_MS = 120_000


class Conn:
    """A minimal asyncio wire client: requests in order, answers matched in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str):
        self.reader, self.writer, self.client_id = reader, writer, client_id
        self.ids = 0

    @classmethod
    async def open(cls, host: str, port: int, client_id: str, security=None) -> Conn:
        r, w = await open_stream(host, port, security, kafka=False)
        return cls(r, w, client_id)

    async def request(self, api: int, body: dict) -> dict:
        self.ids += 1
        self.writer.write(P.encode_request(api, self.ids, body, self.client_id))
        head = await self.reader.readexactly(4)
        payload = await self.reader.readexactly(int.from_bytes(head, "big"))
        return P.decode_response(payload)[1]

    def close(self) -> None:
        self.writer.close()


async def form_group(
    host: str, port: int, group: str, n: int, conns: list[Conn] | None = None, security=None
):
    """n members join and sync `group`; returns [(member id, generation)] (closes its own connections).
    `security`: the client's TLS and SASL (bench/secured.py), None for a plaintext listener."""
    own = conns is None
    if own:
        conns = [await Conn.open(host, port, f"bench-{i}", security) for i in range(n)]
    ids = []
    for c in conns:
        r = await c.request(P.JOIN_GROUP, join_body(group, "", session_timeout_ms=SESSION_MS))
        ids.append(r["member_id"])
    joins = await asyncio.gather(
        *(
            c.request(P.JOIN_GROUP, join_body(group, m, session_timeout_ms=SESSION_MS))
            for c, m in zip(conns, ids, strict=True)
        )
    )
    assert all(j["error_code"] == 0 for j in joins), joins[:2]
    gen, leader = joins[0]["generation_id"], joins[0]["leader"]
    assignment = {m: b"" for m in ids}
    syncs = await asyncio.gather(
        *(
            c.request(P.SYNC_GROUP, sync_body(group, gen, m, assignment if m == leader else None))
            for c, m in zip(conns, ids, strict=True)
        )
    )
    assert all(s["error_code"] == 0 for s in syncs), syncs[:2]
    if own:
        for c in conns:
            c.close()
    return [(m, gen) for m in ids]


OK_BODY = msgspec.msgpack.encode({"error_code": 0})  # a heartbeat answer's frame ends with it


class HeartbeatLoad(asyncio.Protocol):
    """One connection sending heartbeats for its members, cycling over them.

    Closed loop (`rate` 0): keeps `window` heartbeats in flight, sending one per answer.
    Open loop (`rate` > 0): `pace` sends `rate` heartbeats/s in small batches whatever the answers
    do, so the latency is the node's at that offered load.
    """

    def __init__(self, frames: list[bytes], window: int, rate: float, latencies: list, errors: dict):
        self.frames, self.window, self.rate = frames, window, rate
        self.latencies, self.errors = latencies, errors
        self.decoder = P.FrameDecoder(1 << 20)
        self.sent: deque[float] = deque()
        self.next = 0
        self.running = True
        self.credit = 0.0
        self.done = asyncio.Event()

    def connection_made(self, transport) -> None:
        self.transport = transport
        if not self.rate:
            self._send(self.window, time.perf_counter())

    def _send(self, n: int, now: float) -> None:
        frames, count = self.frames, len(self.frames)
        out = []
        for _ in range(n):
            out.append(frames[self.next])
            self.next = (self.next + 1) % count
            self.sent.append(now)
        if out:
            self.transport.write(b"".join(out))

    def pace(self, dt: float, now: float) -> None:
        """Open loop: send what `rate` allows for the last `dt` seconds."""
        self.credit += self.rate * dt
        n = int(self.credit)
        self.credit -= n
        self._send(n, now)

    @staticmethod
    def error_of(payload: bytes) -> int:
        """An answer's error code (subclasses read other answers and wire formats)."""
        if payload.endswith(OK_BODY):
            return 0
        return msgspec.msgpack.decode(payload)["body"]["error_code"]

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        answered = 0
        for payload in self.decoder.feed(data):
            self.latencies.append(now - self.sent.popleft())
            answered += 1
            code = self.error_of(payload)
            if code:
                self.errors[code] = self.errors.get(code, 0) + 1
        if self.running and not self.rate:  # one write per batch of answers: fewer syscalls
            self._send(answered, now)
        if not self.running and not self.sent:
            self.done.set()


async def heartbeat_bench(
    host,
    port,
    members: int,
    groups: int,
    connections: int,
    window: int,
    seconds: float,
    rates: list[float],
    security=None,
):
    per_group = max(1, members // groups)
    t0 = time.monotonic()
    sem = asyncio.Semaphore(64)
    prefix = uuid.uuid4().hex[:6]

    async def one(g: int):
        async with sem:
            name = f"hb-{prefix}-{g}"
            return name, await form_group(host, port, name, per_group, security=security)

    formed = await asyncio.gather(*(one(g) for g in range(groups)))
    setup_s = time.monotonic() - t0
    frames = []
    for group, ms in formed:
        for m, gen in ms:
            frames.append(
                P.encode_request(P.HEARTBEAT, len(frames), heartbeat_body(group, gen, m), "bench-hb")
            )
    shape = (connections, window)
    runs = [await measure_heartbeats(host, port, frames, *shape, 0.0, seconds, security=security)]
    for rate in rates:
        runs.append(await measure_heartbeats(host, port, frames, *shape, rate, seconds, security=security))
    return {"members": len(frames), "groups": groups, "setup_s": round(setup_s, 2), "runs": runs}


async def measure_heartbeats(
    host,
    port,
    frames,
    connections: int,
    window: int,
    rate: float,
    seconds: float,
    load=HeartbeatLoad,
    security=None,
) -> dict:
    """Send `frames` (heartbeats, round robin) over `connections` for `seconds` after a 1 s warm-up:
    closed loop (`rate` 0) or open loop at `rate`/s. `load`: the protocol class answering them
    (`HeartbeatLoad`, or a subclass that reads another wire format's answers; a `KafkaHeartbeatLoad`
    authenticates with Kafka's SASL frames). `security`: connect through TLS and SASL first."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    errors: dict[int, int] = {}
    protos = []
    for c in range(connections):
        mine = frames[c::connections]
        factory = lambda mine=mine: load(mine, window, rate / connections, latencies, errors)  # noqa: E731
        if security is None:
            _, proto = await loop.create_connection(factory, host, port)
        else:
            kafka = getattr(load, "kafka", False)
            _, proto = await connect_protocol(host, port, security, kafka, factory)
        protos.append(proto)
    pacer = asyncio.create_task(_pace(protos)) if rate else None
    await asyncio.sleep(1.0)  # warm-up
    latencies.clear()
    start = time.perf_counter()
    await asyncio.sleep(seconds)
    count = len(latencies)
    elapsed = time.perf_counter() - start
    sample = sorted(latencies[:count])
    if pacer is not None:
        pacer.cancel()
    await stop_load(protos)
    return {
        "mode": f"open loop, {rate:,.0f}/s offered"
        if rate
        else f"closed loop, {connections * window} in flight",
        "connections": connections,
        "heartbeats_per_s": round(count / elapsed),
        "p50_ms": round(1000 * sample[len(sample) // 2], 3),
        "p99_ms": round(1000 * sample[int(len(sample) * 0.99)], 3),
        "max_ms": round(1000 * sample[-1], 3),
        "errors": errors,
    }


async def stop_load(protos: list[HeartbeatLoad]) -> None:
    """Stop the load: no new heartbeats, the ones in flight answered (30 s at most), then close."""
    for p in protos:
        p.running = False
        if not p.sent:
            p.done.set()
    await asyncio.wait_for(asyncio.gather(*(p.done.wait() for p in protos)), 30)
    for p in protos:
        p.transport.close()


async def _pace(protos: list[HeartbeatLoad], tick: float = 0.002) -> None:
    last = time.perf_counter()
    while True:
        await asyncio.sleep(tick)
        now = time.perf_counter()
        for p in protos:
            p.pace(now - last, now)
        last = now


async def rebalance_bench(host, port, members: int, heartbeat_interval_ms: int):
    group = f"rb-{uuid.uuid4().hex[:6]}"
    conns = [await Conn.open(host, port, f"rb-{i}") for i in range(members)]
    ids = await form_group(host, port, group, members, conns)
    finished: list[float] = []
    stop = asyncio.Event()

    async def member(c: Conn, mid: str, gen: int):
        while not stop.is_set():
            await asyncio.sleep(heartbeat_interval_ms / 1000)
            r = await c.request(P.HEARTBEAT, heartbeat_body(group, gen, mid))
            if r["error_code"] == P.ErrorCode.REBALANCE_IN_PROGRESS:
                j = await c.request(P.JOIN_GROUP, join_body(group, mid, session_timeout_ms=SESSION_MS))
                gen = j["generation_id"]
                assignment = {x["member_id"]: b"" for x in j["members"]} if j["leader"] == mid else None
                s = await c.request(P.SYNC_GROUP, sync_body(group, gen, mid, assignment))
                assert s["error_code"] == 0, s
                finished.append(time.perf_counter())
                return

    tasks = [asyncio.create_task(member(c, m, g)) for c, (m, g) in zip(conns, ids, strict=True)]
    await asyncio.sleep(heartbeat_interval_ms / 1000 * 1.5)
    newcomer = await Conn.open(host, port, "rb-new")
    t0 = time.perf_counter()
    r = await newcomer.request(P.JOIN_GROUP, join_body(group, "", session_timeout_ms=SESSION_MS))
    j = await newcomer.request(P.JOIN_GROUP, join_body(group, r["member_id"], session_timeout_ms=SESSION_MS))
    s = await newcomer.request(P.SYNC_GROUP, sync_body(group, j["generation_id"], r["member_id"]))
    assert s["error_code"] == 0, s
    finished.append(time.perf_counter())
    await asyncio.wait_for(asyncio.gather(*tasks), 60)
    stop.set()
    for c in (*conns, newcomer):
        c.close()
    return {
        "members": members + 1,
        "heartbeat_interval_ms": heartbeat_interval_ms,
        "rebalance_ms": round(1000 * (max(finished) - t0), 1),
        "rebalance_minus_heartbeat_interval_ms": round(
            1000 * (max(finished) - t0) - heartbeat_interval_ms, 1
        ),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zk", default=None, help="ZooKeeper connect string (default: start a container)")
    ap.add_argument("--members", default="1000,10000", help="comma-separated member counts")
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--window", type=int, default=4, help="heartbeats in flight per connection")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument(
        "--rates",
        default="20000",
        help="open-loop offered heartbeats/s to measure latency at (after the closed-loop run)",
    )
    ap.add_argument("--rebalance-members", type=int, default=200)
    ap.add_argument("--heartbeat-interval-ms", type=int, default=100)
    ap.add_argument(
        "--connect", default=None, help="HOST:PORT of a running node to load instead of starting one"
    )
    ap.add_argument(
        "--authorizer",
        choices=["acl"],
        default=None,
        help="start the node with --authorizer acl, the bench's groups allowed by a prefixed ACL: "
        "every request pays the ACL check (docs/security.md)",
    )
    ap.add_argument(
        "--no-secured",
        dest="secured",
        action="store_false",
        help="skip the secured run (the first member count again over TLS + SASL with ACLs)",
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)

    server = None
    zk = args.zk
    if args.connect:
        host, _, port = args.connect.rpartition(":")
        results = _run(args, host, int(port))
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    if zk is None:
        from testing.zookeeper import ZkServer

        server = ZkServer.start_single()
        zk = server.connect_string
    zk = f"{zk}/bench-coordinator-{uuid.uuid4().hex[:8]}"
    log = Path("/tmp") / f"bench-coordinator-{uuid.uuid4().hex[:6]}.log"
    if args.authorizer:
        allow(zk, "User:ANONYMOUS", groups=BENCH_GROUPS)
    node = start_node(zk, *(["--authorizer", "acl"] if args.authorizer else []), log_path=log)
    try:
        results = _run(args, node.host, node.port)
    finally:
        node.stop()
    try:
        if args.secured:
            results["secured"] = _secured_run(args, server.connect_string if server else args.zk, results)
    finally:
        if server is not None:
            server.remove()
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


BENCH_GROUPS = ("hb-", "rb-")  # the prefixes of the bench's groups (heartbeats, rebalance)


def start_node(zk: str, *extra: str, log_path: Path, listen: str = "127.0.0.1:0") -> NodeProcess:
    """Node 1 as every bench loads it: quick first rebalance, quiet log, room for the load's
    connections (`extra`: more `coordinator serve` options)."""
    return NodeProcess.start(
        zk,
        1,
        "--group-initial-rebalance-delay-ms",
        "200",
        "--log-level",
        "warning",
        "--max-connections",
        "20000",
        *extra,
        listen=listen,
        log_path=log_path,
    )


def _secured_run(args, zk_base: str, plain: dict) -> dict:
    """The first member count again on a node whose native listener is TLS + SASL (SCRAM-SHA-256)
    with ACLs enforced, against the plaintext node's figures (target: >= 70 % of its heartbeats/s)."""
    zk = f"{zk_base}/bench-coordinator-secured-{uuid.uuid4().hex[:8]}"
    setup = SecuredSetup(zk)
    allow(zk, f"User:{BENCH_USER}", groups=BENCH_GROUPS)
    log = Path("/tmp") / f"bench-coordinator-secured-{uuid.uuid4().hex[:6]}.log"
    node = start_node(zk, *setup.node_args(), listen=setup.listen, log_path=log)
    members = int(args.members.split(",")[0])
    try:
        res = asyncio.run(
            heartbeat_bench(
                node.host,
                node.port,
                members,
                args.groups,
                args.connections,
                args.window,
                args.seconds,
                [float(r) for r in args.rates.split(",") if r],
                security=setup.security,
            )
        )
    finally:
        node.stop()
        setup.remove()
    base = plain["heartbeats"][0]
    print(f"secured: {res['members']} members, TLS + SASL {setup.security.mechanism} + ACLs:", flush=True)
    for r, p in zip(res["runs"], base["runs"], strict=True):
        print(
            f"  {r['mode']}: {r['heartbeats_per_s']:,} heartbeats/s  p50 {r['p50_ms']} ms  "
            f"p99 {r['p99_ms']} ms  (plaintext {p['heartbeats_per_s']:,}/s, p99 {p['p99_ms']} ms)  "
            f"errors {r['errors']}",
            flush=True,
        )
    ratio = res["runs"][0]["heartbeats_per_s"] / max(1, base["runs"][0]["heartbeats_per_s"])
    met = "met" if ratio >= SECURED_RATIO_TARGET else "MISSED"
    print(
        f"secured/plaintext heartbeats/s (closed loop): {ratio:.0%}  [>= {SECURED_RATIO_TARGET:.0%}: {met}]"
    )
    return {**res, "ratio": round(ratio, 3)}


def _run(args, host: str, port: int) -> dict:
    results: dict = {"heartbeats": [], "rebalance": None}
    rates = [float(r) for r in args.rates.split(",") if r]
    for members in [int(m) for m in args.members.split(",")]:
        res = asyncio.run(
            heartbeat_bench(
                host, port, members, args.groups, args.connections, args.window, args.seconds, rates
            )
        )
        results["heartbeats"].append(res)
        print(
            f"{res['members']} members in {res['groups']} groups (formed in {res['setup_s']} s):", flush=True
        )
        for r in res["runs"]:
            ok = r["heartbeats_per_s"] >= HEARTBEATS_TARGET * 0.98 and r["p99_ms"] < P99_TARGET_MS
            print(
                f"  {r['mode']}: {r['heartbeats_per_s']:,} heartbeats/s  p50 {r['p50_ms']} ms  "
                f"p99 {r['p99_ms']} ms  max {r['max_ms']} ms  errors {r['errors']}  "
                f"[>= {HEARTBEATS_TARGET:,}/s with p99 < {P99_TARGET_MS:g} ms: {'met' if ok else 'not met'}]",
                flush=True,
            )
    r = asyncio.run(rebalance_bench(host, port, args.rebalance_members, args.heartbeat_interval_ms))
    results["rebalance"] = r
    print(
        f"rebalance of a {r['members']}-member group after one join: {r['rebalance_ms']} ms "
        f"(members heartbeat every {r['heartbeat_interval_ms']} ms; "
        f"{r['rebalance_minus_heartbeat_interval_ms']} ms beyond one heartbeat interval)",
        flush=True,
    )
    return results


if __name__ == "__main__":
    sys.exit(main())
