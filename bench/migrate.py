"""Benchmark: offline migration zk -> coordinator of 100 groups x 1,000 partitions, then verify.

Its own ZooKeeper container. The source groups (Kafka 0.8 layout, no members) are written
first and not timed. Timed, group by group: `migrate.migration.offline.run` (checks, lock, record,
the copy in `multi` transactions of 1,000 ops, the proof that the destination holds the source's
offsets and that the source did not move), `migrate.migration.report.verify` (the separate
command: both sides read again), and the ceiling: the same znodes as the copy writes (the
coordinator's offset records at the same depth, their parents with them) created in a plain loop
of kazoo `multi` transactions of 1,000, nothing else. The four are interleaved, so that on a
shared machine they see the same load. The fourth is the same loop with the transactions packed
as the migration packs them (`migrate.schemes.zkmulti`): how much of the ceiling is kazoo's own
Python work, shown beside it, not judged.
Target: migrate + verify within 2x of the ceiling (and the run alone < 10 s).

    .venv/bin/python -m bench.migrate [--groups 100] [--partitions 1000]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.group.records import OffsetRecord  # noqa: E402
from coordinator.layout import encode_offset, group_path, offset_path, offsets_dir, znode_name  # noqa: E402
from core.scheme import Rebalancer  # noqa: E402
from core.types import TopicPartition  # noqa: E402
from core.zk import connect  # noqa: E402
from migrate.migration import offline, report  # noqa: E402
from migrate.schemes import writes, zkio, zkmulti  # noqa: E402
from migrate.schemes import zk_store as legacy  # noqa: E402
from testing.zookeeper import ZkServer  # noqa: E402

TARGET_S = 10.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=1000)
    args = ap.parse_args(argv)
    server = ZkServer.start_single()
    try:
        zk = connect(server.connect_string + "/bench-migrate")
        groups = [f"group-{i:03d}" for i in range(args.groups)]
        tps = [TopicPartition(f"topic-{p // 100:02d}", p % 100) for p in range(args.partitions)]
        for i, g in enumerate(groups):
            legacy.write_offsets(zk, g, {tp: i * 1000 + n for n, tp in enumerate(tps)}, batch=writes.BATCH)
        total = args.groups * args.partitions

        # Group by group: migrate it, verify it, then write as many znodes in a plain loop (the
        # ceiling), so that on a shared machine all three see the same load.
        migrated = verified_s = ceiling_s = packed_s = 0.0
        ran: dict = {}
        verified: dict = {}
        for i, g in enumerate(groups):
            before, start = dict(zkio.requests), time.perf_counter()
            offline.run(zk, g, Rebalancer.ZK.value, Rebalancer.COORDINATOR.value)
            migrated += time.perf_counter() - start
            _add(ran, before)
            before, start = dict(zkio.requests), time.perf_counter()
            v = report.verify(zk, g, Rebalancer.ZK.value, Rebalancer.COORDINATOR.value)
            verified_s += time.perf_counter() - start
            _add(verified, before)
            assert v["equal"] and v["partitions"] == args.partitions, g
            start = time.perf_counter()
            _ceiling(zk, f"ceiling-{i:03d}", tps, kazoo_multi)
            ceiling_s += time.perf_counter() - start
            start = time.perf_counter()
            _ceiling(zk, f"packed-{i:03d}", tps, packed_multi)
            packed_s += time.perf_counter() - start
        took = migrated + verified_s
        zk.stop()
        zk.close()
    finally:
        server.remove()

    ceiling = total / ceiling_s
    print(f"groups x partitions:        {args.groups} x {args.partitions} = {total:,} offsets")
    print(f"ceiling (plain multi loop): {ceiling_s:.2f} s  ({ceiling:,.0f} writes/s)")
    print(
        f"  the same loop, packed as the migration packs its multi: {packed_s:.2f} s "
        f"({total / packed_s:,.0f} writes/s; the ceiling spends {1 - packed_s / ceiling_s:.0%} of its "
        "time more in kazoo's Python)"
    )
    # Before issue 32 (main at 3c842c3, this bench): the run read 3.08 znodes per offset and wrote
    # 1.01 (8 multis a group); verify read 2.02.
    for what, counts, before in (("verify (both sides)", verified, 2.02), ("migrate (run)", ran, 4.10)):
        read, written = counts.get("znodes read", 0), counts.get("znodes written", 0)
        print(
            f"{what + ':':<27} {read:,} znodes read, {written:,} written: {(read + written) / total:.2f} "
            f"per offset (before issue 32: {before:.2f}); requests {counts}"
        )
    rate = total / migrated
    print(f"migrate (run, all groups):  {migrated:.2f} s  ({rate:,.0f} offsets/s; < {TARGET_S:g} s)")
    print(f"verify (all groups):        {verified_s:.2f} s")
    packed = migrated / packed_s
    print(f"migrate / ceiling:          {migrated / ceiling_s:.2f}x ({packed:.2f}x the packed loop)")
    ok = migrated < TARGET_S and took <= 2 * ceiling_s
    print(
        f"migrate + verify / ceiling: {took:.2f} s, {took / ceiling_s:.2f}x ({took / packed_s:.2f}x the "
        f"packed loop); target within 2x of the ceiling: {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


def kazoo_multi(zk, ops: list[tuple]):
    """A plain kazoo transaction of ("create", path, data) ops."""
    txn = zk.transaction()
    for _, path, data in ops:
        txn.create(path, data)
    return txn


def packed_multi(zk, ops: list[tuple]):
    return zkmulti.transaction(zk, ops)


def _ceiling(zk, group: str, tps: list[TopicPartition], multi) -> None:
    """The ceiling for one group: the znodes the copy writes — the coordinator's offset records of
    as many partitions, at the same depth, with their parents — created in `multi`s of 1,000
    partitions (built by `multi`), nothing else (no read, no record)."""
    now = int(time.time() * 1000)
    gpath = group_path(group)
    topics = sorted({tp.topic for tp in tps})
    for n, chunk in enumerate(zkio.chunked(sorted(tps), writes.BATCH)):
        ops = []
        if n == 0:  # the parents, with the first partitions, as the copy makes them
            parents = [gpath, offsets_dir(gpath), *(f"{offsets_dir(gpath)}/{znode_name(t)}" for t in topics)]
            ops += [("create", path, b"") for path in parents]
        for tp in chunk:
            record = OffsetRecord(tp.topic, tp.partition, 1234567, "", now)
            ops.append(("create", offset_path(group, *tp), encode_offset(record, -1)))
        multi(zk, ops).commit()


def _add(into: dict, before: dict) -> None:
    """Add the requests counted since `before` to `into`."""
    for k, v in zkio.requests.items():
        if v - before.get(k, 0):
            into[k] = into.get(k, 0) + v - before.get(k, 0)


if __name__ == "__main__":
    sys.exit(main())
