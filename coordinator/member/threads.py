"""A group member's threads: the heartbeat thread (and the poll timer it enforces), with
`poll_driven=False` the group thread, and with `watch_group=True` the watch thread.

The heartbeat thread keeps the session alive between polls: every `heartbeat_period()` it sends
one heartbeat (`heartbeat(conn, gen)`, a hook: Heartbeat, ServerHeartbeat or
ConsumerGroupHeartbeat) while `heartbeats_now()`, follows the group to a new coordinator, gives
the coordinator up after a session without an answer, and leaves the group when `poll()` was not
called for `max_poll_interval_ms` (Kafka's poll timeout; the caller's next poll() reports the
partitions lost and rejoins). The group thread calls the member's `poll()` work in a loop, so a
member nobody polls rebalances by itself. The watch thread keeps a WatchGroup parked at the
coordinator and has the heartbeat thread beat at once when it is answered `changed`. Part of
`group_member.GroupMember`, whose state they share.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

from coordinator.member.connection import Connection, ConnectionLost, error_name
from coordinator.member.state import Generation, MemberState
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import WatchGroupRequest
from core.errors import GroupshiftError

log = logging.getLogger(__name__)

MAX_WATCH_MS = 30_000  # the longest a WatchGroup asks the node to hold it (the node's own bound)


class MemberThreads:
    """The heartbeat, group and watch threads of a `GroupMember` (see the module docstring)."""

    _cv: Any

    # -- hooks -------------------------------------------------------------------------------------

    def heartbeat_period(self) -> float:
        """Seconds between two heartbeats (called with the lock held, before every wait)."""
        return self.heartbeat_interval_ms / 1000

    def heartbeats_now(self) -> bool:
        """Whether the heartbeat thread beats in the member's current state (lock held)."""
        return self.state in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE)

    def heartbeat(self, conn: Connection, gen: Generation) -> bool:
        """Send one heartbeat for `gen` and act on its answer; True when it was answered without error
        (the thread then refreshes the member's list of nodes if it is due)."""
        raise NotImplementedError

    # -- the threads -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the heartbeat thread (and the group thread unless `poll_driven`); returns at once."""
        with self._cv:
            if self._threads:
                return
            self._last_poll = time.monotonic()
            if self._coordinator is None and self._unknown_since is None:
                self._unknown_since = time.monotonic()
            self._threads = [
                threading.Thread(target=self._heartbeat_loop, name=f"heartbeat-{self.group_id}", daemon=True)
            ]
            if self.watch_group:
                self._threads.append(
                    threading.Thread(target=self._watch_loop, name=f"watch-{self.group_id}", daemon=True)
                )
            if not self.poll_driven:
                self._threads.append(
                    threading.Thread(target=self._group_loop, name=f"group-{self.group_id}", daemon=True)
                )
        for t in self._threads:
            t.start()

    def _heartbeat_loop(self) -> None:
        last = time.monotonic()
        while True:
            with self._cv:
                # The period may change while waiting (incremental: the coordinator asks for sooner);
                # an answer that changes it wakes this wait up, so it counts from the last beat.
                # A WatchGroup answer (`_watch_loop`) asks for the beat now.
                while (
                    not self._closed
                    and not self._beat_now
                    and time.monotonic() < last + self.heartbeat_period()
                ):
                    self._cv.wait(last + self.heartbeat_period() - time.monotonic())
                if self._closed:
                    return
                self._beat_now = False
                last = time.monotonic()
                if self._poll_expired_locked():
                    # Kafka's heartbeat thread enforces max.poll.interval.ms: leave, so the others
                    # take the partitions; the caller's next poll() reports them lost and rejoins.
                    self._leave_on_poll_timeout()
                    continue
                if not self.heartbeats_now():
                    continue
                rediscover = self._coordinator is None or self._ctl_conn is None
                gen, conn = self._generation, self._ctl_conn
            if rediscover:
                # Keep the session alive while the caller processes: follow the group to its new
                # coordinator from here rather than waiting for the next poll().
                self._discover_once()
                continue
            if time.monotonic() - self._last_heartbeat_ok > self.session_timeout_ms / 1000:
                # No successful heartbeat for a whole session: the coordinator is probably gone.
                self.mark_coordinator_unknown("no heartbeat response within the session timeout")
                continue
            if self.heartbeat(conn, gen):
                self._refresh_nodes_if_due(conn)
            self._heartbeat_done()

    def _watch_loop(self) -> None:
        """`watch_group=True` only: WatchGroup (docs/protocol.md) on a connection of its own, to the
        group's coordinator, while the member is stable. A `changed` answer makes the heartbeat
        thread beat at once, so the member hears of a rebalance when it starts rather than up to a
        heartbeat interval later; the heartbeat's answer is acted on as always, and the next watch
        waits for it (or a new generation): at most one `changed` per heartbeat. An error answer or
        a connection that fails is tried again after a pause that doubles up to the heartbeat
        interval; a watch that broke, or NOT_COORDINATOR, makes the member look its coordinator
        up at once."""
        conn: Connection | None = None
        heard: tuple | None = None  # (last heartbeat answered, generation) at the last `changed`
        backoff = self.retry_backoff
        try:
            while True:
                with self._cv:
                    while not self._closed and not self._watching_locked(heard):
                        self._cv.wait(self.heartbeat_period())
                    if self._closed:
                        return
                    gen, coordinator = self._generation, self._coordinator
                    wait_ms = min(self.session_timeout_ms, MAX_WATCH_MS)
                failed: str | None = None
                try:
                    if conn is None or conn.closed or conn.address != coordinator:
                        if conn is not None:
                            conn.close()
                        conn = None
                        conn = self._watch_connection(coordinator)
                    if conn is not None:
                        body = WatchGroupRequest(
                            group_id=self.group_id,
                            member_id=gen.member_id,
                            generation_id=gen.generation_id,
                            max_wait_ms=wait_ms,
                        )
                        resp = conn.request(wire.WATCH_GROUP, body, wait_ms / 1000 + self.request_timeout)
                        if resp.changed:
                            with self._cv:
                                heard = (self._last_heartbeat_ok, self._generation)
                                self.stats["watch_wakeups"] += 1
                                self._beat_now = True
                                self._cv.notify_all()
                        elif resp.error_code:
                            failed = f"WatchGroup answered {error_name(resp.error_code)}"
                            if E.coordinator_moved(resp.error_code):
                                self.mark_coordinator_unknown(failed)
                except ConnectionLost as exc:
                    if conn is not None:
                        conn.close()
                        conn = None
                        if not self._closed:
                            # The coordinator went away under a parked watch: look it up now rather
                            # than at the next heartbeat, which may be an interval away.
                            self.mark_coordinator_unknown(f"the watch connection broke: {exc}")
                    failed = str(exc)
                except GroupshiftError as exc:  # the connection's TLS or SASL was refused
                    failed = str(exc)
                if failed is None:
                    backoff = self.retry_backoff
                else:
                    log.debug("group %s: watch failed: %s", self.group_id, failed)
                    self._sleep(backoff)
                    backoff = min(backoff * 2, max(self.heartbeat_period(), self.retry_backoff))
        finally:
            if conn is not None:
                conn.close()

    def _watch_connection(self, coordinator: tuple[str, int]) -> Connection | None:
        """A new connection to `coordinator` for the watch; None if the coordinator moved meanwhile.
        Raises ConnectionLost (or the security's GroupshiftError)."""
        conn = Connection(*coordinator, self.client_id, security=self.security)
        with self._cv:
            if self._closed or self._coordinator != coordinator:
                conn.close()
                return None
            self._watch_conn = conn
        return conn

    def _watching_locked(self, heard: tuple | None) -> bool:
        """Whether the watch thread should have a WatchGroup out now (lock held)."""
        return (
            self.state is MemberState.STABLE
            and not self._rejoin_needed
            and self._coordinator is not None
            and bool(self._generation.member_id)
            and (self._last_heartbeat_ok, self._generation) != heard
        )

    def heartbeat_now(self) -> None:
        """One heartbeat on the caller's thread, now, if the member is stable (the heartbeat thread
        keeps its own schedule): a caller about to start work that no rebalance can interrupt until
        its next poll() — the Spark source's micro-batch — learns first whether a rebalance started
        since the last beat, instead of up to a heartbeat interval into the work. The answer is acted
        on as the heartbeat thread's would be."""
        with self._cv:
            if self._closed or self.state != MemberState.STABLE or self._rejoin_needed:
                return
            if not self.heartbeats_now():
                return
            gen, conn = self._generation, self._ctl_conn
        if conn is not None:
            self.heartbeat(conn, gen)
            self._heartbeat_done()

    def _heartbeat_done(self) -> None:
        """A heartbeat was answered (or failed): the watch thread, waiting for one, may watch again."""
        if self.watch_group:
            with self._cv:
                self._cv.notify_all()

    def _poll_expired_locked(self) -> bool:
        return (
            not self._poll_timed_out
            and self._in_poll == 0
            and self.state != MemberState.UNJOINED
            and time.monotonic() - self._last_poll > self.max_poll_interval_ms / 1000
        )

    def _leave_on_poll_timeout(self) -> None:
        """Kafka's poll timeout: a member that stopped polling leaves so the others can take over."""
        gen = self._generation
        log.warning(
            "group %s: member %s did not poll for max_poll_interval_ms=%d; leaving the group (processing "
            "is too slow: raise max_poll_interval_ms or lower max_poll_records)",
            self.group_id,
            gen.member_id,
            self.max_poll_interval_ms,
        )
        self._poll_timed_out = True
        if self.group_instance_id is None and gen.member_id:
            try:
                self.leave_group(gen.member_id, "consumer poll timeout has expired")
            except ConnectionLost as exc:
                log.info("LeaveGroup after poll timeout failed: %s", exc)
        self._generation = Generation()
        self._set_state(MemberState.UNJOINED)
        self._rejoin_needed = True
        self._cv.notify_all()

    def _group_loop(self) -> None:
        """`poll_driven=False` only: the member drives itself (as if polled whenever there is work)."""
        try:
            while True:
                with self._cv:
                    if self._closed:
                        return
                    if not self._work_pending_locked():
                        self._cv.wait(1.0)
                        continue
                self._drive(None, None)
        except Exception as exc:  # a bug or a fatal group error: surface it through record_poll()
            if not isinstance(exc, GroupshiftError):
                log.exception("group %s: group thread failed", self.group_id)
            with self._cv:
                self.fatal_error = exc
                self._cv.notify_all()

    def _work_pending_locked(self) -> bool:
        if self._fenced_with_partitions_locked():
            return True
        if self._poll_timed_out:
            return False
        return self._rejoin_needed or self.state != MemberState.STABLE or self._coordinator is None
