"""The pipelined fetcher (as Kafka's consumer `Fetcher`): background prefetch, a FIFO of completed
fetches, stale-fetch discard.

A consumer assigns partitions, positions them, and polls. `poll` hands out what earlier fetches
brought in and, before returning, asks the background thread for the next fetch, so reading
the log overlaps with the caller processing the batch it just got. Kafka's rules, each tested:

* completed fetches wait in a FIFO; `poll` returns at most `max_poll_records` records in all;
* a partition that still has buffered records (queued or next in line) is never fetched;
* a completed fetch is discarded when its partition was revoked (`assign` without it), paused
  or seeked since the fetch was issued — every such change gives the partition a new epoch,
  and a fetch carries the epoch it was issued under;
* a partition without a position takes one from `auto_offset_reset` (`"earliest"`, `"latest"`,
  or `"none"`: raise `NoOffsetForPartition`), and so does a fetch answered `OffsetOutOfRange`
  (e.g. retention deleted the records at the position; with `"none"` poll raises it).

    fetcher = Fetcher(Log(root), max_poll_records=10_000, auto_offset_reset="earliest")
    fetcher.assign({TopicPartition("clicks", 0), TopicPartition("clicks", 1)})
    fetcher.seek(TopicPartition("clicks", 0), committed_offset)
    while running:
        for tp, batch in fetcher.poll(timeout=1.0).items():     # pyarrow.RecordBatch per partition
            handle(tp, batch)                                     # columns offset, key, value, timestamp
        commit({tp: fetcher.position(tp) for tp in fetcher.assignment()})
    fetcher.close()

Like KafkaConsumer, one thread drives the fetcher (assign/seek/pause/poll/position); the only
other thread is its own background fetch thread. `records(batch)` turns a batch into
`ConsumerRecord`s for code that wants Python objects rather than Arrow columns.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal, NamedTuple, Protocol

import pyarrow as pa

from core.errors import GroupshiftError, UnknownTopic
from core.types import TopicPartition
from topics.arrow import epoch_millis
from topics.errors import NoOffsetForPartition, OffsetOutOfRange, UnknownPartition

log = logging.getLogger(__name__)

OffsetReset = Literal["earliest", "latest", "none"]


class LogReader(Protocol):
    """What the fetcher needs from a log (`topics.log.Log` provides it)."""

    def read(self, tp: TopicPartition, start: int, max_records: int) -> tuple[pa.RecordBatch, int]: ...

    def earliest(self, tp: TopicPartition) -> int: ...

    def latest(self, tp: TopicPartition) -> int: ...


class ConsumerRecord(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp: int  # epoch milliseconds, as Kafka's ConsumerRecord
    key: bytes | None
    value: bytes | None


def records(tp: TopicPartition, batch: pa.RecordBatch) -> list[ConsumerRecord]:
    """A polled batch as Python `ConsumerRecord`s (costs about a microsecond per record)."""
    ms = epoch_millis(batch.column("timestamp"))
    topic, partition = tp
    return [
        ConsumerRecord(topic, partition, o, t, k, v)
        for o, t, k, v in zip(
            batch.column("offset").to_pylist(),
            ms,
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            strict=True,
        )
    ]


@dataclass
class _PartitionState:
    epoch: int
    position: int | None = None
    paused: bool = False
    reset: OffsetReset | None = None  # a pending seek_to_beginning/end, resolved lazily


@dataclass
class _CompletedFetch:
    tp: TopicPartition
    fetch_offset: int  # advances as records are taken: the position the fetch is valid at
    epoch: int
    batches: deque[pa.RecordBatch] = field(default_factory=deque)
    error: GroupshiftError | None = None


class Fetcher:
    """Pipelined fetcher over a log. See the module docstring for the rules and an example."""

    def __init__(
        self,
        log: LogReader,
        *,
        max_poll_records: int = 500,
        max_partition_fetch_records: int = 50_000,
        fetch_max_wait: float = 0.05,
        auto_offset_reset: OffsetReset = "latest",
    ):
        if auto_offset_reset not in ("earliest", "latest", "none"):
            raise GroupshiftError(
                f"auto_offset_reset must be earliest, latest or none, not {auto_offset_reset!r}"
            )
        if max_poll_records <= 0:
            raise GroupshiftError("max_poll_records must be positive")
        self.log = log
        self.max_poll_records = max_poll_records
        self.max_partition_fetch_records = max_partition_fetch_records
        self.fetch_max_wait = fetch_max_wait
        self.auto_offset_reset: OffsetReset = auto_offset_reset
        self.stats = {"fetches": 0, "records_fetched": 0, "discarded_fetches": 0}
        self._cond = threading.Condition()
        self._epochs = itertools.count(1)
        self._state_version = 0  # bumped by every assign/seek/pause/resume; ends the worker's backoff
        self._assigned: dict[TopicPartition, _PartitionState] = {}
        self._completed: deque[_CompletedFetch] = deque()
        self._next_in_line: _CompletedFetch | None = None
        self._in_flight: set[TopicPartition] = set()
        self._requested = False
        self._wakeup = False
        self._closed = False
        self._worker: threading.Thread | None = None

    # -- subscription state -----------------------------------------------------------------

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Make `partitions` the assignment; kept partitions keep their positions, new ones have none."""
        partitions = set(partitions)
        with self._cond:
            for tp in set(self._assigned) - partitions:
                del self._assigned[tp]
                self._purge(tp)
            for tp in partitions - set(self._assigned):
                self._assigned[tp] = _PartitionState(next(self._epochs))
            self._changed()

    def assignment(self) -> set[TopicPartition]:
        with self._cond:
            return set(self._assigned)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        """Fetch `tp` from `offset` next; buffered or in-flight data for it is discarded."""
        if offset < 0:
            raise GroupshiftError(f"cannot seek {tp} to negative offset {offset}")
        with self._cond:
            state = self._state(tp)
            state.position, state.reset = offset, None
            self._new_epoch(tp, state)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the earliest offset (evaluated lazily, at the next poll or position())."""
        self._seek_to(partitions, "earliest")

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        """Move to the log end offset (evaluated lazily, at the next poll or position())."""
        self._seek_to(partitions, "latest")

    def _seek_to(self, partitions: Iterable[TopicPartition] | None, reset: OffsetReset) -> None:
        with self._cond:
            for tp in self._assigned if partitions is None else partitions:
                state = self._state(tp)
                state.position, state.reset = None, reset
                self._new_epoch(tp, state)

    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        """Stop returning and fetching records of `partitions`; their buffered data is discarded."""
        with self._cond:
            for tp in partitions:
                state = self._state(tp)
                state.paused = True
                self._new_epoch(tp, state)

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        with self._cond:
            for tp in partitions:
                self._state(tp).paused = False
            self._changed()

    def paused(self) -> set[TopicPartition]:
        with self._cond:
            return {tp for tp, s in self._assigned.items() if s.paused}

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` will return for `tp` (resolving a reset if needed)."""
        with self._cond:
            state = self._state(tp)
            if state.position is None:
                self._reset_position(tp, state)
            return state.position

    # -- poll -------------------------------------------------------------------------------

    def poll(self, timeout: float = 0.0) -> dict[TopicPartition, pa.RecordBatch]:
        """Records fetched since the last poll: one Arrow batch per partition, at most `max_poll_records`.

        Waits up to `timeout` seconds for data. Raises `NoOffsetForPartition` / `OffsetOutOfRange`
        under `auto_offset_reset="none"`, and `CorruptSegment` (naming the file) for a damaged log.
        """
        deadline = time.monotonic() + timeout
        self._start()
        with self._cond:
            while True:
                self._resolve_positions()
                drained = self._drain()
                if drained or self._wakeup:
                    self._wakeup = False
                    self._send_fetches()  # pipelining: the next fetch runs while the caller works
                    return drained
                self._send_fetches()
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._closed:
                    return {}
                self._cond.wait(remaining)

    def wakeup(self) -> None:
        """Make a blocked (or the next) `poll` return at once."""
        with self._cond:
            self._wakeup = True
            self._cond.notify_all()

    def close(self) -> None:
        """Stop the background fetch thread and drop buffered data."""
        with self._cond:
            self._closed = True
            self._completed.clear()
            self._next_in_line = None
            self._cond.notify_all()
        if self._worker is not None and self._worker is not threading.current_thread():
            self._worker.join(timeout=10)

    def __enter__(self) -> Fetcher:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals (called with self._cond held) ---------------------------------------------

    def _state(self, tp: TopicPartition) -> _PartitionState:
        try:
            return self._assigned[tp]
        except KeyError:
            raise GroupshiftError(f"{tp} is not assigned to this consumer; assign() it first") from None

    def _new_epoch(self, tp: TopicPartition, state: _PartitionState) -> None:
        state.epoch = next(self._epochs)
        self._purge(tp)
        self._changed()

    def _changed(self) -> None:
        self._state_version += 1
        self._cond.notify_all()

    def _purge(self, tp: TopicPartition) -> None:
        """Drop buffered fetches of `tp` (revoked, paused or seeked): they are stale."""
        before = len(self._completed)
        self._completed = deque(cf for cf in self._completed if cf.tp != tp)
        dropped = before - len(self._completed)
        if self._next_in_line is not None and self._next_in_line.tp == tp:
            self._next_in_line = None
            dropped += 1
        self.stats["discarded_fetches"] += dropped

    def _reset_position(self, tp: TopicPartition, state: _PartitionState) -> None:
        policy = state.reset or self.auto_offset_reset
        if policy == "none":
            raise NoOffsetForPartition(tp)
        state.position = self.log.earliest(tp) if policy == "earliest" else self.log.latest(tp)
        state.reset = None

    def _resolve_positions(self) -> None:
        for tp, state in self._assigned.items():
            if state.position is None and not state.paused:
                try:
                    self._reset_position(tp, state)
                except (UnknownTopic, UnknownPartition):
                    # Registered but not (yet) on disk: retriable, as UNKNOWN_TOPIC_OR_PARTITION is
                    # for Kafka's consumer. The partition stays unpositioned and is retried.
                    log.debug("%s does not exist in the log yet", tp)

    def _valid(self, cf: _CompletedFetch) -> bool:
        state = self._assigned.get(cf.tp)
        return (
            state is not None
            and not state.paused
            and state.epoch == cf.epoch
            and state.position == cf.fetch_offset
        )

    def _drain(self) -> dict[TopicPartition, pa.RecordBatch]:
        out: dict[TopicPartition, list[pa.RecordBatch]] = {}
        remaining = self.max_poll_records
        while remaining > 0:
            cf = self._next_in_line
            if cf is None or not cf.batches:
                self._next_in_line = None
                if not self._completed:
                    break
                cf = self._completed.popleft()
                if not self._valid(cf):
                    self.stats["discarded_fetches"] += 1
                    continue
                if cf.error is not None:
                    self._handle_error(cf)
                    continue
                self._next_in_line = cf
                continue
            if not self._valid(cf):  # seeked or paused while partly consumed
                self.stats["discarded_fetches"] += 1
                self._next_in_line = None
                continue
            batch = cf.batches[0]
            if batch.num_rows <= remaining:
                cf.batches.popleft()
            else:
                cf.batches[0] = batch.slice(remaining)
                batch = batch.slice(0, remaining)
            out.setdefault(cf.tp, []).append(batch)
            remaining -= batch.num_rows
            cf.fetch_offset += batch.num_rows
            self._assigned[cf.tp].position = cf.fetch_offset
        return {tp: bs[0] if len(bs) == 1 else pa.concat_batches(bs) for tp, bs in out.items()}

    def _handle_error(self, cf: _CompletedFetch) -> None:
        err = cf.error
        if isinstance(err, OffsetOutOfRange) and self.auto_offset_reset != "none":
            state = self._assigned[cf.tp]
            log.info(
                "%s: offset %d out of range, resetting to %s", cf.tp, cf.fetch_offset, self.auto_offset_reset
            )
            state.position = None
            self._reset_position(cf.tp, state)
            self._new_epoch(cf.tp, state)
            return
        raise err

    def _fetchable(self) -> list[TopicPartition]:
        buffered = {cf.tp for cf in self._completed}
        if self._next_in_line is not None and self._next_in_line.batches:
            buffered.add(self._next_in_line.tp)
        return [
            tp
            for tp, s in self._assigned.items()
            if not s.paused and s.position is not None and tp not in buffered and tp not in self._in_flight
        ]

    def _send_fetches(self) -> None:
        self._requested = True
        self._cond.notify_all()

    def _start(self) -> None:
        with self._cond:
            if self._worker is None and not self._closed:
                self._worker = threading.Thread(target=self._run, name="groupshift-fetcher", daemon=True)
                self._worker.start()

    # -- the background fetch thread ---------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and not (self._requested and self._fetchable()):
                    self._cond.wait()
                if self._closed:
                    return
                self._requested = False
                targets = {
                    tp: (self._assigned[tp].position, self._assigned[tp].epoch) for tp in self._fetchable()
                }
                self._in_flight.update(targets)
                version = self._state_version
            fetched = [self._fetch(tp, offset, epoch) for tp, (offset, epoch) in targets.items()]
            with self._cond:
                self._in_flight.difference_update(targets)
                got = [cf for cf in fetched if cf.batches or cf.error is not None]
                stale = [cf for cf in got if not self._valid(cf)]  # revoked/paused/seeked meanwhile
                self.stats["discarded_fetches"] += len(stale)
                self._completed.extend(cf for cf in got if self._valid(cf))
                self.stats["fetches"] += 1
                self._cond.notify_all()
                if not got:
                    # Nothing new at the log end: wait a little (Kafka's fetch.max.wait) unless the
                    # subscription changes, instead of spinning on empty reads.
                    self._cond.wait_for(
                        lambda v=version: self._closed or self._state_version != v, self.fetch_max_wait
                    )

    def _fetch(self, tp: TopicPartition, offset: int, epoch: int) -> _CompletedFetch:
        cf = _CompletedFetch(tp, offset, epoch)
        total = 0
        try:
            while total < self.max_partition_fetch_records:
                batch, offset = self.log.read(tp, offset, self.max_partition_fetch_records - total)
                if batch.num_rows == 0:
                    break
                cf.batches.append(batch)
                total += batch.num_rows
        except (UnknownTopic, UnknownPartition):
            pass  # retriable: nothing to return yet
        except GroupshiftError as exc:
            if not cf.batches:  # with records in hand, return them; the error recurs on the next fetch
                cf.error = exc
        except Exception as exc:  # never let the fetch thread die silently
            if not cf.batches:
                cf.error = GroupshiftError(f"fetching {tp} at offset {offset} failed: {exc!r}")
        with self._cond:
            self.stats["records_fetched"] += total
        return cf
