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
from topics.active import ENTRY_BYTES
from topics.errors import CorruptSegment, InvalidTopic, OffsetOutOfRange, TopicAlreadyExists, UnknownPartition
from topics.log import Log
from topics.log_writer import ProduceResult
from topics.partitioner import DefaultPartitioner, murmur2, murmur2_batch, to_positive
from topics.segment import SCHEMA

REPO = Path(__file__).resolve().parents[3]

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
        "segment-00000000000000002000.index",
        "segment-00000000000000002000.keys",
        "segment-00000000000000002000.values",
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
    other = {"A": "B", "B": "A"}[sys.argv[2]]
    log = Log(root, segment_records=int(sys.argv[5]))
    open(go + "." + sys.argv[2], "w").close()  # ready: imports done
    while not os.path.exists(go):
        time.sleep(0.001)

    def done(writer):  # how many calls a writer has made
        try:
            with open(go + ".n." + writer) as f:
                return int(f.read())
        except (FileNotFoundError, ValueError):
            return 0

    for i in range(n):
        # At most three calls ahead of the other writer: on a loaded machine one process could
        # otherwise finish before the other starts, and nothing would race.
        while i - done(other) > 3:
            time.sleep(0.001)
        log.produce("t", [(name, name + b"-%d-%d" % (i, j)) for j in range(7)], partition=0)
        with open(go + ".n." + sys.argv[2] + ".tmp", "w") as f:
            f.write(str(i + 1))
        os.replace(go + ".n." + sys.argv[2] + ".tmp", go + ".n." + sys.argv[2])
    """
)


@pytest.mark.parametrize("segment_records", [100_000, 70])
def test_two_producer_processes_write_contiguous_non_overlapping_offsets(log, tmp_path, segment_records):
    """Two processes append seven records a call (with 70, rolling every ten calls) while this one
    reads: every read sees whole produce calls, consecutive offsets, nothing twice."""
    log.create("t", 1)
    go, n = tmp_path / "go", 80
    env = dict(os.environ, PYTHONPATH=str(REPO))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(log.root), name, str(n), str(go), str(segment_records)],
            env=env,
        )
        for name in ("A", "B")
    ]
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"go.{w}").exists() for w in "AB") and time.monotonic() < deadline:
        time.sleep(0.01)
    go.touch()  # both are ready: they now produce at the same time
    tp = TopicPartition("t", 0)
    reader, seen, reads = Log(log.root), [], 0
    while any(p.poll() is None for p in procs) or len(seen) < 2 * n * 7:
        latest = reader.latest(tp)
        assert latest % 7 == 0  # an append is seen whole or not at all
        batch, nxt = reader.read(tp, len(seen), 1000)
        assert batch.column("offset").to_pylist() == list(range(len(seen), nxt))
        seen += batch.column("value").to_pylist()
        reads += 1
        assert time.monotonic() < deadline + 60
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert len(seen) == 2 * n * 7 and reads > 1
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
    assert seen == values


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


ACTIVE_PARTS = (".index", ".keys", ".values")


def _active_files(base: int) -> list[str]:
    return [f"segment-{base:020d}{suffix}" for suffix in ACTIVE_PARTS]


def _active_bytes(log: Log, tp: TopicPartition, base: int) -> dict[str, bytes]:
    return {name: (log.partition_dir(tp) / name).read_bytes() for name in _active_files(base)}


def _restore(log: Log, tp: TopicPartition, files: dict[str, bytes]) -> None:
    for name, data in files.items():
        (log.partition_dir(tp) / name).write_bytes(data)


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
        *_active_files(50),
    ]
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 25), (25, 50), (50, 60)]
    assert pq.read_table(log.segments(tp)[1].path).column("offset").to_pylist() == list(range(25, 50))
    assert _values(log, tp) == [b"%d" % i for i in range(60)]
    assert _values(Log(log.root), tp) == [b"%d" % i for i in range(60)]
    # The active segment counts once, with the bytes of its three files.
    active = log.segments(tp)[-1]
    assert active.path.name == "segment-00000000000000000050.index"
    assert active.size == sum((log.partition_dir(tp) / n).stat().st_size for n in _active_files(50))
    assert active.size == 10 * ENTRY_BYTES + sum(len(b"%d" % i) for i in range(50, 60))


def test_the_active_segment_rolls_by_bytes(tmp_path):
    log = Log(tmp_path / "data", segment_bytes=8192)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    for _ in range(20):
        log.produce("t", [b"x" * 1000], partition=0)  # 1,016 bytes a record with its index entry
    assert _files(log, tp)[-3:] == _active_files(16)
    for info in log.segments(tp)[:-1]:
        assert info.count == 8  # as many as fit in 8 kB of the active segment's files, then a roll
    assert log.segments(tp)[-1].size == 4 * 1016
    assert log.latest(tp) == 20 and len(_values(Log(log.root), tp)) == 20
    # One produce call larger than segment_bytes is split where the bytes run out.
    assert log.produce("t", [b"y" * 1000] * 20, partition=0) == [ProduceResult(0, 20, 20)]
    assert [s.count for s in log.segments(tp)] == [8] * 5
    assert all(s.size <= 8192 for s in log.segments(tp))


def test_the_active_segment_rolls_by_age_of_its_records(tmp_path):
    log = Log(tmp_path / "data", segment_ms=60_000)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    t0 = 1_700_000_000_000
    for dt in (0, 10_000, 60_000):  # within a minute of the oldest record: one segment
        log.produce("t", [(None, b"a", t0 + dt)], partition=0)
    assert _files(log, tp) == _active_files(0)
    log.produce("t", [(None, b"b", t0 + 60_001)], partition=0)  # older than segment_ms: roll first
    assert _files(log, tp) == ["segment-00000000000000000000.parquet", *_active_files(3)]
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


def test_null_and_empty_keys_and_values_round_trip_through_the_active_segment(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    records = [(b"k", None), (None, b""), (b"", b"x"), (None, None), (b"key" * 100, b"v" * 5000)]
    log.produce("t", records, partition=0)
    log.produce("t", pa.table({"value": pa.nulls(2, pa.binary())}), partition=0)
    for reader in (log, Log(log.root)):
        batch = reader.read(tp, 0, 100).batch
        assert batch.schema == SCHEMA
        assert list(zip(batch.column("key").to_pylist(), batch.column("value").to_pylist(), strict=True)) == [
            *records,
            (None, None),
            (None, None),
        ]
    Log(log.root, segment_records=7).produce("t", [b"last"], partition=0)  # rolled: Parquet keeps them
    assert _files(log, tp) == ["segment-00000000000000000000.parquet", *_active_files(7)]
    assert pq.read_table(log.segments(tp)[0].path).column("value").to_pylist()[:4] == [None, b"", b"x", None]


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
    assert _values(log, tp) == [b"v%d" % i for i in range(30)]  # the writer's Log decodes its own


def test_reads_of_the_active_segment_slice_without_copying_and_its_chunks_stay_few(tmp_path):
    log = Log(tmp_path / "data", segment_records=10_000)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    for i in range(200):
        log.produce("t", [b"v%d-%d" % (i, j) for j in range(10)], partition=0)
    reader = Log(log.root)
    first = reader.read(tp, 0, 500).batch
    second = reader.read(tp, 500, 500).batch
    # One refresh decoded all 2,000 records into one chunk; reads inside it are slices of it.
    (active,) = reader._actives.values()
    assert len(active.chunks) == 1 and first.num_rows == second.num_rows == 500
    data = active.chunks[0].column("value").buffers()[2].address
    assert first.column("value").buffers()[2].address == second.column("value").buffers()[2].address == data
    # A reader that reads after every append merges its small chunks: a few, not one per append.
    tailing = Log(log.root)
    for i in range(300):
        log.produce("t", [b"w%d" % i], partition=0)
        assert tailing.read(tp, 2000 + i, 10).batch.column("value").to_pylist() == [b"w%d" % i]
    (active,) = tailing._actives.values()
    assert len(active.chunks) <= 12
    batch, nxt = tailing.read(tp, 0, 10_000)
    assert nxt == 2300 and batch.column("offset").to_pylist() == list(range(2300))


@pytest.mark.parametrize(
    "cut",
    [("values", 1), ("values", 5), ("keys", 1), ("keys", 3)]
    + [("index", n) for n in (1, ENTRY_BYTES - 1, ENTRY_BYTES, ENTRY_BYTES + 1, 2 * ENTRY_BYTES - 1)],
)
def test_a_torn_tail_is_ignored_by_readers_and_repaired_by_the_next_writer(log, cut):
    """A writer killed mid-append wrote its values, then its keys, then its index entries: the
    files end in a prefix of what it meant to write."""
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [(b"ka", b"a"), (b"kb", b"b")], partition=0)
    log.produce("t", [(b"kc", b"c")], partition=0)
    whole = _active_bytes(log, tp, 0)
    Log(log.root).produce("t", [(b"kd", b"ddd"), (b"ke", b"eee")], partition=0)  # the append to tear
    after = _active_bytes(log, tp, 0)
    torn_file, n = cut
    torn = {}
    for name, data in whole.items():
        new = after[name][len(data) :]
        part = name.rsplit(".", 1)[1]
        order = ["values", "keys", "index"]
        kept = len(new) if order.index(part) < order.index(torn_file) else 0
        kept = n if part == torn_file else kept
        assert kept < len(new) or part != torn_file
        torn[name] = data + new[:kept]
    _restore(log, tp, torn)
    for reader in (log, Log(log.root)):
        assert reader.latest(tp) == 3 and _values(reader, tp) == [b"a", b"b", b"c"]
    # The next writer (another process's Log: nothing cached) appends at 3.
    assert Log(log.root).produce("t", [(b"kf", b"f")], partition=0) == [ProduceResult(0, 3, 1)]
    for reader in (log, Log(log.root)):
        assert _values(reader, tp) == [b"a", b"b", b"c", b"f"]
        assert reader.read(tp, 0, 10).batch.column("key").to_pylist() == [b"ka", b"kb", b"kc", b"kf"]
    if torn_file == "index":
        # The index is never rewritten in place: its whole appends went to Parquet, a new active
        # segment took the append.
        assert _files(log, tp) == ["segment-00000000000000000000.parquet", *_active_files(3)]
    else:
        # Bytes past what the index says were truncated, then overwritten.
        assert _files(log, tp) == _active_files(0)
        assert log.segments(tp)[-1].size == sum(
            (log.partition_dir(tp) / name).stat().st_size for name in _active_files(0)
        )
    assert log.produce("t", [(b"kg", b"g")], partition=0) == [ProduceResult(0, 4, 1)]  # its cache was stale
    assert _values(Log(log.root), tp) == [b"a", b"b", b"c", b"f", b"g"]


def test_an_append_whose_bytes_a_machine_crash_lost_is_not_there(log):
    """Without fsync, a machine crash may keep index entries whose key or value bytes it lost."""
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a", b"b"], partition=0)
    log.produce("t", [b"ccc"], partition=0)
    values = log.partition_dir(tp) / "segment-00000000000000000000.values"
    values.write_bytes(values.read_bytes()[:-1])
    fresh = Log(log.root)
    assert fresh.latest(tp) == 2 and _values(fresh, tp) == [b"a", b"b"]
    assert Log(log.root).produce("t", [b"d"], partition=0) == [ProduceResult(0, 2, 1)]
    assert _values(Log(log.root), tp) == [b"a", b"b", b"d"]


def test_a_damaged_index_is_corrupt_naming_the_file(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a"], partition=0)
    log.produce("t", [b"b"], partition=0)
    path = log.segments(tp)[-1].path
    data = bytearray(path.read_bytes())
    data[ENTRY_BYTES + 8 : ENTRY_BYTES + 12] = (-5).to_bytes(4, "little", signed=True)  # a key length
    path.write_bytes(bytes(data))
    fresh = Log(log.root)
    for _ in range(2):  # and again on the next call
        with pytest.raises(CorruptSegment) as e:
            _values(fresh, tp)
        assert str(path) in str(e.value)


@pytest.mark.parametrize("left", ["all three files", "keys and values"])
def test_a_crash_between_rolls_rename_and_unlink_loses_and_repeats_nothing(tmp_path, left):
    log = Log(tmp_path / "data", segment_records=4)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a", b"b", b"c"], partition=0)
    saved = _active_bytes(log, tp, 0)
    log.produce("t", [b"d"], partition=0)  # fills the segment: rolled to Parquet, active files removed
    assert _files(log, tp) == ["segment-00000000000000000000.parquet"]
    # The state a roll that died after its rename leaves: the Parquet segment and the active
    # segment's files (which hold what the Parquet segment holds, or a prefix of it: here the
    # first three), all of them or, past the unlink of the index, the keys and values.
    if left != "all three files":
        del saved["segment-00000000000000000000.index"]
    _restore(log, tp, saved)
    for reader in (log, Log(log.root)):
        assert [(s.base, s.end) for s in reader.segments(tp)] == [(0, 4)]  # the Parquet one counts
        assert _values(reader, tp) == [b"a", b"b", b"c", b"d"]
    assert Log(log.root, segment_records=4).produce("t", [b"e"], partition=0) == [ProduceResult(0, 4, 1)]
    assert _files(log, tp) == ["segment-00000000000000000000.parquet", *_active_files(4)]
    assert _values(log, tp) == [b"a", b"b", b"c", b"d", b"e"]


def test_orphan_keys_and_values_files_are_ignored_and_removed(log):
    """A writer that died creating an active segment (values and keys first, the index last)."""
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    Log(log.root, segment_records=2).produce("t", [b"a", b"b"], partition=0)  # Parquet 0..1
    d = log.partition_dir(tp)
    (d / "segment-00000000000000000002.values").write_bytes(b"junk")
    (d / "segment-00000000000000000002.keys").write_bytes(b"")
    (d / "segment-00000000000000000001.keys").write_bytes(b"old")  # no segment of its own either
    for reader in (log, Log(log.root)):
        assert [(s.base, s.end) for s in reader.segments(tp)] == [(0, 2)] and reader.latest(tp) == 2
    assert Log(log.root).produce("t", [b"c"], partition=0) == [ProduceResult(0, 2, 1)]
    assert _files(log, tp) == ["segment-00000000000000000000.parquet", *_active_files(2)]
    assert (d / "segment-00000000000000000002.values").read_bytes() == b"c"
    assert _values(Log(log.root), tp) == [b"a", b"b", b"c"]


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


def test_an_active_segment_stays_within_int32_offsets():
    from topics.limits import MAX_SEGMENT_BYTES

    assert MAX_SEGMENT_BYTES < 2**31  # its keys and values files become binary arrays' data


def test_an_active_segment_missing_its_values_file_is_corrupt(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    log.produce("t", [b"a"], partition=0)
    (log.partition_dir(tp) / "segment-00000000000000000000.values").unlink()
    with pytest.raises(CorruptSegment, match="values is missing"):
        Log(log.root).read(tp, 0, 10)
    with pytest.raises(CorruptSegment, match="values is missing"):
        Log(log.root).produce("t", [b"b"], partition=0)


def test_a_torn_first_append_closes_the_empty_segment_and_readers_see_its_successor(log):
    """The successor has the same name and, once its index is as long as the torn one was, the
    same size; the file system may even give it the same inode. A reader still sees it."""
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    Log(log.root).produce("t", [b"x", b"y", b"z"], partition=0)
    index = log.partition_dir(tp) / "segment-00000000000000000000.index"
    index.write_bytes(index.read_bytes()[: 2 * ENTRY_BYTES])  # two whole entries, no commit mark
    reader = Log(log.root)
    assert reader.latest(tp) == 0 and reader.read(tp, 0, 10).batch.num_rows == 0
    assert Log(log.root).produce("t", [b"a", b"b"], partition=0) == [ProduceResult(0, 0, 2)]
    assert index.stat().st_size == 2 * ENTRY_BYTES
    assert reader.latest(tp) == 2 and _values(reader, tp) == [b"a", b"b"]


def test_fsync_appends_and_rolls(tmp_path):
    log = Log(tmp_path / "data", segment_records=5, fsync=True)
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    for i in range(4):
        log.produce("t", [(b"k", b"%d" % (2 * i)), (None, b"%d" % (2 * i + 1))], partition=0)
    assert [(s.base, s.end) for s in log.segments(tp)] == [(0, 5), (5, 8)]
    assert _values(Log(log.root), tp) == [b"%d" % i for i in range(8)]


def test_a_null_timestamp_in_a_table_is_the_time_of_the_produce(log):
    log.create("t", 1)
    tp = TopicPartition("t", 0)
    before = int(time.time() * 1000)
    ts = pa.array([1_700_000_000_000, None], pa.int64())
    log.produce("t", pa.table({"value": [b"a", b"b"], "timestamp": ts}), partition=0)
    stamps = Log(log.root).read(tp, 0, 10).batch.column("timestamp").cast(pa.int64()).to_pylist()
    assert stamps[0] == 1_700_000_000_000_000 and before * 1000 <= stamps[1] <= (time.time() + 1) * 1e6
