"""The `groupshift` source's stream reader: the group member that plans Spark's micro-batches.

PySpark runs a Python stream reader in a process of its own on the driver's host, one per query
run, and calls its offset methods there; it pickles a second instance (built in a planner
worker) to the executors, which only call `read`. So this reader:

* joins the group **lazily**, in the first `initialOffset`/`latestOffset` (never in
  `__init__`, which also runs in the planner worker), as a `pipeline.Consumer` whose partitions
  stay paused: it runs the group protocol of its rebalancer, Spark reads the records;
* plans each batch in `latestOffset`: the partitions the group gives it, each from the group's
  committed offset (never committed: `startingOffsets`) to the log end, at most the read limit
  in all, recorded with the generation in the offset (`pipeline.spark.offsets`) so that a replay
  reads the same records and a partition just given to it starts where the group says;
* `partitions(start, end)` splits the batch's ranges at segment boundaries; executors read each
  piece from the log (the log root is a path every process sees) and return Arrow batches;
* commits a batch's ends to the group fenced by the generation it was planned under — when the
  exactly-once writer asks (`pipeline.spark.commit_service`), else itself before planning the
  next batch (Spark's own `commit(end)` comes one batch late and never for the last one);
* keeps a join short: its first `latestOffset` waits for its first partitions (no empty first
  batch); it heartbeats once before it plans a batch (a rebalance that started meanwhile is joined
  now, not after the batch); and under schemes two and three, once the exactly-once writer ends
  its batches, a thread of its own runs the group's work as soon as the group asks — mid-batch
  too, as scheme one's member does from ZooKeeper's watches: the batch in flight is then committed
  only if the group is still at the generation it was planned under when it ends, else refused
  and read again by the partitions' owner (with another sink, between batches, after the commit);
* leaves the group in `stop()`. Spark ends the process with SIGTERM on `query.stop()` without
  calling `stop()`, so the reader turns SIGTERM into an exit that runs it.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, SupportsTriggerAvailableNow

from core.errors import CommitFailed
from core.types import TopicPartition
from pipeline.spark.commit_service import CommitService, Outcome, Settled
from pipeline.spark.offsets import StreamOffset, decode, encode
from pipeline.spark.options import EARLIEST, LATEST, SourceOptions
from pipeline.spark.planning import plan

log = logging.getLogger(__name__)

SETTLED_KEPT = 64  # outcomes remembered for the writer's repeated asks (a few batches suffice)
JOIN_WAIT_MS = 200  # how long one latestOffset lets a rebalance in flight proceed before answering
# ... and the first one, how long it waits for the member's first partitions: until then the query
# has nothing to plan, and a first batch planned the moment they arrive saves Spark a turn (an
# empty batch 0, or a whole trigger interval). Bounded: a group waiting out a member that does not
# rejoin (its session timeout), or a member left without partitions, answers later still.
FIRST_ASSIGNMENT_WAIT_S = 5.0
# One poll of those waits: the member's partitions stay paused, so a poll returns only when its
# timeout runs out, not when the rebalance completes; short slices plan soon after it does.
POLL_SLICE_MS = 20
# How long the rebalancing thread waits for the group to ask for work before it looks again
# whether the reader still runs (a close wakes it at once).
REBALANCE_WAKE_S = 1.0
LEAVE_S = 20.0  # how long the reader process may take to leave the group once Spark stops it


@dataclass
class Slice(InputPartition):
    """One piece of a batch, all an executor needs: `[start, end)` of a partition of a topic."""

    root: str
    topic: str
    partition: int
    start: int
    end: int


class GroupStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: SourceOptions):
        self.options = options
        self.id = uuid.uuid4().hex[:16]
        self._consumer: Any = None
        self._service: CommitService | None = None
        self._resets: dict[TopicPartition, int] = {}
        self._targets: dict[TopicPartition, int] | None = None
        self._settled: OrderedDict[tuple, Settled] = OrderedDict()
        self._lock = threading.Lock()
        # One thread drives the member at a time: Spark's (planning) or the rebalancing thread (the
        # group's work as soon as it is due); what the latter meets is raised to Spark's next call.
        self._group = threading.RLock()
        self._turns = _Turns()  # ... Spark's first: the rebalancing thread steps aside while it waits
        self._deferred: BaseException | None = None
        self._settled_once = False  # the group has settled this member's assignment at least once
        self._rebalancing_started = False  # the exactly-once writer asked for a commit: see _rebalancing
        self._state: dict = {}  # what reportLatestOffset tells Spark's progress

    def __getstate__(self) -> dict:
        # Executors get a pickled copy: only what `read` needs (nothing) and the options.
        return {"options": self.options, "id": self.id}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])
        self.id = state["id"]

    # -- the member ----------------------------------------------------------------------------

    def _member(self) -> Any:
        if self._consumer is None:
            from pipeline.consumer import Consumer

            o = self.options
            consumer = Consumer(o.group, list(o.topics), listener=_Pauser(self), **o.consumer_options())
            try:
                self._service = CommitService(self._settle_for_writer, self._planned_by_me)
            except BaseException:
                consumer.close(autocommit=False)
                raise
            self._consumer = consumer
            consumer.pause(*consumer.assignment())  # what it got before the listener could see it
            _leave_on_sigterm()
            consumer.poll(0)  # the join goes out now, while Spark prepares its first offset call
            log.info("group %s: stream reader %s joining (%s)", o.group, self.id, o.rebalancer.value)
        return self._consumer

    def _settle_for_writer(self, offset: StreamOffset) -> Settled:
        """`_settle`, asked by the exactly-once writer (the commit service). The first ask shows that
        the writer ends this query's batches, so a batch in flight can be given up: once this one is
        settled, the rebalancing thread starts (`_rebalancing`)."""
        settled = self._settle(offset)
        with self._lock:
            consumer, start = self._consumer, not self._rebalancing_started
            self._rebalancing_started = True
        if start and consumer is not None:
            self._start_rebalancing(consumer)
        return settled

    def _start_rebalancing(self, consumer: Any) -> None:
        """Schemes two and three: a thread that runs the group's work as soon as the group asks for it
        (see `_rebalancing`). Scheme one's member has no need: it rebalances from ZooKeeper's watches."""
        due = getattr(consumer.membership, "wait_rebalance_due", None)
        if due is None:
            return
        name = f"groupshift-rebalance-{self.options.group}"
        threading.Thread(target=self._rebalancing, args=(consumer, due), name=name, daemon=True).start()

    def _rebalancing(self, consumer: Any, due: Any) -> None:
        """Run a rebalance the member hears of (a heartbeat's answer) at once, between Spark's calls
        or during a batch: rejoin, give up revoked partitions, take new ones. Otherwise the group —
        a joiner included — would wait for the batch in flight to end, since Spark calls the member
        only between batches. The batch in flight stays fenced by its generation: its commit is
        refused if the group moved on before it ended, and its records go to the partitions' owner.
        Only once the exactly-once writer ends the query's batches (`_settle_for_writer`): with
        another sink a refused batch would be delivered twice, so the member keeps giving partitions
        up between batches, after the batch's commit (`_plan`). Ends when the reader stops, or at an
        error, which Spark's next call raises."""
        while self._consumer is consumer:
            if not due(REBALANCE_WAKE_S) or not self._turns.wait_for_none(REBALANCE_WAKE_S):
                continue
            with self._group:
                if self._consumer is not consumer:
                    return
                try:
                    consumer.poll(POLL_SLICE_MS)
                except Exception as exc:  # noqa: BLE001 - Spark's thread raises it at its next call
                    self._deferred = exc
                    return

    def _planned_by_me(self, offset: StreamOffset) -> bool:
        return offset.member == self.id

    def _settle(self, offset: StreamOffset) -> Settled:
        """Commit a batch this reader planned, once; the outcome is remembered for repeated asks."""
        if offset.member != self.id:
            return Settled(Outcome.NOT_PLANNER)
        if not offset.ranges:
            return Settled(Outcome.COMMITTED)
        key = (offset.generation, tuple(sorted(offset.ranges.items())))
        with self._lock:
            if key in self._settled:
                return self._settled[key]
            try:
                self._consumer.commit_planned(offset.ends(), offset.generation)
                settled = Settled(Outcome.COMMITTED)
            except CommitFailed as exc:
                log.info("group %s: batch not committed, the group moved on: %s", self.options.group, exc)
                if exc.partitions is not None and exc.partitions < set(offset.ranges):
                    settled = Settled(Outcome.COMMITTED, exc.partitions)  # the others were written
                else:
                    settled = Settled(Outcome.FENCED)
            # any other error propagates: unknown, asked again later
            self._settled[key] = settled
            while len(self._settled) > SETTLED_KEPT:
                self._settled.popitem(last=False)
            return settled

    # -- Spark's calls (in the reader process) --------------------------------------------------

    def initialOffset(self) -> dict:
        self._member()
        return encode(StreamOffset())

    def getDefaultReadLimit(self):
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Trigger.AvailableNow: read what the partitions hold now, then end. The member first
        waits for the group to settle its assignment (joining, or a rebalance under way), at most
        two session timeouts; a partition given to it later is read up to its end at that time."""
        with self._turns.spark(), self._group:
            consumer = self._member()
            self._wait_for_assignment(consumer, 2 * self.options.session_timeout_ms / 1000)
            log_ = consumer.log
            self._targets = {tp: log_.latest(tp) for tp in consumer.assignment()}

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict | None:
        with self._turns.spark(), self._group:
            return self._plan(start, limit)

    def _plan(self, start: dict | None, limit: Any, beat: bool = True) -> dict | None:
        consumer = self._member()
        self._settle_finished(decode(start))  # the batch before ran to its end (Spark plans after it)
        if self._settled_once:
            self._wait_for_assignment(consumer, JOIN_WAIT_MS / 1000)
        else:  # partitions may still be on their way (scheme two's incremental form frees them later)
            self._wait_for_assignment(consumer, FIRST_ASSIGNMENT_WAIT_S, until_owned=True)
        owned = sorted(consumer.assignment())
        generation = consumer.generation
        self._settled_once = self._settled_once or not consumer.rebalance_in_progress
        if not owned or consumer.rebalance_in_progress:
            self._state = _state(owned, generation, None, settled=False)
            return start
        committed = consumer.committed(owned)
        log_ = consumer.log
        ends = {tp: log_.latest(tp) for tp in owned}
        earliest = {tp: log_.earliest(tp) for tp in owned}
        resets = self._starts(owned, committed, ends, earliest)
        if self._targets is not None:
            for tp in owned:
                self._targets.setdefault(tp, ends[tp])
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        if budget is None and self.options.max_offsets_per_trigger:
            budget = self.options.max_offsets_per_trigger
        p = plan(
            owned,
            committed,
            ends=ends,
            earliest=earliest,
            resets=resets,
            budget=budget,
            targets=self._targets,
            fail_on_data_loss=self.options.fail_on_data_loss,
        )
        self._state = _state(owned, generation, p.lag, settled=True)
        for tp, (lost_from, lost_to) in p.skipped.items():
            log.warning(
                "%s: offsets %d..%d were removed unread (failOnDataLoss=false)", tp, lost_from, lost_to
            )
        if not p.ranges:
            return start
        if beat and self._rebalance_started(consumer):
            return self._plan(start, limit, beat=False)  # rejoin first, then plan on what it gives
        assert self._service is not None
        offset = StreamOffset(
            member=self.id,
            generation=generation,
            address=self._service.address,
            secret=self._service.secret,
            ranges=p.ranges,
        )
        return encode(offset)

    def _rebalance_started(self, consumer: Any) -> bool:
        """One heartbeat before a batch that no rebalance can interrupt: has one started since the
        member's last heartbeat? (Scheme one's member hears of it at once, from ZooKeeper's watches.)"""
        beat = getattr(consumer.membership, "heartbeat_now", None)
        if beat is None:
            return False
        beat()
        return consumer.rebalance_in_progress

    def reportLatestOffset(self) -> dict | None:
        """Not an offset: the member's state, shown in Spark's progress (`sources[].latestOffset`)."""
        return {"member_state": self._state} if self._state else None

    def _wait_for_assignment(self, consumer: Any, wait_s: float, until_owned: bool = False) -> None:
        """Run the group's pending work (rebalances, listener callbacks) on this thread; while a
        rebalance is under way (joining included) — `until_owned`: or the member owns nothing —
        keep driving it, for at most `wait_s` seconds."""
        deadline = time.monotonic() + wait_s
        with self._group:
            deferred, self._deferred = self._deferred, None
        if deferred is not None:
            raise deferred
        consumer.poll(0)
        while (consumer.rebalance_in_progress or until_owned and not consumer.assignment()) and (
            left := deadline - time.monotonic()
        ) > 0:
            consumer.poll(min(POLL_SLICE_MS, max(int(left * 1000), 1)))

    def _starts(self, owned, committed, ends, earliest) -> dict[TopicPartition, int]:
        """Where partitions the group never committed start (`startingOffsets`), fixed the first time
        this reader sees each, so that `latest` means the end when the stream got the partition."""
        held = set(owned)
        for tp in list(self._resets):
            if tp not in held or committed.get(tp) is not None:
                del self._resets[tp]
        for tp in owned:
            if committed.get(tp) is None and tp not in self._resets:
                o = self.options
                wanted = o.starting_offsets.get(tp, LATEST if o.starting == "latest" else EARLIEST)
                if o.starting == "json" and tp not in o.starting_offsets:
                    wanted = EARLIEST
                self._resets[tp] = {EARLIEST: earliest[tp], LATEST: ends[tp]}.get(wanted, wanted)
        return self._resets

    def partitions(self, start: dict, end: dict) -> list[Slice]:
        from pipeline.spark.segments import split_at_segments

        offset = decode(end)
        if offset.member != self.id:
            # A batch Spark replays after a restart, planned by a reader that is gone: the writer
            # skips it, and its records are planned again from the group's offsets. Read nothing.
            return []
        root = str(Path(self._member().log.root).resolve())  # a path every Spark process sees
        slices = []
        for tp, (s, e) in sorted(offset.ranges.items()):
            for a, b in split_at_segments(Path(root) / tp.topic, tp.partition, s, e):
                slices.append(Slice(root, tp.topic, tp.partition, a, b))
        return slices

    def commit(self, end: dict) -> None:
        self._settle_finished(decode(end))

    def _settle_finished(self, offset: StreamOffset) -> None:
        """Commit a finished batch this reader planned, unless the writer had it committed already
        (`_settle` remembers); a failure is logged, and the commit asked again next time."""
        if offset.member != self.id or not offset.ranges or self._consumer is None:
            return
        try:
            self._settle(offset)
        except Exception as exc:  # noqa: BLE001 - asked again before the next batch
            log.warning("group %s: could not commit the last batch yet: %s", self.options.group, exc)

    def stop(self) -> None:
        if self._service is not None:
            self._service.close()
            self._service = None
        # Not while the rebalancing thread drives the member — unless that takes LEAVE_S / 2.
        with self._turns.spark():
            held = self._group.acquire(timeout=LEAVE_S / 2)
            try:
                consumer, self._consumer = self._consumer, None
            finally:
                if held:
                    self._group.release()
        if consumer is not None:
            log.info("group %s: stream reader %s leaving", self.options.group, self.id)
            consumer.close(autocommit=False)

    # -- executors ------------------------------------------------------------------------------

    def read(self, partition: Slice) -> Iterator[Any]:
        from pipeline.spark.segments import read_slice

        if not isinstance(partition, Slice):  # Spark's placeholder for a batch with no pieces
            return

        yield from read_slice(
            partition.root, partition.topic, partition.partition, partition.start, partition.end
        )


def _state(owned, generation: int, lag: int | None, settled: bool) -> dict:
    return {
        "assignment": [[tp.topic, tp.partition] for tp in sorted(owned)],
        "generation": generation,
        "lag": lag,
        "settled": settled,
    }


class _Turns:
    """Who drives the member next: Spark's calls before the rebalancing thread, which waits while one
    is waiting for the member or holds it (a lock alone would let that thread, which takes it again
    right after each poll slice, keep Spark's calls out for a whole rebalance)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._spark = 0  # Spark's calls waiting for the member or holding it

    @contextmanager
    def spark(self) -> Iterator[None]:
        with self._cv:
            self._spark += 1
        try:
            yield
        finally:
            with self._cv:
                self._spark -= 1
                self._cv.notify_all()

    def wait_for_none(self, timeout: float) -> bool:
        """Block until no call of Spark's wants the member, at most `timeout` seconds."""
        with self._cv:
            return self._cv.wait_for(lambda: self._spark == 0, timeout)


class _Pauser:
    """The member's listener: assigned partitions stay paused (Spark reads them, not the fetcher)."""

    def __init__(self, reader: GroupStreamReader):
        self.reader = reader

    def on_partitions_assigned(self, partitions):
        consumer = self.reader._consumer
        if consumer is not None:
            consumer.pause(*partitions)

    def on_partitions_revoked(self, partitions):
        pass

    def on_partitions_lost(self, partitions):
        pass


def _leave_on_sigterm() -> None:
    """Spark stops a query by sending SIGTERM to this process (more than once): the first one exits
    through Python, so that the runner's `finally: reader.stop()` leaves the group instead of
    waiting out the session; later ones are ignored while it leaves, for at most LEAVE_S."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", "") or getattr(main, "__file__", "") or ""
    if "streaming_source_runner" not in name or threading.current_thread() is not threading.main_thread():
        return

    def leave(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        watchdog = threading.Timer(LEAVE_S, os._exit, args=(1,))
        watchdog.daemon = True
        watchdog.start()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, leave)
    log.debug("pid %d: SIGTERM leaves the group", os.getpid())
