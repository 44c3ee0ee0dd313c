"""The demo job: the same consumer code under scheme one and scheme three, side by side.

A topic is created and filled in the Parquet log, then for each rebalancer a group of consumers
(`pipeline.Consumer`, identical code, only `rebalancer=` differs) reads it to its end, committing
after every poll; one more consumer then joins. Per scheme the demo reports the time until the
group first covers every partition, the consumption time, the time for the join to settle, and
checks that every record was delivered exactly once and every committed offset reached the log end.

The demo runs in a namespace of its own (`demo.namespace.DemoNamespace`): a fresh ZooKeeper chroot
`<chroot>/groupshift-demo-<pid>-<random>` below the one it is given, holding its topic, its groups
and its coordinator node's registration and shards, and a fresh log directory. An operator's
coordinator nodes, groups and topics on the same ZooKeeper are in other namespaces and neither
see the demo nor disturb it. Both are deleted when the demo ends, also on failure or Ctrl-C.

    results = run_demo("127.0.0.1:2181")
    print(format_table(results))
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from coordinator.node.process import CoordinatorNodes
from core.errors import CommitFailed, GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from core.zk import connect
from demo.namespace import DemoNamespace
from pipeline.backends import rebalancer_of
from pipeline.consumer import Consumer
from topics.store import TopicStore

TOPIC = "demo-clicks"


@dataclass
class DemoResult:
    rebalancer: str
    group: str
    members: int
    partitions: int
    records: int
    first_stable_s: float
    consume_s: float
    join_settle_s: float
    delivered: int
    duplicates: int
    missing: int
    committed_at_end: bool


class _Worker(threading.Thread):
    def __init__(self, consumer: Consumer, delivered: list):
        super().__init__(daemon=True, name=f"demo-{consumer.client_id}")
        self.consumer, self.delivered, self.stop_event, self.error = (
            consumer,
            delivered,
            threading.Event(),
            None,
        )

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                got = self.consumer.poll_batches(timeout_ms=100)
                for tp, batch in got.items():
                    self.delivered.extend((tp, o) for o in batch.column("offset").to_pylist())
                if got:
                    try:
                        self.consumer.commit()
                    except CommitFailed:
                        pass  # a rebalance fenced the commit: the new owner re-reads those records
            self.consumer.close()
        except BaseException as exc:
            self.error = exc

    def stop(self) -> None:
        self.stop_event.set()
        self.join(30)
        if self.error is not None:
            raise self.error


def _wait(check, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if check():
            return time.monotonic() - t0
        time.sleep(0.02)
    raise GroupshiftError(f"demo: timed out after {timeout:g}s waiting for {what}")


def _covers(workers: list[_Worker], tps: set[TopicPartition]) -> bool:
    owned = [w.consumer.assignment() for w in workers]
    # Every partition owned exactly once, by as many members as can own one (more members than
    # partitions leaves some idle).
    busy = sum(1 for a in owned if a)
    return (
        sum(len(a) for a in owned) == len(tps)
        and set().union(*owned) == tps
        and busy == min(len(owned), len(tps))
    )


def run_scheme(
    rebalancer: Rebalancer,
    zk_connect: str,
    data: Path,
    ends: dict[TopicPartition, int],
    members: int,
    bootstrap: str | None,
) -> DemoResult:
    group = f"demo-{rebalancer.value}-{uuid.uuid4().hex[:6]}"
    tps = set(ends)
    delivered: list = []

    def consumer() -> Consumer:
        return Consumer(
            group,
            [TOPIC],
            rebalancer=rebalancer,
            zk=zk_connect,
            log_root=data,
            bootstrap=bootstrap,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            max_poll_records=2000,
            session_timeout_ms=6000,
            heartbeat_interval_ms=500,
        )

    workers = [_Worker(consumer(), delivered) for _ in range(members)]
    t0 = time.monotonic()
    for w in workers:
        w.start()
    try:
        first_stable = _wait(lambda: _covers(workers, tps), 120, "the group to cover every partition")
        total = sum(ends.values())
        _wait(lambda: len(delivered) >= total, 300, "every record")
        consume = time.monotonic() - t0
        probe = workers[0].consumer

        def at_end() -> bool:
            try:
                return probe.committed(list(tps)) == ends
            except GroupshiftError:
                return False

        committed = True
        try:
            _wait(at_end, 30, "committed offsets at the log end")
        except GroupshiftError:
            committed = False
        joiner = _Worker(consumer(), delivered)
        t_join = time.monotonic()
        joiner.start()
        workers.append(joiner)
        _wait(lambda: _covers(workers, tps), 120, "the group to settle after a join")
        join_settle = time.monotonic() - t_join
    finally:
        for w in workers:
            w.stop()
    counts = Counter(delivered)
    missing = sum(1 for tp, end in ends.items() for o in range(end) if (tp, o) not in counts)
    return DemoResult(
        rebalancer.value,
        group,
        members,
        len(tps),
        sum(ends.values()),
        round(first_stable, 3),
        round(consume, 3),
        round(join_settle, 3),
        len(delivered),
        sum(n - 1 for n in counts.values() if n > 1),
        missing,
        committed,
    )


def run_demo(
    zk_connect: str,
    data_parent: Path | None = None,
    *,
    partitions: int = 6,
    records_per_partition: int = 20_000,
    members: int = 3,
    rebalancers: tuple[str | Rebalancer, ...] = (Rebalancer.ZK, Rebalancer.COORDINATOR),
    out: Path | None = None,
) -> list[DemoResult]:
    """Create and fill the demo topic, then run each scheme; results are also written as JSON.

    Everything happens in a `DemoNamespace` below `zk_connect` (its log directory under
    `data_parent`, default the system temp dir) that is deleted before this returns or raises.
    """
    with DemoNamespace(zk_connect, data_parent) as ns:
        results = _run(ns, partitions, records_per_partition, members, rebalancers)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps([asdict(r) for r in results], indent=2))
    return results


def _run(
    ns: DemoNamespace,
    partitions: int,
    records_per_partition: int,
    members: int,
    rebalancers: tuple[str | Rebalancer, ...],
) -> list[DemoResult]:
    zk = connect(ns.zk_connect)
    try:
        store = TopicStore(ns.data, zk)
        store.create_topic(TOPIC, partitions=partitions)
    finally:
        zk.stop()
        zk.close()
    log = store.log
    for p in range(partitions):
        log.produce(
            TOPIC,
            [(f"user-{i % 97}".encode(), f"click {p}/{i}".encode()) for i in range(records_per_partition)],
            partition=p,
        )
    ends = {TopicPartition(TOPIC, p): log.latest(TopicPartition(TOPIC, p)) for p in range(partitions)}
    results = []
    for rebalancer in map(rebalancer_of, rebalancers):
        if rebalancer is not Rebalancer.ZK:
            # Its node registers and leads shards inside the demo's chroot only; it listens on a
            # free port. An operator's nodes (any ids) live in other chroots and share nothing.
            with CoordinatorNodes(ns.zk_connect, count=1, group_initial_rebalance_delay_ms=0) as nodes:
                results.append(run_scheme(rebalancer, ns.zk_connect, ns.data, ends, members, nodes.bootstrap))
        else:
            results.append(run_scheme(rebalancer, ns.zk_connect, ns.data, ends, members, None))
    return results


def format_table(results: list[DemoResult]) -> str:
    cols = [
        "rebalancer",
        "members",
        "records",
        "first_stable_s",
        "consume_s",
        "join_settle_s",
        "delivered",
        "duplicates",
        "missing",
        "committed_at_end",
    ]
    rows = [cols] + [[str(getattr(r, c)) for c in cols] for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(cols))]
    lines = ["  ".join(v.rjust(w) for v, w in zip(row, widths, strict=True)) for row in rows]
    if len(results) == 2 and min(r.join_settle_s for r in results) > 0:
        a, b = results
        lines.append(
            f"join settle time {a.rebalancer}/{b.rebalancer} = {a.join_settle_s / b.join_settle_s:.2f} "
            f"({b.rebalancer} members learn of a rebalance at their next heartbeat)"
        )
    return "\n".join(lines)


def plot(results: list[DemoResult], path: Path) -> None:
    """Bar chart of the timings per rebalancer as a PNG (needs the 'experiments' extra)."""
    from core.extras import require

    matplotlib = require("matplotlib", "experiments")
    matplotlib.use("Agg")
    pyplot = require("matplotlib.pyplot", "experiments")
    metrics = ["first_stable_s", "consume_s", "join_settle_s"]
    fig, ax = pyplot.subplots(figsize=(7, 4))
    width = 0.8 / max(1, len(results))
    for i, r in enumerate(results):
        xs = [m + i * width for m in range(len(metrics))]
        ax.bar(xs, [getattr(r, m) for m in metrics], width, label=r.rebalancer)
    ax.set_xticks([m + width * (len(results) - 1) / 2 for m in range(len(metrics))], metrics)
    ax.set_ylabel("seconds")
    ax.set_title(f"groupshift demo: {results[0].members} members, {results[0].records} records")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    pyplot.close(fig)
