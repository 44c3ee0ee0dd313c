"""A state machine's transitions as data: each state with the states it may be entered from.

Every state machine of groupshift is an Enum whose moves are one `Transitions` table, written in
Kafka's convention (`GroupState`'s `validPreviousStates`): target state -> the states it may be
entered from. A state the table does not list is entered from nothing (an initial state). None may
stand for "no state yet" (e.g. a shard the node does not hold); `none_name` is how messages say it.

The table is a read-only mapping (target -> frozenset of states). `check` refuses any move it does
not list with the table's exception class, a subclass of `IllegalTransition` (a bug in the code
that moved; the migration record's is also a `GroupshiftError`, said to the user in one line), and
one message shape: "<subject> cannot go from <old> to <new>", each state by its value.

>>> import enum
>>> class Light(enum.Enum):
...     RED = "red"
...     GREEN = "green"
...     AMBER = "amber"
>>> RED, GREEN, AMBER = Light
>>> ENTERED_FROM = Transitions({GREEN: {RED}, AMBER: {GREEN}, RED: {AMBER}})
>>> ENTERED_FROM.allows(RED, GREEN), ENTERED_FROM.allows(RED, AMBER)
(True, False)
>>> ENTERED_FROM.entered_from(RED)
frozenset({<Light.AMBER: 'amber'>})
>>> ENTERED_FROM.check(GREEN, RED, "the light at {!r}", "Main St")
Traceback (most recent call last):
...
core.states.IllegalTransition: the light at 'Main St' cannot go from green to red
"""

from __future__ import annotations

import enum
from collections.abc import Hashable, Iterable, Iterator, Mapping
from typing import Generic, TypeVar

S = TypeVar("S", bound=Hashable)

_NOTHING: frozenset = frozenset()


class IllegalTransition(RuntimeError):
    """A move a state machine's table forbids: a bug in the code that moved, never a user's fault."""


class Transitions(Mapping[S, frozenset[S]], Generic[S]):
    """target state -> the states it may be entered from; a read-only mapping of frozensets."""

    __slots__ = ("_from", "error", "none_name")

    def __init__(
        self,
        entered_from: Mapping[S, Iterable[S]],
        error: type[Exception] = IllegalTransition,
        none_name: str = "none",
    ):
        self._from: dict[S, frozenset[S]] = {new: frozenset(old) for new, old in entered_from.items()}
        self.error = error
        self.none_name = none_name

    def __getitem__(self, state: S) -> frozenset[S]:
        return self._from[state]

    def __iter__(self) -> Iterator[S]:
        return iter(self._from)

    def __len__(self) -> int:
        return len(self._from)

    def entered_from(self, state: S) -> frozenset[S]:
        """The states `state` may be entered from (none: an initial state)."""
        return self._from.get(state, _NOTHING)

    def allows(self, old: S, new: S) -> bool:
        """Whether the table lists the move `old -> new`."""
        return old in self._from.get(new, _NOTHING)

    def check(self, old: S, new: S, subject: str, *about: object) -> None:
        """Raise the table's exception unless it lists `old -> new`. `subject` names what moves: a
        `str.format` template filled with `about` only then (a move allowed costs no formatting)."""
        if old not in self._from.get(new, _NOTHING):
            what = subject.format(*about)
            raise self.error(f"{what} cannot go from {self._name(old)} to {self._name(new)}")

    def _name(self, state: S) -> str:
        if state is None:
            return self.none_name
        return str(state.value) if isinstance(state, enum.Enum) else str(state)

    def __repr__(self) -> str:
        return f"Transitions({self._from!r})"
