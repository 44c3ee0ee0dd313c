"""Keeps `bench/group_core.py` runnable: the benchmark's scenarios at toy sizes."""

from __future__ import annotations

from bench.group_core import bench_heartbeats, bench_rebalance


def test_benchmark_scenarios_run():
    assert bench_heartbeats(groups=3, per_group=4, rounds=2) > 0
    formed_ms, rejoin_ms = bench_rebalance(20)
    assert formed_ms >= 0 and rejoin_ms >= 0
