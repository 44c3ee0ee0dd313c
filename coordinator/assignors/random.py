"""A random assignor: each partition to a random subscriber. An example of how to write an assignor.

It is the ``RandomAssignor`` of the seed article on Kafka's assignors: not better than range, only
short. A plug-in looks the same: subclass `Assignor`, set ``name``, implement ``_assign`` (which gets
validated input: only subscribed topics, each with at least one partition) and register the class under
the entry-point group ``groupshift.assignors``.

>>> from coordinator.assignors.base import Subscription
>>> result = RandomAssignor(seed=7).assign({"t0": 4}, {"a": Subscription(["t0"]), "b": Subscription(["t0"])})
>>> sorted(tp for tps in result.values() for tp in tps) == [("t0", p) for p in range(4)]
True
"""

from __future__ import annotations

import random

from coordinator.assignors.base import Assignment, Assignor, Subscription, member_order, topic_partitions


class RandomAssignor(Assignor):
    """Every partition goes to a member chosen uniformly among the topic's subscribers."""

    name = "random"

    def __init__(self, seed: int | None = None) -> None:
        self._random = random.Random(seed)

    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        assignment: Assignment = {member: [] for member in subscriptions}
        ordered = member_order(subscriptions)
        for topic in sorted(partitions_per_topic):
            members = [m for m in ordered if topic in subscriptions[m].topics]
            if not members:
                continue
            for tp in topic_partitions(topic, range(partitions_per_topic[topic])):
                assignment[self._random.choice(members)].append(tp)
        return assignment
