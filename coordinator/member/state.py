"""A group member's own state: where it is in the join protocol, and the generation it holds.

Kafka's client-side `MemberState` (`AbstractCoordinator`), with its transitions as data: the
member changes state only through `MemberState.check_transition_to` (via `GroupMember._set_state`),
which refuses a transition the table does not list — a bug in the member, never the
coordinator's fault, raised as `IllegalMemberTransition`. Setting the state the member already
has is no transition (a JoinGroup sent again while the first is answered MEMBER_ID_REQUIRED).

State transitions
-----------------

* UNJOINED -> PREPARING_REBALANCE: the member sends JoinGroup (ServerJoinGroup, or a
  ConsumerGroupHeartbeat with epoch 0).
* PREPARING_REBALANCE -> COMPLETING_REBALANCE: JoinGroup answered with a generation; SyncGroup goes
  out (scheme three only).
* COMPLETING_REBALANCE -> STABLE: SyncGroup answered with the assignment.
* PREPARING_REBALANCE -> STABLE: scheme two's one answer carries the partitions (ServerJoinGroup;
  incremental: the heartbeat answer the member has converged on).
* UNJOINED -> STABLE: incremental only — an answer to a heartbeat sent before the member was
  fenced or left still brings it an epoch and partitions it already owns.
* COMPLETING_REBALANCE or STABLE -> PREPARING_REBALANCE: a rebalance (SyncGroup failed, the
  coordinator asked for a rejoin, the subscription changed): JoinGroup again.
* PREPARING_REBALANCE, COMPLETING_REBALANCE or STABLE -> UNJOINED: fenced (UNKNOWN_MEMBER_ID,
  ILLEGAL_GENERATION...) or left on a poll timeout: the generation is forgotten.
* any state -> CLOSED: `close()`. CLOSED is terminal.

>>> MemberState.STABLE.may_become(MemberState.PREPARING_REBALANCE)
True
>>> MemberState.CLOSED.may_become(MemberState.UNJOINED)
False
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

NO_GENERATION = -1


class IllegalMemberTransition(RuntimeError):
    """A state change the member's table forbids: a bug in the member, never the coordinator's fault."""


class MemberState(Enum):
    """Kafka's client-side `MemberState`; `TRANSITIONS` says which states each one may become."""

    UNJOINED = "unjoined"  # no generation: not joined yet, fenced, or left (poll timeout)
    PREPARING_REBALANCE = "preparing-rebalance"  # JoinGroup sent
    COMPLETING_REBALANCE = "completing-rebalance"  # JoinGroup answered, SyncGroup pending
    STABLE = "stable"  # holds the assignment of its generation
    CLOSED = "closed"  # close() ran; terminal

    def may_become(self, new: MemberState) -> bool:
        """Whether a member in this state may go to `new` (staying put is always allowed)."""
        return new is self or new in TRANSITIONS[self]

    def check_transition_to(self, new: MemberState, group_id: str) -> None:
        """Raise `IllegalMemberTransition` unless a member may go from this state to `new`."""
        if not self.may_become(new):
            raise IllegalMemberTransition(
                f"a member of group {group_id!r} cannot go from {self.value} to {new.value}"
            )


UNJOINED = MemberState.UNJOINED
PREPARING_REBALANCE = MemberState.PREPARING_REBALANCE
COMPLETING_REBALANCE = MemberState.COMPLETING_REBALANCE
STABLE = MemberState.STABLE
CLOSED = MemberState.CLOSED

#: from -> the states it may become (the table the module docstring describes).
TRANSITIONS: dict[MemberState, frozenset[MemberState]] = {
    UNJOINED: frozenset({PREPARING_REBALANCE, STABLE, CLOSED}),
    PREPARING_REBALANCE: frozenset({COMPLETING_REBALANCE, STABLE, UNJOINED, CLOSED}),
    COMPLETING_REBALANCE: frozenset({STABLE, PREPARING_REBALANCE, UNJOINED, CLOSED}),
    STABLE: frozenset({PREPARING_REBALANCE, UNJOINED, CLOSED}),
    CLOSED: frozenset(),
}


@dataclass(frozen=True)
class Generation:
    """What a successful JoinGroup gave this member (incremental: its member epoch)."""

    generation_id: int = NO_GENERATION
    member_id: str = ""
    protocol_name: str | None = None
