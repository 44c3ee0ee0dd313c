"""The authentication APIs' messages: SaslHandshake (17) and SaslAuthenticate (36), Kafka's fields.

Both listeners serve them (docs/protocol.md, docs/kafka-listener.md); `schema.APIS` lists them
with the group APIs. A connection of a SASL listener must complete them before anything else
(`security.sasl` is the exchange, `coordinator/node/authenticator.py` the node's side).
"""

from __future__ import annotations

from coordinator.wire.message import Int64, Message

SASL_HANDSHAKE = 17
SASL_AUTHENTICATE = 36


class SaslHandshakeRequest(Message):
    mechanism: str


class SaslAuthenticateRequest(Message):
    auth_bytes: bytes


class SaslHandshakeResponse(Message):
    error_code: int
    mechanisms: list[str] = []  # the node's enabled mechanisms


class SaslAuthenticateResponse(Message):
    error_code: int
    error_message: str | None = None
    auth_bytes: bytes = b""
    session_lifetime_ms: Int64 = 0  # 0: no re-authentication (KIP-368 is not served)
