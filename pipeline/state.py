"""The lifecycle of a `pipeline.Consumer`: how it reads (group or manual assignment), and closed.

State transitions
-----------------

`ENTERED_FROM` (a `core.states.Transitions`): a state <- the states it may be entered from; any
other move is a bug in the consumer, raised as `IllegalTransition`, never a caller's fault — a call
that does not fit the state is refused before, with `IllegalState`:

* IDLE <- IDLE, SUBSCRIBED, ASSIGNED (`unsubscribe()`; from SUBSCRIBED it leaves the group)
* SUBSCRIBED <- IDLE (`subscribe()`)
* ASSIGNED <- IDLE (`assign()`), ASSIGNED (`assign()` again)
* CLOSED <- any state (`close()`; CLOSED: `close()` racing another `close()`). CLOSED is terminal:
  `unsubscribe()` of a closed consumer leaves it closed

>>> ENTERED_FROM.allows(IDLE, SUBSCRIBED), ENTERED_FROM.allows(SUBSCRIBED, ASSIGNED)
(True, False)
"""

from __future__ import annotations

import enum

from core import states


class ConsumerState(enum.Enum):
    #: Neither subscribed nor assigned: a new consumer without topics, or after `unsubscribe()`.
    IDLE = "idle"
    #: Group management: a membership (`pipeline.backends`) was made for the subscription.
    SUBSCRIBED = "subscribed"
    #: Manual assignment (`assign()`): no group membership, the group's offsets all the same.
    ASSIGNED = "assigned"
    #: `close()` finished (or failed half-way): every call but `close()`/`unsubscribe()` refused.
    CLOSED = "closed"

    def check_transition_to(self, new: ConsumerState) -> None:
        """Raise `IllegalTransition` unless a consumer may go from this state to `new`."""
        ENTERED_FROM.check(self, new, "a consumer")


IDLE, SUBSCRIBED, ASSIGNED, CLOSED = ConsumerState


class IllegalTransition(states.IllegalTransition):
    """A transition `ENTERED_FROM` forbids: a bug in the consumer, never a caller's fault."""


#: target state -> the states it may be entered from (the module docstring's table).
ENTERED_FROM: states.Transitions[ConsumerState] = states.Transitions(
    {
        IDLE: {IDLE, SUBSCRIBED, ASSIGNED},
        SUBSCRIBED: {IDLE},
        ASSIGNED: {IDLE, ASSIGNED},
        CLOSED: set(ConsumerState),
    },
    IllegalTransition,
)
