"""Scheme one's member vocabulary: its states, its rebalance failure, its registry entry."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from core.errors import RebalanceFailed
from zk_rebalance.layout import ThreadId


class ConsumerRebalanceFailed(RebalanceFailed):
    """`ConsumerRebalanceFailedException`: every attempt of one `syncedRebalance` failed.

    The member owns no partitions until the next ZooKeeper event starts another rebalance. Raise
    `rebalance_max_retries × rebalance_backoff_ms` above the session timeout (the 0.8 FAQ rule)
    or remove the owner node that blocks the claim.
    """


class ZkMemberState(Enum):
    """Where a member is; `_ENTERED_FROM` lists the states each may be entered from."""

    NEW = "new"
    STARTING = "starting"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    FAILED = "failed"  # ConsumerRebalanceFailed: owns nothing until the next ZooKeeper event
    CLOSED = "closed"


_ENTERED_FROM = {
    ZkMemberState.STARTING: {ZkMemberState.NEW},
    ZkMemberState.REBALANCING: {
        ZkMemberState.STARTING,
        ZkMemberState.STABLE,
        ZkMemberState.FAILED,
        ZkMemberState.REBALANCING,
    },
    ZkMemberState.STABLE: {ZkMemberState.REBALANCING},
    ZkMemberState.FAILED: {ZkMemberState.REBALANCING},
    ZkMemberState.CLOSED: set(ZkMemberState) - {ZkMemberState.CLOSED},
}


@dataclass
class _PartitionInfo:
    """`PartitionTopicInfo`: the owning thread, the consumed offset (next to read), the fencing epoch."""

    thread: ThreadId
    consumed: int
    epoch: int | None = None
