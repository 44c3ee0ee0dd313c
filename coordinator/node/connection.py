"""One client connection of a coordinator node: frames in, requests handled strictly in order, answers out.

A connection hands each complete frame to its owner's `dispatch` one at a time: while a request
is outstanding (a parked JoinGroup/SyncGroup, an OffsetCommit waiting for its ZooKeeper write:
`busy`), the later frames of the same connection wait in `queue`, never those of other
connections. Reading pauses beyond `max_queued_requests` queued frames; a client that stops
reading its answers, leaves a frame half-sent, or stays idle is dropped by the owner's sweep
(`expiry_reason`).

On a SASL listener a connection starts with a `sasl` session: until the client authenticated, the
listener hands its frames to the node's `authenticator` (which answers only ApiVersions and the SASL
handshake), and frames are held to Kafka's `sasl.server.max.receive.size`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

from coordinator.node.authorization import Grants
from coordinator.node.metrics import Metrics
from coordinator.wire import codec as P
from coordinator.wire.schema import Message, OffsetCommitResponse
from security.sasl import SaslSession
from security.tls import principal_of

log = logging.getLogger("coordinator.node.server")

ANONYMOUS = "User:ANONYMOUS"  # Kafka's principal for a connection that did not authenticate
SASL_MAX_RECEIVE_BYTES = 512 << 10  # Kafka's sasl.server.max.receive.size: frames before authentication


class ConnectionOwner(Protocol):
    """What a connection needs from its node."""

    config: Any  # NodeConfig: max_frame_bytes, max_connections, max_queued_requests, timeouts
    metrics: Metrics
    connections: set[Connection]
    accepting: bool
    watches: Any  # GroupWatches: parked WatchGroup requests (coordinator/node/watches.py)

    def dispatch(self, conn: Connection, payload: bytes, t0: float) -> None: ...


class Pending:
    """The request token handed to the core: which connection and correlation id to answer."""

    __slots__ = ("conn", "id", "api", "t0", "amend")

    def __init__(self, conn: Connection, id: int, api: int, t0: float):
        self.conn = conn
        self.id = id
        self.api = api
        self.t0 = t0
        # Set when the principal may do only part of the request (coordinator/node/authorization.py):
        # completes the core's answer with the denied part, once.
        self.amend: Callable[[Message], Message] | None = None


def error_of(body: Message) -> int:
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


class Connection(asyncio.Protocol):
    """One client connection: frames in, requests handled strictly in order, answers out."""

    def __init__(
        self, node: ConnectionOwner, sasl: SaslSession | None = None, max_frame_bytes: int | None = None
    ):
        self.node = node
        self.max_frame_bytes = max_frame_bytes or node.config.max_frame_bytes
        self.decoder = P.FrameDecoder(
            self.max_frame_bytes if sasl is None else min(self.max_frame_bytes, SASL_MAX_RECEIVE_BYTES)
        )
        self.queue: deque[tuple[bytes, float]] = deque()
        self.busy: Pending | None = None  # the request whose answer is outstanding
        self.transport: asyncio.Transport | None = None
        self.peer_host = ""
        self.last_rx = time.monotonic()
        self.partial_since: float | None = None
        self.write_paused_since: float | None = None
        self.reading_paused = False
        self.processing = False
        self.closed = False
        self._out: list[bytes] = []
        # Who the client is (docs/security.md): Kafka's principal, set by TLS client
        # authentication (`User:` and the certificate's subject, when the handshake completes:
        # `connection_made`) or SASL; ANONYMOUS until then.
        self.principal = ANONYMOUS
        # The SASL exchange while it is not complete (None: nothing to complete, or completed).
        self.sasl = sasl
        # With --authorizer acl: the groups this connection's principal was allowed (authorization.py).
        self.grants = Grants()

    def authenticated(self, principal: str) -> None:
        """SASL completed: the client is `principal` and its frames go to the listener's dispatch."""
        self.principal = principal
        self.sasl = None
        self.decoder.max_frame_bytes = self.max_frame_bytes

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
        ssl_object = transport.get_extra_info("ssl_object")
        if ssl_object is not None:  # a TLS listener: the handshake is complete
            self.principal = principal_of(ssl_object) or ANONYMOUS
            log.debug("TLS connection from %s: %s", self.peer_host, self.principal)

    def connection_lost(self, exc) -> None:
        self.closed = True
        self.node.connections.discard(self)
        self.queue.clear()
        if self.busy is not None and self.busy.api == P.WATCH_GROUP:
            self.node.watches.forget(self.busy)  # a parked WatchGroup nobody will read

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
        out = self._out
        if out and not self.closed:
            # One write: over TLS, asyncio makes a record of every piece `writelines` is given.
            self.transport.write(out[0] if len(out) == 1 else b"".join(out))
        self._out = []

    def answer(self, pending: Pending, body: Message) -> None:
        """The core answered `pending` (now or after parking)."""
        if pending is not self.busy:
            return
        if pending.amend is not None:
            body, pending.amend = pending.amend(body), None
        self.busy = None
        self.send(pending.id, body)
        self.node.metrics.observe(
            P.API_NAMES.get(pending.api, "?"), time.perf_counter() - pending.t0, error_of(body)
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

    def expiry_reason(self, now: float) -> str | None:
        """Why the node's sweep should drop this connection now, if it should."""
        cfg = self.node.config
        if self.partial_since is not None and now - self.partial_since > cfg.frame_timeout_ms / 1000:
            return "frame not completed in time"
        if (
            self.write_paused_since is not None
            and now - self.write_paused_since > cfg.write_timeout_ms / 1000
        ):
            return "client does not read its answers"
        if self.busy is None and not self.queue and now - self.last_rx > cfg.connections_max_idle_ms / 1000:
            return "idle"
        return None

    def drop(self) -> None:
        """Close at once: answers not yet written are discarded (the client does not read them)."""
        if self.write_paused_since is None:
            self.close()
            return
        self.closed = True
        self.transport.abort()
        self.node.connections.discard(self)
