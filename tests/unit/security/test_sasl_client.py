"""The client's SASL tokens against the server's side of the exchange (security/scram.py)."""

from __future__ import annotations

import base64

import pytest

from security import scram
from security.sasl_client import client_tokens


@pytest.mark.parametrize("mechanism", sorted(scram.MECHANISMS))
def test_scram_tokens_complete_an_exchange_and_check_the_server(mechanism):
    credential = scram.make_credential(mechanism, "pencil")
    server = scram.ScramServer(mechanism)
    tokens = client_tokens(mechanism, "alice", "pencil")
    first = next(tokens)
    assert server.client_first(first) == "alice"
    final = tokens.send(server.server_first(credential))
    assert tokens.send(server.client_final(final)) is None  # the server proved it knows the credential


def test_a_server_that_does_not_know_the_credential_is_caught():
    mechanism = "SCRAM-SHA-256"
    server = scram.ScramServer(mechanism)
    tokens = client_tokens(mechanism, "alice", "pencil")
    server.client_first(next(tokens))
    final = tokens.send(server.server_first(scram.make_credential(mechanism, "pencil")))
    server.client_final(final)
    forged = b"v=" + base64.b64encode(b"x" * 32)
    with pytest.raises(scram.ScramError, match="signature is wrong"):
        tokens.send(forged)


def test_plain_is_one_token():
    tokens = client_tokens("PLAIN", "alice", "pencil")
    token = next(tokens)
    assert scram.parse_plain(token) == ("", "alice", "pencil")
    assert tokens.send(b"") is None


def test_an_unknown_mechanism_is_refused():
    with pytest.raises(ValueError, match="unknown SASL mechanism 'GSSAPI'"):
        next(client_tokens("GSSAPI", "alice", "pencil"))
