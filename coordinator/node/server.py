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

Shard placement: each shard has a preferred node among the live ones (balanced rendezvous
hashing, `_placement`); a node claims an unled shard at once if it is the preferred one, and any
node claims it after `claim_grace_ms`. With `shard_handoff`, a node hands a shard to its preferred
node once that node has been live for `handoff_delay_ms` (so shards spread out as nodes join).

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
import enum
import errno
import hashlib
import logging
import time
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

from kazoo.protocol.states import KazooState

from coordinator.group.coordinator import CoordinatorConfig, GroupCoordinator
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
from coordinator.node.metrics import Metrics, serve_metrics
from coordinator.node.store import (
    DEFAULT_SHARDS,
    CoordinatorStore,
    Fenced,
    StoreError,
    StoreUnavailable,
    WriteTooLarge,
    shard_of,
)
from coordinator.wire import codec as P
from coordinator.wire.error_codes import (
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    KAFKA_STORAGE_ERROR,
    MESSAGE_TOO_LARGE,
    NOT_COORDINATOR,
    NOT_LEADER_OR_FOLLOWER,
    REQUEST_TIMED_OUT,
)
from coordinator.wire.schema import (
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribeGroupsResponse,
    ErrorResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    ListGroupsResponse,
    Message,
    OffsetCommitResponse,
)
from core.errors import GroupshiftError
from core.zk import connect

log = logging.getLogger(__name__)


class ShardStatus(enum.Enum):
    """What this node does with a shard it claimed."""

    #: Claimed (its epoch is ours); its groups are being read from ZooKeeper: group requests get
    #: COORDINATOR_LOAD_IN_PROGRESS.
    LOADING = "loading"
    #: Loaded: this node serves the shard's groups and writes them with the shard's epoch.
    LEADING = "leading"


LOADING = ShardStatus.LOADING
LEADING = ShardStatus.LEADING


@dataclass
class NodeConfig:
    """Everything `groupshift coordinator serve` can set (broker settings: coordinator-spec.md §13)."""

    zk: str | None = None
    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    advertised_host: str | None = None
    shards: int = DEFAULT_SHARDS
    max_frame_bytes: int = P.DEFAULT_MAX_FRAME_BYTES
    # Broker settings: the core's defaults (Kafka's), passed through by core_config().
    group_min_session_timeout_ms: int = CoordinatorConfig.group_min_session_timeout_ms
    group_max_session_timeout_ms: int = CoordinatorConfig.group_max_session_timeout_ms
    group_initial_rebalance_delay_ms: int = CoordinatorConfig.group_initial_rebalance_delay_ms
    group_max_size: int = CoordinatorConfig.group_max_size
    offsets_retention_ms: int = CoordinatorConfig.offsets_retention_ms
    offsets_retention_check_interval_ms: int = CoordinatorConfig.offsets_retention_check_interval_ms
    offset_metadata_max_bytes: int = CoordinatorConfig.offset_metadata_max_bytes
    zk_session_timeout_ms: int = 10_000
    connections_max_idle_ms: int = 600_000  # Kafka's connections.max.idle.ms
    frame_timeout_ms: int = 30_000  # a started frame must complete within this
    write_timeout_ms: int = 30_000  # a client that stops reading its answers is dropped
    max_connections: int = 10_000
    max_queued_requests: int = 1_000  # per connection; reading pauses beyond it
    shard_handoff: bool = True
    claim_grace_ms: int = 1_000
    handoff_delay_ms: int = 3_000
    metrics_host: str = "127.0.0.1"
    metrics_port: int | None = None

    def core_config(self) -> CoordinatorConfig:
        names = {f.name for f in fields(CoordinatorConfig)} & {f.name for f in fields(self)}
        return CoordinatorConfig(**{name: getattr(self, name) for name in names})


class _Shard:
    __slots__ = ("status", "epoch", "since")

    def __init__(self, status: ShardStatus, epoch: int):
        self.status = status
        self.epoch = epoch
        self.since = time.monotonic()


class _Pending:
    """The request token handed to the core: which connection and correlation id to answer."""

    __slots__ = ("conn", "id", "api", "t0")

    def __init__(self, conn: _Connection, id: int, api: int, t0: float):
        self.conn = conn
        self.id = id
        self.api = api
        self.t0 = t0


def _now_ms() -> int:
    return int(time.time() * 1000)


def _error_of(body: Message) -> int:
    """The error a response reports, for metrics (OffsetCommit: its first partition error)."""
    code = getattr(body, "error_code", None)
    if type(code) is int:
        return code
    if type(body) is OffsetCommitResponse:
        for t in body.topics:
            for p in t.partitions:
                if p.error_code:
                    return p.error_code
    return 0


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
# Connections


class _Connection(asyncio.Protocol):
    """One client connection: frames in, requests handled strictly in order, answers out."""

    def __init__(self, node: CoordinatorNode):
        self.node = node
        self.decoder = P.FrameDecoder(node.config.max_frame_bytes)
        self.queue: deque[tuple[bytes, float]] = deque()
        self.busy: _Pending | None = None  # the request whose answer is outstanding
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.last_rx = time.monotonic()
        self.partial_since: float | None = None
        self.write_paused_since: float | None = None
        self.reading_paused = False
        self.processing = False
        self.closed = False
        self._out: list[bytes] = []

    def connection_made(self, transport) -> None:
        self.transport = transport
        node = self.node
        if len(node.connections) >= node.config.max_connections or not node.accepting:
            node.metrics.inc("connections_refused")
            transport.abort()
            self.closed = True
            return
        node.connections.add(self)
        node.metrics.inc("connections_accepted")
        peer = transport.get_extra_info("peername")
        self.peer_host = f"/{peer[0]}" if peer else ""

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.node.connections.discard(self)
        self.queue.clear()

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        self.last_rx = now
        try:
            frames = self.decoder.feed(data)
        except P.FrameTooLarge as exc:
            self.node.metrics.inc("frames_refused")
            log.info("closing connection from %s: %s", self.peer_host, exc)
            self.close()
            return
        if self.decoder.buffered:
            if self.partial_since is None or frames:
                self.partial_since = now
        else:
            self.partial_since = None
        if frames:
            t0 = time.perf_counter()
            self.queue.extend((f, t0) for f in frames)
            self.process()
            if len(self.queue) > self.node.config.max_queued_requests and not self.reading_paused:
                self.reading_paused = True
                self.transport.pause_reading()

    def process(self) -> None:
        """Handle queued requests until one must wait (parked, or written to ZooKeeper)."""
        if self.processing:
            return
        self.processing = True
        node = self.node
        try:
            while self.queue and self.busy is None and not self.closed and self.write_paused_since is None:
                payload, t0 = self.queue.popleft()
                node.dispatch(self, payload, t0)
        finally:
            self.processing = False
            self.flush()
        if self.reading_paused and len(self.queue) <= self.node.config.max_queued_requests // 2:
            self.reading_paused = False
            if not self.closed:
                self.transport.resume_reading()

    def send(self, id: int, body: Message) -> None:
        if self.closed:
            return
        self._out.append(P.encode_response(id, body))
        if not self.processing:
            self.flush()

    def flush(self) -> None:
        if self._out and not self.closed:
            self.transport.writelines(self._out)
        self._out = []

    def answer(self, pending: _Pending, body: Message) -> None:
        """The core answered `pending` (now or after parking)."""
        if pending is not self.busy:
            return
        self.busy = None
        self.send(pending.id, body)
        self.node.metrics.observe(
            P.API_NAMES.get(pending.api, "?"), time.perf_counter() - pending.t0, _error_of(body)
        )
        if not self.processing and self.queue:
            asyncio.get_running_loop().call_soon(self.process)

    def pause_writing(self) -> None:
        self.write_paused_since = time.monotonic()

    def resume_writing(self) -> None:
        self.write_paused_since = None
        if not self.closed:
            asyncio.get_running_loop().call_soon(self.process)

    def close(self) -> None:
        """Close after sending the answers already produced (requests earlier in the same read
        were handled: their clients get them); the transport drains its buffer, then closes."""
        if not self.closed:
            self.flush()
            self.closed = True
            self.transport.close()
            self.node.connections.discard(self)


# ---------------------------------------------------------------------------------------------
# The node


class CoordinatorNode:
    """A coordinator node: ZooKeeper registration and shards, the core, the TCP and metrics servers."""

    def __init__(self, config: NodeConfig):
        self.config = config
        self.metrics = Metrics()
        self.core = GroupCoordinator(config.core_config())
        self.connections: set[_Connection] = set()
        self.shards: dict[int, _Shard] = {}
        self.accepting = False
        self.serving = False  # False while the ZooKeeper session is suspended or lost
        self.zk = None
        self.store: CoordinatorStore | None = None
        self.host = config.host
        self.port = config.port
        self.metrics_port: int | None = None
        self._server: asyncio.AbstractServer | None = None
        self._metrics_server: asyncio.AbstractServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: int | None = None
        self._shard_cache: dict[str, int] = {}
        self._tasks: set[asyncio.Task] = set()
        self._wake = asyncio.Event()
        self._stopped = asyncio.Event()
        self._stopping = False
        self._unled_since: dict[int, float] = {}
        self._first_seen: dict[int, float] = {}
        self._suspended_since: float | None = None
        self._need_register = False
        self._session: int | None = None  # the ZooKeeper session our shards were claimed in
        self._state_counts: dict[GroupState, int] = {}
        self._verifying: set[int] = set()
        self._placement_cache: tuple[tuple[int, ...], list[int]] = ((), [])

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
                lambda: _Connection(self), cfg.host, cfg.port, backlog=1024
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
        await self.store.register(self.host, self.port)
        self._session = self.store.session_id
        self.zk.add_listener(lambda state: self._loop.call_soon_threadsafe(self._on_zk_state, state))
        self.store.add_listener(self._wake.set)
        self.store.watch()
        self.accepting = True
        self.serving = True
        # Take (and load) the shards this node is preferred for before announcing itself, so a
        # single node answers for every group as soon as it prints `listening on`.
        await self._reconcile()
        self._spawn(self._shard_loop())
        self._spawn(self._sweep_loop())
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
        if self._server is not None:
            self._server.close()
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
        for s in list(self.shards):
            try:
                await asyncio.wait_for(self._drop_shard(s, "shutdown", release=True), 5)
            except Exception:  # noqa: BLE001 - shutting down regardless
                log.exception("releasing shard %d failed", s)
        if self.store is not None:
            await self.store.unregister()
        for conn in list(self.connections):
            conn.close()
        if self._metrics_server is not None:
            self._metrics_server.close()
        if self._timer is not None:
            self._timer.cancel()
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

    def dispatch(self, conn: _Connection, payload: bytes, t0: float) -> None:
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
        api = req.api
        if api == P.API_VERSIONS:
            body = P.api_versions_body()
        elif api == P.FIND_COORDINATOR:
            body = self._find_coordinator(req.body)
        elif not self.serving or self._stopping:
            # ZooKeeper is away: answer without the core, so that nothing in it moves (no timer
            # fires, no parked request completes) until the node knows it still leads its shards.
            body = _unavailable_body(api, req.body)
        else:
            pending = _Pending(conn, req.id, api, t0)
            conn.busy = pending
            try:
                outputs = self.core.handle(
                    api,
                    req.body,
                    _now_ms(),
                    client_id=req.client_id,
                    client_host=conn.peer_host,
                    request_token=pending,
                    group_check=self._group_check,
                )
            except Exception:
                log.exception("the core failed on %s from %s", req.name, conn.peer_host)
                conn.busy = None
                conn.send(req.id, ErrorResponse(error_code=-1, error_message="internal error"))
                return
            self._apply(outputs)
            # A heartbeat only moves deadlines later; while a timer is armed it will re-arm itself.
            if api != P.HEARTBEAT or self._timer is None:
                self._schedule_timer()
            return
        conn.send(req.id, body)
        self.metrics.observe(req.name, time.perf_counter() - t0, _error_of(body))

    def _find_coordinator(self, body: FindCoordinatorRequest) -> Message:
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
        shard = self._shard(body.key)
        leader = self.store.leaders.get(shard)
        if leader is None or (leader.node == self.config.node_id and shard not in self.shards):
            # No leader, or our own leadership from before a session loss not yet reclaimed.
            return P.precheck_error_body(
                P.FIND_COORDINATOR, body, COORDINATOR_NOT_AVAILABLE, f"shard {shard} has no leader"
            )
        return FindCoordinatorResponse(error_code=0, node_id=leader.node, host=leader.host, port=leader.port)

    def _shard(self, group_id: str) -> int:
        s = self._shard_cache.get(group_id)
        if s is None:
            if len(self._shard_cache) > 200_000:
                self._shard_cache.clear()
            s = self._shard_cache[group_id] = shard_of(group_id, self.config.shards)
        return s

    def _group_check(self, group_id: str) -> int:
        """coordinator-spec.md §2.1 steps 2-4 for one group."""
        if not self.serving or self._stopping:
            return COORDINATOR_NOT_AVAILABLE
        st = self.shards.get(self._shard(group_id))
        if st is None:
            return NOT_COORDINATOR
        if st.status is LOADING:
            return COORDINATOR_LOAD_IN_PROGRESS
        return 0

    def _apply(self, outputs: list) -> None:
        for out in outputs:
            kind = type(out)
            if kind is Respond:
                token = out.request_token
                if isinstance(token, _Pending):
                    token.conn.answer(token, out.body)
            elif kind is StateChanged:
                self._state_changed(out)
            elif kind is Discarded:
                token = out.request_token
                # Kafka never answers it; with answers in order, the connection could not carry
                # anything else, so close it (the client reconnects and learns its fate).
                if isinstance(token, _Pending) and token.conn.busy is token:
                    log.info(
                        "closing connection from %s: its parked request was discarded", token.conn.peer_host
                    )
                    token.conn.close()
            else:
                self._spawn(self._persist(out))

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
        shard = self._shard(out.group_id)
        st = self.shards.get(shard)
        ok, code = False, NOT_LEADER_OR_FOLLOWER
        if st is not None and st.status is LEADING:
            store = self.store
            try:
                match out:
                    case WriteGroupMetadata():  # (a WriteStaticReplacement too)
                        await store.write_group(shard, st.epoch, out.record)
                    case WriteOffsets():
                        await store.commit_offsets(
                            shard, st.epoch, out.group_id, out.offsets, out.generation_id
                        )
                    case DeleteOffsets():
                        await store.delete_offsets(shard, st.epoch, out.group_id, out.partitions)
                    case DeleteGroup():
                        await store.delete_group(shard, st.epoch, out.group_id)
                    case _:
                        raise TypeError(f"not a write: {out!r}")
                ok, code = True, 0
            except Fenced as exc:
                log.warning(
                    "shard %d fenced: %s", shard, exc, extra={"event": "shard_fenced", "shard": shard}
                )
                if self.shards.get(shard) is st:
                    self._spawn(self._drop_shard(shard, "fenced", release=False))
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

    # -- shards ------------------------------------------------------------------------------

    def _placement(self, live: tuple[int, ...]) -> list[int]:
        """The preferred node of every shard: balanced rendezvous hashing.

        Pairs (shard, node) are taken by descending hash score, each node up to
        ceil(shards / nodes) shards. Every node computes the same answer from the same live set,
        and a node joining or leaving moves few shards.
        """
        if self._placement_cache[0] == live:
            return self._placement_cache[1]
        n = self.config.shards
        cap = -(-n // len(live))
        pairs = sorted(
            (
                (hashlib.blake2b(f"{s}:{node}".encode(), digest_size=8).digest(), s, node)
                for s in range(n)
                for node in live
            ),
            reverse=True,
        )
        owner: list[int] = [-1] * n
        load = dict.fromkeys(live, 0)
        for _, s, node in pairs:
            if owner[s] < 0 and load[node] < cap:
                owner[s] = node
                load[node] += 1
        self._placement_cache = (live, owner)
        return owner

    async def _shard_loop(self) -> None:
        while not self._stopping:
            self._wake.clear()
            try:
                await self._reconcile()
            except Exception:
                log.exception("shard reconciliation failed")
            try:
                await asyncio.wait_for(self._wake.wait(), 0.5)
            except TimeoutError:
                pass

    async def _reconcile(self) -> None:
        if not self.serving or self._stopping or not self.zk.connected:
            return
        cfg = self.config
        store = self.store
        if self._need_register:
            await store.register(self.host, self.port)
            self._need_register = False
        now = time.monotonic()
        live_set = set(store.coordinators) | {cfg.node_id}
        for n in live_set:
            self._first_seen.setdefault(n, now)
        for n in list(self._first_seen):
            if n not in live_set:
                del self._first_seen[n]
        placement = self._placement(tuple(sorted(live_set)))
        claims: list[int] = []
        releases: list[int] = []
        for s in range(cfg.shards):
            leader = store.leaders.get(s)
            mine = self.shards.get(s)
            preferred = placement[s]
            if mine is None and leader is not None and leader.node == cfg.node_id:
                # Our leadership from before a session loss: take it again with a new epoch when
                # we are the preferred node, else hand it over at once.
                if preferred == cfg.node_id:
                    claims.append(s)
                else:
                    releases.append(s)
                continue
            if mine is not None:
                if leader is None or leader.node != cfg.node_id or leader.epoch != mine.epoch:
                    self._spawn(self._verify_shard(s, mine))
                elif (
                    cfg.shard_handoff
                    and mine.status is LEADING
                    and preferred != cfg.node_id
                    and now - self._first_seen.get(preferred, now) >= cfg.handoff_delay_ms / 1000
                    and now - mine.since >= cfg.handoff_delay_ms / 1000
                ):
                    await self._drop_shard(s, f"handoff to node {preferred}", release=True)
                continue
            if leader is None:
                since = self._unled_since.setdefault(s, now)
                if preferred == cfg.node_id or now - since >= cfg.claim_grace_ms / 1000:
                    claims.append(s)
            else:
                self._unled_since.pop(s, None)
        if releases:
            await asyncio.gather(*(self.store.release_stale(s) for s in releases))
        if claims:
            await asyncio.gather(*(self._take_shard(s) for s in claims))

    async def _take_shard(self, shard: int) -> None:
        session = self._session
        epoch = await self.store.claim_shard(shard, self.host, self.port)
        if epoch is None or self._stopping or session != self._session or not self.serving:
            # (the session was lost, or ZooKeeper went away, while the claim was under way)
            if epoch is not None:
                await self.store.release_shard(shard, epoch)
            return
        st = self.shards[shard] = _Shard(LOADING, epoch)
        self._unled_since.pop(shard, None)
        try:
            snapshots = await self.store.load_shard(shard)
        except Exception:
            log.exception("loading shard %d failed; releasing it", shard)
            await self._drop_shard(shard, "load failed", release=True)
            return
        if self.shards.get(shard) is not st:
            return
        now = _now_ms()
        for snap in snapshots:
            self._apply(self.core.load_group(snap, now))
        st.status = LEADING
        st.since = time.monotonic()
        self._schedule_timer()
        log.info(
            "leading shard %d (epoch %d, %d groups)",
            shard,
            epoch,
            len(snapshots),
            extra={"event": "shard_loaded", "shard": shard, "epoch": epoch, "groups": len(snapshots)},
        )

    async def _verify_shard(self, shard: int, st: _Shard) -> None:
        """The watch says our leader znode changed: check ZooKeeper itself before giving up."""
        if shard in self._verifying:
            return
        self._verifying.add(shard)
        try:
            leader = await self.store.read_leader(shard)
            still = leader is not None and leader.node == self.config.node_id and leader.epoch == st.epoch
        except Exception:  # no answer: decide on a later round
            still = True
        finally:
            self._verifying.discard(shard)
        if not still and self.shards.get(shard) is st:
            await self._drop_shard(shard, "leader znode lost", release=False)

    async def _drop_shard(self, shard: int, reason: str, release: bool) -> None:
        st = self._unload_shard(shard, reason)
        if st is not None and release:
            await self.store.release_shard(shard, st.epoch)

    def _unload_shard(self, shard: int, reason: str) -> _Shard | None:
        """Stop serving `shard` now (groups unloaded: parked requests get NOT_COORDINATOR)."""
        st = self.shards.pop(shard, None)
        if st is None:
            return None
        now = _now_ms()
        for g in self.core.group_ids():
            if self._shard(g) == shard:
                self._apply(self.core.unload_group(g, now))
        self.store.forget_shard(shard)
        log.info(
            "no longer leading shard %d (%s)",
            shard,
            reason,
            extra={"event": "shard_released", "shard": shard, "epoch": st.epoch, "reason": reason},
        )
        return st

    def _lose_all(self, reason: str) -> None:
        """Give every shard up locally, at once (no ZooKeeper call: it may be unreachable)."""
        if self.shards:
            log.warning("giving up %d shards: %s", len(self.shards), reason, extra={"event": "shards_lost"})
        for s in list(self.shards):
            self._unload_shard(s, reason)

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
            self._lose_all("ZooKeeper session expired")
        elif state == KazooState.CONNECTED:
            since, self._suspended_since = self._suspended_since, None
            session = self.store.session_id
            if session != self._session:
                self._need_register = True
                self._lose_all("new ZooKeeper session")
            elif since is not None and now - since > self.config.zk_session_timeout_ms / 1000:
                self._lose_all("ZooKeeper was away longer than the session timeout")
            self._session = session
            log.info("ZooKeeper session %s", state, extra={"event": "zk_state", "state": str(state)})
            if not self.serving and self.shards:
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
                and self.shards
            ):
                # Curator's rule: suspended longer than the session timeout = lost.
                self._lose_all("ZooKeeper suspended longer than the session timeout")
            for conn in list(self.connections):
                reason = None
                if conn.partial_since is not None and now - conn.partial_since > cfg.frame_timeout_ms / 1000:
                    reason = "frame not completed in time"
                elif (
                    conn.write_paused_since is not None
                    and now - conn.write_paused_since > cfg.write_timeout_ms / 1000
                ):
                    reason = "client does not read its answers"
                elif (
                    conn.busy is None
                    and not conn.queue
                    and now - conn.last_rx > cfg.connections_max_idle_ms / 1000
                ):
                    reason = "idle"
                if reason:
                    self.metrics.inc("connections_timed_out")
                    log.info("closing connection from %s: %s", conn.peer_host, reason)
                    if conn.write_paused_since is not None:
                        conn.closed = True
                        conn.transport.abort()
                        self.connections.discard(conn)
                    else:
                        conn.close()

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
            "shards_led": [
                ({"status": st.value}, sum(1 for x in self.shards.values() if x.status is st))
                for st in ShardStatus
            ],
            "connections": [({}, len(self.connections))],
            "zk_connected": [({}, 1 if self.serving else 0)],
        }
