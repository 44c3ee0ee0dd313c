"""A member's connection to a coordinator node, and where it finds the nodes and the topic sizes.

`Connection` is thread-safe: `request()` sends and waits, `send()` returns a `PendingResponse` to
collect later (a JoinGroup that outlives one `poll()`); `abort()` breaks a request parked in
another thread. Nodes register under `/groupshift/coordinators/ids/<node>`;
topic sizes come from `/brokers/topics/<t>`.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

import msgspec

from coordinator.layout import COORDINATORS as COORDINATORS_PATH
from coordinator.layout import MAX_NODES, CoordinatorRecord, coordinator_path, decode_coordinator
from coordinator.member.authenticate import AuthenticationFailed, authenticate
from coordinator.wire import codec as wire
from coordinator.wire.schema import Message
from core.errors import GroupshiftError
from security.client_config import ClientSecurity


class CoordinatorUnavailable(GroupshiftError):
    """No coordinator node answered for the group in time; start one (`groupshift coordinator serve`).

    `CoordinatorMember.poll()` raises it after `coordinator_timeout_ms` without an answer to
    FindCoordinator; a commit or offset fetch after `request_timeout_ms`."""


class ConnectionLost(GroupshiftError):
    """The connection to a coordinator node broke (or timed out) before the response arrived."""


def error_name(code: int) -> str:
    return wire.ERROR_NAMES.get(code, str(code))


class Connection:
    """A request/response connection to one node, thread-safe.

    The node answers a connection's requests in order and may park JoinGroup/SyncGroup, so the
    member uses one connection for those and another for heartbeats and offsets. `request()`
    sends and waits (one such request in flight at a time); `send()` returns a `PendingResponse`
    the caller waits on in slices, so a JoinGroup can outlive the `poll()` that sent it (Kafka's
    `RequestFuture`). Responses are read in the order the requests were sent.
    """

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str,
        connect_timeout: float = 5.0,
        security: ClientSecurity | None = None,
    ):
        self.address = (host, port)
        self.client_id = client_id
        self._lock = threading.RLock()
        self._next_id = 0
        self._decoder = wire.FrameDecoder(max_frame_bytes=64 << 20)
        self._in_flight: deque[tuple[int, int]] = deque()  # (correlation id, api), oldest first
        self._ready: dict[int, Any] = {}  # responses read but not yet collected, by correlation id
        try:
            self._sock = socket.create_connection(self.address, timeout=connect_timeout)
        except OSError as exc:
            raise ConnectionLost(f"cannot connect to coordinator node {host}:{port}: {exc}") from None
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.closed = False
        if security is not None and security.tls:
            self._sock = _tls(self._sock, host, port, security)
        if security is not None and security.sasl:
            try:
                authenticate(self, security, connect_timeout)
            except BaseException:
                self.close()
                raise

    def request(self, api: int, body: Message, timeout: float) -> Any:
        """Send one request struct and wait for the API's response struct; raises `ConnectionLost`."""
        with self._lock:
            resp = self.send(api, body, timeout).result(timeout)
            if resp is None:  # only when the clock moved backwards between send and result
                self._fail(api, "timed out")
            return resp

    def send(self, api: int, body: Message, timeout: float) -> PendingResponse:
        """Send one request struct; its response must arrive within `timeout` seconds (then the
        connection is closed: the request's fate is unknown). Raises `ConnectionLost`."""
        with self._lock:
            if self.closed:
                raise ConnectionLost("connection closed")
            self._next_id = (self._next_id + 1) & 0x7FFFFFFF
            rid = self._next_id
            try:
                self._sock.settimeout(timeout)
                self._sock.sendall(wire.encode_request(api, rid, body, self.client_id))
            except OSError as exc:
                self._fail(api, exc)
            self._in_flight.append((rid, api))
            return PendingResponse(self, api, rid, time.monotonic() + timeout)

    def _wait(self, pending: PendingResponse, timeout: float | None) -> Any:
        """`pending`'s response, or None when `timeout` seconds passed first (None: no limit but
        the request's own). Reads what already arrived even when `timeout` is 0."""
        until = pending.expires if timeout is None else min(pending.expires, time.monotonic() + timeout)
        with self._lock:
            try:
                while pending.rid not in self._ready:
                    if self.closed:
                        raise ConnectionLost("connection closed")
                    now = time.monotonic()
                    if now >= pending.expires:
                        raise ConnectionLost(f"no response within {pending.timeout:g}s")
                    self._sock.settimeout(max(until - now, 0.0))  # 0.0: read what is there only
                    try:
                        data = self._sock.recv(1 << 16)
                    except (BlockingIOError, TimeoutError, ssl.SSLWantReadError):
                        if time.monotonic() >= until and time.monotonic() < pending.expires:
                            return None
                        continue
                    if not data:
                        raise ConnectionLost(f"{self.address[0]}:{self.address[1]} closed the connection")
                    for frame in self._decoder.feed(data):
                        if not self._in_flight:
                            raise wire.ProtocolError("a response to no request")
                        rid, api = self._in_flight.popleft()
                        got, resp = wire.decode_response_body(api, frame)
                        if got != rid:
                            raise wire.ProtocolError(f"response {got} arrived where {rid} was due")
                        self._ready[got] = resp
                return self._ready.pop(pending.rid)
            except (OSError, wire.ProtocolError, ConnectionLost) as exc:
                self._fail(pending.api, exc)

    def _fail(self, api: int, why: object) -> NoReturn:
        self._close_locked()
        raise ConnectionLost(f"{wire.API_NAMES.get(api, api)} to {self.address}: {why}") from None

    def _close_locked(self) -> None:
        self.closed = True
        self._in_flight.clear()
        self._ready.clear()
        try:
            self._sock.close()
        except OSError:
            pass

    def abort(self) -> None:
        """Break a request blocked in another thread (it raises `ConnectionLost`)."""
        self.closed = True
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def close(self) -> None:
        self.abort()
        try:
            self._sock.close()
        except OSError:
            pass


def _tls(sock: socket.socket, host: str, port: int, security: ClientSecurity) -> ssl.SSLSocket:
    """`sock` after a TLS handshake with the node; a refused handshake is `AuthenticationFailed`."""
    try:
        return security.ssl_context().wrap_socket(sock, server_hostname=host)
    except ssl.SSLCertVerificationError as exc:
        sock.close()
        raise AuthenticationFailed(
            f"the TLS certificate of coordinator node {host}:{port} is not trusted "
            f"({exc.verify_message}); check ssl.ca.location in the client config"
        ) from None
    except ssl.SSLError as exc:
        sock.close()
        raise AuthenticationFailed(
            f"TLS handshake with coordinator node {host}:{port} failed ({exc.reason or exc}); "
            "is its listener TLS, and does it require a client certificate?"
        ) from None
    except OSError as exc:
        sock.close()
        raise ConnectionLost(f"TLS handshake with coordinator node {host}:{port}: {exc}") from None


class PendingResponse:
    """A request sent on a `Connection` whose response has not been collected yet.

    `result(timeout)` returns the response, or None when `timeout` seconds passed first — the
    request stays in flight and a later `result()` collects it. Raises `ConnectionLost` when the
    connection broke or the request's own timeout (given to `send`) passed.
    """

    def __init__(self, conn: Connection, api: int, rid: int, expires: float):
        self.conn, self.api, self.rid, self.expires = conn, api, rid, expires
        self.timeout = max(expires - time.monotonic(), 0.0)

    def result(self, timeout: float | None = None) -> Any:
        return self.conn._wait(self, timeout)


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.strip().rpartition(":")
    if not host or not port.isdigit():
        raise GroupshiftError(f"bad coordinator address {text!r}; expected host:port")
    return host, int(port)


def zk_address(zk) -> str:
    """A kazoo client's `host:port,...[/chroot]`, for messages that tell the user where we looked."""
    try:
        hosts = ",".join(f"{h}:{p}" for h, p in zk.hosts)
    except (TypeError, ValueError):
        hosts = "ZooKeeper"
    return hosts + (getattr(zk, "chroot", None) or "")


def registered_nodes(zk) -> Iterator[CoordinatorRecord]:
    """The registration of every coordinator node in `/groupshift/coordinators/ids/<node>`, at most
    MAX_NODES; a node gone meanwhile or with data that is not a registration is skipped. kazoo's
    errors other than NoNode reach the caller (after the nodes read so far)."""
    from kazoo.exceptions import NoNodeError

    try:
        children = zk.get_children(COORDINATORS_PATH)
    except NoNodeError:
        return
    for child in children[:MAX_NODES]:
        try:
            yield decode_coordinator(zk.get(coordinator_path(child))[0])
        except (NoNodeError, msgspec.DecodeError, msgspec.ValidationError):
            continue


def zk_bootstrap(zk) -> list[tuple[str, int]]:
    """Coordinator nodes registered in ZooKeeper (`/groupshift/coordinators/ids/<node>`).

    Empty while ZooKeeper is away (not connected, or the session expired under the call): the
    caller goes on with its bootstrap list instead of blocking or failing with kazoo's error. A
    refusal is no absence: ZooKeeper's NoAuth (or AuthFailed) raises `core.zk.ZooKeeperNoAuth`.
    """
    from kazoo.exceptions import KazooException

    from core.zk import KAZOO_REFUSALS, refused_by_acl

    if not zk.connected:
        return []
    nodes = []
    try:
        for rec in registered_nodes(zk):
            nodes.append((rec.host, rec.port))
    except KAZOO_REFUSALS as exc:
        raise refused_by_acl(exc, COORDINATORS_PATH) from None
    except KazooException:
        pass  # the nodes read so far
    return nodes


def zk_partition_counts(zk) -> Callable[[str], int | None]:
    """`partitions_for(topic)` reading `/brokers/topics/<t>` (None for an unknown topic)."""
    from core.errors import UnknownTopic
    from topics.registry import describe

    def partitions_for(topic: str) -> int | None:
        try:
            return describe(zk, topic).num_partitions
        except UnknownTopic:
            return None

    return partitions_for
