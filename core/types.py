"""Kafka's vocabulary shared by every package: topic partitions and committed offsets."""

from __future__ import annotations

from typing import NamedTuple


class TopicPartition(NamedTuple):
    """One partition of one topic, ordered by (topic, partition) as Kafka's tools print them."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class OffsetAndMetadata(NamedTuple):
    """A committed position: the *next* offset to read (Kafka's convention) and free-form metadata."""

    offset: int
    metadata: str = ""
