"""Kafka's RangeAssignor: each topic's partitions split into contiguous ranges over its subscribers.

For each topic, the subscribed members in Kafka's member order each take ``n // c`` consecutive
partitions and the first ``n % c`` of them one more. Topics are handled in (Java) name order; Kafka's
own order is a `HashMap`'s, unspecified. A member's list is its ranges concatenated in that order.
Rack-aware range needs replica racks, which are not an input here.

The Kafka javadoc example: two members, two topics with three partitions each.

>>> from coordinator.assignors.base import Subscription, show
>>> subs = {"C0": Subscription(["t0", "t1"]), "C1": Subscription(["t0", "t1"])}
>>> show(RangeAssignor().assign({"t0": 3, "t1": 3}, subs))
{'C0': 't0-0 t0-1 t1-0 t1-1', 'C1': 't0-2 t1-2'}
"""

from __future__ import annotations

from collections import deque

from coordinator.assignors.base import (
    Assignment,
    Assignor,
    Subscription,
    java_sorted,
    member_order,
    topic_partitions,
)
from core.types import TopicPartition


class RangeAssignor(Assignor):
    """Contiguous per-topic ranges; the first members in order take the remainder."""

    name = "range"

    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        ordered = member_order(subscriptions)
        consumers_per_topic: dict[str, list[str]] = {t: [] for t in partitions_per_topic}
        # Members with the same topics are handled together: with identical subscriptions this is one
        # pass over the topics, not one per member.
        same_topics: dict[tuple[str, ...], list[str]] = {}
        for member in ordered:
            same_topics.setdefault(subscriptions[member].topics, []).append(member)
        position = {member: i for i, member in enumerate(ordered)}
        for topics, members in same_topics.items():
            for topic in topics:  # Subscription already dropped duplicate topics
                if topic in consumers_per_topic:
                    consumers_per_topic[topic].extend(members)
        if len(same_topics) > 1:  # merging groups broke member order: restore it
            for consumers in consumers_per_topic.values():
                consumers.sort(key=position.__getitem__)
        assignment: Assignment = {member: [] for member in subscriptions}
        for topic in java_sorted(partitions_per_topic):
            members = consumers_per_topic[topic]
            if members:
                n = partitions_per_topic[topic]
                hand_out(topic_partitions(topic, range(n)), [assignment[m] for m in members])
        return assignment


def hand_out(partitions: list[TopicPartition], lists: list[list[TopicPartition]]) -> None:
    """Consecutive ranges of ``partitions`` onto ``lists``: the first ``n % c`` take ``n // c + 1``.

    When each list takes one or two (many members, few partitions per topic: a million partitions
    over 2,000 members is one each of 500 topics), the ranges are strided slices appended in C, not a
    Python step per member and topic.
    """
    quota, extra = divmod(len(partitions), len(lists))
    if quota < 2:
        width = quota + 1
        cut = extra * width
        for r in range(width):
            deque(map(list.append, lists[:extra], partitions[r:cut:width]), maxlen=0)
        if quota:
            deque(map(list.append, lists[extra:], partitions[cut:]), maxlen=0)
        return
    start = 0
    for i, lst in enumerate(lists):
        length = quota + (1 if i < extra else 0)
        lst.extend(partitions[start : start + length])
        start += length
