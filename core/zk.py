"""The one kazoo client factory, and where groupshift finds its ZooKeeper.

Every package connects through `connect()`; the connect string is Kafka's
(`host:port[,host:port...][/chroot]`). With neither `--zk` nor `GROUPSHIFT_ZK`, commands use the
embedded single-node ZooKeeper started by `groupshift zk start` (see `core.embedded`).

    zk = connect("127.0.0.1:2181/groupshift-test", session_timeout=6.0)
    zk.ensure_path("/consumers")
    zk.stop(); zk.close()

Security comes from the environment, so every process a command starts inherits it (the CLI's
`--zk-auth-file`, `--zk-read-principal` and `--zk-tls-*` set these variables):
`$GROUPSHIFT_ZK_AUTH_FILE` names a `digest:USER:PASSWORD` or `sasl:USER:PASSWORD` (SASL
DIGEST-MD5) file — the client authenticates with it and creates every znode (the chroot too)
readable and writable by that user only, plus read for
the principals in `$GROUPSHIFT_ZK_READ_PRINCIPAL`; `$GROUPSHIFT_ZK_TLS_CA` (with
`..._TLS_CERT`/`..._TLS_KEY` for a client certificate) connects to ZooKeeper's
`secureClientPort` over TLS. See `core.zk_auth`.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import socket
import ssl
import sys
import threading
import warnings
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    ConnectionClosedError,
    InvalidACLError,
    NoAuthError,
    NoNodeError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState, KeeperState

from core import zk_auth
from core.errors import GroupshiftError, ZooKeeperUnavailable
from core.zk_reconnect import CONNECTION_RETRY, bound_reconnects
from core.zk_reconnect import handler as reconnect_handler


class ZooKeeperNoAuth(GroupshiftError):
    """ZooKeeper refused a request under the znode's ACL (`NoAuth`), or refused the credential."""


#: kazoo's refusals: no retry succeeds until an operator changes an ACL or the credential, so a
#: long-lived task that meets one stops (with `refused_by_acl`'s line) instead of retrying.
KAZOO_REFUSALS = (NoAuthError, AuthFailedError)
#: the same, or groupshift's one-line form of them.
REFUSALS = (*KAZOO_REFUSALS, ZooKeeperNoAuth)


def refused_by_acl(exc: BaseException, znode: str | None = None) -> ZooKeeperNoAuth:
    """kazoo's `NoAuthError` (or `AuthFailedError`) as one line saying which credential this
    process used and what to do; `znode`, when known, is the path the refused request named."""
    path = os.environ.get(zk_auth.ENV_AUTH_FILE)
    used = f"the credential in {path}" if path else "no credential"
    if isinstance(exc, AuthFailedError):
        return ZooKeeperNoAuth(
            f"ZooKeeper refused the credential (AuthFailed); this process used {used}: a sasl: user "
            "must be in the server's JAAS Server section with that password, and the server must "
            "run SASL (docs/security.md); fix the file, or pass --zk-auth-file FILE (or set "
            f"${zk_auth.ENV_AUTH_FILE}) naming another"
        )
    on = f" on {znode}" if znode else ""
    return ZooKeeperNoAuth(
        f"ZooKeeper refused the request: NoAuth{on} (the znode's ACL does not let this client read or "
        f"change it); this process used {used}: pass --zk-auth-file FILE (or set "
        f"${zk_auth.ENV_AUTH_FILE}) naming the {zk_auth.CREDENTIAL_FORMS} of the user that wrote this tree"
    )


# ZooKeeper knows these ACL schemes without configuration; any other (sasl, x509) is InvalidACL on
# every create unless the server loads its provider (`authProvider.N=...`).
BUILT_IN_SCHEMES = ("digest", "ip", "world", "auth")


def unknown_acl_scheme(acl: list) -> ZooKeeperNoAuth:
    """The server's InvalidACL for an ACL whose scheme it has no provider for, as one line."""
    schemes = sorted({a.id.scheme for a in acl} - set(BUILT_IN_SCHEMES))
    if not schemes:
        return ZooKeeperNoAuth(
            "ZooKeeper refused the ACL of a new znode (InvalidACL); check --zk-read-principal "
            f"(${zk_auth.ENV_READ_PRINCIPAL}) and --zk-auth-file"
        )
    return ZooKeeperNoAuth(
        f"ZooKeeper refused the ACL of new znodes (InvalidACL): the server does not accept the "
        f"scheme {', '.join(schemes)} in an ACL; load its provider there "
        "(authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider in zoo.cfg "
        "for sasl: docs/security.md), or use a digest: credential and read principals"
    )


class ChrootMissing(GroupshiftError):
    """The --zk chroot does not exist and the command does not create one (it only reads or deletes)."""


# kazoo warns on stderr when a chroot is missing; connect() handles that case itself (and a
# command's error must stay one line).
warnings.filterwarnings("ignore", message="No chroot path exists", category=UserWarning)

ENV_ZK = "GROUPSHIFT_ZK"
# A command's ZooKeeper session timeout (its ephemeral znodes, e.g. a migration's lock, outlive a
# killed command by this long), how long it waits to connect, and how long a one-shot command
# waits for a ZooKeeper that stopped answering in its middle before it gives up. All three in
# milliseconds; tests shorten them.
ENV_SESSION_TIMEOUT_MS = "GROUPSHIFT_ZK_SESSION_TIMEOUT_MS"
ENV_CONNECT_TIMEOUT_MS = "GROUPSHIFT_ZK_CONNECT_TIMEOUT_MS"
ENV_GIVE_UP_MS = "GROUPSHIFT_ZK_GIVE_UP_MS"
SESSION_TIMEOUT_S = 10.0
MIN_ENV_MS, MAX_ENV_MS = 100, 3_600_000
# A connect slower than this prints what it waits for (a reachable server answers in milliseconds).
WAIT_NOTICE_S = 1.0
MAX_HOSTS = 64
MAX_CHROOT_LENGTH = 1024
# A host name (RFC 1123 labels), an IPv4 address, or a bracketed IPv6 address.
_HOST = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252}[A-Za-z0-9])?|\[[0-9A-Fa-f:.]{2,45}\]")


@dataclass(frozen=True)
class ZkSecurity:
    """How a client authenticates and what ACL its znodes get; the default is open, as before."""

    credential: zk_auth.ZkCredential | None = None
    readers: tuple = ()
    tls: zk_auth.ZkTls | None = None

    @classmethod
    def from_env(cls, digest: tuple[str, str] | None = None) -> ZkSecurity:
        """`digest=(user, password)` when given, else `$GROUPSHIFT_ZK_AUTH_FILE`'s credential;
        the readers and TLS settings from their variables. Bad settings raise `GroupshiftError`."""
        env = os.environ
        if digest:
            user, password = digest
            credential = zk_auth.ZkCredential(
                zk_auth.check_user(user, "the ZooKeeper digest"),
                zk_auth.check_password(password, "the ZooKeeper digest"),
            )
        elif env.get(zk_auth.ENV_AUTH_FILE):
            credential = zk_auth.load_auth_file(env[zk_auth.ENV_AUTH_FILE])
        else:
            credential = None
        if credential and credential.scheme == "sasl" and importlib.util.find_spec("puresasl") is None:
            raise GroupshiftError(
                "a sasl: ZooKeeper credential needs the pure-sasl package (a groupshift dependency): "
                "pip install 'pure-sasl>=0.6'"
            )
        readers = zk_auth.parse_readers(env.get(zk_auth.ENV_READ_PRINCIPAL))
        if readers and credential is None:
            raise GroupshiftError(
                f"${zk_auth.ENV_READ_PRINCIPAL} is set but no ZooKeeper credential is: "
                f"pass --zk-auth-file (or ${zk_auth.ENV_AUTH_FILE}) too, or unset it"
            )
        tls = zk_auth.tls_from(
            env.get(zk_auth.ENV_TLS_CA), env.get(zk_auth.ENV_TLS_CERT), env.get(zk_auth.ENV_TLS_KEY)
        )
        return cls(credential, readers, tls)

    @property
    def acl(self) -> list:
        """The ACL of every znode this client creates (kazoo's default when empty: world ALL)."""
        return zk_auth.acl_for(self.credential, self.readers) if self.credential else []

    @property
    def needs_provider(self) -> bool:
        """Whether the ACL names a scheme the server accepts only with its provider loaded."""
        return any(a.id.scheme not in BUILT_IN_SCHEMES for a in self.acl)

    def kazoo(self) -> dict:
        """KazooClient's keyword arguments for these settings."""
        out: dict = {}
        if self.credential:
            out.update(self.credential.kazoo())
            out["default_acl"] = self.acl
        if self.tls:
            out.update(self.tls.kazoo())
        return out


@dataclass(frozen=True)
class ZkAddress:
    """A parsed connect string: `hosts` is `h:p,h:p`, `chroot` is `/path` or empty."""

    hosts: str
    chroot: str = ""

    @property
    def connect_string(self) -> str:
        return self.hosts + self.chroot

    def with_chroot(self, chroot: str) -> ZkAddress:
        return ZkAddress(self.hosts, validate_chroot(self.chroot + "/" + chroot.strip("/")))


def parse_zk(connect: str) -> ZkAddress:
    """Parse `host:port[,host:port...][/chroot]`; raises `GroupshiftError` naming the bad part.

    The chroot must be a canonical ZooKeeper path: `/a/b`, no empty (`//`), `.` or `..`
    component, no trailing `/`, no whitespace or control characters, at most
    `MAX_CHROOT_LENGTH` characters, not under ZooKeeper's own `/zookeeper`. A bare `/` is the
    root (no chroot), as ZooKeeper reads it. Nothing is normalised: a malformed chroot is refused
    rather than guessed at, because a guess could point a command at another namespace.
    """
    if not isinstance(connect, str) or not connect.strip():
        raise GroupshiftError("empty ZooKeeper connect string; expected host:port[,host:port...][/chroot]")
    if connect != connect.strip() or any(ch.isspace() or not ch.isprintable() for ch in connect):
        raise GroupshiftError(
            f"ZooKeeper connect string {connect!r} contains whitespace or control characters; "
            "expected host:port[,host:port...][/chroot]"
        )
    hosts, slash, chroot = connect.partition("/")
    entries = hosts.split(",")
    if len(entries) > MAX_HOSTS:
        raise GroupshiftError(f"ZooKeeper connect string names {len(entries)} servers; at most {MAX_HOSTS}")
    for hp in entries:
        host, colon, port = hp.rpartition(":")
        if (
            not colon
            or not _HOST.fullmatch(host)
            or not port.isdigit()
            or len(port) > 5
            or not 0 < int(port) < 65536
        ):
            raise GroupshiftError(f"bad ZooKeeper address {hp!r} in {connect!r}; expected host:port")
    return ZkAddress(hosts, validate_chroot(slash + chroot) if slash else "")


def validate_chroot(chroot: str) -> str:
    """Return `chroot` (`""` for `/`) if it is a canonical ZooKeeper path, else raise `GroupshiftError`."""
    if chroot == "/":
        return ""
    why = None
    if len(chroot) > MAX_CHROOT_LENGTH:
        why = f"is longer than {MAX_CHROOT_LENGTH} characters"
    elif not chroot.startswith("/"):
        why = "does not start with '/'"
    elif chroot.endswith("/"):
        why = "ends with '/'"
    elif "//" in chroot:
        why = "has an empty component ('//')"
    elif any(part in (".", "..") for part in chroot.split("/")):
        why = "has a '.' or '..' component"
    elif any(_bad_path_char(ch) for ch in chroot):
        why = "contains whitespace, a control character or a character ZooKeeper refuses"
    elif "," in chroot or ":" in chroot:
        why = "contains ',' or ':' (the chroot goes after the last host:port)"
    elif chroot == "/zookeeper" or chroot.startswith("/zookeeper/"):
        why = "is under /zookeeper, which ZooKeeper reserves for itself"
    if why:
        raise GroupshiftError(
            f"bad ZooKeeper chroot {chroot!r}: it {why}; expected host:port[,...]/name[/name...]"
        )
    return chroot


def _bad_path_char(ch: str) -> bool:
    # ZooKeeper's PathUtils.validatePath refuses these; whitespace is legal there but never intended.
    c = ord(ch)
    return ch.isspace() or c <= 0x1F or 0x7F <= c <= 0x9F or 0xD800 <= c <= 0xF8FF or 0xFFF0 <= c <= 0xFFFF


def env_seconds(name: str, default_s: float) -> float:
    """`$name` (whole milliseconds, within [MIN_ENV_MS, MAX_ENV_MS]) in seconds, else `default_s`;
    a malformed value raises `GroupshiftError` naming the variable."""
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default_s
    if not raw.isdigit() or not MIN_ENV_MS <= int(raw) <= MAX_ENV_MS:
        raise GroupshiftError(
            f"${name}={raw!r} is not a whole number of milliseconds between {MIN_ENV_MS} and {MAX_ENV_MS}; "
            f"unset it for the default ({default_s * 1000:.0f})"
        )
    return int(raw) / 1000


def resolve_zk(explicit: str | None = None) -> str:
    """The connect string to use: `--zk`, else `$GROUPSHIFT_ZK`, else the embedded ZooKeeper.

    The embedded one is used only when it serves: when nothing accepts connections on its port,
    this raises `ZooKeeperUnavailable` at once rather than letting the caller wait out a connect
    timeout for a server that is known to be down.
    """
    if explicit:
        return explicit
    if os.environ.get(ENV_ZK):
        return os.environ[ENV_ZK]
    from core.embedded import EmbeddedZooKeeper

    embedded = EmbeddedZooKeeper()
    if not embedded.serving():
        raise ZooKeeperUnavailable(
            "the embedded ZooKeeper is not running; start it with `groupshift zk start` or pass --zk"
        )
    return embedded.connect_string()


def connect(
    connect_string: str | None = None,
    *,
    session_timeout: float | None = None,
    connect_timeout: float = 10.0,
    digest: tuple[str, str] | None = None,
    read_only: bool = False,
    create_chroot: bool = True,
    require_chroot: bool = True,
) -> KazooClient:
    """Start and return a kazoo client, or raise `ZooKeeperUnavailable` saying how to fix it.

    The session timeout defaults to `$GROUPSHIFT_ZK_SESSION_TIMEOUT_MS`, else 10 s;
    `$GROUPSHIFT_ZK_CONNECT_TIMEOUT_MS`, when set, replaces `connect_timeout`.
    `digest=(user, password)` (else `$GROUPSHIFT_ZK_AUTH_FILE`'s credential) authenticates with
    ZooKeeper digest auth (or SASL DIGEST-MD5 for a `sasl:` file) and makes znodes created
    through this client, the chroot included, readable and writable by that user only (plus read
    for `$GROUPSHIFT_ZK_READ_PRINCIPAL`): see `ZkSecurity`. A server that refuses the SASL login,
    or an ACL scheme it has no provider for, is `ZooKeeperNoAuth` here. The chroot is created
    when missing (as Kafka's tools do); with `create_chroot=False` nothing is ever created and a
    missing chroot raises `ChrootMissing` (what commands that only read, or only delete, use),
    or, with `require_chroot=False` too, is left for `ensure_chroot` once the caller has checked
    its input (reads in a missing chroot find nothing).
    When nothing accepts connections at any of the addresses, this fails at once instead of
    waiting `connect_timeout`.
    """
    if session_timeout is None:
        session_timeout = env_seconds(ENV_SESSION_TIMEOUT_MS, SESSION_TIMEOUT_S)
    connect_timeout = env_seconds(ENV_CONNECT_TIMEOUT_MS, connect_timeout)
    security = ZkSecurity.from_env(digest)
    address = parse_zk(resolve_zk(connect_string))
    _probe(address.hosts, security.tls)
    client = _start(address.connect_string, session_timeout, connect_timeout, security, read_only)
    try:
        missing = _check_chroot(client)
        if missing and create_chroot:  # a session at the root only for this: most chroots exist
            _create_chroot(address, session_timeout, connect_timeout, security, read_only)
            missing = False
        elif create_chroot and security.needs_provider:
            _check_acl_scheme(client, security.acl, "")  # in the chroot: nothing is created there
    except BaseException:
        client.stop()
        client.close()
        raise
    if missing and not create_chroot and require_chroot:
        client.stop()
        client.close()
        raise ChrootMissing(
            f"ZooKeeper chroot {address.chroot} does not exist on {address.hosts}; "
            "check the --zk chroot (it is created by the first command that writes, e.g. `topics create`)"
        )
    client.logger.starting = False
    return client


def _check_chroot(client: KazooClient) -> bool:
    """True when the chroot is missing; `ZooKeeperNoAuth` when its ACL does not let this client
    read it, or the server refused the client's SASL login. A long-lived process (a node, a
    consumer, a worker) so stops at its start with one line, instead of meeting `NoAuth` later on
    one of its threads. Without a chroot this reads ZooKeeper's open root: the SASL check."""
    try:
        client.get("/")  # kazoo prefixes the chroot: this is the chroot itself
    except NoNodeError:
        return True
    except (NoAuthError, AuthFailedError) as exc:
        raise refused_by_acl(exc) from None
    except ConnectionClosedError:
        if client.sasl_refused.is_set():  # the login was refused just before the read was made
            raise refused_by_acl(AuthFailedError()) from None
        raise
    return False


def _check_acl_scheme(client: KazooClient, acl: list, parent: str) -> None:
    """`ZooKeeperNoAuth` when the server refuses `acl` (a scheme it has no provider for) — at
    the start, not on some later create. A transaction creates a znode with it and fails on
    purpose, so nothing is ever created: InvalidACL, or a BadVersion once the ACL was accepted
    (a client that may not create there gets NoAuth and learns nothing, nor needs to)."""
    probe = f"{parent}/groupshift-acl-check-{os.getpid()}"
    transaction = client.transaction()
    transaction.create(probe, b"", acl=acl)
    transaction.check(probe, 1)  # the new znode's version is 0: the whole transaction fails
    results = transaction.commit()
    if any(isinstance(r, InvalidACLError) for r in results):
        raise unknown_acl_scheme(acl)


def _create_chroot(address: ZkAddress, session_timeout, connect_timeout, security, read_only) -> None:
    """Create the chroot when missing, and check that the server accepts the ACL new znodes get."""
    root = _start(address.hosts, session_timeout, connect_timeout, security, read_only)
    try:
        root.ensure_path(address.chroot)
        if security.needs_provider:
            _check_acl_scheme(root, security.acl, address.chroot)
    except (NoAuthError, AuthFailedError) as exc:
        raise refused_by_acl(exc) from None
    except ConnectionClosedError:
        if root.sasl_refused.is_set():  # the login was refused just before the write was made
            raise refused_by_acl(AuthFailedError()) from None
        raise
    except InvalidACLError:
        raise unknown_acl_scheme(security.acl) from None
    finally:
        root.stop()
        root.close()


def ensure_chroot(connect_string: str | None, *, connect_timeout: float = 10.0) -> None:
    """Create the connect string's chroot (and its parents) when missing."""
    address = parse_zk(resolve_zk(connect_string))
    if not address.chroot:
        return
    session_timeout = env_seconds(ENV_SESSION_TIMEOUT_MS, SESSION_TIMEOUT_S)
    connect_timeout = env_seconds(ENV_CONNECT_TIMEOUT_MS, connect_timeout)
    security = ZkSecurity.from_env()
    _probe(address.hosts, security.tls)
    _create_chroot(address, session_timeout, connect_timeout, security, False)


def _probe(hosts: str, tls: zk_auth.ZkTls | None = None, timeout: float = 2.0) -> None:
    """Raise `ZooKeeperUnavailable` when every address refuses connections or does not resolve,
    or, with TLS, when every address that answers fails the TLS handshake.

    An address that accepts, or does not answer within `timeout`, is left to kazoo's own
    connect (which waits `connect_timeout`): only a certain "nobody is there" fails fast.
    kazoo retries a failed TLS handshake until its connect timeout and then says only that
    it timed out; the handshake tried here first says why.
    """
    from core.net import refusals

    refused = refusals(hosts, timeout)
    if refused is None:
        if tls is not None:
            _tls_probe(hosts, tls, timeout)
        return  # one accepts, or a timeout or an unreachable route: let kazoo try (and report) it
    reasons = "; ".join(f"{hp}: {why}" for hp, why in refused)
    raise ZooKeeperUnavailable(
        f"nothing accepts connections at ZooKeeper address {hosts} ({reasons}); "
        "start it with `groupshift zk start` or pass --zk HOST:PORT (or set GROUPSHIFT_ZK)"
    )


def tls_context(tls: zk_auth.ZkTls) -> ssl.SSLContext:
    """The client context kazoo builds from `tls` (CA, client certificate), built once here so
    that an unreadable or mismatched file is one line naming it rather than a connect timeout."""
    ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    for what, path in (("CA", tls.ca), ("client certificate", tls.cert), ("client key", tls.key)):
        if path and not os.access(path, os.R_OK):
            raise GroupshiftError(
                f"cannot read the ZooKeeper TLS {what} {path}; check --zk-tls-* (or $GROUPSHIFT_ZK_TLS_*)"
            )
    try:
        ctx.load_verify_locations(tls.ca)
    except (ssl.SSLError, OSError) as exc:
        raise GroupshiftError(
            f"the ZooKeeper TLS CA {tls.ca} holds no PEM certificate ({exc}); check --zk-tls-ca"
        ) from None
    if tls.cert:
        try:
            ctx.load_cert_chain(tls.cert, tls.key)
        except (ssl.SSLError, OSError) as exc:
            raise GroupshiftError(
                f"the ZooKeeper TLS client certificate {tls.cert} and key {tls.key} cannot be used "
                f"together ({exc}); check that the key is the certificate's, both PEM"
            ) from None
    return ctx


def _tls_probe(hosts: str, tls: zk_auth.ZkTls, timeout: float) -> None:
    from core.net import address

    ctx = tls_context(tls)
    failures = []
    for hostport in hosts.split(","):
        host, port = address(hostport)
        try:
            with socket.create_connection((host, port), timeout=timeout) as sock:
                with ctx.wrap_socket(sock, server_hostname=host):
                    return
        except (ssl.SSLEOFError, ConnectionResetError):
            failures.append(
                f"{hostport}: closed the connection in the TLS handshake (not a secureClientPort?)"
            )
        except ssl.SSLError as exc:
            failures.append(f"{hostport}: {getattr(exc, 'verify_message', None) or exc.reason or exc}")
        except OSError:
            return  # not answering: kazoo's connect waits for it and says so
    raise ZooKeeperUnavailable(
        f"the TLS handshake with ZooKeeper failed ({'; '.join(failures)}); "
        "check --zk-tls-ca (the CA that signed the server's certificate, which must name the host "
        "you connect to), --zk-tls-cert/--zk-tls-key (when the server requires a client certificate) "
        "and that --zk points at the server's secureClientPort"
    )


class _KazooLog(logging.LoggerAdapter):
    """kazoo's logger for one client. Until `connect()` hands the client over, the warning kazoo
    logs when the server refuses its login is left out: connect() says that in one line. Later
    (a reconnect refused) it is logged as kazoo logs it."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("kazoo.client"), {})
        self.starting = True

    def log(self, level, msg, *args, **kwargs) -> None:
        if not (self.starting and str(msg).startswith("AUTH_FAILED")):
            super().log(level, msg, *args, **kwargs)


def _start(hosts, session_timeout, connect_timeout, security: ZkSecurity, read_only) -> KazooClient:
    client = KazooClient(
        logger=_KazooLog(),
        hosts=hosts,
        timeout=session_timeout,
        handler=reconnect_handler(),
        connection_retry=dict(CONNECTION_RETRY),
        command_retry=dict(max_tries=3, delay=0.1, backoff=2, max_delay=1.0),
        read_only=read_only,
        **security.kazoo(),
    )
    bound_reconnects(client)  # a session is reconnected within about a second of ZooKeeper's return
    try:
        _start_waiting(client, hosts, connect_timeout)
    except AuthFailedError as exc:
        _stop_in_background(client)
        raise refused_by_acl(exc) from None
    except (KazooTimeoutError, OSError):
        _stop_in_background(client)
        raise ZooKeeperUnavailable(
            f"cannot reach ZooKeeper at {hosts} within {connect_timeout:g}s; "
            "check that it runs and the address is right, or pass another --zk HOST:PORT "
            "(or GROUPSHIFT_ZK; `groupshift zk start` runs the embedded one)"
        ) from None
    return client


def _stop_in_background(client: KazooClient) -> None:
    """Stop a client that never connected without waiting for it: its connection thread may sit in
    a handshake with a server that accepted but never answers, for up to the session timeout, and
    the caller (a command about to exit with its error) should not wait that out."""

    def stop() -> None:
        client.stop()
        client.close()

    threading.Thread(target=stop, name="zk-stop", daemon=True).start()


def _start_waiting(client: KazooClient, hosts: str, connect_timeout: float) -> None:
    """`client.start(connect_timeout)`, saying on stderr what it waits for once that takes a while.

    A server that answers connects well within WAIT_NOTICE_S and nothing is printed; otherwise
    one line tells the user which address is being waited for and for how long, instead of
    a silent pause until the timeout. A refused SASL login is `AuthFailedError` at once.
    """
    refused = watch_refusal(client)
    event = client.start_async()
    if event.wait(min(WAIT_NOTICE_S, connect_timeout)) and client.connected:
        return
    if refused.is_set():
        raise AuthFailedError()
    remaining = connect_timeout - WAIT_NOTICE_S
    if remaining <= 0:
        raise KazooTimeoutError("Connection time-out")
    print(
        f"groupshift: waiting up to {connect_timeout:g}s for ZooKeeper at {hosts} ...",
        file=sys.stderr,
        flush=True,
    )
    if not event.wait(remaining) or not client.connected:
        if refused.is_set():
            raise AuthFailedError()
        raise KazooTimeoutError("Connection time-out")


def watch_refusal(client: KazooClient) -> threading.Event:
    """An event set when the server refuses the client's SASL login (`client.sasl_refused`).

    The login runs once the session is connected, so `start` may already have returned; kazoo
    then stops connecting for good, its state passing AUTH_FAILED on its way to CLOSED within a
    millisecond: seen here as it happens, rather than polled after the fact (a call made once the
    state is CLOSED fails as "connection closed", not as the refusal it is).
    """
    refused = threading.Event()

    def on_state(state: KazooState) -> None:
        if state == KazooState.LOST and client.client_state == KeeperState.AUTH_FAILED:
            refused.set()

    client.add_listener(on_state)
    client.sasl_refused = refused
    return refused
