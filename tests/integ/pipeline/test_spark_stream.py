"""The `groupshift` streaming source on real Spark and real ZooKeeper: group-managed partitions,
exactly-once output through the project's writer.

One SparkSession per test process (`local[2]`); the queries of a test run in it, each with its
own reader process (Spark's). Queries in other processes are `groupshift consume` commands.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime"),
    pytest.mark.spark,
]


@pytest.fixture(scope="module")
def spark():
    from pipeline.spark import spark_session

    yield spark_session("groupshift-stream-tests")


def read_output(out: Path, topic: str) -> Counter:
    """(partition, offset) -> how many times the output holds it."""
    from pipeline.spark.output import outputs

    seen: Counter = Counter()
    for p, _, _, d in outputs(out, topic):
        for f in d.glob("*.parquet"):
            for off in pq.read_table(f, columns=["offset"]).column("offset").to_pylist():
                seen[(p, off)] += 1
    return seen


def make_topic(zk, root: Path, topic: str, partitions: int, per_partition: int):
    from topics.log import Log
    from topics.registry import create_topic

    create_topic(zk, topic, partitions=partitions)
    log = Log(root)
    log.create(topic, partitions)
    for p in range(partitions):
        log.produce(topic, [(b"k", b"v" * 8)] * per_partition, partition=p)
    return log


def stream(spark, zk_connect, root, group="g", topic="t", **options):
    reader = (
        spark.readStream.format("groupshift")
        .option("zk", zk_connect)
        .option("group", group)
        .option("subscribe", topic)
        .option("logRoot", str(root))
        .option("sessionTimeoutMs", "6000")
        .option("heartbeatIntervalMs", "200")
    )
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def test_one_query_reads_every_record_exactly_once_and_commits_to_the_group(spark, zk, zk_connect, tmp_path):
    from pipeline.spark.sink import write_exactly_once
    from zk_rebalance.layout import offset_path

    make_topic(zk, tmp_path / "log", "t", 3, 5_000)
    out = tmp_path / "out"
    q = write_exactly_once(
        stream(spark, zk_connect, tmp_path / "log", maxOffsetsPerTrigger=4_000, rebalanceBackoffMs=200),
        out,
        tmp_path / "ck",
        trigger={"availableNow": True},
    )
    q.awaitTermination(180)
    assert q.exception() is None
    from pipeline.spark.query import member_state

    state = member_state(q.lastProgress)
    assert state is not None and len(state["assignment"]) == 3, q.lastProgress
    seen = read_output(out, "t")
    assert len(seen) == 15_000 and set(seen.values()) == {1}
    for p in range(3):
        data, _ = zk.get(offset_path("g", "t", p))
        assert int(data) == 5_000
