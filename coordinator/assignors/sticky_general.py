"""Kafka's general sticky builder (`GeneralAssignmentBuilder`), for members with different subscriptions.

1. Keep every valid owned partition; drop those of topics the member no longer subscribes to (then a
   revocation is required).
2. Give each unassigned partition — ordered by the topic's number of potential consumers, topic name,
   partition — to the member with the fewest partitions (then the lowest member id) that subscribes to
   it. A topic's run is done as water-filling in bulk, which picks the same members in the same order.
3. While not balanced, walk the partitions (first the new ones unless a revocation is required, then
   all) and move a partition back to its previous owner or to the least-loaded subscriber when its
   owner has 2+ more than some other subscriber; Kafka's `PartitionMovements` swaps in a partition
   that moved the opposite way to avoid ping-pong. Keep the result only if the balance score improved.

Members are handled by their rank in Java member-id order, which is Kafka's `TreeSet` tie-break.

The Kafka example of `StickyAssignorTest`'s javadoc: with different subscriptions sticky is optimal.

>>> from coordinator.assignors.base import Subscription, show
>>> from coordinator.assignors.sticky import StickyAssignor
>>> subs = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]),
...         "C2": Subscription(["t0", "t1", "t2"])}
>>> show(StickyAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs))
{'C0': 't0-0', 'C1': 't1-0 t1-1', 'C2': 't2-0 t2-1 t2-2'}
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections import Counter, deque
from collections.abc import Callable, Iterator, Sequence
from functools import cache
from itertools import compress

from coordinator.assignors.base import Assignment, Subscription, java_string_key, topic_partitions
from coordinator.assignors.sticky_ownership import Ownership
from core.javahash import java_string_hash
from core.types import TopicPartition


def general_assign(
    o: Ownership, subscriptions: dict[str, Subscription], max_generation: int
) -> tuple[Assignment, PartitionMovements]:
    """The general builder's assignment and its `PartitionMovements`.

    `max_generation` is the highest generation the assignor has seen: claims of older generations
    count as previous owners.
    """
    builder = _GeneralBuilder(o, subscriptions, max_generation)
    return builder.build(), builder.movements


class _GeneralBuilder:
    def __init__(self, o: Ownership, subscriptions: dict[str, Subscription], max_generation: int):
        key = java_string_key(o.members)
        by_rank = sorted(range(len(o.members)), key=lambda mi: key(o.members[mi]))
        rank_of = [0] * len(by_rank)
        for r, mi in enumerate(by_rank):
            rank_of[mi] = r
        self.names = [o.members[mi] for mi in by_rank]
        self.topics, self.counts, self.topic_index = o.topics, o.counts, o.topic_index
        n_topics = len(self.topics)
        # Potential topics per member (with metadata) and potential consumers per topic (rank order).
        # Members with the same topics share one (read-only) list and set: with mostly identical
        # subscriptions this is a pass over the topics per distinct subscription, not per member.
        self.member_topics: list[list[int]] = []
        self.member_topic_sets: list[set[int]] = []
        same: dict[tuple[str, ...], tuple[list[int], set[int], list[int]]] = {}
        for r, name in enumerate(self.names):
            topics = subscriptions[name].topics
            group = same.get(topics)
            if group is None:
                mine = [self.topic_index[t] for t in topics if t in self.topic_index]
                group = same[topics] = (mine, set(mine), [])
            self.member_topics.append(group[0])
            self.member_topic_sets.append(group[1])
            group[2].append(r)
        self.topic_consumers: list[list[int]] = [[] for _ in range(n_topics)]
        for mine, _, ranks in same.values():
            for t in mine:
                self.topic_consumers[t].extend(ranks)
        if len(same) > 1:  # merging groups broke rank order: restore it
            for consumers in self.topic_consumers:
                consumers.sort()
        # Current assignment: valid claims of still-subscribed topics.
        self.revocation_required = False
        self.lists: list[list[TopicPartition]] = [[] for _ in self.names]
        all_topics = set(self.topics)
        for mi, owned in enumerate(o.owned):
            topics = subscriptions[o.members[mi]].topics
            if len(same[topics][1]) == len(all_topics):  # subscribed to every topic: keeps every claim
                keep = owned
            else:
                subscribed = set(topics)
                keep = [tp for tp in owned if tp[0] in subscribed]
            if len(keep) != len(owned):
                self.revocation_required = True
            self.lists[rank_of[mi]] = keep
        self.sizes = [len(lst) for lst in self.lists]
        # Previous owners: claims of members older than the highest generation seen.
        self.prev_owner: dict[TopicPartition, tuple[int, int]] = {}
        for mi, generation in enumerate(o.generations):
            if generation < max_generation:
                for tp in o.raw_owned[mi]:
                    known = self.prev_owner.get(tp)
                    if known is None or generation > known[1]:
                        self.prev_owner[tp] = (rank_of[mi], generation)
        self.topic_order = sorted(range(n_topics), key=lambda t: (len(self.topic_consumers[t]), t))
        self.movements = PartitionMovements()
        self._owners: list[list[int]] | None = None
        self._topic_owner_counts: list[Counter[int]] | None = None
        self._stale: set[int] | None = None  # topics whose balance figures need recomputing
        self._snapshot: dict[int, list[TopicPartition]] | None = None

    def build(self) -> Assignment:
        available = [bytearray(b"\x01") * n for n in self.counts]
        index = self.topic_index
        for lst in self.lists:
            for topic, p in lst:
                available[index[topic]][p] = 0
        unassigned: list[Sequence[int]] = [
            range(len(flags)) if flags.count(1) == len(flags) else list(compress(range(len(flags)), flags))
            for flags in available
        ]
        initializing = not any(self.sizes)
        for t in self.topic_order:
            if unassigned[t] and self.topic_consumers[t]:
                water_fill(
                    topic_partitions(self.topics[t], unassigned[t]),
                    self.topic_consumers[t],
                    self.sizes,
                    self.lists,
                )

        fixed_topic = [len(c) < 2 for c in self.topic_consumers]
        distinct = {id(ts): ts for ts in self.member_topics}  # shared by members with the same topics
        max_size_of = {k: sum(map(self.counts.__getitem__, ts)) for k, ts in distinct.items()}
        max_size = [max_size_of[id(ts)] for ts in self.member_topics]
        self.max_size = max_size
        self.participants = [
            r
            for r in range(len(self.names))
            if self.sizes[r] < max_size[r]
            or any(not fixed_topic[self.topic_index[tp[0]]] for tp in self.lists[r])
        ]
        self.participant_set = set(self.participants)
        self.index = _SizeIndex(self.participants, self.sizes)
        self.initializing = initializing

        def new_partitions() -> Iterator[tuple[int, int]]:
            for t in self.topic_order:
                if not fixed_topic[t]:
                    for p in unassigned[t]:
                        yield t, p

        def all_partitions() -> Iterator[tuple[int, int]]:
            for t in self.topic_order:
                if not fixed_topic[t]:
                    for p in range(self.counts[t]):
                        yield t, p

        if not self.revocation_required:
            self._perform_reassignments(new_partitions)
        performed = self._perform_reassignments(all_partitions)
        if not initializing and performed and self._snapshot is not None:
            now = _balance_score([self.sizes[r] for r in self.participants])
            before = _balance_score([len(self._snapshot[r]) for r in self.participants])
            if now >= before:
                for r, lst in self._snapshot.items():
                    self.lists[r] = lst
        return {name: self.lists[r] for r, name in enumerate(self.names)}

    # --- reassignment ------------------------------------------------------------------------------

    def _perform_reassignments(self, partitions: Callable[[], Iterator[tuple[int, int]]]) -> bool:
        performed = False
        while True:
            modified = False
            for t, p in partitions():
                if self._is_balanced():
                    break
                owners = self._owner_rows()
                consumer = owners[t][p]
                tp = TopicPartition(self.topics[t], p)
                prev = self.prev_owner.get(tp)
                # Unlike Kafka, only a previous owner still subscribed to the topic gets it back: Kafka
                # would hand a partition to a member that no longer subscribes to its topic.
                if (
                    prev is not None
                    and prev[0] in self.participant_set
                    and t in self.member_topic_sets[prev[0]]
                    and self.sizes[consumer] > self.sizes[prev[0]] + 1
                ):
                    self._reassign(tp, t, prev[0])
                    performed = modified = True
                    continue
                # _is_balanced just refreshed the per-topic figures, and nothing moved since.
                if self.sizes[consumer] > self._min_subscriber[t] + 1:
                    target = self.index.first_subscriber(t, self.member_topic_sets)
                    self._reassign(tp, t, target)
                    performed = modified = True
            if not modified:
                return performed

    def _reassign(self, tp: TopicPartition, t: int, new: int) -> None:
        owners = self._owner_rows()
        moved = self.movements.actual_partition_to_move(tp, owners[t][tp[1]], new)
        old = owners[t][moved[1]]
        if self._snapshot is None and not self.initializing:
            self._snapshot = {r: list(self.lists[r]) for r in self.participants}
        index, sizes = self.index, self.sizes
        index.remove(old)
        index.remove(new)
        self.movements.move(moved, old, new)
        self.lists[old].remove(moved)
        self.lists[new].append(moved)
        owners[t][moved[1]] = new
        sizes[old] -= 1
        sizes[new] += 1
        index.add(old)
        index.add(new)
        if self._stale is not None and self._topic_owner_counts is not None:
            counts = self._topic_owner_counts[t]
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
            counts[new] += 1
            self._stale.update(self.member_topics[old])
            self._stale.update(self.member_topics[new])

    def _owner_rows(self) -> list[list[int]]:
        if self._owners is None:
            self._owners = [[-1] * n for n in self.counts]
            for r, lst in enumerate(self.lists):
                for topic, p in lst:
                    self._owners[self.topic_index[topic]][p] = r
        return self._owners

    def _is_balanced(self) -> bool:
        """Kafka's `isBalanced`: sizes within one, or no partition can go to a member with 2+ fewer.

        Per topic, that is: its largest owner holds at most one more than its smallest subscriber that
        could still take partitions. Those per-topic figures are kept up to date incrementally (a move
        changes two members, so only their topics are recomputed), so the check is O(1) between moves,
        where Kafka's rescans every partition each time.
        """
        index = self.index
        if not index.buckets or index.lo >= index.hi - 1:
            return True
        if self._stale is None:
            self._start_topic_stats()
        self._refresh_topic_stats()
        return not self._unbalanced_topics

    def _start_topic_stats(self) -> None:
        n_topics = len(self.counts)
        self._topic_owner_counts = [Counter() for _ in range(n_topics)]
        for r in self.participants:
            for topic, n in Counter(tp[0] for tp in self.lists[r]).items():
                self._topic_owner_counts[self.topic_index[topic]][r] = n
        self._subscribers = [[r for r in rs if r in self.participant_set] for rs in self.topic_consumers]
        self._min_subscriber = [0] * n_topics
        self._unbalanced_topics: set[int] = set()
        self._stale = {t for r in self.participants for t in self.member_topics[r]}

    def _refresh_topic_stats(self) -> None:
        sizes, max_size, owner_counts = self.sizes, self.max_size, self._topic_owner_counts
        assert self._stale is not None and owner_counts is not None
        for t in self._stale:
            largest_owner = max((sizes[r] for r in owner_counts[t]), default=0)
            smallest, smallest_open = None, None
            for r in self._subscribers[t]:
                size = sizes[r]
                if smallest is None or size < smallest:
                    smallest = size
                if size < max_size[r] and (smallest_open is None or size < smallest_open):
                    smallest_open = size
            self._min_subscriber[t] = 0 if smallest is None else smallest
            if smallest_open is not None and largest_owner > smallest_open + 1:
                self._unbalanced_topics.add(t)
            else:
                self._unbalanced_topics.discard(t)
        self._stale.clear()


def water_fill(
    tps: list[TopicPartition], eligible: list[int], sizes: list[int], lists: list[list[TopicPartition]]
) -> None:
    """Hand ``tps`` out as if one at a time to the eligible member with the fewest, then the lowest rank.

    ``sizes[r]`` is ``len(lists[r])``; both are updated.

    The members at the lowest level take one each in rank order, round after round, until they
    reach the next level, where that level's members join; each stretch is a strided slice, or,
    when the members outnumber the rounds, a C-level pass per round. Only the sizes of members not
    yet taking are read meanwhile, so the takers' sizes are brought up to date once, at the end.
    """
    size_of = sizes.__getitem__
    order = sorted(eligible, key=size_of)  # stable: (size, rank)
    k = len(order)
    level = sizes[order[0]]
    i = bisect_right(order, level, key=size_of)
    active = order[:i]
    pos, remaining = 0, len(tps)
    while True:
        width = len(active)
        take = remaining if i == k else min(remaining, width * (sizes[order[i]] - level))
        rounds = -(-take // width)
        if rounds < width:
            active_lists = list(map(lists.__getitem__, active))
            for start in range(pos, pos + take, width):
                deque(map(list.append, active_lists, tps[start : min(start + width, pos + take)]), 0)
        else:
            block = tps[pos : pos + take]
            for j, r in enumerate(active):
                lists[r].extend(block[j::width])
        pos += take
        remaining -= take
        if not remaining:
            break
        level = sizes[order[i]]
        j = bisect_right(order, level, lo=i, key=size_of)
        active = sorted(active + order[i:j])
        i = j
    deque(map(sizes.__setitem__, active, map(len, map(lists.__getitem__, active))), maxlen=0)


def _balance_score(sizes: list[int]) -> int:
    """Sum over member pairs of the difference in partition counts (Kafka's `getBalanceScore`)."""
    ordered = sorted(sizes)
    n = len(ordered)
    return sum(x * (2 * i - n + 1) for i, x in enumerate(ordered))


class _SizeIndex:
    """Members ordered by (partition count, rank): Kafka's `sortedCurrentSubscriptions` `TreeSet`."""

    def __init__(self, members: list[int], sizes: list[int]) -> None:
        self.sizes = sizes
        self.buckets: dict[int, list[int]] = {}
        for r in sorted(members):
            self.buckets.setdefault(sizes[r], []).append(r)
        self.lo = min(self.buckets, default=0)
        self.hi = max(self.buckets, default=0)

    def remove(self, r: int) -> None:
        s = self.sizes[r]
        bucket = self.buckets[s]
        del bucket[bisect_left(bucket, r)]
        if not bucket:
            del self.buckets[s]
            if self.buckets:
                if s == self.lo:
                    self.lo = min(self.buckets)
                if s == self.hi:
                    self.hi = max(self.buckets)

    def add(self, r: int) -> None:
        s = self.sizes[r]
        if not self.buckets:
            self.lo = self.hi = s
        insort(self.buckets.setdefault(s, []), r)
        self.lo = min(self.lo, s)
        self.hi = max(self.hi, s)

    def first_subscriber(self, topic: int, member_topics: list[set[int]]) -> int:
        """The first member, by (count, rank), subscribed to ``topic``."""
        for s in sorted(self.buckets):
            for r in self.buckets[s]:
                if topic in member_topics[r]:
                    return r
        raise RuntimeError("sticky assignment bug: no member can take the partition")


# --- Kafka's PartitionMovements ------------------------------------------------------------------------


class PartitionMovements:
    """Which partitions moved between which members during one general assignment.

    `actual_partition_to_move` swaps in a partition of the same topic that moved the opposite way,
    taking the first element of a Java `HashSet`, whose order `_JavaHashSet` reproduces.
    """

    def __init__(self) -> None:
        self.by_topic: dict[str, dict[tuple[int, int], _JavaHashSet]] = {}
        self.moves: dict[TopicPartition, tuple[int, int]] = {}

    def _remove_record(self, tp: TopicPartition) -> tuple[int, int]:
        pair = self.moves.pop(tp)
        per_topic = self.by_topic[tp[0]]
        moved = per_topic[pair]
        moved.remove(tp)
        if not moved.items:
            del per_topic[pair]
        if not per_topic:
            del self.by_topic[tp[0]]
        return pair

    def _add_record(self, tp: TopicPartition, pair: tuple[int, int]) -> None:
        self.moves[tp] = pair
        self.by_topic.setdefault(tp[0], {}).setdefault(pair, _JavaHashSet()).add(tp)

    def move(self, tp: TopicPartition, old: int, new: int) -> None:
        if tp in self.moves:
            src, _ = self._remove_record(tp)
            if src != new:
                self._add_record(tp, (src, new))
        else:
            self._add_record(tp, (old, new))

    def actual_partition_to_move(self, tp: TopicPartition, old: int, new: int) -> TopicPartition:
        per_topic = self.by_topic.get(tp[0])
        if per_topic is None:
            return tp
        if tp in self.moves:
            old = self.moves[tp][0]
        reverse = per_topic.get((new, old))
        return tp if reverse is None else reverse.first()

    def is_sticky(self) -> bool:
        """False if, within a topic, partitions moved both ways between two members (Kafka's check)."""
        return not any((b, a) in per for per in self.by_topic.values() for a, b in per)


@cache
def _java_hash(tp: TopicPartition) -> int:
    """`TopicPartition.hashCode()` spread as `HashMap.hash` does (as an unsigned 32-bit int)."""
    h = (31 * (31 + tp[1]) + java_string_hash(tp[0])) & 0xFFFFFFFF
    return h ^ (h >> 16)


class _JavaHashSet:
    """Insertion-tracking set whose `first` is what a Java `HashSet`'s iterator returns first.

    Buckets are `hash & (capacity - 1)`; the table starts at 16 and doubles past a 0.75 load (it never
    shrinks); within a bucket, nodes keep insertion order (tree bins are not modelled).
    """

    __slots__ = ("capacity", "items", "seq")

    def __init__(self) -> None:
        self.items: dict[TopicPartition, int] = {}
        self.capacity = 16
        self.seq = 0

    def add(self, tp: TopicPartition) -> None:
        if tp in self.items:
            return
        self.items[tp] = self.seq
        self.seq += 1
        if len(self.items) > self.capacity * 3 // 4:
            self.capacity *= 2

    def remove(self, tp: TopicPartition) -> None:
        del self.items[tp]

    def first(self) -> TopicPartition:
        mask = self.capacity - 1
        return min(self.items, key=lambda tp: (_java_hash(tp) & mask, self.items[tp]))
