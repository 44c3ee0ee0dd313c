"""The pipelined fetcher: each seed-004 rule, offset reset after retention, 100k records end to end."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from core.types import TopicPartition
from topics.errors import CorruptSegment, NoOffsetForPartition, OffsetOutOfRange
from topics.fetcher import Fetcher, records
from topics.log import Log

T0 = TopicPartition("t", 0)
T1 = TopicPartition("t", 1)


class RecordingLog:
    """A real Log whose reads are recorded and can be held at a gate (to make a fetch be in flight)."""

    def __init__(self, log: Log):
        self.log = log
        self.calls: list[tuple[TopicPartition, int]] = []
        self.gate = threading.Event()
        self.gate.set()
        self.entered = threading.Event()

    def read(self, tp, start, max_records):
        self.calls.append((tp, start))
        self.entered.set()
        assert self.gate.wait(10)
        return self.log.read(tp, start, max_records)

    def earliest(self, tp):
        return self.log.earliest(tp)

    def latest(self, tp):
        return self.log.latest(tp)

    def reads_of(self, tp):
        return [o for t, o in list(self.calls) if t == tp]


@pytest.fixture
def log(tmp_path) -> Log:
    log = Log(tmp_path / "data", segment_records=500, row_group_records=250)
    log.create("t", 2)
    return log


def fill(log: Log, tp: TopicPartition, n: int, start: int = 0) -> None:
    log.produce(
        tp.topic,
        pa.table({"value": [f"{tp.partition}:{i}".encode() for i in range(start, start + n)]}),
        tp.partition,
    )


def poll_until(fetcher: Fetcher, pred, timeout: float = 10.0) -> list[dict]:
    polls = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        polls.append(fetcher.poll(0.2))
        if pred(polls):
            return polls
    raise AssertionError(f"condition not reached after {len(polls)} polls")


def offsets(polls, tp):
    return [o for p in polls if tp in p for o in p[tp].column("offset").to_pylist()]


def test_100k_records_through_the_fetcher_no_gap_no_duplicate(tmp_path):
    log = Log(tmp_path / "data")
    log.create("big", 4)
    tps = [TopicPartition("big", p) for p in range(4)]
    for i in range(10):
        log.produce(
            "big",
            pa.table(
                {"key": [f"k{i}-{j}" for j in range(10_000)], "value": [f"{i}-{j}" for j in range(10_000)]}
            ),
        )
    ends = {tp: log.latest(tp) for tp in tps}
    assert sum(ends.values()) == 100_000
    with Fetcher(
        log, max_poll_records=3_000, max_partition_fetch_records=7_000, auto_offset_reset="earliest"
    ) as f:
        f.assign(tps)
        seen = {tp: [] for tp in tps}
        values = []
        deadline = time.monotonic() + 30
        while sum(map(len, seen.values())) < 100_000 and time.monotonic() < deadline:
            got = f.poll(1.0)
            assert sum(b.num_rows for b in got.values()) <= 3_000
            for tp, b in got.items():
                seen[tp] += b.column("offset").to_pylist()
                values += b.column("value").to_pylist()
        assert all(seen[tp] == list(range(ends[tp])) for tp in tps)
        assert len(values) == len(set(values)) == 100_000
        assert all(f.position(tp) == ends[tp] for tp in tps)
        assert f.poll(0.1) == {}


def test_max_poll_records_is_honoured_across_partitions(log):
    fill(log, T0, 1000)
    fill(log, T1, 1000)
    with Fetcher(log, max_poll_records=64, auto_offset_reset="earliest") as f:
        f.assign({T0, T1})
        polls = poll_until(f, lambda ps: len(offsets(ps, T0)) + len(offsets(ps, T1)) == 2000)
        assert all(sum(b.num_rows for b in p.values()) <= 64 for p in polls)
        assert max(sum(b.num_rows for b in p.values()) for p in polls) == 64
        assert offsets(polls, T0) == list(range(1000)) and offsets(polls, T1) == list(range(1000))


def test_a_fetch_made_stale_by_a_seek_is_discarded(log):
    fill(log, T0, 1000)
    rl = RecordingLog(log)
    with Fetcher(rl, max_poll_records=100, auto_offset_reset="earliest") as f:
        f.assign({T0})
        rl.gate.clear()
        assert f.poll(0) == {}  # sends the fetch at offset 0; it blocks in the log
        assert rl.entered.wait(5) and rl.reads_of(T0) == [0]
        f.seek(T0, 600)  # ...so it is stale by the time it completes
        rl.gate.set()
        polls = poll_until(f, lambda ps: offsets(ps, T0))
        assert offsets(polls, T0)[0] == 600
        assert f.stats["discarded_fetches"] >= 1
        assert 0 not in offsets(polls, T0)


def test_buffered_data_is_discarded_by_seek_and_by_revocation(log):
    fill(log, T0, 1000)
    fill(log, T1, 1000)
    with Fetcher(log, max_poll_records=10, auto_offset_reset="earliest") as f:
        f.assign({T0, T1})
        polls = poll_until(f, lambda ps: offsets(ps, T0) and offsets(ps, T1))
        f.seek(T0, 900)
        f.assign({T0})  # T1 revoked while it has buffered records
        polls = poll_until(f, lambda ps: len(offsets(ps, T0)) >= 100)
        assert offsets(polls, T0)[:100] == list(range(900, 1000)) and not offsets(polls, T1)


def test_a_fetch_in_flight_for_a_revoked_partition_is_discarded(log):
    fill(log, T0, 100)
    fill(log, T1, 100)
    rl = RecordingLog(log)
    with Fetcher(rl, auto_offset_reset="earliest") as f:
        f.assign({T0})
        rl.gate.clear()
        f.poll(0)
        assert rl.entered.wait(5)
        f.assign({T1})
        rl.gate.set()
        polls = poll_until(f, lambda ps: len(offsets(ps, T1)) == 100)
        assert not offsets(polls, T0) and f.stats["discarded_fetches"] >= 1


def test_paused_partitions_return_nothing_and_are_not_fetched(log):
    fill(log, T0, 1000)
    fill(log, T1, 1000)
    rl = RecordingLog(log)
    with Fetcher(rl, max_poll_records=50, auto_offset_reset="earliest") as f:
        f.assign({T0, T1})
        polls = poll_until(f, lambda ps: offsets(ps, T0) and offsets(ps, T1))
        f.pause({T0})  # T0 may have buffered records: they must not come out
        reads = len(rl.reads_of(T0))
        paused_polls = poll_until(f, lambda ps: len(offsets(polls, T1)) + len(offsets(ps, T1)) == 1000)
        assert not offsets(paused_polls, T0) and len(rl.reads_of(T0)) == reads
        assert f.paused() == {T0}
        position = f.position(T0)
        f.resume({T0})
        resumed = poll_until(f, lambda ps: len(offsets(ps, T0)) == 1000 - position)
        assert offsets(polls, T0) + offsets(resumed, T0) == list(range(1000))


def test_a_partition_with_buffered_records_is_never_fetched(log):
    fill(log, T0, 1000)
    rl = RecordingLog(log)
    with Fetcher(
        rl, max_poll_records=100, max_partition_fetch_records=1000, auto_offset_reset="earliest"
    ) as f:
        f.assign({T0})
        polls = poll_until(f, lambda ps: offsets(ps, T0))
        reads = rl.reads_of(T0)
        assert reads == [0]  # one fetch: one read of 1000 records over four row groups, two segments
        while len(offsets(polls, T0)) < 1000:
            polls.append(f.poll(1.0))
            if len(offsets(polls, T0)) < 1000:
                time.sleep(0.01)  # give the fetch thread every chance to misbehave
                assert rl.reads_of(T0) == reads  # still buffered: no new fetch
        assert offsets(polls, T0) == list(range(1000))


def test_the_next_fetch_is_sent_before_poll_returns(log):
    fill(log, T0, 300)
    rl = RecordingLog(log)
    with Fetcher(
        rl, max_poll_records=100, max_partition_fetch_records=100, auto_offset_reset="earliest"
    ) as f:
        f.assign({T0})
        polls = poll_until(f, lambda ps: offsets(ps, T0))
        assert offsets(polls, T0) == list(range(100)) and rl.reads_of(T0)[0] == 0
        # No poll is running, yet the fetch sent by the last poll reads offset 100 in the background.
        deadline = time.monotonic() + 5
        while 100 not in rl.reads_of(T0) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert rl.reads_of(T0) == [0, 100]
        assert offsets([f.poll(5.0)], T0) == list(range(100, 200))


@pytest.mark.parametrize("policy", ["earliest", "latest", "none"])
def test_retention_below_the_position_applies_the_reset_policy(log, policy):
    for i in range(4):
        fill(log, T0, 500, start=500 * i)  # segments at 0, 500, 1000, 1500
    with Fetcher(log, max_poll_records=100, auto_offset_reset=policy) as f:
        f.assign({T0})
        f.seek(T0, 100)
        polls = poll_until(f, lambda ps: offsets(ps, T0))
        assert offsets(polls, T0)[0] == 100
        log.retain("t", max_segments=2)  # earliest is now 1000; the position (< 500) is gone
        f.seek(T0, 200)
        if policy == "none":
            with pytest.raises(OffsetOutOfRange) as e:
                poll_until(f, lambda ps: False, timeout=5)
            assert e.value.earliest == 1000
            return
        if policy == "earliest":
            polls = poll_until(f, lambda ps: offsets(ps, T0))
            assert offsets(polls, T0)[0] == 1000
        else:
            poll_until(f, lambda ps: f.position(T0) == 2000)
            fill(log, T0, 10, start=2000)
            polls = poll_until(f, lambda ps: offsets(ps, T0))
            assert offsets(polls, T0) == list(range(2000, 2010))


def test_positions_reset_and_seek_to_beginning_end(log):
    fill(log, T0, 30)
    with Fetcher(log, auto_offset_reset="none") as f:
        f.assign({T0})
        with pytest.raises(NoOffsetForPartition):
            f.position(T0)
        with pytest.raises(NoOffsetForPartition):
            f.poll(0)
        f.seek_to_end([T0])
        assert f.position(T0) == 30
        f.seek_to_beginning()
        assert f.position(T0) == 0
        polls = poll_until(f, lambda ps: offsets(ps, T0))
        assert offsets(polls, T0) == list(range(30))
        rec = records(T0, polls[-1][T0])[0]
        assert (rec.topic, rec.partition, rec.offset, rec.key, rec.value) == ("t", 0, 0, None, b"0:0")
    with Fetcher(log) as f:  # Kafka's default is latest
        f.assign({T0})
        assert f.position(T0) == 30


def test_a_corrupt_segment_surfaces_from_poll_naming_the_file(log):
    fill(log, T0, 500)  # two whole Parquet segments
    fill(log, T0, 500, start=500)
    path = log.segments(T0)[1].path
    path.write_bytes(path.read_bytes()[:100])
    with Fetcher(Log(log.root), auto_offset_reset="earliest") as f:
        f.assign({T0})
        with pytest.raises(CorruptSegment, match=str(path)):
            poll_until(f, lambda ps: False, timeout=5)


def test_wakeup_ends_a_blocking_poll(log):
    with Fetcher(log, auto_offset_reset="earliest") as f:
        f.assign({T0})
        threading.Timer(0.2, f.wakeup).start()
        t = time.monotonic()
        assert f.poll(10) == {}
        assert time.monotonic() - t < 5


def test_a_partition_not_yet_on_disk_is_retried_not_raised(log):
    fill(log, T0, 10)
    later = TopicPartition("later", 0)
    with Fetcher(log, auto_offset_reset="earliest") as f:
        f.assign({T0, later})
        polls = poll_until(f, lambda ps: len(offsets(ps, T0)) == 10)
        assert not offsets(polls, later)
        log.create("later", 1)
        fill(log, later, 5)
        polls = poll_until(f, lambda ps: len(offsets(ps, later)) == 5)
        assert offsets(polls, later) == list(range(5))
