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

This module is the node's lifecycle (start, stop), its timers, its ZooKeeper session and
housekeeping. A request is served by `dispatch.RequestDispatch` and the core's outputs are carried
out by `outputs.CoreOutputs` (both bases of `CoordinatorNode`); shard placement and leadership are
`shards.ShardLeadership`; the ZooKeeper metadata is `store.CoordinatorStore`; each connection is a
`connection.Connection`, the Kafka listener `kafka_listener.KafkaListener`, SASL on either
`authenticator.Authenticator`; the settings are `config.NodeConfig`.

ZooKeeper outages (docs/recovery.md; the node's states and their transitions are
`coordinator/node/state.py`'s `NodeState`): while the session is SUSPENDED the node answers every group
request with COORDINATOR_NOT_AVAILABLE and fires no timers, but keeps its shards; if the
connection comes back within the session timeout, in the same session, it serves on as before.
Once the session is LOST, or SUSPENDED for longer than the session timeout (another node may have
taken its shards: Curator's rule), the node gives its shards up locally, at once. When ZooKeeper
answers again it re-registers if the session is new, and claims its preferred shards again with
new epochs (reloading their groups and offsets) or hands the others over; an epoch is only ever
used in the session that claimed it, so a write with a stale epoch is refused by ZooKeeper.

ZooKeeper refusing one of the node's own tasks (`NoAuth` under a znode's ACL, or `AuthFailed`:
ACL changes it may not read, shards it may not claim or load, the offsets topic it may not
register) is no outage: no retry succeeds, and a node serving on stale ACLs or without its shards
would mislead. The node stops (`refused`: shards released, `failure` the one-line
`ZooKeeperNoAuth`, which `coordinator serve` exits with).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import time
from typing import TYPE_CHECKING

from kazoo.protocol.states import KazooState

from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.state import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupState,
)
from coordinator.node.authenticator import Authenticator
from coordinator.node.config import NodeConfig
from coordinator.node.connection import Connection
from coordinator.node.dispatch import RequestDispatch, _now_ms
from coordinator.node.metrics import Metrics, serve_metrics
from coordinator.node.outputs import CoreOutputs
from coordinator.node.shards import ShardLeadership, ShardStatus
from coordinator.node.state import LOST, NEW, SERVING, STOPPED, SUSPENDED, NodeState
from coordinator.node.store import CoordinatorStore
from coordinator.node.tls import listener_contexts, tls_factory
from coordinator.node.watches import GroupWatches
from coordinator.node.zk_async import _retrying
from coordinator.server_side.assigned import ServerAssignedCoordinator
from coordinator.server_side.group_conversion import MigrationPolicy
from coordinator.server_side.incremental_coordinator import IncrementalCoordinator
from core.errors import GroupshiftError
from core.zk import REFUSALS, ZooKeeperNoAuth, connect, refused_by_acl

if TYPE_CHECKING:
    from coordinator.node.acl_cache import AclCache
    from coordinator.node.authorization import RequestAuthorization
    from coordinator.node.offsets_mirror import OffsetsMirror

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------
# The node


class CoordinatorNode(RequestDispatch, CoreOutputs):
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
            heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            migration_policy=MigrationPolicy(config.group_consumer_migration_policy),
        )
        self._topic_watches: set[str] = set()
        self._listed_topics: frozenset[str] | None = None  # /brokers/topics' children, last seen
        self.connections: set[Connection] = set()
        self.watches = GroupWatches()  # parked WatchGroup requests (coordinator/node/watches.py)
        self.leadership = ShardLeadership(self)
        self.authenticator = Authenticator(self)  # SASL on the listeners that ask for it
        # The node's state (coordinator/node/state.py), and two of its facts read on every request,
        # kept as plain attributes by `_enter`: serving group requests (False while ZooKeeper is
        # away, before start and after stop) and taking new connections (from start until stop).
        self.state = NEW
        self.serving = NEW.serving
        self.accepting = NEW.accepting
        self.zk = None
        self.store: CoordinatorStore | None = None
        self.host = config.host
        self.port = config.port
        self.metrics_port: int | None = None
        self.kafka_endpoint: tuple[str, int] | None = None  # the Kafka listener's advertised host, port
        self.offsets_mirror: OffsetsMirror | None = None  # commits into __consumer_offsets (Kafka tooling)
        # --authorizer acl: the ACLs every request passes (None: everything open, as Kafka without one)
        self.gate: RequestAuthorization | None = None
        self.acl_cache: AclCache | None = None
        self._kafka_server: asyncio.AbstractServer | None = None
        self._server: asyncio.AbstractServer | None = None
        self._metrics_server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._tasks: set[asyncio.Task] = set()
        self.failure: ZooKeeperNoAuth | None = None  # ZooKeeper refused a task of the node: it stopped
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._suspended_since: float | None = None
        self._need_register = False
        self._session: int | None = None  # the ZooKeeper session our shards were claimed in
        self._state_counts: dict[GroupState, int] = {}
        # The listeners' TLS (docs/security.md): checked here, before the node touches ZooKeeper.
        self.ssl_context, self.kafka_ssl_context = listener_contexts(config)

    # -- lifecycle ---------------------------------------------------------------------------

    def _enter(self, state: NodeState) -> None:
        """Move to `state` (coordinator/node/state.py's table); `serving` and `accepting` are its."""
        state.check_transition_from(self.state)
        self.state = state
        self.serving = state.serving
        self.accepting = state.accepting

    async def start(self) -> tuple[str, int]:
        """Connect, register, start serving; return the address clients should use."""
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self.zk = await asyncio.to_thread(connect, cfg.zk, session_timeout=cfg.zk_session_timeout_ms / 1000)
        self.store = CoordinatorStore(self.zk, cfg.node_id, cfg.shards)
        await self.store.start(self._loop)
        if cfg.authorizer == "acl":  # loaded before any listener accepts a client
            from coordinator.node.acl_cache import AclCache
            from coordinator.node.authorization import RequestAuthorization

            self.acl_cache = AclCache(self.zk, cfg.super_users)
            await _retrying("loading the ACLs", self.acl_cache.start)
            self.gate = RequestAuthorization(self.acl_cache.authorizer)
            self._spawn(self.acl_cache.run())
        await self.authenticator.start()
        session = self.authenticator.session
        try:
            self._server = await self._loop.create_server(
                tls_factory(lambda: Connection(self, session(cfg.listen_protocol)), self.ssl_context, cfg),
                cfg.host,
                cfg.port,
                backlog=1024,
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
                self._kafka_server = await KafkaListener(self).start(
                    cfg.kafka_host, cfg.kafka_port, self.kafka_ssl_context
                )
            except OSError as exc:
                raise await self._bind_failed(cfg.kafka_host, cfg.kafka_port, "--kafka-listen", exc) from None
            kafka_port = self._kafka_server.sockets[0].getsockname()[1]
            self.kafka_endpoint = (cfg.advertised_host or cfg.kafka_host, kafka_port)
            self.offsets_mirror = OffsetsMirror(Log(cfg.data), self.zk, cfg.node_id, self.metrics)
        await self.store.register(
            self.host,
            self.port,
            kafka=self.kafka_endpoint,
            protocol=cfg.listen_protocol,
            kafka_protocol=cfg.kafka_protocol,
        )
        self._session = self.store.session_id
        self.zk.add_listener(lambda state: self._loop.call_soon_threadsafe(self._on_zk_state, state))
        self.store.add_listener(self._wake.set)
        self.store.watch()
        self._watch_topic_list()
        self._enter(SERVING)
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
        self._enter(STOPPED)
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
        if task.cancelled() or task.exception() is None:
            return
        if isinstance(task.exception(), REFUSALS):
            self.refused(task.exception())
        else:
            log.error("background task failed", exc_info=task.exception())

    def refused(self, exc: BaseException) -> None:
        """ZooKeeper refused one of the node's own tasks: stop, saying why in one line (see the
        module docstring)."""
        if self.failure is None:
            self.failure = exc if isinstance(exc, ZooKeeperNoAuth) else refused_by_acl(exc)
            log.error("%s", self.failure, extra={"event": "zk_refused"})
        self.request_stop()

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
            self._enter(SUSPENDED)
        elif state == KazooState.LOST:
            self._enter(LOST)
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
            self._enter(SERVING)
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
            "watches_parked": [({}, len(self.watches))],
            "zk_connected": [({}, 1 if self.serving else 0)],
        }
