"""The states of a coordinator node: serving, its ZooKeeper session away (suspended or lost), stopped.

What a node does follows its view of its ZooKeeper session (Curator's connection states, as
docs/recovery.md tells): while the session is SUSPENDED the node answers every group request with
COORDINATOR_NOT_AVAILABLE and fires no timers, but keeps its shards; once it is LOST (or suspended
longer than the session timeout) the node gives its shards up; when ZooKeeper answers again it
serves again. Whether the node takes new connections follows the same state. A stop that was
requested (`CoordinatorNode.request_stop`) but has not begun yet is a flag, not a state: the node
still serves until `stop()` runs.

State transitions
-----------------

`ENTERED_FROM` (a `core.states.Transitions`) is the table of the states each may be entered from;
`NodeState.check_transition_from` refuses any other move (`IllegalNodeTransition`, a bug in the node):

    NEW                       ──start() registered the node───────────▶ SERVING
    SERVING, SUSPENDED, LOST  ──kazoo: CONNECTED (same or new session)─▶ SERVING
    SERVING, SUSPENDED, LOST  ──kazoo: SUSPENDED───────────────────────▶ SUSPENDED
    SERVING, SUSPENDED, LOST  ──kazoo: LOST (the session expired)──────▶ LOST
    any state                 ──stop()─────────────────────────────────▶ STOPPED

>>> NodeState.SERVING.serving, NodeState.SUSPENDED.accepting, NodeState.STOPPED.accepting
(True, True, False)
"""

from __future__ import annotations

import enum

from core.states import IllegalTransition, Transitions


class NodeState(enum.Enum):
    """Where a coordinator node is; `ENTERED_FROM` says which states each one may be entered from."""

    #: Created; `start()` is connecting, binding and registering. Takes no connections.
    #: Entered from: nothing (the initial state).
    NEW = "new"
    #: Registered, ZooKeeper connected: serves its shards' groups, fires timers, claims shards.
    #: Entered from: New (start), Serving, Suspended, Lost (kazoo's CONNECTED).
    SERVING = "serving"
    #: The ZooKeeper connection is gone, the session maybe not: group requests get
    #: COORDINATOR_NOT_AVAILABLE, no timer fires, the shards are kept (until the sweep finds the
    #: node suspended longer than the session timeout). Entered from: Serving, Suspended, Lost.
    SUSPENDED = "suspended"
    #: The session expired: the shards were given up; the node registers again once connected.
    #: Entered from: Serving, Suspended, Lost.
    LOST = "lost"
    #: `stop()`: shards released, unregistered, listeners closed. Terminal. Entered from: any state.
    STOPPED = "stopped"

    @property
    def serving(self) -> bool:
        """Serves group requests and fires timers (ZooKeeper connected)."""
        return self is NodeState.SERVING

    @property
    def accepting(self) -> bool:
        """Takes new connections: from start until stop, ZooKeeper away or not."""
        return self in _ACCEPTING

    def check_transition_from(self, old: NodeState) -> None:
        """Raise `IllegalNodeTransition` unless a node may go from `old` to this state."""
        ENTERED_FROM.check(old, self, "a coordinator node")


NEW, SERVING, SUSPENDED, LOST, STOPPED = NodeState

_ACCEPTING = frozenset({SERVING, SUSPENDED, LOST})


class IllegalNodeTransition(IllegalTransition):
    """A move `ENTERED_FROM` forbids: a bug in the node, never a client's fault."""


#: target state -> the states it may be entered from (the table each state documents above).
ENTERED_FROM: Transitions[NodeState] = Transitions(
    {
        SERVING: {NEW, SERVING, SUSPENDED, LOST},
        SUSPENDED: {SERVING, SUSPENDED, LOST},
        LOST: {SERVING, SUSPENDED, LOST},
        STOPPED: set(NodeState),
    },
    IllegalNodeTransition,
)
