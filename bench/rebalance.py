"""Benchmark: one join into a stable group of N members under all three schemes, on one ZooKeeper.

Run on demand: `python -m bench.rebalance [--sizes 10,50,100] [--watch-group] [--json out.json]`.
One ZooKeeper container is started (testing/zookeeper.py) unless `--zk` is given; scheme three uses one
coordinator node process (`groupshift coordinator serve`). For every N, in one run:

* scheme one: N `ZkGroupMember`s (each its own ZooKeeper session, Kafka 0.8 defaults except the
  rebalance backoff/retries below) form a stable group; then one member joins. Time to stable:
  from the join until every member holds the new assignment (the owners cover every partition
  once, every member `is_stable()`).
* scheme three: N `CoordinatorMember`s (one shared ZooKeeper client, heartbeats every
  `--heartbeat-ms`) form a stable group; then one joins. Time to stable: from the join until every
  member is stable at one new generation and the assignments cover every partition once.
* scheme two, the draft (`server_assigned=True`) and the incremental form (`IncrementalMember`):
  the same, with members that never touch ZooKeeper (bootstrap only); the incremental form is
  stable when every member holds its target and the assignments cover every partition once.
* largest pause of a kept partition: for every partition whose owner is the same before and after
  the join, the longest time it was revoked (listener callbacks) — eager schemes revoke everything
  for the whole rebalance, the incremental form nothing.
* per rebalance: ZooKeeper requests and watch notifications, server-side (`mntr` deltas:
  `zk_packets_received`, the sum of the `zk_sum_node_*_watch_count` summaries) and client-side
  (scheme one: the members' event logs; scheme three: the members' own ZooKeeper reads).
* `--watch-group`: the coordinator schemes' members keep a WatchGroup parked at the node
  (docs/consumer.md), so they hear of the join when it happens instead of at their next heartbeat.
* rolling restart of 20 scheme-three members, dynamic vs static (`group_instance_id`): each is
  closed and started again in turn; counted are the group's rebalances (generation increments).

Targets: scheme three >= 20x faster than scheme one at N = 50 and < 300 ms with 100 ms
heartbeats; scheme three's ZooKeeper requests per rebalance constant in N; <= 1 rebalance for a
static rolling restart; scheme two's watch notifications per join <= 1 at every N; the incremental
form's time to stable <= scheme three's at every N, and its largest pause of a kept partition
< 2 heartbeat intervals.
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

from coordinator.member.consumer_member import CoordinatorMember
from coordinator.member.incremental_member import IncrementalMember
from coordinator.member.state import MemberState
from coordinator.node.process import CoordinatorNodes
from core.scheme import Rebalancer, Scheme
from core.types import TopicPartition
from core.zk import connect
from experiments.scale import Timeline, wait
from experiments.zkstats import delta, server_counts, watches
from topics.registry import create_topic

TARGET_RATIO = 20.0
TARGET_MS = 300.0


def covers(assignments: list[set[TopicPartition]], partitions: int) -> bool:
    total = sum(len(a) for a in assignments)
    return total == partitions and len(set().union(*assignments)) == partitions


# --- scheme one ------------------------------------------------------------------------------


def scheme_one(zk_connect: str, n: int, partitions: int, args, logdir: Path) -> dict:
    from zk_rebalance.events import read_events
    from zk_rebalance.member import ZkGroupMember

    group = f"zk-{n}-{uuid.uuid4().hex[:6]}"
    opts = dict(
        session_timeout_ms=args.zk_session_ms,
        rebalance_backoff_ms=args.zk_backoff_ms,
        rebalance_max_retries=args.zk_retries,
        auto_commit=False,
    )

    def make(i: int) -> ZkGroupMember:
        return ZkGroupMember(zk_connect, group, ["t"], event_log=str(logdir / f"{group}-{i}.jsonl"), **opts)

    members = [make(i) for i in range(n)]
    for m in members:
        m.start()

    def stable(ms) -> bool:
        return all(m.is_stable() for m in ms) and covers([m.assignment() for m in ms], partitions)

    formed = wait(lambda: stable(members), args.timeout, step=0.02)
    if formed is None:
        for m in members:
            m.close()
        return {"error": f"scheme one: {n} members did not form a stable group in {args.timeout}s"}
    time.sleep(args.settle)
    host, port = args.zk_host_port
    at_rest = watches(host, port)
    before = server_counts(host, port)
    t_join = time.monotonic()
    joiner = make(n)
    joiner.start()
    everyone = [*members, joiner]
    done = wait(lambda: stable(everyone) and len(joiner.assignment()) > 0, args.timeout)
    after = server_counts(host, port)
    result: dict = {"members": n}
    if done is None:
        result["error"] = f"no stable group within {args.timeout}s after the join"
    else:
        result["time_to_stable_ms"] = (done - t_join) * 1000
    for m in everyone:
        m.close()
    events = read_events(sorted(logdir.glob(f"{group}-*.jsonl")))
    window = [e for e in events if e.get("t", 0) >= t_join and (done is None or e["t"] <= done)]
    result["server"] = delta(after, before) | at_rest
    result["client"] = {
        "requests": sum(1 for e in window if e["ev"] == "zk"),
        "watch_notifications": sum(1 for e in window if e["ev"] == "watch"),
        "rebalance_rounds": sum(1 for e in window if e["ev"] == "rebalance_begin"),
    }
    return result


# --- schemes two and three --------------------------------------------------------------------


def kept_partitions_pause(members, timelines, before, t_join: float, done: float) -> float:
    worst = 0.0
    for m, tl, was in zip(members, timelines, before, strict=True):
        kept = was & m.assignment()
        worst = max(worst, tl.kept_pause(t_join, kept, done))
    return worst


# --- scheme three ----------------------------------------------------------------------------

# The coordinated schemes measured, as group names and messages call them.
SHORT = {Scheme.TWO: "two", Scheme.TWO_INCREMENTAL: "incremental", Scheme.THREE_EAGER: "three"}


def coordinator_member(
    zk, nodes: CoordinatorNodes, group: str, args, kind: Scheme = Scheme.THREE_EAGER, **kw
) -> CoordinatorMember:
    """A scheme-three member, or scheme two's (`kind` TWO or TWO_INCREMENTAL: no ZooKeeper client)."""
    make = IncrementalMember if kind.incremental else CoordinatorMember
    if kind is Scheme.TWO:
        kw["server_assigned"] = True
    kw.setdefault("zk", zk if kind.rebalancer is Rebalancer.COORDINATOR else None)
    return make(
        group,
        ["t"],
        bootstrap=nodes.bootstrap,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_interval_ms=600_000,
        rebalance_timeout_ms=60_000,
        retry_backoff_ms=20,
        watch_group=args.watch_group,
        **kw,
    )


def group_stable(members: list[CoordinatorMember], partitions: int, incremental: bool = False) -> bool:
    gens = set()
    for m in members:
        if m.state != MemberState.STABLE or m._rejoin_needed:
            return False
        if incremental and m._target != m._owned:
            return False
        gens.add(m.generation)
    # Incremental members converge one by one: their epochs may differ once everyone holds its target.
    return (incremental or len(gens) == 1) and covers([m.assignment() for m in members], partitions)


def scheme_three(
    zk, nodes: CoordinatorNodes, n: int, partitions: int, args, kind: Scheme = Scheme.THREE_EAGER
) -> dict:
    """One join into a stable group of `n` coordinator members: scheme three, or scheme two's
    draft (`Scheme.TWO`) or incremental form (`Scheme.TWO_INCREMENTAL`)."""
    group = f"{SHORT[kind]}-{n}-{uuid.uuid4().hex[:6]}"
    incremental = kind.incremental
    timelines = [Timeline() for _ in range(n)]
    members = [coordinator_member(zk, nodes, group, args, kind, listener=tl) for tl in timelines]
    for m in members:
        m.start()
    if wait(lambda: group_stable(members, partitions, incremental), args.timeout, step=0.02) is None:
        for m in members:
            m.close()
        return {"error": f"scheme {SHORT[kind]}: {n} members did not form a stable group in {args.timeout}s"}
    time.sleep(args.settle)
    if not group_stable(members, partitions, incremental):
        wait(lambda: group_stable(members, partitions, incremental), args.timeout, step=0.02)
    generation = max(m.generation for m in members)
    before_assignment = [m.assignment() for m in members]
    zk_reads_before = sum(m.stats["zk_requests"] for m in members)
    host, port = args.zk_host_port
    at_rest = watches(host, port)
    before = server_counts(host, port)
    t_join = time.monotonic()
    joiner = coordinator_member(zk, nodes, group, args, kind)
    joiner.start()
    everyone = [*members, joiner]
    done = wait(
        lambda: (
            group_stable(everyone, partitions, incremental)
            and joiner.assignment()
            and max(m.generation for m in everyone) > generation
        ),
        args.timeout,
    )
    after = server_counts(host, port)
    result: dict = {"members": n}
    if done is None:
        result["error"] = f"no stable group within {args.timeout}s after the join"
    else:
        result["time_to_stable_ms"] = (done - t_join) * 1000
        result["generations"] = max(m.generation for m in members) - generation
        result["kept_pause_ms"] = (
            kept_partitions_pause(members, timelines, before_assignment, t_join, done) * 1000
        )
        result["moved"] = sum(
            len(b - m.assignment()) for b, m in zip(before_assignment, members, strict=True)
        )
    result["server"] = delta(after, before) | at_rest
    result["client"] = {
        "requests": sum(m.stats["zk_requests"] for m in everyone) - zk_reads_before,
        "watch_notifications": 0,
        "heartbeats": sum(m.stats["heartbeats"] for m in everyone),
    }
    for m in everyone:
        m.close()
    return result


def rolling_restart(zk, nodes: CoordinatorNodes, static: bool, partitions: int, args, size: int = 20) -> dict:
    group = f"roll-{'static' if static else 'dynamic'}-{uuid.uuid4().hex[:6]}"

    def make(i: int) -> CoordinatorMember:
        return coordinator_member(zk, nodes, group, args, group_instance_id=f"member-{i}" if static else None)

    members = [make(i) for i in range(size)]
    for m in members:
        m.start()
    if wait(lambda: group_stable(members, partitions), args.timeout, step=0.02) is None:
        for m in members:
            m.close()
        return {"error": f"{size} members did not form a stable group"}
    time.sleep(args.settle)
    first = members[0].generation
    t0 = time.monotonic()
    for i in range(size):
        members[i].close()
        members[i] = make(i)
        members[i].start()
        if wait(lambda: group_stable(members, partitions), args.timeout, step=0.005) is None:
            for m in members:
                m.close()
            return {"error": f"no stable group after restarting member {i}"}
    generations = max(m.generation for m in members) - first
    result = {"members": size, "rebalances": generations, "seconds": time.monotonic() - t0}
    for m in members:
        m.close()
    return result


# --- main ------------------------------------------------------------------------------------


SCHEMES = (
    ("scheme_one", "one"),
    ("scheme_two", "two"),
    ("scheme_two_incremental", "two inc."),
    ("scheme_three", "three"),
)


def table(results: dict) -> str:
    names = " / ".join(short for _, short in SCHEMES)
    lines = [
        f"| N | time to stable, ms ({names}) | three vs one | ZK requests, server ({names}) | "
        f"watch notifications, server ({names}) | largest kept-partition pause, ms ({names}) | "
        f"partitions moved ({names}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in results["sizes"]:
        rs = [row.get(key, _empty()) for key, _ in SCHEMES]
        t1, t3 = rs[0].get("time_to_stable_ms"), rs[3].get("time_to_stable_ms")
        ratio = f"{t1 / t3:.0f}x" if t1 and t3 else "-"
        lines.append(
            f"| {row['members']} | {' / '.join(_ms(r.get('time_to_stable_ms')) for r in rs)} | {ratio} | "
            f"{' / '.join(str(r['server']['requests']) for r in rs)} | "
            f"{' / '.join(str(r['server']['watch_notifications']) for r in rs)} | "
            f"{' / '.join(['n/a'] + [_ms(r.get('kept_pause_ms')) for r in rs[1:]])} | "
            f"{' / '.join(str(r.get('moved', '-')) for r in rs)} |"
        )
    lines += [
        "",
        f"| N | watches at rest (`mntr`, {names}) | watching sessions (`wchc`, {names}) |",
        "|---|---|---|",
    ]
    for row in results["sizes"]:
        rs = [row.get(key, _empty())["server"] for key, _ in SCHEMES]
        lines.append(
            f"| {row['members']} | {' / '.join(str(r.get('watches', 0)) for r in rs)} | "
            f"{' / '.join(str(r.get('watching_sessions', 0)) for r in rs)} |"
        )
    roll = results["rolling_restart"]
    lines += [
        "",
        "| rolling restart of 20 (scheme three) | rebalances | seconds |",
        "|---|---|---|",
        f"| dynamic | {roll['dynamic'].get('rebalances', '-')} | {roll['dynamic'].get('seconds', 0):.1f} |",
        f"| static | {roll['static'].get('rebalances', '-')} | {roll['static'].get('seconds', 0):.1f} |",
    ]
    return "\n".join(lines)


def _ms(v: float | None) -> str:
    return f"{v:.0f}" if v is not None else "failed"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--zk", help="ZooKeeper HOST:PORT (default: start a container)")
    ap.add_argument("--sizes", default="10,50,100")
    ap.add_argument("--partitions", type=int, default=0, help="topic size (default: 2 x the largest N)")
    ap.add_argument("--heartbeat-ms", type=int, default=100)
    ap.add_argument("--session-ms", type=int, default=10_000)
    ap.add_argument("--zk-session-ms", type=int, default=6000, help="scheme one's session (0.8 default)")
    ap.add_argument(
        "--zk-backoff-ms", type=int, default=2000, help="scheme one's rebalance.backoff.ms (0.8: 2000)"
    )
    ap.add_argument("--zk-retries", type=int, default=10, help="scheme one's rebalance.max.retries (0.8: 4)")
    ap.add_argument("--repeat", type=int, default=1, help="joins measured per N and scheme (median reported)")
    ap.add_argument("--settle", type=float, default=0.5, help="seconds between formation and the join")
    ap.add_argument("--timeout", type=float, default=180.0)
    ap.add_argument("--skip-scheme-one", action="store_true")
    ap.add_argument(
        "--watch-group",
        action="store_true",
        help="schemes two and three: members keep a WatchGroup parked (hear of a join at once)",
    )
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    sizes = [int(s) for s in args.sizes.split(",")]
    partitions = args.partitions or 2 * max(sizes)

    server = None
    if args.zk:
        zk_hosts = args.zk
    else:
        from testing.zookeeper import ZkServer

        server = ZkServer.start_single()
        zk_hosts = server.connect_string
    host, _, port = zk_hosts.partition("/")[0].split(",")[0].rpartition(":")
    args.zk_host_port = (host, int(port))
    chroot = f"{zk_hosts}/bench-rebalance-{uuid.uuid4().hex[:6]}"
    results: dict = {"partitions": partitions, "heartbeat_ms": args.heartbeat_ms, "sizes": []}
    zk = connect(chroot, session_timeout=30.0)
    try:
        create_topic(zk, "t", partitions=partitions)
        with CoordinatorNodes(chroot, count=1, group_initial_rebalance_delay_ms=1000) as nodes:
            with tempfile.TemporaryDirectory(prefix="bench-rebalance-") as tmp:
                for n in sizes:
                    row: dict = {"members": n}
                    runs: dict[str, list] = {key: [] for key, _ in SCHEMES}
                    for _ in range(args.repeat):
                        if not args.skip_scheme_one:
                            runs["scheme_one"].append(scheme_one(chroot, n, partitions, args, Path(tmp)))
                        for key, kind in (
                            ("scheme_two", Scheme.TWO),
                            ("scheme_two_incremental", Scheme.TWO_INCREMENTAL),
                            ("scheme_three", Scheme.THREE_EAGER),
                        ):
                            runs[key].append(scheme_three(zk, nodes, n, partitions, args, kind))
                    for key, got in runs.items():
                        row[key] = _median(got) if got else _empty()
                    results["sizes"].append(row)
                    print(json.dumps(row), file=sys.stderr, flush=True)
            results["rolling_restart"] = {
                "dynamic": rolling_restart(zk, nodes, False, partitions, args),
                "static": rolling_restart(zk, nodes, True, partitions, args),
            }
    finally:
        zk.stop()
        zk.close()
        if server is not None:
            server.remove()
    results["targets"] = _targets(results)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    print(table(results))
    print()
    for name, ok in results["targets"].items():
        print(f"{'PASS' if ok else 'FAIL'}  {name}")
    return 0


def _median(runs: list[dict]) -> dict:
    ok = [r for r in runs if "time_to_stable_ms" in r]
    if not ok:
        return runs[0]
    ok.sort(key=lambda r: r["time_to_stable_ms"])
    mid = dict(ok[len(ok) // 2])
    mid["runs_ms"] = [round(r["time_to_stable_ms"], 1) for r in ok]
    return mid


def _empty() -> dict:
    return {"server": {"requests": 0, "watch_notifications": 0}, "client": {"requests": 0}}


def _targets(results: dict) -> dict[str, bool]:
    rows = {r["members"]: r for r in results["sizes"]}
    out = {}
    if 50 in rows:
        t1 = rows[50]["scheme_one"].get("time_to_stable_ms")
        t3 = rows[50]["scheme_three"].get("time_to_stable_ms")
        out[f"scheme three >= {TARGET_RATIO:.0f}x faster than scheme one at N=50"] = bool(
            t1 and t3 and t1 / t3 >= TARGET_RATIO
        )
    t3s = [r["scheme_three"].get("time_to_stable_ms") for r in results["sizes"]]
    out[f"scheme three < {TARGET_MS:.0f} ms at every N"] = all(t is not None and t < TARGET_MS for t in t3s)
    reqs = [r["scheme_three"]["server"]["requests"] for r in results["sizes"]]
    out["scheme three ZooKeeper requests per rebalance constant in N (max <= 2 x min + 10)"] = bool(
        reqs and max(reqs) <= 2 * min(reqs) + 10
    )
    static = results["rolling_restart"]["static"].get("rebalances")
    out["<= 1 rebalance for a static rolling restart of 20"] = static is not None and static <= 1
    two = [r["scheme_two"]["server"]["watch_notifications"] for r in results["sizes"]]
    out["scheme two: <= 1 watch notification per join at every N"] = bool(two) and max(two) <= 1
    inc = [
        (r["scheme_two_incremental"].get("time_to_stable_ms"), r["scheme_three"].get("time_to_stable_ms"))
        for r in results["sizes"]
    ]
    out["incremental scheme two: time to stable after one join <= scheme three's at every N"] = all(
        a is not None and b is not None and a <= b for a, b in inc
    )
    pauses = [r["scheme_two_incremental"].get("kept_pause_ms") for r in results["sizes"]]
    limit = 2 * results["heartbeat_ms"]
    out[f"incremental scheme two: kept partitions' largest pause < 2 heartbeat intervals ({limit} ms)"] = all(
        p is not None and p < limit for p in pauses
    )
    return out


if __name__ == "__main__":
    sys.exit(main())
