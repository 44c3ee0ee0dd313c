"""The benchmarks' secured runs: a node whose listeners speak TLS + SASL, and clients that get in.

`SecuredSetup(zk)` makes a certificate authority and a node certificate (`testing.certs`), and a
user `bench` with a SCRAM-SHA-256 credential in the namespace `zk`; `node_args()` are
`coordinator serve`'s options for `SASL_TLS://` (native) and `SASL_SSL://` (Kafka) listeners and
`--authorizer acl` (`allow(zk, ...)` grants the bench user its groups and topics);
`security` is the client side (`security.client_config.ClientSecurity`). `open_stream` connects,
shakes hands and authenticates, on either listener; `connect_protocol` does that and then hands
the connection to an asyncio protocol (the heartbeat loads), so the measured part pays TLS on
every frame and SASL once, as a real client does.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

from coordinator.wire import codec as P
from core.zk import connect
from security.client_config import ClientSecurity
from security.credentials import CredentialStore
from security.sasl_client import client_tokens
from security.scram import make_credential
from testing.certs import make_certs

USER, PASSWORD, MECHANISM = "bench", "bench-password", "SCRAM-SHA-256"
HANDSHAKE_V, AUTHENTICATE_V = 1, 1


class SecuredSetup:
    """Certificates in a temporary directory and the bench user in `zk` (see the module docstring)."""

    def __init__(self, zk: str):
        self.dir = Path(tempfile.mkdtemp(prefix="groupshift-bench-tls-"))
        self.certs = make_certs(self.dir)
        client = connect(zk, session_timeout=10.0)
        try:
            CredentialStore(client).put(USER, MECHANISM, make_credential(MECHANISM, PASSWORD))
        finally:
            client.stop()
            client.close()
        self.security = ClientSecurity(
            protocol="SASL_SSL", mechanism=MECHANISM, username=USER, password=PASSWORD, ca=self.certs.ca
        )

    listen = "SASL_TLS://127.0.0.1:0"  # the native listener (NodeProcess.start's `listen`)

    def node_args(self, kafka: bool = False) -> list[str]:
        """The node's TLS options, and with `kafka` a `SASL_SSL://` Kafka listener, every request
        checked against Kafka's ACLs (`allow_groups`)."""
        listener = ["--kafka-listen", "SASL_SSL://127.0.0.1:0"] if kafka else []
        return [*listener, *self.certs.node_args("none"), "--authorizer", "acl"]

    def remove(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


async def open_stream(host: str, port: int, security: ClientSecurity | None, kafka: bool):
    """(reader, writer) to the listener at host:port, through TLS and SASL when `security` says so."""
    ctx = security.ssl_context() if security is not None else None
    reader, writer = await asyncio.open_connection(
        host, port, ssl=ctx, server_hostname=host if ctx is not None else None
    )
    if security is not None and security.sasl:
        await (_kafka_sasl if kafka else _native_sasl)(reader, writer, security)
    return reader, writer


async def connect_protocol(host: str, port: int, security: ClientSecurity, kafka: bool, factory):
    """`loop.create_connection(factory, host, port)` through TLS and SASL: (transport, protocol)."""
    _, writer = await open_stream(host, port, security, kafka)
    transport = writer.transport
    protocol = factory()
    protocol.stream_writer = writer  # a collected StreamWriter closes its transport
    transport.set_protocol(protocol)
    protocol.connection_made(transport)
    return transport, protocol


async def _read_frame(reader) -> bytes:
    size = int.from_bytes(await reader.readexactly(4), "big")
    return await reader.readexactly(size)


async def _native_sasl(reader, writer, security: ClientSecurity) -> None:
    writer.write(P.encode_request(P.SASL_HANDSHAKE, 1, {"mechanism": security.mechanism}, "bench"))
    body = P.decode_response(await _read_frame(reader))[1]
    _check(body["error_code"], "SaslHandshake")
    tokens = client_tokens(security.mechanism, security.username, security.password)
    token, rid = next(tokens), 1
    while token is not None:
        rid += 1
        writer.write(P.encode_request(P.SASL_AUTHENTICATE, rid, {"auth_bytes": token}, "bench"))
        body = P.decode_response(await _read_frame(reader))[1]
        _check(body["error_code"], "SaslAuthenticate")
        token = tokens.send(body.get("auth_bytes", b""))


async def _kafka_sasl(reader, writer, security: ClientSecurity) -> None:
    async def request(req, response_class, version: int, rid: int):
        req.with_header(correlation_id=rid, client_id="kbench")
        writer.write(bytes(req.encode(version=version, header=True, framed=True)))
        return response_class.decode(await _read_frame(reader), version=version, header=True)

    r = await request(
        SaslHandshakeRequest(mechanism=security.mechanism), SaslHandshakeResponse, HANDSHAKE_V, 1
    )
    _check(r.error_code, "SaslHandshake")
    tokens = client_tokens(security.mechanism, security.username, security.password)
    token, rid = next(tokens), 1
    while token is not None:
        rid += 1
        r = await request(
            SaslAuthenticateRequest(auth_bytes=token), SaslAuthenticateResponse, AUTHENTICATE_V, rid
        )
        _check(r.error_code, "SaslAuthenticate")
        token = tokens.send(bytes(r.auth_bytes))


def _check(code: int, what: str) -> None:
    if code:
        raise SystemExit(f"the bench client's {what} was refused: {P.ERROR_NAMES.get(code, code)}")


def allow(zk: str, principal: str, groups: tuple[str, ...] = (), topics: tuple[str, ...] = ()) -> None:
    """Read for `principal` on the groups and topics whose names start with these prefixes."""
    from security.acl_store import AclStore
    from security.acls import ALLOW, GROUP, PREFIXED, READ, TOPIC, AccessControlEntry, ResourcePattern

    client = connect(zk)
    try:
        store = AclStore(client)
        for kind, prefixes in ((GROUP, groups), (TOPIC, topics)):
            for prefix in prefixes:
                store.add(
                    ResourcePattern(kind, prefix, PREFIXED), [AccessControlEntry(principal, "*", READ, ALLOW)]
                )
    finally:
        client.stop()
        client.close()
