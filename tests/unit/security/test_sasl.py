"""security/sasl.py: a connection's SASL exchange — the handshake, PLAIN and SCRAM to completion, and
every refusal Kafka's SaslServerAuthenticator makes, with one message for every failed authentication."""

from __future__ import annotations

import pytest

from core.states import IllegalTransition
from security.sasl import (
    AUTHENTICATE,
    COMPLETE,
    ENTERED_FROM,
    FAILED,
    HANDSHAKE,
    MECHANISMS,
    Refusal,
    Request,
    SaslSession,
)
from security.scram import ScramClient, make_credential, plain_verifier

CREDS = {
    "PLAIN": plain_verifier("pencil"),
    "SCRAM-SHA-256": make_credential("SCRAM-SHA-256", "pencil"),
    "SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "pencil"),
}


def plain(session: SaslSession, token: bytes, creds=CREDS):
    step = session.authenticate(token)
    assert step.look_up is not None and step.refusal is None
    return step.look_up, session.credentials_found(creds)


def test_plain_completes_with_the_users_principal():
    s = SaslSession(MECHANISMS)
    assert s.api_versions() is None
    assert s.handshake("PLAIN") is None and s.state is AUTHENTICATE
    user, step = plain(s, b"\0alice\0pencil")
    assert user == "alice"
    assert (step.principal, step.refusal, step.auth_bytes, s.state) == ("User:alice", None, b"", COMPLETE)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_completes_in_two_tokens(mechanism):
    s, client = SaslSession(MECHANISMS), ScramClient(mechanism, "alice", "pencil")
    assert s.handshake(mechanism) is None
    step = s.authenticate(client.first_message())
    assert step.look_up == "alice"
    step = s.credentials_found(CREDS)
    assert step.principal is None and step.auth_bytes.startswith(b"r=")
    step = s.authenticate(client.final_message(step.auth_bytes))
    client.verify(step.auth_bytes)
    assert (step.principal, s.state) == ("User:alice", COMPLETE)


def _scram_failure(password: str, creds) -> str:
    s, client = SaslSession(MECHANISMS), ScramClient("SCRAM-SHA-256", "alice", password)
    s.handshake("SCRAM-SHA-256")
    s.authenticate(client.first_message())
    step = s.authenticate(client.final_message(s.credentials_found(creds).auth_bytes))
    assert (step.refusal, s.state) == (Refusal.SASL_AUTHENTICATION_FAILED, FAILED)
    return step.message


def _plain_failure(token: bytes, creds) -> str:
    s = SaslSession(MECHANISMS)
    s.handshake("PLAIN")
    step = s.authenticate(token)
    if step.look_up is not None:
        step = s.credentials_found(creds)
    assert (step.refusal, s.state) == (Refusal.SASL_AUTHENTICATION_FAILED, FAILED)
    return step.message


def test_every_failed_authentication_says_the_same():
    """A wrong password, an unknown user, a user without this mechanism, a malformed token: one
    message, so an answer never says which users exist."""
    scram_messages = {
        _scram_failure("wrong", CREDS),
        _scram_failure("pencil", {}),
        _scram_failure("pencil", {"PLAIN": CREDS["PLAIN"]}),
    }
    plain_messages = {
        _plain_failure(b"\0alice\0wrong", CREDS),
        _plain_failure(b"\0alice\0pencil", {}),
        _plain_failure(b"\0alice\0pencil", {"SCRAM-SHA-256": CREDS["SCRAM-SHA-256"]}),
        _plain_failure(b"no separators", CREDS),
    }
    assert len(scram_messages) == 1 and len(plain_messages) == 1
    assert "invalid credentials" in scram_messages.pop()


def test_an_unknown_mechanism_is_refused_with_the_enabled_ones_kept():
    s = SaslSession(["SCRAM-SHA-512"])
    assert s.handshake("PLAIN") is Refusal.UNSUPPORTED_SASL_MECHANISM
    assert s.handshake("GSSAPI") is Refusal.ILLEGAL_SASL_STATE  # refused already: nothing more
    assert s.enabled == ["SCRAM-SHA-512"] and s.state is FAILED


@pytest.mark.parametrize(
    "steps",
    [
        ["authenticate"],  # SaslAuthenticate before SaslHandshake
        ["handshake", "handshake"],  # a second handshake
        ["handshake", "api_versions"],  # ApiVersions once a mechanism is chosen
    ],
)
def test_out_of_order_requests_are_illegal_state(steps):
    s = SaslSession(MECHANISMS)
    results = []
    for step in steps:
        if step == "authenticate":
            results.append(s.authenticate(b"\0a\0b").refusal)
        elif step == "handshake":
            results.append(s.handshake("PLAIN"))
        else:
            results.append(s.api_versions())
    assert results[-1] is Refusal.ILLEGAL_SASL_STATE and s.state is FAILED


def test_a_token_while_a_look_up_is_pending_is_illegal():
    s = SaslSession(MECHANISMS)
    s.handshake("PLAIN")
    assert s.authenticate(b"\0alice\0pencil").look_up == "alice"
    assert s.authenticate(b"\0alice\0pencil").refusal is Refusal.ILLEGAL_SASL_STATE


def test_what_each_state_answers():
    s = SaslSession(MECHANISMS)
    assert all(s.allows(r) for r in Request) and not s.allows(None)
    s.handshake("nope")
    assert not s.allows(Request.SASL_AUTHENTICATE)  # FAILED: the connection is being closed


def test_the_state_table():
    assert ENTERED_FROM.entered_from(HANDSHAKE) == frozenset()
    assert ENTERED_FROM.allows(HANDSHAKE, AUTHENTICATE) and ENTERED_FROM.allows(AUTHENTICATE, COMPLETE)
    assert not ENTERED_FROM.allows(HANDSHAKE, COMPLETE) and not ENTERED_FROM.allows(COMPLETE, FAILED)
    s = SaslSession(MECHANISMS)
    with pytest.raises(IllegalTransition):
        s.credentials_found(CREDS)  # nothing looked up: a bug in the listener


@pytest.mark.parametrize("enabled", [[], ["GSSAPI"], ["PLAIN", "OAUTHBEARER"]])
def test_only_known_mechanisms_can_be_enabled(enabled):
    with pytest.raises(ValueError):
        SaslSession(enabled)
