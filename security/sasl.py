"""A connection's SASL authentication, as Kafka's SaslServerAuthenticator runs it: pure, no I/O.

On a SASL listener a connection starts unauthenticated. It may ask ApiVersions, then must send
SaslHandshake naming a mechanism the node enables, then the mechanism's tokens in SaslAuthenticate
requests; anything else closes it (the listener's job: `allows` says which requests a state
takes). The session answers each request with what the listener sends back, and says when it
needs the user's stored credentials: the listener fetches them (from ZooKeeper, off its event
loop) and hands them to `credentials_found`.

    session = SaslSession(["PLAIN", "SCRAM-SHA-256"])
    session.handshake("SCRAM-SHA-256")        # None, or why it is refused (a `Refusal`)
    step = session.authenticate(token)        # step.look_up == "alice": fetch her credentials
    step = session.credentials_found(creds)   # {"SCRAM-SHA-256": ScramCredential, ...}
    step.auth_bytes, step.refusal, step.principal   # principal "User:alice" once COMPLETE

A refusal ends the connection after its answer, as in Kafka. Every failed authentication has
the same message, whatever failed (no such user, a wrong password, a malformed token), so the
answer does not say which users exist.

State transitions
-----------------

    HANDSHAKE     ──SaslHandshake, an enabled mechanism──▶ AUTHENTICATE
    AUTHENTICATE  ──the mechanism's last token checks────▶ COMPLETE
    HANDSHAKE, AUTHENTICATE  ──anything refused──────────▶ FAILED
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from core.states import IllegalTransition, Transitions
from security import scram

PLAIN = "PLAIN"
MECHANISMS = (PLAIN, *scram.MECHANISMS)  # what a node can enable (Kafka's names)
USER_PREFIX = "User:"


class SaslState(enum.Enum):
    """Where a connection's authentication is; `ENTERED_FROM` says which states each may be entered from."""

    #: ApiVersions and SaslHandshake are answered. The initial state.
    HANDSHAKE = "handshake"
    #: The chosen mechanism's SaslAuthenticate tokens are answered. Entered from: Handshake.
    AUTHENTICATE = "authenticate"
    #: Authenticated: `principal` is the client's. Terminal. Entered from: Authenticate.
    COMPLETE = "complete"
    #: Refused: the connection is closed after the answer. Terminal. Entered from: Handshake, Authenticate.
    FAILED = "failed"


class IllegalSaslTransition(IllegalTransition):
    """A move `ENTERED_FROM` forbids: a bug in the listener, never a client's fault."""


HANDSHAKE, AUTHENTICATE, COMPLETE, FAILED = SaslState
ENTERED_FROM: Transitions[SaslState] = Transitions(
    {AUTHENTICATE: {HANDSHAKE}, COMPLETE: {AUTHENTICATE}, FAILED: {HANDSHAKE, AUTHENTICATE}},
    IllegalSaslTransition,
)


class Request(enum.Enum):
    """The requests a connection that has not authenticated may send."""

    API_VERSIONS = "ApiVersions"
    SASL_HANDSHAKE = "SaslHandshake"
    SASL_AUTHENTICATE = "SaslAuthenticate"


#: state -> the requests answered in it; any other request (any API at all) closes the connection
#: unanswered. An answered request out of order is refused with `Refusal.ILLEGAL_STATE`.
ANSWERED: dict[SaslState, frozenset[Request]] = {
    HANDSHAKE: frozenset(Request),
    AUTHENTICATE: frozenset(Request),
}


class Refusal(enum.Enum):
    """Why a request is refused; the listener answers it with Kafka's code of the same name, then closes."""

    UNSUPPORTED_SASL_MECHANISM = "unsupported SASL mechanism"
    ILLEGAL_SASL_STATE = "illegal SASL state"
    SASL_AUTHENTICATION_FAILED = "SASL authentication failed"


@dataclass(frozen=True)
class Step:
    """The answer to one SaslAuthenticate: bytes for the client, or a refusal; or a credential to fetch."""

    auth_bytes: bytes = b""
    refusal: Refusal | None = None
    message: str | None = None  # the refusal's message (Kafka's wording)
    look_up: str | None = None  # the user whose credentials `credentials_found` needs
    principal: str | None = None  # `User:NAME`, once the exchange completed


class SaslSession:
    """One connection's authentication (see the module docstring)."""

    def __init__(self, enabled: Sequence[str]):
        unknown = [m for m in enabled if m not in MECHANISMS]
        if unknown or not enabled:
            raise ValueError(f"SASL mechanisms {list(enabled)}; expected some of {', '.join(MECHANISMS)}")
        self.enabled = list(enabled)
        self.state = HANDSHAKE
        self.mechanism: str | None = None
        self.principal: str | None = None
        self._scram: scram.ScramServer | None = None
        self._plain: tuple[str, str] | None = None  # (user, password) while her verifier is fetched

    def _enter(self, state: SaslState) -> None:
        ENTERED_FROM.check(self.state, state, "a SASL session")
        self.state = state

    def allows(self, request: Request | None) -> bool:
        """Whether the listener answers `request` (None: any other API) in this state."""
        return request is not None and request in ANSWERED.get(self.state, ())

    def api_versions(self) -> Refusal | None:
        """ApiVersions: answered before the handshake only."""
        if self.state is HANDSHAKE:
            return None
        return self._refuse(Refusal.ILLEGAL_SASL_STATE)

    def _refuse(self, refusal: Refusal) -> Refusal:
        if self.state is not FAILED:
            self._enter(FAILED)
        self._plain = self._scram = None
        return refusal

    def handshake(self, mechanism: str) -> Refusal | None:
        """SaslHandshake: the client's mechanism, if enabled (the answer lists `enabled` either way)."""
        if self.state is not HANDSHAKE:
            return self._refuse(Refusal.ILLEGAL_SASL_STATE)
        if mechanism not in self.enabled:
            return self._refuse(Refusal.UNSUPPORTED_SASL_MECHANISM)
        self.mechanism = mechanism
        if mechanism != PLAIN:
            self._scram = scram.ScramServer(mechanism)
        self._enter(AUTHENTICATE)
        return None

    def _failed(self) -> Step:
        return Step(
            refusal=self._refuse(Refusal.SASL_AUTHENTICATION_FAILED),
            message=f"Authentication failed during authentication due to invalid credentials with "
            f"SASL mechanism {self.mechanism}",
        )

    def authenticate(self, token: bytes) -> Step:
        """One SaslAuthenticate token of the chosen mechanism."""
        if self.state is not AUTHENTICATE or self._pending_lookup():
            return Step(refusal=self._refuse(Refusal.ILLEGAL_SASL_STATE), message="no SaslHandshake yet")
        try:
            if self._scram is None:  # PLAIN: one token
                _, user, password = scram.parse_plain(token)
                self._plain = (user, password)
                return Step(look_up=user)
            if self._scram.state is scram.ScramState.RECEIVE_CLIENT_FIRST:
                return Step(look_up=self._scram.client_first(token))
            final = self._scram.client_final(token)
        except scram.ScramError:
            return self._failed()
        return self._complete(self._scram.user, final)

    def _pending_lookup(self) -> bool:
        return self._plain is not None or (
            self._scram is not None and self._scram.state is scram.ScramState.LOOK_UP_CREDENTIAL
        )

    def credentials_found(self, credentials: Mapping[str, scram.ScramCredential]) -> Step:
        """The looked-up user's credentials by mechanism (empty: no such user). PLAIN runs one
        PBKDF2 here: call it off the event loop."""
        if self._plain is not None:
            user, password = self._plain
            self._plain = None
            verifier = credentials.get(PLAIN)
            # An unknown user costs the same PBKDF2 as a known one (against a verifier nobody matches).
            matches = scram.plain_matches(verifier or _NOBODY, password) and verifier is not None
            return self._complete(user, b"") if matches else self._failed()
        if self._scram is None or self._scram.state is not scram.ScramState.LOOK_UP_CREDENTIAL:
            raise IllegalSaslTransition("credentials_found without a pending look-up")
        return Step(auth_bytes=self._scram.server_first(credentials.get(self.mechanism)))

    def _complete(self, user: str | None, auth_bytes: bytes) -> Step:
        self._enter(COMPLETE)
        self.principal = USER_PREFIX + (user or "")
        self._scram = None
        return Step(auth_bytes=auth_bytes, principal=self.principal)


_NOBODY = scram.ScramCredential(b"\0" * 16, b"", b"", scram.DEFAULT_ITERATIONS)
