"""The demo job (`make demo`) on real ZooKeeper and real coordinator node processes."""

from __future__ import annotations

import json

from experiments.demo import format_table, run_demo


def test_demo_consumes_exactly_once_under_both_rebalancers(zk_connect, tmp_path):
    out = tmp_path / "results.json"
    results = run_demo(
        zk_connect, tmp_path / "data", partitions=3, records_per_partition=300, members=2, out=out
    )
    assert [r.rebalancer for r in results] == ["zk", "coordinator"]
    for r in results:
        assert (r.records, r.delivered, r.duplicates, r.missing) == (900, 900, 0, 0), r
        assert r.committed_at_end, r
        assert r.first_stable_s > 0 and r.join_settle_s > 0
    assert len(json.loads(out.read_text())) == 2
    assert "join settle time" in format_table(results)
