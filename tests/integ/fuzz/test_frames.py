"""2,000 random and mutated frames at a real coordinator node beside a live group (bench/fuzz_frames.py).

The same generator and checks as `python -m bench.fuzz_frames`, smaller, against the session's
ZooKeeper container: the node must stay alive, answer or close on every bad frame, keep serving the
live group (stable, commits succeed), not grow by 50 MB, log no traceback, and answer requests
pipelined before a frame it refuses by closing.
"""

from __future__ import annotations

import pytest

from bench.fuzz_frames import RSS_GROWTH_TARGET_MB, FrameFuzzer, Target, run

FRAMES = 2_000


@pytest.fixture(scope="module")
def report(module_zk_connect):
    return run(module_zk_connect, FRAMES, seed=2)


def test_the_generator_is_reproducible_and_covers_every_kind():
    target = Target("g", "t")
    a = [f.data for f in FrameFuzzer(5, target).frames(500)]
    b = [f.data for f in FrameFuzzer(5, target).frames(500)]
    assert a == b
    assert {f.kind for f in FrameFuzzer(5, target).frames(500)} == set(FrameFuzzer.WEIGHTS)


def test_every_bad_frame_is_answered_or_closed_and_the_node_lives(report):
    o = report.outcomes
    handled = o.total("answered_error") + o.total("answered_ok") + o.total("closed")
    assert handled == FRAMES, o.counts
    assert o.anywhere("silent") == o.anywhere("bad_answer") == o.anywhere("wrong_answer") == 0, o.problems
    assert report.node_alive
    # Every refused-but-answered frame left its connection usable: the control requests all succeeded.
    assert o.counts["control"]["answered_ok"] == FRAMES // 10


def test_the_live_group_is_still_served(report):
    assert report.group_stable_after
    assert report.final_commit_ok and report.final_committed_ok
    assert report.commits.get("ok", 0) > 0


def test_node_memory_stays_bounded(report):
    assert report.rss_growth_mb < RSS_GROWTH_TARGET_MB


def test_the_node_log_has_no_traceback(report):
    assert report.tracebacks == [], report.traceback_kinds


def test_a_request_pipelined_before_a_refused_frame_is_answered(report):
    assert report.answer_before_close
