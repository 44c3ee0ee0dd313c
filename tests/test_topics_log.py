"""The Parquet log: partitioner, produce, offsets, read, retention, corruption, two writer processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import UnknownTopic
from core.types import TopicPartition
from topics.errors import CorruptSegment, InvalidTopic, OffsetOutOfRange, TopicAlreadyExists, UnknownPartition
from topics.log import Log, ProduceResult
from topics.partitioner import DefaultPartitioner, murmur2, murmur2_batch, to_positive
from topics.segment import SCHEMA

REPO = Path(__file__).resolve().parents[1]

# Kafka's UtilsTest.testMurmur2 vectors (clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java).
MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
    b"": 275646681,
}


@pytest.fixture
def log(tmp_path) -> Log:
    return Log(tmp_path / "data", segment_records=1000, row_group_records=300)


@pytest.mark.parametrize("key,expected", MURMUR2.items())
def test_murmur2_is_kafkas(key, expected):
    assert murmur2(key) == expected
    assert murmur2_batch(pa.array([key], pa.binary()))[0] == expected & 0xFFFFFFFF


def test_murmur2_batch_matches_scalar_for_every_length():
    rng = np.random.default_rng(7)
    keys = [rng.bytes(int(n)) for n in rng.integers(0, 40, 3000)]
    batch = murmur2_batch(pa.array(keys, pa.binary()))
    assert batch.tolist() == [murmur2(k) & 0xFFFFFFFF for k in keys]


def test_default_partitioner_keys_and_round_robin():
    p = DefaultPartitioner(seed=1)
    assert to_positive(-1) == 0x7FFFFFFF and to_positive(-(2**31)) == 0
    assert p.partition(b"21", 10) == to_positive(-973932308) % 10 == 0
    # Null keys: consecutive partitions; an empty key is a key.
    rr = [p.partition(None, 4) for _ in range(8)]
    assert all((b - a) % 4 == 1 for a, b in zip(rr, rr[1:], strict=False))
    assert p.partition(b"", 7) == to_positive(275646681) % 7
    keys = pa.array([b"21", None, b"foobar", None], pa.binary())
    parts = p.partition_batch(keys, 10, 4)
    assert parts[0] == 0 and parts[2] == to_positive(-790332482) % 10 and (parts[3] - parts[1]) % 10 == 1


def test_produce_routes_keys_with_kafkas_partitioner_and_reads_back(log):
    log.create("t", 3)
    keys = [f"user-{i}".encode() for i in range(200)]
    results = log.produce("t", [(k, b"v" + k) for k in keys])
    assert sum(r.count for r in results) == 200 and all(r.base_offset == 0 for r in results)
    for p in range(3):
        tp = TopicPartition("t", p)
        batch, nxt = log.read(tp, 0, 10_000)
        assert batch.schema == SCHEMA and nxt == log.latest(tp) == batch.num_rows
        assert batch.column("offset").to_pylist() == list(range(batch.num_rows))
        for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True):
            assert to_positive(murmur2(k)) % 3 == p and v == b"v" + k


def test_produce_arrow_table_to_a_partition_segments_and_row_groups(log, tmp_path):
    log.create("t", 2)
    table = pa.table({"value": [f"v{i}" for i in range(2500)], "key": pa.nulls(2500, pa.binary())})
    assert log.produce("t", table, partition=1) == [ProduceResult(1, 0, 2500)]
    assert log.produce("t", [b"x"], partition=1) == [ProduceResult(1, 2500, 1)]
    tp = TopicPartition("t", 1)
    names = sorted(os.listdir(log.partition_dir(tp)))
    assert [n for n in names if n.startswith("segment-")] == [
        "segment-00000000000000000000.parquet",
        "segment-00000000000000001000.parquet",
        "segment-00000000000000002000.parquet",
        "segment-00000000000000002500.parquet",
    ]
    assert not [n for n in names if n.endswith(".tmp")]
    assert [(s.base, s.end) for s in log.segments(tp)] == [
        (0, 1000),
        (1000, 2000),
        (2000, 2500),
        (2500, 2501),
    ]
    # Reads stop at row-group boundaries; following next_offset covers everything once.
    got, off = [], 0
    while off < log.latest(tp):
        batch, off = log.read(tp, off, 700)
        assert 0 < batch.num_rows <= 700
        got += batch.column("value").to_pylist()
    assert got == [f"v{i}".encode() for i in range(2500)] + [b"x"]
    # The segment is plain Parquet with the documented schema.
    assert pq.read_schema(log.segments(tp)[0].path).remove_metadata() == SCHEMA


def test_offsets_earliest_latest_and_out_of_range(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    assert (log.earliest(tp), log.latest(tp)) == (0, 0)
    assert log.read(tp, 0, 10).batch.num_rows == 0
    log.produce("t", [b"a", b"b"], partition=0)
    assert log.read(tp, 2, 10) == (log.read(tp, 2, 10).batch, 2)
    with pytest.raises(OffsetOutOfRange) as e:
        log.read(tp, 3, 10)
    assert (e.value.earliest, e.value.latest) == (0, 2)


def test_latest_is_seen_across_log_instances(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    other = Log(log.root)
    assert other.latest(tp) == 0
    for i in range(1, 20):
        log.produce("t", [b"x"], partition=0)
        assert other.latest(tp) == i  # a fresh segment within the same mtime tick is still seen


def test_offsets_for_times(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    base = 1_700_000_000_000
    log.produce("t", [(None, b"a", base), (None, b"b", base + 10), (None, b"c", base + 20)], partition=0)
    log.produce("t", [(None, b"d", base + 30)], partition=0)
    assert log.offset_for_time(tp, base + 5) == (1, base + 10)
    assert log.offset_for_time(tp, base + 25) == (3, base + 30)
    assert log.offset_for_time(tp, base - 100) == (0, base)
    assert log.offset_for_time(tp, datetime.fromtimestamp((base + 20) / 1000, UTC)) == (2, base + 20)
    assert log.offset_for_time(tp, base + 31) is None
    assert log.offsets_for_times({tp: base + 30}) == {tp: (3, base + 30)}


def test_retention_by_count_bytes_and_age_moves_earliest(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    day = 86_400_000
    now = 1_700_000_000_000
    for i in range(6):  # six one-record segments, one per day, the newest today
        log.produce("t", [(None, b"x" * 100, now - (5 - i) * day)], partition=0)
    assert log.retain("t", max_segments=5) == {tp: 1}
    size = log.segments(tp)[0].size
    assert log.retain("t", max_bytes=4 * size) == {tp: 2}
    assert log.retain("t", max_age=timedelta(days=1, hours=12), now=now) == {tp: 4}
    assert log.retain("t", max_age=0, now=now + day) == {tp: 5}  # the newest segment always stays
    assert (log.earliest(tp), log.latest(tp)) == (5, 6)
    with pytest.raises(OffsetOutOfRange):
        log.read(tp, 4, 10)
    assert log.produce("t", [b"y"], partition=0) == [ProduceResult(0, 6, 1)]


def test_a_reader_sees_retention_done_by_another_process(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    for _ in range(3):
        log.produce("t", [b"x"], partition=0)
    assert log.read(tp, 0, 1).next_offset == 1
    Log(log.root).retain("t", max_segments=1)
    with pytest.raises(OffsetOutOfRange):
        log.read(tp, 1, 1)
    assert log.earliest(tp) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_or_truncated_segment_is_an_error_naming_the_file(log, damage):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a"] * 10, partition=0)
    log.produce("t", [b"b"] * 10, partition=0)
    path = log.segments(tp)[1].path
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(data[:4] + os.urandom(len(data) - 4))
    else:
        path.write_bytes(b"")
    fresh = Log(log.root)
    with pytest.raises(CorruptSegment) as e:
        fresh.latest(tp)
    assert str(path) in str(e.value)
    with pytest.raises(CorruptSegment):
        fresh.read(tp, 0, 100)


def test_segment_whose_name_lies_is_corrupt(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a"] * 3, partition=0)
    seg = log.segments(tp)[0].path
    os.rename(seg, seg.with_name("segment-00000000000000000007.parquet"))
    with pytest.raises(CorruptSegment, match="base offset 7"):
        Log(log.root).latest(tp)


def test_unknown_topic_and_partition_and_bad_names(log):
    with pytest.raises(UnknownTopic):
        log.produce("nope", [b"x"])
    log.create("t", 2)
    with pytest.raises(UnknownPartition, match="no partition 2"):
        log.produce("t", [b"x"], partition=2)
    with pytest.raises(UnknownPartition):
        log.latest(TopicPartition("t", 5))
    with pytest.raises(TopicAlreadyExists):
        log.create("t", 1)
    with pytest.raises(InvalidTopic):
        log.create("../etc", 1)
    log.add_partitions("t", 3)
    assert log.partitions("t") == 3 and log.topics() == ["t"]
    log.delete("t")
    assert log.topics() == []


WRITER = textwrap.dedent(
    """
    import os, sys, time
    from topics.log import Log
    root, name, n, go = sys.argv[1], sys.argv[2].encode(), int(sys.argv[3]), sys.argv[4]
    log = Log(root)
    open(go + "." + sys.argv[2], "w").close()  # ready: imports done
    while not os.path.exists(go):
        time.sleep(0.001)
    for i in range(n):
        log.produce("t", [(name, name + b"-%d-%d" % (i, j)) for j in range(7)], partition=0)
    """
)


def test_two_producer_processes_write_contiguous_non_overlapping_offsets(log, tmp_path):
    log.create("t", 1)
    go, n = tmp_path / "go", 80
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(log.root), name, str(n), str(go)], env=env)
        for name in ("A", "B")
    ]
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"go.{w}").exists() for w in "AB") and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both are ready: they now produce at the same time
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    tp = TopicPartition("t", 0)
    segments = [pq.read_table(s.path) for s in log.segments(tp)]
    batch = pa.concat_tables(segments)
    assert batch.column("offset").to_pylist() == list(range(2 * n * 7))
    # Each segment (one produce call) is one writer's seven records in order; none interleave.
    writers = []
    for seg in segments:
        keys = seg.column("key").to_pylist()
        assert len(keys) == 7 and len(set(keys)) == 1
        writers.append(keys[0])
    assert sum(a != b for a, b in zip(writers, writers[1:], strict=False)) >= 3  # they really raced
    values = set(batch.column("value").to_pylist())
    assert values == {f"{w}-{i}-{j}".encode() for w in "AB" for i in range(n) for j in range(7)}


def test_a_topic_deleted_and_recreated_elsewhere_is_not_served_from_cache(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"old"] * 5, partition=0)
    assert log.read(tp, 0, 10).batch.num_rows == 5 and log.latest(tp) == 5
    other = Log(log.root)
    other.delete("t")
    other.create("t", 1)
    other.produce("t", [b"new"] * 2, partition=0)
    assert log.latest(tp) == 2
    assert log.read(tp, 0, 10).batch.column("value").to_pylist() == [b"new", b"new"]
