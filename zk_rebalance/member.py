"""`ZkGroupMember`: one Kafka 0.8 high-level consumer's group membership, faithful and instrumented.

A recipe in kazoo's style: it registers `/consumers/<g>/ids/<consumerId>`, watches the group
and its topics, and on every change runs 0.8.2's `syncedRebalance` (release everything, read
the whole group from ZooKeeper, compute the assignment locally, claim it all-or-nothing with
ephemeral owner znodes, retry with backoff). Every step is written to a JSONL event log.
The behaviour is `legacy-zk-and-migration.md` §2; the opt-in fixes are §6.

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
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from kazoo.exceptions import (
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KazooState

from core.errors import CommitFailed, RebalanceFailed
from core.types import TopicPartition
from core.zk import connect
from topics.registry import decode_assignment
from zk_rebalance import fencing
from zk_rebalance.assignors import View, get_assignor, group_decision, thread_sort_key
from zk_rebalance.events import EventLog
from zk_rebalance.layout import (
    BROKER_IDS,
    BROKER_TOPICS,
    Blacklist,
    InvalidRegistration,
    Subscription,
    ThreadId,
    Whitelist,
    consumer_id_string,
    decode_registration,
    encode_registration,
    ids_dir,
    offset_path,
    owner_path,
    topic_path,
    validate_group_id,
)
from zk_rebalance.zkclient import Closing, ZkCalls

log = logging.getLogger(__name__)

_RETRYABLE = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)


class ConsumerRebalanceFailed(RebalanceFailed):
    """`ConsumerRebalanceFailedException`: every attempt of one `syncedRebalance` failed.

    The member owns no partitions until the next ZooKeeper event starts another rebalance. Raise
    `rebalance_max_retries × rebalance_backoff_ms` above the session timeout (the 0.8 FAQ rule)
    or remove the owner node that blocks the claim.
    """


class RebalanceListener(Protocol):
    def on_partitions_revoked(self, partitions: set[TopicPartition]) -> None: ...
    def on_partitions_assigned(self, partitions: set[TopicPartition]) -> None: ...
    def on_partitions_lost(self, partitions: set[TopicPartition]) -> None: ...


class MemberState(Enum):
    """Where a member is; `_ENTERED_FROM` lists the states each may be entered from."""

    NEW = "new"
    STARTING = "starting"
    REBALANCING = "rebalancing"
    STABLE = "stable"
    FAILED = "failed"  # ConsumerRebalanceFailed: owns nothing until the next ZooKeeper event
    CLOSED = "closed"


_ENTERED_FROM = {
    MemberState.STARTING: {MemberState.NEW},
    MemberState.REBALANCING: {
        MemberState.STARTING,
        MemberState.STABLE,
        MemberState.FAILED,
        MemberState.REBALANCING,
    },
    MemberState.STABLE: {MemberState.REBALANCING},
    MemberState.FAILED: {MemberState.REBALANCING},
    MemberState.CLOSED: set(MemberState) - {MemberState.CLOSED},
}


@dataclass
class _PartitionInfo:
    """`PartitionTopicInfo`: the owning thread, the consumed offset (next to read), the fencing epoch."""

    thread: ThreadId
    consumed: int
    epoch: int | None = None


class ZkGroupMember:
    """A Kafka 0.8 ZooKeeper-coordinated group member (`ZookeeperConsumerConnector` membership).

    Faithful by default; the flags `fence_commits`, `stop_fetch_on_disconnect`,
    `read_offsets_after_claim` and `sync_before_read` switch on the fixes of §6.
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
            self.subscription = Subscription.wildcard(topics, num_streams)
        elif isinstance(topics, dict):
            self.subscription = Subscription.static(topics)
        else:
            self.subscription = Subscription.static({t: num_streams for t in topics})
        self.zk_connect = zk_connect
        self.consumer_id = consumer_id_string(self.group, consumer_id)
        self.assignor_name = assignor
        self.assignor = get_assignor(assignor)
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
        self.state = MemberState.NEW

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
        self._suspended_at: float | None = None
        self._lease_timer: threading.Timer | None = None
        self._last_children: dict[str, list[str]] = {}
        self._last_mzxid: dict[str, int] = {}
        self._child_paths: set[str] = set()
        self._data_paths: set[str] = set()
        self._wildcard_topics: list[str] = []
        self._last_error: Exception | None = None
        self._stable = threading.Event()
        self._zkc: ZkCalls | None = None
        self._threads: list[threading.Thread] = []
        self._busy = False
        self._trigger_reason = ""

    # -- public API ----------------------------------------------------------------------------
    def start(self) -> ZkGroupMember:
        """Connect (raises `ZooKeeperUnavailable`), then register and rebalance in the background."""
        self._transition(MemberState.STARTING)
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
        raises `CommitFailed`. Blocks while ZooKeeper is unreachable (0.8 does too).
        """
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
        self._commit(work, reason="commit")

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The offsets stored in ZooKeeper (None where nothing was committed)."""
        out: dict[TopicPartition, int | None] = {}
        for tp in partitions:
            data = self._zkc.read_maybe(offset_path(self.group, tp.topic, tp.partition))
            out[tp] = int(data[0]) if data and data[0] else None
        return out

    def wait_for_stable(self, timeout: float = 30.0) -> bool:
        """True once the latest rebalance succeeded and no event is pending; raises the last
        `ConsumerRebalanceFailed` if the member gave up; False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.is_stable():
                return True
            if self.state is MemberState.FAILED and self._last_error and not self._triggered:
                raise self._last_error
            time.sleep(0.02)
        return False

    def is_stable(self) -> bool:
        return (
            self.state is MemberState.STABLE
            and not self._triggered
            and not self._busy
            and self._zk_events.empty()
        )

    def close(self, timeout: float = 10.0) -> None:
        """Shut down as 0.8 does: wait for a rebalance in progress, stop fetching, commit (auto-commit),
        then close the session, which deletes the ids and owner nodes at once."""
        if self.state is MemberState.CLOSED:
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
            self._transition(MemberState.CLOSED)
            self.events.emit("closed")
            if self._lease_timer:
                self._lease_timer.cancel()
            if self.zk is not None:
                try:
                    self.zk.stop()
                    self.zk.close()
                except Exception:  # a dead connection must not stop the shutdown
                    log.debug("closing the ZooKeeper client failed", exc_info=True)
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
    def _transition(self, new: MemberState) -> None:
        if self.state not in _ENTERED_FROM[new]:
            raise RuntimeError(f"illegal member transition {self.state.name} -> {new.name}")
        self.state = new

    def _flags(self) -> dict:
        return {
            "fence_commits": self.fence_commits,
            "stop_fetch_on_disconnect": self.stop_fetch_on_disconnect,
            "read_offsets_after_claim": self.read_offsets_after_claim,
            "sync_before_read": self.sync_before_read,
            "require_brokers": self.require_brokers,
        }

    # -- connection state ----------------------------------------------------------------------
    def _on_state(self, state: str) -> None:  # kazoo's connection thread: never block here
        self._zk_events.put(("state", state, time.monotonic()))

    def _handle_state(self, state: str, at: float) -> None:
        self.events.emit("state", state=str(state))
        if state == KazooState.SUSPENDED:
            self._suspended_at = at
            if self.stop_fetch_on_disconnect:
                self._lease_timer = threading.Timer(self.session_timeout_ms / 1000, self._lease_check, (at,))
                self._lease_timer.daemon = True
                self._lease_timer.start()
        elif state == KazooState.LOST:
            if self.stop_fetch_on_disconnect:
                self._ownership_lost("session_lost")
        elif state == KazooState.CONNECTED:
            self._suspended_at = None
            if self._lease_timer:
                self._lease_timer.cancel()
            session = self.zk.client_id[0] if self.zk and self.zk.client_id else None
            if session != self._session_id:
                self._session_id = session
                self._handle_new_session()
            else:
                self._rearm_after_reconnect()

    def _lease_check(self, suspended_at: float) -> None:
        """`stop_fetch_on_disconnect`: SUSPENDED longer than the session timeout means the server
        has expired the session (kazoo reports LOST only after reconnecting): stop fetching."""
        if self._suspended_at == suspended_at and not self._zkc.connected.is_set():
            self._ownership_lost("suspended_past_session_timeout")

    def _ownership_lost(self, reason: str) -> None:
        with self._lock:
            lost = set(self._fetching) | set(self._registry)
            if not lost:
                return
            self._registry.clear()
        self.events.emit("ownership_lost", reason=reason, partitions=[str(tp) for tp in sorted(lost)])
        self._stop_fetchers(reason, notify=False)
        if self.listener:
            self.listener.on_partitions_lost(lost)
        if reason == "suspended_past_session_timeout":
            self._trigger("lease_expired")  # if the session survived after all, reclaim on reconnect

    def _handle_new_session(self) -> None:
        """`ZKSessionExpireListener.handleNewSession`, then zkclient's `fireAllEvents`."""
        self.events.emit("session_expired", session=self._session_id)
        log.info(  # the typo is 0.8's
            "ZK expired; release old broker parition ownership; re-register consumer %s", self.consumer_id
        )
        with self._lock:
            self._registry.clear()  # resetState: fetchers keep running (faithful)
        try:
            self._register()
            self._synced_rebalance("new_session")
        except ConsumerRebalanceFailed as exc:
            self._record_failure(exc)
        except Closing:
            return
        self._fire_all()

    def _fire_all(self) -> None:
        for path in sorted(self._child_paths):
            self._child_event(path, fired_all=True)
        for path in sorted(self._data_paths):
            self._data_event(path, fired_all=True)

    def _rearm_after_reconnect(self) -> None:
        """Same session: the server would re-deliver watches whose nodes changed meanwhile (SetWatches)."""
        for path in sorted(self._child_paths):
            before = self._last_children.get(path)
            self._zkc.exists(path, watch=self._watch_cb)
            children = self._zkc.children_maybe(path, watch=self._watch_cb)
            if before is not None and sorted(children) != sorted(before):
                self._on_children(path, children, before)
        for path in sorted(self._data_paths):
            before = self._last_mzxid.get(path)
            stat = self._zkc.exists(path, watch=self._watch_cb)
            mzxid = stat.mzxid if stat else -1
            if before is not None and mzxid != before:
                self._last_mzxid[path] = mzxid
                self.events.emit("watch", kind="topic", path=path, deleted=stat is None, replayed=True)
                if stat is not None:
                    self._trigger("topic")

    # -- watches (zkclient listeners) ----------------------------------------------------------
    def _watch_cb(self, event) -> None:  # kazoo's event thread
        if event.type == EventType.NONE or event.path is None:
            return  # connection state; re-armed on reconnect
        kind = "child" if event.type == EventType.CHILD else "data"
        self._zk_events.put((kind, event.path, event.type))

    def _subscribe_children(self, path: str) -> list[str]:
        self._child_paths.add(path)
        self._zkc.exists(path, watch=self._watch_cb)
        children = self._zkc.children_maybe(path, watch=self._watch_cb)
        self._last_children[path] = children
        return children

    def _subscribe_data(self, path: str) -> None:
        if path in self._data_paths:
            return
        self._data_paths.add(path)
        stat = self._zkc.exists(path, watch=self._watch_cb)
        self._last_mzxid[path] = stat.mzxid if stat else -1

    def _child_event(self, path: str, fired_all: bool = False) -> None:
        """zkclient: re-arm (`exists` + `getChildren` with a watch), then call the listener."""
        self._zkc.exists(path, watch=self._watch_cb)
        children = self._zkc.children_maybe(path, watch=self._watch_cb)
        before = self._last_children.get(path, [])
        self._on_children(path, children, before, fired_all)

    def _on_children(self, path: str, children: list[str], before: list[str], fired_all=False) -> None:
        self._last_children[path] = children
        kind = {ids_dir(self.group): "ids", BROKER_TOPICS: "topics", BROKER_IDS: "brokers"}.get(path, "child")
        self.events.emit(
            "watch",
            kind=kind,
            path=path,
            fired_all=fired_all,
            count=len(children),
            joined=sorted(set(children) - set(before)),
            left=sorted(set(before) - set(children)),
        )
        if kind == "topics":
            self._topic_event(children)
        else:
            self._trigger(kind)

    def _data_event(self, path: str, fired_all: bool = False) -> None:
        """zkclient: `exists` re-arms, then `readData`; a deleted topic only logs a warning."""
        stat = self._zkc.exists(path, watch=self._watch_cb)
        self._last_mzxid[path] = stat.mzxid if stat else -1
        if stat is None:
            self.events.emit("watch", kind="topic", path=path, deleted=True, fired_all=fired_all)
            log.warning("topic %s was deleted", path)
            return
        if self._zkc.read_maybe(path) is None:
            return
        self.events.emit("watch", kind="topic", path=path, deleted=False, fired_all=fired_all)
        self._trigger("topic")

    def _topic_event(self, all_topics: list[str]) -> None:
        """`ZookeeperTopicEventWatcher` → `WildcardStreamsHandler.handleTopicEvent`."""
        filt = self.subscription.filter
        allowed = sorted(t for t in all_topics if filt.allows(t, self.exclude_internal_topics))
        if allowed != self._wildcard_topics:
            self._wildcard_topics = allowed
            try:
                self._reinitialize()  # subscribes the new topics and rebalances on this thread
            except ConsumerRebalanceFailed as exc:
                self._record_failure(exc)

    def _trigger(self, why: str) -> None:
        """`rebalanceEventTriggered`: set the flag; the executor runs one rebalance per batch."""
        with self._cond:
            self._triggered = True
            self._trigger_reason = why
            self._cond.notify_all()

    def _event_loop(self) -> None:
        while True:
            item = self._zk_events.get()
            if item is None or self._closing.is_set():
                return
            self._busy = True
            try:
                if item[0] == "state":
                    self._handle_state(item[1], item[2])
                elif item[0] == "child":
                    self._child_event(item[1])
                elif item[0] == "data":
                    self._data_event(item[1])
            except Closing:
                return
            except Exception:  # zkclient logs listener errors and carries on
                log.exception("error in the ZooKeeper event thread of %s", self.consumer_id)
                self.events.emit("error", where="zk_event_thread")
            finally:
                self._busy = False

    # -- startup, registration -----------------------------------------------------------------
    def _executor_loop(self) -> None:
        try:
            self._register()
            self._reinitialize()
        except ConsumerRebalanceFailed as exc:
            self._record_failure(exc)
        except Closing:
            return
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
            except Closing:
                return
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
        self._synced_rebalance("start" if self.state is MemberState.STARTING else "topics")

    # -- syncedRebalance -----------------------------------------------------------------------
    def _synced_rebalance(self, trigger: str) -> None:
        with self._rebalance_lock:
            if self._shutting_down:
                return
            self._transition(MemberState.REBALANCING)
            self._stable.clear()
            self._rounds += 1
            rnd = self._rounds
            t0 = time.monotonic()
            self.events.emit("rebalance_begin", round=rnd, trigger=trigger)
            for attempt in range(self.rebalance_max_retries):
                if self._shutting_down:  # KAFKA-1848
                    return
                self._zkc.context.value = {"round": rnd, "attempt": attempt}
                self.events.emit("attempt_begin", round=rnd, attempt=attempt)
                log.info("begin rebalancing consumer %s try #%d", self.consumer_id, attempt)
                done, error = False, None
                try:
                    done = self._rebalance(rnd, attempt)
                except Closing:
                    raise
                except Exception as exc:  # NoNode mid-iteration, the assignor's require(), bad JSON...
                    error = f"{type(exc).__name__}: {exc}"
                    log.info("exception during rebalance: %s", error)
                self.events.emit("attempt_end", round=rnd, attempt=attempt, ok=done, error=error)
                self._zkc.context.value = None
                if done:
                    self._generation += 1
                    self._last_error = None
                    with self._lock:
                        owned = sorted(str(tp) for tp in self._registry)
                    self.events.emit(
                        "rebalance_end",
                        round=rnd,
                        ok=True,
                        attempts=attempt + 1,
                        generation=self._generation,
                        owned=owned,
                        duration=time.monotonic() - t0,
                    )
                    self._transition(MemberState.STABLE)
                    self._stable.set()
                    return
                self._stop_fetchers("attempt_failed")  # closeFetchersForQueues(all): stop, commit
                if self.auto_commit:
                    self._commit_registry("attempt_failed")
                self._sleep(self.rebalance_backoff_ms / 1000)  # also after the last attempt
            self.events.emit(
                "rebalance_end",
                round=rnd,
                ok=False,
                attempts=self.rebalance_max_retries,
                duration=time.monotonic() - t0,
            )
            self._transition(MemberState.FAILED)
            raise ConsumerRebalanceFailed(
                f"{self.consumer_id} can't rebalance after {self.rebalance_max_retries} retries"
            )

    def _sleep(self, seconds: float) -> None:
        if self._closing.wait(seconds):
            raise Closing()

    def _rebalance(self, rnd: int, attempt: int) -> bool:
        """0.8.2's `rebalance(cluster)`; True when this member's whole decision is claimed."""
        if self.sync_before_read:
            self._zkc.sync(ids_dir(self.group))
        brokers = self._brokers()  # getCluster, in syncedRebalance
        my_threads = self._thread_ids(self.consumer_id)  # own registration, re-read
        brokers = self._brokers()  # getAllBrokersInCluster
        if not brokers and self.require_brokers:
            log.warning("no brokers found when trying to rebalance")
            self.events.emit("no_brokers", round=rnd, attempt=attempt)
            self._subscribe_children(BROKER_IDS)
            return True
        self._stop_fetchers("rebalance")
        if self.auto_commit:
            self._commit_registry("rebalance")
        with self._lock:
            revoked = set(self._registry)
        if revoked and self.listener:
            self.listener.on_partitions_revoked(revoked)
        self._release_all()
        view = self._assignment_context(my_threads)
        decision = self.assignor.assign(view)
        self._log_decision(rnd, attempt, view, decision)
        offsets = {} if self.read_offsets_after_claim else self._fetch_offsets(decision)
        with self._lock:
            for tp, off in offsets.items():
                self._checkpointed[tp] = off
        epochs = self._reflect(decision)
        if epochs is None:
            return False
        if self.read_offsets_after_claim:
            offsets = self._fetch_offsets(decision)
            with self._lock:
                for tp, off in offsets.items():
                    self._checkpointed[tp] = off
        with self._lock:
            self._registry = {
                tp: _PartitionInfo(tid, offsets[tp], epochs.get(tp)) for tp, tid in decision.items()
            }
        self._start_fetchers()
        if self.listener:
            self.listener.on_partitions_assigned(set(decision))
        return True

    def _brokers(self) -> list[str]:
        ids = self._zkc.children_maybe(BROKER_IDS)
        return [b for b in ids if self._zkc.read_maybe(f"{BROKER_IDS}/{b}") is not None]

    def _registration(self, consumer: str) -> Subscription:
        path = f"{ids_dir(self.group)}/{consumer}"
        data, _ = self._zkc.read(path)  # NoNode (e.g. after expiry) fails the attempt, as in 0.8
        return decode_registration(data, path)

    def _thread_ids(self, consumer: str, sub: Subscription | None = None) -> dict[str, list[ThreadId]]:
        sub = sub or self._registration(consumer)
        topics = self._zkc.children_maybe(BROKER_TOPICS) if sub.is_wildcard else None
        if sub.is_wildcard:
            topics = [t for t in topics if sub.filter.allows(t, self.exclude_internal_topics)]
        return sub.thread_ids(consumer, topics)

    def _assignment_context(self, my_threads_first: dict[str, list[ThreadId]]) -> View:
        """`AssignmentContext`: own registration again, partition maps, every member's registration."""
        my_threads = self._thread_ids(self.consumer_id)
        partitions = {}
        for topic in my_threads:
            found = self._zkc.read_maybe(topic_path(topic))
            partitions[topic] = sorted(decode_assignment(found[0].encode(), topic)) if found else []
        per_topic: dict[str, list[ThreadId]] = {}
        for consumer in self._zkc.children_maybe(ids_dir(self.group)):
            try:
                threads = self._thread_ids(consumer)
            except InvalidRegistration as exc:
                # 0.8 would fail the attempt on every member; groupshift reports the node and skips it.
                self.events.emit("bad_registration", path=f"{ids_dir(self.group)}/{consumer}", error=str(exc))
                log.warning("%s", exc)
                continue
            for topic, tids in threads.items():
                per_topic.setdefault(topic, []).extend(tids)
        consumers = sorted(self._zkc.children_maybe(ids_dir(self.group)))
        return View(
            consumer=self.consumer_id,
            my_threads=my_threads,
            partitions=partitions,
            consumers_for_topic={t: sorted(v, key=thread_sort_key) for t, v in per_topic.items()},
            consumers=consumers,
        )

    def _log_decision(self, rnd: int, attempt: int, view: View, decision: dict) -> None:
        material = view.digest_material()
        digest = hashlib.sha1(json.dumps(material, sort_keys=True).encode()).hexdigest()[:12]
        whole = group_decision(self.assignor, view)
        self.events.emit(
            "decision",
            round=rnd,
            attempt=attempt,
            view=digest,
            consumers=view.consumers,
            partitions=material["partitions"],
            mine={str(tp): str(t) for tp, t in sorted(decision.items())},
            group={str(tp): str(t) for tp, t in sorted(whole.items())},
        )

    def _fetch_offsets(self, decision: dict[TopicPartition, ThreadId]) -> dict[TopicPartition, int]:
        out = {}
        for tp in sorted(decision):
            found = self._zkc.read_maybe(offset_path(self.group, tp.topic, tp.partition))
            out[tp] = int(found[0]) if found and found[0].strip().lstrip("-").isdigit() else -1
        return out

    def _release_all(self) -> None:
        """`releasePartitionOwnership`: delete every owner node in the local registry."""
        with self._lock:
            mine = sorted(self._registry)
            self._registry = {}
        for tp in mine:
            self._zkc.delete(owner_path(self.group, tp.topic, tp.partition))
            self.events.emit("owner_deleted", partition=str(tp), reason="release")

    def _reflect(self, decision: dict[TopicPartition, ThreadId]) -> dict[TopicPartition, int] | None:
        """`reflectPartitionOwnershipDecision`: claim all, roll back every claim on any NodeExists.
        Returns the fencing epochs (empty unless `fence_commits`), or None when the attempt fails."""
        owned: list[TopicPartition] = []
        epochs: dict[TopicPartition, int] = {}
        conflicts = 0
        for tp, tid in sorted(decision.items()):
            path = owner_path(self.group, tp.topic, tp.partition)
            try:
                if self.fence_commits:
                    epochs[tp] = fencing.claim(self._zkc, self.group, tp, str(tid))
                else:
                    self._create_expect_conflict(path, str(tid).encode())
                owned.append(tp)
                self.events.emit("owner_created", partition=str(tp), thread=str(tid))
            except NodeExistsError:
                conflicts += 1
                found = self._zkc.read_maybe(path)
                self.events.emit("conflict", partition=str(tp), path=path, owner=found[0] if found else None)
                log.info("waiting for the partition ownership to be deleted: %s", tp.partition)
        if conflicts:
            for tp in owned:
                self._zkc.delete(owner_path(self.group, tp.topic, tp.partition))
                self.events.emit("owner_deleted", partition=str(tp), reason="rollback")
            return None
        return epochs

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
                "since this member did (owner epoch changed); the new owner re-delivers the records"
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
            except CommitFailed as exc:
                log.warning("auto-commit refused: %s", exc)
            except Exception:
                log.exception("exception during autoCommit")
