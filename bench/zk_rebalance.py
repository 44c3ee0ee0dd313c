"""Benchmark scheme one on one ZooKeeper container: time to stable and ZooKeeper requests per round.

For N members (default 5, 10, 25, 50) of one group on one topic with 2N partitions, three
scenarios: a simultaneous cold start of N members, one member joining N, one of N+1 leaving.
Members are faithful 0.8 members (default backoff 2000 ms, 4 attempts) in this process.

    .venv/bin/python -m bench.zk_rebalance                 # all sizes
    .venv/bin/python -m bench.zk_rebalance --sizes 5 10 --backoff-ms 2000 --json out.json

Columns: `stable s` = event → every member stable and every partition owned exactly once;
`rounds` = most `syncedRebalance` runs by one member; `attempts`/`failed` = all members'
attempts; `zk req` = requests the members sent (event logs); `req/round` = zk req / rounds;
`pred reads` = the predicted N·(N+2B+T+5) reads per round; `server pkts` = the server's
`zk_packets_received` delta (mntr; includes pings).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.zk import connect  # noqa: E402
from testing.zookeeper import ZkServer  # noqa: E402
from topics.registry import create_topic  # noqa: E402
from zk_rebalance.events import read_events  # noqa: E402
from zk_rebalance.member import ZkGroupMember  # noqa: E402
from zk_rebalance.metrics import conflicts, predicted_reads, zk_requests  # noqa: E402


def wait_stable(members, partitions: int, timeout: float, settle: float = 0.3) -> float | None:
    """Seconds until all members are stable and own each partition exactly once (held `settle` s)."""
    t0 = time.monotonic()
    since = None
    while time.monotonic() - t0 < timeout:
        ok = all(m.is_stable() for m in members)
        if ok:
            got = [m.assignment() for m in members]
            ok = sum(len(a) for a in got) == partitions and len(set().union(*got)) == partitions
        if ok:
            since = since or time.monotonic()
            if time.monotonic() - since >= settle:
                return since - t0
        else:
            since = None
        time.sleep(0.01)
    return None


def scenario(server: ZkServer, n: int, kind: str, logs: Path, backoff_ms: int, timeout: float) -> dict:
    chroot = f"{server.connect_string}/bench-{uuid.uuid4().hex[:8]}"
    admin = connect(chroot)
    partitions = 2 * n
    create_topic(admin, "t", partitions)
    logdir = logs / f"{kind}-{n}"

    def new(i: int) -> ZkGroupMember:
        return ZkGroupMember(
            chroot,
            "bench",
            ["t"],
            consumer_id=f"m{i:03d}",
            rebalance_backoff_ms=backoff_ms,
            auto_commit=False,
            event_log=str(logdir / f"m{i:03d}.jsonl"),
        )

    members: list[ZkGroupMember] = []
    try:
        size = n if kind != "leave" else n + 1
        if kind != "cold start":
            members = [new(i) for i in range(size if kind == "leave" else n)]
            for m in members:
                m.start()
                time.sleep(0.02)
            if wait_stable(members, partitions, timeout) is None:
                return {"n": n, "scenario": kind, "error": "no stable group before the event"}
        before = server.mntr()
        t0 = time.monotonic()
        if kind == "cold start":
            members = [new(i) for i in range(n)]
            for m in members:
                m.start()
        elif kind == "join":
            members.append(new(n))
            members[-1].start()
        else:
            members.pop(len(members) // 2).close()
        took = wait_stable(members, partitions, timeout)
        after = server.mntr()
        t1 = time.monotonic()
    finally:
        for m in members:
            m.close(timeout=2)
        admin.stop()
        admin.close()
    events = read_events(logdir.glob("*.jsonl"))
    win = [e for e in events if t0 <= e["t"] <= t1]
    rounds_by_member: dict[str, int] = {}
    for e in win:
        if e["ev"] == "rebalance_begin":
            rounds_by_member[e["member"]] = rounds_by_member.get(e["member"], 0) + 1
    rounds = max(rounds_by_member.values(), default=0)
    req = zk_requests(events, t0, t1)["total"]
    s1 = conflicts(events, t0, t1)
    return {
        "n": len(members) if kind != "leave" else n,
        "scenario": kind,
        "stable_s": took,
        "rounds": rounds,
        "attempts": s1["attempts"],
        "failed_attempts": s1["failed_attempts"],
        "conflicts": s1["conflicts"],
        "rebalance_failures": s1["rebalance_failures"],
        "zk_requests": req,
        "requests_per_round": req / rounds if rounds else None,
        "predicted_reads_per_round": predicted_reads(len(members), 0, 1),
        "server_packets": int(after.get("zk_packets_received", 0))
        - int(before.get("zk_packets_received", 0)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[5, 10, 25, 50])
    ap.add_argument("--scenarios", nargs="+", default=["cold start", "join", "leave"])
    ap.add_argument("--backoff-ms", type=int, default=2000, help="rebalance.backoff.ms (0.8 default 2000)")
    ap.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for a stable group")
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    rows = []
    server = ZkServer.start_single()
    try:
        with tempfile.TemporaryDirectory(prefix="zkbench-") as tmp:
            for n in args.sizes:
                for kind in args.scenarios:
                    row = scenario(server, n, kind, Path(tmp), args.backoff_ms, args.timeout)
                    rows.append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
    finally:
        server.remove()
    header = [
        "N",
        "scenario",
        "stable s",
        "rounds",
        "attempts",
        "failed",
        "conflicts",
        "gave up",
        "zk req",
        "req/round",
        "pred reads",
        "server pkts",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        if "error" in r:
            print(f"| {r['n']} | {r['scenario']} | {r['error']} |")
            continue
        stable = f"{r['stable_s']:.2f}" if r["stable_s"] is not None else "not stable"
        rpr = f"{r['requests_per_round']:.0f}" if r["requests_per_round"] else "-"
        print(
            f"| {r['n']} | {r['scenario']} | {stable} | {r['rounds']} | {r['attempts']} | "
            f"{r['failed_attempts']} | {r['conflicts']} | {r['rebalance_failures']} | {r['zk_requests']} | "
            f"{rpr} | {r['predicted_reads_per_round']} | {r['server_packets']} |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
