"""What a `pipeline.Consumer`'s commits need besides its membership.

* `Deliveries` — the commit guarantee's bookkeeping: `commit()` either commits every record
  `poll()` returned since the previous `commit()`, or raises `CommitFailed` and commits nothing;
  after that the records are delivered again. To know, the consumer numbers each assignment of a
  partition (a partition revoked and assigned again gets a new number), remembers the number a
  partition had when `poll()` returned its records, and the offset to rewind it to (its last
  committed offset, or the first one delivered when nothing was committed). Not thread-safe: the
  consumer calls it with its lock held.
* `AsyncCommits` — `commit_async()`'s thread: the commits in call order, then each one's callback.

    deliveries.track_assigned({tp})             # the consumer was assigned tp
    deliveries.note_delivered(batches)          # poll() returned these
    moved = deliveries.moved(deliveries.take_delivered(None))  # changed hands since: refuse
    deliveries.rewind(partitions, fetcher)      # deliver the uncommitted records again
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import pyarrow as pa

from core.errors import GroupshiftError
from core.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger("pipeline.consumer")  # the consumer's own logger, as before the split


class Deliveries:
    """Per partition: which assignment it is, whether it was delivered since the last commit, and
    where to rewind it."""

    def __init__(self) -> None:
        self._assigned_seq: dict[TopicPartition, int] = {}  # which assignment of a partition this is
        self._next_seq = 0
        self._delivered: dict[TopicPartition, int] = {}  # returned since the last commit(): tp -> seq
        self._base: dict[TopicPartition, int] = {}  # last committed (or first delivered) offset

    def held(self) -> set[TopicPartition]:
        """The partitions assigned (and not forgotten since)."""
        return set(self._assigned_seq)

    def track_assigned(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._next_seq += 1
            self._assigned_seq[tp] = self._next_seq
            self._base.pop(tp, None)

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._assigned_seq.pop(tp, None)
            self._base.pop(tp, None)

    def set_base(self, tp: TopicPartition, offset: int) -> None:
        """`tp` was positioned at its committed `offset`: rewind there."""
        self._base[tp] = offset

    def note_delivered(self, got: Mapping[TopicPartition, pa.RecordBatch]) -> None:
        for tp, batch in got.items():
            self._delivered[tp] = self._assigned_seq.get(tp, 0)
            if tp not in self._base and batch.num_rows:
                self._base[tp] = batch.column("offset")[0].as_py()  # nothing committed: rewind here

    def note_committed(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        for tp, om in offsets.items():
            if tp in self._assigned_seq:
                self._base[tp] = om.offset

    def take_delivered(self, only: Mapping[TopicPartition, Any] | None) -> dict[TopicPartition, int]:
        """The partitions delivered since the last commit (those in `only`), now being committed."""
        if only is None:
            taken, self._delivered = self._delivered, {}
            return taken
        return {tp: self._delivered.pop(tp) for tp in list(self._delivered) if tp in only}

    def moved(self, delivered: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """Delivered partitions revoked (or revoked and assigned again) since poll() returned them."""
        return sorted(tp for tp, seq in delivered.items() if self._assigned_seq.get(tp) != seq)

    def rewind(self, partitions: Iterable[TopicPartition], fetcher: Any) -> None:
        """After CommitFailed: deliver the uncommitted records of partitions still held again."""
        for tp in partitions:
            base = self._base.get(tp)
            if base is not None and tp in self._assigned_seq and tp in fetcher.assignment():
                if fetcher.position(tp) != base:
                    fetcher.seek(tp, base)


class AsyncCommits:
    """`commit_async()`'s thread, started on first use: commits in call order, then each callback."""

    def __init__(
        self,
        group_id: str,
        commit: Callable[[Mapping[TopicPartition, OffsetAndMetadata], int], None],
        committed: Callable[[Mapping[TopicPartition, OffsetAndMetadata]], None],
    ):
        self.group_id = group_id
        self._commit, self._committed = commit, committed
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread unless it runs (the consumer calls this under its lock)."""
        if self._queue is None:
            self._queue = queue.Queue()
            self._thread = threading.Thread(target=self._loop, name=f"commit-{self.group_id}", daemon=True)
            self._thread.start()

    def put(
        self, offsets: dict, generation: int, callback: Callable | None, refused: BaseException | None
    ) -> None:
        """Queue one commit (`refused`: not to be made; its callback gets this error)."""
        assert self._queue is not None
        self._queue.put((offsets, generation, callback, refused))

    def stop(self, timeout: float = 10.0) -> None:
        """Let the queued commits finish (within `timeout`) and end the thread."""
        if self._queue is not None:
            self._queue.put(None)
            if self._thread is not None:
                self._thread.join(timeout)

    def _loop(self) -> None:
        assert self._queue is not None
        while True:
            item = self._queue.get()
            if item is None:
                return
            offsets, generation, callback, exc = item
            try:
                if exc is None:
                    self._commit(offsets, generation)
                    self._committed(offsets)
            except GroupshiftError as e:
                exc = e
                log.info("group %s: async commit failed: %s", self.group_id, e)
            if callback is not None:
                try:
                    callback(offsets, exc)
                except Exception:
                    log.exception("commit callback failed")


def describe(partitions: Sequence[TopicPartition], limit: int = 5) -> str:
    """The first `limit` partitions by name, and how many more (for CommitFailed's message)."""
    shown = ", ".join(map(str, partitions[:limit]))
    return shown + (f" and {len(partitions) - limit} more" if len(partitions) > limit else "")
