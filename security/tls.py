"""The node's TLS: its server `ssl.SSLContext`, checked whole before a node starts, and a client's principal.

    ctx = server_context(ServerTls(cert="node.pem", key="node.key", ca="ca.pem", client_auth="required"))
    await loop.create_server(factory, host, port, ssl=ctx)
    principal_of(transport.get_extra_info("ssl_object"))     # 'User:CN=alice,OU=eng', or None

`server_context` reads every file itself first and raises `GroupshiftError` with one line naming
the option and what to do: a file that cannot be read (or is not PEM), a key readable by others
or encrypted, a certificate that does not match its key, a certificate that has expired or is not
valid yet (read with `cryptography`), a CA file without certificates, client authentication asked
for without a CA, an unknown `client_auth`. Only then does it build the context: TLS 1.2 and 1.3
(Kafka's `ssl.enabled.protocols`), the client certificate not asked for, asked for, or required
(Kafka's `ssl.client.auth` = none, requested, required) and checked against `ca`.

A client that presents a certificate the node checked is Kafka's default principal
`User:<the certificate's subject in RFC 2253 form>` (`principal_of`): the most specific part
first, `CN=alice,OU=eng,O=example`, and attributes without an RFC 2253 keyword (an e-mail address)
as their dotted OID and `#` with the value's DER in hex, as Java's `X500Principal.getName()`
writes them, so ACLs written for a Kafka cluster match here.
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import ssl
import stat
from dataclasses import dataclass

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.x509.oid import NameOID

from core.errors import GroupshiftError

CLIENT_AUTH = ("none", "requested", "required")  # Kafka's ssl.client.auth
_VERIFY_MODE = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
MAX_PEM_BYTES = 1 << 20  # a certificate chain, key or CA bundle larger than this is not one
MAX_CHAIN = 10  # certificates in --tls-cert (the node's and its intermediates)
MAX_CA_CERTS = 1_000  # certificates in --tls-ca


@dataclass(frozen=True)
class ServerTls:
    """A TLS listener's settings: the node's certificate (chain) and key, the CA its clients'
    certificates are checked against, and whether clients must present one (`CLIENT_AUTH`)."""

    cert: str | None
    key: str | None
    ca: str | None = None
    client_auth: str = "none"


def server_context(settings: ServerTls, now: dt.datetime | None = None) -> ssl.SSLContext:
    """The server context for `settings`, every check of the module docstring done first."""
    check(settings, now)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= ssl.OP_NO_RENEGOTIATION  # TLS 1.2's client-started renegotiation costs the server
    try:
        ctx.load_cert_chain(settings.cert, settings.key)
        if settings.ca:
            ctx.load_verify_locations(cafile=settings.ca)
    except (ssl.SSLError, OSError) as exc:  # changed since check() read it, or OpenSSL refuses it
        raise GroupshiftError(
            f"OpenSSL refuses --tls-cert {settings.cert} / --tls-key {settings.key} / --tls-ca "
            f"{settings.ca}: {getattr(exc, 'reason', None) or exc}"
        ) from None
    ctx.verify_mode = _VERIFY_MODE[settings.client_auth]
    return ctx


def check(settings: ServerTls, now: dt.datetime | None = None) -> None:
    """Raise `GroupshiftError` (one line) for the first thing wrong with `settings`."""
    now = now or dt.datetime.now(dt.UTC)
    if settings.client_auth not in CLIENT_AUTH:
        raise GroupshiftError(
            f"--tls-client-auth {settings.client_auth!r}: expected one of {', '.join(CLIENT_AUTH)}"
        )
    if not settings.cert or not settings.key:
        raise GroupshiftError(
            "a TLS listener needs the node's certificate and key: give --tls-cert and --tls-key (PEM files)"
        )
    chain = _certificates(settings.cert, "--tls-cert", MAX_CHAIN)
    key = _private_key(settings.key)
    if _public(chain[0].public_key()) != _public(key.public_key()):
        raise GroupshiftError(
            f"the certificate --tls-cert {settings.cert} does not match the key --tls-key {settings.key}: "
            "give the key the certificate was made for"
        )
    for cert in chain:
        _check_validity(cert, settings.cert, now)
    if settings.client_auth != "none" and not settings.ca:
        raise GroupshiftError(
            f"--tls-client-auth {settings.client_auth} needs --tls-ca, "
            "the CA that signs the clients' certificates"
        )
    if settings.ca:
        _certificates(settings.ca, "--tls-ca", MAX_CA_CERTS)


def _read(path: str, option: str) -> tuple[bytes, os.stat_result]:
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # (a FIFO would block the read)
            raise GroupshiftError(f"{option} {path} is not a file")
        with open(path, "rb") as f:
            data = f.read(MAX_PEM_BYTES + 1)
    except OSError as exc:
        raise GroupshiftError(f"cannot read {option} {path}: {exc.strerror}") from None
    if len(data) > MAX_PEM_BYTES:
        raise GroupshiftError(f"{option} {path} is larger than {MAX_PEM_BYTES} bytes; is it a PEM file?")
    return data, st


def _certificates(path: str, option: str, most: int) -> list[x509.Certificate]:
    data, _ = _read(path, option)
    try:
        certs = x509.load_pem_x509_certificates(data)
    except ValueError:
        raise GroupshiftError(
            f"{option} {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
        ) from None
    if len(certs) > most:
        raise GroupshiftError(f"{option} {path} holds {len(certs)} certificates; at most {most} are read")
    return certs


def _private_key(path: str):
    data, st = _read(path, "--tls-key")
    if st.st_mode & (stat.S_IROTH | stat.S_IWOTH):
        raise GroupshiftError(f"--tls-key {path} can be read or written by every user; chmod o-rw it")
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:  # encrypted: OpenSSL would ask for a pass phrase on the terminal
        raise GroupshiftError(
            f"--tls-key {path} is encrypted; give the key unencrypted "
            f"(openssl pkey -in {path} -out KEY) and protect the file instead"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise GroupshiftError(
            f"--tls-key {path} holds no PEM private key (-----BEGIN PRIVATE KEY-----)"
        ) from None


def _public(key) -> bytes:
    return key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _check_validity(cert: x509.Certificate, path: str, now: dt.datetime) -> None:
    subject = cert.subject.rfc4514_string() or "(no subject)"
    if now < cert.not_valid_before_utc:
        raise GroupshiftError(
            f"the certificate {subject} in --tls-cert {path} is not valid before "
            f"{cert.not_valid_before_utc:%Y-%m-%d %H:%M:%S} UTC; check the clock or use a valid one"
        )
    if now > cert.not_valid_after_utc:
        raise GroupshiftError(
            f"the certificate {subject} in --tls-cert {path} expired on "
            f"{cert.not_valid_after_utc:%Y-%m-%d %H:%M:%S} UTC; renew it"
        )


# ---------------------------------------------------------------------------------------------
# A client certificate's principal


def principal_of(ssl_object: ssl.SSLObject | None) -> str | None:
    """`User:<subject>` of the certificate the client presented and the node checked, else None."""
    if ssl_object is None:
        return None
    der = ssl_object.getpeercert(binary_form=True)
    return None if der is None else _principal(der)


@functools.lru_cache(maxsize=1024)  # reconnecting clients present the same certificate
def _principal(der: bytes) -> str:
    return "User:" + rfc2253(x509.load_der_x509_certificate(der).subject)


def rfc2253(name: x509.Name) -> str:
    """`name` as Java's `X500Principal.getName()` writes it (RFC 2253).

    >>> from cryptography.x509.oid import NameOID as N
    >>> rfc2253(x509.Name([x509.NameAttribute(N.ORGANIZATIONAL_UNIT_NAME, "eng"),
    ...                    x509.NameAttribute(N.COMMON_NAME, "alice")]))
    'CN=alice,OU=eng'
    >>> rfc2253(x509.Name([x509.NameAttribute(N.EMAIL_ADDRESS, "a@x")]))
    '1.2.840.113549.1.9.1=#1603614078'
    """
    return ",".join("+".join(_attribute(a) for a in rdn) for rdn in reversed(name.rdns))


def _attribute(attr: x509.NameAttribute) -> str:
    if attr.oid in _KEYWORDS and isinstance(attr.value, str):
        return f"{_KEYWORDS[attr.oid]}={_escape(attr.value)}"
    return f"{attr.oid.dotted_string}=#{_der_value(attr).hex()}"


# The attribute types Java's X500Principal.getName() (RFC 2253) writes by keyword; others as OID=#hex.
_KEYWORDS = {
    NameOID.COMMON_NAME: "CN",
    NameOID.COUNTRY_NAME: "C",
    NameOID.LOCALITY_NAME: "L",
    NameOID.STATE_OR_PROVINCE_NAME: "ST",
    NameOID.STREET_ADDRESS: "STREET",
    NameOID.ORGANIZATION_NAME: "O",
    NameOID.ORGANIZATIONAL_UNIT_NAME: "OU",
    NameOID.DOMAIN_COMPONENT: "DC",
    NameOID.USER_ID: "UID",
}
_ESCAPED = frozenset(',=+<>#;"\\')


def _escape(value: str) -> str:
    """Java's escaping (`AVA.toRFC2253String`): its specials anywhere, NUL as `\\00`, and every
    leading and trailing space or carriage return."""
    chars = ["\\" + ch if ch in _ESCAPED else "\\00" if ch == "\0" else ch for ch in value]
    lead = next((i for i, ch in enumerate(chars) if ch not in (" ", "\r")), len(chars))
    trail = next((i for i in range(len(chars) - 1, -1, -1) if chars[i] not in (" ", "\r")), -1)
    return "".join("\\" + ch if i < lead or i > trail else ch for i, ch in enumerate(chars))


# DER tags of the string types a name attribute holds, and how each encodes its characters.
_STRING_TAGS = {
    12: "utf-8",
    19: "ascii",
    20: "latin-1",
    22: "ascii",
    26: "ascii",
    28: "utf-32-be",
    30: "utf-16-be",
}
_BIT_STRING = 3


def _der_value(attr: x509.NameAttribute) -> bytes:
    """The attribute value's DER (tag, length, content), which RFC 2253 writes as `#hex`."""
    if isinstance(attr.value, bytes):  # a bit string (x500UniqueIdentifier): no unused bits
        tag, content = _BIT_STRING, b"\x00" + attr.value
    else:  # the string type it was read with (cryptography keeps it); UTF8String if unknown
        tag = getattr(getattr(attr, "_type", None), "value", 12)
        content = attr.value.encode(_STRING_TAGS.get(tag, "utf-8"))
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = (n.bit_length() + 7) // 8
    return bytes([tag, 0x80 | size]) + n.to_bytes(size, "big") + content
