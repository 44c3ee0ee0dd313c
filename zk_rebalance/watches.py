"""The ZooKeeper event side of a scheme-one member: zkclient's listeners over kazoo.

Watches are one-shot in ZooKeeper and kazoo drops them on every disconnect; zkclient keeps its
listeners subscribed and re-arms them (`exists` + `getChildren`/`readData`) on each event. This
mixin does the same on the member's ZooKeeper event thread: it re-arms, logs a `watch` event and
sets the rebalance flag (`rebalanceEventTriggered`). Session expiry runs `handleNewSession`: the
member registers again, re-arms every watch and rebalances once (0.8 rebalanced once more when
zkclient's `fireAllEvents` re-delivered the watches); a reconnect in the same session replays
changes the server would have re-delivered (SetWatches); `stop_fetch_on_disconnect` turns a long
SUSPENDED into lost ownership.
"""

from __future__ import annotations

import logging
import threading
import time

from kazoo.protocol.states import Callback, EventType, KazooState

from core.zk import ZooKeeperNoAuth
from zk_rebalance.layout import (
    BROKER_IDS,
    BROKER_TOPICS,
    ids_dir,
    topic_path,
)
from zk_rebalance.state import ConsumerRebalanceFailed
from zk_rebalance.zkclient import Closing

log = logging.getLogger("zk_rebalance.member")


class WatchesMixin:
    """Connection-state handling, watch re-arming and the event thread of `ZkGroupMember`."""

    # -- connection state ----------------------------------------------------------------------
    def _on_state(self, state: str) -> None:  # kazoo's connection thread: never block here
        # The session is read now: by the time the event thread gets to this state the connection
        # may be gone again (no id), and a revived old session must not pass for a new one.
        session = self.zk.client_id[0] if state == KazooState.CONNECTED and self.zk.client_id else None
        self._zk_events.put(("state", state, time.monotonic(), session))

    def _handle_state(self, state: str, at: float, session: int | None) -> None:
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
        """`ZKSessionExpireListener.handleNewSession`: register again at once, then rebalance once.

        0.8 rebalanced here, then once more on its executor when zkclient's `fireAllEvents`
        re-delivered every watch of the new session: a second release-read-claim round over what
        the first had just read. Here every watch is armed again first (kazoo dropped them with
        the session), so the one rebalance covers what they would report, and a trigger left
        pending from the old session; a change after they are armed fires them as usual. A watch
        event delivered before they were armed (by the old session, or by a watch armed across the
        boundary) reports nothing the re-arming did not read: it is re-armed without a rebalance."""
        self.events.emit("session_expired", session=self._session_id)
        log.info(  # the typo is 0.8's
            "ZK expired; release old broker parition ownership; re-register consumer %s", self.consumer_id
        )
        with self._lock:
            self._registry.clear()  # resetState: fetchers keep running (faithful)
        try:
            self._register()
            self._rearm_all()
            self._read_up_to_here()
            with self._cond:
                self._triggered = False  # what it was set for is read by the rebalance below
            self._synced_rebalance("new_session")
        except ConsumerRebalanceFailed as exc:
            self._record_failure(exc)
        except Closing:
            return

    def _rearm_all(self) -> None:
        """Arm every watch in the new session, what it covers now as the baseline of the next event;
        a wildcard subscription takes in the topics created meanwhile."""
        for path in sorted(self._child_paths):
            children = self._subscribe_children(path)
            if path == BROKER_TOPICS and self.subscription.is_wildcard:
                self._wildcard_topics = self._allowed_topics(children)
                self._data_paths.update(topic_path(t) for t in self._wildcard_topics)
        for path in sorted(self._data_paths):
            self._arm_data(path)

    def _read_up_to_here(self) -> None:
        """Mark the event stream: every watch event kazoo has delivered so far (its callback queue is
        one FIFO) comes before the marker, and reported a change that `_rearm_all` has read."""
        self._read_marker = marker = object()
        self.zk.handler.dispatch_callback(Callback("watch", self._zk_events.put, (("read", marker),)))

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
        self._arm_data(path)

    def _arm_data(self, path: str):
        """zkclient's `exists` with a watch; the version seen is the baseline of the next event."""
        stat = self._zkc.exists(path, watch=self._watch_cb)
        self._last_mzxid[path] = stat.mzxid if stat else -1
        return stat

    def _child_event(self, path: str) -> None:
        """zkclient: re-arm (`exists` + `getChildren` with a watch), then call the listener."""
        self._zkc.exists(path, watch=self._watch_cb)
        children = self._zkc.children_maybe(path, watch=self._watch_cb)
        before = self._last_children.get(path, [])
        if self._read_marker is not None and sorted(children) == sorted(before):
            return  # delivered before the new session's re-arming, which read this already
        self._on_children(path, children, before)

    def _on_children(self, path: str, children: list[str], before: list[str]) -> None:
        self._last_children[path] = children
        kind = {ids_dir(self.group): "ids", BROKER_TOPICS: "topics", BROKER_IDS: "brokers"}.get(path, "child")
        self.events.emit(
            "watch",
            kind=kind,
            path=path,
            count=len(children),
            joined=sorted(set(children) - set(before)),
            left=sorted(set(before) - set(children)),
        )
        if kind == "topics":
            self._topic_event(children)
        else:
            self._trigger(kind)

    def _data_event(self, path: str) -> None:
        """zkclient: `exists` re-arms, then `readData`; a deleted topic only logs a warning."""
        before = self._last_mzxid.get(path)
        stat = self._arm_data(path)
        if self._read_marker is not None and (stat.mzxid if stat else -1) == before:
            return  # delivered before the new session's re-arming, which read this already
        if stat is None:
            self.events.emit("watch", kind="topic", path=path, deleted=True)
            log.warning("topic %s was deleted", path)
            return
        if self._zkc.read_maybe(path) is None:
            return
        self.events.emit("watch", kind="topic", path=path, deleted=False)
        self._trigger("topic")

    def _topic_event(self, all_topics: list[str]) -> None:
        """`ZookeeperTopicEventWatcher` → `WildcardStreamsHandler.handleTopicEvent`."""
        allowed = self._allowed_topics(all_topics)
        if allowed != self._wildcard_topics:
            self._wildcard_topics = allowed
            try:
                self._reinitialize()  # subscribes the new topics and rebalances on this thread
            except ConsumerRebalanceFailed as exc:
                self._record_failure(exc)

    def _allowed_topics(self, all_topics: list[str]) -> list[str]:
        filt = self.subscription.filter
        return sorted(t for t in all_topics if filt.allows(t, self.exclude_internal_topics))

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
                    self._handle_state(*item[1:])
                elif item[0] == "read":
                    if item[1] is self._read_marker:
                        self._read_marker = None
                elif item[0] == "child":
                    self._child_event(item[1])
                elif item[0] == "data":
                    self._data_event(item[1])
            except Closing:
                return
            except ZooKeeperNoAuth as exc:  # refused: the member stops (no retry can succeed)
                self._stop_refused(exc, "zk_event_thread")
                return
            except Exception:  # zkclient logs listener errors and carries on
                log.exception("error in the ZooKeeper event thread of %s", self.consumer_id)
                self.events.emit("error", where="zk_event_thread")
            finally:
                self._busy = False
