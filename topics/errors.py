"""Errors of the data plane a user (or a consumer) can act on; each message says what to do."""

from __future__ import annotations

from pathlib import Path

from core.errors import GroupshiftError, UnknownTopic
from core.types import TopicPartition

__all__ = [
    "CorruptSegment",
    "InvalidPartitions",
    "InvalidReplicationFactor",
    "InvalidTopic",
    "NoOffsetForPartition",
    "OffsetOutOfRange",
    "TopicAlreadyExists",
    "TopicNotOwned",
    "UnknownPartition",
    "UnknownTopic",
]


class InvalidTopic(GroupshiftError):
    """A topic name Kafka would refuse (`Topic.validate`)."""


class TopicAlreadyExists(GroupshiftError):
    """`create` of a topic that is already registered."""


class TopicNotOwned(GroupshiftError):
    """A topic's data directory was created for a registration in another ZooKeeper namespace."""


class InvalidPartitions(GroupshiftError):
    """A partition count that is not positive, or an attempt to reduce a topic's partitions."""


class InvalidReplicationFactor(GroupshiftError):
    """A replication factor below 1 or above the number of registered brokers."""


class UnknownPartition(GroupshiftError):
    """The topic exists but has no such partition."""

    def __init__(self, tp: TopicPartition, partitions: int):
        self.tp = tp
        self.partitions = partitions
        super().__init__(
            f"topic {tp.topic!r} has no partition {tp.partition} (it has {partitions}: 0..{partitions - 1}); "
            "grow the topic with `groupshift topics add-partitions` or pick an existing partition"
        )


class OffsetOutOfRange(GroupshiftError):
    """A fetch position outside `[earliest, latest]` — e.g. retention deleted the records at it."""

    def __init__(self, tp: TopicPartition, offset: int, earliest: int, latest: int):
        self.tp = tp
        self.offset = offset
        self.earliest = earliest
        self.latest = latest
        super().__init__(
            f"offset {offset} of {tp} is out of range [{earliest}, {latest}]; "
            "seek to the earliest or latest offset (or set auto_offset_reset)"
        )


class NoOffsetForPartition(GroupshiftError):
    """A partition has no position and `auto_offset_reset="none"` forbids choosing one."""

    def __init__(self, tp: TopicPartition, reason: str = "no position"):
        self.tp = tp
        super().__init__(
            f"{tp} has {reason} and auto_offset_reset is 'none'; seek() it explicitly "
            "or use auto_offset_reset='earliest' | 'latest'"
        )


class CorruptSegment(GroupshiftError):
    """A segment file cannot be read, or its contents contradict its name. Nothing is skipped."""

    def __init__(self, path: Path | str, reason: str):
        self.path = Path(path)
        self.reason = reason
        super().__init__(
            f"corrupt segment {self.path}: {reason}; move the file away (the records in it are lost) "
            "or restore it from a copy"
        )
