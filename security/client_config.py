"""A client's security settings, read from a Kafka client properties file (`--command-config FILE`).

The file takes librdkafka's names, which Kafka's own tools share for the protocol and SASL:

    security.protocol=SASL_SSL            # PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
    sasl.mechanism=SCRAM-SHA-256          # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512
    sasl.username=alice
    sasl.password=...
    ssl.ca.location=/etc/groupshift/ca.pem            # PEM: the CA that signed the node's certificate
    ssl.certificate.location=/etc/groupshift/me.pem   # PEM: a client certificate, when asked for
    ssl.key.location=/etc/groupshift/me.key
    ssl.endpoint.identification.algorithm=https       # or none: do not check the host name

A file that holds a password must not be readable by others (`chmod o-r`). The same settings
reach the native listener (`ssl_context()`, `sasl`), kafka-python (`kafka_python()`) and
librdkafka (`confluent()`); the native listener's `TLS` is Kafka's `SSL`.
"""

from __future__ import annotations

import os
import ssl
import stat
from dataclasses import dataclass, replace
from pathlib import Path

from core.errors import GroupshiftError

MAX_FILE_BYTES = 64 << 10
PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
KNOWN_KEYS = frozenset(
    {
        "security.protocol",
        "sasl.mechanism",
        "sasl.mechanisms",  # librdkafka's older spelling
        "sasl.username",
        "sasl.password",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
        "ssl.endpoint.identification.algorithm",
    }
)


@dataclass(frozen=True)
class ClientSecurity:
    """How a client reaches a secured listener; the default is PLAINTEXT with no credentials."""

    protocol: str = "PLAINTEXT"
    mechanism: str | None = None
    username: str | None = None
    password: str | None = None
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    check_hostname: bool = True
    path: str | None = None  # the properties file it was read from

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def principal(self) -> str:
        """The principal a node's ACLs see for this client (docs/security.md): the SASL user, else
        the client certificate's subject, else `User:ANONYMOUS`; `User:?` when the certificate
        cannot be read (it is refused then anyway)."""
        if self.sasl:
            return f"User:{self.username}"
        if self.tls and self.cert:
            from cryptography import x509

            from security.tls import rfc2253

            try:
                with open(self.cert, "rb") as f:
                    pem = f.read(MAX_FILE_BYTES)
                return "User:" + rfc2253(x509.load_pem_x509_certificate(pem).subject)
            except (OSError, ValueError):
                return "User:?"
        return "User:ANONYMOUS"

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client TLS context (None for a plaintext protocol)."""
        if not self.tls:
            return None
        ctx = ssl.create_default_context(cafile=self.ca)
        ctx.check_hostname = self.check_hostname
        if self.cert:
            ctx.load_cert_chain(self.cert, self.key)
        return ctx

    def kafka_python(self) -> dict:
        """kafka-python's settings (KafkaConsumer, KafkaAdminClient)."""
        out: dict = {"security_protocol": self.protocol}
        if self.tls:
            out["ssl_context"] = self.ssl_context()
        if self.sasl:
            out.update(
                sasl_mechanism=self.mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password,
            )
        return out

    def confluent(self) -> dict:
        """librdkafka's settings (confluent-kafka's Consumer, Producer, AdminClient)."""
        out: dict = {"security.protocol": self.protocol}
        if self.tls:
            for name, value in (
                ("ssl.ca.location", self.ca),
                ("ssl.certificate.location", self.cert),
                ("ssl.key.location", self.key),
            ):
                if value:
                    out[name] = value
            out["ssl.endpoint.identification.algorithm"] = "https" if self.check_hostname else "none"
        if self.sasl:
            out.update({"sasl.mechanism": self.mechanism, "sasl.username": self.username})
            out["sasl.password"] = self.password
        return out


PLAINTEXT = ClientSecurity()


def parse_properties(text: str) -> dict[str, str]:
    """Java properties' common subset: `key=value` or `key: value` lines, `#`/`!` comments."""
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i > 0), default=-1)
        if cut < 0:
            raise GroupshiftError(f"line {number} is not key=value")
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def load(path: str | os.PathLike) -> ClientSecurity:
    """The settings in the properties file `path`; raises `GroupshiftError` naming the bad line or key."""
    p = Path(path)
    try:
        st = p.stat()
        if st.st_size > MAX_FILE_BYTES:
            raise GroupshiftError(
                f"{p} is larger than {MAX_FILE_BYTES} bytes; is it a client properties file?"
            )
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise GroupshiftError(f"cannot read the client config {p}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise GroupshiftError(f"the client config {p} is not UTF-8 text") from None
    try:
        props = parse_properties(text)
    except GroupshiftError as exc:
        raise GroupshiftError(f"the client config {p}: {exc}") from None
    return replace(from_properties(props, str(p), mode=st.st_mode), path=str(p))


def from_properties(
    props: dict[str, str], where: str = "the client config", mode: int = 0o600
) -> ClientSecurity:
    unknown = sorted(set(props) - KNOWN_KEYS)
    if unknown:
        raise GroupshiftError(
            f"{where}: unknown setting {unknown[0]!r}; known: {', '.join(sorted(KNOWN_KEYS))}"
        )
    protocol = props.get("security.protocol", "PLAINTEXT").upper()
    if protocol not in PROTOCOLS:
        raise GroupshiftError(
            f"{where}: security.protocol={protocol!r}; expected one of {', '.join(PROTOCOLS)}"
        )
    mechanism = props.get("sasl.mechanism", props.get("sasl.mechanisms"))
    sasl = protocol.startswith("SASL_")
    if sasl:
        mechanism = (mechanism or "PLAIN").upper()
        if mechanism not in MECHANISMS:
            raise GroupshiftError(
                f"{where}: unknown SASL mechanism {mechanism!r}; expected one of {', '.join(MECHANISMS)}"
            )
        for key in ("sasl.username", "sasl.password"):
            if not props.get(key):
                raise GroupshiftError(f"{where}: security.protocol={protocol} needs {key}")
    if props.get("sasl.password") and mode & stat.S_IROTH:
        raise GroupshiftError(f"{where} holds a password and is readable by others; chmod o-r it")
    identification = props.get("ssl.endpoint.identification.algorithm", "https").lower()
    if identification not in ("https", "none", ""):
        raise GroupshiftError(
            f"{where}: ssl.endpoint.identification.algorithm={identification!r}; expected https or none"
        )
    paths = {}
    for key in ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location"):
        value = props.get(key)
        if value and not os.access(value, os.R_OK):
            raise GroupshiftError(f"{where}: {key}={value} cannot be read")
        paths[key] = value or None
    if bool(paths["ssl.certificate.location"]) != bool(paths["ssl.key.location"]):
        raise GroupshiftError(f"{where}: ssl.certificate.location and ssl.key.location go together")
    return ClientSecurity(
        protocol=protocol,
        mechanism=mechanism if sasl else None,
        username=props.get("sasl.username") if sasl else None,
        password=props.get("sasl.password") if sasl else None,
        ca=paths["ssl.ca.location"],
        cert=paths["ssl.certificate.location"],
        key=paths["ssl.key.location"],
        check_hostname=identification == "https",
    )
