"""ZooKeeper credentials and ACLs: the auth file, the operator principal, the ACL every znode gets.

Pure but for `load_auth_file`, which reads and checks one small file. A process with a
credential authenticates with ZooKeeper's digest scheme (`digest:USER:PASSWORD`) or with SASL
DIGEST-MD5 (`sasl:USER:PASSWORD`, through kazoo and pure-sasl) and creates every znode with
`acl_for(credential, readers)`: the credential's own id may do everything, each named reader
may read, nobody else may do anything (no `world:anyone` entry, stricter than Kafka's
`zookeeper.set.acl`, which left most znodes world-readable and `/consumers` open).

    >>> cred = parse_auth_text("digest:groupshift:s3cret\\n", "auth.txt")
    >>> cred.digest_id
    'groupshift:8+FlXylXnrD17JBcCewJNdoBOQI='
    >>> readers = parse_readers("digest:" + digest_id("ops", "read-only"))
    >>> [f"{a.perms} {a.id.scheme}:{a.id.id}" for a in acl_for(cred, readers)]
    ['31 digest:groupshift:8+FlXylXnrD17JBcCewJNdoBOQI=', '1 digest:ops:NvgtBfMDTS/Vg2aMPUkgThdzKBA=']
    >>> [f"{a.perms} {a.id.scheme}:{a.id.id}" for a in acl_for(parse_auth_text("sasl:gs:pw", "f"), readers)]
    ['31 sasl:gs', '1 digest:ops:NvgtBfMDTS/Vg2aMPUkgThdzKBA=']
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
from dataclasses import dataclass

from kazoo.security import ACL, Id, Permissions

from core.errors import GroupshiftError

# Where a process finds its ZooKeeper settings. `--zk-auth-file` and the other root options set
# these variables, so every process a command starts (nodes, consumers, workers) inherits them.
ENV_AUTH_FILE = "GROUPSHIFT_ZK_AUTH_FILE"
ENV_READ_PRINCIPAL = "GROUPSHIFT_ZK_READ_PRINCIPAL"
ENV_TLS_CA = "GROUPSHIFT_ZK_TLS_CA"
ENV_TLS_CERT = "GROUPSHIFT_ZK_TLS_CERT"
ENV_TLS_KEY = "GROUPSHIFT_ZK_TLS_KEY"
ZK_SECURITY_ENV = (ENV_AUTH_FILE, ENV_READ_PRINCIPAL, ENV_TLS_CA, ENV_TLS_CERT, ENV_TLS_KEY)

MAX_AUTH_FILE_BYTES = 4096
MAX_USER_CHARS = 128
MAX_PASSWORD_CHARS = 512
MAX_READERS = 8
# ZooKeeper hashes `user:password` in the server JVM's default charset: only printable ASCII
# hashes the same on both sides whatever the server's locale.
_USER = re.compile(rf"[A-Za-z0-9._@+-]{{1,{MAX_USER_CHARS}}}")
_PASSWORD = re.compile(rf"[\x21-\x7e]{{1,{MAX_PASSWORD_CHARS}}}")
_DIGEST_HASH = re.compile(r"[A-Za-z0-9+/]{27}=")
# A SASL DIGEST-MD5 user: it is the JAAS option `user_NAME` on the server (JAAS names take no `+`
# or `@`) and the id `sasl:NAME` in ACLs, where ZooKeeper parses it as a Kerberos name.
_SASL_USER = re.compile(rf"[A-Za-z0-9._-]{{1,{MAX_USER_CHARS}}}")
# A reader `sasl:NAME`: a SASL user or a Kerberos principal NAME[/HOST][@REALM], as ZooKeeper's
# SASLAuthenticationProvider accepts it in an ACL (anything else is InvalidACL on every create).
_SASL_READER = re.compile(r"[^/@]+(?:/[^/@]+)?(?:@[^/@]+)?")
# ZooKeeper's id schemes an operator principal may use; `world`, `auth` and `super` are refused.
READER_SCHEMES = ("digest", "sasl", "x509", "ip")
CREDENTIAL_FORMS = "digest:USER:PASSWORD or sasl:USER:PASSWORD"
AUTH_FILE_FORM = f"one line {CREDENTIAL_FORMS}"
# The auth file's schemes: ZooKeeper's digest, and SASL with DIGEST-MD5, the mechanism a
# ZooKeeper server offers without Kerberos (GSSAPI needs a KDC and is not covered).
CREDENTIAL_SCHEMES = ("digest", "sasl")
SASL_MECHANISM = "DIGEST-MD5"


@dataclass(frozen=True)
class ZkCredential:
    """A credential: `user` and `password` as the auth file gives them, and its `scheme`,
    `digest` (ZooKeeper's digest scheme) or `sasl` (SASL DIGEST-MD5)."""

    user: str
    password: str
    scheme: str = "digest"

    @property
    def digest_id(self) -> str:
        """ZooKeeper's id for this credential, `user:base64(sha1(user:password))`."""
        return digest_id(self.user, self.password)

    @property
    def acl_id(self) -> Id:
        """The id ZooKeeper gives a session holding this credential, which its ACLs name."""
        return Id("digest", self.digest_id) if self.scheme == "digest" else Id("sasl", self.user)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """kazoo's `auth_data` (none for SASL, which authenticates when the session starts)."""
        return [("digest", f"{self.user}:{self.password}")] if self.scheme == "digest" else []

    def kazoo(self) -> dict:
        """KazooClient's keyword arguments that authenticate with this credential."""
        if self.scheme == "digest":
            return {"auth_data": self.auth_data}
        # a new dict each time: kazoo adds its `service` to the one it is given
        options = {"mechanism": SASL_MECHANISM, "username": self.user, "password": self.password}
        return {"sasl_options": options}

    def __repr__(self) -> str:  # never print the password
        return f"ZkCredential(user={self.user!r}, scheme={self.scheme!r})"


def digest_id(user: str, password: str) -> str:
    """`USER:HASH` as ZooKeeper's DigestAuthenticationProvider computes it.

    >>> digest_id("ops", "read-only")
    'ops:NvgtBfMDTS/Vg2aMPUkgThdzKBA='
    """
    raw = hashlib.sha1(f"{user}:{password}".encode("ascii")).digest()
    return f"{user}:{base64.b64encode(raw).decode('ascii')}"


def check_user(user: str, source: str) -> str:
    if not _USER.fullmatch(user):
        raise GroupshiftError(
            f"{source}: the user {user[:40]!r} is not 1-{MAX_USER_CHARS} of letters, digits and ._@+-"
        )
    return user


def check_password(password: str, source: str) -> str:
    if not _PASSWORD.fullmatch(password):
        raise GroupshiftError(
            f"{source}: the password must be 1-{MAX_PASSWORD_CHARS} printable ASCII characters, "
            "no spaces (ZooKeeper hashes it in the server's charset)"
        )
    return password


def parse_auth_text(text: str, source: str) -> ZkCredential:
    """The credential in an auth file's text: one `digest:USER:PASSWORD` or `sasl:USER:PASSWORD`
    line (blank lines and `#` comments aside); raises `GroupshiftError` naming `source` and what
    is wrong."""
    lines = [ln.strip() for ln in text.splitlines()]
    entries = [ln for ln in lines if ln and not ln.startswith("#")]
    if not entries:
        raise GroupshiftError(f"the ZooKeeper auth file {source} is empty; it must hold {AUTH_FILE_FORM}")
    if len(entries) > 1:
        raise GroupshiftError(
            f"the ZooKeeper auth file {source} holds {len(entries)} credential lines; "
            f"it must hold {AUTH_FILE_FORM}"
        )
    scheme, _, rest = entries[0].partition(":")
    user, colon, password = rest.partition(":")
    if scheme not in CREDENTIAL_SCHEMES:
        raise GroupshiftError(
            f"the ZooKeeper auth file {source} names the scheme {scheme[:20]!r}; the schemes are "
            f"digest and sasl (SASL {SASL_MECHANISM}): {AUTH_FILE_FORM}"
        )
    if not colon:
        raise GroupshiftError(f"the ZooKeeper auth file {source} is malformed; it must hold {AUTH_FILE_FORM}")
    where = f"the ZooKeeper auth file {source}"
    if scheme == "sasl" and not _SASL_USER.fullmatch(user):
        raise GroupshiftError(
            f"{where}: the SASL user {user[:40]!r} is not 1-{MAX_USER_CHARS} of letters, digits and ._- "
            "(the server's JAAS file names it user_USER, its ACLs sasl:USER)"
        )
    return ZkCredential(check_user(user, where), check_password(password, where), scheme)


def check_file_mode(mode: int, source: str) -> None:
    """Refuse a secret file that others may read or write."""
    if not stat.S_ISREG(mode):
        raise GroupshiftError(f"{source} is not a regular file")
    loose = "".join(flag for bit, flag in ((stat.S_IROTH, "r"), (stat.S_IWOTH, "w")) if mode & bit)
    if loose:
        raise GroupshiftError(
            f"{source} is {'readable' if 'r' in loose else 'writable'} by others; "
            f"run `chmod o-{loose} {source.rpartition(' ')[2]}` (it holds a password)"
        )


def read_secret_file(path: str, what: str, form: str) -> str:
    """The text of the secret file `path` once its mode (not readable or writable by others),
    size and encoding are checked; `what` names it and `form` says what it must hold."""
    source = f"the {what} {path}"
    try:
        check_file_mode(os.stat(path).st_mode, source)  # before open: a FIFO would block it
        with open(path, "rb") as f:
            raw = f.read(MAX_AUTH_FILE_BYTES + 1)
    except OSError as exc:
        raise GroupshiftError(
            f"cannot read {source}: {exc.strerror or type(exc).__name__}; name a file holding {form}"
        ) from None
    if len(raw) > MAX_AUTH_FILE_BYTES:
        raise GroupshiftError(f"{source} is larger than {MAX_AUTH_FILE_BYTES} bytes; it must hold {form}")
    try:
        return raw.decode("ascii")
    except UnicodeDecodeError:
        raise GroupshiftError(f"{source} is not ASCII text; it must hold {form}") from None


def load_auth_file(path: str) -> ZkCredential:
    """Read and check the auth file `path` (mode, size, form); one `GroupshiftError` line otherwise."""
    return parse_auth_text(read_secret_file(path, "ZooKeeper auth file", AUTH_FILE_FORM), path)


def load_password_file(path: str) -> str:
    """The password in `path`: one line (blank lines and `#` comments aside), checked as the
    auth file is."""
    form = "one line: the password"
    text = read_secret_file(path, "password file", form)
    entries = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    if len(entries) != 1:
        raise GroupshiftError(f"the password file {path} holds {len(entries)} lines; it must hold {form}")
    return check_password(entries[0], f"the password file {path}")


def parse_readers(value: str | None) -> tuple[Id, ...]:
    """Operator principals in ZooKeeper's id form, comma-separated: `digest:USER:HASH` (HASH from
    `groupshift zk digest`), `sasl:NAME`, `x509:DN` or `ip:ADDR[/BITS]`; at most MAX_READERS.

    >>> parse_readers("sasl:ops")
    (Id(scheme='sasl', id='ops'),)
    """
    if not value:
        return ()
    parts = [p.strip() for p in value.split(",")]
    if len(parts) > MAX_READERS:
        raise GroupshiftError(f"${ENV_READ_PRINCIPAL} names {len(parts)} principals; at most {MAX_READERS}")
    out = []
    for part in parts:
        scheme, _, ident = part.partition(":")
        printable = all(ch.isprintable() and not ch.isspace() for ch in ident)
        if scheme not in READER_SCHEMES or not ident or not printable:
            raise GroupshiftError(
                f"the ZooKeeper read principal {part[:60]!r} is not SCHEME:ID with SCHEME one of "
                f"{', '.join(READER_SCHEMES)} "
                "(e.g. digest:ops:HASH from `groupshift zk digest ops --password-file F`)"
            )
        if scheme == "sasl" and not _SASL_READER.fullmatch(ident):
            raise GroupshiftError(
                f"the ZooKeeper read principal {part[:60]!r} is not sasl:NAME, a SASL user or a "
                "Kerberos principal NAME[/HOST][@REALM]"
            )
        if scheme == "digest":
            user, _, hashed = ident.partition(":")
            check_user(user, "the ZooKeeper read principal")
            if not _DIGEST_HASH.fullmatch(hashed):
                raise GroupshiftError(
                    f"the ZooKeeper read principal {part[:60]!r} is not digest:USER:HASH; "
                    "print it with `groupshift zk digest USER --password-file F`"
                )
        out.append(Id(scheme, ident))
    return tuple(out)


def acl_for(credential: ZkCredential, readers: tuple[Id, ...] = ()) -> list[ACL]:
    """The ACL of every znode a process holding `credential` creates: its own id ALL, each
    reader READ, nothing for anyone else."""
    own = ACL(Permissions.ALL, credential.acl_id)
    return [own] + [ACL(Permissions.READ, reader) for reader in readers if reader != own.id]


@dataclass(frozen=True)
class ZkTls:
    """TLS to ZooKeeper's `secureClientPort`: the CA that signed the server's certificate, and a
    client certificate and key when the server asks for one (`ssl.clientAuth=need`)."""

    ca: str
    cert: str | None = None
    key: str | None = None

    def kazoo(self) -> dict:
        """kazoo's keyword arguments: certificates verified, the host name checked."""
        out: dict = {"use_ssl": True, "ca": self.ca, "verify_certs": True, "check_hostname": True}
        if self.cert:
            out.update(certfile=self.cert, keyfile=self.key)
        return out


def tls_from(ca: str | None, cert: str | None, key: str | None) -> ZkTls | None:
    """The TLS settings from their three values (None when no CA is named); a certificate
    without its key, or the reverse, is refused."""
    if not ca:
        if cert or key:
            raise GroupshiftError(
                f"a ZooKeeper client certificate needs the CA too: set --zk-tls-ca (${ENV_TLS_CA})"
            )
        return None
    if bool(cert) != bool(key):
        raise GroupshiftError(
            "a ZooKeeper client certificate and its key go together: "
            f"set both --zk-tls-cert and --zk-tls-key (${ENV_TLS_CERT}, ${ENV_TLS_KEY}) or neither"
        )
    return ZkTls(ca, cert or None, key or None)
