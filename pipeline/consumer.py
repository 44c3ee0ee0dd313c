"""`Consumer`: one KafkaConsumer-shaped API over either rebalancing scheme and the pipelined fetcher.

    consumer = Consumer("billing", ["clicks"], rebalancer="coordinator", zk="127.0.0.1:2181",
                        log_root="/data/groupshift", enable_auto_commit=False)
    while running:
        for tp, records in consumer.poll(timeout_ms=1000).items():
            for record in records:
                handle(record)
        consumer.commit()                     # positions of the assigned partitions, fenced
    consumer.close()

`rebalancer="zk"`, `"server"` or `"coordinator"` (or a `core.scheme.Rebalancer`) makes the consumer
a member of scheme one, two or three (`pipeline.backends` builds the member; a scheme-three consumer
joins through the bridge by itself while `migrate run --mode live` bridges the group). Nothing else
in the calling code changes.

The commit guarantee, under both schemes: `commit()` either commits every record `poll()`
returned since the previous `commit()` call, or raises `CommitFailed` and commits nothing; after a
`CommitFailed` those records are delivered again (by this consumer, which rewinds the partitions it
still holds to their last committed offsets, or by the partitions' new owners).

Where rebalances run differs, as it does between Kafka's consumer and Kafka 0.8's:

* schemes two and three (`"server"`, `"coordinator"`): as in Kafka, inside `poll()`, on the
  caller's thread. The heartbeat thread only notices that a rebalance started; the next `poll()` calls
  `on_partitions_revoked`, rejoins, and calls `on_partitions_assigned`. A `poll(timeout_ms)` whose
  timeout runs out before the group completed the rebalance returns anyway (the join stays in
  flight for the next poll), so one thread can poll several consumers of a group in turn. Between
  two polls the assignment cannot change, so the caller can always commit what it processed; a
  commit after the member was fenced raises `CommitFailed`.
* scheme one (`"zk"`): 0.8's member releases and claims partitions on its own thread, at its own
  pace. The consumer applies each change under its lock, and `commit()` holds that lock while it
  writes, so a release waits for a commit in flight. `commit()` raises `CommitFailed` when a
  partition that `poll()` returned since the previous commit was released (or released and claimed
  again) in between.

Either way a `poll()` never returns a record of a partition after that partition was revoked:
when partitions are revoked the consumer (auto-commit) commits their positions, calls the
listener's `on_partitions_revoked`, and stops fetching them; newly assigned partitions start at the
group's committed offset (or `auto_offset_reset`) after `on_partitions_assigned`. Lost partitions
(the member was fenced) are dropped without a commit. Listener callbacks may call `commit()`,
`position()` and `seek()`.

`assign(partitions)` is manual assignment: no group membership, but `commit()` and `committed()`
still use the group's offsets (a commit outside the group's generations, as Kafka's standalone
consumers do).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from core.errors import CommitFailed, GroupshiftError
from core.membership import NoopListener, call_listener
from core.scheme import Rebalancer
from core.types import OffsetAndMetadata, TopicPartition
from pipeline.backends import BACKENDS, connect_string, rebalancer_of
from pipeline.commits import AsyncCommits, Deliveries, describe
from pipeline.state import ConsumerState
from security import client_config
from security.client_config import ClientSecurity
from topics.fetcher import ConsumerRecord, Fetcher, records

log = logging.getLogger(__name__)

MAX_COORDINATOR_TIMEOUT_MS = 3_600_000  # an hour: beyond that, a consumer should rather fail
CommitCallback = Callable[[dict[TopicPartition, OffsetAndMetadata], BaseException | None], None]


class IllegalState(GroupshiftError):
    """The call does not fit the consumer's mode (subscribe vs assign, or closed)."""


class Consumer:
    """A KafkaConsumer-shaped consumer; see the module docstring."""

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str] = (),
        *,
        rebalancer: str | Rebalancer = "zk",
        incremental: bool = False,
        zk: Any = None,
        log: Any = None,
        log_root: str | Path | None = None,
        bootstrap: Sequence[str] | str | None = None,
        assignors: Sequence[str] | None = None,
        listener: object | None = None,
        group_instance_id: str | None = None,
        client_id: str | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        max_poll_records: int = 500,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = 5_000,
        auto_offset_reset: str = "latest",
        coordinator_timeout_ms: int = 30_000,
        membership_options: Mapping[str, Any] | None = None,
        fetcher_options: Mapping[str, Any] | None = None,
        security: ClientSecurity | str | Path | None = None,
    ):
        kind = rebalancer_of(rebalancer)
        if isinstance(coordinator_timeout_ms, bool) or not isinstance(coordinator_timeout_ms, int):
            raise GroupshiftError(
                f"coordinator_timeout_ms must be an integer, not {coordinator_timeout_ms!r}"
            )
        if not 0 < coordinator_timeout_ms <= MAX_COORDINATOR_TIMEOUT_MS:
            raise GroupshiftError(
                f"coordinator_timeout_ms must be between 1 and {MAX_COORDINATOR_TIMEOUT_MS}, "
                f"not {coordinator_timeout_ms}"
            )
        if incremental and kind is not Rebalancer.SERVER:
            raise GroupshiftError(
                "incremental=True is scheme two's incremental form: use it with rebalancer='server'"
            )
        self.group_id = group_id
        self.rebalancer = kind.value  # the spelling, as given (or the enum's)
        self._rebalancer = kind
        self.incremental = incremental
        self.client_id = client_id or f"{group_id}-consumer"
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval = auto_commit_interval_ms / 1000
        self._options = dict(
            assignors=list(assignors or ("range",)),
            assignors_given=assignors is not None,
            group_instance_id=group_instance_id,
            session_timeout_ms=session_timeout_ms,
            heartbeat_interval_ms=heartbeat_interval_ms,
            max_poll_interval_ms=max_poll_interval_ms,
            bootstrap=bootstrap,
            coordinator_timeout_ms=coordinator_timeout_ms,
            # TLS and SASL to the coordinator nodes (schemes two and three): a ClientSecurity, or
            # the path of a Kafka client properties file (docs/security.md)
            security=client_config.load(security) if isinstance(security, (str, Path)) else security,
        )
        self._membership_options = dict(membership_options or {})
        from core.zk import resolve_zk

        # Scheme one's members open their own ZooKeeper session (their ephemeral znodes are the
        # membership); the consumer's own client serves scheme three and manual-assignment offsets.
        self._zk_connect = resolve_zk(zk) if zk is None or isinstance(zk, str) else connect_string(zk)
        self._zk_given = None if zk is None or isinstance(zk, str) else zk
        self._zk_explicit = zk is not None  # else the default ZooKeeper, only if the scheme needs one
        self._zk_owned: Any = None
        if log is None:
            from topics.log import Log, default_root

            log = Log(log_root or default_root())
        self._log = log
        self._fetcher = Fetcher(
            log,
            max_poll_records=max_poll_records,
            auto_offset_reset=auto_offset_reset,
            **(fetcher_options or {}),
        )
        self._lock = threading.RLock()
        self._callback_pending = 0
        self._listener: object = NoopListener()
        self._membership: Any = None
        self._offsets_member: Any = None  # for manual assignment: commits outside a generation
        self._subscription: list[str] = []
        self._state = ConsumerState.IDLE
        self._next_auto_commit = time.monotonic() + self.auto_commit_interval
        self._async = AsyncCommits(group_id, self._commit, self._note_committed)
        self.generations: list[int] = []  # every generation this consumer was assigned under
        self._deliveries = Deliveries()  # the commit guarantee's bookkeeping (under self._lock)
        if topics:
            self.subscribe(topics, listener=listener)
        elif listener is not None:
            self._listener = listener

    # -- subscription ---------------------------------------------------------------------------

    def subscribe(self, topics: Sequence[str], listener: object | None = None) -> None:
        """Join the group for `topics` (group management); the assignment arrives in the background."""
        with self._lock:
            self._check_open()
            if self._manual:
                raise IllegalState("this consumer uses assign(); call unsubscribe() before subscribe()")
            if self._membership is not None:
                raise IllegalState(
                    "already subscribed; create a new Consumer to change topics (membership "
                    "backends take their subscription at start)"
                )
            if listener is not None:
                self._listener = listener
            self._subscription = list(topics)
            self._membership = self._make_membership(self._subscription, _Applier(self))
            self._enter(ConsumerState.SUBSCRIBED)
            self._membership.start()

    def subscription(self) -> list[str]:
        return list(self._subscription)

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Manual assignment: read exactly these partitions, no group membership."""
        partitions = set(partitions)
        with self._lock:
            self._check_open()
            if self._membership is not None:
                raise IllegalState(
                    "this consumer is subscribed; manual assign() needs a consumer without topics"
                )
            self._enter(ConsumerState.ASSIGNED)
            added = partitions - self._fetcher.assignment()
            self._fetcher.assign(partitions)
            self._deliveries.forget(self._deliveries.held() - partitions)
            self._deliveries.track_assigned(added)
            self._seek_to_committed(added)

    def unsubscribe(self) -> None:
        """Leave the group (or drop the manual assignment)."""
        with self._lock:
            member, self._membership = self._membership, None
            if not self._closed:
                self._enter(ConsumerState.IDLE)
            self._subscription = []
        if member is not None:
            member.close()
        with self._lock:
            self._fetcher.assign(())

    def assignment(self) -> set[TopicPartition]:
        return self._fetcher.assignment()

    @property
    def generation(self) -> int:
        """The group generation (scheme three) or rebalance epoch (scheme one) of the assignment."""
        return self._membership.generation if self._membership is not None else -1

    @property
    def membership(self) -> Any:
        return self._membership

    @property
    def rebalance_in_progress(self) -> bool:
        """The group has not settled this consumer's assignment yet: its first join, or a rebalance
        under way or due, is not finished (manual assignment: never). An empty assignment means
        "nothing to read" only once this is False."""
        member = self._membership
        return member is not None and bool(member.rebalance_in_progress)

    # -- poll -----------------------------------------------------------------------------------

    def poll(self, timeout_ms: int = 0) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records of the assigned partitions, at most `max_poll_records`, as `ConsumerRecord`s."""
        return {tp: records(tp, batch) for tp, batch in self.poll_batches(timeout_ms).items()}

    def poll_batches(self, timeout_ms: int = 0) -> dict[TopicPartition, pa.RecordBatch]:
        """Like `poll` but one Arrow batch (offset, key, value, timestamp) per partition."""
        self._check_open()
        deadline = time.monotonic() + timeout_ms / 1000
        member = self._membership
        driven = member is not None and hasattr(member, "poll")
        first = True
        while True:
            wait = min(max(deadline - time.monotonic(), 0.0), 0.02)
            if driven:
                # Scheme three: the poll timer, and any pending rebalance with its listener
                # callbacks, right here on the caller's thread (Kafka's poll loop). A consumer with
                # partitions to fetch does not wait for the group's answers (they are collected on
                # the next turn); one without gives the rebalance the slice. Raises the member's
                # fatal error, a listener's exception, or CoordinatorUnavailable.
                with self._lock:
                    fetchable = bool(self._fetcher.assignment() - self._fetcher.paused())
                busy = member.rebalance_in_progress
                member.poll(max(deadline - time.monotonic(), 0.0), join_timeout=0.0 if fetchable else wait)
                if busy and not fetchable:
                    wait = 0.0  # the slice went to the rebalance
            elif getattr(member, "fatal_error", None) is not None:
                raise member.fatal_error  # scheme one's member stopped: ZooKeeper refused it
            if first:
                first = False
                self._maybe_auto_commit()
            if self._callback_pending:
                time.sleep(0.001)  # let a rebalance callback take the lock first
            with self._lock:
                self._check_open()
                got = self._fetcher.poll(min(wait, max(deadline - time.monotonic(), 0.0)))
                self._deliveries.note_delivered(got)
            if got or time.monotonic() >= deadline:
                return got

    # -- offsets --------------------------------------------------------------------------------

    def position(self, tp: TopicPartition) -> int:
        """The offset of the next record `poll` returns for `tp`."""
        with self._lock:
            return self._fetcher.position(tp)

    def seek(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            self._fetcher.seek(tp, offset)

    def seek_to_beginning(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        with self._lock:
            self._fetcher.seek_to_beginning(partitions)

    def seek_to_end(self, partitions: Iterable[TopicPartition] | None = None) -> None:
        with self._lock:
            self._fetcher.seek_to_end(partitions)

    def pause(self, *partitions: TopicPartition) -> None:
        with self._lock:
            self._fetcher.pause(_flatten(partitions))

    def resume(self, *partitions: TopicPartition) -> None:
        with self._lock:
            self._fetcher.resume(_flatten(partitions))

    def paused(self) -> set[TopicPartition]:
        return self._fetcher.paused()

    def committed(self, partitions: TopicPartition | Iterable[TopicPartition]) -> Any:
        """The group's committed offset for one partition (int or None), or a dict for several."""
        single = isinstance(partitions, TopicPartition)
        tps = [partitions] if single else list(partitions)
        got = self._offsets().committed(tps)
        return got[tps[0]] if single else got

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None) -> None:
        """Commit `offsets` (default: the positions of every assigned partition) synchronously.

        Commits every record `poll()` returned since the previous `commit()` call, or raises
        `CommitFailed` and commits nothing: the group rebalanced (the member's generation is stale,
        or a partition those records came from was revoked in between). The records are then
        delivered again: partitions this consumer still holds are rewound to their last committed
        offsets, the others are read by their new owners. Any other error (a timeout, the
        coordinator or ZooKeeper away) leaves the outcome unknown; the partitions are rewound all
        the same, so the records are delivered again whether or not the commit took effect.
        """
        with self._lock:
            self._check_open()
            explicit = offsets is not None
            offsets = self._offsets_to_commit(offsets)
            delivered = self._deliveries.take_delivered(offsets if explicit else None)
            moved = self._moved_since_delivery(delivered)
            try:
                if moved:
                    raise CommitFailed(
                        f"commit refused: {describe(moved)} changed hands after poll() returned their "
                        "records (the group rebalanced); nothing was committed and the records will be "
                        "delivered again — keep polling and process what poll() returns"
                    )
                self._commit(offsets, self.generation)
            except Exception:  # refused, or its outcome unknown: deliver the records again
                self._deliveries.rewind(set(offsets) | set(delivered), self._fetcher)
                raise
            self._deliveries.note_committed(offsets)

    def commit_planned(
        self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int
    ) -> None:
        """Commit `offsets` as of `generation`, for a caller that reads the log itself (the Spark
        consumer plans its batches from `assignment()`, `generation` and `committed()`): raises
        `CommitFailed` when the group moved past `generation` (or, scheme one with
        `fence_commits`, the partitions changed hands meanwhile)."""
        with self._lock:
            self._check_open()
            self._commit(self._offsets_to_commit(offsets), generation)

    @property
    def log(self) -> Any:
        """The topics' log this consumer reads."""
        return self._log

    def commit_async(
        self,
        offsets: Mapping[TopicPartition, OffsetAndMetadata | int] | None = None,
        callback: CommitCallback | None = None,
    ) -> None:
        """Commit in the background, in call order; `callback(offsets, exception_or_None)` after."""
        with self._lock:
            self._check_open()
            explicit = offsets is not None
            offsets = self._offsets_to_commit(offsets)
            moved = self._moved_since_delivery(self._deliveries.take_delivered(offsets if explicit else None))
            generation = self.generation
            self._async.start()
        refused = None
        if moved:
            refused = CommitFailed(
                f"async commit refused: {describe(moved)} changed hands after poll() returned their records"
            )
        self._async.put(offsets, generation, callback, refused)

    def _offsets_to_commit(self, offsets) -> dict[TopicPartition, OffsetAndMetadata]:
        if offsets is None:
            offsets = {tp: self._fetcher.position(tp) for tp in self._fetcher.assignment()}
        return {
            tp: om if isinstance(om, OffsetAndMetadata) else OffsetAndMetadata(int(om))
            for tp, om in offsets.items()
        }

    def _commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata], generation: int) -> None:
        if not offsets:
            return
        # Under the lock: scheme one's member applies a release through this lock (_apply), so it
        # cannot give the partitions away while their offsets are being written.
        with self._lock:
            if self._manual or self._membership is None:
                self._offsets().commit(offsets, -1)
            else:
                self._membership.commit(self._for_backend(offsets), generation)

    def _note_committed(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> None:
        with self._lock:
            self._deliveries.note_committed(offsets)

    def _moved_since_delivery(self, delivered: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """Delivered partitions revoked (or revoked and assigned again) since poll() returned them."""
        if self._manual or self._membership is None:
            return []
        return self._deliveries.moved(delivered)

    def _for_backend(self, offsets: Mapping[TopicPartition, OffsetAndMetadata]) -> dict:
        # Scheme one stores a bare decimal offset per partition (Kafka 0.8 has no metadata).
        return (
            {tp: om.offset for tp, om in offsets.items()}
            if self._rebalancer is Rebalancer.ZK
            else dict(offsets)
        )

    def _maybe_auto_commit(self) -> None:
        if not self.enable_auto_commit or self._membership is None and not self._manual:
            return
        now = time.monotonic()
        if now >= self._next_auto_commit:
            self._next_auto_commit = now + self.auto_commit_interval
            self.commit_async()

    def _offsets(self) -> Any:
        """The membership, or an unstarted one used only for offsets (manual assignment)."""
        if self._membership is not None:
            return self._membership
        if self._offsets_member is None:
            self._offsets_member = self._make_membership(
                sorted({tp.topic for tp in self.assignment()}), None, offsets_only=True
            )
        return self._offsets_member

    def _seek_to_committed(self, partitions: set[TopicPartition]) -> None:
        """Position new partitions at the group's committed offsets (others: auto_offset_reset)."""
        if not partitions:
            return
        for tp, offset in self._offsets().committed(partitions).items():
            if offset is not None:
                self._fetcher.seek(tp, offset)
                self._deliveries.set_base(tp, offset)

    # -- rebalance callbacks (membership thread) ----------------------------------------------------

    def _apply(self, what: str, partitions: set[TopicPartition]) -> None:
        self._callback_pending += 1  # poll() steps aside; wakeup() ends a poll waiting for data
        self._fetcher.wakeup()
        with self._lock:
            self._callback_pending -= 1
            if what == "revoked":
                partitions &= self._fetcher.assignment()
                if self.enable_auto_commit and partitions:
                    self._commit_on_revoke(partitions)
                try:
                    call_listener(self._listener, "on_partitions_revoked", partitions)
                finally:  # a failing listener must not leave revoked partitions being fetched
                    self._fetcher.assign(self._fetcher.assignment() - partitions)
                    self._deliveries.forget(partitions)
            elif what == "lost":
                partitions &= self._fetcher.assignment()
                self._fetcher.assign(self._fetcher.assignment() - partitions)
                self._deliveries.forget(partitions)
                if hasattr(self._listener, "on_partitions_lost"):
                    call_listener(self._listener, "on_partitions_lost", partitions)
                else:  # Kafka's default onPartitionsLost calls onPartitionsRevoked
                    call_listener(self._listener, "on_partitions_revoked", partitions)
            else:
                current = self._fetcher.assignment()
                self._fetcher.assign(current | partitions)
                self._deliveries.track_assigned(partitions - current)
                self._seek_to_committed(partitions - current)
                self.generations.append(self.generation)
                call_listener(self._listener, "on_partitions_assigned", partitions)

    def _commit_on_revoke(self, partitions: set[TopicPartition]) -> None:
        offsets = {tp: OffsetAndMetadata(self._fetcher.position(tp)) for tp in partitions}
        try:
            self._membership.commit(self._for_backend(offsets), self._membership.generation)
        except (CommitFailed, GroupshiftError) as exc:
            log.warning("group %s: commit of revoked partitions failed: %s", self.group_id, exc)

    # -- close ------------------------------------------------------------------------------------

    def close(self, autocommit: bool = True) -> None:
        """Commit (auto-commit), revoke, leave the group and stop every thread."""
        with self._lock:
            if self._closed:
                return
            enable = self.enable_auto_commit
            self.enable_auto_commit = enable and autocommit
        try:
            self._async.stop(10)
            if self._membership is not None:
                self._membership.close()  # revokes through _apply: commits positions when auto-committing
            elif self._manual and autocommit and enable:
                try:
                    self.commit()
                except GroupshiftError as exc:
                    log.warning("group %s: commit on close failed: %s", self.group_id, exc)
            if self._offsets_member is not None:
                self._offsets_member.close()
        finally:
            with self._lock:
                self._enter(ConsumerState.CLOSED)
            self._fetcher.close()
            if self._zk_owned is not None:
                self._zk_owned.stop()
                self._zk_owned.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def _closed(self) -> bool:
        return self._state is ConsumerState.CLOSED

    @property
    def _manual(self) -> bool:
        """Manual assignment (`assign()`), not group management."""
        return self._state is ConsumerState.ASSIGNED

    def _enter(self, state: ConsumerState) -> None:
        self._state.check_transition_to(state)
        self._state = state

    def _check_open(self) -> None:
        if self._closed:
            raise IllegalState("the consumer is closed")

    # -- backends ---------------------------------------------------------------------------------

    @property
    def zk(self) -> Any:
        """The consumer's kazoo client (given, or connected on first use)."""
        if self._zk_given is not None:
            return self._zk_given
        if self._zk_owned is None:
            from core.zk import connect

            self._zk_owned = connect(self._zk_connect, session_timeout=10.0)
        return self._zk_owned

    def _release_zk(self) -> None:
        """Close the session `zk` opened (the next use opens another)."""
        owned, self._zk_owned = self._zk_owned, None
        if owned is not None:
            owned.stop()
            owned.close()

    def _make_membership(self, topics: list[str], listener: object | None, offsets_only: bool = False) -> Any:
        """The membership of this consumer's rebalancer (`pipeline.backends`)."""
        return BACKENDS[self._rebalancer](self, topics, listener, offsets_only)


class _Applier:
    """The listener the membership calls; applies each change to the consumer under its lock."""

    def __init__(self, consumer: Consumer):
        self._consumer = consumer

    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None:
        self._consumer._apply("revoked", set(partitions))

    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None:
        self._consumer._apply("assigned", set(partitions))

    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None:
        self._consumer._apply("lost", set(partitions))


def _flatten(partitions: Iterable[Any]) -> set[TopicPartition]:
    out: set[TopicPartition] = set()
    for p in partitions:
        if isinstance(p, TopicPartition):
            out.add(p)
        else:
            out.update(p)
    return out
