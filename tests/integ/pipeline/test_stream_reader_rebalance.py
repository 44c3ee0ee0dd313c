"""The stream reader's member gives its partitions up as soon as the group asks, in the middle of a
micro-batch, under schemes two and three (scheme one's member does so from ZooKeeper's watches):
a joiner does not wait for the batch in flight, and that batch stays fenced by its generation.

Real ZooKeeper and a real coordinator node. No Spark: the test calls the readers as Spark's
reader process does (`initialOffset`, `latestOffset`) and asks for a batch's commit as the
exactly-once writer does (`request_commit`).
"""

from __future__ import annotations

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from coordinator.node.process import CoordinatorNodes
from core.types import TopicPartition as TP
from pipeline.spark.commit_service import Outcome, request_commit
from pipeline.spark.offsets import decode, encode
from pipeline.spark.options import parse
from pipeline.spark.reader import GroupStreamReader
from topics.log import Log
from topics.registry import create_topic

RECORDS = 300  # per partition
LIMIT = ReadMaxRows(10_000)  # more than the topic holds: a batch takes every owned partition whole


@pytest.mark.parametrize("rebalancer", ["coordinator", "incremental"])
def test_a_member_mid_batch_gives_partitions_to_a_joiner_at_once_and_its_batch_is_refused(
    zk, zk_connect, tmp_path, rebalancer
):
    create_topic(zk, "t", partitions=4)
    log = Log(tmp_path / "log")
    log.create("t", 4)
    for p in range(4):
        log.produce("t", [(b"k", b"v")] * RECORDS, partition=p)
    everything = {TP("t", p) for p in range(4)}
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        options = parse(
            {
                "zk": zk_connect,
                "group": "g",
                "subscribe": "t",
                "logRoot": str(log.root),
                "bootstrap": nodes.bootstrap,
                "rebalancer": "server" if rebalancer == "incremental" else "coordinator",
                "incremental": str(rebalancer == "incremental").lower(),
                "sessionTimeoutMs": "6000",
                "heartbeatIntervalMs": "100",
            }
        )
        first, joiner = GroupStreamReader(options), GroupStreamReader(options)
        try:
            in_flight = decode(first.latestOffset(first.initialOffset(), LIMIT))
            assert set(in_flight.ranges) == everything
            assert all(r == (0, RECORDS) for r in in_flight.ranges.values())

            # Spark calls `first` again only once its batch ends. The joiner's first plan waits
            # (at most 5 s) for its first partitions: they come from `first`, mid-batch.
            joined = decode(joiner.latestOffset(joiner.initialOffset(), LIMIT))
            moved = set(joined.ranges)
            assert moved and moved < everything, (
                f"the joiner planned {joined.ranges} while a batch was in flight"
            )
            assert all(r == (0, RECORDS) for r in joined.ranges.values())  # nothing of it committed

            # The batch in flight ends now: planned under a generation the group has left, its
            # commit is refused, and the member plans its own partitions again from the group's
            # offsets — nothing of the batch was committed.
            assert request_commit(in_flight).outcome is Outcome.FENCED
            again = decode(first.latestOffset(encode(in_flight), LIMIT))
            assert set(again.ranges) == everything - moved
            assert all(r == (0, RECORDS) for r in again.ranges.values())
            assert again.generation != in_flight.generation
        finally:
            joiner.stop()
            first.stop()
