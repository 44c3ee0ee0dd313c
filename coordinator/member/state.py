"""A group member's own state: where it is in the join protocol, and the generation it holds.

Kafka's client-side `MemberState` (`AbstractCoordinator`), with its transitions as data:
`ENTERED_FROM` (a `core.states.Transitions`), each state with the states it may be entered from.
The member changes state only through `MemberState.check_transition_to` (via
`GroupMember._set_state`), which refuses a transition the table does not list — a bug in the
member, never the coordinator's fault, raised as `IllegalMemberTransition`. Setting the state the
member already has is no transition (a JoinGroup sent again while the first is answered
MEMBER_ID_REQUIRED; a heartbeat answer that keeps a member STABLE).

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

>>> ENTERED_FROM.allows(MemberState.STABLE, MemberState.PREPARING_REBALANCE)
True
>>> ENTERED_FROM.allows(MemberState.CLOSED, MemberState.UNJOINED)
False
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from core.states import IllegalTransition, Transitions

NO_GENERATION = -1


class MemberState(Enum):
    """Kafka's client-side `MemberState`; `ENTERED_FROM` says which states each one may follow."""

    UNJOINED = "unjoined"  # no generation: not joined yet, fenced, or left (poll timeout)
    PREPARING_REBALANCE = "preparing-rebalance"  # JoinGroup sent
    COMPLETING_REBALANCE = "completing-rebalance"  # JoinGroup answered, SyncGroup pending
    STABLE = "stable"  # holds the assignment of its generation
    CLOSED = "closed"  # close() ran; terminal

    def check_transition_to(self, new: MemberState, group_id: str) -> None:
        """Raise `IllegalMemberTransition` unless a member may go from this state to `new` (staying
        put is no transition: always allowed, and checked first)."""
        if new is not self:
            ENTERED_FROM.check(self, new, "a member of group {!r}", group_id)


UNJOINED, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, CLOSED = MemberState


class IllegalMemberTransition(IllegalTransition):
    """A state change the member's table forbids: a bug in the member, never the coordinator's fault."""


#: target state -> the states it may be entered from (the table the module docstring describes).
ENTERED_FROM: Transitions[MemberState] = Transitions(
    {
        UNJOINED: {PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE},
        PREPARING_REBALANCE: {UNJOINED, COMPLETING_REBALANCE, STABLE},
        COMPLETING_REBALANCE: {PREPARING_REBALANCE},
        STABLE: {UNJOINED, PREPARING_REBALANCE, COMPLETING_REBALANCE},
        CLOSED: set(MemberState) - {CLOSED},
    },
    IllegalMemberTransition,
)


@dataclass(frozen=True)
class Generation:
    """What a successful JoinGroup gave this member (incremental: its member epoch)."""

    generation_id: int = NO_GENERATION
    member_id: str = ""
    protocol_name: str | None = None
