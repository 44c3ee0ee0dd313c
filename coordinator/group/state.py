"""The states of a classic group: what each one does and the states it may be entered from.

Kafka's `GroupState` (`GroupMetadata.scala`): every state declares its valid previous states, and
a transition from any other state is a bug in the coordinator, raised as `IllegalStateTransition`
(never a client's fault). The table is `VALID_PREVIOUS_STATES`, a `core.states.Transitions`. The
state names are the ones DescribeGroups and ListGroups report.

>>> GroupState.STABLE.valid_previous_states == {GroupState.COMPLETING_REBALANCE}
True
>>> GroupState.STABLE.value
'Stable'
"""

from __future__ import annotations

import enum

from core.states import IllegalTransition, Transitions


class GroupState(enum.Enum):
    """One state of a group; `valid_previous_states` is the set it may be entered from."""

    #: No members; offsets may exist. A new group starts here at generation 0, and a group used
    #: only to store offsets (a "simple" or admin consumer) stays here.
    #: Action: answer JoinGroup (a member joining starts a rebalance), commit and fetch offsets.
    #: Entered from: PreparingRebalance (the join phase ended with no member left).
    EMPTY = "Empty"

    #: The join phase: waiting for every member to (re)send JoinGroup; the generation is still
    #: the old one. Action: park JoinGroups, answer SyncGroup and Heartbeat with
    #: REBALANCE_IN_PROGRESS, accept commits of the current generation.
    #: Entered from: Stable, CompletingRebalance, Empty.
    PREPARING_REBALANCE = "PreparingRebalance"

    #: The join phase ended: the generation was incremented and the JoinGroups were answered;
    #: waiting for the leader's SyncGroup with the assignment. Action: park followers' SyncGroups,
    #: write the leader's assignment, refuse commits with REBALANCE_IN_PROGRESS.
    #: Entered from: PreparingRebalance.
    COMPLETING_REBALANCE = "CompletingRebalance"

    #: The assignment was written and handed out; normal operation. Action: answer heartbeats,
    #: SyncGroup with the member's assignment, commits of the current generation; a JoinGroup
    #: of the leader or with changed metadata starts a rebalance.
    #: Entered from: CompletingRebalance.
    STABLE = "Stable"

    #: The group is going away: deleted, its last offsets expired, or its shard moved to another
    #: node. Terminal; the node forgets the group at once. Action: answer its member requests
    #: with COORDINATOR_NOT_AVAILABLE and its offset fetches with no offsets.
    #: Entered from: any state, Dead included.
    DEAD = "Dead"

    @property
    def valid_previous_states(self) -> frozenset[GroupState]:
        return VALID_PREVIOUS_STATES.entered_from(self)

    def check_transition_from(self, old: GroupState, group_id: str) -> None:
        """Raise `IllegalStateTransition` unless a group may go from `old` to this state."""
        VALID_PREVIOUS_STATES.check(old, self, "group {!r}", group_id)


EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE, DEAD = GroupState


class IllegalStateTransition(IllegalTransition):
    """A transition the state table forbids: a bug in the coordinator, never a client's fault."""


#: target state -> the states it may be entered from (the table each member documents above).
VALID_PREVIOUS_STATES: Transitions[GroupState] = Transitions(
    {
        EMPTY: {PREPARING_REBALANCE},
        PREPARING_REBALANCE: {STABLE, COMPLETING_REBALANCE, EMPTY},
        COMPLETING_REBALANCE: {PREPARING_REBALANCE},
        STABLE: {COMPLETING_REBALANCE},
        DEAD: set(GroupState),
    },
    IllegalStateTransition,
)

#: The states from which a rebalance may start ("maybe prepare rebalance" does nothing otherwise).
CAN_REBALANCE = frozenset({STABLE, COMPLETING_REBALANCE, EMPTY})
