"""Kafka's RoundRobinAssignor: all partitions, in topic-name order, dealt around the members in turn.

The members, in Kafka's member order, sit in a circle. Each partition goes to the next member (from
where the last one stopped) subscribed to its topic. With identical subscriptions the counts differ by
at most one; with different subscriptions it can be very uneven, as Kafka's javadoc shows:

>>> from coordinator.assignors.base import Subscription, show
>>> subs = {"C0": Subscription(["t0"]), "C1": Subscription(["t0", "t1"]),
...         "C2": Subscription(["t0", "t1", "t2"])}
>>> show(RoundRobinAssignor().assign({"t0": 1, "t1": 2, "t2": 3}, subs))
{'C0': 't0-0', 'C1': 't1-0', 'C2': 't1-1 t2-0 t2-1 t2-2'}
"""

from __future__ import annotations

from itertools import repeat

from coordinator.assignors.base import (
    Assignment,
    Assignor,
    Subscription,
    java_sorted,
    make_tp,
    member_order,
    topic_partitions,
)
from core.types import TopicPartition


class RoundRobinAssignor(Assignor):
    """Deal partitions around the circle of members, skipping members not subscribed to the topic."""

    name = "roundrobin"

    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        ordered = member_order(subscriptions)
        assignment: Assignment = {member: [] for member in subscriptions}
        if not ordered:
            return assignment
        topics = java_sorted(partitions_per_topic)
        sets: dict[tuple[str, ...], set[str]] = {}  # one set per distinct subscription
        topic_sets: list[set[str]] = []
        for m in ordered:
            topics_of = subscriptions[m].topics
            topic_set = sets.get(topics_of)
            if topic_set is None:
                topic_set = sets[topics_of] = set(topics_of)
            topic_sets.append(topic_set)
        everywhere = set(topics)
        if all(everywhere <= s for s in sets.values()):
            # Identical subscriptions (as far as assignable topics go): partition k goes to member k % c.
            every: list[TopicPartition] = []
            for t in topics:
                every.extend(map(make_tp, zip(repeat(t), range(partitions_per_topic[t]))))
            c = len(ordered)
            for i, member in enumerate(ordered):
                assignment[member] = every[i::c]
            return assignment
        lists = [assignment[m] for m in ordered]
        c = len(ordered)
        pos = 0
        for topic in topics:
            subscribers = [i for i, s in enumerate(topic_sets) if topic in s]
            if not subscribers:
                continue
            members_of_topic = set(subscribers)
            for tp in topic_partitions(topic, range(partitions_per_topic[topic])):
                while pos not in members_of_topic:
                    pos = pos + 1 if pos + 1 < c else 0
                lists[pos].append(tp)
                pos = pos + 1 if pos + 1 < c else 0
        return assignment
