"""What a deployment of N coordinator nodes carries, projected from one node's measured figures and
ZooKeeper's measured transaction rate (pure: `bench/scale_out.py` measures, docs/coordinator.md
explains).

A member costs its node a heartbeat every `heartbeat_interval_s` and an OffsetCommit every
`commit_interval_s` (Kafka's defaults: heartbeat.interval.ms 3 s, auto.commit.interval.ms 5 s).
ZooKeeper sees none of the heartbeats; each OffsetCommit is one transaction (`check` of the
shard's epoch and leader, then a `set_data` or `create` per partition), and each rebalance one
more (the group's metadata when its assignment is accepted). A node's member capacity is the most
members it held with heartbeats alone at p99 < 20 ms; with commits as well it holds as many as
keep its CPU as busy as those heartbeats did. N nodes carry N times that until their commits reach
ZooKeeper's rate: from there on ZooKeeper caps the members, whatever the number of nodes.

>>> p = project(PerNode(members=30_000, heartbeats_per_cpu_s=30_000, commits_per_cpu_s=3_000), 20_000)
>>> p.members_per_node, p.zk_bound_nodes
(4285, 23.3)
"""

from __future__ import annotations

from dataclasses import dataclass

HEARTBEAT_INTERVAL_S = 3.0  # Kafka's heartbeat.interval.ms default
COMMIT_INTERVAL_S = 5.0  # Kafka's auto.commit.interval.ms default


@dataclass(frozen=True)
class PerNode:
    """One node's measured figures."""

    members: int  # the most members it held at p99 < 20 ms, heartbeats only
    heartbeats_per_cpu_s: float  # heartbeats answered per CPU-second of the node
    commits_per_cpu_s: float  # one-partition OffsetCommits answered per CPU-second of the node


@dataclass(frozen=True)
class Projection:
    nodes: int
    members_per_node: int  # with heartbeats and commits, at the CPU load of `PerNode.members`
    members: int
    heartbeats_per_s: int
    commits_per_s: int  # what the members ask for, capped by ZooKeeper
    zk_txn_per_s: float  # ZooKeeper's measured rate of commit-shaped transactions
    zk_share: float  # commits_per_s / zk_txn_per_s
    zk_bound_nodes: float  # from this many nodes on, ZooKeeper is the ceiling for commits
    shard_bound_nodes: int  # nodes beyond the shard count lead nothing

    @property
    def zk_bound(self) -> bool:
        return self.nodes > self.zk_bound_nodes


def members_per_node(
    per_node: PerNode,
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
    commit_interval_s: float = COMMIT_INTERVAL_S,
) -> int:
    """Members a node holds when each also commits every `commit_interval_s`: as many as keep the
    node's CPU as busy as `per_node.members` heartbeating members did."""
    heartbeat_cpu = 1 / (heartbeat_interval_s * per_node.heartbeats_per_cpu_s)
    commit_cpu = 1 / (commit_interval_s * per_node.commits_per_cpu_s)
    return int(per_node.members * heartbeat_cpu / (heartbeat_cpu + commit_cpu))


def project(
    per_node: PerNode,
    zk_txn_per_s: float,
    nodes: int = 10,
    shards: int = 50,
    heartbeat_interval_s: float = HEARTBEAT_INTERVAL_S,
    commit_interval_s: float = COMMIT_INTERVAL_S,
) -> Projection:
    """What `nodes` nodes carry (see the module docstring); beyond `shards` nodes, the extra ones
    lead no shard and carry nothing."""
    per = members_per_node(per_node, heartbeat_interval_s, commit_interval_s)
    useful = min(nodes, shards)
    zk_members = int(zk_txn_per_s * commit_interval_s)  # members whose commits fill ZooKeeper
    members = min(useful * per, zk_members)
    commits = members / commit_interval_s
    return Projection(
        nodes=nodes,
        members_per_node=per,
        members=members,
        heartbeats_per_s=round(members / heartbeat_interval_s),
        commits_per_s=round(commits),
        zk_txn_per_s=zk_txn_per_s,
        zk_share=commits / zk_txn_per_s,
        zk_bound_nodes=round(zk_members / per, 1) if per else float("inf"),
        shard_bound_nodes=shards,
    )
