"""`ZkGroupMember`: one Kafka 0.8 high-level consumer's group membership, faithful and instrumented.

A recipe in kazoo's style: it registers `/consumers/<g>/ids/<consumerId>`, watches the group
and its topics, and on every change runs 0.8.2's `syncedRebalance` (release everything, read
the whole group from ZooKeeper, compute the assignment locally, claim it all-or-nothing with
ephemeral owner znodes, retry with backoff). Every step is written to a JSONL event log.
The behaviour is Kafka 0.8.2's `ZookeeperConsumerConnector` (docs/zk_rebalance.md, What is faithful);
the opt-in fixes are in docs/zk_rebalance.md, Opt-in fixes.

    member = ZkGroupMember("127.0.0.1:2181", "grp", ["clicks"], event_log="m1.jsonl")
    member.start()                       # non-blocking: rebalances run on a background thread
    member.wait_for_stable(10)
    member.assignment()                  # {TopicPartition("clicks", 0), ...}
    member.commit({TopicPartition("clicks", 0): 42})
    member.close()

Threads, as in 0.8 with zkclient: a ZooKeeper event thread (watch re-arming, session events —
`handleNewSession` runs its rebalance right there), the `<id>_watcher_executor` thread (event
coalescing, one `syncedRebalance` per batch of events) and an auto-commit thread. ZooKeeper
calls block and retry until connected (zkclient's `retryUntilConnected`), without time limit.
A request ZooKeeper refuses (`NoAuth` under a znode's ACL, or `AuthFailed`) is not retried: a
member whose own threads meet one stops for good (`ZkMemberState.REFUSED`, `fatal_error`), and
`commit()`, `committed()` and `wait_for_stable()` raise that `ZooKeeperNoAuth`.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Iterable

from kazoo.exceptions import (
    NodeExistsError,
    NoNodeError,
)

import zk_rebalance.fencing as fencing
from core.errors import CommitFailed
from core.membership import RebalanceListener
from core.types import TopicPartition
from core.zk import ZooKeeperNoAuth, connect
from zk_rebalance.assignors import partition_assignor
from zk_rebalance.events import EventLog
from zk_rebalance.layout import (
    BROKER_TOPICS,
    Blacklist,
    TopicCount,
    Whitelist,
    consumer_id_string,
    encode_registration,
    ids_dir,
    offset_path,
    topic_path,
    validate_group_id,
)
from zk_rebalance.rebalance import RebalanceMixin
from zk_rebalance.state import (
    ENTERED_FROM,
    ConsumerRebalanceFailed,
    ZkMemberState,
    _PartitionInfo,
)
from zk_rebalance.watches import WatchesMixin
from zk_rebalance.zkclient import Closing, ZkCalls

log = logging.getLogger(__name__)

__all__ = ["ConsumerRebalanceFailed", "ZkMemberState", "RebalanceListener", "ZkGroupMember"]


class ZkGroupMember(WatchesMixin, RebalanceMixin):
    """A Kafka 0.8 ZooKeeper-coordinated group member (`ZookeeperConsumerConnector` membership).

    Faithful by default; the flags `fence_commits`, `stop_fetch_on_disconnect`,
    `read_offsets_after_claim` and `sync_before_read` switch on the opt-in fixes (docs/zk_rebalance.md).
    `require_brokers=True` makes a rebalance that finds no `/brokers/ids` own nothing and watch
    for brokers, as 0.8 does; groupshift's data plane has no brokers, so by default it proceeds.
    """

    def __init__(
        self,
        zk_connect: str,
        group_id: str,
        topics: list[str] | dict[str, int] | Whitelist | Blacklist,
        *,
        consumer_id: str | None = None,
        num_streams: int = 1,
        assignor: str = "range",
        session_timeout_ms: int = 6000,
        connection_timeout_ms: int | None = None,
        rebalance_max_retries: int = 4,
        rebalance_backoff_ms: int = 2000,
        auto_commit: bool = True,
        auto_commit_interval_ms: int = 60000,
        exclude_internal_topics: bool = True,
        require_brokers: bool = False,
        listener: RebalanceListener | None = None,
        event_log: str | None = None,
        fence_commits: bool = False,
        stop_fetch_on_disconnect: bool = False,
        read_offsets_after_claim: bool = False,
        sync_before_read: bool = False,
    ):
        self.group = validate_group_id(group_id)
        if isinstance(topics, (Whitelist, Blacklist)):
            self.subscription = TopicCount.wildcard(topics, num_streams)
        elif isinstance(topics, dict):
            self.subscription = TopicCount.static(topics)
        else:
            self.subscription = TopicCount.static({t: num_streams for t in topics})
        self.zk_connect = zk_connect
        self.consumer_id = consumer_id_string(self.group, consumer_id)
        self.assignor_name = assignor
        self.assignor = partition_assignor(assignor)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms or session_timeout_ms
        self.rebalance_max_retries = rebalance_max_retries
        self.rebalance_backoff_ms = rebalance_backoff_ms
        self.auto_commit = auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.exclude_internal_topics = exclude_internal_topics
        self.require_brokers = require_brokers
        self.listener = listener
        self.fence_commits = fence_commits
        self.stop_fetch_on_disconnect = stop_fetch_on_disconnect
        self.read_offsets_after_claim = read_offsets_after_claim
        self.sync_before_read = sync_before_read
        self.events = EventLog(event_log, member=self.consumer_id)
        self.state = ZkMemberState.NEW

        self.zk = None
        self._lock = threading.RLock()  # registry, fetching, checkpoints
        self._rebalance_lock = threading.RLock()  # syncedRebalance and shutdown, as 0.8's rebalanceLock
        self._cond = threading.Condition()
        self._triggered = False
        self._zk_events: queue.Queue = queue.Queue()
        self._registry: dict[TopicPartition, _PartitionInfo] = {}
        self._checkpointed: dict[TopicPartition, int] = {}
        self._fetching: dict[TopicPartition, int] = {}
        self._generation = 0
        self._rounds = 0
        self._shutting_down = False
        self._closing = threading.Event()
        self._session_id: int | None = None
        self._read_marker: object | None = None  # set from a new session's re-arming to its marker
        self._suspended_at: float | None = None
        self._lease_timer: threading.Timer | None = None
        self._last_children: dict[str, list[str]] = {}
        self._last_mzxid: dict[str, int] = {}
        self._child_paths: set[str] = set()
        self._data_paths: set[str] = set()
        self._wildcard_topics: list[str] = []
        self._last_error: Exception | None = None
        self.fatal_error: ZooKeeperNoAuth | None = None  # what stopped the member for good
        self._stable = threading.Event()
        self._zkc: ZkCalls | None = None
        self._threads: list[threading.Thread] = []
        self._busy = False
        self._trigger_reason = ""

    # -- public API ----------------------------------------------------------------------------
    def start(self) -> ZkGroupMember:
        """Connect (raises `ZooKeeperUnavailable`), then register and rebalance in the background."""
        self._transition(ZkMemberState.STARTING)
        self.zk = connect(
            self.zk_connect,
            session_timeout=self.session_timeout_ms / 1000,
            connect_timeout=self.connection_timeout_ms / 1000,
        )
        self._session_id = self.zk.client_id[0] if self.zk.client_id else None
        self._zkc = ZkCalls(self.zk, self.events, self._closing)
        self.zk.add_listener(self._on_state)
        self.events.emit(
            "start",
            session=self._session_id,
            subscription=self.subscription.streams,
            pattern=self.subscription.pattern,
            assignor=self.assignor.name,
            flags=self._flags(),
        )
        for name, target in (
            ("zk_event_thread", self._event_loop),
            ("watcher_executor", self._executor_loop),
            ("autocommit", self._autocommit_loop),
        ):
            t = threading.Thread(target=target, name=f"{self.consumer_id}_{name}", daemon=True)
            self._threads.append(t)
            t.start()
        return self

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member is fetching now (empty while a rebalance has stopped them)."""
        with self._lock:
            return set(self._fetching)

    def positions(self) -> dict[TopicPartition, int | None]:
        """Where fetching starts or continues: the consumed offset per owned partition (None: no commit)."""
        with self._lock:
            return {
                tp: (i.consumed if i.consumed >= 0 else None)
                for tp, i in self._registry.items()
                if tp in self._fetching
            }

    @property
    def generation(self) -> int:
        """The rebalance epoch: the number of successful `syncedRebalance` runs of this member."""
        return self._generation

    @property
    def last_error(self) -> Exception | None:
        """The `ConsumerRebalanceFailed` of the last rebalance, or None if it succeeded."""
        return self._last_error

    def mark_consumed(self, offsets: dict[TopicPartition, int]) -> None:
        """Record the next offsets to read (what the stream iterator does in 0.8); auto-commit writes them."""
        with self._lock:
            for tp, off in offsets.items():
                if tp in self._registry:
                    self._registry[tp].consumed = int(off)

    def commit(self, offsets: dict[TopicPartition, int] | None = None, generation: int | None = None) -> None:
        """Write offsets (Kafka's: the next offset to read) to `/consumers/<g>/offsets/<t>/<p>`.

        Faithful: unconditional writes of owned partitions whose offset changed; partitions not
        in the local registry are skipped (0.8 commits only its registry). With
        `fence_commits`, a stale `generation`, a partition not owned or a changed owner epoch
        raises `CommitFailed`. Blocks while ZooKeeper is unreachable (0.8 does too). A refused
        write, or a member stopped by a refusal, raises `ZooKeeperNoAuth`.
        """
        self._raise_if_refused()
        if self.fence_commits and generation is not None and generation != self._generation:
            raise CommitFailed(
                f"commit for generation {generation} refused: {self.consumer_id} is at generation "
                f"{self._generation}; the group rebalanced, re-read the assignment and positions"
            )
        with self._lock:
            if offsets is None:
                todo = {tp: i.consumed for tp, i in self._registry.items()}
            else:
                todo = {}
                missing = []
                for tp, off in offsets.items():
                    if tp in self._registry:
                        self._registry[tp].consumed = int(off)
                        todo[tp] = int(off)
                    else:
                        missing.append(tp)
                if missing:
                    self.events.emit("commit_not_owned", partitions=[str(tp) for tp in sorted(missing)])
                    if self.fence_commits:
                        raise CommitFailed(
                            f"{self.consumer_id} does not own {', '.join(map(str, sorted(missing)))}; "
                            "the group rebalanced - its new owner commits from here on"
                        )
            work = [(tp, off, self._registry[tp].epoch) for tp, off in todo.items() if tp in self._registry]
        try:
            self._commit(work, reason="commit")
        except Closing:
            self._raise_if_refused()  # stopped by a refusal while this commit waited
            raise

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The offsets stored in ZooKeeper (None where nothing was committed)."""
        self._raise_if_refused()
        out: dict[TopicPartition, int | None] = {}
        try:
            for tp in partitions:
                data = self._zkc.read_maybe(offset_path(self.group, tp.topic, tp.partition))
                out[tp] = int(data[0]) if data and data[0] else None
        except Closing:
            self._raise_if_refused()
            raise
        return out

    def wait_for_stable(self, timeout: float = 30.0) -> bool:
        """True once the latest rebalance succeeded and no event is pending; raises the last
        `ConsumerRebalanceFailed` if the member gave up, its `ZooKeeperNoAuth` if it stopped;
        False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self._raise_if_refused()
            if self.is_stable():
                return True
            if self.state is ZkMemberState.FAILED and self._last_error and not self._triggered:
                raise self._last_error
            time.sleep(0.02)
        return False

    def is_stable(self) -> bool:
        return (
            self.state is ZkMemberState.STABLE
            and not self._triggered
            and not self._busy
            and self._zk_events.empty()
        )

    @property
    def rebalance_in_progress(self) -> bool:
        """`core.membership.Membership`'s reading: registering, rebalancing, or a rebalance due."""
        return not self.is_stable()

    def close(self, timeout: float = 10.0) -> None:
        """Shut down as 0.8 does: wait for a rebalance in progress, stop fetching, commit (auto-commit),
        then close the session, which deletes the ids and owner nodes at once."""
        if self.state is ZkMemberState.CLOSED:
            return
        self._shutting_down = True
        with self._cond:
            self._cond.notify_all()
        if not self._rebalance_lock.acquire(timeout=timeout):
            self._closing.set()  # a rebalance blocked on ZooKeeper: abort it
            self._rebalance_lock.acquire()
        try:
            watchdog = threading.Timer(timeout, self._closing.set)
            watchdog.daemon = True
            watchdog.start()
            try:
                with self._lock:
                    owned = set(self._registry)
                self._stop_fetchers("close")
                if owned and self.listener:
                    self.listener.on_partitions_revoked(owned)
                if self.auto_commit and self.zk is not None:
                    self._commit_registry("shutdown")
            except Closing:
                self.events.emit("close_commit_aborted")
            finally:
                watchdog.cancel()
            self._closing.set()
            self._transition(ZkMemberState.CLOSED)
            self.events.emit("closed")
            if self._lease_timer:
                self._lease_timer.cancel()
            if self.zk is not None:
                self._close_session()
        finally:
            self._rebalance_lock.release()
        self._zk_events.put(None)
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout=2)
        self.events.close()

    def __enter__(self) -> ZkGroupMember:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

    # -- state ---------------------------------------------------------------------------------
    def _transition(self, new: ZkMemberState) -> None:
        ENTERED_FROM.check(self.state, new, "member {!r}", self.consumer_id)
        self.state = new

    def _flags(self) -> dict:
        return {
            "fence_commits": self.fence_commits,
            "stop_fetch_on_disconnect": self.stop_fetch_on_disconnect,
            "read_offsets_after_claim": self.read_offsets_after_claim,
            "sync_before_read": self.sync_before_read,
            "require_brokers": self.require_brokers,
        }

    # -- a refusal: the member stops ---------------------------------------------------------------
    def _raise_if_refused(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error

    def _stop_refused(self, exc: ZooKeeperNoAuth, thread: str) -> None:
        """ZooKeeper refused a request of the member's own threads: it can no longer take part in
        the group, so it stops for good instead of retrying or dying with a traceback. Every blocked
        call gives up, fetching stops, the partitions are reported lost (their offsets cannot be
        written), and the session is closed, which deletes the registration and owner znodes it
        holds; `fatal_error` keeps the one-line error for the caller."""
        with self._cond:
            if self.fatal_error is not None or self._shutting_down:
                return  # already stopped, or close() is under way
            self.fatal_error = exc
            self._cond.notify_all()
        self._closing.set()  # the other threads' ZooKeeper calls give up (Closing)
        self.events.emit("refused", thread=thread, error=str(exc))
        log.info("%s stopped: %s", self.consumer_id, exc)  # the caller raises it; no second line
        with self._rebalance_lock:
            if self.state is not ZkMemberState.CLOSED:
                self._transition(ZkMemberState.REFUSED)
            with self._lock:
                lost = set(self._fetching) | set(self._registry)
                self._registry.clear()
            self._stop_fetchers("refused", notify=False)
            if self._lease_timer:
                self._lease_timer.cancel()
            try:
                if lost and self.listener:
                    self.listener.on_partitions_lost(lost)
            except Exception:  # the listener's own failure must not keep the session open
                log.exception("the rebalance listener of %s failed", self.consumer_id)
            finally:
                self._close_session()
        self._zk_events.put(None)  # ends the event thread

    def _close_session(self) -> None:
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:  # a dead connection must not stop the shutdown
            log.debug("closing the ZooKeeper client failed", exc_info=True)

    # -- startup, registration -----------------------------------------------------------------
    def _executor_loop(self) -> None:
        try:
            self._executor_work()
        except ZooKeeperNoAuth as exc:
            self._stop_refused(exc, "watcher_executor")
        except Closing:
            pass

    def _executor_work(self) -> None:
        """Register and rebalance, then one `syncedRebalance` per batch of ZooKeeper events."""
        try:
            self._register()
            self._reinitialize()
        except ConsumerRebalanceFailed as exc:
            self._record_failure(exc)
        while not self._closing.is_set() and not self._shutting_down:
            with self._cond:
                self._cond.wait_for(lambda: self._triggered or self._shutting_down, timeout=1.0)
                fire = self._triggered and not self._shutting_down
                why = self._trigger_reason
                self._triggered = False
            if not fire:
                continue
            try:
                self._synced_rebalance(why)
            except ConsumerRebalanceFailed as exc:
                self._record_failure(exc)
            except (Closing, ZooKeeperNoAuth):
                raise
            except Exception:
                log.exception("error during syncedRebalance")

    def _record_failure(self, exc: ConsumerRebalanceFailed) -> None:
        log.error("error during syncedRebalance: %s", exc)
        self._last_error = exc
        self.events.emit("rebalance_failed", error=str(exc))

    def _register(self) -> None:
        """`registerConsumerInZK` via `createEphemeralPathExpectConflictHandleZKBug` (checker: always
        true, backoff: the session timeout): a conflicting registration is retried forever."""
        path = f"{ids_dir(self.group)}/{self.consumer_id}"
        data = encode_registration(self.subscription, int(time.time() * 1000))
        while True:
            try:
                self._create_expect_conflict(path, data)
                self.events.emit("registered", path=path, session=self._session_id)
                return
            except NodeExistsError:
                found = self._zkc.read_maybe(path)
                if found is None:
                    continue
                self.events.emit("registration_conflict", path=path)
                log.info(
                    "I wrote this conflicted ephemeral node [%s] at %s a while back in a different "
                    "session, hence I will backoff for this node to be deleted by Zookeeper and retry",
                    data.decode(),
                    path,
                )
                self._sleep(self.session_timeout_ms / 1000)

    def _create_expect_conflict(self, path: str, data: bytes) -> None:
        """`createEphemeralPathExpectConflict`: NodeExists with our own data counts as success."""
        try:
            self._zkc.create(path, data, ephemeral=True)
        except NodeExistsError:
            found = self._zkc.read_maybe(path)
            if found is None or found[0] != data.decode("utf-8"):
                raise
            self.events.emit("create_exists_same_data", path=path)

    def _reinitialize(self) -> None:
        """`reinitializeConsumer`: subscribe the listeners, then `syncedRebalance` on this thread."""
        self._subscribe_children(ids_dir(self.group))
        if self.subscription.is_wildcard:
            topics = self._subscribe_children(BROKER_TOPICS)
            self._wildcard_topics = sorted(
                t for t in topics if self.subscription.filter.allows(t, self.exclude_internal_topics)
            )
            for t in self._wildcard_topics:
                self._subscribe_data(topic_path(t))
        else:
            for t in self.subscription.streams:
                self._subscribe_data(topic_path(t))
        self._synced_rebalance("start" if self.state is ZkMemberState.STARTING else "topics")

    # -- fetchers and commits ------------------------------------------------------------------
    def _stop_fetchers(self, reason: str, notify: bool = True) -> None:
        with self._lock:
            stopped = self._fetching
            self._fetching = {}
            orphaned = set(stopped) - set(self._registry)
        for tp in sorted(stopped):
            self.events.emit("fetch_stop", partition=str(tp), reason=reason)
        if notify and orphaned and self.listener and reason != "close":
            self.listener.on_partitions_lost(orphaned)  # the session expired under them

    def _start_fetchers(self) -> None:
        with self._lock:
            self._fetching = {tp: i.consumed for tp, i in self._registry.items()}
            started = dict(self._fetching)
        for tp, off in sorted(started.items()):
            self.events.emit("fetch_start", partition=str(tp), offset=off)

    def _commit_registry(self, reason: str) -> None:
        with self._lock:
            work = [(tp, i.consumed, i.epoch) for tp, i in self._registry.items()]
        self._commit(work, reason)

    def _commit(self, work: list[tuple[TopicPartition, int, int | None]], reason: str) -> None:
        """`commitOffsetToZooKeeper` per partition: skipped when unchanged (KAFKA-987)."""
        failed = []
        for tp, off, epoch in sorted(work):
            with self._lock:
                if self._checkpointed.get(tp) == off:
                    self.events.count("commit_skipped")
                    continue
            path = offset_path(self.group, tp.topic, tp.partition)
            try:
                stat = self._write_offset(tp, path, off, epoch)
            except CommitFailed:
                failed.append(tp)
                continue
            with self._lock:
                self._checkpointed[tp] = off
            self.events.emit(
                "commit",
                partition=str(tp),
                offset=off,
                reason=reason,
                mzxid=getattr(stat, "mzxid", None),
                epoch=epoch,
            )
        if failed:
            self.events.emit("commit_fenced", partitions=[str(tp) for tp in failed])
            raise CommitFailed(
                f"commit of {', '.join(map(str, failed))} refused: another member claimed the partitions "
                "since this member did (owner epoch changed); the new owner re-delivers the records",
                partitions=failed,
            )

    def _write_offset(self, tp: TopicPartition, path: str, off: int, epoch: int | None):
        data = str(off).encode()
        if not self.fence_commits:
            try:  # ZkUtils.updatePersistentPath: setData(-1), create parents on NoNode
                return self._zkc.set(path, data)
            except NoNodeError:
                try:
                    self._zkc.create(path, data)
                    return self._zkc.exists(path)
                except NodeExistsError:
                    return self._zkc.set(path, data)
        if epoch is None:
            raise CommitFailed(f"{tp} was claimed without an epoch")
        try:
            return fencing.write_offset(self._zkc, self.group, tp, off, epoch)
        except fencing.StaleEpoch as exc:
            raise CommitFailed(str(exc)) from None

    def _autocommit_loop(self) -> None:
        if not self.auto_commit:
            return
        interval = self.auto_commit_interval_ms / 1000
        while not self._closing.wait(interval):
            if self._shutting_down:
                return
            try:
                self._commit_registry("auto")
            except Closing:
                return
            except ZooKeeperNoAuth as exc:
                self._stop_refused(exc, "autocommit")
                return
            except CommitFailed as exc:
                log.warning("auto-commit refused: %s", exc)
            except Exception:
                log.exception("exception during autoCommit")
