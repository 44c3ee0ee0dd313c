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

from core.errors import GroupshiftError, UnknownTopic
from core.types import TopicPartition
from topics.active import SCHEMA_MESSAGE
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
    # Whole segments' worth go straight to Parquet; the rest and small appends to the active segment.
    assert [n for n in names if n.startswith("segment-")] == [
        "segment-00000000000000000000.parquet",
        "segment-00000000000000001000.parquet",
        "segment-00000000000000002000.arrows",
    ]
    assert not [n for n in names if n.endswith(".tmp")]
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 1000), (1000, 2000), (2000, 2501)]
    assert log.segments(tp)[1].row_group_bases == (1000, 1300, 1600, 1900)
    # Reads return max_records across row-group and segment boundaries; following next_offset
    # covers everything once.
    got, off = [], 0
    while off < log.latest(tp):
        batch, off = log.read(tp, off, 700)
        assert batch.num_rows == min(700, 2501 - (off - batch.num_rows)) and batch.schema == SCHEMA
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
        Log(log.root, segment_records=1).produce("t", [b"x"], partition=0)  # a segment each
    assert log.read(tp, 0, 1).next_offset == 1
    Log(log.root).retain("t", max_segments=1)
    with pytest.raises(OffsetOutOfRange):
        log.read(tp, 1, 1)
    assert log.earliest(tp) == 2


@pytest.mark.parametrize("damage", ["truncate", "garbage", "empty"])
def test_corrupt_or_truncated_segment_is_an_error_naming_the_file(log, damage):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    writer = Log(log.root, segment_records=10)  # two full Parquet segments
    writer.produce("t", [b"a"] * 10, partition=0)
    writer.produce("t", [b"b"] * 10, partition=0)
    path = log.segments(tp)[1].path
    assert path.suffix == ".parquet"
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
    Log(log.root, segment_records=3).produce("t", [b"a"] * 3, partition=0)
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
    batch = log.read(tp, 0, 10_000).batch
    assert batch.column("offset").to_pylist() == list(range(2 * n * 7))
    # Each produce call's seven records are one writer's, consecutive and in order; none interleave.
    keys, values = batch.column("key").to_pylist(), batch.column("value").to_pylist()
    writers = []
    for i in range(0, len(keys), 7):
        assert len(set(keys[i : i + 7])) == 1
        w = keys[i].decode()
        call = int(values[i].split(b"-")[1])
        assert values[i : i + 7] == [f"{w}-{call}-{j}".encode() for j in range(7)]
        writers.append(w)
    assert sum(a != b for a, b in zip(writers, writers[1:], strict=False)) >= 3  # they really raced
    assert set(values) == {f"{w}-{i}-{j}".encode() for w in "AB" for i in range(n) for j in range(7)}


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


# -- the active segment: small appends, rolls, torn tails, crashes ---------------------------------


def _files(log: Log, tp: TopicPartition) -> list[str]:
    return sorted(n for n in os.listdir(log.partition_dir(tp)) if n.startswith("segment-"))


def _values(log: Log, tp: TopicPartition) -> list[bytes]:
    out, off = [], log.earliest(tp)
    while off < log.latest(tp):
        batch, off = log.read(tp, off, 1_000_000)
        out += batch.column("value").to_pylist()
    return out


def test_small_appends_share_one_active_segment_that_rolls_by_records(tmp_path):
    log = Log(tmp_path / "data", segment_records=25)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    for i in range(6):
        assert log.produce("t", [b"%d" % (10 * i + j) for j in range(10)], partition=0) == [
            ProduceResult(0, 10 * i, 10)
        ]
    # 60 records: two full segments (25 each, rolled to Parquet as they filled) and 10 in the active one.
    assert _files(log, tp) == [
        "segment-00000000000000000000.parquet",
        "segment-00000000000000000025.parquet",
        "segment-00000000000000000050.arrows",
    ]
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 25), (25, 50), (50, 60)]
    assert pq.read_table(log.segments(tp)[1].path).column("offset").to_pylist() == list(range(25, 50))
    assert _values(log, tp) == [b"%d" % i for i in range(60)]
    assert _values(Log(log.root), tp) == [b"%d" % i for i in range(60)]


def test_the_active_segment_rolls_by_bytes(tmp_path):
    log = Log(tmp_path / "data", segment_bytes=8192)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    for _ in range(20):
        log.produce("t", [b"x" * 1000], partition=0)  # ~1.3 kB a message
    files = _files(log, tp)
    assert 3 <= len(files) <= 5 and files[-1].endswith(".arrows")
    for info in log.segments(tp)[:-1]:
        assert 5 <= info.count <= 6  # as many as fit in 8 kB of the active file, then a roll
    assert (log.segments(tp)[-1].path.stat().st_size) <= 8192
    assert log.latest(tp) == 20 and len(_values(Log(log.root), tp)) == 20


def test_the_active_segment_rolls_by_age_of_its_records(tmp_path):
    log = Log(tmp_path / "data", segment_ms=60_000)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    t0 = 1_700_000_000_000
    for dt in (0, 10_000, 60_000):  # within a minute of the oldest record: one segment
        log.produce("t", [(None, b"a", t0 + dt)], partition=0)
    assert _files(log, tp) == ["segment-00000000000000000000.arrows"]
    log.produce("t", [(None, b"b", t0 + 60_001)], partition=0)  # older than segment_ms: roll first
    assert _files(log, tp) == ["segment-00000000000000000000.parquet", "segment-00000000000000000003.arrows"]
    log.produce("t", [(None, b"c", t0 + 90_000)], partition=0)
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 3), (3, 5)]


def test_a_read_returns_max_records_across_segments(tmp_path):
    log = Log(tmp_path / "data", segment_records=100, row_group_records=30)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"%d" % i for i in range(250)], partition=0)  # Parquet 0, 100; active 200
    for i in range(250, 300, 5):
        log.produce("t", [b"%d" % j for j in range(i, i + 5)], partition=0)
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 100), (100, 200), (200, 300)]
    for start, n in ((0, 300), (95, 200), (190, 37), (299, 10), (250, 3)):
        batch, nxt = Log(log.root).read(tp, start, n)
        want = list(range(start, min(start + n, 300)))
        assert batch.column("offset").to_pylist() == want and nxt == start + len(want)
        assert batch.column("value").to_pylist() == [b"%d" % i for i in want]


def test_another_log_sees_each_append_at_once(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    reader = Log(log.root)
    assert reader.read(tp, 0, 10).batch.num_rows == 0
    for i in range(30):
        log.produce("t", [b"v%d" % i], partition=0)
        batch, nxt = reader.read(tp, i, 10)
        assert (batch.column("value").to_pylist(), nxt) == ([b"v%d" % i], i + 1)
        assert reader.latest(tp) == i + 1


def test_a_torn_tail_is_ignored_by_readers_and_repaired_by_the_next_writer(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a", b"b"], partition=0)
    log.produce("t", [b"c"], partition=0)
    path = log.segments(tp)[-1].path
    whole = path.read_bytes()
    Log(log.root).produce("t", [b"d", b"e"], partition=0)  # a writer the test then "kills" mid-write
    message = path.read_bytes()[len(whole) :]
    for cut in (1, 7, 8, 100, len(message) - 1):  # a writer killed mid-write leaves a prefix of its message
        path.write_bytes(whole + message[:cut])
        for reader in (log, Log(log.root)):
            assert reader.latest(tp) == 3 and _values(reader, tp) == [b"a", b"b", b"c"]
    # The next writer (another process's Log: nothing cached) truncates the tail and appends at 3.
    assert Log(log.root).produce("t", [b"f"], partition=0) == [ProduceResult(0, 3, 1)]
    for reader in (log, Log(log.root)):
        assert _values(reader, tp) == [b"a", b"b", b"c", b"f"]
    assert log.produce("t", [b"g"], partition=0) == [ProduceResult(0, 4, 1)]  # its cache was stale
    assert _values(Log(log.root), tp) == [b"a", b"b", b"c", b"f", b"g"]


def test_a_damaged_active_segment_is_corrupt_naming_the_file(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a"], partition=0)
    log.produce("t", [b"b"], partition=0)
    path = log.segments(tp)[-1].path
    data = bytearray(path.read_bytes())
    second = len(data) - (len(data) - len(SCHEMA_MESSAGE)) // 2  # two messages of the same size
    data[second : second + 4] = b"\x00\x01\x02\x03"  # not the continuation marker
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptSegment) as e:
        _values(Log(log.root), tp)
    assert str(path) in str(e.value)


def test_a_crash_between_rolls_rename_and_unlink_loses_and_repeats_nothing(tmp_path):
    log = Log(tmp_path / "data", segment_records=4)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a", b"b", b"c"], partition=0)
    active = log.segments(tp)[-1].path
    saved = active.read_bytes()
    log.produce("t", [b"d"], partition=0)  # fills the segment: rolled to Parquet, active file removed
    assert _files(log, tp) == ["segment-00000000000000000000.parquet"]
    # The state a roll that died after its rename leaves: the Parquet segment and the active file
    # (which holds what the Parquet segment holds, or a prefix of it: here the first three).
    active.write_bytes(saved)
    for reader in (log, Log(log.root)):
        assert [(s.base, s.end) for s in reader.segments(tp)] == [(0, 4)]  # the Parquet one counts
        assert _values(reader, tp) == [b"a", b"b", b"c", b"d"]
    assert Log(log.root, segment_records=4).produce("t", [b"e"], partition=0) == [ProduceResult(0, 4, 1)]
    assert _files(log, tp) == ["segment-00000000000000000000.parquet", "segment-00000000000000000004.arrows"]
    assert _values(log, tp) == [b"a", b"b", b"c", b"d", b"e"]


def test_retention_and_offset_for_time_count_the_active_segment(tmp_path):
    log = Log(tmp_path / "data", segment_ms=3_600_000)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    day, now = 86_400_000, 1_700_000_000_000
    for i in range(4):  # a day apart: each append rolls the previous one (segment.ms is an hour)
        log.produce("t", [(None, b"%d" % i, now - (3 - i) * day)], partition=0)
    log.produce("t", [(None, b"4", now + 1000)], partition=0)  # joins the active segment
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 1), (1, 2), (2, 3), (3, 5)]
    assert log.offset_for_time(tp, now - day + 1) == (3, now)
    assert log.offset_for_time(tp, now + 1) == (4, now + 1000)
    assert log.offset_for_time(tp, now + 1001) is None
    assert log.retain("t", max_age=0, now=now + day) == {tp: 3}  # the active segment always stays
    assert _values(log, tp) == [b"3", b"4"] and log.latest(tp) == 5
    assert Log(log.root).retain("t", max_segments=1) == {tp: 3}
    assert log.produce("t", [(None, b"5", now + 2000)], partition=0) == [ProduceResult(0, 5, 1)]
    assert _values(log, tp) == [b"3", b"4", b"5"]


@pytest.mark.parametrize(
    "option,value",
    [
        ("segment_records", 0),
        ("segment_bytes", 100),
        ("segment_bytes", 2**40),
        ("segment_ms", 0),
        ("segment_ms", 1.5),
    ],
)
def test_roll_settings_out_of_bounds_are_refused(tmp_path, option, value):
    with pytest.raises(GroupshiftError, match=option):
        Log(tmp_path, **{option: value})
