"""SASL on both listeners: what a connection that has not authenticated may send, and the answers.

A connection of a SASL listener (`--listen SASL_PLAINTEXT://...`, `--kafka-listen SASL_...://...`)
carries a `security.sasl.SaslSession` until it authenticated; each listener's dispatch hands it
the frames of such a connection (`native`, `kafka`), and nothing else sees them. Only
ApiVersions, SaslHandshake and SaslAuthenticate are decoded and answered; any other request
closes the connection unanswered, as Kafka's `SaslServerAuthenticator` does, and a refusal
(UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, SASL_AUTHENTICATION_FAILED) is answered, then
the connection closed. A user's credentials come from the node's `CredentialCache` (ZooKeeper,
off the event loop); while they are fetched the connection waits (`busy`), as for any request.
On success the connection's principal is `User:NAME` and its frames go the usual way.

After authentication, and on a listener without SASL, SaslHandshake and SaslAuthenticate are
answered ILLEGAL_SASL_STATE by the node (`answer_outside`), as Kafka's brokers do.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from coordinator.kafka_wire import codec as K
from coordinator.node.connection import Connection, Pending
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    API_VERSIONS,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    ApiVersionsResponse,
    Message,
    SaslAuthenticateResponse,
    SaslHandshakeResponse,
)
from security.credentials import CredentialCache
from security.sasl import PLAIN, Refusal, Request, SaslSession, Step

log = logging.getLogger("coordinator.node.server")

# The listeners' api keys of the requests a connection may send before it authenticated.
REQUESTS: dict[int, Request] = {
    API_VERSIONS: Request.API_VERSIONS,
    SASL_HANDSHAKE: Request.SASL_HANDSHAKE,
    SASL_AUTHENTICATE: Request.SASL_AUTHENTICATE,
}
# A refused connection is closed this long after its answer (Kafka's
# connection.failed.authentication.delay.ms): the client reads the answer before it sees the
# close, and a client retrying wrong credentials in a loop is slowed down.
FAILED_AUTHENTICATION_CLOSE_DELAY_S = 0.1
# Each refusal's Kafka error code (the refusals are named after them).
CODES: dict[Refusal, int] = {
    Refusal.UNSUPPORTED_SASL_MECHANISM: E.UNSUPPORTED_SASL_MECHANISM,
    Refusal.ILLEGAL_SASL_STATE: E.ILLEGAL_SASL_STATE,
    Refusal.SASL_AUTHENTICATION_FAILED: E.SASL_AUTHENTICATION_FAILED,
}


def is_sasl(protocol: str) -> bool:
    """Whether a listener's protocol (SASL_PLAINTEXT, SASL_SSL, SASL_TLS: Kafka's names) asks for SASL."""
    return protocol.upper().startswith("SASL_")


def answer_outside(api: int) -> Message:
    """SaslHandshake or SaslAuthenticate on a connection with nothing to authenticate: ILLEGAL_SASL_STATE."""
    if api == SASL_HANDSHAKE:
        return SaslHandshakeResponse(error_code=E.ILLEGAL_SASL_STATE)
    return SaslAuthenticateResponse(
        error_code=E.ILLEGAL_SASL_STATE, error_message="this connection has nothing to authenticate"
    )


class Authenticator:
    """The node's side of SASL (see the module docstring): one per node, for both listeners."""

    def __init__(self, node: Any):
        self.node = node
        self.mechanisms = list(node.config.sasl_mechanisms)
        self.credentials: CredentialCache | None = None

    @property
    def needed(self) -> bool:
        cfg = self.node.config
        return is_sasl(cfg.listen_protocol) or (cfg.kafka_port is not None and is_sasl(cfg.kafka_protocol))

    async def start(self) -> None:
        """Watch the users' credentials in ZooKeeper (when a listener asks for SASL)."""
        if self.needed:
            self.credentials = CredentialCache(self.node.zk)
            await self.credentials.start()

    def session(self, protocol: str) -> SaslSession | None:
        """A new connection's SASL session on a listener of `protocol` (None: no SASL there)."""
        return SaslSession(self.mechanisms) if is_sasl(protocol) else None

    # -- the frames of a connection that has not authenticated --------------------------------

    def _refuse(self, conn: Connection, why: str, delay: float = 0.0) -> None:
        self.node.metrics.inc("sasl_refused")
        log.info("closing connection from %s before authentication: %s", conn.peer_host, why)
        if not delay:
            conn.close()
            return
        # Answered: the client reads the answer before it sees the close (Kafka delays it the same
        # way); a frame it sends meanwhile finds the session failed and closes at once.
        asyncio.get_running_loop().call_later(delay, conn.close)

    def native(self, conn: Connection, payload: bytes, t0: float) -> None:
        """One frame of a native connection that has not authenticated."""
        request = REQUESTS.get(P.peek_api(payload))
        if not conn.sasl.allows(request):
            self._refuse(conn, "a request other than ApiVersions, SaslHandshake or SaslAuthenticate")
            return
        try:
            req = P.decode_request(payload)
        except P.ProtocolError as exc:
            self._refuse(conn, str(exc))
            return
        self._serve(conn, Pending(conn, req.id, req.api, t0), request, req.body, P.api_versions_body)

    def kafka(self, conn: Any, payload: bytes, t0: float) -> None:
        """One frame of a Kafka-listener connection that has not authenticated."""
        from coordinator.node.kafka_listener import KafkaPending

        request = REQUESTS.get(K.peek_api(payload))
        if not conn.sasl.allows(request):
            self._refuse(conn, "a request other than ApiVersions, SaslHandshake or SaslAuthenticate")
            return
        try:
            req = K.decode_request(payload)
        except Exception as exc:  # noqa: BLE001 - whatever an undecodable frame raises: close
            self._refuse(conn, str(exc))
            return
        if req.body is None:  # ApiVersions above our maximum: the KIP-511 answer, then the real one
            conn.send_bytes(K.api_versions_fallback(req.correlation_id))
            return
        pending = KafkaPending(
            conn, req.correlation_id, req.api_key, t0, req.api_version, req.body, req.client_id
        )
        self._serve(conn, pending, request, req.body, K.api_versions_body)

    def _serve(self, conn: Connection, pending: Pending, request: Request, body: Any, versions) -> None:
        session = conn.sasl
        conn.busy = pending
        if request is Request.API_VERSIONS:
            refusal = session.api_versions()
            answer = versions() if refusal is None else ApiVersionsResponse(error_code=CODES[refusal])
            self._answer(conn, pending, answer, refusal)
        elif request is Request.SASL_HANDSHAKE:
            refusal = session.handshake(body.mechanism)
            code = CODES[refusal] if refusal else 0
            self._answer(
                conn, pending, SaslHandshakeResponse(error_code=code, mechanisms=session.enabled), refusal
            )
        else:
            step = session.authenticate(body.auth_bytes)
            if step.look_up is not None:
                self.node._spawn(self._look_up(conn, pending, session, step.look_up))
                return
            self._step(conn, pending, step)

    async def _look_up(self, conn: Connection, pending: Pending, session: SaslSession, user: str) -> None:
        try:
            creds = await self.credentials.get(user)
            if session.mechanism == PLAIN:  # one PBKDF2: off the event loop
                step = await asyncio.to_thread(session.credentials_found, creds)
            else:
                step = session.credentials_found(creds)
        except Exception as exc:  # noqa: BLE001 - ZooKeeper away: the client connects again
            log.warning("closing connection from %s: credentials unreadable: %r", conn.peer_host, exc)
            conn.close()
            return
        if not conn.closed and conn.busy is pending:
            self._step(conn, pending, step)

    def _step(self, conn: Connection, pending: Pending, step: Step) -> None:
        if step.principal is not None:
            conn.authenticated(step.principal)  # before the answer: the next frame is served as usual
            self.node.metrics.inc("sasl_authenticated")
        code = CODES[step.refusal] if step.refusal else 0
        answer = SaslAuthenticateResponse(
            error_code=code, error_message=step.message, auth_bytes=step.auth_bytes
        )
        self._answer(conn, pending, answer, step.refusal)

    def _answer(self, conn: Connection, pending: Pending, body: Message, refusal: Refusal | None) -> None:
        conn.answer(pending, body)
        if refusal is not None:
            self._refuse(conn, refusal.value, FAILED_AUTHENTICATION_CLOSE_DELAY_S)
