"""Shorthands shared by the assignor tests: partitions, subscriptions and results written as text."""

from __future__ import annotations

from coordinator.assignors import Subscription
from coordinator.assignors.payloads import encode_sticky_user_data
from core.types import TopicPartition


def tps(text: str) -> list[TopicPartition]:
    """'t1-0 t2-1' -> [TopicPartition('t1', 0), TopicPartition('t2', 1)]."""
    out = []
    for item in text.replace(",", " ").split():
        topic, _, p = item.rpartition("-")
        out.append(TopicPartition(topic, int(p)))
    return out


def sub(
    topics: list[str] | str, owned: str | list[TopicPartition] = "", generation: int = -1, **kw
) -> Subscription:
    """A subscription as Kafka's `buildSubscriptionV2Above`: owned partitions and generation in the protocol
    fields and, for the eager sticky assignor, in its user data too."""
    topics = topics.split() if isinstance(topics, str) else topics
    owned = tps(owned) if isinstance(owned, str) else owned
    user_data = encode_sticky_user_data(owned, generation) if owned or generation >= 0 else b""
    return Subscription(topics, owned_partitions=owned, generation=generation, user_data=user_data, **kw)


def text(assignment: dict[str, list[TopicPartition]]) -> dict[str, str]:
    return {m: " ".join(map(str, v)) for m, v in assignment.items()}
