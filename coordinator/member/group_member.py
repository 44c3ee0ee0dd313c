"""The generic half of a group member: find the coordinator, join, sync, heartbeat, leave.

`GroupMember` is Kafka's `AbstractCoordinator` (kafka-python's `BaseCoordinator`): it knows the
group protocol but nothing of what the group shares. The consumer's half (assignors, the listener
order, commits, topic watching) is `consumer_member.CoordinatorMember`; scheme two's forms fill in
the same hooks (`server_assigned.py`, the draft; `incremental_member.py`, KIP-848).

The group work — find the coordinator (FindCoordinator to any node: `discovery.py`), join
(MEMBER_ID_REQUIRED and REBALANCE_IN_PROGRESS answered by joining again), let the leader assign
(`perform_assignment`), sync, and tell the listener (`on_join_complete`) — happens in `poll()`, on
the caller's thread, as in Kafka's `ConsumerCoordinator.poll`. A *heartbeat thread* keeps the
session alive between polls and is how the member learns that a rebalance started
(REBALANCE_IN_PROGRESS: it only flags the rejoin, the next `poll()` performs it) or that it was
fenced (`errors.fences_member`: it forgets the generation, so commits fail, and the next `poll()`
reports the partitions lost). It also looks the coordinator up again when it moved, and leaves the
group when `poll()` is not called for `max_poll_interval_ms`. So the partitions a caller holds
change only inside its own `poll()`: between two polls it can always commit what it processed, or
learn (CommitFailed) that it can't. A `poll(timeout)` never waits for the rest of the group longer
than `timeout`: a JoinGroup or SyncGroup the coordinator has not answered yet stays in flight, and
the next `poll()` collects its answer and goes on (Kafka's pending join future), so one thread can
drive several members.

With `poll_driven=False` (benchmarks, tests, tools that only need a member) a *group thread* calls
the same code in a loop, so the member rebalances by itself and callbacks run on that thread;
`pipeline.Consumer` uses `poll_driven=True`.

A member whose owner stops calling `poll()` (or `record_poll()`) for `max_poll_interval_ms` leaves
the group (Kafka's poll timeout) and rejoins on the next call. Static members
(`group_instance_id`) never send LeaveGroup, so a restart within the session timeout causes no
rebalance. When no node answers FindCoordinator for `coordinator_timeout_ms`, `poll()` raises
`CoordinatorUnavailable`. The member's state (`state.MemberState`) changes only through
`_set_state`, which refuses a transition its table does not list.

The class is assembled from three parts: `discovery.CoordinatorDiscovery` (find the coordinator,
the connections, requests retried over coordinator moves), `threads.MemberThreads` (the heartbeat
thread with the poll timer, and the group thread) and this module (the Membership interface, the
join loop, the member's state); `classic.ClassicProtocol` adds scheme three's JoinGroup/SyncGroup/
Heartbeat.

Hooks — what a scheme's member fills in (as kafka-python's `BaseCoordinator` declares
`_perform_assignment`, `_on_join_prepare`, `_on_join_complete`); nothing else is overridden:

* `join_request(gen)` — the request that joins (JoinGroup, ServerJoinGroup);
* `on_join_answer(conn, in_flight, resp)` — what an answer to the join protocol means
  (`classic.py`: JoinGroup then SyncGroup; `server_assigned.py`: ServerJoinGroup);
* `on_join_prepare()` / `on_join_complete(gen, assigned)` — before a join, after a completed one;
* `explain_join_error(code)` — a hint for a fatal JoinGroup/SyncGroup error;
* `join_group(deadline)` — the whole join (default: the loop above; the incremental form
  replaces it with its own convergence);
* `leave_group(member_id, reason)` — leave (default: LeaveGroup);
* declared by `threads.MemberThreads`: `heartbeat_period()`, `heartbeats_now()` and
  `heartbeat(conn, gen)` — when and how the heartbeat thread beats;
* declared by `classic.ClassicProtocol`: `protocol_type()` and `perform_assignment(gen, join)` (the
  leader's job), with `heartbeat_request(gen)` and `heartbeat_error(code)` for its Heartbeat.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from coordinator.member.connection import (
    Connection,
    ConnectionLost,
    CoordinatorUnavailable,
    PendingResponse,
    error_name,
)
from coordinator.member.discovery import CoordinatorDiscovery
from coordinator.member.state import NO_GENERATION, Generation, MemberState
from coordinator.member.threads import MemberThreads
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    LeaveGroupMember,
    LeaveGroupRequest,
    Message,
)
from core.errors import GroupAuthorizationFailed, GroupshiftError, RebalanceFailed
from core.membership import NoopListener, call_listener
from core.types import TopicPartition
from security.client_config import ClientSecurity

log = logging.getLogger(__name__)

FATAL_JOIN_ERRORS = (
    E.INCONSISTENT_GROUP_PROTOCOL,
    E.INVALID_SESSION_TIMEOUT,
    E.INVALID_GROUP_ID,
    E.GROUP_AUTHORIZATION_FAILED,
    E.GROUP_MAX_SIZE_REACHED,
    E.FENCED_INSTANCE_ID,
    E.UNSUPPORTED_VERSION,
    E.INVALID_REQUEST,
    E.UNKNOWN_PARTITIONING_STRATEGY,
)


class JoinStep(Enum):
    """What the join loop does after an answer (`on_join_answer`)."""

    STOP = "stop"  # leave the loop: look the coordinator up, a fatal error, closed
    AGAIN = "again"  # go round again: a request is in flight, or one is to be sent
    STABLE = "stable"  # the member is stable: leave the loop unless a rejoin was asked meanwhile


@dataclass(frozen=True)
class InFlight:
    """The JoinGroup or SyncGroup awaiting its response (Kafka's pending join future)."""

    api: int  # wire.JOIN_GROUP, wire.SYNC_GROUP or wire.SERVER_JOIN_GROUP
    response: PendingResponse
    conn: Connection  # the join connection it went out on
    generation: Generation  # the member's generation when it was sent


class GroupMember(MemberThreads, CoordinatorDiscovery):
    """One member of a coordinator group, whatever the group shares (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        *,
        bootstrap: Sequence[str] | str | None = None,
        zk=None,
        listener: object | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        rebalance_timeout_ms: int | None = None,
        group_instance_id: str | None = None,
        client_id: str = "groupshift",
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        poll_driven: bool = False,
        coordinator_timeout_ms: int = 30_000,
        metadata_max_age_ms: int = 30_000,
        security: ClientSecurity | None = None,
        watch_group: bool = False,
    ):
        if not isinstance(coordinator_timeout_ms, int) or coordinator_timeout_ms <= 0:
            raise GroupshiftError(
                f"coordinator_timeout_ms must be a positive integer (milliseconds), "
                f"not {coordinator_timeout_ms!r}"
            )
        self.group_id = group_id
        self.listener = listener or NoopListener()
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_poll_interval_ms = max_poll_interval_ms
        # The Java consumer sends max.poll.interval.ms as the rebalance timeout.
        self.rebalance_timeout_ms = rebalance_timeout_ms or max_poll_interval_ms
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.retry_backoff = retry_backoff_ms / 1000
        self.request_timeout = request_timeout_ms / 1000
        self.poll_driven = poll_driven
        self.coordinator_timeout = coordinator_timeout_ms / 1000
        self.security = security  # TLS and SASL to the nodes (docs/security.md); None: plaintext
        # WatchGroup on a third connection: hear of a rebalance when it starts, not at the next
        # heartbeat (threads.MemberThreads._watch_loop; docs/consumer.md)
        self.watch_group = bool(watch_group)
        self._beat_now = False  # the watch asks the heartbeat thread for a beat now
        self._init_discovery(zk, bootstrap, metadata_max_age_ms)

        self._cv = threading.Condition(threading.RLock())
        self.state = MemberState.UNJOINED
        self._generation = Generation()
        self._stable_generation = NO_GENERATION  # generation of the partitions the listener owns
        self._owned: set[TopicPartition] = set()
        self._last_assignment: set[TopicPartition] = set()  # survives an eager revocation (sticky)
        self._in_poll = 0  # a poll() is running (its join may outlast max_poll_interval_ms)
        self._in_flight: InFlight | None = None  # survives a poll() whose timeout ran out
        self._retry_at = 0.0  # no JoinGroup before this (monotonic) after a retriable error
        self._rejoin_needed = True
        self._needs_join_prepare = True
        self._closed = False
        self._last_poll = time.monotonic()
        self._poll_timed_out = False
        self._last_heartbeat_ok = time.monotonic()
        self.fatal_error: BaseException | None = None
        self._listener_error: BaseException | None = None
        self._threads: list[threading.Thread] = []
        # Counters an experiment reads (client-side cost of rebalancing).
        self.stats = {
            "joins": 0,
            "syncs": 0,
            "heartbeats": 0,
            "rebalances": 0,
            "zk_requests": 0,
            "coordinator_lookups": 0,
            "node_refreshes": 0,
            "watch_wakeups": 0,
        }

    # -- hooks: what each scheme's member fills in ---------------------------------------------

    def join_request(self, gen: Generation) -> tuple[int, Message]:
        """The request (API key, body) that joins the group as `gen`'s member id."""
        raise NotImplementedError

    def on_join_answer(self, conn: Connection, in_flight: InFlight, resp: Any) -> JoinStep:
        """What an answer to the join protocol (`in_flight`'s request) means for the join loop."""
        raise NotImplementedError

    def on_join_prepare(self) -> None:
        """Before JoinGroup (and once fenced): give up what the protocol gives up. Default: nothing."""

    def on_join_complete(self, gen: Generation, assigned: set[TopicPartition]) -> None:
        """After a completed join: the member holds `assigned` in generation `gen`."""
        raise NotImplementedError

    def explain_join_error(self, code: int) -> str:
        """A hint, for the error a fatal JoinGroup/SyncGroup error raises (default: generic ones)."""
        return {
            E.FENCED_INSTANCE_ID: f"another member uses group_instance_id {self.group_instance_id!r}; "
            "give every static member its own instance id",
            E.INVALID_SESSION_TIMEOUT: f"session_timeout_ms={self.session_timeout_ms} is outside the "
            "coordinator's group.min/max.session.timeout.ms",
            E.GROUP_MAX_SIZE_REACHED: "the group is full (group.max.size)",
        }.get(code, "")

    def join_group(self, deadline: float | None) -> None:
        """Phases two and three until the member is stable again, must look the coordinator up, or
        `deadline` passes (None: no deadline).

        Kafka's `joinGroupIfNeeded(timer)`: when the deadline passes while a JoinGroup or SyncGroup
        is in flight, the request stays in flight and the next call collects its response — same
        member id, no second JoinGroup for the same rebalance — so a `poll(timeout)` never waits
        for the rest of the group longer than its timeout.
        """
        while True:
            with self._cv:
                if self._closed or self._poll_timed_out or self._coordinator is None:
                    return
                conn, in_flight = self._join_conn, self._in_flight
                if in_flight is not None and in_flight.conn is not conn:
                    # Sent to a coordinator we since left: send JoinGroup to the new one.
                    in_flight = self._in_flight = None
            if in_flight is None:
                if conn is None or not self._backoff_elapsed(deadline):
                    return
                in_flight = self._send_join(conn)
                if in_flight is None:
                    return
            resp = self._collect(in_flight, deadline)
            if resp is None:
                return  # the deadline passed (still in flight) or the connection broke
            step = self.on_join_answer(conn, in_flight, resp)
            if step is JoinStep.STOP:
                return
            if step is JoinStep.STABLE:
                with self._cv:
                    done = not self._rejoin_needed
                if done:
                    return

    def leave_group(self, member_id: str, reason: str) -> None:
        """Leave the group (LeaveGroup on the control connection)."""
        body = LeaveGroupRequest(
            group_id=self.group_id,
            members=[
                LeaveGroupMember(member_id=member_id, group_instance_id=self.group_instance_id, reason=reason)
            ],
        )
        with self._cv:
            conn = self._ctl_conn
        if conn is None:
            return
        resp = conn.request(wire.LEAVE_GROUP, body, self.request_timeout)
        log.info(
            "group %s: %s left (%s): %s",
            self.group_id,
            member_id,
            reason,
            error_name(resp.error_code),
        )

    # -- the Membership interface ----------------------------------------------------------------

    @property
    def generation(self) -> int:
        """The generation of the assignment this member currently holds (-1 before the first)."""
        with self._cv:
            return self._stable_generation

    @property
    def protocol_name(self) -> str | None:
        """The assignor the group voted for in this member's latest generation."""
        with self._cv:
            return self._generation.protocol_name

    @property
    def member_id(self) -> str:
        with self._cv:
            return self._generation.member_id

    def assignment(self) -> set[TopicPartition]:
        with self._cv:
            return set(self._owned)

    def record_poll(self) -> None:
        """The consumer polled: reset the poll timer (and rejoin if a poll timeout made us leave).

        Raises the member's fatal error, or the exception a listener callback raised since the
        last call (once)."""
        with self._cv:
            self._last_poll = time.monotonic()
            if self._poll_timed_out:
                self._poll_timed_out = False
                self._rejoin_needed = True
                self._cv.notify_all()
        self._raise_pending()

    def poll(self, timeout: float = 0.0, join_timeout: float | None = None) -> None:
        """Kafka's `ConsumerCoordinator.poll`: reset the poll timer and do the group work here.

        With `poll_driven=True` this is where partitions change hands: lost partitions are
        reported, the coordinator is looked up (retried until `timeout` seconds passed), and a
        pending rebalance goes on — `on_partitions_revoked`, JoinGroup, SyncGroup,
        `on_partitions_assigned`, all on the calling thread. The call returns when `timeout` runs
        out even if the group has not completed the rebalance yet: the JoinGroup or SyncGroup stays
        in flight and the next `poll()` carries on with it (Kafka's `poll(timer)`). `join_timeout`
        (default `timeout`) bounds the wait for JoinGroup/SyncGroup answers alone: a consumer that
        has partitions to fetch passes 0, as Kafka's `poll(Duration)` does, and fetches meanwhile. Raises
        `CoordinatorUnavailable` once no node answered FindCoordinator for `coordinator_timeout_ms`,
        and whatever a listener callback raised. Without `poll_driven` it is `record_poll()`.
        """
        self.record_poll()
        if not self.poll_driven:
            return
        with self._cv:
            self._in_poll += 1
        try:
            now = time.monotonic()
            deadline = now + max(timeout, 0.0)
            self._drive(deadline, deadline if join_timeout is None else now + max(join_timeout, 0.0))
        finally:
            with self._cv:
                self._in_poll -= 1
                self._last_poll = time.monotonic()
        self._raise_pending()
        with self._cv:
            since = self._unknown_since
            if self._coordinator is None and since is not None and self._threads and not self._closed:
                waited = time.monotonic() - since
                if waited >= self.coordinator_timeout:
                    self._unknown_since = time.monotonic()  # the next error after another full timeout
                    raise CoordinatorUnavailable(self._unavailable_message(waited))

    @property
    def rebalance_in_progress(self) -> bool:
        """A rebalance is under way or due: the next `poll()` has group work to do."""
        with self._cv:
            return self._rebalance_due_locked()

    def wait_rebalance_due(self, timeout: float) -> bool:
        """Block until a rebalance is due or under way (`rebalance_in_progress`), at most `timeout`
        seconds; False when none is, or the member is closed. For a caller that polls only between
        units of work that nothing interrupts (the Spark source's micro-batches) but lets a thread of
        its own run the group's work as soon as the group asks for it."""
        with self._cv:
            self._cv.wait_for(lambda: self._closed or self._rebalance_due_locked(), timeout)
            return not self._closed and self._rebalance_due_locked()

    def _rebalance_due_locked(self) -> bool:
        return self._rejoin_needed or self.state != MemberState.STABLE

    def _raise_pending(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error
        with self._cv:
            err, self._listener_error = self._listener_error, None
        if err is not None:
            raise err

    def wait_stable(self, timeout: float) -> bool:
        """Block until the member holds a stable assignment (tests and benchmarks)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while not (self.state == MemberState.STABLE and not self._rejoin_needed):
                if self.fatal_error is not None:
                    raise self.fatal_error
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(min(left, 0.05))
            return True

    def close(self, timeout: float = 10.0) -> None:
        """Revoke the partitions (listener), leave the group (dynamic members) and stop the threads."""
        with self._cv:
            if self._closed and self.state == MemberState.CLOSED:
                return
            self._closed = True
            self._cv.notify_all()
            gen, state, join_conn = self._generation, self.state, self._join_conn
            if self._watch_conn is not None:
                self._watch_conn.abort()  # a parked WatchGroup: its thread ends at once
        dynamic = self.group_instance_id is None
        left = False
        if state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
            # The group thread is parked in JoinGroup/SyncGroup: leaving answers it at once.
            if dynamic and gen.member_id:
                left = self._try_leave(gen.member_id)
            if join_conn is not None:
                join_conn.abort()
        for t in self._threads:
            if t is not threading.current_thread():
                t.join(timeout)
        with self._cv:
            owned, gen = set(self._owned), self._generation
        try:
            if owned:
                lost = gen.generation_id == NO_GENERATION or not gen.member_id
                self._call_listener("on_partitions_lost" if lost else "on_partitions_revoked", owned)
        finally:
            with self._cv:
                self._owned = set()
            if dynamic and gen.member_id and not left:
                self._try_leave(gen.member_id)
            with self._cv:
                self._set_state(MemberState.CLOSED)
                self._cv.notify_all()
                self._drop_connections()

    def _try_leave(self, member_id: str) -> bool:
        try:
            if self._ensure_coordinator(time.monotonic() + self.request_timeout, stop_on_close=False):
                self.leave_group(member_id, "the consumer is being closed")
                return True
        except (ConnectionLost, GroupshiftError) as exc:
            log.info("LeaveGroup failed (%s); the session will expire instead", exc)
        return False

    # -- state changes shared by both threads -------------------------------------------------

    def request_rejoin(self, why: str) -> None:
        with self._cv:
            if not self._rejoin_needed:
                log.debug("group %s: rejoin needed (%s)", self.group_id, why)
            self._rejoin_needed = True
            self._cv.notify_all()

    def _reset_generation(self, why: str) -> None:
        """Forget the member id and generation (fenced): the next join prepare reports partitions lost."""
        with self._cv:
            if self.state == MemberState.CLOSED:
                return  # closed is terminal: a late answer changes nothing
            log.info("group %s: member %s fenced (%s)", self.group_id, self._generation.member_id, why)
            self._generation = Generation()
            self._set_state(MemberState.UNJOINED)
            self._rejoin_needed = True
            self._needs_join_prepare = True  # report the partitions lost before joining again
            self._cv.notify_all()

    # -- the group thread and the poll timer --------------------------------------------------

    def _fenced_with_partitions_locked(self) -> bool:
        gen = self._generation
        return bool(self._owned) and (gen.generation_id == NO_GENERATION or not gen.member_id)

    def _drive(self, deadline: float | None, join_deadline: float | None) -> None:
        """One round of the group work (the body of `poll()`): report partitions lost to a fencing
        or a poll timeout, find the coordinator (until `deadline`), and carry a pending rebalance
        on (until `join_deadline`). None: until found, stable or closed."""
        with self._cv:
            fenced = self._fenced_with_partitions_locked()
        if fenced:
            # The generation is gone (heartbeat or commit answered UNKNOWN_MEMBER_ID /
            # ILLEGAL_GENERATION, or the poll timeout made us leave): the partitions may be someone
            # else's already. Report them lost now, before the caller fetches again.
            self.on_join_prepare()
        with self._cv:
            if self._closed or self._poll_timed_out:
                return
        if not self._ensure_coordinator(deadline):
            return
        with self._cv:
            need = self._rejoin_needed or self.state != MemberState.STABLE
        if need:
            self.join_group(join_deadline)

    # -- the join protocol --------------------------------------------------------------------

    def _backoff_elapsed(self, deadline: float | None) -> bool:
        """Wait out the retry backoff after a failed JoinGroup/SyncGroup (no longer than `deadline`)."""
        wait = self._retry_at - time.monotonic()
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        if wait > 0:
            self._sleep(wait)
        with self._cv:
            return not self._closed and time.monotonic() >= self._retry_at

    def _send_join(self, conn: Connection) -> InFlight | None:
        """Give up what the protocol gives up before joining (once per rebalance), then join."""
        with self._cv:
            prepare, self._needs_join_prepare = self._needs_join_prepare, False
        if prepare:
            self.on_join_prepare()
        with self._cv:
            if self._closed:
                return None
            self._rejoin_needed = False
            self._set_state(MemberState.PREPARING_REBALANCE)
            gen = self._generation
        api, body = self.join_request(gen)
        return self._send(conn, api, body, gen, "joins")

    def _send(self, conn: Connection, api: int, body: Message, gen: Generation, stat: str) -> InFlight | None:
        self.stats[stat] += 1
        try:
            # The coordinator may park it for the whole rebalance timeout; Kafka allows 5 s more.
            pending = conn.send(api, body, self.rebalance_timeout_ms / 1000 + 5)
        except ConnectionLost as exc:
            self.mark_coordinator_unknown(str(exc))
            return None
        in_flight = InFlight(api, pending, conn, gen)
        with self._cv:
            self._in_flight = in_flight
        return in_flight

    def _collect(self, in_flight: InFlight, deadline: float | None) -> Any:
        """The in-flight request's response, or None: the deadline passed first (it stays in flight)
        or the connection broke (the coordinator is looked up again)."""
        timeout = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        try:
            resp = in_flight.response.result(timeout)
        except ConnectionLost as exc:
            with self._cv:
                if self._in_flight is in_flight:
                    self._in_flight = None
            self.mark_coordinator_unknown(str(exc))
            return None
        if resp is not None:
            with self._cv:
                if self._in_flight is in_flight:
                    self._in_flight = None
        return resp

    def _handle_join_error(self, api: str, code: int) -> bool:
        """React to a JoinGroup/SyncGroup error; False when the join loop must stop (rediscover, fatal)."""
        log.debug("group %s: %s answered %s", self.group_id, api, error_name(code))
        if E.fences_member(code):
            self._reset_generation(f"{api} answered {error_name(code)}")
            return True
        if code == E.REBALANCE_IN_PROGRESS:
            with self._cv:
                self._rejoin_needed = True
            return True
        if E.coordinator_moved(code):
            self.mark_coordinator_unknown(f"{api} answered {error_name(code)}")
            self._retry_at = time.monotonic() + self.retry_backoff
            return False
        if code == E.COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_at = time.monotonic() + self.retry_backoff
            return True
        if code == E.GROUP_AUTHORIZATION_FAILED:
            self.refused(api)
            return False
        if code in FATAL_JOIN_ERRORS:
            what = self.explain_join_error(code)
            self._fail(
                RebalanceFailed(f"{api} for group {self.group_id!r} failed: {error_name(code)}. {what}")
            )
            return False
        self._retry_at = time.monotonic() + self.retry_backoff
        return True

    def _call_listener(self, method: str, partitions: set[TopicPartition]) -> None:
        """Call the listener; an exception it raises is logged and re-raised by the next
        `record_poll()` (Kafka rethrows listener errors from poll) instead of killing the group thread."""
        try:
            call_listener(self.listener, method, partitions)
        except Exception as exc:
            log.exception("group %s: rebalance listener %s failed", self.group_id, method)
            with self._cv:
                self._listener_error = exc

    def refused(self, api: str) -> None:
        """The coordinator's ACLs refused this client the group: fatal, as Kafka's consumer makes it."""
        self._fail(
            GroupAuthorizationFailed(
                f"{api} for group {self.group_id!r} failed: GROUP_AUTHORIZATION_FAILED: the coordinator's "
                "ACLs do not let this client use the group; an operator grants it with `groupshift acls add "
                f"--allow-principal User:NAME --operation Read --group {self.group_id}`"
            )
        )

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            self.fatal_error = exc
            self._closed = True
            self._cv.notify_all()

    # -- the member's state ------------------------------------------------------------------------

    def _become_stable_locked(self, gen: Generation) -> None:
        """The member holds its assignment of generation `gen` (the lock held); waiters wake up."""
        self._set_state(MemberState.STABLE)
        self._stable_generation = gen.generation_id
        self._last_heartbeat_ok = time.monotonic()
        self._cv.notify_all()

    def _set_state(self, new: MemberState) -> None:
        """The one way the member's state changes: refuses a transition `state.TRANSITIONS` does not list."""
        with self._cv:
            self.state.check_transition_to(new, self.group_id)
            self.state = new
