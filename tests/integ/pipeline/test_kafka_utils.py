"""The legacy drop-in (`pipeline.spark.kafka_utils.KafkaUtils`): DStream code written against Spark
Streaming's Kafka 0.8 receiver, on real ZooKeeper, a real coordinator node and Spark `local[2]`.

One SparkContext for the module; each test runs a StreamingContext of its own and stops it without
stopping the SparkContext.
"""

from __future__ import annotations

import shutil
import time

import pytest

from core.errors import GroupshiftError
from core.types import TopicPartition as TP
from tests.inspect_helpers import wait_for

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime"),
    pytest.mark.spark,
    pytest.mark.filterwarnings("ignore:DStream is deprecated:FutureWarning"),
]

BATCH_SECONDS = 0.5
PARTITIONS = 2


def legacy_job(ssc, zk_quorum, save, **switch):
    """docs/spark.md's legacy code after its import swap; `switch` is the one keyword (and, for the
    test, kafkaParams) added to it."""
    from pipeline.spark.kafka_utils import KafkaUtils

    stream = KafkaUtils.createStream(ssc, zk_quorum, "billing", {"clicks": 1}, **switch)
    stream.map(lambda kv: kv[1]).foreachRDD(save)


@pytest.fixture(scope="module")
def spark():
    from pipeline.spark import spark_session

    yield spark_session("groupshift-tests")


@pytest.fixture
def data(zk, tmp_path, monkeypatch):
    """The topic `clicks` (2 partitions) in the default data root: the legacy code passes no log_root."""
    from topics.log import Log
    from topics.registry import create_topic

    monkeypatch.setenv("GROUPSHIFT_DATA", str(tmp_path / "data"))
    log = Log(tmp_path / "data")
    create_topic(zk, "clicks", partitions=PARTITIONS)
    log.create("clicks", PARTITIONS)
    return log


@pytest.fixture
def ssc(spark):
    from pyspark.streaming import StreamingContext

    context = StreamingContext(spark.sparkContext, BATCH_SECONDS)
    yield context
    context.stop(stopSparkContext=False)  # idempotent: the test stopped it already


def produce(log, tag: str, per_partition: int) -> list[str]:
    values = [f"{tag}-{p}-{i}" for p in range(PARTITIONS) for i in range(per_partition)]
    for p in range(PARTITIONS):
        log.produce(
            "clicks", [(b"k", v.encode()) for v in values if v.startswith(f"{tag}-{p}-")], partition=p
        )
    return values


class Collector:
    """The legacy code's `save` (`collector.save`, a function as foreachRDD wants): what the stream's
    output saw, and how many batches held records."""

    def __init__(self, seen: list[str] | None = None):
        self.seen: list[str] = [] if seen is None else seen
        self.batches = 0

        def save(rdd) -> None:
            got = rdd.collect()
            self.seen.extend(got)
            self.batches += bool(got)

        self.save = save


def test_legacy_code_under_scheme_one_commits_each_batch_in_the_08_layout(spark, zk, zk_connect, data, ssc):
    from pipeline.spark.dstream import group_streams
    from zk_rebalance.layout import ids_dir, offset_path

    def offsets() -> dict[int, int | None]:
        out = {}
        for p in range(PARTITIONS):
            node = zk.exists(offset_path("billing", "clicks", p))
            out[p] = int(zk.get(offset_path("billing", "clicks", p))[0]) if node else None
        return out

    old = produce(data, "old", 5)
    save = Collector()
    t0 = time.monotonic()
    legacy_job(ssc, zk_connect, save.save)
    ssc.start()
    # 0.8's default auto.offset.reset=largest: the group starts at the log end, committed by the
    # first batch that holds the partition
    wait_for(lambda: offsets() == {0: 5, 1: 5}, timeout=60, what="the group's start committed at the log end")
    new = produce(data, "new", 20)
    wait_for(lambda: offsets() == {0: 25, 1: 25}, timeout=60, what="every record's offset committed")
    elapsed = time.monotonic() - t0
    assert zk.get_children(ids_dir("billing")), "the stream is a member of the group"
    ssc.stop(stopSparkContext=False)
    assert sorted(save.seen) == sorted(new), "every new record once, none of those before the group started"
    assert not set(old) & set(save.seen)
    assert zk.get_children(ids_dir("billing")) == [], "ssc.stop() left the group"
    [stream] = group_streams(ssc)
    assert stream.closed and stream.progress.records == len(new)
    print(f"scheme one: {len(new)} records in {save.batches} batches, {elapsed:.1f} s")


def test_legacy_code_switched_to_the_coordinator_with_one_keyword(spark, zk_connect, data, ssc):
    from coordinator.node.process import CoordinatorNodes
    from pipeline.consumer import Consumer
    from pipeline.spark.dstream import group_streams

    before = produce(data, "before", 10)
    save = Collector()
    with CoordinatorNodes(zk_connect, count=1):
        t0 = time.monotonic()
        legacy_job(
            ssc,
            zk_connect,
            save.save,
            kafkaParams={"auto.offset.reset": "smallest"},
            rebalancer="coordinator",
        )
        ssc.start()
        wait_for(lambda: len(save.seen) >= len(before), timeout=60, what="the records produced before")
        during = produce(data, "during", 10)
        offsets = Consumer("billing", rebalancer="coordinator", zk=zk_connect, log=data)
        try:
            offsets.assign([TP("clicks", p) for p in range(PARTITIONS)])
            wait_for(
                lambda: (
                    offsets.committed([TP("clicks", p) for p in range(PARTITIONS)])
                    == {TP("clicks", p): 20 for p in range(PARTITIONS)}
                ),
                timeout=60,
                what="every record's offset committed to the coordinator",
            )
        finally:
            offsets.close(autocommit=False)
        elapsed = time.monotonic() - t0
        ssc.stop(stopSparkContext=False)
        [stream] = group_streams(ssc)
        assert stream.closed, "ssc.stop() closed the stream's consumer"
    assert sorted(save.seen) == sorted(before + during)
    print(f"scheme three: {len(save.seen)} records in {save.batches} batches, {elapsed:.1f} s")


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"rebalancer": "kafka"}, "rebalancer must be one of zk, server, coordinator, not 'kafka'"),
        ({"ssc": "ssc"}, "ssc must be a pyspark StreamingContext"),
        ({"zkQuorum": ""}, "zkQuorum must be a ZooKeeper connect string"),
        ({"groupId": "bill ing"}, "group.id bill ing is illegal"),
        ({"topics": ["clicks"]}, "topics must be a non-empty dict {topic: numThreads}"),
        ({"topics": {"clicks": 0}}, "numThreads of topic clicks must be an integer of at least 1"),
        ({"topics": {"a/b": 1}}, "topic name a/b is illegal"),
        ({"kafkaParams": {"group.id": "other"}}, "kafkaParams group.id='other' disagrees with"),
        (
            {"kafkaParams": {"auto.offset.reset": "earliest"}},
            "auto.offset.reset must be 'smallest' or 'largest'",
        ),
        ({"kafkaParams": {"zookeeper.session.timeout.ms": "soon"}}, "must be a positive integer"),
        ({"storageLevel": "MEMORY"}, "storageLevel must be a pyspark StorageLevel"),
        ({"valueDecoder": "utf-8"}, "valueDecoder must be a function"),
        ({"max_records_per_batch": 0}, "max_records_per_batch must be between 1 and"),
        (
            {"consumer_options": {"enable_auto_commit": True}},
            "consumer_options may not set enable_auto_commit",
        ),
    ],
)
def test_bad_input_is_refused_with_one_line(spark, ssc, zk_connect, change, says):
    from pipeline.spark.dstream import group_streams
    from pipeline.spark.kafka_utils import KafkaUtils

    args = {"ssc": ssc, "zkQuorum": zk_connect, "groupId": "billing", "topics": {"clicks": 1}, **change}
    with pytest.raises(GroupshiftError) as refused:
        KafkaUtils.createStream(**args)
    message = str(refused.value)
    assert says in message and "\n" not in message, message
    assert group_streams(ssc) == [], "nothing was set up for a refused stream"


def committed_in_zk(zk, topic: str = "clicks") -> dict[int, int | None]:
    from zk_rebalance.layout import offset_path

    out = {}
    for p in range(PARTITIONS):
        path = offset_path("billing", topic, p)
        out[p] = int(zk.get(path)[0]) if zk.exists(path) else None
    return out


def test_a_failed_output_commits_nothing_and_its_records_come_again(spark, zk, zk_connect, data, ssc):
    from pipeline.spark.dstream import group_streams

    records = produce(data, "r", 10)
    seen: list[str] = []
    failed: list[list[str]] = []

    def save(rdd):
        got = rdd.collect()
        if got and not failed:
            failed.append(got)
            raise RuntimeError("the output failed")
        seen.extend(got)

    legacy_job(ssc, zk_connect, save, kafkaParams={"auto.offset.reset": "smallest"})
    ssc.start()
    wait_for(
        lambda: committed_in_zk(zk) == {0: 10, 1: 10}, timeout=60, what="every record's offset committed"
    )
    ssc.stop(stopSparkContext=False)
    assert failed and set(failed[0]) <= set(records)
    assert sorted(seen) == sorted(records), "the failed batch's records came again, the others once"
    [stream] = group_streams(ssc)
    assert stream.progress.failed == 1 and stream.progress.records == len(records)


def test_checkpointing_a_stateful_stream_with_two_threads_per_topic(
    spark, zk, zk_connect, data, ssc, tmp_path
):
    """`ssc.checkpoint` (stateful operations need it) accepts the stream; numThreads=2 registers two
    streams for the topic in scheme one's layout, as 0.8 did."""
    import json

    from pipeline.spark.dstream import close_all
    from pipeline.spark.kafka_utils import KafkaUtils
    from zk_rebalance.layout import ids_dir

    produce(data, "r", 10)
    ssc.checkpoint(str(tmp_path / "checkpoint"))
    stream = KafkaUtils.createStream(
        ssc, zk_connect, "billing", {"clicks": 2}, {"auto.offset.reset": "smallest"}
    )
    counts = stream.map(lambda kv: (kv[1].split("-")[1], 1)).updateStateByKey(
        lambda new, old: sum(new) + (old or 0)
    )
    totals: dict[str, int] = {}
    counts.foreachRDD(lambda rdd: totals.update(rdd.collect()))
    ssc.start()
    wait_for(lambda: totals == {"0": 10, "1": 10}, timeout=90, what="the running counts of both partitions")
    wait_for(
        lambda: committed_in_zk(zk) == {0: 10, 1: 10}, timeout=30, what="every record's offset committed"
    )
    [member] = zk.get_children(ids_dir("billing"))
    registration = json.loads(zk.get(f"{ids_dir('billing')}/{member}")[0])
    assert registration["subscription"] == {"clicks": 2}
    close_all()  # what runs when the process ends without ssc.stop()
    assert zk.get_children(ids_dir("billing")) == [], "the member left the group"
    ssc.stop(stopSparkContext=False)  # the stream, its member gone, stops as usual


def test_two_streams_of_one_group_in_one_driver(spark, zk, zk_connect, data, ssc):
    """Two members of the group in one driver (scheme one): every record seen and committed. When
    the second member's join moves a partition while the first one's batch holds it, that batch's
    commit is refused and its records are read again (at-least-once)."""
    from pipeline.spark.dstream import group_streams
    from pipeline.spark.kafka_utils import KafkaUtils

    records = produce(data, "r", 10)
    seen: list[list[str]] = [[], []]
    for i in range(2):
        stream = KafkaUtils.createStream(
            ssc, zk_connect, "billing", {"clicks": 1}, {"auto.offset.reset": "smallest"}
        )
        stream.map(lambda kv: kv[1]).foreachRDD(Collector(seen[i]).save)
    ssc.start()
    wait_for(
        lambda: committed_in_zk(zk) == {0: 10, 1: 10}, timeout=60, what="every record's offset committed"
    )
    ssc.stop(stopSparkContext=False)
    streams = group_streams(ssc)
    assert set(seen[0] + seen[1]) == set(records)
    assert all(stream.closed for stream in streams)
