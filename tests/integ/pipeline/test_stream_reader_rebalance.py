"""When the stream reader's member gives its partitions up to a joiner, under schemes two and three
(scheme one's member does so from ZooKeeper's watches, at once):

* once the exactly-once writer ends the query's batches, as soon as the group asks — in the middle
  of a micro-batch: the joiner does not wait for the batch in flight, which stays fenced by its
  generation (refused, its records read again by their owner);
* with another sink, only between batches, after the batch's commit: the joiner starts where that
  batch ended, so no record is delivered twice;
* and when the group's coordinator node is killed mid-batch while a member joins, the members
  follow the group to the other node and nothing is read twice or skipped.

Real ZooKeeper and real coordinator nodes. No Spark: the test calls the readers as Spark's reader
process does (`initialOffset`, `latestOffset`) and asks for a batch's commit as the exactly-once
writer does (`request_commit`).
"""

from __future__ import annotations

import threading
import time

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from coordinator.node.process import CoordinatorNodes
from core.types import TopicPartition as TP
from pipeline.spark.commit_service import Outcome, request_commit
from pipeline.spark.offsets import StreamOffset, decode, encode
from pipeline.spark.options import parse
from pipeline.spark.reader import GroupStreamReader
from topics.log import Log
from topics.registry import create_topic

RECORDS = 300  # per partition and produce
LIMIT = ReadMaxRows(10_000)  # more than the topic holds: a batch takes every owned partition whole
EVERYTHING = {TP("t", p) for p in range(4)}


@pytest.fixture(params=["coordinator", "incremental"])
def readers(request, zk, zk_connect, tmp_path):
    """(log, two readers of group "g" on topic "t", 4 partitions of RECORDS records each)."""
    create_topic(zk, "t", partitions=4)
    log = Log(tmp_path / "log")
    log.create("t", 4)
    produce(log)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        options = reader_options(zk_connect, log, nodes, request.param)
        first, joiner = GroupStreamReader(options), GroupStreamReader(options)
        try:
            yield log, first, joiner
        finally:
            joiner.stop()
            first.stop()


def reader_options(zk_connect: str, log: Log, nodes: CoordinatorNodes, rebalancer: str):
    """The source's options for group "g" on topic "t" under `rebalancer` ("coordinator", or
    "incremental": scheme two's incremental form)."""
    return parse(
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


def produce(log: Log) -> None:
    for p in range(4):
        log.produce("t", [(b"k", b"v")] * RECORDS, partition=p)


def plan(reader: GroupStreamReader, start: StreamOffset | None = None) -> StreamOffset:
    return decode(reader.latestOffset(reader.initialOffset() if start is None else encode(start), LIMIT))


def test_with_the_writer_a_member_mid_batch_gives_partitions_up_at_once_and_its_batch_is_refused(readers):
    log, first, joiner = readers
    done = plan(first)
    assert set(done.ranges) == EVERYTHING
    assert request_commit(done).outcome is Outcome.COMMITTED  # the writer ends the query's batches
    produce(log)
    in_flight = plan(first, done)
    assert all(r == (RECORDS, 2 * RECORDS) for r in in_flight.ranges.values())

    # Spark calls `first` again only once its batch ends. The joiner's first plan waits (at most
    # 5 s) for its first partitions: they come from `first`, mid-batch.
    joined = plan(joiner)
    moved = set(joined.ranges)
    assert moved and moved < EVERYTHING, f"the joiner planned {joined.ranges} while a batch was in flight"
    assert all(r == (RECORDS, 2 * RECORDS) for r in joined.ranges.values())

    # The batch in flight ends now: planned under a generation the group has left, its commit is
    # refused, and `first` plans its own partitions again from the group's offsets.
    assert request_commit(in_flight).outcome is Outcome.FENCED
    again = plan(first, in_flight)
    assert set(again.ranges) == EVERYTHING - moved
    assert all(r == (RECORDS, 2 * RECORDS) for r in again.ranges.values())
    assert again.generation != in_flight.generation


def test_with_another_sink_a_member_gives_partitions_up_after_its_batch_and_its_commit(readers):
    log, first, joiner = readers
    in_flight = plan(first)
    assert set(in_flight.ranges) == EVERYTHING
    produce(log)
    got: list[StreamOffset] = []
    joining = threading.Thread(target=lambda: got.append(plan(joiner)), daemon=True)
    joining.start()

    # `first` hears of the rebalance (a heartbeat's answer) and keeps its partitions: its batch is
    # in flight and no writer fences it.
    member = first._consumer  # the reader's member (what it holds is not part of Spark's API)
    deadline = time.monotonic() + 10
    while not member.rebalance_in_progress:
        assert time.monotonic() < deadline, "the first member never heard of the joiner"
        time.sleep(0.01)
    assert member.assignment() == EVERYTHING

    # Spark ends the batch: the next plan commits it (as with any sink but the writer), then gives
    # partitions up; a plan while the rebalance still runs answers the same offset (no new batch).
    again = plan(first, in_flight)
    while again == in_flight:
        assert time.monotonic() < deadline, "the first member never planned after the rebalance"
        again = plan(first, in_flight)
    joining.join(10)
    assert got, "the joiner's first plan did not return"
    moved = set(got[0].ranges)
    assert moved and set(again.ranges) == EVERYTHING - moved
    # Nothing of the batch is read twice: both start where it ended, which the group committed.
    for offset in (got[0], again):
        assert all(r == (RECORDS, 2 * RECORDS) for r in offset.ranges.values()), offset.ranges


@pytest.mark.parametrize("rebalancer", ["coordinator", "incremental"])
def test_a_joiner_while_the_groups_coordinator_node_is_killed_mid_batch_reads_nothing_twice(
    zk, zk_connect, tmp_path, rebalancer
):
    """Two readers have batches in flight; the group's coordinator node is killed (SIGKILL) and a
    third reader joins meanwhile. The members follow the group to the other node and rebalance from
    their own threads; each batch in flight is committed or refused, and every reader's next batch
    starts each partition where the group's offsets say: none read twice, none skipped."""
    from coordinator.wire import codec as P

    create_topic(zk, "t", partitions=4)
    log = Log(tmp_path / "log")
    log.create("t", 4)
    produce(log)
    # A killed node's shards are claimed once its ZooKeeper session expires (1 s here).
    with CoordinatorNodes(zk_connect, count=2, zk_session_timeout_ms=1000) as nodes:
        options = reader_options(zk_connect, log, nodes, rebalancer)
        readers = [GroupStreamReader(options) for _ in range(3)]
        try:
            a, b, c = readers
            committed = {}  # partition -> the group's offset, as the batches the writer ended left it
            for reader in (a, b):  # `b` joins after `a`'s first batch; each has one batch ended
                produce(log)
                done = plan_new(reader, StreamOffset())
                assert request_commit(done).outcome is Outcome.COMMITTED
                committed.update(done.ends())
            produce(log)
            in_flight = {r: plan_new(r, StreamOffset()) for r in (a, b)}
            assert set(in_flight[a].ranges) | set(in_flight[b].ranges) == EVERYTHING

            with nodes.nodes[1].client() as wc:
                coordinator = wc.request(P.FIND_COORDINATOR, {"key": "g", "key_type": 0})["node_id"]
            nodes.kill(coordinator)
            produce(log)
            # `c` joins through the surviving node; it gets partitions once `a` and `b`, mid-batch,
            # have followed the group there and rebalanced from their threads.
            third = plan_new(c, StreamOffset())
            for o in in_flight.values():
                outcome = request_commit(o).outcome
                assert outcome in (Outcome.COMMITTED, Outcome.FENCED), outcome
                if outcome is Outcome.COMMITTED:
                    committed.update(o.ends())
            nxt = [third] + [plan_new(r, o) for r, o in in_flight.items()]
            planned = sorted(tp for o in nxt for tp in o.ranges)
            assert planned == sorted(EVERYTHING), [o.ranges for o in nxt]
            assert {tp: o.ranges[tp][0] for o in nxt for tp in o.ranges} == committed
        finally:
            for r in readers:
                r.stop()


def plan_new(reader: GroupStreamReader, start: StreamOffset, timeout: float = 30.0) -> StreamOffset:
    """The reader's next batch after `start` (`StreamOffset()`: its first): plans again while it
    answers `start` (a rebalance under way, or no partitions yet)."""
    deadline = time.monotonic() + timeout
    while (got := plan(reader, start if start.ranges else None)) == start or not got.ranges:
        assert time.monotonic() < deadline, "no new batch planned"
    return got
