"""Kafka's ``cooperative-sticky`` assignor: the sticky target minus partitions that change owner.

A partition whose owner changes is withheld from its new owner for one round: its old owner sees it
missing, revokes it and rejoins; in the follow-up rebalance nobody owns it and it goes to its target.
So no partition is ever assigned while another member still owns it, and the group converges in a
bounded number of rounds (two for a plain membership change).

Kafka's `testAddRemoveConsumerOneTopic`: consumer2 joins while consumer1 owns all three partitions.

>>> from coordinator.assignors.base import Subscription, show
>>> from core.types import TopicPartition
>>> owned = [TopicPartition("topic", p) for p in range(3)]
>>> round1 = CooperativeStickyAssignor().assign({"topic": 3}, {
...     "consumer1": Subscription(["topic"], owned_partitions=owned, generation=1),
...     "consumer2": Subscription(["topic"], generation=1)})
>>> show(round1)
{'consumer1': 'topic-0 topic-1', 'consumer2': ''}
>>> show(CooperativeStickyAssignor().assign({"topic": 3}, {
...     "consumer1": Subscription(["topic"], owned_partitions=round1["consumer1"], generation=2),
...     "consumer2": Subscription(["topic"], generation=2)}))
{'consumer1': 'topic-0 topic-1', 'consumer2': 'topic-2'}
"""

from __future__ import annotations

from collections.abc import Sequence

from coordinator.assignors.base import DEFAULT_GENERATION, Assignment, Subscription
from coordinator.assignors.payloads import decode_cooperative_user_data
from coordinator.assignors.sticky import AbstractStickyAssignor
from core.types import TopicPartition


class CooperativeStickyAssignor(AbstractStickyAssignor):
    """Sticky assignment for the cooperative protocol (supports eager too, as Kafka's does)."""

    name = "cooperative-sticky"
    supported_protocols = ("cooperative", "eager")

    def member_data(
        self, subscription: Subscription, names: dict[bytes, str] | None = None
    ) -> tuple[Sequence[TopicPartition], int]:
        """Owned partitions from the subscription; generation from it, else from the user data."""
        if subscription.generation != DEFAULT_GENERATION:
            return subscription.owned_partitions, subscription.generation
        generation = decode_cooperative_user_data(subscription.user_data)
        return subscription.owned_partitions, DEFAULT_GENERATION if generation is None else generation

    def _assign(
        self, partitions_per_topic: dict[str, int], subscriptions: dict[str, Subscription]
    ) -> Assignment:
        result = self.sticky_assign(partitions_per_topic, subscriptions)
        assignment = result.assignment
        transferring = result.transferring
        if transferring is None:
            transferring = partitions_transferring_ownership(subscriptions, assignment)
        withheld: dict[str, set[TopicPartition]] = {}
        for tp, member in transferring.items():
            withheld.setdefault(member, set()).add(tp)
        for member, tps in withheld.items():
            assignment[member] = [tp for tp in assignment[member] if tp not in tps]
        return assignment


def partitions_transferring_ownership(
    subscriptions: dict[str, Subscription], assignment: Assignment
) -> dict[TopicPartition, str]:
    """Newly assigned partitions that some member owned and is not assigned again, with their new owner.

    Kafka's `computePartitionsTransferringOwnership`, from the members' raw owned partitions.
    """
    revoked: set[TopicPartition] = set()
    kept_all: set[str] = set()  # members whose assignment starts with what they owned, in order
    for member, assigned in assignment.items():
        owned = subscriptions[member].owned_partitions
        if not owned:
            continue
        # The sticky builders put what a member keeps first: then a list comparison (identities, in
        # C) proves nothing was revoked, without hashing a million partitions.
        if len(assigned) >= len(owned) and _starts_with(assigned, owned):
            kept_all.add(member)
            continue
        assigned_set = set(assigned)
        revoked.update(tp for tp in owned if tp not in assigned_set)
    if not revoked:
        return {}
    transferring: dict[TopicPartition, str] = {}
    for member, assigned in assignment.items():
        owned = subscriptions[member].owned_partitions
        if member in kept_all:  # an assignment holds a partition once: the rest is all new to it
            for tp in assigned[len(owned) :]:
                if tp in revoked:
                    transferring[tp] = member
            continue
        owned_set = set(owned)
        for tp in assigned:
            if tp in revoked and tp not in owned_set:
                transferring[tp] = member
    return transferring


def _starts_with(items: list[TopicPartition], prefix: tuple[TopicPartition, ...]) -> bool:
    return tuple(items[: len(prefix)]) == prefix
