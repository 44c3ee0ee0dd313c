"""Certificates for tests and benches, made with `cryptography`: a CA and the leaves it signs.

    ca = CertificateAuthority.new()
    server = ca.issue("zk", hosts=["127.0.0.1", "localhost"])      # a server certificate
    client = ca.issue("ops")                                        # a client certificate
    paths = server.write(tmp_path / "server")   # {"cert": ..., "key": ..., "chain": ...} PEM files
    expired = ca.issue("old", valid_days=-1)                        # already expired
    later = ca.issue("new", starts_in_days=1)                       # not valid yet

Keys are EC P-256 (fast to make: a whole set takes milliseconds); key files are written 0600.

The node's listeners (`--tls-cert`, `--tls-key`, `--tls-ca`) take the set `make_certs(directory)`
writes (`Certs` names the files):

* `ca.pem` — the CA every other certificate here is signed by (the clients' and the node's truststore);
* `server.pem`/`server.key` — the node's certificate, for `localhost` and `127.0.0.1`;
* `client.pem`/`client.key` — a client certificate whose subject is `CN=alice,OU=eng`
  (Kafka's principal `User:CN=alice,OU=eng`);
* `expired.pem`/`expired.key` and `future.pem`/`future.key` — node certificates whose validity
  ended yesterday and starts tomorrow;
* `other.key` — a key that belongs to none of the certificates (a certificate/key mismatch);
* `other-ca.pem` with `stranger.pem`/`stranger.key` — a second CA and a client certificate it
  signed: what a node that trusts only `ca.pem` refuses.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_PEM = serialization.Encoding.PEM


def _key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    return key.private_bytes(_PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()


def _name(common_name: str, unit: str | None = None) -> x509.Name:
    """CN (and OU): RFC 2253 writes the most specific part first, the certificate stores it last."""
    parts = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if unit is not None:
        parts.insert(0, x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    return x509.Name(parts)


@dataclass(frozen=True)
class Issued:
    """A leaf certificate and its key, PEM."""

    cert: str
    key: str

    def write(self, stem: Path) -> dict[str, Path]:
        """`<stem>.pem` (certificate), `<stem>.key` (key, 0600) and `<stem>-chain.pem` (key then
        certificate, what ZooKeeper's PEM key store reads)."""
        out = {
            "cert": stem.with_suffix(".pem"),
            "key": stem.with_suffix(".key"),
            "chain": Path(f"{stem}-chain.pem"),
        }
        out["cert"].write_text(self.cert)
        for what, text in (("key", self.key), ("chain", self.key + self.cert)):
            fd = os.open(out[what], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                f.write(text)
        return out


@dataclass(frozen=True)
class CertificateAuthority:
    """A self-signed CA that issues leaf certificates."""

    cert: x509.Certificate
    key: ec.EllipticCurvePrivateKey

    @classmethod
    def new(cls, name: str = "groupshift test CA") -> CertificateAuthority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )  # fmt: skip
            .sign(key, hashes.SHA256())
        )
        return cls(cert, key)

    @property
    def pem(self) -> str:
        return self.cert.public_bytes(_PEM).decode()

    def write(self, path: Path) -> Path:
        path.write_text(self.pem)
        return path

    def issue(
        self,
        name: str,
        hosts: tuple[str, ...] | list[str] = (),
        valid_days: float = 1,
        *,
        unit: str | None = None,
        starts_in_days: float = 0,
    ) -> Issued:
        """A certificate for `name` (its subject's CN; `unit` its OU) naming `hosts` (IP addresses
        or DNS names) as subject alternative names, for server and client use; `valid_days` < 0:
        expired; `starts_in_days` > 0: not valid yet (valid for `valid_days` from then)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC) + datetime.timedelta(days=starts_in_days)
        start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days)
        if starts_in_days > 0:
            start = now
        if valid_days < 0:
            start = end - datetime.timedelta(days=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name, unit))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(start)
            .not_valid_after(end)
            .add_extension(
                x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                critical=False,
            )
        )
        if hosts:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False
            )
        return Issued(builder.sign(self.key, hashes.SHA256()).public_bytes(_PEM).decode(), _key_pem(key))


def _san(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


# ---------------------------------------------------------------------------------------------
# The node's listeners: one directory of PEM files (the module docstring)

CLIENT_SUBJECT = "CN=alice,OU=eng"  # RFC 2253 form, as Kafka's principal names it
NODE_HOSTS = ("localhost", "127.0.0.1")


@dataclass(frozen=True)
class Certs:
    """The PEM files `make_certs` wrote (paths as strings, as the options and clients take them)."""

    dir: Path
    ca: str
    server_cert: str
    server_key: str
    client_cert: str
    client_key: str
    expired_cert: str
    expired_key: str
    future_cert: str
    future_key: str
    other_key: str
    other_ca: str
    stranger_cert: str
    stranger_key: str

    @property
    def client_principal(self) -> str:
        return f"User:{CLIENT_SUBJECT}"

    def node_args(self, client_auth: str = "none") -> list[str]:
        """`coordinator serve`'s TLS options: the node's certificate, this CA and `client_auth`."""
        args = ["--tls-cert", self.server_cert, "--tls-key", self.server_key, "--tls-ca", self.ca]
        return [*args, "--tls-client-auth", client_auth]


def make_certs(directory: str | os.PathLike) -> Certs:
    """Write the CA, node and client certificates of the module docstring into `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    ca, other_ca = CertificateAuthority.new(), CertificateAuthority.new("another CA")
    paths: dict[str, str] = {
        "ca": str(ca.write(d / "ca.pem")),
        "other_ca": str(other_ca.write(d / "other-ca.pem")),
    }
    for stem, issued in (
        ("server", ca.issue("localhost", NODE_HOSTS, 365, unit="groupshift")),
        ("client", ca.issue("alice", unit="eng", valid_days=365)),
        ("expired", ca.issue("localhost", NODE_HOSTS, -1, unit="groupshift")),
        ("future", ca.issue("localhost", NODE_HOSTS, 30, unit="groupshift", starts_in_days=1)),
        ("stranger", other_ca.issue("mallory", unit="eng", valid_days=365)),
    ):
        written = issued.write(d / stem)
        written["chain"].unlink()  # (ZooKeeper's key store form; the listeners take cert and key)
        paths[f"{stem}_cert"], paths[f"{stem}_key"] = str(written["cert"]), str(written["key"])
    lone = ca.issue("nobody").write(d / "other")
    lone["cert"].unlink()
    lone["chain"].unlink()
    paths["other_key"] = str(lone["key"])
    return Certs(dir=d, **paths)
