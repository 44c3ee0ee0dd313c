"""How a group member finds its coordinator and talks to it outside the join protocol.

`CoordinatorDiscovery` is the part of `group_member.GroupMember` that keeps the member connected
to the group's coordinator (Kafka's `AbstractCoordinator.ensureCoordinatorReady` and
`markCoordinatorUnknown`): FindCoordinator to the nodes it knows, two connections to the node that
answers (a control connection for heartbeats, commits and LeaveGroup; a join connection on which
JoinGroup/SyncGroup may stay parked), and requests on the control connection retried over
coordinator moves (`_control_request`). It looks on the nodes it learned from the cluster
(DescribeCluster on every discovery and every `metadata_max_age_ms`: `nodes.py`), then on those
registered in ZooKeeper, then on its bootstrap addresses, so nodes replaced at new addresses do not
strand it. NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE (`errors.coordinator_moved`) or a dropped
connection make it look again; the membership survives (the group lives in ZooKeeper). ZooKeeper
refusing to list the nodes (NoAuth) is fatal, as a refused group is: `fatal_error` says why.

It shares the member's lock, state and counters (`GroupMember.__init__` sets them up); nothing
here sends a group request.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from coordinator.member.connection import (
    Connection,
    ConnectionLost,
    CoordinatorUnavailable,
    error_name,
    parse_address,
    zk_address,
    zk_bootstrap,
)
from coordinator.member.nodes import KnownNodes
from coordinator.member.state import MemberState
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import DescribeClusterRequest, FindCoordinatorRequest, Message
from core.errors import GroupshiftError
from core.zk import ZooKeeperNoAuth

log = logging.getLogger(__name__)

MAX_METADATA_MAX_AGE_MS = 86_400_000  # a day: how stale a member's list of nodes may grow


class CoordinatorDiscovery:
    """Finds the group's coordinator and keeps the member connected to it (see the module docstring)."""

    group_id: str
    client_id: str
    security: Any  # security.client_config.ClientSecurity or None
    request_timeout: float
    _cv: threading.Condition
    _closed: bool
    _in_flight: Any  # the member's pending JoinGroup/SyncGroup: it dies with the join connection
    _last_heartbeat_ok: float
    state: MemberState
    stats: dict[str, int]
    fatal_error: BaseException | None
    refused: Callable[[str], None]  # the coordinator's ACLs refused the group: fatal
    _fail: Callable[[BaseException], None]  # the member stops for good with this error

    def _init_discovery(self, zk, bootstrap: Sequence[str] | str | None, metadata_max_age_ms: int) -> None:
        """The discovery's own state; `GroupMember.__init__` calls it once, after the lock exists."""
        if isinstance(bootstrap, str):
            bootstrap = [b for b in bootstrap.split(",") if b.strip()]
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
        self._coordinator: tuple[str, int] | None = None
        self._unknown_since: float | None = None  # when the coordinator became unknown
        self._discovery_lock = threading.Lock()  # one FindCoordinator round at a time
        self._join_conn: Connection | None = None
        self._ctl_conn: Connection | None = None
        self._watch_conn: Connection | None = None  # the watch thread's (threads.MemberThreads)

    @property
    def known_nodes(self) -> list[str]:
        """`host:port` of the coordinator nodes this member would ask next: those learned from the
        cluster, then its bootstrap addresses."""
        with self._cv:
            return self._nodes.known()

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
            if self.fatal_error is not None:  # refused by the coordinator's ACLs
                return False
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
        try:
            candidates = self._candidate_nodes()
        except ZooKeeperNoAuth as exc:  # its ACL does not change by itself: no retry can succeed
            self._fail(exc)
            return False
        for host, port in candidates:
            try:
                conn = Connection(host, port, self.client_id, security=self.security)
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
            if resp.error_code == E.GROUP_AUTHORIZATION_FAILED:  # no other node answers otherwise
                self.refused("FindCoordinator")
                return False
            if resp.error_code:
                log.debug("FindCoordinator via %s:%s: %s", host, port, error_name(resp.error_code))
                continue
            try:
                ctl = Connection(resp.host, resp.port, self.client_id, security=self.security)
                join = Connection(resp.host, resp.port, self.client_id, security=self.security)
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
            if self._watch_conn is not None:
                self._watch_conn.abort()  # its thread reconnects to the next coordinator
            self._ctl_conn = self._join_conn = self._watch_conn = None
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
                if self.fatal_error is not None:
                    raise self.fatal_error
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
                # the coordinator moved, is still loading the group, or could not learn whether
                # its write landed (REQUEST_TIMED_OUT: Kafka's consumer looks the coordinator up
                # and sends the same commit again, so the answer it ends with is a certain one)
                retriable = {
                    c
                    for c in codes
                    if E.coordinator_moved(c) or c in (E.COORDINATOR_LOAD_IN_PROGRESS, E.REQUEST_TIMED_OUT)
                }
                if not retriable or not retry_coordinator:
                    return resp
                if any(E.coordinator_moved(c) or c == E.REQUEST_TIMED_OUT for c in codes):
                    self.mark_coordinator_unknown(
                        f"{wire.API_NAMES[api]} answered {error_name(min(retriable))}"
                    )
            if time.monotonic() >= deadline:
                raise CoordinatorUnavailable(
                    f"{wire.API_NAMES[api]} for group {self.group_id!r} got no answer from a coordinator "
                    f"within {self.request_timeout:g}s; check that coordinator nodes are running"
                )
            self._sleep(self.retry_backoff, interruptible=False)

    def _sleep(self, seconds: float, interruptible: bool = True) -> None:
        if not interruptible:
            time.sleep(seconds)
            return
        with self._cv:
            if not self._closed:
                self._cv.wait(seconds)
