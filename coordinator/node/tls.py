"""The node's listeners over TLS: their contexts from `NodeConfig`, and the TLS layer of their connections.

    native, kafka = listener_contexts(config)     # SSLContext or None each; raises GroupshiftError
    await loop.create_server(tls_factory(factory, native, config), host, port)

Called when the node is made, before it touches ZooKeeper, so bad TLS settings are one line and
nothing registered: a TLS listener (native `TLS://`, `SASL_TLS://`; Kafka `SSL://`, `SASL_SSL://`)
without `--tls-cert`/`--tls-key`, TLS settings given while no listener uses TLS, and every check of
`security.tls.server_context` (unreadable or mismatched files, expired certificates...). Both
listeners share one context: one certificate, one CA, one `--tls-client-auth`.

A TLS connection is a `TlsLayer` between the socket's transport and the node's `Connection`:
records in, clear text to the connection in one piece per read; the connection's answers (one
write per read: `Connection.flush`) out as records in one socket write. It does what the node
needs of asyncio's own TLS transport (`loop.create_server(ssl=...)`) and no more — a handshake
that must complete within the frame timeout, the client's certificate for its principal,
close_notify both ways, back-pressure passed through — at about a third of its cost per
request: asyncio's reads each record through a chain of Python calls and ends every read on a
raised `SSLWantReadError`, and held a 256 KiB read buffer per connection (docs/security.md).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable
from typing import Any

from core.errors import GroupshiftError
from security.listeners import PROTOCOLS, Listener
from security.tls import ServerTls, server_context

log = logging.getLogger("coordinator.node.server")

MAX_HANDSHAKE_S = 60.0  # asyncio's default; a shorter --frame-timeout-ms shortens it
# The most clear text one read of the TLS object returns: a record holds at most 16 KiB.
READ_BYTES = 16 << 10
_AGAIN = (ssl.SSLWantReadError, ssl.SSLWantWriteError)


def listener_contexts(config: Any) -> tuple[ssl.SSLContext | None, ssl.SSLContext | None]:
    """The native and the Kafka listener's server context (None: that listener is not TLS)."""
    native = _listener(config.listen_protocol, "native", "--listen", config.host, config.port)
    kafka = None
    if config.kafka_port is not None:
        kafka = _listener(
            config.kafka_protocol, "kafka", "--kafka-listen", config.kafka_host, config.kafka_port
        )
    tls = [
        (listener, option)
        for listener, option in ((native, "--listen"), (kafka, "--kafka-listen"))
        if listener and listener.tls
    ]
    settings = ServerTls(config.tls_cert, config.tls_key, config.tls_ca, config.tls_client_auth)
    if not tls:
        given = [
            option
            for option, value in (
                ("--tls-cert", settings.cert),
                ("--tls-key", settings.key),
                ("--tls-ca", settings.ca),
                ("--tls-client-auth", settings.client_auth != "none"),
            )
            if value
        ]
        if given:
            raise GroupshiftError(
                f"{given[0]} is given but no listener uses TLS: "
                "listen with --listen TLS://HOST:PORT or --kafka-listen SSL://HOST:PORT"
            )
        return None, None
    if not settings.cert or not settings.key:
        listener, option = tls[0]
        raise GroupshiftError(
            f"{option} {listener.protocol}://{listener.host}:{listener.port} needs the node's certificate "
            "and key: give --tls-cert and --tls-key (PEM files)"
        )
    ctx = server_context(settings)
    return (ctx if native.tls else None), (ctx if kafka is not None and kafka.tls else None)


def _listener(protocol: str, kind: str, option: str, host: str, port: int) -> Listener:
    if protocol not in PROTOCOLS[kind]:
        raise GroupshiftError(
            f"{option}: unknown security protocol {protocol!r}; expected one of {', '.join(PROTOCOLS[kind])}"
        )
    return Listener(protocol, host, port)


def tls_factory(
    factory: Callable[[], asyncio.Protocol], ctx: ssl.SSLContext | None, config: Any
) -> Callable[[], asyncio.Protocol]:
    """`create_server`'s protocol factory: `factory` itself for a plaintext listener; else each
    connection behind a `TlsLayer` whose handshake must complete within the frame timeout (as a
    started frame must)."""
    if ctx is None:
        return factory
    timeout = min(MAX_HANDSHAKE_S, config.frame_timeout_ms / 1000)
    return lambda: TlsLayer(factory(), ctx, timeout)


class TlsLayer(asyncio.Protocol):
    """One TLS connection: the socket's protocol, and the transport its `app` (a `Connection`) writes to.

    The app is connected (`connection_made`) once the handshake completed, so it sees the
    client's certificate (`get_extra_info("ssl_object")`); it never sees a connection whose
    handshake failed or timed out (those are closed here, as asyncio's transport closes them)."""

    def __init__(self, app: asyncio.Protocol, ctx: ssl.SSLContext, handshake_timeout: float):
        self.app = app
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = ctx.wrap_bio(self._incoming, self._outgoing, server_side=True)
        self._handshake_timeout = handshake_timeout
        self._timer: asyncio.TimerHandle | None = None
        self._raw: asyncio.Transport | None = None
        self._connected = False  # the handshake completed and the app was told
        self._closing = False

    # -- the socket's side -----------------------------------------------------------------------

    def connection_made(self, transport) -> None:
        self._raw = transport
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._handshake_timeout, self._handshake_timed_out)

    def data_received(self, data: bytes) -> None:
        self._incoming.write(data)
        if not self._connected and not self._handshake():
            return
        chunks: list[bytes] = []
        closed = False
        tls, incoming = self._tls, self._incoming
        try:
            while True:
                chunk = tls.read(READ_BYTES)
                if not chunk:  # the client's close_notify
                    closed = True
                    break
                chunks.append(chunk)
                if not incoming.pending and not tls.pending():  # no record left: no read that raises
                    break
        except _AGAIN:
            pass  # a record not complete yet
        except ssl.SSLZeroReturnError:
            closed = True
        except ssl.SSLError as exc:  # a corrupt or forged record: nothing more can be read
            self._fail(exc)
            return
        if self._outgoing.pending:  # what reading made OpenSSL say (a TLS 1.3 key update's answer)
            self._raw.write(self._outgoing.read())
        if chunks and not self._closing:
            self.app.data_received(chunks[0] if len(chunks) == 1 else b"".join(chunks))
        if closed:
            self.close()

    def eof_received(self) -> bool:
        return False  # the socket closes; connection_lost tells the app

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._connected:
            self._connected = False
            self.app.connection_lost(exc)

    def pause_writing(self) -> None:
        if self._connected:
            self.app.pause_writing()

    def resume_writing(self) -> None:
        if self._connected:
            self.app.resume_writing()

    def _handshake(self) -> bool:
        """Go on with the handshake; True once it completed (the app is then connected)."""
        try:
            self._tls.do_handshake()
        except _AGAIN:
            if self._outgoing.pending:
                self._raw.write(self._outgoing.read())
            return False
        except (ssl.SSLError, OSError) as exc:  # clear text, an unknown CA, no client certificate...
            self._fail(exc)
            return False
        if self._outgoing.pending:
            self._raw.write(self._outgoing.read())
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._connected = True
        self.app.connection_made(self)
        return not self._closing  # (the app may refuse the connection at once: too many)

    def _handshake_timed_out(self) -> None:
        self._timer = None
        if not self._connected and not self._closing:
            log.debug("closing a TLS connection: no handshake within %.1f s", self._handshake_timeout)
            self.abort()

    def _fail(self, exc: Exception) -> None:
        log.debug("closing a TLS connection: %s", exc)
        if self._outgoing.pending:  # the alert that says why, if OpenSSL made one
            self._raw.write(self._outgoing.read())
        self._closing = True
        self._raw.close()

    # -- the app's transport ---------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        if self._closing:
            return
        tls = self._tls
        view = memoryview(data)
        try:
            while view:  # (OpenSSL takes it all at once: a memory BIO never refuses bytes)
                view = view[tls.write(view) :]
        except ssl.SSLError as exc:  # the TLS session failed meanwhile
            self._fail(exc)
            return
        self._raw.write(self._outgoing.read())

    def close(self) -> None:
        """close_notify after what was written, then the socket closes."""
        if self._closing:
            return
        self._closing = True
        if self._connected:
            try:
                self._tls.unwrap()
            except (ssl.SSLError, OSError):  # the client's close_notify not read: not waited for
                pass
            if self._outgoing.pending:
                self._raw.write(self._outgoing.read())
        self._raw.close()

    def abort(self) -> None:
        self._closing = True
        self._raw.abort()

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "ssl_object":
            return self._tls
        if name == "peercert":
            return self._tls.getpeercert() if self._connected else default
        return self._raw.get_extra_info(name, default)
