"""The chaos run's drain bound and verdicts, as pure functions over hand-written logs: what did not
drain and how far behind, which members never recovered, what a coordinator scheme's verdict says,
and how the report shows it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from experiments import analysis, chaos
from experiments.report import render_markdown
from tests.unit.experiments.test_analysis import ev


def test_behind_lists_only_the_partitions_short_of_their_log_end():
    ends = {"t-0": 100, "t-1": 50, "t-2": 0}
    assert analysis.behind(ends, {"t-0": 100, "t-1": 20}) == {"t-1": 30}
    assert analysis.behind(ends, {"t-0": 120, "t-1": 50}) == {}
    assert analysis.behind({"t-0": 5}, {}) == {"t-0": 5}


def test_records_a_group_is_still_behind_on_are_not_counted_lost():
    events = [
        ev(0, "assigned", "a", partitions=["t-0"]),
        ev(1, "process", "a", tp="t-0", first=0, last=9, gen=1),
        ev(2, "commit", "a", ok=True, gen=1, offsets={"t-0": 10}, batches=[["t-0", 0, 9]]),
    ]
    assert analysis.summary(events, {"t-0": 30}, since=0)["lost"] == 20
    assert analysis.summary(events, {"t-0": 30}, since=0, upto={"t-0": 10})["lost"] == 0


def test_a_commit_reported_refused_landed_when_the_member_reassigned_resumed_after_it():
    events = [
        ev(0, "assigned", "a", partitions=["t-0"]),
        ev(1, "process", "a", tp="t-0", first=0, last=9, gen=1),
        ev(2, "commit_begin", "a", gen=1, batches=[["t-0", 0, 9]]),
        ev(3, "commit", "a", ok=False, gen=1, error="UNKNOWN_MEMBER_ID", batches=[["t-0", 0, 9]]),
        ev(3.1, "lost", "a", partitions=["t-0"]),
        ev(4, "assigned", "a", partitions=["t-0"]),
        ev(5, "process", "a", tp="t-0", first=10, last=19, gen=2),
        ev(6, "commit", "a", ok=True, gen=2, offsets={"t-0": 20}, batches=[["t-0", 10, 19]]),
    ]
    figures = analysis.summary(events, {"t-0": 20}, since=0)
    assert figures["lost"] == 0 and figures["misreported_commits"] == 1
    # without the new assignment, the member's own next read says nothing about the commit
    same_position = [e for e in events if e["ev"] not in ("lost", "assigned") or e["t"] == 0]
    assert analysis.summary(same_position, {"t-0": 20}, since=0)["lost"] == 10


def test_unrecovered_members_are_those_not_working_in_the_group_when_the_drain_ends():
    events = [
        ev(0, "start", "ok"),
        ev(1, "assigned", "ok", partitions=["t-0"]),
        ev(11, "commit", "ok", ok=True, offsets={"t-0": 5}, batches=[["t-0", 0, 4]]),
        ev(0, "start", "idle"),
        ev(1, "assigned", "idle", partitions=[]),  # more members than partitions: nothing to do
        ev(0, "start", "drained"),
        ev(1, "assigned", "drained", partitions=["t-2"]),  # holds a partition with nothing left
        ev(0, "start", "never"),
        ev(0, "start", "waiting"),
        ev(1, "assigned", "waiting", partitions=["t-3"]),
        ev(9, "revoked", "waiting", partitions=["t-3"]),
        ev(0, "start", "stuck"),
        ev(1, "assigned", "stuck", partitions=["t-1"]),
        ev(5, "commit", "stuck", ok=True, offsets={"t-1": 3}, batches=[["t-1", 0, 2]]),  # before the end
        ev(0, "start", "restarted"),
        ev(1, "assigned", "restarted", partitions=["t-4"]),
        ev(8, "start", "restarted"),  # a new process under the same name: its assignment is gone
    ]
    events.sort(key=lambda e: e["t"])
    lagging = {"t-1": 40, "t-3": 7}
    got = analysis.unrecovered(
        events, ["ok", "idle", "drained", "never", "waiting", "stuck", "restarted"], 10, lagging
    )
    reasons = {m["member"]: m["reason"] for m in got}
    assert set(reasons) == {"never", "waiting", "stuck", "restarted"}
    assert "no assignment" in reasons["never"] and "no assignment" in reasons["restarted"]
    assert "revoked" in reasons["waiting"]
    assert "t-1" in reasons["stuck"] and "committed nothing" in reasons["stuck"]


def test_a_verdict_names_every_failure_and_holds_when_there_is_none():
    clean = {
        "lost": 0,
        "duplicate_committed": 0,
        "two_owner_partitions": [],
        "not_drained": {},
        "unrecovered": [],
    }
    assert chaos.verdict(clean) == []
    bad = {
        "lost": 3,
        "duplicate_committed": 2,
        "two_owner_partitions": ["t-1"],
        "double_owner_commits": 1,
        "max_owners_at_commit": 2,
        "drained": False,
        "drain_timeout_s": 75.0,
        "not_drained": {f"t-{i}": 100 + i for i in range(10)},
        "unrecovered": [{"member": "c3", "reason": "no assignment since it started"}],
    }
    lines = chaos.verdict(bad)
    assert lines[0] == "3 records lost" and lines[1] == "2 outputs committed twice"
    assert lines[2] == "1 partitions with two committing owners: t-1"
    assert lines[3].startswith("10 partitions not drained within 75 s: t-0 (100 behind)")
    assert lines[3].endswith("and 2 more")  # a line names a bounded number of partitions
    assert lines[4] == "1 members never recovered: c3 (no assignment since it started)"


def test_the_default_drain_timeout_grows_with_the_fault_window_and_is_bounded():
    assert chaos.default_drain_timeout(30) == 75
    assert chaos.default_drain_timeout(180) == 150
    assert chaos.default_drain_timeout(3600) == 900
    assert chaos.parse_duration("2m") == 120
    with pytest.raises(ValueError, match="between 1s and 1h"):
        chaos.parse_duration("2h")


class _Lab:
    def __init__(self):
        self.stopping = threading.Event()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))


class _Run:
    """A group whose committed offsets come from a list, one entry per poll."""

    def __init__(self, lab, polls: list[dict]):
        self.lab, self.polls = lab, polls

    def committed_ends(self):
        return self.polls.pop(0) if len(self.polls) > 1 else self.polls[0]


def test_the_drain_stops_waiting_at_its_deadline_and_says_which_groups_drained():
    lab = _Lab()
    runs = {"two": _Run(lab, [{}, {"t-0": 10}]), "three-eager": _Run(lab, [{"t-0": 4}])}
    start = time.monotonic()
    drained = chaos.drain(runs, {"two": {"t-0": 10}, "three-eager": {"t-0": 10}}, start + 0.5, poll_s=0.05)
    assert drained["two"] is not None and drained["two"] < start + 0.5
    assert drained["three-eager"] is None
    assert time.monotonic() - start < 2.0  # returned at the deadline, not later


def test_the_report_states_each_schemes_verdict_what_did_not_drain_and_who_never_recovered(tmp_path: Path):
    base = {"records": 100, "lost": 0, "duplicate_committed": 0, "two_owner_partitions": [], "verdict": []}
    view = {
        "two": {**base, "time_to_drain_s": 2.5, "not_drained": {}, "unrecovered": []},
        "three-eager": {
            **base,
            "time_to_drain_s": None,
            "drain_timeout_s": 60,
            "not_drained": {"chaos-three-eager-2": 1234},
            "unrecovered": [{"member": "c7", "reason": "no assignment since it started"}],
            "verdict": ["1 partitions not drained within 60 s: chaos-three-eager-2 (1234 behind)"],
        },
    }
    md = render_markdown({"chaos": view}, [], tmp_path)
    assert "**two (coordinator assigns)**: held." in md
    assert "**three, eager**: FAILED: 1 partitions not drained" in md
    assert "chaos-three-eager-2 (1,234 behind)" in md
    assert "c7: no assignment since it started" in md
    assert "time to drain, s" in md and "members never recovered" in md
