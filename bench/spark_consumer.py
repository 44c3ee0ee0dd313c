"""Benchmark: a Spark consumer's throughput against a plain Spark read, and what a rebalance costs it.

Its own ZooKeeper container and coordinator node; one SparkSession (`local[2]`). In one run:

* throughput: 2,000,000 records in 4 partitions consumed by one group-managed `SparkConsumer`
  (plan, read, write one Parquet directory per range, commit) vs a plain
  `spark.read.parquet` of the topic's Parquet segments written to Parquet the same way, in the
  same session;
* rebalance: while one consumer reads a topic that a producer keeps writing to, a second joins;
  the time from its start to its first committed batch (the group rebalanced, the joiner planned
  on its new assignment), under each scheme.

Target: the group-managed loop >= 50 % of the plain read's records/s.

    .venv/bin/python -m bench.spark_consumer [--records 2000000] [--batch 500000]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.node.process import CoordinatorNodes  # noqa: E402
from core.scheme import Rebalancer  # noqa: E402
from core.zk import connect  # noqa: E402
from pipeline.spark import spark_session  # noqa: E402
from pipeline.spark.loop import SparkConsumer  # noqa: E402
from testing.zookeeper import ZkServer  # noqa: E402
from topics.log import Log  # noqa: E402
from topics.registry import create_topic  # noqa: E402

TARGET = 0.5
PARTITIONS = 4


def fill(log: Log, topic: str, records: int) -> None:
    log.create(topic, PARTITIONS)
    per = records // PARTITIONS
    for p in range(PARTITIONS):
        for start in range(0, per, 100_000):
            log.produce(topic, [(b"key", b"value-0123456789")] * min(100_000, per - start), partition=p)


def consumer(
    spark, zk_connect, nodes, log, group, topic, out, rebalancer: Rebalancer, batch, incremental: bool = False
) -> SparkConsumer:
    opts = {"session_timeout_ms": 10_000, "heartbeat_interval_ms": 200}
    return SparkConsumer(
        spark,
        group,
        [topic],
        out=out,
        log=log,
        zk=zk_connect,
        bootstrap=None if rebalancer is Rebalancer.ZK else nodes.bootstrap,
        rebalancer=rebalancer,
        incremental=incremental,
        max_records_per_batch=batch,
        consumer_options=opts,
    )


def throughput(spark, zk_connect, nodes, log, tmp: Path, records: int, batch: int) -> tuple[float, float]:
    fill(log, "bulk", records)

    # The plain read takes the topic's Parquet segments only: records still in a partition's
    # active segment (less than a segment's worth, `segment-*.index/.keys/.values`) are not
    # Parquet, and its rate is counted on the records it read.
    def plain_read():
        return spark.read.option("pathGlobFilter", "segment-*.parquet").parquet(str(log.root / "bulk"))

    # Warm the session up on the same data (the first Spark job of a process pays JIT and start-up).
    in_parquet = plain_read().count()
    if not in_parquet:
        sys.exit(
            f"--records {records:,} leaves every record in the active segments: use at least {4 * 100_000:,}"
        )
    t0 = time.perf_counter()
    plain_read().write.mode("overwrite").parquet(str(tmp / "plain"))
    plain = in_parquet / (time.perf_counter() - t0)
    job = consumer(
        spark, zk_connect, nodes, log, "bench-bulk", "bulk", tmp / "out", Rebalancer.COORDINATOR, batch
    )
    try:
        t0 = time.perf_counter()
        while job.progress.records < records:
            job.run_batch()
        managed = records / (time.perf_counter() - t0)
    finally:
        job.close()
    return plain, managed


def rebalance_cost(spark, zk, zk_connect, nodes, log, tmp: Path, rebalancer: Rebalancer) -> float:
    topic = f"live-{rebalancer.value}"
    log.create(topic, PARTITIONS)
    create_topic(zk, topic, partitions=PARTITIONS)
    stop = threading.Event()

    def produce():
        while not stop.is_set():
            for p in range(PARTITIONS):
                log.produce(topic, [(b"k", b"v")] * 500, partition=p)
            time.sleep(0.05)

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    group = f"bench-{rebalancer.value}"
    first = consumer(spark, zk_connect, nodes, log, group, topic, tmp / topic, rebalancer, 20_000)
    running = threading.Thread(target=first.run, args=(stop.is_set,), daemon=True)
    try:
        running.start()
        while first.progress.batches < 3:
            time.sleep(0.05)
        t0 = time.monotonic()
        joiner = consumer(spark, zk_connect, nodes, log, group, topic, tmp / topic, rebalancer, 20_000)
        try:
            while not any(b.committed for b in joiner.history):
                joiner.run_batch()
            took = time.monotonic() - t0
        finally:
            joiner.close()
    finally:
        stop.set()
        running.join(60)
        producer.join()
        first.close()
    return took


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=500_000, help="max_records_per_batch")
    args = ap.parse_args(argv)
    server = ZkServer.start_single()
    tmp = Path(tempfile.mkdtemp(prefix="bench-spark-"))
    try:
        zk_connect = server.connect_string + "/bench-spark"
        zk = connect(zk_connect)
        create_topic(zk, "bulk", partitions=PARTITIONS)
        log = Log(tmp / "log")
        spark = spark_session("bench-spark-consumer")
        with CoordinatorNodes(zk_connect, count=1) as nodes:
            plain, managed = throughput(spark, zk_connect, nodes, log, tmp, args.records, args.batch)
            costs = {r.value: rebalance_cost(spark, zk, zk_connect, nodes, log, tmp, r) for r in Rebalancer}
        zk.stop()
        zk.close()
    finally:
        server.remove()
        shutil.rmtree(tmp, ignore_errors=True)
    ratio = managed / plain
    print(
        f"records:                         {args.records:,} in {PARTITIONS} partitions "
        f"(batches of {args.batch:,})"
    )
    print(f"plain spark.read.parquet + write: {plain:,.0f} records/s")
    print(f"group-managed SparkConsumer:      {managed:,.0f} records/s ({ratio:.0%} of plain)")
    for r, s in costs.items():
        print(f"rebalance cost ({r:11}):        {s:.2f} s from a join to the joiner's first committed batch")
    ok = ratio >= TARGET
    print(f"target >= {TARGET:.0%} of the plain read: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
