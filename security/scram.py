"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them, and PLAIN's token: pure, no I/O.

Kafka's SCRAM is RFC 5802 without channel binding (the GS2 header is `n,,`, or `n,a=USER,`
naming the user itself), without SASLprep (a password is its UTF-8 bytes), with the user name
escaped as RFC 5802's `saslname` (`=` as `=3D`, `,` as `=2C`). What a server stores per user and
mechanism is Kafka's credential — salt, stored key, server key, iterations — written as Kafka
writes it in ZooKeeper (`ScramCredential.to_kafka`):

    >>> c = make_credential("SCRAM-SHA-256", "pencil", 4096, salt=b"0123456789abcdef")
    >>> c.to_kafka().split(",")[0], c.iterations
    ('salt=MDEyMzQ1Njc4OWFiY2RlZg==', 4096)
    >>> ScramCredential.from_kafka(c.to_kafka()) == c
    True

An exchange, the server's side with `ScramServer` (its states in `ENTERED_FROM`), the client's
with `ScramClient`; the server looks the user's credential up between the client's first message
and its own (`server_first(None)` answers an unknown user with a decoy, so the exchange does not
say which users exist: RFC 5802's section 5.1):

    >>> client, server = ScramClient("SCRAM-SHA-256", "alice", "pencil"), ScramServer("SCRAM-SHA-256")
    >>> server.client_first(client.first_message())
    'alice'
    >>> client_final = client.final_message(server.server_first(c))
    >>> client.verify(server.client_final(client_final))
    >>> server.state, server.user
    (<ScramState.COMPLETE: 'complete'>, 'alice')

PLAIN (RFC 4616) sends `authzid NUL user NUL password` in one token (`parse_plain`). Kafka kept
PLAIN's passwords in JAAS files; groupshift keeps a verifier instead, never the password: a
credential in the form above, made with SCRAM-SHA-256's PBKDF2 (`plain_matches` checks a
password against it).
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

from core.states import IllegalTransition, Transitions

#: mechanism -> hashlib's name of its hash
MECHANISMS: dict[str, str] = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
MIN_ITERATIONS = 4096  # Kafka's ScramMechanism.minIterations, for both mechanisms
MAX_ITERATIONS = 16384  # the most Kafka lets a stored credential have
DEFAULT_ITERATIONS = 4096  # kafka-configs.sh's default
SALT_BYTES = 32
# The longest SCRAM message or PLAIN token read (a user name, a nonce and a proof fit many times).
MAX_MESSAGE_BYTES = 4096
MAX_PLAIN_FIELD_BYTES = 255  # RFC 4616's limit on each of authzid, user and password
PLAIN_HASH = "SCRAM-SHA-256"  # the PBKDF2 of PLAIN's verifier

# RFC 5802's grammar, as Kafka's ScramMessages reads it (names are the RFC's), over text: a user
# name may be any UTF-8 but NUL, `,` and `=` (which it escapes).
_VALUE = r"[^\x00,]+"
_VALUE_SAFE = r"[^\x00,=]+"
_PRINTABLE = r"[\x21-\x2b\x2d-\x7e]+"
_SASLNAME = r"(?:[^\x00,=]|=2C|=3D)+"
_BASE64 = r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)?"
_EXTENSIONS = rf"(?:,[A-Za-z]+={_VALUE})*"
_CLIENT_FIRST = re.compile(
    rf"(?P<gs2>n,(?:a=(?P<authzid>{_SASLNAME}))?,)"
    rf"(?P<bare>n=(?P<user>{_SASLNAME}),r=(?P<nonce>{_PRINTABLE})(?P<ext>{_EXTENSIONS}))"
)
_SERVER_FIRST = re.compile(
    rf"r=(?P<nonce>{_PRINTABLE}),s=(?P<salt>{_BASE64}),i=(?P<iterations>[0-9]{{1,9}}){_EXTENSIONS}"
)
_CLIENT_FINAL = re.compile(
    rf"(?P<without_proof>c=(?P<channel>{_BASE64}),r=(?P<nonce>{_PRINTABLE}){_EXTENSIONS}),p=(?P<proof>{_BASE64})"
)
_SERVER_FINAL = re.compile(rf"e=(?P<error>{_VALUE_SAFE})|v=(?P<signature>{_BASE64}){_EXTENSIONS}")
# Kafka's one SCRAM extension: a delegation token in place of a user; groupshift has none.
_TOKEN_EXTENSION = re.compile(r",tokenauth=", re.IGNORECASE)


class ScramError(Exception):
    """A message that ends the exchange: malformed, a wrong proof, a mismatched nonce or signature."""


# ------------------------------------------------------------------------------ the credential


@dataclass(frozen=True)
class ScramCredential:
    """What a server keeps of one user's password for one mechanism (never the password)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def to_kafka(self) -> str:
        """Kafka's text form (ScramCredentialUtils): `salt=...,stored_key=...,server_key=...,iterations=N`."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka(cls, text: str) -> ScramCredential:
        """Parse Kafka's text form; raises `ValueError` naming what is wrong."""
        fields = {}
        for token in text.split(","):
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise ValueError(f"credential field {token!r} is not key=value")
            fields[key] = value
        if set(fields) != {"salt", "stored_key", "server_key", "iterations"}:
            raise ValueError(
                f"a credential has salt, stored_key, server_key and iterations; got {sorted(fields)}"
            )
        try:
            salt, stored, server = (
                base64.b64decode(fields[k], validate=True) for k in ("salt", "stored_key", "server_key")
            )
        except (binascii.Error, ValueError):
            raise ValueError("a credential's salt or key is not base64") from None
        if not fields["iterations"].isdigit() or len(fields["iterations"]) > 9:
            raise ValueError(f"iterations={fields['iterations']!r} is not a number")
        return cls(salt, stored, server, int(fields["iterations"]))


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """RFC 5802's `Hi(password, salt, i)`: PBKDF2 with the mechanism's HMAC (hashlib frees the GIL)."""
    return hashlib.pbkdf2_hmac(MECHANISMS[mechanism], password.encode("utf-8"), salt, iterations)


def _hmac(mechanism: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, MECHANISMS[mechanism]).digest()


def _hash(mechanism: str, data: bytes) -> bytes:
    return hashlib.new(MECHANISMS[mechanism], data).digest()


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    client_key = _hmac(mechanism, salted, b"Client Key")
    return ScramCredential(
        salt, _hash(mechanism, client_key), _hmac(mechanism, salted, b"Server Key"), iterations
    )


def make_credential(
    mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """The credential a server stores for `password` (a fresh random salt unless one is given)."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"unknown SCRAM mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}")
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ValueError(f"iterations {iterations} is outside {MIN_ITERATIONS}..{MAX_ITERATIONS}")
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    return credential_from_salted(
        mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations
    )


def sasl_name(user: str) -> str:
    """A user name as a SCRAM message carries it.

    >>> sasl_name("a=b,c")
    'a=3Db=2Cc'
    """
    return user.replace("=", "=3D").replace(",", "=2C")


def user_of(name: str) -> str:
    """The user a `saslname` names; raises `ScramError` for an `=` that escapes nothing.

    >>> user_of("a=3Db=2Cc")
    'a=b,c'
    """
    if "=" in name.replace("=2C", "").replace("=3D", ""):
        raise ScramError(f"user name {name!r} has an unescaped '='")
    return name.replace("=2C", ",").replace("=3D", "=")


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _text(message: bytes, what: str) -> str:
    if len(message) > MAX_MESSAGE_BYTES:
        raise ScramError(f"{what} of {len(message)} bytes; at most {MAX_MESSAGE_BYTES}")
    try:
        return bytes(message).decode("utf-8")
    except UnicodeDecodeError:
        raise ScramError(f"{what} is not UTF-8") from None


def _match(pattern: re.Pattern, message: bytes, what: str) -> re.Match:
    m = pattern.fullmatch(_text(message, what))
    if m is None:
        raise ScramError(f"malformed {what}")
    return m


# ------------------------------------------------------------------------------ the server


class ScramState(enum.Enum):
    """Where a server's exchange is; `ENTERED_FROM` says which states each may be entered from."""

    #: Waits for the client's first message (user name, client nonce). The initial state.
    RECEIVE_CLIENT_FIRST = "receive client-first"
    #: The caller looks the user's credential up, then calls `server_first`. Entered from:
    #: Receive client-first.
    LOOK_UP_CREDENTIAL = "look up credential"
    #: Waits for the client's proof. Entered from: Look up credential.
    RECEIVE_CLIENT_FINAL = "receive client-final"
    #: The proof matched: the client is `user`. Terminal. Entered from: Receive client-final.
    COMPLETE = "complete"
    #: A malformed message or a wrong proof. Terminal. Entered from any state but Complete.
    FAILED = "failed"


class IllegalScramTransition(IllegalTransition):
    """A call out of order: a bug in the caller, never a client's fault (a client's is `ScramError`)."""


_S = ScramState
ENTERED_FROM: Transitions[ScramState] = Transitions(
    {
        _S.LOOK_UP_CREDENTIAL: {_S.RECEIVE_CLIENT_FIRST},
        _S.RECEIVE_CLIENT_FINAL: {_S.LOOK_UP_CREDENTIAL},
        _S.COMPLETE: {_S.RECEIVE_CLIENT_FINAL},
        _S.FAILED: {_S.RECEIVE_CLIENT_FIRST, _S.LOOK_UP_CREDENTIAL, _S.RECEIVE_CLIENT_FINAL},
    },
    IllegalScramTransition,
)
# A per-process key for the decoy credentials of unknown users (stable while the process lives).
_DECOY_KEY = secrets.token_bytes(32)


class ScramServer:
    """One server-side exchange: `client_first`, then `server_first(credential)`, then `client_final`.

    Each raises `ScramError` for what the client sent (the state is then FAILED, and the caller
    answers SASL_AUTHENTICATION_FAILED); `user` is the authenticated user once COMPLETE.
    """

    def __init__(self, mechanism: str, nonce: str | None = None, decoy_key: bytes = _DECOY_KEY):
        if mechanism not in MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism!r}")
        self.mechanism = mechanism
        self.state = ScramState.RECEIVE_CLIENT_FIRST
        self.user: str | None = None
        self._server_nonce = nonce or secrets.token_urlsafe(24)
        self._decoy_key = decoy_key
        self._gs2 = ""
        self._client_first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._credential: ScramCredential | None = None
        self._decoy = False

    def _enter(self, state: ScramState) -> None:
        ENTERED_FROM.check(self.state, state, "a SCRAM exchange")
        self.state = state

    def _fail(self, why: str) -> ScramError:
        self._enter(ScramState.FAILED)
        self._credential = None
        return ScramError(why)

    def client_first(self, message: bytes) -> str:
        """Read the client's first message; return the user whose credential to look up."""
        ENTERED_FROM.check(self.state, ScramState.LOOK_UP_CREDENTIAL, "a SCRAM exchange")
        try:
            m = _match(_CLIENT_FIRST, message, "client-first message")
            if _TOKEN_EXTENSION.search(m["ext"]):
                raise ScramError("delegation tokens are not served")
            user = user_of(m["user"])
            if m["authzid"] is not None and user_of(m["authzid"]) != user:
                raise ScramError("the authorization id differs from the user name")
        except ScramError as exc:
            raise self._fail(str(exc)) from None
        self._gs2, self._client_first_bare = m["gs2"], m["bare"]
        self._nonce = m["nonce"] + self._server_nonce
        self.user = user
        self._enter(ScramState.LOOK_UP_CREDENTIAL)
        return user

    def server_first(self, credential: ScramCredential | None) -> bytes:
        """The server's first message for the user's `credential`; None (no such user, or no
        credential for this mechanism) answers with a decoy, and the exchange fails at the proof."""
        if credential is None or credential.iterations < MIN_ITERATIONS:
            credential, self._decoy = self._decoy_credential(), True
        self._credential = credential
        self._server_first = f"r={self._nonce},s={_b64(credential.salt)},i={credential.iterations}"
        self._enter(ScramState.RECEIVE_CLIENT_FINAL)
        return self._server_first.encode()

    def _decoy_credential(self) -> ScramCredential:
        key = hmac.new(self._decoy_key, f"{self.mechanism}\0{self.user}".encode(), "sha256").digest()
        return ScramCredential(key[:16], key, key, DEFAULT_ITERATIONS)

    def client_final(self, message: bytes) -> bytes:
        """Check the client's proof; return the server's final message (its signature)."""
        ENTERED_FROM.check(self.state, ScramState.COMPLETE, "a SCRAM exchange")
        cred, mech = self._credential, self.mechanism
        try:
            m = _match(_CLIENT_FINAL, message, "client-final message")
            if base64.b64decode(m["channel"]) != self._gs2.encode():
                raise ScramError("the channel binding does not repeat the GS2 header")
            if m["nonce"] != self._nonce:
                raise ScramError("the nonce is not the one the server sent")
            proof = base64.b64decode(m["proof"])
            auth_message = f"{self._client_first_bare},{self._server_first},{m['without_proof']}".encode()
            signature = _hmac(mech, cred.stored_key, auth_message)
            if len(proof) != len(signature):
                raise ScramError("the proof has the wrong length")
            client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
            if not hmac.compare_digest(_hash(mech, client_key), cred.stored_key) or self._decoy:
                raise ScramError("invalid credentials")
        except ScramError as exc:
            raise self._fail(str(exc)) from None
        self._enter(ScramState.COMPLETE)
        self._credential = None
        return f"v={_b64(_hmac(mech, cred.server_key, auth_message))}".encode()


# ------------------------------------------------------------------------------ the client


class ScramClient:
    """One client-side exchange: `first_message()`, `final_message(server_first)`, `verify(server_final)`.

    The server's iteration count must be within Kafka's bounds, its nonce must extend the
    client's, and its final signature must prove it knows the credential; otherwise `ScramError`.
    """

    def __init__(self, mechanism: str, user: str, password: str, nonce: str | None = None):
        if mechanism not in MECHANISMS:
            raise ValueError(
                f"unknown SCRAM mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}"
            )
        self.mechanism = mechanism
        self._password = password
        self._nonce = nonce or secrets.token_urlsafe(24)
        self._bare = f"n={sasl_name(user)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def first_message(self) -> bytes:
        return f"n,,{self._bare}".encode()

    def final_message(self, server_first: bytes) -> bytes:
        m = _match(_SERVER_FIRST, server_first, "server-first message")
        if not m["nonce"].startswith(self._nonce) or m["nonce"] == self._nonce:
            raise ScramError("the server's nonce does not extend the client's")
        iterations = int(m["iterations"])
        if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
            raise ScramError(
                f"the server asks for {iterations} iterations; outside {MIN_ITERATIONS}..{MAX_ITERATIONS}"
            )
        salt = base64.b64decode(m["salt"])
        salted = salted_password(self.mechanism, self._password, salt, iterations)
        without_proof = f"c={_b64(b'n,,')},r={m['nonce']}"
        auth_message = f"{self._bare},{m.group(0)},{without_proof}".encode()
        client_key = _hmac(self.mechanism, salted, b"Client Key")
        signature = _hmac(self.mechanism, _hash(self.mechanism, client_key), auth_message)
        proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
        server_key = _hmac(self.mechanism, salted, b"Server Key")
        self._server_signature = _hmac(self.mechanism, server_key, auth_message)
        return f"{without_proof},p={_b64(proof)}".encode()

    def verify(self, server_final: bytes) -> None:
        """Check the server's signature (raises `ScramError`: an error it sent, or a wrong signature)."""
        if self._server_signature is None:
            raise ScramError("the server's final message came before its first")
        m = _match(_SERVER_FINAL, server_final, "server-final message")
        if m["error"] is not None:
            raise ScramError(f"the server refused: {m['error']}")
        if not hmac.compare_digest(base64.b64decode(m["signature"]), self._server_signature):
            raise ScramError("the server's signature is wrong: it does not know the credential")


# ------------------------------------------------------------------------------ PLAIN


def parse_plain(token: bytes) -> tuple[str, str, str]:
    """PLAIN's `authzid NUL user NUL password` (RFC 4616) as (authzid, user, password).

    >>> parse_plain(b"\\x00alice\\x00pencil")
    ('', 'alice', 'pencil')
    """
    parts = _text(token, "PLAIN token").split("\0")
    if len(parts) != 3:
        raise ScramError("a PLAIN token is authzid NUL user NUL password")
    authzid, user, password = parts
    if not user or not password:
        raise ScramError("a PLAIN token needs a user and a password")
    if any(len(p.encode()) > MAX_PLAIN_FIELD_BYTES for p in parts):
        raise ScramError(f"a PLAIN field is longer than {MAX_PLAIN_FIELD_BYTES} bytes")
    if authzid and authzid != user:
        raise ScramError("the authorization id differs from the user name")
    return authzid, user, password


def plain_verifier(
    password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
) -> ScramCredential:
    """What groupshift stores for a PLAIN user: a SCRAM-SHA-256 credential of the password."""
    return make_credential(PLAIN_HASH, password, iterations, salt)


def plain_matches(verifier: ScramCredential, password: str) -> bool:
    """Whether `password` is the one `verifier` was made from (one PBKDF2: run it off the event loop)."""
    if not MIN_ITERATIONS <= verifier.iterations <= MAX_ITERATIONS:
        return False
    salted = salted_password(PLAIN_HASH, password, verifier.salt, verifier.iterations)
    candidate = credential_from_salted(PLAIN_HASH, salted, verifier.salt, verifier.iterations)
    return hmac.compare_digest(candidate.stored_key, verifier.stored_key)
