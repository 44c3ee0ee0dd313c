"""Benchmark: `groups describe` and `offsets reset --execute` of a 10,000-partition group, both schemes.

100 topics x 100 partitions registered in ZooKeeper (Kafka 0.8 layout) with empty logs, one
group per scheme with an offset for every partition and no members. Times the library calls the
CLI makes (process start-up excluded) and prints the ZooKeeper requests they sent. Target: < 2 s
each. Reads are pipelined (`migrate.schemes.zkio`), writes are `multi` transactions of 1,000 ops.

    .venv/bin/python -m bench.inspect [--topics 100] [--partitions 100]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.scheme import Rebalancer  # noqa: E402
from core.types import TopicPartition  # noqa: E402
from core.zk import connect  # noqa: E402
from migrate.groups.describe import log_offsets, partition_rows, partitions_of  # noqa: E402
from migrate.groups.listing import read  # noqa: E402
from migrate.offsets import plans  # noqa: E402
from migrate.offsets.reset import Scenario  # noqa: E402
from migrate.schemes import writes, zkio  # noqa: E402
from migrate.schemes import zk_store as legacy  # noqa: E402
from testing.zookeeper import ZkServer  # noqa: E402
from topics.log import Log  # noqa: E402
from topics.registry import create_topic  # noqa: E402

TARGET_S = 2.0


def timed(fn):
    before = dict(zkio.requests)
    start = time.perf_counter()
    result = fn()
    took = time.perf_counter() - start
    sent = {k: v - before.get(k, 0) for k, v in zkio.requests.items() if v - before.get(k, 0)}
    return result, took, sent


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=100)
    args = ap.parse_args(argv)
    server = ZkServer.start_single()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            zk = connect(server.connect_string + "/bench-inspect")
            log = Log(Path(tmp) / "data")
            names = [f"topic-{i:03d}" for i in range(args.topics)]
            for name in names:
                create_topic(zk, name, partitions=args.partitions)
                log.create(name, args.partitions)
            tps = [TopicPartition(t, p) for t in names for p in range(args.partitions)]
            offsets = dict.fromkeys(tps, 0)
            legacy.write_offsets(zk, "g-zk", offsets, batch=writes.BATCH)
            writes.commit(zk, Rebalancer.COORDINATOR, "g-coord", offsets)
            print(f"{len(tps)} partitions in {args.topics} topics; target < {TARGET_S:g} s each")
            print(f"{'scheme':<12} {'operation':<24} {'seconds':>8}  zookeeper requests")
            worst = 0.0
            for scheme, group in ((Rebalancer.ZK, "g-zk"), (Rebalancer.COORDINATOR, "g-coord")):

                def describe(scheme=scheme, group=group):
                    view = read(zk, scheme, group)
                    rows = partition_rows(view, log_offsets(log, partitions_of(view)), None, 0)
                    assert len(rows) == len(tps)
                    return rows

                def reset(scheme=scheme, group=group):
                    _, plan = plans.reset_plan(
                        zk,
                        log,
                        group,
                        Scenario("to-latest"),
                        scope={},
                        all_topics=True,
                        at_ms=None,
                        file_offsets=None,
                        scheme=scheme,
                    )
                    return writes.commit(zk, scheme, group, plan.offsets())

                for what, fn in (("groups describe", describe), ("offsets reset --execute", reset)):
                    _, took, sent = timed(fn)
                    worst = max(worst, took)
                    print(f"{scheme.value:<12} {what:<24} {took:>8.2f}  {sent}")
            print(f"worst {worst:.2f} s = {worst / TARGET_S:.2f} x target")
            zk.stop()
            zk.close()
    finally:
        server.remove()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
