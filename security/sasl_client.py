"""The client's side of a SASL exchange as tokens, whatever carries them (pure, no I/O).

    tokens = client_tokens("SCRAM-SHA-256", "alice", password)
    token = next(tokens)                      # the first SaslAuthenticate's auth_bytes
    while token is not None:
        answer = <send token, read the answer's auth_bytes>
        token = tokens.send(answer)           # the next token, or None: done (the server is verified)

PLAIN is one token and no answer to check; SCRAM is two tokens, and the server's final message is
verified (`security.scram.ScramError` when it does not know the credential). Used by groupshift's
own members on the native listener (`coordinator/member/authenticate.py`) and by the benchmarks'
clients on both listeners.
"""

from __future__ import annotations

from collections.abc import Generator

from security.scram import MECHANISMS, ScramClient

Tokens = Generator[bytes | None, bytes, None]


def client_tokens(mechanism: str, user: str, password: str) -> Tokens:
    """A generator of the tokens to send (see the module docstring); raises `ValueError` for an
    unknown mechanism at the first `next()`."""
    if mechanism == "PLAIN":
        yield f"\0{user}\0{password}".encode()
        yield None
        return
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SASL mechanism {mechanism!r}; expected PLAIN or {', '.join(MECHANISMS)}")
    client = ScramClient(mechanism, user, password)
    server_first = yield client.first_message()
    server_final = yield client.final_message(server_first)
    client.verify(server_final)
    yield None
