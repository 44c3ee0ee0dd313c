"""The node's listeners over TLS: their server contexts from `NodeConfig`, and asyncio's settings for them.

    native, kafka = listener_contexts(config)     # SSLContext or None each; raises GroupshiftError
    await loop.create_server(factory, host, port, **tls_server_args(native, config))

Called when the node is made, before it touches ZooKeeper, so bad TLS settings are one line and
nothing registered: a TLS listener (native `TLS://`, `SASL_TLS://`; Kafka `SSL://`, `SASL_SSL://`)
without `--tls-cert`/`--tls-key`, TLS settings given while no listener uses TLS, and every check of
`security.tls.server_context` (unreadable or mismatched files, expired certificates...). Both
listeners share one context: one certificate, one CA, one `--tls-client-auth`.
"""

from __future__ import annotations

import asyncio.sslproto
import ssl
from typing import Any

from core.errors import GroupshiftError
from security.listeners import PROTOCOLS, Listener
from security.tls import ServerTls, server_context

MAX_HANDSHAKE_S = 60.0  # asyncio's default; a shorter --frame-timeout-ms shortens it
# asyncio's TLS transport reads into a buffer of `SSLProtocol.max_size` bytes per connection, made
# (and zeroed) when the connection is accepted: 256 KiB by default, 2.7 GiB resident at 10,000
# connections (--max-connections). A TLS record holds at most 16 KiB, so 32 KiB still takes two
# records a read: about 54 KiB a TLS connection in all (OpenSSL's state included; 2.6 KiB in
# clear text), and bulk reads over loopback 500-600 MiB/s instead of 750-950.
TLS_READ_BUFFER = 32 << 10


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
    # Process-wide: the node's process is its own, and its TLS transports are its listeners'.
    asyncio.sslproto.SSLProtocol.max_size = TLS_READ_BUFFER
    return (ctx if native.tls else None), (ctx if kafka is not None and kafka.tls else None)


def _listener(protocol: str, kind: str, option: str, host: str, port: int) -> Listener:
    if protocol not in PROTOCOLS[kind]:
        raise GroupshiftError(
            f"{option}: unknown security protocol {protocol!r}; expected one of {', '.join(PROTOCOLS[kind])}"
        )
    return Listener(protocol, host, port)


def tls_server_args(ctx: ssl.SSLContext | None, config: Any) -> dict[str, Any]:
    """`create_server`'s TLS arguments: none for a plaintext listener; else the context, and a
    handshake that must complete within the frame timeout (as a started frame must)."""
    if ctx is None:
        return {}
    return {"ssl": ctx, "ssl_handshake_timeout": min(MAX_HANDSHAKE_S, config.frame_timeout_ms / 1000)}
