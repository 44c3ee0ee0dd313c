"""The assignor contract: `Subscription`, the `Assignor` base class, member order and `get_assignor`.

An assignor is a pure function of (partitions per topic, member subscriptions) to an assignment, as in
Kafka's `ConsumerPartitionAssignor`. The group leader (or the migration bridge) calls it; nothing here
does I/O. Third-party assignors register under the entry-point group ``groupshift.assignors``::

    [project.entry-points."groupshift.assignors"]
    my-assignor = "my_package.module:MyAssignor"

>>> a = get_assignor("range")
>>> a.name
'range'
>>> subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
>>> result = a.assign({"t0": 3, "t1": 3}, subs)
>>> show(result)
{'C0': 't0-0 t0-1 t1-0 t1-1', 'C1': 't0-2 t1-2'}
"""

from __future__ import annotations

import gc
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from typing import ClassVar

from core.errors import GroupshiftError
from core.javahash import java_sort_key
from core.types import TopicPartition

ENTRY_POINT_GROUP = "groupshift.assignors"
DEFAULT_GENERATION = -1

Assignment = dict[str, list[TopicPartition]]

# Builds a TopicPartition from a (topic, partition) tuple without a Python-level call; used with map().
make_tp: Callable[[tuple[str, int]], TopicPartition] = partial(tuple.__new__, TopicPartition)


class UnknownAssignor(GroupshiftError, LookupError):
    """No assignor is registered under the requested name."""

    def __init__(self, name: str, available: Iterable[str]) -> None:
        self.name = name
        self.available = sorted(available)
        super().__init__(
            f"unknown partition assignor {name!r}; available: {', '.join(self.available)} "
            f"(third-party assignors register under the entry-point group {ENTRY_POINT_GROUP!r})"
        )


@dataclass(frozen=True, slots=True)
class Subscription:
    """What one member sends in JoinGroup: its topics and what it owned before (Kafka's `Subscription`).

    ``generation`` is the protocol field (-1 when the member has none). ``user_data`` is the assignor's
    own bytes: eager ``sticky`` reads its previous assignment from there, ``cooperative-sticky`` may read
    a generation from it when ``generation`` is -1. ``rack`` is carried for completeness; rack-aware
    placement needs replica racks, which ``assign`` does not take, so it never changes a result.
    """

    topics: tuple[str, ...]  # duplicates are dropped
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation: int = DEFAULT_GENERATION
    group_instance_id: str | None = None
    rack: str | None = None
    user_data: bytes = field(default=b"", repr=False)

    def __post_init__(self) -> None:
        topics = self.topics
        if isinstance(topics, str | bytes) or not isinstance(topics, Iterable):
            raise ValueError(f"subscription topics must be a list of topic names, not {topics!r}")
        topics = tuple(dict.fromkeys(topics))  # a subscription is a set of topics; keep first-seen order
        for t in topics:
            if type(t) is not str or not t:
                raise ValueError(f"subscription topics must be non-empty strings, got {t!r}")
        object.__setattr__(self, "topics", topics)
        object.__setattr__(self, "owned_partitions", _validated_partitions(self.owned_partitions))
        if type(self.generation) is not int or self.generation < DEFAULT_GENERATION:
            raise ValueError(f"subscription generation must be an int >= -1, got {self.generation!r}")
        for name in ("group_instance_id", "rack"):
            value = getattr(self, name)
            if value is not None and type(value) is not str:
                raise ValueError(f"subscription {name} must be a string or None, got {value!r}")
        if self.user_data is None:
            object.__setattr__(self, "user_data", b"")
        elif not isinstance(self.user_data, bytes | bytearray | memoryview):
            raise ValueError(f"subscription user_data must be bytes, got {type(self.user_data).__name__}")
        else:
            object.__setattr__(self, "user_data", bytes(self.user_data))


def _validated_partitions(owned: object) -> tuple[TopicPartition, ...]:
    if isinstance(owned, str | bytes) or not isinstance(owned, Iterable):
        raise ValueError(f"owned partitions must be a list of (topic, partition) pairs, not {owned!r}")
    owned = tuple(owned)
    if all(type(tp) is TopicPartition for tp in owned):
        bad = [tp for tp in owned if type(tp[0]) is not str or type(tp[1]) is not int or tp[1] < 0]
        if not bad:
            return owned
    out = []
    for tp in owned:
        if not isinstance(tp, tuple) or len(tp) != 2:
            raise ValueError(f"owned partition must be a (topic, partition) pair, got {tp!r}")
        topic, partition = tp
        if type(topic) is not str or not topic:
            raise ValueError(f"owned partition topic must be a non-empty string, got {tp!r}")
        if type(partition) is not int or partition < 0:
            raise ValueError(f"owned partition number must be an int >= 0, got {tp!r}")
        out.append(tp if type(tp) is TopicPartition else TopicPartition(topic, partition))
    return tuple(out)


class Assignor(ABC):
    """Base of every assignor. Subclasses set `name` and implement `_assign`.

    `assign` validates its input, keeps only subscribed topics that have partitions (as Kafka's
    `AbstractPartitionAssignor` does), and guarantees every member appears in the result.
    """

    name: ClassVar[str]
    version: ClassVar[int] = 0
    #: Rebalance protocols the assignor supports, preferred first (Kafka's `supportedProtocols`).
    supported_protocols: ClassVar[tuple[str, ...]] = ("eager",)

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
    ) -> Assignment:
        """Assign the partitions of the subscribed topics to the members; every member is in the result."""
        counts = validate(partitions_per_topic, subscriptions)
        with collector_paused():
            result = self._assign(counts, dict(subscriptions))
            return {member: result.get(member, []) for member in subscriptions}

    @abstractmethod
    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        """Assign with validated input: only subscribed topics, each with at least one partition."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the block; what the block made joins its oldest generation.

    An assignment of a million partitions allocates a million `TopicPartition` tuples (and as many
    list slots), none of which can be part of a reference cycle. With the collector running, those
    allocations trigger its passes again and again, each walking every tuple made so far: 60 % of a
    fresh sticky assignment's time. Re-enabling it as it was would still make the next allocation walk
    them all once more (a young-generation pass over a million objects), so the objects made during
    the block are moved to the oldest generation first (`gc.freeze` then `gc.unfreeze`: two list
    splices), where the next full collection sees them as it sees every long-lived object. Reference
    counting frees everything as usual. Skipped when the collector was already off, and the move is
    skipped when the process has frozen objects of its own (`gc.freeze`), which it must not unfreeze.
    The switch is process-wide: a thread running at the same time allocates without cycle collection
    until the block ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        if not gc.get_freeze_count():
            gc.freeze()
            gc.unfreeze()
        gc.enable()


def validate(
    partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, Subscription]
) -> dict[str, int]:
    """Check the input and return the partition counts of the subscribed topics that have partitions."""
    if not isinstance(partitions_per_topic, Mapping):
        raise ValueError("partitions_per_topic must map topic names to partition counts")
    if not isinstance(subscriptions, Mapping):
        raise ValueError("subscriptions must map member ids to Subscription objects")
    for topic, count in partitions_per_topic.items():
        if type(topic) is not str:
            raise ValueError(f"topic names must be strings, got {topic!r}")
        if type(count) is not int:
            raise ValueError(f"partition count of topic {topic!r} must be an int, got {count!r}")
        if count < 0:
            raise ValueError(f"partition count of topic {topic!r} is negative ({count})")
    subscribed: set[str] = set()
    last: tuple[str, ...] = ()
    for member, sub in subscriptions.items():
        if type(member) is not str:
            raise ValueError(f"member ids must be strings, got {member!r}")
        if not isinstance(sub, Subscription):
            raise ValueError(
                f"subscription of member {member!r} must be a Subscription, got {type(sub).__name__}"
            )
        if sub.topics != last:  # members mostly subscribe alike: one pass per run of equal ones
            subscribed.update(sub.topics)
            last = sub.topics
    return {t: n for t, n in partitions_per_topic.items() if n > 0 and t in subscribed}


def java_string_key(strings: Iterable[str]) -> Callable[[str], object]:
    """A sort key ordering these strings as Java's `String.compareTo` (UTF-16 code units).

    Python's code-point order agrees unless a string has a character outside the BMP.
    """
    if all(s.isascii() or max(s) <= "\uffff" for s in strings):
        return _identity
    return java_sort_key


def _identity(s: str) -> str:
    return s


def java_sorted(strings: Iterable[str]) -> list[str]:
    """The strings in Java `String.compareTo` order."""
    items = list(strings)
    return sorted(items, key=java_string_key(items))


def member_order(subscriptions: Mapping[str, Subscription]) -> list[str]:
    """Members as Kafka's `MemberInfo.compareTo` orders them.

    Static members (with a ``group_instance_id``) first by instance id, then dynamic members by
    member id, both in Java string order.

    >>> member_order({"a": Subscription([]), "b": Subscription([], group_instance_id="y"),
    ...               "c": Subscription([], group_instance_id="x")})
    ['c', 'b', 'a']
    """
    members = list(subscriptions)
    ids = [s.group_instance_id for s in subscriptions.values() if s.group_instance_id is not None]
    key = java_string_key(members + ids)
    static = [m for m in members if subscriptions[m].group_instance_id is not None]
    static.sort(key=lambda m: (key(subscriptions[m].group_instance_id), key(m)))  # type: ignore[arg-type]
    dynamic = sorted((m for m in members if subscriptions[m].group_instance_id is None), key=key)
    return static + dynamic


def topic_partitions(topic: str, partitions: Iterable[int]) -> list[TopicPartition]:
    """`TopicPartition`s of one topic, built in C (no Python call per partition)."""
    return list(map(make_tp, zip(repeat(topic), partitions)))


def show(assignment: Mapping[str, Iterable[TopicPartition]]) -> dict[str, str]:
    """An assignment as short strings, for examples and logs: ``{'C0': 't0-0 t0-1'}``."""
    return {member: " ".join(map(str, tps)) for member, tps in assignment.items()}


# --- registry -------------------------------------------------------------------------------------

_BUILTIN: dict[str, str] = {
    "range": "coordinator.assignors.range:RangeAssignor",
    "roundrobin": "coordinator.assignors.roundrobin:RoundRobinAssignor",
    "sticky": "coordinator.assignors.sticky:StickyAssignor",
    "cooperative-sticky": "coordinator.assignors.cooperative_sticky:CooperativeStickyAssignor",
    "random": "coordinator.assignors.random:RandomAssignor",
}


def _plugins() -> dict[str, importlib.metadata.EntryPoint]:
    import importlib.metadata  # ~10 ms: only when a name is not a built-in assignor

    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


def available_assignors() -> list[str]:
    """Names `get_assignor` accepts: the built-in assignors and every registered plug-in."""
    return sorted(set(_BUILTIN) | set(_plugins()))


def get_assignor(name: str) -> Assignor:
    """A new assignor instance for a protocol name (``range``, ``roundrobin``, ``sticky``, ...).

    Built-in names win over plug-ins. A plug-in entry point may name an `Assignor` subclass, a
    factory returning an `Assignor`, or an instance. Raises `UnknownAssignor` listing the names.

    >>> get_assignor("cooperative-sticky").supported_protocols
    ('cooperative', 'eager')
    """
    if name in _BUILTIN:
        module, _, attr = _BUILTIN[name].partition(":")
        return getattr(importlib.import_module(module), attr)()
    plugins = _plugins()
    if name not in plugins:
        raise UnknownAssignor(name, set(_BUILTIN) | set(plugins))
    entry_point = plugins[name]
    try:
        loaded = entry_point.load()
        assignor = loaded() if callable(loaded) and not isinstance(loaded, Assignor) else loaded
    except Exception as e:
        raise GroupshiftError(
            f"assignor plug-in {name!r} ({entry_point.value}) could not be loaded: {e}; "
            "point the entry point at an Assignor subclass"
        ) from e
    if not isinstance(assignor, Assignor):
        raise GroupshiftError(
            f"entry point {name!r} in group {ENTRY_POINT_GROUP!r} gave {assignor!r}, not an Assignor; "
            "point it at an Assignor subclass"
        )
    return assignor
