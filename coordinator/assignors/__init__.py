"""Partition assignors: range, roundrobin, sticky, cooperative-sticky, random, plug-ins.

Pick one with `get_assignor(name)`; call ``assign(partitions_per_topic, subscriptions)``. See
``docs/assignors.md`` for which to choose and how to write a plug-in.
"""

from coordinator.assignors.base import (
    DEFAULT_GENERATION,
    ENTRY_POINT_GROUP,
    Assignment,
    Assignor,
    Subscription,
    UnknownAssignor,
    available_assignors,
    get_assignor,
    member_order,
    show,
)
from coordinator.assignors.cooperative_sticky import CooperativeStickyAssignor
from coordinator.assignors.random import RandomAssignor
from coordinator.assignors.range import RangeAssignor
from coordinator.assignors.roundrobin import RoundRobinAssignor
from coordinator.assignors.sticky import AbstractStickyAssignor, StickyAssignor
from core.types import TopicPartition

__all__ = [
    "DEFAULT_GENERATION",
    "ENTRY_POINT_GROUP",
    "AbstractStickyAssignor",
    "Assignment",
    "Assignor",
    "CooperativeStickyAssignor",
    "RandomAssignor",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "TopicPartition",
    "UnknownAssignor",
    "available_assignors",
    "get_assignor",
    "member_order",
    "show",
]
