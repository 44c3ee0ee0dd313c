"""The pure cores of `migrate/`: Burrow's status rules, offset files, reset plans (no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from core.errors import GroupshiftError
from core.types import TopicPartition as TP
from migrate.groups import status
from migrate.groups.describe import LogRange
from migrate.groups.status import Commit
from migrate.offsets import files as offset_files
from migrate.offsets import reset

S = 1000  # ms


def commits(*entries):
    """(offset, ts seconds, lag) triples."""
    return [Commit(o, ts * S, lag) for o, ts, lag in entries]


# name, window, current lag, now (s), recent log ends, expected
BURROW = [
    ("no window yet", [], 5, 100, [], None),
    ("caught up", commits((10, 1, 0), (20, 2, 0)), 0, 3, [20], status.OK),
    ("lag within allowance is OK even if stopped", commits((10, 1, 0)), 0, 1000, [10], status.OK),
    ("moving and lag shrinking", commits((10, 1, 9), (20, 2, 5), (30, 3, 2)), 2, 4, [32], status.OK),
    (
        "STOP: no commit for longer than the window spans, not caught up",
        commits((10, 1, 5), (12, 2, 5), (14, 3, 6)),
        6,
        100,
        [20],
        status.STOP,
    ),
    (
        "STOP, not STALL: scheme one skips unchanged writes, so a stuck consumer leaves one old commit",
        commits((10, 1, 5)),
        8,
        60,
        [18],
        status.STOP,
    ),
    (
        "not STOP when a recent log end was at the commit (idle partition, then new data)",
        commits((10, 1, 0), (10, 2, 0)),
        3,
        100,
        [10, 13],
        status.OK,
    ),
    (
        "STALL: committing the same offset all along with lag",
        commits((10, 1, 4), (10, 2, 5), (10, 3, 6)),
        6,
        4,
        [16],
        status.STALL,
    ),
    (
        "WARN: moving but lag never decreases",
        commits((10, 1, 2), (12, 2, 3), (14, 3, 4)),
        4,
        4,
        [18],
        status.WARN,
    ),
    (
        "REWIND: offset went back and did not recover",
        commits((10, 1, 1), (20, 2, 1), (5, 3, 16)),
        16,
        4,
        [21],
        status.REWIND,
    ),
    (
        "recovered rewind is not REWIND",
        commits((10, 1, 1), (20, 2, 1), (5, 3, 16), (21, 4, 1)),
        1,
        5,
        [22],
        status.OK,
    ),
    (
        "lag touched zero inside the window: OK",
        commits((10, 1, 0), (10, 2, 3), (10, 3, 4)),
        4,
        4,
        [14],
        status.OK,
    ),
]


@pytest.mark.parametrize("name,window,lag,now,ends,expected", BURROW, ids=[b[0] for b in BURROW])
def test_burrow_partition_rules(name, window, lag, now, ends, expected):
    assert status.evaluate(window, current_lag=lag, now=now * S, ends=ends) == expected


def test_burrow_window_is_the_last_ten_and_min_complete():
    many = commits(*[(10, i, 0) for i in range(5)]) + commits(*[(20 + i, 10 + i, 5) for i in range(10)])
    assert status.evaluate(many, current_lag=5, now=20 * S, ends=[40]) == status.WARN  # old entries dropped
    assert status.evaluate(commits((10, 1, 5)), current_lag=5, now=99 * S, min_complete=0.5) == status.OK


def test_burrow_group_status_is_the_worst():
    assert status.group_status([status.OK, None, status.WARN]) == status.WARN
    for bad in (status.STOP, status.STALL, status.REWIND):
        assert status.group_status([status.OK, status.WARN, bad]) == status.ERR
    assert status.group_status([]) == status.OK


# -- offset files -------------------------------------------------------------------------------

OFFS = {TP("clicks", 0): 5, TP("clicks", 1): 3, TP("views", 10): 7}


@pytest.mark.parametrize("fmt", ["csv", "zk-export"])
def test_export_parse_round_trip(fmt):
    text = offset_files.export("g", OFFS, fmt)
    assert offset_files.parse(text.encode(), "g") == OFFS


def test_export_formats_exactly():
    assert offset_files.export("g", OFFS, "csv") == "clicks,0,5\nclicks,1,3\nviews,10,7\n"
    assert (
        offset_files.export("g", {TP("t", 1): 286894308}, "zk-export")
        == "/consumers/g/offsets/t/1:286894308\n"
    )
    assert offset_files.export("g", {TP("a,b", 0): 1}, "csv") == '"a,b",0,1\n'  # quoted only when needed


def test_parse_takes_the_four_column_shape_of_its_group():
    assert offset_files.parse(b"g,t,0,5\ng,t,1,6\n", "g") == {TP("t", 0): 5, TP("t", 1): 6}


BAD_FILES = [
    (b"t,0\n", "columns"),
    (b"t,0,1,2,3\n", "columns"),
    (b"t,0,5\ng,t,1,6\n", "columns"),
    (b"t,x,5\n", "not a number"),
    (b"t,0,five\n", "not a number"),
    (b"t,0,-3\n", "negative"),
    (b"t,0,5\nt,0,6\n", "repeats"),
    (b"\xef\xbb\xbft,0,5\n", "byte order mark"),
    (b"t,0,5\r\nt,1,5\r\n", "carriage return"),
    (b"t,0,5\n\nt,1,5\n", "empty"),
    (b"", "no offsets"),
    (b"other,t,0,5\n", "not 'g'"),
    (b"/consumers/other/offsets/t/0:5\n", "not 'g'"),
    (b"/consumers/g/offsets/t/1-0:5\n", "not a number"),
    (b"/consumers/g/owners/t/0:5\n", "not /consumers"),
    (b"t,0,99999999999999999999\n", "too large"),
    (b"\xff\xfe,0,1\n", "UTF-8"),
]


@pytest.mark.parametrize("data,message", BAD_FILES)
def test_parse_refuses_the_whole_file(data, message):
    with pytest.raises(offset_files.BadOffsetsFile, match=message):
        offset_files.parse(data, "g", "f.csv")


# -- reset plans ----------------------------------------------------------------------------------

T0, T1 = TP("t", 0), TP("t", 1)
RANGES = {T0: LogRange(2, 10), T1: LogRange(0, 4)}
CURRENT = {T0: 6, T1: None}


@pytest.mark.parametrize(
    "scenario,expected,warned",
    [
        (reset.Scenario("to-earliest"), {T0: 2, T1: 0}, 0),
        (reset.Scenario("to-latest"), {T0: 10, T1: 4}, 0),
        (reset.Scenario("to-current"), {T0: 6, T1: 4}, 0),  # nothing committed: the log end
        (reset.Scenario("to-offset", 3), {T0: 3, T1: 3}, 0),
        (reset.Scenario("to-offset", 50), {T0: 10, T1: 4}, 2),
        (reset.Scenario("to-offset", 1), {T0: 2, T1: 1}, 1),
    ],
)
def test_reset_scenarios(scenario, expected, warned):
    plan = reset.plan_reset(scenario, CURRENT, RANGES)
    assert plan.offsets() == expected
    assert len(plan.warnings) == warned
    assert [r.lag_after for r in plan.rows] == [RANGES[tp].end - expected[tp] for tp in sorted(expected)]


def test_reset_shift_by_clamps_and_needs_a_committed_offset():
    assert reset.plan_reset(reset.Scenario("shift-by", -10), {T0: 6}, RANGES).offsets() == {T0: 2}
    with pytest.raises(GroupshiftError, match="no committed offset"):
        reset.plan_reset(reset.Scenario("shift-by", 1), CURRENT, RANGES)


def test_reset_by_time_falls_back_to_the_log_end_with_a_warning():
    plan = reset.plan_reset(reset.Scenario("to-datetime"), CURRENT, RANGES, times={T0: 4, T1: None})
    assert plan.offsets() == {T0: 4, T1: 4}
    assert "no record at or after" in plan.warnings[0]


def test_datetime_zones_and_durations():
    assert reset.parse_datetime("2024-05-01T12:00:00") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert reset.parse_datetime("2024-05-01T12:00:00.000+05:30") == datetime(2024, 5, 1, 6, 30, tzinfo=UTC)
    assert reset.parse_datetime("2024-05-01T12:00:00Z") == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert reset.parse_duration("P1DT2H3M4.5S") == timedelta(days=1, hours=2, minutes=3, seconds=4.5)
    assert reset.parse_duration("PT30M") == timedelta(minutes=30)
    for bad in ("P", "PT", "30M", "PT-5M", "P1H", "yesterday"):
        with pytest.raises(GroupshiftError):
            reset.parse_duration(bad)
    with pytest.raises(GroupshiftError):
        reset.parse_datetime("01/05/2024 12:00")


def test_topic_scope():
    assert reset.parse_topic_scope(("a", "b:0,2")) == {"a": None, "b": [0, 2]}
    for bad in (("a:x",), ("a:-1",), ("a", "a"), ("a:1,1",), ("",), ("a/b",)):
        with pytest.raises(GroupshiftError):
            reset.parse_topic_scope(bad)
