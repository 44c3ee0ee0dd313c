"""The coordinator node: asyncio TCP server around the pure core, shard leadership, timers, metrics.

One `CoordinatorNode` per process. It registers in ZooKeeper, leads some of the `shards` (a
group's shard is Kafka's `abs(java_hash(group)) % shards`), loads the groups of each shard it
takes (COORDINATOR_LOAD_IN_PROGRESS meanwhile) and answers NOT_COORDINATOR for groups of shards
it does not lead. Requests of one connection are answered in order, one at a time: a parked
JoinGroup/SyncGroup (or an OffsetCommit waiting for its ZooKeeper write) holds back the later
requests of its connection, never those of other connections.

    node = CoordinatorNode(NodeConfig(zk="127.0.0.1:2181", node_id=1, port=0))
    host, port = await node.start()
    await node.wait_stopped()          # node.request_stop() from a signal handler

Shard placement and leadership are `shards.ShardLeadership`; each connection is a
`connection.Connection`; the settings are `config.NodeConfig`.

ZooKeeper outages (docs/recovery.md): while the session is SUSPENDED the node answers every group
request with COORDINATOR_NOT_AVAILABLE and fires no timers, but keeps its shards; if the
connection comes back within the session timeout, in the same session, it serves on as before.
Once the session is LOST, or SUSPENDED for longer than the session timeout (another node may have
taken its shards: Curator's rule), the node gives its shards up locally, at once. When ZooKeeper
answers again it re-registers if the session is new, and claims its preferred shards again with
new epochs (reloading their groups and offsets) or hands the others over; an epoch is only ever
used in the session that claimed it, so a write with a stale epoch is refused by ZooKeeper.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from typing import TYPE_CHECKING, Any

from kazoo.protocol.states import KazooState

from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.messages import (
    DeleteGroup,
    DeleteOffsets,
    Discarded,
    Respond,
    StateChanged,
    Write,
    WriteGroupMetadata,
    WriteOffsets,
)
from coordinator.group.state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
)
from coordinator.node.config import NodeConfig
from coordinator.node.connection import Connection, Pending, error_of
from coordinator.node.metrics import Metrics, serve_metrics
from coordinator.node.shards import ShardLeadership, ShardStatus
from coordinator.node.store import (
    CoordinatorStore,
    Fenced,
    StoreError,
    StoreUnavailable,
    WriteTooLarge,
)
from coordinator.server_side.assigned import ServerAssignedCoordinator, WatchTopics
from coordinator.server_side.incremental_coordinator import IncrementalCoordinator
from coordinator.wire import codec as P
from coordinator.wire.errors import (
    COORDINATOR_NOT_AVAILABLE,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
)
from coordinator.wire.schema import (
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribeClusterBroker,
    DescribeClusterResponse,
    DescribeGroupsResponse,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsResponse,
    Message,
)
from core.errors import GroupshiftError
from core.zk import connect
from topics.registry import decode_assignment, topic_path

if TYPE_CHECKING:
    from coordinator.node.offsets_mirror import OffsetsMirror

log = logging.getLogger(__name__)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _unavailable_body(api: int, body: Any) -> Message:
    """COORDINATOR_NOT_AVAILABLE in the shape of `api`'s response (the node has lost ZooKeeper)."""
    code = COORDINATOR_NOT_AVAILABLE
    if api == P.DESCRIBE_GROUPS:
        return DescribeGroupsResponse(groups=[P.described_error(g, code) for g in body.groups])
    if api == P.LIST_GROUPS:
        return ListGroupsResponse(error_code=code)
    if api == P.DELETE_GROUPS:
        return DeleteGroupsResponse(
            results=[DeleteGroupsResult(group_id=g, error_code=code) for g in body.groups_names]
        )
    return P.precheck_error_body(api, body, code, "this node has lost ZooKeeper")


# ---------------------------------------------------------------------------------------------
# The node


class CoordinatorNode:
    """A coordinator node: ZooKeeper registration and shards, the core, the TCP and metrics servers."""

    def __init__(self, config: NodeConfig):
        self.config = config
        self.metrics = Metrics()
        # The classic core, which also serves scheme two's groups: server-assigned (the draft)
        # and incremental (KIP-848).
        core_config = config.core_config()
        self.core = IncrementalCoordinator(
            ServerAssignedCoordinator(GroupCoordinator(core_config)),
            min_session_timeout_ms=core_config.group_min_session_timeout_ms,
            max_session_timeout_ms=core_config.group_max_session_timeout_ms,
        )
        self._topic_watches: set[str] = set()
        self.connections: set[Connection] = set()
        self.leadership = ShardLeadership(self)
        self.accepting = False
        self.serving = False  # False while the ZooKeeper session is suspended or lost
        self.zk = None
        self.store: CoordinatorStore | None = None
        self.host = config.host
        self.port = config.port
        self.metrics_port: int | None = None
        self.kafka_endpoint: tuple[str, int] | None = None  # the Kafka listener's advertised host, port
        self.offsets_mirror: OffsetsMirror | None = None  # commits into __consumer_offsets (Kafka tooling)
        self._kafka_server: asyncio.AbstractServer | None = None
        self._server: asyncio.AbstractServer | None = None
        self._metrics_server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._suspended_since: float | None = None
        self._need_register = False
        self._session: int | None = None  # the ZooKeeper session our shards were claimed in
        self._state_counts: dict[GroupState, int] = {}

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> tuple[str, int]:
        """Connect, register, start serving; return the address clients should use."""
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self.zk = await asyncio.to_thread(connect, cfg.zk, session_timeout=cfg.zk_session_timeout_ms / 1000)
        self.store = CoordinatorStore(self.zk, cfg.node_id, cfg.shards)
        await self.store.start(self._loop)
        try:
            self._server = await self._loop.create_server(
                lambda: Connection(self), cfg.host, cfg.port, backlog=1024
            )
        except OSError as exc:
            raise await self._bind_failed(cfg.host, cfg.port, "--listen", exc) from None
        sock = self._server.sockets[0].getsockname()
        self.port = sock[1]
        self.host = cfg.advertised_host or cfg.host
        if cfg.metrics_port is not None:
            try:
                self._metrics_server = await serve_metrics(
                    self.metrics, cfg.metrics_host, cfg.metrics_port, self._gauges
                )
            except OSError as exc:
                raise await self._bind_failed(
                    cfg.metrics_host, cfg.metrics_port, "--metrics-port", exc
                ) from None
            self.metrics_port = self._metrics_server.sockets[0].getsockname()[1]
        if cfg.kafka_port is not None:
            # The Kafka listener's data path (pyarrow, the log) is imported only by nodes that have one.
            from coordinator.node.kafka_listener import KafkaListener
            from coordinator.node.offsets_mirror import OffsetsMirror
            from topics.log import Log

            try:
                self._kafka_server = await KafkaListener(self).start(cfg.kafka_host, cfg.kafka_port)
            except OSError as exc:
                raise await self._bind_failed(cfg.kafka_host, cfg.kafka_port, "--kafka-listen", exc) from None
            kafka_port = self._kafka_server.sockets[0].getsockname()[1]
            self.kafka_endpoint = (cfg.advertised_host or cfg.kafka_host, kafka_port)
            self.offsets_mirror = OffsetsMirror(Log(cfg.data), self.zk, cfg.node_id, self.metrics)
        await self.store.register(self.host, self.port, kafka=self.kafka_endpoint)
        self._session = self.store.session_id
        self.zk.add_listener(lambda state: self._loop.call_soon_threadsafe(self._on_zk_state, state))
        self.store.add_listener(self._wake.set)
        self.store.watch()
        self.accepting = True
        self.serving = True
        # Take (and load) the shards this node is preferred for before announcing itself, so a
        # single node answers for every group as soon as it prints `listening on`.
        await self.leadership.reconcile()
        self._spawn(self.leadership.run())
        self._spawn(self._sweep_loop())
        if self.offsets_mirror is not None:
            try:  # before `listening on`: a tool started after the node finds the topic
                await asyncio.to_thread(self.offsets_mirror.ensure_topic)
            except Exception as exc:  # noqa: BLE001 - run() tries again
                log.warning("offsets mirror: %s", exc, extra={"event": "offsets_mirror_failed"})
            self._spawn(self.offsets_mirror.run())
        log.info(
            "coordinator node %d listening on %s:%d",
            cfg.node_id,
            self.host,
            self.port,
            extra={"event": "node_started", "node": cfg.node_id, "port": self.port},
        )
        return self.host, self.port

    async def _bind_failed(self, host: str, port: int, option: str, exc: OSError) -> GroupshiftError:
        # A port taken between the CLI's probe and here: one line for the user, the session closed.
        for server in (self._server, self._kafka_server):
            if server is not None:
                server.close()
        await asyncio.to_thread(self._close_zk)
        what = (
            "is already in use"
            if exc.errno == errno.EADDRINUSE
            else f"cannot be listened on ({exc.strerror})"
        )
        return GroupshiftError(f"port {host}:{port} {what}; pick another with {option}")

    def request_stop(self) -> None:
        if not self._stopping:
            self._stopping = True
            self._spawn(self.stop())

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    async def stop(self) -> None:
        """Release every shard (so other nodes take them at once), unregister, close everything."""
        self._stopping = True
        self.accepting = False
        self.serving = False
        if self._server is not None:
            self._server.close()
        for s in list(self.leadership.shards):
            try:
                await asyncio.wait_for(self.leadership.drop(s, "shutdown", release=True), 5)
            except Exception:  # noqa: BLE001 - shutting down regardless
                log.exception("releasing shard %d failed", s)
        if self.store is not None:
            await self.store.unregister()
        for conn in list(self.connections):
            conn.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self._kafka_server is not None:
            self._kafka_server.close()
        if self._timer is not None:
            self._timer.cancel()
        if self.offsets_mirror is not None:
            try:
                await asyncio.wait_for(asyncio.to_thread(self.offsets_mirror.flush), 5)
            except Exception:  # noqa: BLE001 - shutting down regardless; ZooKeeper has the commits
                log.exception("flushing the offsets mirror failed")
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        if self.zk is not None:
            await asyncio.to_thread(self._close_zk)
        log.info("coordinator node %d stopped", self.config.node_id, extra={"event": "node_stopped"})
        self._stopped.set()

    def _close_zk(self) -> None:
        self.zk.stop()
        self.zk.close()

    def _spawn(self, coro) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    # -- requests ----------------------------------------------------------------------------

    def dispatch(self, conn: Connection, payload: bytes, t0: float) -> None:
        """Handle one frame of `conn` (called in order; never raises for anything a client sends)."""
        try:
            req = P.decode_request(payload)
        except P.RequestError as exc:
            conn.send(exc.id, exc.body())
            self.metrics.observe(P.API_NAMES.get(exc.api, "invalid"), time.perf_counter() - t0, exc.code)
            return
        except P.BadFrame as exc:
            self.metrics.inc("frames_refused")
            log.info("closing connection from %s: %s", conn.peer_host, exc)
            conn.close()
            return
        except Exception:  # never let a frame hurt the node: drop only this connection
            self.metrics.inc("frames_refused")
            log.exception("closing connection from %s: undecodable frame", conn.peer_host)
            conn.close()
            return
        pending = Pending(conn, req.id, req.api, t0)
        body = self.handle(pending, req.api, req.body, req.client_id)
        if body is not None:
            conn.send(req.id, body)
            self.metrics.observe(req.name, time.perf_counter() - t0, error_of(body))

    def handle(
        self, pending: Pending, api: int, body: Any, client_id: str, kafka: bool = False
    ) -> Message | None:
        """Serve one decoded request of `pending.conn` (either listener): the answer when it is
        immediate, or None when the core took it (it answers through `pending`, now or later).
        `kafka`: the request came from the Kafka listener, so FindCoordinator names Kafka endpoints."""
        conn = pending.conn
        if api == P.API_VERSIONS:
            return P.api_versions_body()
        if api == P.FIND_COORDINATOR:
            return self._find_coordinator(body, kafka)
        if api == P.DESCRIBE_CLUSTER:
            return self._describe_cluster()
        if not self.serving or self._stopping:
            # ZooKeeper is away: answer without the core, so that nothing in it moves (no timer
            # fires, no parked request completes) until the node knows it still leads its shards.
            return _unavailable_body(api, body)
        conn.busy = pending
        try:
            outputs = self.core.handle(
                api,
                body,
                _now_ms(),
                client_id=client_id,
                client_host=conn.peer_host,
                request_token=pending,
                group_check=self.leadership.group_error,
            )
        except Exception:
            log.exception("the core failed on api %d from %s", api, conn.peer_host)
            conn.busy = None
            return ErrorResponse(error_code=-1, error_message="internal error")
        self._apply(outputs)
        # A heartbeat only moves deadlines later; while a timer is armed it will re-arm itself.
        if api != P.HEARTBEAT or self._timer is None:
            self._schedule_timer()
        return None

    def _describe_cluster(self) -> DescribeClusterResponse:
        """The live nodes' native listeners, from the registrations this node watches (itself first
        known even before its watch reports it). Answered while ZooKeeper is away too: the last
        view is the best a member can get, and a member only uses it to find nodes."""
        me = self.config.node_id
        nodes = {n: (r.host, r.port) for n, r in dict(self.store.registrations).items()}
        nodes[me] = (self.host, self.port)
        return DescribeClusterResponse(
            error_code=0,
            cluster_id="groupshift",
            controller_id=me,
            brokers=[
                DescribeClusterBroker(broker_id=n, host=h, port=p) for n, (h, p) in sorted(nodes.items())
            ],
        )

    def _find_coordinator(self, body: FindCoordinatorRequest, kafka: bool = False) -> Message:
        if body.key_type != 0:
            return P.precheck_error_body(
                P.FIND_COORDINATOR,
                body,
                P.ErrorCode.INVALID_REQUEST,
                f"key_type {body.key_type} is not served",
            )
        if not self.serving:
            return P.precheck_error_body(
                P.FIND_COORDINATOR, body, COORDINATOR_NOT_AVAILABLE, "this node has lost ZooKeeper"
            )
        shard = self.leadership.shard_for(body.key)
        leader = self.store.leaders.get(shard)
        if leader is None or (leader.node == self.config.node_id and shard not in self.leadership.shards):
            # No leader, or our own leadership from before a session loss not yet reclaimed.
            return P.precheck_error_body(
                P.FIND_COORDINATOR, body, COORDINATOR_NOT_AVAILABLE, f"shard {shard} has no leader"
            )
        if kafka:
            if not leader.kafka_host:  # the leader has no Kafka listener
                return P.precheck_error_body(
                    P.FIND_COORDINATOR,
                    body,
                    COORDINATOR_NOT_AVAILABLE,
                    f"node {leader.node} has no Kafka listener",
                )
            return FindCoordinatorResponse(
                error_code=0, node_id=leader.node, host=leader.kafka_host, port=leader.kafka_port
            )
        return FindCoordinatorResponse(error_code=0, node_id=leader.node, host=leader.host, port=leader.port)

    def _apply(self, outputs: list) -> None:
        for out in outputs:
            kind = type(out)
            if kind is Respond:
                token = out.request_token
                if isinstance(token, Pending):
                    token.conn.answer(token, out.body)
            elif kind is StateChanged:
                self._state_changed(out)
            elif kind is WatchTopics:
                self._watch_topics(out.topics)
            elif kind is Discarded:
                token = out.request_token
                # Kafka never answers it; with answers in order, the connection could not carry
                # anything else, so close it (the client reconnects and learns its fate).
                if isinstance(token, Pending) and token.conn.busy is token:
                    log.info(
                        "closing connection from %s: its parked request was discarded", token.conn.peer_host
                    )
                    token.conn.close()
            else:
                self._spawn(self._persist(out))

    def _watch_topics(self, topics: tuple[str, ...]) -> None:
        """Scheme two: the node (and no member) watches the partition counts of subscribed topics."""
        for topic in topics:
            if topic not in self._topic_watches:
                self._topic_watches.add(topic)
                self._spawn(
                    asyncio.to_thread(self.zk.DataWatch, topic_path(topic), self._topic_watcher(topic))
                )

    def _topic_watcher(self, topic: str):
        loop = self._loop

        def changed(data: bytes | None, stat: Any) -> bool | None:  # kazoo's thread
            if self._stopping:
                return False  # ends the watch
            try:
                count = len(decode_assignment(data, topic)) if data else 0
            except GroupshiftError:
                count = 0  # an unreadable registration assigns nothing
            loop.call_soon_threadsafe(self._topic_sized, topic, count)
            return None

        return changed

    def _topic_sized(self, topic: str, count: int) -> None:
        if self._stopping:
            return
        if not self.serving:  # nothing in the core moves while ZooKeeper is away: try again later
            self._loop.call_later(0.2, self._topic_sized, topic, count)
            return
        self._apply(self.core.topics_changed({topic: count}, _now_ms()))
        self._schedule_timer()

    def _state_changed(self, out: StateChanged) -> None:
        counts = self._state_counts
        old, new = out.old, out.new
        if old is not None:
            counts[old] = counts.get(old, 0) - 1
        if new is not DEAD:
            counts[new] = counts.get(new, 0) + 1
        if new is PREPARING_REBALANCE:
            self.metrics.inc("rebalances")
        elif new is STABLE:
            self.metrics.inc("rebalances_completed")
        if log.isEnabledFor(logging.DEBUG):
            was = "" if old is None else old.value
            log.debug(
                "group %r %s -> %s",
                out.group_id,
                was or "(new)",
                new.value,
                extra={"event": "group_state", "group": out.group_id, "old": was, "new": new.value},
            )

    # -- persistence -------------------------------------------------------------------------

    async def _persist(self, out: Write) -> None:
        shard = self.leadership.shard_for(out.group_id)
        st = self.leadership.leading(out.group_id)
        ok, code = False, NOT_LEADER_OR_FOLLOWER
        if st is not None:
            store = self.store
            try:
                match out:
                    case WriteGroupMetadata():  # (a WriteStaticReplacement too)
                        await store.write_group(shard, st.epoch, out.record)
                    case WriteOffsets():
                        await store.commit_offsets(
                            shard, st.epoch, out.group_id, out.offsets, out.generation_id
                        )
                        if self.offsets_mirror is not None:
                            self.offsets_mirror.offer(out.group_id, out.offsets)
                    case DeleteOffsets():
                        await store.delete_offsets(shard, st.epoch, out.group_id, out.partitions)
                        if self.offsets_mirror is not None:
                            self.offsets_mirror.forget(out.group_id, out.partitions)
                    case DeleteGroup():
                        await store.delete_group(shard, st.epoch, out.group_id)
                    case _:
                        raise TypeError(f"not a write: {out!r}")
                ok, code = True, 0
            except Fenced as exc:
                log.warning(
                    "shard %d fenced: %s", shard, exc, extra={"event": "shard_fenced", "shard": shard}
                )
                if self.leadership.shards.get(shard) is st:
                    self._spawn(self.leadership.drop(shard, "fenced", release=False))
            except WriteTooLarge as exc:
                log.warning("write refused for group %r: %s", out.group_id, exc)
                code = MESSAGE_TOO_LARGE
            except StoreUnavailable as exc:
                log.warning("write for group %r failed: %s", out.group_id, exc)
                code = REQUEST_TIMED_OUT
            except StoreError as exc:
                log.warning("write for group %r failed: %s", out.group_id, exc)
                code = KAFKA_STORAGE_ERROR
            except Exception:
                log.exception("write for group %r failed", out.group_id)
                code = KAFKA_STORAGE_ERROR
        if not ok:
            self.metrics.inc("store_write_failures")
        if out.token is not None:
            self._apply(self.core.persisted(out.token, ok, _now_ms(), code))
            self._schedule_timer()

    # -- timers ------------------------------------------------------------------------------

    def _schedule_timer(self) -> None:
        deadline = self.core.next_deadline()
        if deadline is None:
            return
        at = deadline + 1  # the core fires a timer when now > deadline
        if self._timer is not None:
            if self._timer_at <= at:
                return
            self._timer.cancel()
        delay = max(0.0, (at - _now_ms()) / 1000)
        self._timer_at = at
        self._timer = self._loop.call_later(delay, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        if not self.serving:
            return  # timers wait for ZooKeeper; _on_zk_state re-arms them
        try:
            self._apply(self.core.tick(_now_ms()))
        except Exception:
            log.exception("the core failed in tick")
        self._schedule_timer()

    def _on_zk_state(self, state: str) -> None:
        """kazoo's connection state, on the event loop (see the module docstring)."""
        if self._stopping:
            return
        if state != KazooState.CONNECTED:  # (CONNECTED is logged once its consequences are applied)
            log.info("ZooKeeper session %s", state, extra={"event": "zk_state", "state": str(state)})
        now = time.monotonic()
        if state == KazooState.SUSPENDED:
            if self._suspended_since is None:
                self._suspended_since = now
            self.serving = False
        elif state == KazooState.LOST:
            self.serving = False
            self._suspended_since = None
            self._need_register = True
            self.leadership.lose_all("ZooKeeper session expired")
        elif state == KazooState.CONNECTED:
            since, self._suspended_since = self._suspended_since, None
            session = self.store.session_id
            if session != self._session:
                self._need_register = True
                self.leadership.lose_all("new ZooKeeper session")
            elif since is not None and now - since > self.config.zk_session_timeout_ms / 1000:
                self.leadership.lose_all("ZooKeeper was away longer than the session timeout")
            self._session = session
            log.info("ZooKeeper session %s", state, extra={"event": "zk_state", "state": str(state)})
            if not self.serving and self.leadership.shards:
                # Kept shards: the members were turned away meanwhile, so their timers restart.
                self._apply(self.core.resume(_now_ms()))
            self.serving = True
            self._schedule_timer()
            self._wake.set()

    # -- housekeeping ------------------------------------------------------------------------

    async def _sweep_loop(self) -> None:
        cfg = self.config
        while not self._stopping:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            if (
                self._suspended_since is not None
                and now - self._suspended_since > cfg.zk_session_timeout_ms / 1000
                and self.leadership.shards
            ):
                # Curator's rule: suspended longer than the session timeout = lost.
                self.leadership.lose_all("ZooKeeper suspended longer than the session timeout")
            for conn in list(self.connections):
                reason = conn.expiry_reason(now)
                if reason:
                    self.metrics.inc("connections_timed_out")
                    log.info("closing connection from %s: %s", conn.peer_host, reason)
                    conn.drop()

    def _gauges(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        states = dict.fromkeys((EMPTY, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE), 0)
        members = 0
        for state, count in self.core.stats().values():
            if state in states:
                states[state] += 1
            members += count
        return {
            "groups": [({"state": s.value}, n) for s, n in states.items()],
            "members": [({}, members)],
            "shards_led": [({"status": st.value}, self.leadership.count(st)) for st in ShardStatus],
            "connections": [({}, len(self.connections))],
            "zk_connected": [({}, 1 if self.serving else 0)],
        }
