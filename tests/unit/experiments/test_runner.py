"""How `experiment run` orders its scenarios: scale-up by itself first, then one lane per ZooKeeper
cluster, run side by side, each in the order asked for."""

from __future__ import annotations

from experiments.runner import _lanes
from experiments.scenarios import SCENARIOS


def test_scale_up_runs_alone_first_then_a_lane_per_cluster_the_single_servers_first():
    faults = [n for n in SCENARIOS if n not in ("scale-up", "follower-partition")]
    assert _lanes(list(SCENARIOS)) == {
        "alone": ["scale-up"],
        "single": faults,
        "ensemble": ["follower-partition"],
    }
    assert _lanes(["follower-partition", "zombie", "hard-kill"]) == {
        "single": ["zombie", "hard-kill"],
        "ensemble": ["follower-partition"],
    }
    assert _lanes(["follower-partition"]) == {"ensemble": ["follower-partition"]}
