"""security/scram.py: RFC 7677's test vector on both sides, Kafka's credential form, malformed
messages, the server's state table, kafka-python's own SCRAM client against our server, PLAIN."""

from __future__ import annotations

import base64

import pytest
from kafka.net.sasl.scram import ScramClient as KafkaPythonScramClient

from core.states import IllegalTransition
from security.scram import (
    ENTERED_FROM,
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
    ScramState,
    make_credential,
    parse_plain,
    plain_matches,
    plain_verifier,
    sasl_name,
    user_of,
)

# RFC 7677, section 3: SCRAM-SHA-256, user "user", password "pencil".
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc_credential() -> ScramCredential:
    return make_credential("SCRAM-SHA-256", "pencil", 4096, salt=RFC_SALT)


def test_rfc7677_client_side():
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify(RFC_SERVER_FINAL)


def test_rfc7677_server_side():
    server = ScramServer("SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    assert server.client_first(RFC_CLIENT_FIRST) == "user"
    assert server.state is ScramState.LOOK_UP_CREDENTIAL
    assert server.server_first(rfc_credential()) == RFC_SERVER_FIRST
    assert server.client_final(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert (server.state, server.user) == (ScramState.COMPLETE, "user")


def exchange(mechanism: str, user: str, password: str, credential: ScramCredential | None) -> ScramServer:
    client, server = ScramClient(mechanism, user, password), ScramServer(mechanism)
    assert server.client_first(client.first_message()) == user
    final = client.final_message(server.server_first(credential))
    client.verify(server.client_final(final))
    return server


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", ["alice", "a,b=c", "ünïcode", "User:x"])
def test_round_trip(mechanism, user):
    credential = make_credential(mechanism, "s3cret", MIN_ITERATIONS)
    assert exchange(mechanism, user, "s3cret", credential).user == user


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_kafka_pythons_client_against_our_server(mechanism):
    """Interoperability with a third-party implementation (kafka-python's, as its consumers use it)."""
    client = KafkaPythonScramClient("bob", "pw", mechanism)
    server = ScramServer(mechanism)
    assert server.client_first(client.first_message()) == "bob"
    client.process_server_first_message(server.server_first(make_credential(mechanism, "pw", 8192)))
    client.process_server_final_message(server.client_final(client.final_message()))
    assert server.state is ScramState.COMPLETE


def test_wrong_password_fails_at_the_proof():
    with pytest.raises(ScramError, match="invalid credentials"):
        exchange("SCRAM-SHA-256", "alice", "wrong", make_credential("SCRAM-SHA-256", "right"))


def test_an_unknown_user_gets_a_stable_decoy_and_fails_at_the_proof():
    key = b"k" * 32
    salts = []
    for user in ("ghost", "ghost", "other"):
        client, server = ScramClient("SCRAM-SHA-256", user, "pw"), ScramServer("SCRAM-SHA-256", decoy_key=key)
        server.client_first(client.first_message())
        first = server.server_first(None)
        salts.append(first.split(b",")[1])
        with pytest.raises(ScramError):
            server.client_final(client.final_message(first))
        assert server.state is ScramState.FAILED
    assert salts[0] == salts[1] != salts[2]  # the same user always sees the same salt


def test_a_credential_below_kafkas_minimum_is_refused():
    weak = make_credential("SCRAM-SHA-256", "pw")
    weak = ScramCredential(weak.salt, weak.stored_key, weak.server_key, 1000)
    with pytest.raises(ScramError):
        exchange("SCRAM-SHA-256", "alice", "pw", weak)


@pytest.mark.parametrize(
    "message",
    [
        b"n=user,r=abc",  # no GS2 header
        b"y,,n=user,r=abc",  # the client supports channel binding: not served
        b"p=tls-unique,,n=user,r=abc",
        b"n,a=bob,n=alice,r=abc",  # authorization id other than the user
        b"n,,n=a=3x,r=abc",  # an '=' that escapes nothing
        b"n,,n=user,r=abc,tokenauth=true",  # Kafka's delegation tokens
        b"n,,m=ext,n=user,r=abc",  # a mandatory extension
        b"n,,n=,r=abc",
        b"n,,n=user,r=a,b",
        b"n,,n=us\xffer,r=abc",  # not UTF-8
        b"n,,n=" + b"u" * 5000 + b",r=abc",
    ],
)
def test_malformed_client_first(message):
    server = ScramServer("SCRAM-SHA-256")
    with pytest.raises(ScramError):
        server.client_first(message)
    assert server.state is ScramState.FAILED


def _final(proof: bytes, channel: str = "biws", nonce: str = RFC_CLIENT_NONCE + RFC_SERVER_NONCE) -> bytes:
    return f"c={channel},r={nonce},p={base64.b64encode(proof).decode()}".encode()


@pytest.mark.parametrize(
    "message",
    [
        _final(b"x" * 32, channel=base64.b64encode(b"y,,").decode()),  # channel binding not the header's
        _final(b"x" * 32, nonce=RFC_CLIENT_NONCE + "other"),  # not the server's nonce
        _final(b"x" * 31),  # a proof of the wrong length
        b"c=biws,r=" + (RFC_CLIENT_NONCE + RFC_SERVER_NONCE).encode() + b",p=!!!",
        b"c=biws",
    ],
)
def test_malformed_client_final(message):
    server = ScramServer("SCRAM-SHA-256", nonce=RFC_SERVER_NONCE)
    server.client_first(RFC_CLIENT_FIRST)
    server.server_first(rfc_credential())
    with pytest.raises(ScramError):
        server.client_final(message)
    assert server.state is ScramState.FAILED


def test_calls_out_of_order_are_bugs():
    server = ScramServer("SCRAM-SHA-256")
    with pytest.raises(IllegalTransition):
        server.client_final(RFC_CLIENT_FINAL)
    server = exchange("SCRAM-SHA-256", "a", "b", make_credential("SCRAM-SHA-256", "b"))
    with pytest.raises(IllegalTransition):
        server.client_first(RFC_CLIENT_FIRST)


def test_the_state_table():
    S = ScramState
    assert ENTERED_FROM.entered_from(S.RECEIVE_CLIENT_FIRST) == frozenset()
    assert ENTERED_FROM.allows(S.RECEIVE_CLIENT_FINAL, S.COMPLETE)
    assert not ENTERED_FROM.allows(S.COMPLETE, S.FAILED)
    assert not ENTERED_FROM.allows(S.RECEIVE_CLIENT_FIRST, S.COMPLETE)


@pytest.mark.parametrize(
    "server_first, error",
    [
        (b"r=someoneelse,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),
        (RFC_SERVER_FIRST.replace(b"i=4096", b"i=1000"), "iterations"),
        (RFC_SERVER_FIRST.replace(b"i=4096", f"i={MAX_ITERATIONS + 1}".encode()), "iterations"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce"),  # not extended
        (b"garbage", "malformed"),
    ],
)
def test_the_client_checks_the_server_first(server_first, error):
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.first_message()
    with pytest.raises(ScramError, match=error):
        client.final_message(server_first)


@pytest.mark.parametrize(
    "server_final, error",
    [
        (b"v=" + base64.b64encode(b"x" * 32), "signature is wrong"),
        (b"e=invalid-proof", "refused: invalid-proof"),
    ],
)
def test_the_client_checks_the_server_final(server_final, error):
    client = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce=RFC_CLIENT_NONCE)
    client.final_message(RFC_SERVER_FIRST)
    with pytest.raises(ScramError, match=error):
        client.verify(server_final)


def test_kafkas_credential_form_round_trips():
    c = make_credential("SCRAM-SHA-512", "pw", 4096)
    text = c.to_kafka()
    assert [f.split("=", 1)[0] for f in text.split(",")] == ["salt", "stored_key", "server_key", "iterations"]
    assert ScramCredential.from_kafka(text) == c
    assert len(c.stored_key) == len(c.server_key) == 64


@pytest.mark.parametrize(
    "text",
    [
        "salt=AA==,stored_key=AA==,server_key=AA==",
        "salt=AA==,stored_key=AA==,server_key=AA==,iterations=4096,extra=1",
        "salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
        "salt=AA==,stored_key=AA==,server_key=AA==,iterations=many",
        "salt",
    ],
)
def test_a_malformed_stored_credential(text):
    with pytest.raises(ValueError):
        ScramCredential.from_kafka(text)


@pytest.mark.parametrize(
    "mechanism, iterations",
    [("SCRAM-SHA-256", MIN_ITERATIONS - 1), ("SCRAM-SHA-512", MAX_ITERATIONS + 1), ("SCRAM-SHA-1", 4096)],
)
def test_make_credential_bounds(mechanism, iterations):
    with pytest.raises(ValueError):
        make_credential(mechanism, "pw", iterations)


def test_sasl_names_escape_and_unescape():
    for user in ("plain", "a=b", "a,b", "=2C", ",,=="):
        assert user_of(sasl_name(user)) == user


@pytest.mark.parametrize(
    "token, parsed",
    [
        (b"\0alice\0pw", ("", "alice", "pw")),
        (b"alice\0alice\0pw", ("alice", "alice", "pw")),
        ("\0ünï\0pässword".encode(), ("", "ünï", "pässword")),
    ],
)
def test_plain_tokens(token, parsed):
    assert parse_plain(token) == parsed


@pytest.mark.parametrize(
    "token",
    [
        b"alice\0pw",
        b"\0alice\0pw\0x",
        b"\0\0pw",
        b"\0alice\0",
        b"bob\0alice\0pw",
        b"\0al\xffice\0pw",
        b"\0a\0" + b"p" * 256,
    ],
)
def test_malformed_plain_tokens(token):
    with pytest.raises(ScramError):
        parse_plain(token)


def test_plain_verifier_checks_a_password_and_stores_none():
    verifier = plain_verifier("pencil", 4096)
    assert b"pencil" not in verifier.to_kafka().encode()
    assert plain_matches(verifier, "pencil")
    assert not plain_matches(verifier, "pencil ")
    assert not plain_matches(ScramCredential(verifier.salt, verifier.stored_key, b"", 10), "pencil")
