"""Reading a topic's records by offset range with Spark (`pipeline.spark.segments`): the Parquet
segments chosen by name, partition pruning and row-group skipping, the active segment's tail, and
the streaming source's executor-side pieces."""

from __future__ import annotations

import shutil

import pytest

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime"),
    pytest.mark.spark,
]


@pytest.fixture(scope="module")
def spark():
    from pipeline.spark import spark_session

    yield spark_session("groupshift-segment-tests")


def test_a_range_reads_only_its_segments_partition_and_row_groups(spark, tmp_path):
    from pipeline.spark.segments import read_ranges
    from topics.log import Log

    log = Log(tmp_path / "log", segment_records=50_000)  # a whole segment's worth: Parquet
    log.create("t", 2)
    for p in range(2):
        log.produce("t", [(b"k", b"v")] * 50_000, partition=p)  # a segment of two row groups
        log.produce("t", [(b"k", b"v")] * 50_000, partition=p)  # and another segment
    assert log.segments(_tp(0))[0].row_group_bases == (0, 25_000)
    df = read_ranges(spark, log.root / "t", {0: (22_000, 24_000)})
    offsets = df.select("offset")
    rows = offsets.collect()
    assert sorted(r.offset for r in rows) == list(range(22_000, 24_000))
    plan = offsets._jdf.queryExecution().executedPlan()
    text = plan.toString()
    assert "PartitionFilters: [isnotnull(partition" in text and "= 0)]" in text  # partition pruning
    assert "GreaterThanOrEqual(offset,22000)" in text  # pushed down to the Parquet reader
    scan = plan.collectLeaves().apply(0)
    metrics = {k: scan.metrics().get(k).get().value() for k in ("numFiles", "numOutputRows")}
    # One file of the four (picked by name), one row group of its two (skipped by statistics).
    assert metrics == {"numFiles": 1, "numOutputRows": 25_000}, metrics


def test_a_range_reaching_into_the_active_segment_reads_it_too(spark, tmp_path):
    from pipeline.spark.segments import read_ranges, segment_files
    from topics.log import Log

    log = Log(tmp_path / "log", segment_records=1000)
    log.create("t", 2)
    for p in range(2):
        log.produce("t", [(b"k", b"v%d" % i) for i in range(1000)], partition=p)  # Parquet 0..999
        for i in range(1000, 1050, 10):  # small appends: the active segment at 1000
            log.produce("t", [(b"k", b"v%d" % j) for j in range(i, i + 10)], partition=p)
    assert [s.path.suffix for s in log.segments(_tp(0))] == [".parquet", ".index"]
    assert [f.name for f in segment_files(log.root / "t", 0, 990, 1050)] == [
        "segment-00000000000000000000.parquet"
    ]
    assert segment_files(log.root / "t", 0, 1000, 1050) == []
    df = read_ranges(spark, log.root / "t", {0: (990, 1045), 1: (1010, 1020)})
    rows = df.select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == [
        (p, o, b"v%d" % o) for p, (s, e) in ((0, (990, 1045)), (1, (1010, 1020))) for o in range(s, e)
    ]


def _tp(p: int):
    from core.types import TopicPartition

    return TopicPartition("t", p)


def test_the_streams_pieces_are_cut_at_segments_and_read_the_active_tail_too(tmp_path):
    import pyarrow as pa

    from pipeline.spark.segments import read_slice, split_at_segments
    from topics.log import Log

    log = Log(tmp_path / "log", segment_records=1000)
    log.create("t", 1)
    log.produce("t", [(b"k", b"v%d" % i) for i in range(1000)], partition=0)  # Parquet 0..999
    for i in range(1000, 1040, 10):  # small appends: the active segment at 1000
        log.produce("t", [(b"k", b"v%d" % j) for j in range(i, i + 10)], partition=0)
    assert split_at_segments(log.root / "t", 0, 990, 1030) == [(990, 1000), (1000, 1030)]
    assert split_at_segments(log.root / "t", 0, 0, 500) == [(0, 500)]
    table = pa.Table.from_batches(list(read_slice(str(log.root), "t", 0, 995, 1035)))
    assert table.column_names == ["key", "value", "topic", "partition", "offset", "timestamp"]
    assert table.column("offset").to_pylist() == list(range(995, 1035))
    assert table.column("value").to_pylist() == [b"v%d" % i for i in range(995, 1035)]
    assert set(table.column("topic").to_pylist()) == {"t"} and set(table.column("partition").to_pylist()) == {
        0
    }
