"""SASL on a member's connection to a node: SaslHandshake, then SaslAuthenticate until done.

Run once, right after the connection (and its TLS handshake) is made, before any group request
(a SASL listener closes a connection that sends anything else first). A refusal — an unknown
mechanism, wrong credentials, a server that cannot prove it knows the credential — raises
`AuthenticationFailed`, which a member does not retry.
"""

from __future__ import annotations

from typing import Any

from coordinator.wire import codec as wire
from coordinator.wire.schema import (
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
)
from core.errors import GroupshiftError
from security.client_config import ClientSecurity
from security.sasl_client import client_tokens
from security.scram import ScramError


class AuthenticationFailed(GroupshiftError):
    """The node refused this client's TLS handshake or SASL credentials: retrying cannot help.

    Not a `ConnectionLost`, so a member stops and says why instead of looking for another node."""


MAX_ROUNDS = 4  # PLAIN takes one SaslAuthenticate, SCRAM two


def authenticate(conn: Any, security: ClientSecurity, timeout: float) -> None:
    """Authenticate `conn` (a `connection.Connection`) as `security.username`; raises
    `AuthenticationFailed` (refused) or `ConnectionLost` (the connection broke)."""
    where = f"coordinator node {conn.address[0]}:{conn.address[1]}"
    resp = conn.request(SASL_HANDSHAKE, SaslHandshakeRequest(mechanism=security.mechanism), timeout)
    if resp.error_code:
        offered = ", ".join(resp.mechanisms) or "none"
        raise AuthenticationFailed(
            f"{where} does not accept SASL mechanism {security.mechanism} ({_name(resp.error_code)}; "
            f"it offers {offered}); set sasl.mechanism in the client config"
        )
    tokens = client_tokens(security.mechanism, security.username, security.password)
    try:
        token = next(tokens)
        for _ in range(MAX_ROUNDS):
            if token is None:
                return
            resp = conn.request(SASL_AUTHENTICATE, SaslAuthenticateRequest(auth_bytes=token), timeout)
            if resp.error_code:
                why = f": {resp.error_message}" if resp.error_message else ""
                raise AuthenticationFailed(
                    f"{where} refused the credentials of {security.username!r} "
                    f"({_name(resp.error_code)}{why}); check sasl.username and sasl.password"
                )
            token = tokens.send(resp.auth_bytes)
    except ScramError as exc:
        raise AuthenticationFailed(f"SASL with {where} failed: {exc}") from None
    raise AuthenticationFailed(f"SASL with {where} did not finish in {MAX_ROUNDS} rounds")


def _name(code: int) -> str:
    return wire.ERROR_NAMES.get(code, str(code))
