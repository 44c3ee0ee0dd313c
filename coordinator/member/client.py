"""Scheme three's consumer side: a group member talking to the coordinator (find the coordinator, join,
sync, heartbeat).

`CoordinatorMember` implements `core.membership.Membership`. The group work — find the
coordinator (FindCoordinator to any node), join (MEMBER_ID_REQUIRED and REBALANCE_IN_PROGRESS
answered by joining again), run the assignor the group's vote selected when it is the leader, sync,
and the listener callbacks — happens in `poll()`, on the caller's thread, as in Kafka's
`ConsumerCoordinator.poll`. A *heartbeat thread* keeps the session alive between polls and is how
the member learns that a rebalance started (REBALANCE_IN_PROGRESS: it only flags the rejoin, the
next `poll()` performs it) or that it was fenced (UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION: it forgets
the generation, so commits fail, and the next `poll()` reports the partitions lost). It also looks
the coordinator up again when it moved, and leaves the group when `poll()` is not called for
`max_poll_interval_ms`. So the partitions a caller holds change only inside its own `poll()`:
between two polls it can always commit what it processed, or learn (CommitFailed) that it can't.
A `poll(timeout)` never waits for the rest of the group longer than `timeout`: a JoinGroup or
SyncGroup the coordinator has not answered yet stays in flight, and the next `poll()` collects
its answer and goes on (Kafka's pending join future), so one thread can drive several members.

`pipeline.Consumer` uses `poll_driven=True`. With the default `poll_driven=False` (benchmarks,
tests, tools that only need a member) a *group thread* calls the same code in a loop, so the
member rebalances by itself and callbacks run on that thread.

Listener callbacks run in Kafka's order:

* eager protocols (range, roundrobin, sticky): `on_partitions_revoked(all)` before JoinGroup,
  `on_partitions_assigned(all)` after SyncGroup;
* cooperative (every configured assignor supports it, e.g. cooperative-sticky): nothing before
  JoinGroup; after SyncGroup `on_partitions_revoked(owned - assigned)` then
  `on_partitions_assigned(assigned - owned)`, and a follow-up rejoin if something was revoked,
  so partitions that stay are never interrupted;
* `on_partitions_lost(owned)` instead of revoked once the member learnt it was fenced.

    member = CoordinatorMember("billing", ["clicks"], zk=zk, assignors=["cooperative-sticky", "range"],
                               listener=my_listener, session_timeout_ms=10_000)
    member.start()
    member.poll(1.0)                              # poll_driven=True: rebalances run in here
    member.commit({TopicPartition("clicks", 0): OffsetAndMetadata(42)}, member.generation)
    member.close()                                # revoke, LeaveGroup (dynamic members only)

With `server_assigned=True` the member is scheme two's (docs/scheme-two.md): it names one strategy
and sends ServerJoinGroup, whose one answer carries its consumer id, the generation and its
partitions (the coordinator assigns; the member never reads ZooKeeper); heartbeats are
ServerHeartbeat, and ILLEGAL_GENERATION there means "rebalance": revoke (commit), then rejoin with
the same consumer id. Offsets, LeaveGroup and FindCoordinator are the same.

A member whose owner stops calling `poll()` (or `record_poll()`) for `max_poll_interval_ms` leaves
the group (Kafka's poll timeout) and rejoins on the next call. Static members
(`group_instance_id`) never send LeaveGroup, so a restart within the session timeout causes no
rebalance. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or a dropped connection make the member
look the coordinator up again; its membership survives (the group lives in ZooKeeper). When no
node answers FindCoordinator for `coordinator_timeout_ms`, `poll()` raises `CoordinatorUnavailable`.
It looks on the nodes it learned from the cluster (DescribeCluster on every discovery and every
`metadata_max_age_ms`: `nodes.py`), then on those registered in ZooKeeper, then on its bootstrap
addresses, so nodes replaced at new addresses do not strand it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kazoo.exceptions import KazooException

from coordinator.assignors.base import Assignor
from coordinator.assignors.consumer_protocol import (
    EAGER,
    PROTOCOL_TYPE,
    SERVER_STRATEGIES,
    by_topic,
    cooperative_changes,
    join_protocols,
    partitions_of,
    perform_assignment,
    rebalance_protocol,
    resolve_assignors,
)
from coordinator.assignors.payloads import decode_assignment
from coordinator.member.connection import (
    Connection,
    ConnectionLost,
    CoordinatorUnavailable,
    PendingResponse,
    error_name,
    parse_address,
    zk_address,
    zk_bootstrap,
    zk_partition_counts,
)
from coordinator.member.nodes import KnownNodes
from coordinator.wire import codec as wire
from coordinator.wire.codec import ErrorCode as E
from coordinator.wire.schema import (
    DescribeClusterRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMember,
    LeaveGroupRequest,
    Message,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
    ServerHeartbeatRequest,
    ServerJoinGroupRequest,
    ServerJoinGroupResponse,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from core.errors import CommitFailed, GroupshiftError, RebalanceFailed
from core.membership import NoopListener, call_listener
from core.types import OffsetAndMetadata, TopicPartition

log = logging.getLogger(__name__)

MAX_METADATA_MAX_AGE_MS = 86_400_000  # a day: how stale a member's list of nodes may grow

NO_GENERATION = -1

# Errors after which a member's generation is gone: its partitions may already be someone else's.
FENCING_ERRORS = (E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION)
COORDINATOR_ERRORS = (E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE)
COMMIT_FENCED = (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.REBALANCE_IN_PROGRESS, E.FENCED_INSTANCE_ID)
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


class MemberState(Enum):
    """Kafka's client-side `MemberState`."""

    UNJOINED = "unjoined"
    PREPARING_REBALANCE = "preparing-rebalance"  # JoinGroup sent
    COMPLETING_REBALANCE = "completing-rebalance"  # JoinGroup answered, SyncGroup pending
    STABLE = "stable"
    CLOSED = "closed"


@dataclass(frozen=True)
class Generation:
    """What a successful JoinGroup gave this member."""

    generation_id: int = NO_GENERATION
    member_id: str = ""
    protocol_name: str | None = None


@dataclass(frozen=True)
class _InFlight:
    """The JoinGroup or SyncGroup awaiting its response (Kafka's pending join future)."""

    api: int  # wire.JOIN_GROUP or wire.SYNC_GROUP
    response: PendingResponse
    conn: Connection  # the join connection it went out on
    generation: Generation  # the member's generation when it was sent


# --- the member ------------------------------------------------------------------------------


class CoordinatorMember:
    """One consumer-group member under scheme three (see the module docstring)."""

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str],
        *,
        bootstrap: Sequence[str] | str | None = None,
        zk=None,
        assignors: Sequence[str | Assignor] = ("range",),
        listener: object | None = None,
        session_timeout_ms: int = 10_000,
        heartbeat_interval_ms: int = 3_000,
        max_poll_interval_ms: int = 300_000,
        rebalance_timeout_ms: int | None = None,
        group_instance_id: str | None = None,
        client_id: str = "groupshift",
        retry_backoff_ms: int = 100,
        request_timeout_ms: int = 30_000,
        partitions_for: Callable[[str], int | None] | None = None,
        rack: str | None = None,
        poll_driven: bool = False,
        coordinator_timeout_ms: int = 30_000,
        server_assigned: bool = False,
        metadata_max_age_ms: int = 30_000,
    ):
        if not assignors:
            raise GroupshiftError("a member needs at least one assignor (partition.assignment.strategy)")
        by_name = resolve_assignors(assignors)  # fails fast with the list of known names
        if server_assigned and (len(by_name) != 1 or next(iter(by_name)) not in SERVER_STRATEGIES):
            raise GroupshiftError(
                f"a server-assigned member names one strategy the coordinator runs "
                f"({', '.join(SERVER_STRATEGIES)}), not {list(by_name)}"
            )
        if not isinstance(coordinator_timeout_ms, int) or coordinator_timeout_ms <= 0:
            raise GroupshiftError(
                f"coordinator_timeout_ms must be a positive integer (milliseconds), "
                f"not {coordinator_timeout_ms!r}"
            )
        if isinstance(bootstrap, str):
            bootstrap = [b for b in bootstrap.split(",") if b.strip()]
        self.group_id = group_id
        self.topics = list(topics)
        self.assignors = list(by_name)  # protocol names, most preferred first
        self._assignors = by_name
        self.protocol = rebalance_protocol(list(by_name.values()))
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
        self.rack = rack
        self.poll_driven = poll_driven
        self.coordinator_timeout = coordinator_timeout_ms / 1000
        self.server_assigned = server_assigned
        self._zk = zk
        self._bootstrap = [parse_address(b) for b in bootstrap or []]
        if not self._bootstrap and zk is None:
            raise GroupshiftError("pass bootstrap='host:port,...' or a ZooKeeper client to find coordinators")
        if (
            isinstance(metadata_max_age_ms, bool)
            or not isinstance(metadata_max_age_ms, int)
            or not 0 < metadata_max_age_ms <= MAX_METADATA_MAX_AGE_MS
        ):
            raise GroupshiftError(
                f"metadata_max_age_ms must be an integer between 1 and {MAX_METADATA_MAX_AGE_MS} "
                f"(milliseconds), not {metadata_max_age_ms!r}"
            )
        self._nodes = KnownNodes(self._bootstrap, metadata_max_age_ms / 1000)
        if partitions_for is None and server_assigned:
            partitions_for = _not_the_leader  # the coordinator assigns
        elif partitions_for is None:
            if zk is None:
                raise GroupshiftError(
                    "pass partitions_for or a ZooKeeper client (the leader needs topic sizes)"
                )
            partitions_for = zk_partition_counts(zk)
        self._partitions_for = partitions_for

        self._cv = threading.Condition(threading.RLock())
        self.state = MemberState.UNJOINED
        self._generation = Generation()
        self._stable_generation = NO_GENERATION  # generation of the partitions the listener owns
        self._owned: set[TopicPartition] = set()
        self._last_assignment: set[TopicPartition] = set()  # survives an eager revocation (sticky)
        self._coordinator: tuple[str, int] | None = None
        self._unknown_since: float | None = None  # when the coordinator became unknown
        self._discovery_lock = threading.Lock()  # one FindCoordinator round at a time
        self._in_poll = 0  # a poll() is running (its join may outlast max_poll_interval_ms)
        self._join_conn: Connection | None = None
        self._in_flight: _InFlight | None = None  # survives a poll() whose timeout ran out
        self._retry_at = 0.0  # no JoinGroup before this (monotonic) after a retriable error
        self._ctl_conn: Connection | None = None
        self._rejoin_needed = True
        self._needs_join_prepare = True
        self._closed = False
        self._last_poll = time.monotonic()
        self._poll_timed_out = False
        self._last_heartbeat_ok = time.monotonic()
        self._leader_counts: dict[str, int] | None = None
        self._watched: set[str] = set()
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
        }
        self.rebalance_listeners: list[Callable[[int, set[TopicPartition]], None]] = []

    # -- Membership interface ------------------------------------------------------------------

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
    def known_nodes(self) -> list[str]:
        """`host:port` of the coordinator nodes this member would ask next: those learned from the
        cluster, then its bootstrap addresses."""
        with self._cv:
            return self._nodes.known()

    @property
    def member_id(self) -> str:
        with self._cv:
            return self._generation.member_id

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
            if not self.poll_driven:
                self._threads.append(
                    threading.Thread(target=self._group_loop, name=f"group-{self.group_id}", daemon=True)
                )
        for t in self._threads:
            t.start()

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
            return self._rejoin_needed or self.state != MemberState.STABLE

    def _raise_pending(self) -> None:
        if self.fatal_error is not None:
            raise self.fatal_error
        with self._cv:
            err, self._listener_error = self._listener_error, None
        if err is not None:
            raise err

    def _unavailable_message(self, waited: float) -> str:
        where = []
        if self._zk is not None:
            where.append(zk_address(self._zk))
        known = self._nodes.known()
        if known:
            where.append("nodes " + ",".join(known))
        at = " and ".join(where) or "no address"
        zk = zk_address(self._zk) if self._zk is not None else "HOST:PORT[/CHROOT]"
        return (
            f"no coordinator node answered FindCoordinator for group {self.group_id!r} at {at} for "
            f"{waited:.0f}s; start one with `groupshift coordinator serve --zk {zk} --node-id N` or check "
            "--zk (and bootstrap); the consumer keeps looking while you keep polling"
        )

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

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int) -> None:
        """OffsetCommit fenced by `generation`; raises `CommitFailed` when the group moved on.

        Retries NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / load-in-progress and dropped
        connections (with rediscovery) for up to the request timeout.
        """
        if not offsets:
            return
        with self._cv:
            gen = self._generation
            standalone = generation == NO_GENERATION and not self._threads
            if standalone:
                # Not a group member (manual assignment): Kafka's commit outside any generation,
                # accepted only while the group has no members.
                gen = Generation()
            elif (
                generation != self._stable_generation or not gen.member_id or self.state == MemberState.CLOSED
            ):
                raise CommitFailed(
                    f"commit for generation {generation} refused: the member holds generation "
                    f"{self._stable_generation} ({self.state.value}); the group rebalanced or fenced this "
                    "member, so these records will be delivered again — keep calling poll() (it rejoins) "
                    "and process what it returns"
                )
        body = offset_commit_request(
            self.group_id, offsets, generation, gen.member_id, None if standalone else self.group_instance_id
        )
        resp = self._control_request(wire.OFFSET_COMMIT, body, retry_coordinator=True)
        errors = {p.error_code for t in resp.topics for p in t.partitions if p.error_code}
        if not errors:
            return
        fenced = errors & set(COMMIT_FENCED)
        if fenced:
            code = min(fenced)
            with self._cv:
                current = self._generation == gen and gen.generation_id == generation
                stable = self.state == MemberState.STABLE
            if code in FENCING_ERRORS and current and stable:
                # With a JoinGroup/SyncGroup in flight the group may just have moved to the generation
                # its answer brings this member: that answer, not the commit, decides.
                self._reset_generation(f"commit answered {error_name(code)}")
            elif code == E.REBALANCE_IN_PROGRESS and current and stable:
                self.request_rejoin("commit answered REBALANCE_IN_PROGRESS")
            raise CommitFailed(
                f"commit refused by the coordinator ({error_name(code)}): generation {generation} is no "
                "longer current; the records will be delivered to the partitions' new owner — keep "
                "polling (the member rejoins) and process the new assignment"
            )
        raise GroupshiftError(f"offset commit failed: {', '.join(sorted(map(error_name, errors)))}")

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (OffsetFetch); None where nothing was committed."""
        partitions = sorted(set(partitions))
        if not partitions:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = OffsetFetchRequest(
            group_id=self.group_id,
            topics=[OffsetFetchTopic(name=t, partition_indexes=ps) for t, ps in topics.items()],
        )
        resp = self._control_request(wire.OFFSET_FETCH, body, retry_coordinator=True, top_level=True)
        if resp.error_code:
            raise GroupshiftError(f"offset fetch failed: {error_name(resp.error_code)}")
        out: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        for t in resp.topics:
            for p in t.partitions:
                off = p.committed_offset
                out[TopicPartition(t.name, p.partition_index)] = None if off < 0 else off
        return out

    def close(self, timeout: float = 10.0) -> None:
        """Revoke the partitions (listener), leave the group (dynamic members) and stop the threads."""
        with self._cv:
            if self._closed and self.state == MemberState.CLOSED:
                return
            self._closed = True
            self._cv.notify_all()
            gen, state, join_conn = self._generation, self.state, self._join_conn
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
                self.state = MemberState.CLOSED
                self._cv.notify_all()
                self._drop_connections()

    def _try_leave(self, member_id: str) -> bool:
        try:
            if self._ensure_coordinator(time.monotonic() + self.request_timeout, stop_on_close=False):
                self._leave(member_id, "the consumer is being closed")
                return True
        except (ConnectionLost, GroupshiftError) as exc:
            log.info("LeaveGroup failed (%s); the session will expire instead", exc)
        return False

    # -- coordinator discovery and requests ------------------------------------------------------

    def _candidate_nodes(self) -> list[tuple[str, int]]:
        registered: list[tuple[str, int]] = []
        if self._zk is not None:
            self.stats["zk_requests"] += 1
            registered = zk_bootstrap(self._zk)
        return self._nodes.candidates(registered)

    def _refresh_nodes(self, conn: Connection) -> None:
        """Learn the live nodes from `conn`'s node (DescribeCluster); a failure changes nothing
        (the caller notices a broken connection on its own request)."""
        self.stats["node_refreshes"] += 1
        try:
            resp = conn.request(wire.DESCRIBE_CLUSTER, DescribeClusterRequest(), self.request_timeout)
        except ConnectionLost as exc:
            log.debug("DescribeCluster via %s:%s failed: %s", *conn.address, exc)
            return
        if resp.error_code:
            log.debug("DescribeCluster via %s:%s: %s", *conn.address, error_name(resp.error_code))
            return
        with self._cv:
            self._nodes.learn([(b.host, b.port) for b in resp.brokers], time.monotonic())

    def _refresh_nodes_if_due(self, conn: Connection) -> None:
        """The heartbeat thread's periodic refresh (Kafka's `metadata.max.age.ms`)."""
        with self._cv:
            due = self._nodes.due(time.monotonic())
        if due:
            self._refresh_nodes(conn)

    def _ensure_coordinator(self, deadline: float | None = None, stop_on_close: bool = True) -> bool:
        """Phase one: find the group's coordinator and connect to it.

        False when the member closed meanwhile (`stop_on_close`) or `deadline` passed.
        """
        while True:
            with self._cv:
                if (stop_on_close and self._closed) or self.state == MemberState.CLOSED:
                    return False
                if self._coordinator is not None and self._ctl_conn is not None and not self._ctl_conn.closed:
                    return True
            if self._discover_once():
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False
            self._sleep(self.retry_backoff, interruptible=stop_on_close)

    def _discover_once(self) -> bool:
        """One FindCoordinator round over the known nodes; True when connected to the coordinator.

        The caller's thread and the heartbeat thread may both look; one round runs at a time and a
        round that finds the coordinator already known (the other thread found it) stops at once."""
        with self._discovery_lock:
            with self._cv:
                if self._coordinator is not None and self._ctl_conn is not None and not self._ctl_conn.closed:
                    return True
            return self._find_coordinator()

    def _find_coordinator(self) -> bool:
        self.stats["coordinator_lookups"] += 1
        for host, port in self._candidate_nodes():
            try:
                conn = Connection(host, port, self.client_id)
                try:
                    resp = conn.request(
                        wire.FIND_COORDINATOR,
                        FindCoordinatorRequest(key=self.group_id, key_type=0),
                        self.request_timeout,
                    )
                    if not resp.error_code:
                        self._refresh_nodes(conn)  # every discovery brings the node list up to date
                finally:
                    conn.close()
            except ConnectionLost as exc:
                log.debug("FindCoordinator via %s:%s failed: %s", host, port, exc)
                continue
            if resp.error_code:
                log.debug("FindCoordinator via %s:%s: %s", host, port, error_name(resp.error_code))
                continue
            try:
                ctl = Connection(resp.host, resp.port, self.client_id)
                join = Connection(resp.host, resp.port, self.client_id)
            except ConnectionLost as exc:
                log.debug("coordinator %s:%s unreachable: %s", resp.host, resp.port, exc)
                continue
            with self._cv:
                self._drop_connections()
                self._coordinator = (resp.host, resp.port)
                self._ctl_conn, self._join_conn = ctl, join
                self._unknown_since = None
                self._last_heartbeat_ok = time.monotonic()
                self._cv.notify_all()
            log.info(
                "group %s: coordinator is node %s at %s:%s",
                self.group_id,
                resp.node_id,
                resp.host,
                resp.port,
            )
            return True
        return False

    def _drop_connections(self) -> None:
        with self._cv:
            for conn in (self._ctl_conn, self._join_conn):
                if conn is not None:
                    conn.close()
            self._ctl_conn = self._join_conn = None
            self._in_flight = None  # its connection is gone: the next join sends JoinGroup again
            self._coordinator = None
            if self._unknown_since is None:
                self._unknown_since = time.monotonic()

    def mark_coordinator_unknown(self, why: str) -> None:
        with self._cv:
            if self._coordinator is None:
                return
            log.info(
                "group %s: coordinator %s unknown (%s); looking it up again",
                self.group_id,
                self._coordinator,
                why,
            )
            self._drop_connections()
            self._cv.notify_all()

    def _control_request(
        self, api: int, body: Message, retry_coordinator: bool, top_level: bool = False
    ) -> Any:
        """A request on the control connection, retried over coordinator moves until the timeout."""
        deadline = time.monotonic() + self.request_timeout
        while True:
            if not self._ensure_coordinator(deadline, stop_on_close=False):
                raise CoordinatorUnavailable(
                    f"{wire.API_NAMES[api]} failed: " + self._unavailable_message(self.request_timeout)
                )
            with self._cv:
                conn = self._ctl_conn
            if conn is None:
                continue
            try:
                resp = conn.request(api, body, self.request_timeout)
            except ConnectionLost as exc:
                self.mark_coordinator_unknown(str(exc))
                resp = None
            if resp is not None:
                codes = (
                    {resp.error_code}
                    if top_level
                    else {p.error_code for t in resp.topics for p in t.partitions}
                )
                retriable = codes & {
                    E.NOT_COORDINATOR,
                    E.COORDINATOR_NOT_AVAILABLE,
                    E.COORDINATOR_LOAD_IN_PROGRESS,
                }
                if not retriable or not retry_coordinator:
                    return resp
                if codes & set(COORDINATOR_ERRORS):
                    self.mark_coordinator_unknown(
                        f"{wire.API_NAMES[api]} answered {error_name(min(retriable))}"
                    )
            if time.monotonic() >= deadline:
                raise CoordinatorUnavailable(
                    f"{wire.API_NAMES[api]} for group {self.group_id!r} got no answer from a coordinator "
                    f"within {self.request_timeout:g}s; check that coordinator nodes are running"
                )
            self._sleep(self.retry_backoff, interruptible=False)

    def _leave(self, member_id: str, reason: str) -> None:
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

    def _sleep(self, seconds: float, interruptible: bool = True) -> None:
        if not interruptible:
            time.sleep(seconds)
            return
        with self._cv:
            if not self._closed:
                self._cv.wait(seconds)

    # -- state changes shared by both threads ---------------------------------------------------

    def request_rejoin(self, why: str) -> None:
        with self._cv:
            if not self._rejoin_needed:
                log.debug("group %s: rejoin needed (%s)", self.group_id, why)
            self._rejoin_needed = True
            self._cv.notify_all()

    def _reset_generation(self, why: str) -> None:
        """Forget the member id and generation (fenced): the next join prepare reports partitions lost."""
        with self._cv:
            log.info("group %s: member %s fenced (%s)", self.group_id, self._generation.member_id, why)
            self._generation = Generation()
            self.state = MemberState.UNJOINED
            self._rejoin_needed = True
            self._needs_join_prepare = True  # report the partitions lost before joining again
            self._cv.notify_all()

    # -- the group thread --------------------------------------------------------------------------

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
            self._on_join_prepare()
        with self._cv:
            if self._closed or self._poll_timed_out:
                return
        if not self._ensure_coordinator(deadline):
            return
        with self._cv:
            need = self._rejoin_needed or self.state != MemberState.STABLE
        if need:
            self._join_group_if_needed(join_deadline)

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
                self._leave(gen.member_id, "consumer poll timeout has expired")
            except ConnectionLost as exc:
                log.info("LeaveGroup after poll timeout failed: %s", exc)
        self._generation = Generation()
        self.state = MemberState.UNJOINED
        self._rejoin_needed = True
        self._cv.notify_all()

    def _on_join_prepare(self) -> None:
        """Before JoinGroup: revoke (eager), revoke unsubscribed topics (cooperative), or report lost."""
        with self._cv:
            owned, gen = set(self._owned), self._generation
        if not owned:
            return
        if gen.generation_id == NO_GENERATION or not gen.member_id:
            revoked, method = owned, "on_partitions_lost"
        elif self.protocol == EAGER:
            revoked, method = owned, "on_partitions_revoked"
        else:
            revoked = {tp for tp in owned if tp.topic not in self.topics}
            method = "on_partitions_revoked"
        if revoked:
            self._call_listener(method, revoked)
            with self._cv:
                self._owned -= revoked

    def _join_group_if_needed(self, deadline: float | None) -> None:
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
            if in_flight.api == wire.JOIN_GROUP:
                if not self._on_join_response(conn, in_flight, resp):
                    return
            elif in_flight.api == wire.SERVER_JOIN_GROUP:
                if not self._on_server_join_response(in_flight, resp):
                    return
                with self._cv:
                    done = not self._rejoin_needed
                if done:
                    return
            elif self._on_sync_response(in_flight, resp):
                with self._cv:
                    done = not self._rejoin_needed
                if done:
                    return

    def _backoff_elapsed(self, deadline: float | None) -> bool:
        """Wait out the retry backoff after a failed JoinGroup/SyncGroup (no longer than `deadline`)."""
        wait = self._retry_at - time.monotonic()
        if deadline is not None:
            wait = min(wait, deadline - time.monotonic())
        if wait > 0:
            self._sleep(wait)
        with self._cv:
            return not self._closed and time.monotonic() >= self._retry_at

    def _send_join(self, conn: Connection) -> _InFlight | None:
        """Revoke what the protocol revokes before joining (once per rebalance), then send JoinGroup."""
        with self._cv:
            prepare, self._needs_join_prepare = self._needs_join_prepare, False
        if prepare:
            self._on_join_prepare()
        with self._cv:
            if self._closed:
                return None
            self._rejoin_needed = False
            self.state = MemberState.PREPARING_REBALANCE
            gen = self._generation
            owned = set(self._owned)
            stable_gen = self._stable_generation
            previous = set(self._last_assignment)
        if self.server_assigned:
            server_body = ServerJoinGroupRequest(
                group_id=self.group_id,
                consumer_id=gen.member_id,
                session_timeout_ms=self.session_timeout_ms,
                topics=list(self.topics),
                strategy=self.assignors[0],
                owned=by_topic(previous),
            )
            return self._send(conn, wire.SERVER_JOIN_GROUP, server_body, gen, "joins")
        body = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=gen.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=join_protocols(
                list(self._assignors.values()),
                self.topics,
                owned,
                stable_gen,
                self.rack,
                previous=self._last_assignment,
            ),
            reason=None,
        )
        return self._send(conn, wire.JOIN_GROUP, body, gen, "joins")

    def _send(
        self, conn: Connection, api: int, body: Message, gen: Generation, stat: str
    ) -> _InFlight | None:
        self.stats[stat] += 1
        try:
            # The coordinator may park it for the whole rebalance timeout; Kafka allows 5 s more.
            pending = conn.send(api, body, self.rebalance_timeout_ms / 1000 + 5)
        except ConnectionLost as exc:
            self.mark_coordinator_unknown(str(exc))
            return None
        in_flight = _InFlight(api, pending, conn, gen)
        with self._cv:
            self._in_flight = in_flight
        return in_flight

    def _collect(self, in_flight: _InFlight, deadline: float | None) -> Any:
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

    def _on_join_response(self, conn: Connection, in_flight: _InFlight, resp: JoinGroupResponse) -> bool:
        """Phase two's answer: a generation (then the leader assigns and SyncGroup goes out at once)
        or an error. False when the join loop must stop (look the coordinator up, fatal error)."""
        code = resp.error_code
        if code == E.MEMBER_ID_REQUIRED:
            with self._cv:
                self._generation = Generation(NO_GENERATION, resp.member_id, None)
            return True
        if code:
            return self._handle_join_error("JoinGroup", code)
        if resp.protocol_type not in (None, PROTOCOL_TYPE):
            self._fail(RebalanceFailed(f"JoinGroup answered protocol type {resp.protocol_type!r}"))
            return False
        with self._cv:
            if self._closed:
                return False
            if self.state != MemberState.PREPARING_REBALANCE or self._generation != in_flight.generation:
                # Fenced or left (poll timeout) while the JoinGroup was in flight: join afresh.
                log.info("group %s: JoinGroup answered after the member left; joining again", self.group_id)
                self._rejoin_needed = True
                return True
            gen = self._generation = Generation(resp.generation_id, resp.member_id, resp.protocol_name)
            self.state = MemberState.COMPLETING_REBALANCE
            self._last_heartbeat_ok = time.monotonic()  # a long join phase is not a dead coordinator
            self._cv.notify_all()
        return self._send_sync(conn, gen, resp)

    def _on_server_join_response(self, in_flight: _InFlight, resp: ServerJoinGroupResponse) -> bool:
        """Scheme two's one answer: consumer id, generation and partitions. False when the join loop
        must stop (look the coordinator up, fatal error)."""
        code = resp.error_code
        if code == E.REBALANCE_IN_PROGRESS and resp.consumer_id:
            # The coordinator admitted us (it took the MEMBER_ID_REQUIRED round trip for us) and
            # started another rebalance before answering: rejoin under that id, or it waits for
            # the member it admitted until the session timeout and we join as a stranger.
            with self._cv:
                if self._generation == in_flight.generation and not self._generation.member_id:
                    self._generation = Generation(NO_GENERATION, resp.consumer_id, None)
        if code:
            return self._handle_join_error("ServerJoinGroup", code)
        assigned = partitions_of(resp.assignment)
        with self._cv:
            if self._closed:
                return False
            if self.state != MemberState.PREPARING_REBALANCE or self._generation != in_flight.generation:
                log.info(
                    "group %s: ServerJoinGroup answered after the member left; joining again", self.group_id
                )
                self._rejoin_needed = True
                return True
            gen = self._generation = Generation(resp.generation_id, resp.consumer_id, resp.strategy)
            self.state = MemberState.STABLE
            self._stable_generation = gen.generation_id
            self._last_heartbeat_ok = time.monotonic()
            self._cv.notify_all()
        self._on_join_complete(gen, assigned)
        return True

    def _handle_join_error(self, api: str, code: int) -> bool:
        """React to a JoinGroup/SyncGroup error; False when the join loop must stop (rediscover, fatal)."""
        log.debug("group %s: %s answered %s", self.group_id, api, error_name(code))
        if code in FENCING_ERRORS:
            self._reset_generation(f"{api} answered {error_name(code)}")
            return True
        if code == E.REBALANCE_IN_PROGRESS:
            with self._cv:
                self._rejoin_needed = True
            return True
        if code in COORDINATOR_ERRORS:
            self.mark_coordinator_unknown(f"{api} answered {error_name(code)}")
            self._retry_at = time.monotonic() + self.retry_backoff
            return False
        if code == E.COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_at = time.monotonic() + self.retry_backoff
            return True
        if code in FATAL_JOIN_ERRORS:
            what = {
                E.FENCED_INSTANCE_ID: f"another member uses group_instance_id {self.group_instance_id!r}; "
                "give every static member its own instance id",
                E.INCONSISTENT_GROUP_PROTOCOL: f"the group's members use assignors none of which match "
                f"{self.assignors}; list an assignor the other members use",
                E.INVALID_SESSION_TIMEOUT: f"session_timeout_ms={self.session_timeout_ms} is outside the "
                "coordinator's group.min/max.session.timeout.ms",
                E.GROUP_MAX_SIZE_REACHED: "the group is full (group.max.size)",
                E.UNKNOWN_PARTITIONING_STRATEGY: f"the coordinator has no strategy {self.assignors[0]!r}",
            }.get(code, "")
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

    def _fail(self, exc: BaseException) -> None:
        with self._cv:
            self.fatal_error = exc
            self._closed = True
            self._cv.notify_all()

    def _send_sync(self, conn: Connection, gen: Generation, join: JoinGroupResponse) -> bool:
        """Phase three: the leader assigns; everyone sends SyncGroup. False when the loop must stop."""
        assignments: list[SyncGroupAssignment] = []
        if join.leader == gen.member_id and join.members:
            try:
                per_member, counts = perform_assignment(
                    gen.protocol_name,
                    join.members,
                    self._partitions_for,
                    self._assignors.get(gen.protocol_name),
                )
            except KazooException as exc:
                # ZooKeeper is away (topic sizes unreadable): not the assignor's fault, join again.
                log.warning(
                    "group %s: the leader cannot read topic sizes from ZooKeeper (%s); joining again",
                    self.group_id,
                    type(exc).__name__,
                )
                self._retry_at = time.monotonic() + self.retry_backoff
                return True
            except Exception as exc:
                self._fail(RebalanceFailed(f"the leader's assignor {gen.protocol_name!r} failed: {exc}"))
                return False
            self.stats["zk_requests"] += len(counts)
            assignments = [SyncGroupAssignment(member_id=m, assignment=a) for m, a in per_member.items()]
            with self._cv:
                self._leader_counts = counts
            self._watch_topics(counts)
        else:
            with self._cv:
                self._leader_counts = None
        body = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=gen.generation_id,
            member_id=gen.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocol_name=gen.protocol_name,
            assignments=assignments,
        )
        return self._send(conn, wire.SYNC_GROUP, body, gen, "syncs") is not None

    def _on_sync_response(self, in_flight: _InFlight, resp: SyncGroupResponse) -> bool:
        """SyncGroup's answer; True when the member is stable in the generation it synced."""
        gen = in_flight.generation
        code = resp.error_code
        if code:
            self._handle_join_error("SyncGroup", code)
            return False
        assigned = set(decode_assignment(resp.assignment).partitions)
        with self._cv:
            if self._closed or self._generation != gen:
                return False
            self.state = MemberState.STABLE
            self._stable_generation = gen.generation_id
            self._last_heartbeat_ok = time.monotonic()
            self._cv.notify_all()
        self._on_join_complete(gen, assigned)
        return True

    def _on_join_complete(self, gen: Generation, assigned: set[TopicPartition]) -> None:
        """After SyncGroup: tell the listener, in Kafka's order, what changed."""
        self.stats["rebalances"] += 1
        self._last_assignment = set(assigned)
        with self._cv:
            owned = set(self._owned)
        unsubscribed = {tp for tp in assigned if tp.topic not in self.topics}
        if unsubscribed:
            self.request_rejoin(f"assignment {sorted(unsubscribed)} does not match the subscription")
        if self.protocol == EAGER:
            with self._cv:
                self._owned = set(assigned)
                self._stable_generation = gen.generation_id
                self._needs_join_prepare = True
            self._call_listener("on_partitions_assigned", assigned)
        else:
            revoked, added = cooperative_changes(owned, assigned)
            if revoked:
                self._call_listener("on_partitions_revoked", revoked)
            with self._cv:
                self._owned = (owned - revoked) | added
                self._stable_generation = gen.generation_id
                self._needs_join_prepare = True
            self._call_listener("on_partitions_assigned", added)
            if revoked:
                # The revoked partitions go to their new owners in a follow-up rebalance (KIP-429).
                self.request_rejoin(f"revoked {len(revoked)} partitions for their new owners")
        for fn in list(self.rebalance_listeners):
            fn(gen.generation_id, set(assigned))
        log.info(
            "group %s: %s stable at generation %d with %d partitions",
            self.group_id,
            gen.member_id,
            gen.generation_id,
            len(assigned),
        )

    def _watch_topics(self, counts: Mapping[str, int]) -> None:
        """The leader rejoins when a subscribed topic's partition count changes (metadata refresh)."""
        if self._zk is None:
            return
        from topics.registry import topic_path

        for topic in self.topics:
            if topic in self._watched:
                continue
            self._watched.add(topic)
            self.stats["zk_requests"] += 1
            self._zk.DataWatch(topic_path(topic), self._partition_count_watcher(topic))

    def _partition_count_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            with self._cv:
                if self._closed:
                    return False  # ends the watch
                used = self._leader_counts
            if used is None or data is None:
                return None
            try:
                n = len(json.loads(data)["partitions"])
            except (ValueError, KeyError, TypeError):
                return None
            if used.get(topic, 0) != n:
                self.request_rejoin(f"topic {topic} now has {n} partitions")
            return None

        return changed

    # -- the heartbeat thread --------------------------------------------------------------------

    def _heartbeat_loop(self) -> None:
        interval = self.heartbeat_interval_ms / 1000
        next_beat = time.monotonic() + interval
        while True:
            with self._cv:
                while not self._closed and time.monotonic() < next_beat:
                    self._cv.wait(next_beat - time.monotonic())
                if self._closed:
                    return
                next_beat = time.monotonic() + interval
                if self._poll_expired_locked():
                    # Kafka's heartbeat thread enforces max.poll.interval.ms: leave, so the others
                    # take the partitions; the caller's next poll() reports them lost and rejoins.
                    self._leave_on_poll_timeout()
                    continue
                if self.state not in (MemberState.STABLE, MemberState.COMPLETING_REBALANCE):
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
            if self.server_assigned:
                api, body = (
                    wire.SERVER_HEARTBEAT,
                    ServerHeartbeatRequest(
                        group_id=self.group_id, generation_id=gen.generation_id, consumer_id=gen.member_id
                    ),
                )
            else:
                api, body = (
                    wire.HEARTBEAT,
                    HeartbeatRequest(
                        group_id=self.group_id,
                        generation_id=gen.generation_id,
                        member_id=gen.member_id,
                        group_instance_id=self.group_instance_id,
                    ),
                )
            self.stats["heartbeats"] += 1
            try:
                resp = conn.request(api, body, max(interval, self.session_timeout_ms / 1000))
            except ConnectionLost as exc:
                self.mark_coordinator_unknown(str(exc))
                continue
            code = resp.error_code
            if self.server_assigned and code == E.ILLEGAL_GENERATION:
                code = E.REBALANCE_IN_PROGRESS  # the draft's "rebalance": revoke, commit, rejoin
            with self._cv:
                if self._generation != gen:
                    continue  # answered for a generation we already left behind
                if code in (E.NONE, E.REBALANCE_IN_PROGRESS):
                    self._last_heartbeat_ok = time.monotonic()
            if code == E.NONE:
                self._refresh_nodes_if_due(conn)
                continue
            if code == E.REBALANCE_IN_PROGRESS:
                self.request_rejoin("heartbeat answered REBALANCE_IN_PROGRESS")
            elif code in FENCING_ERRORS:
                self._reset_generation(f"heartbeat answered {error_name(code)}")
            elif code in COORDINATOR_ERRORS:
                self.mark_coordinator_unknown(f"heartbeat answered {error_name(code)}")
            elif code == E.FENCED_INSTANCE_ID:
                self._fail(
                    RebalanceFailed(
                        f"group {self.group_id!r}: another member took over group_instance_id "
                        f"{self.group_instance_id!r}; this one is fenced and stops"
                    )
                )
            else:
                log.warning("group %s: heartbeat answered %s", self.group_id, error_name(code))


def _not_the_leader(topic: str) -> int | None:
    raise AssertionError("a server-assigned member never assigns")


def offset_commit_request(
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
    generation: int,
    member_id: str,
    group_instance_id: str | None = None,
) -> OffsetCommitRequest:
    """OffsetCommit for `offsets` (next offsets to read), per topic in partition order."""
    topics: dict[str, list[OffsetCommitPartition]] = {}
    for tp, om in sorted(offsets.items()):
        off, meta = (om.offset, om.metadata) if isinstance(om, OffsetAndMetadata) else (int(om), "")
        topics.setdefault(tp.topic, []).append(
            OffsetCommitPartition(partition_index=tp.partition, committed_offset=off, committed_metadata=meta)
        )
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=[OffsetCommitTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )
