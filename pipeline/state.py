"""The lifecycle of a `pipeline.Consumer`: how it reads (group or manual assignment), and closed.

State transitions (`NEXT`: a state -> the states it may go to; any other is a bug in the consumer,
raised as `IllegalTransition`, never a caller's fault — a call that does not fit the state is
refused before, with `IllegalState`):

* IDLE -> SUBSCRIBED (`subscribe()`), ASSIGNED (`assign()`), IDLE (`unsubscribe()`), CLOSED (`close()`)
* SUBSCRIBED -> IDLE (`unsubscribe()`: leaves the group), CLOSED (`close()`)
* ASSIGNED -> ASSIGNED (`assign()` again), IDLE (`unsubscribe()`), CLOSED (`close()`)
* CLOSED -> CLOSED (`close()` racing another `close()`); `unsubscribe()` of a closed consumer leaves it closed

>>> IDLE.may_go_to(SUBSCRIBED), SUBSCRIBED.may_go_to(ASSIGNED)
(True, False)
"""

from __future__ import annotations

import enum


class IllegalTransition(RuntimeError):
    """A transition `NEXT` forbids: a bug in the consumer, never a caller's fault."""


class ConsumerState(enum.Enum):
    #: Neither subscribed nor assigned: a new consumer without topics, or after `unsubscribe()`.
    IDLE = "idle"
    #: Group management: a membership (`pipeline.backends`) was made for the subscription.
    SUBSCRIBED = "subscribed"
    #: Manual assignment (`assign()`): no group membership, the group's offsets all the same.
    ASSIGNED = "assigned"
    #: `close()` finished (or failed half-way): every call but `close()`/`unsubscribe()` refused.
    CLOSED = "closed"

    def may_go_to(self, new: ConsumerState) -> bool:
        return new in NEXT[self]

    def check_transition_to(self, new: ConsumerState) -> None:
        if new not in NEXT[self]:
            raise IllegalTransition(f"a consumer cannot go from {self.value} to {new.value}")


IDLE, SUBSCRIBED, ASSIGNED, CLOSED = ConsumerState

#: state -> the states it may go to (the module docstring's table).
NEXT: dict[ConsumerState, frozenset[ConsumerState]] = {
    IDLE: frozenset({SUBSCRIBED, ASSIGNED, IDLE, CLOSED}),
    SUBSCRIBED: frozenset({IDLE, CLOSED}),
    ASSIGNED: frozenset({ASSIGNED, IDLE, CLOSED}),
    CLOSED: frozenset({CLOSED}),
}
