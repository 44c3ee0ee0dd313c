"""The N-node projection of `bench/scale_model.py` (docs/coordinator.md, "Scaling out")."""

from __future__ import annotations

import pytest

from bench.scale_model import PerNode, members_per_node, project
from coordinator.node.shards import preferred_nodes

NODE = PerNode(members=60_000, heartbeats_per_cpu_s=60_000, commits_per_cpu_s=5_000)


def test_commits_take_their_share_of_the_cpu_the_heartbeats_had():
    # A member costs 1/(3 * 60,000) CPU-s/s in heartbeats and 1/(5 * 5,000) in commits: 1 : 7.2.
    assert members_per_node(NODE) == int(60_000 / 8.2)
    # Commits that cost nothing leave the heartbeat capacity as it is.
    assert members_per_node(PerNode(60_000, 60_000, float("inf"))) == 60_000


def test_nodes_add_up_until_zookeeper_is_the_ceiling():
    per = members_per_node(NODE)
    small = project(NODE, zk_txn_per_s=1_000_000, nodes=10)
    assert small.members == 10 * per and not small.zk_bound
    assert small.commits_per_s == round(10 * per / 5) and small.heartbeats_per_s == round(10 * per / 3)
    tight = project(NODE, zk_txn_per_s=5_000, nodes=10)
    assert tight.members == 25_000 and tight.commits_per_s == 5_000 and tight.zk_share == pytest.approx(1.0)
    assert tight.zk_bound and tight.zk_bound_nodes == pytest.approx(25_000 / per, abs=0.05)


def test_nodes_beyond_the_shard_count_carry_nothing():
    assert project(NODE, 1e9, nodes=80, shards=50).members == project(NODE, 1e9, nodes=50, shards=50).members


def test_a_node_joining_moves_about_its_own_share_of_shards():
    # The cap (ceil(shards / nodes) a node) moves one more shard between the nodes already there.
    two, three = preferred_nodes(50, (1, 2)), preferred_nodes(50, (1, 2, 3))
    moved = [s for s in range(50) if two[s] != three[s]]
    assert sorted(three.count(n) for n in (1, 2, 3)) == [16, 17, 17]
    assert sum(1 for s in moved if three[s] == 3) == three.count(3) and len(moved) <= three.count(3) + 1
