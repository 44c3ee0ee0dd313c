"""Kafka's sticky assignment core (`AbstractStickyAssignor`) and the eager ``sticky`` assignor.

Goals, in priority order: balance (member counts differ by at most one, or no partition could move to
a member with 2+ fewer), then stickiness (keep what members owned). Reading ownership resolves
conflicting claims by generation; identical subscriptions use the *constrained* builder (linear in
partitions), others the *general* builder (`sticky_general`).

Data layout: topics are indexed in Java name order; per topic, flags and owners are a bytearray or a
list of ints rather than a dict of `TopicPartition`s, so a million partitions cost a few list
operations each.

Kafka's javadoc example: three members, four topics of two partitions each, then C1 leaves.

>>> from coordinator.assignors.base import Subscription, show
>>> from coordinator.assignors.payloads import encode_sticky_user_data
>>> topics = ["t0", "t1", "t2", "t3"]
>>> counts = dict.fromkeys(topics, 2)
>>> first = StickyAssignor().assign(counts, {c: Subscription(topics) for c in ("C0", "C1", "C2")})
>>> show(first)
{'C0': 't0-0 t1-1 t3-0', 'C1': 't0-1 t2-0 t3-1', 'C2': 't1-0 t2-1'}
>>> again = {c: Subscription(topics, user_data=encode_sticky_user_data(first[c], 1)) for c in ("C0", "C2")}
>>> show(StickyAssignor().assign(counts, again))
{'C0': 't0-0 t3-0 t1-1 t0-1', 'C2': 't1-0 t2-1 t2-0 t3-1'}
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, repeat
from operator import itemgetter

from coordinator.assignors.base import (
    DEFAULT_GENERATION,
    Assignment,
    Assignor,
    Subscription,
    java_string_key,
    make_tp,
)
from coordinator.assignors.payloads import decode_sticky_user_data, topic_name_cache
from coordinator.assignors.sticky_general import general_assign
from coordinator.assignors.sticky_ownership import Ownership
from core.javahash import java_sort_key, java_string_hash
from core.types import TopicPartition

_by_partition_then_topic = itemgetter(1, 0)


@dataclass
class StickyResult:
    """The sticky target assignment and, for the constrained builder, the partitions changing owner."""

    assignment: Assignment
    transferring: dict[TopicPartition, str] | None


class AbstractStickyAssignor(Assignor):
    """Shared by ``sticky`` and ``cooperative-sticky``; subclasses say how to read a member's data.

    Like Kafka's, an instance remembers the highest generation it has seen (`max_generation`, never
    reset); it only affects which older claims the general builder treats as previous owners.
    """

    def __init__(self) -> None:
        self.max_generation = DEFAULT_GENERATION
        self.last_movements: object | None = None  # the general builder's partition movements, for tests

    @abstractmethod
    def member_data(
        self, subscription: Subscription, names: dict[bytes, str] | None = None
    ) -> tuple[Sequence[TopicPartition], int]:
        """(owned partitions, generation) of a member; generation -1 when it has none.

        ``names`` is a cache of topic names shared by the members of one rebalance, for decoders.
        """

    def sticky_assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> StickyResult:
        """The target assignment (Kafka's `assignPartitions`), before any cooperative adjustment."""
        ownership = self.read_ownership(partitions_per_topic, subscriptions)
        if ownership.all_equal:
            self.last_movements = None
            return constrained_assign(ownership)
        assignment, self.last_movements = general_assign(ownership, subscriptions, self.max_generation)
        return StickyResult(assignment, None)

    def read_ownership(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Ownership:
        """Kafka's `allSubscriptionsEqual`: valid claims per member, conflicts settled by generation.

        Claims of topics not in ``partitions_per_topic`` (or of partitions past its count) are dropped.
        A partition claimed by two members: the higher generation keeps it; with equal generations
        neither does and it is remembered in `Ownership.multiple`. As in Kafka, the earlier claimant's
        generation is read from its protocol field (`Subscription.generation`).
        """
        members = java_hashmap_order(subscriptions)
        key = java_string_key(partitions_per_topic)
        topics = sorted(partitions_per_topic, key=key)
        topic_index = {t: i for i, t in enumerate(topics)}
        counts = [partitions_per_topic[t] for t in topics]
        names = topic_name_cache(topics)
        owners: list[list[int]] | None = None  # who holds each partition so far: made at the first claim
        owned: list[list[TopicPartition]] = []
        generations: list[int] = []
        raw_owned: list[Sequence[TopicPartition]] = []
        removed: dict[int, set[TopicPartition]] = {}
        multiple: set[TopicPartition] = set()
        first_topics: frozenset[str] | None = None
        same_topics: tuple[str, ...] = ()  # the last subscription seen to equal the first one
        all_equal = True
        for mi, member in enumerate(members):
            sub = subscriptions[member]
            if first_topics is None:
                first_topics = frozenset(sub.topics)
                same_topics = sub.topics
            elif all_equal and sub.topics != same_topics:
                if frozenset(sub.topics) == first_topics:
                    same_topics = sub.topics
                else:
                    all_equal = False
            claims, generation = self.member_data(sub, names)
            self.max_generation = max(self.max_generation, generation)
            generations.append(generation)
            raw_owned.append(claims)
            mine: list[TopicPartition] = []
            owned.append(mine)
            if claims and owners is None:
                owners = [[-1] * n for n in counts]
            for tp in claims:
                t = topic_index.get(tp[0])
                if t is None:
                    continue
                p = tp[1]
                if not 0 <= p < counts[t]:
                    continue
                row = owners[t]  # type: ignore[index]
                other = row[p]
                if other < 0:
                    mine.append(tp)
                    row[p] = mi
                    continue
                other_generation = subscriptions[members[other]].generation
                if generation == other_generation:
                    multiple.add(tp)
                    removed.setdefault(other, set()).add(tp)
                    row[p] = mi
                elif generation > other_generation:
                    mine.append(tp)
                    removed.setdefault(other, set()).add(tp)
                    row[p] = mi
        for mi, gone in removed.items():
            owned[mi] = [tp for tp in owned[mi] if tp not in gone]
        return Ownership(
            members, topics, topic_index, counts, owned, generations, raw_owned, multiple, all_equal
        )

    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        return self.sticky_assign(partitions_per_topic, subscriptions).assignment


def java_hashmap_order(keys: Iterable[str]) -> list[str]:
    """The order in which a Java `HashMap<String, _>` filled with ``keys`` (in this order) iterates them.

    Kafka's sticky core walks its members in `HashMap` order, and one of Kafka's exact results
    (who keeps ``maxQuota`` partitions) depends on it. Buckets are the spread `hashCode` masked by
    the table size (16, doubled past a 0.75 load); a bucket keeps insertion order.

    >>> java_hashmap_order(["consumer1", "consumer2", "consumer3", "consumer4"])
    ['consumer4', 'consumer3', 'consumer2', 'consumer1']
    """
    keys = list(keys)
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2
    mask = capacity - 1

    def bucket(key: str) -> int:
        h = java_string_hash(key) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & mask

    buckets = [bucket(k) for k in keys]
    return [keys[i] for i in sorted(range(len(keys)), key=buckets.__getitem__)]


class StickyAssignor(AbstractStickyAssignor):
    """Kafka's eager ``sticky``: previous assignment and generation come from the member's user data."""

    name = "sticky"
    supported_protocols = ("eager",)

    def member_data(
        self, subscription: Subscription, names: dict[bytes, str] | None = None
    ) -> tuple[Sequence[TopicPartition], int]:
        return decode_sticky_user_data(subscription.user_data, names)


def constrained_assign(o: Ownership) -> StickyResult:
    """Kafka's `ConstrainedAssignmentBuilder` for identical subscriptions, in bulk.

    Members keep up to their quota of owned partitions (sorted by partition, then topic); the rest
    go round-robin to the members under ``min_quota`` (sorted by member id) and then one each to the
    members at exactly ``min_quota``. The round robin is done a level at a time with strided slices,
    which gives the same order as Kafka's one-at-a-time loop.
    """
    members, counts = o.members, o.counts
    n_members = len(members)
    assignment: Assignment = {m: [] for m in members}
    if n_members == 0:
        return StickyResult(assignment, {})
    total = sum(counts)
    min_quota, expected_over_min = divmod(total, n_members)
    max_quota = min_quota + (1 if expected_over_min else 0)
    over_min = 0
    available = [bytearray(b"\x01") * n for n in counts]
    topic_index = o.topic_index
    member_key = java_string_key(members)
    sort_key: Callable[[TopicPartition], object] = _by_partition_then_topic
    if java_string_key(o.topics) is java_sort_key:  # a topic name outside the BMP: order as Java does
        rank = {t: i for i, t in enumerate(o.topics)}
        sort_key = lambda tp: (tp[1], rank[tp[0]])  # noqa: E731

    kept: list[list[TopicPartition]] = []
    revoked: set[TopicPartition] = set()
    under_min: list[int] = []
    exactly_min: list[int] = []
    multiple = o.multiple
    for mi in range(n_members):
        owned = o.owned[mi]
        if multiple:
            owned = [tp for tp in owned if tp not in multiple]
        owned = sorted(owned, key=sort_key)
        if len(owned) < min_quota:
            keep = owned
            under_min.append(mi)
        elif len(owned) >= max_quota and over_min < expected_over_min:
            over_min += 1
            if over_min == expected_over_min:
                exactly_min.clear()
            keep = owned[:max_quota]
            revoked.update(owned[max_quota:])
        else:
            keep = owned[:min_quota]
            revoked.update(owned[min_quota:])
            if over_min < expected_over_min:
                exactly_min.append(mi)
        kept.append(keep)
        for tp in keep:
            available[topic_index[tp[0]]][tp[1]] = 0

    unassigned: list[TopicPartition] = []
    for t, topic in enumerate(o.topics):
        flags = available[t]
        free = range(len(flags)) if flags.count(1) == len(flags) else compress(range(len(flags)), flags)
        unassigned.extend(map(make_tp, zip(repeat(topic), free)))

    by_member_id = lambda mi: member_key(members[mi])  # noqa: E731
    under_min.sort(key=by_member_id)
    exactly_min.sort(key=by_member_id)
    new: list[list[TopicPartition]] = [[] for _ in range(n_members)]
    pos = fill_to_min_quota(unassigned, under_min, kept, min_quota, new, exactly_min)
    # The rest: one each to the members at exactly minQuota, in queue order.
    rest = len(unassigned) - pos
    if rest > len(exactly_min):
        raise RuntimeError("sticky assignment bug: partitions left but every member is at maxQuota")
    for j in range(rest):
        new[exactly_min[j]].append(unassigned[pos + j])

    transferring: dict[TopicPartition, str] = {}
    if revoked or multiple:
        flagged = revoked | multiple
        for mi, parts in enumerate(new):
            for tp in parts:
                if tp in flagged:
                    transferring[tp] = members[mi]
    for mi, member in enumerate(members):
        keep, add = kept[mi], new[mi]
        if add:  # both are this call's own lists: extend one rather than copy both
            if keep:
                keep.extend(add)
            else:
                keep = add
        assignment[member] = keep
    return StickyResult(assignment, transferring)


def fill_to_min_quota(
    unassigned: list[TopicPartition],
    under_min: list[int],
    kept: list[list[TopicPartition]],
    min_quota: int,
    new: list[list[TopicPartition]],
    exactly_min: list[int],
) -> int:
    """Round-robin ``unassigned`` over ``under_min`` until each has ``min_quota``; return partitions used.

    A member with deficit d takes part in rounds 0..d-1, so between two distinct deficits the set of
    members taking part is fixed and each one's share is a strided slice. Members reaching
    ``min_quota`` join ``exactly_min`` in the order they reach it (deficit, then member order).
    """
    if not under_min:
        return 0
    deficits = {mi: min_quota - len(kept[mi]) for mi in under_min}
    active = list(under_min)
    pos = 0
    done_rounds = 0
    for level in sorted(set(deficits.values())):
        width = len(active)
        end = pos + width * (level - done_rounds)
        if end > len(unassigned):
            raise RuntimeError("sticky assignment bug: members under minQuota but no partitions left")
        for j, mi in enumerate(active):
            share = unassigned[pos + j : end : width]
            if new[mi]:
                new[mi].extend(share)
            else:
                new[mi] = share
        pos = end
        done_rounds = level
        exactly_min.extend(mi for mi in active if deficits[mi] == level)
        active = [mi for mi in active if deficits[mi] != level]
    return pos
