"""The node's Kafka-protocol listener: a second TCP server whose clients speak Kafka's binary protocol.

Each connection is a `coordinator.node.connection.Connection` (the same framing, in-order
answering, back-pressure and idle sweep as the native listener) whose frames are decoded by
`codec`. Group requests go to the node's `handle`, so the same core and the same ZooKeeper store
serve both listeners; the answer comes back through a `KafkaPending` token that remembers the
api, version and correlation id it must be encoded for. Metadata, ListOffsets, Fetch and Produce
are served by `data.DataPlane` in a task of their own (the connection waits for the answer, as
Kafka's do). A frame that cannot be decoded, or an api or version not served, closes only that
connection.

    server = await KafkaListener(node).start("127.0.0.1", 0)
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from typing import Any

import msgspec

from coordinator.kafka_wire import codec as K
from coordinator.kafka_wire import messages as M
from coordinator.kafka_wire import topic_map
from coordinator.node.connection import Connection, Pending, error_of
from coordinator.node.kafka_data import DataPlane
from coordinator.node.kafka_topic_ids import TopicIdResolver
from coordinator.node.tls import tls_factory
from coordinator.wire import errors as E
from coordinator.wire.schema import API_VERSIONS, JOIN_GROUP, JoinGroupResponse, Message
from security.sasl import SaslSession

log = logging.getLogger("coordinator.node.server")

# Kafka's socket.request.max.bytes: a Produce request may be larger than a native frame.
MAX_REQUEST_BYTES = 100 << 20
_DATA_APIS = frozenset({M.METADATA, M.LIST_OFFSETS, M.FETCH, M.PRODUCE})
# The group APIs whose wire form names topics by id (KIP-848's): answers are converted first.
_BY_ID_APIS = frozenset({M.CONSUMER_GROUP_HEARTBEAT, M.CONSUMER_GROUP_DESCRIBE})
# The requests the listener serves or prepares itself; every other one goes straight to the core.
_LISTENER_APIS = _DATA_APIS | {API_VERSIONS, M.CONSUMER_GROUP_HEARTBEAT}
# What an answer is counted as in the metrics (the native listener's names, prefixed).
_METRIC_NAMES = {api: "kafka_" + name for api, name in K.NAMES.items()}


class KafkaPending(Pending):
    """A request token that also knows how to encode its answer."""

    __slots__ = ("version", "request", "client_id", "resolved")

    def __init__(
        self, conn: Connection, id: int, api: int, t0: float, version: int, request: Any, client_id: str = ""
    ):
        # Pending's fields set here rather than through super().__init__: one call less per request.
        self.conn, self.id, self.api, self.t0, self.amend = conn, id, api, t0, None
        self.version = version
        self.request = request
        self.client_id = client_id
        self.resolved = False  # the answer's topic ids were looked up once already


def _member_id_round_trip(pending: Pending, body: Message | None) -> str | None:
    """The member id to rejoin with when `body` answers a new member's JoinGroup below v4 with
    MEMBER_ID_REQUIRED: those versions predate KIP-394, so Kafka admits such a member at once.
    The listener takes the round trip for it (as `server_side/assigned.py` does for scheme two)."""
    if (
        pending.api == JOIN_GROUP
        and isinstance(pending, KafkaPending)
        and pending.version < 4
        and type(body) is JoinGroupResponse
        and body.error_code == E.MEMBER_ID_REQUIRED
        and body.member_id
        and not pending.request.member_id
    ):
        return body.member_id
    return None


class KafkaConnection(Connection):
    """A connection of the Kafka listener: answers are Kafka responses of the request's version."""

    def __init__(self, owner: KafkaListener, sasl: SaslSession | None = None):
        super().__init__(owner, sasl, max(owner.config.max_frame_bytes, MAX_REQUEST_BYTES))
        self.owner = owner

    def answer(self, pending: Pending, body: Message | None) -> None:
        """Answer `pending` (None: no answer, as for Produce with acks=0)."""
        if pending is not self.busy:
            return
        if pending.amend is not None:  # the denied part of the request (authorization.py)
            body, pending.amend = pending.amend(body), None
        api = pending.api
        if api == JOIN_GROUP and (member_id := _member_id_round_trip(pending, body)) and not self.closed:
            assert isinstance(pending, KafkaPending)
            # Still busy with this request: later ones wait for the real answer.
            pending.request = msgspec.structs.replace(pending.request, member_id=member_id)
            asyncio.get_running_loop().call_soon(self.node.rejoin, pending)
            return
        if body is not None and api in _BY_ID_APIS and not self.closed:
            ids = self.owner.topic_ids
            missing = ids.ids.unknown_names(topic_map.names_in_answer(body))
            if missing and not getattr(pending, "resolved", False):
                # Still busy with this request: the answer waits for the ids it names.
                self.owner.node._spawn(self.owner.answer_after_ids(pending, body, missing))
                return
            body = topic_map.to_wire(body, ids.ids)
        self.busy = None
        if body is not None and not self.closed:
            assert isinstance(pending, KafkaPending)
            try:
                data = K.encode_response(api, pending.version, pending.id, body, pending.request)
            except Exception:
                log.exception("cannot encode the answer to api %d v%d", api, pending.version)
                self.close()
                return
            self.send_bytes(data)  # with the other answers of this read (`process`), or now
            self.node.metrics.observe(_METRIC_NAMES[api], time.perf_counter() - pending.t0, error_of(body))
        if not self.processing and self.queue and not self.closed:
            asyncio.get_running_loop().call_soon(self.process)

    def send_bytes(self, data: bytes) -> None:
        if self.closed:
            return
        self._out.append(data)
        if not self.processing:
            self.flush()


class KafkaListener:
    """The `ConnectionOwner` of Kafka connections: the node's settings, metrics and connection set."""

    def __init__(self, node: Any):
        self.node = node
        self.config = node.config
        self.metrics = node.metrics
        self.connections = node.connections
        self.watches = node.watches  # (WatchGroup is native-only: no Kafka connection parks one)
        self.topic_ids = TopicIdResolver(node)
        self.data = DataPlane(node, self.topic_ids)

    @property
    def accepting(self) -> bool:
        return self.node.accepting

    async def start(self, host: str, port: int, ssl: ssl.SSLContext | None = None) -> asyncio.AbstractServer:
        """Listen on `host`:`port` (over TLS with `ssl`: the SSL and SASL_SSL listeners)."""
        loop = asyncio.get_running_loop()
        session = self.node.authenticator.session
        protocol = self.config.kafka_protocol
        return await loop.create_server(
            tls_factory(lambda: KafkaConnection(self, session(protocol)), ssl, self.config),
            host,
            port,
            backlog=1024,
        )

    def dispatch(self, conn: Connection, payload: bytes, t0: float) -> None:
        """Handle one frame of `conn` (in order; never raises for anything a client sends)."""
        assert isinstance(conn, KafkaConnection)
        if conn.sasl is not None:  # not authenticated yet: the SASL handshake only
            self.node.authenticator.kafka(conn, payload, t0)
            return
        try:
            req = K.decode_request(payload)
        except K.BadRequest as exc:
            self.metrics.inc("frames_refused")
            log.info("closing Kafka connection from %s: %s", conn.peer_host, exc)
            conn.close()
            return
        except Exception:  # never let a frame hurt the node: drop only this connection
            self.metrics.inc("frames_refused")
            log.exception("closing Kafka connection from %s: undecodable frame", conn.peer_host)
            conn.close()
            return
        api = req.api_key
        pending = KafkaPending(conn, req.correlation_id, api, t0, req.api_version, req.body, req.client_id)
        if api not in _LISTENER_APIS:  # a group request: to the core, as the native listener's
            self._handle(pending)
            return
        if req.body is None:  # ApiVersions above our maximum
            conn.send_bytes(K.api_versions_fallback(req.correlation_id))
            return
        conn.busy = pending
        if api in _DATA_APIS:
            self.node._spawn(self._serve_data(pending, req))
            return
        if api == API_VERSIONS:
            conn.answer(pending, K.api_versions_body())
            return
        owned = [t.topic_id for t in req.body.topic_partitions or ()]  # ConsumerGroupHeartbeat
        if self.topic_ids.ids.unknown_ids(owned):
            self.node._spawn(self._heartbeat_after_ids(pending, owned))
            return
        pending.request = self._heartbeat(req.body)
        self._handle(pending)

    def _handle(self, pending: KafkaPending) -> None:
        body = self.node.handle(pending, pending.api, pending.request, pending.client_id, kafka=True)
        if body is not None:
            pending.conn.busy = pending  # `handle` leaves it unset for an immediate answer
            pending.conn.answer(pending, body)

    def _heartbeat(self, req: M.KafkaConsumerGroupHeartbeat):
        """A Kafka client's heartbeat as the core's (topic names; the node's session timeout)."""
        c = self.config
        # Within the node's session bounds, which every member's timeout must respect.
        timeout = min(
            max(c.group_consumer_session_timeout_ms, c.group_min_session_timeout_ms),
            c.group_max_session_timeout_ms,
        )
        return topic_map.heartbeat_request(req, self.topic_ids.ids, timeout)

    async def _heartbeat_after_ids(self, pending: KafkaPending, owned: list) -> None:
        try:
            await self.topic_ids.learn_ids(owned)
        except Exception as exc:  # ZooKeeper away: the ids it owns are dropped (re-sent later)
            log.info("topic ids unreadable for a heartbeat from %s: %s", pending.conn.peer_host, exc)
        if pending.conn.closed or pending.conn.busy is not pending:
            return
        pending.request = self._heartbeat(pending.request)
        self._handle(pending)

    async def answer_after_ids(self, pending: KafkaPending, body: Any, missing: set[str]) -> None:
        try:
            await self.topic_ids.learn_names(missing)
        except Exception as exc:  # ZooKeeper away: a topic without an id is left out of the answer
            log.info("topic ids unreadable for an answer to %s: %s", pending.conn.peer_host, exc)
        pending.resolved = True
        pending.conn.answer(pending, body)

    def rejoin(self, pending: KafkaPending) -> None:
        """JoinGroup below v4: join again with the member id the core handed out (`answer`)."""
        conn = pending.conn
        if conn.closed or conn.busy is not pending:
            return
        body = self.node.handle(pending, JOIN_GROUP, pending.request, pending.client_id, kafka=True)
        if body is not None:
            conn.busy = pending
            conn.answer(pending, body)

    async def _serve_data(self, pending: KafkaPending, req: K.KafkaRequest) -> None:
        request, gate = req.body, self.node.gate
        if gate is not None:  # --authorizer: the topics the principal may not use are refused
            conn = pending.conn
            ruling = gate.rule_data(conn.principal, conn.peer_host, req.api_key, request)
            if ruling is not None:
                if ruling.request is None:
                    conn.answer(pending, ruling.answer)
                    return
                request, pending.amend = ruling.request, ruling.amend
        try:
            body = await self.data.serve(req.api_key, req.api_version, request)
        except Exception:
            log.exception("the data plane failed on %s from %s", req.name, pending.conn.peer_host)
            pending.conn.close()
            return
        pending.conn.answer(pending, body)
