"""Scheme one's member vocabulary: its states, its rebalance failure, its registry entry.

State transitions
-----------------

A `ZkGroupMember` (zk_rebalance/member.py) is in one `ZkMemberState`; `ENTERED_FROM` (a
`core.states.Transitions`) is the table of the states each may be entered from, and
`ZkGroupMember._transition` refuses any other move (a bug in the member, raised as
`IllegalZkMemberTransition`, a RuntimeError):

    NEW             ──start()───────────────────────────▶ STARTING
    STARTING        ──the first syncedRebalance─────────▶ REBALANCING
    STABLE, FAILED  ──a ZooKeeper event─────────────────▶ REBALANCING
    REBALANCING     ──a rebalance that ended unresolved─▶ REBALANCING
    REBALANCING     ──an attempt claimed everything─────▶ STABLE
    REBALANCING     ──every attempt failed──────────────▶ FAILED
    STARTING, REBALANCING, STABLE, FAILED
                    ──ZooKeeper refused a request───────▶ REFUSED
    any but CLOSED  ──close()───────────────────────────▶ CLOSED

>>> ENTERED_FROM.entered_from(ZkMemberState.STABLE) == frozenset({ZkMemberState.REBALANCING})
True
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from core.errors import RebalanceFailed
from core.states import IllegalTransition, Transitions
from zk_rebalance.layout import ThreadId


class ConsumerRebalanceFailed(RebalanceFailed):
    """`ConsumerRebalanceFailedException`: every attempt of one `syncedRebalance` failed.

    The member owns no partitions until the next ZooKeeper event starts another rebalance. Raise
    `rebalance_max_retries × rebalance_backoff_ms` above the session timeout (the 0.8 FAQ rule)
    or remove the owner node that blocks the claim.
    """


class ZkMemberState(Enum):
    """Where a member is; `ENTERED_FROM` says which states each one may be entered from."""

    #: Created, not started. Entered from: nothing (the initial state).
    NEW = "new"
    #: `start()`: connecting, registering under /consumers/<g>/ids. Entered from: New.
    STARTING = "starting"
    #: `syncedRebalance`: up to rebalance.max.retries attempts to release, compute and claim.
    #: Entered from: Starting, Stable or Failed (a ZooKeeper event), Rebalancing (another event).
    REBALANCING = "rebalancing"
    #: An attempt claimed every partition it was assigned; fetching. Entered from: Rebalancing.
    STABLE = "stable"
    #: ConsumerRebalanceFailed: owns nothing until the next ZooKeeper event. Entered from: Rebalancing.
    FAILED = "failed"
    #: ZooKeeper refused a request of the member's own threads (`NoAuth` under a znode's ACL, or
    #: `AuthFailed`): stopped for good, its session closed, `fatal_error` says why; only close()
    #: is left. Entered from: Starting, Rebalancing, Stable or Failed.
    REFUSED = "refused"
    #: `close()`: fetchers stopped, offsets committed, session closed. Terminal.
    #: Entered from: any state but Closed.
    CLOSED = "closed"


NEW, STARTING, REBALANCING, STABLE, FAILED, REFUSED, CLOSED = ZkMemberState


class IllegalZkMemberTransition(IllegalTransition):
    """A move `ENTERED_FROM` forbids: a bug in the member, never ZooKeeper's or a caller's fault."""


#: target state -> the states it may be entered from (the table each member documents above).
ENTERED_FROM: Transitions[ZkMemberState] = Transitions(
    {
        STARTING: {NEW},
        REBALANCING: {STARTING, STABLE, FAILED, REBALANCING},
        STABLE: {REBALANCING},
        FAILED: {REBALANCING},
        REFUSED: {STARTING, REBALANCING, STABLE, FAILED},
        CLOSED: set(ZkMemberState) - {CLOSED},
    },
    IllegalZkMemberTransition,
)


@dataclass
class _PartitionInfo:
    """`PartitionTopicInfo`: the owning thread, the consumed offset (next to read), the fencing epoch."""

    thread: ThreadId
    consumed: int
    epoch: int | None = None
