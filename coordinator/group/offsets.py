"""One group's committed offsets: in-flight commits, visibility, and Kafka's offset retention rules.

Pure bookkeeping with no opinion about group state: `offset_manager.py` decides *whether* a
commit is accepted and *which* expiry rule applies; this module keeps the records
straight.

A commit is staged when its write is issued and becomes visible to OffsetFetch only when the write
succeeds. Writes are ordered by their sequence number (the persist token), so a later successful
write replaces an earlier one even if their outcomes are reported out of order.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.group.messages import OffsetRecord
from core.types import TopicPartition


def metadata_length(metadata: str) -> int:
    """Length as Java's `String.length()` counts it (UTF-16 code units), which Kafka compares."""
    if metadata.isascii():
        return len(metadata)
    return len(metadata.encode("utf-16-le")) // 2


class GroupOffsets:
    """Committed offsets of one group plus the commits still being written."""

    __slots__ = ("committed", "_pending", "_written_seq")

    def __init__(self) -> None:
        self.committed: dict[TopicPartition, OffsetRecord] = {}
        self._pending: dict[TopicPartition, int] = {}  # tp -> number of writes in flight
        self._written_seq: dict[TopicPartition, int] = {}

    def __len__(self) -> int:
        return len(self.committed)

    def has_offsets(self) -> bool:
        """Kafka's `hasOffsets`: anything committed or in flight."""
        return bool(self.committed) or bool(self._pending)

    def is_pending(self, tp: TopicPartition) -> bool:
        return tp in self._pending

    def stage(self, records: Iterable[OffsetRecord]) -> None:
        pending = self._pending
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            pending[tp] = pending.get(tp, 0) + 1

    def complete(self, records: Iterable[OffsetRecord], seq: int, ok: bool) -> None:
        """A staged write finished; on success its records become the committed ones."""
        pending = self._pending
        for r in records:
            tp = TopicPartition(r.topic, r.partition)
            n = pending.get(tp, 0) - 1
            if n > 0:
                pending[tp] = n
            else:
                pending.pop(tp, None)
            if ok and seq > self._written_seq.get(tp, -1):
                self._written_seq[tp] = seq
                self.committed[tp] = r

    def load(self, records: Iterable[OffsetRecord]) -> None:
        for r in records:
            self.committed[TopicPartition(r.topic, r.partition)] = r

    def remove(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """Forget these partitions' committed offsets; returns those that existed."""
        removed = []
        for tp in tps:
            if self.committed.pop(tp, None) is not None:
                removed.append(tp)
                self._written_seq.pop(tp, None)
        return removed

    def expired(
        self,
        now_ms: int,
        retention_ms: int,
        *,
        since_ms: int | None = None,
        keep_topics: frozenset[str] = frozenset(),
    ) -> list[TopicPartition]:
        """Partitions whose offsets have expired; never one with a commit in flight.

        An offset with an explicit expire timestamp expires at it. Otherwise it expires when
        `retention_ms` has passed since `since_ms` (the time the group became Empty) or, when
        `since_ms` is None, since its own commit. Topics in `keep_topics` never expire.
        """
        out = []
        for tp, r in self.committed.items():
            if tp.topic in keep_topics or tp in self._pending:
                continue
            if r.expire_timestamp is not None:
                if now_ms >= r.expire_timestamp:
                    out.append(tp)
            elif now_ms - (r.commit_timestamp if since_ms is None else since_ms) >= retention_ms:
                out.append(tp)
        return out
