"""Certificates for tests and benches, made with `cryptography`: a CA and the leaves it signs.

    ca = CertificateAuthority.new()
    server = ca.issue("zk", hosts=["127.0.0.1", "localhost"])      # a server certificate
    client = ca.issue("ops")                                        # a client certificate
    paths = server.write(tmp_path / "server")   # {"cert": ..., "key": ..., "chain": ...} PEM files
    expired = ca.issue("old", valid_days=-1)                        # already expired

Keys are EC P-256 (fast to make: a whole set takes milliseconds); key files are written 0600.
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


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


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

    def issue(self, name: str, hosts: tuple[str, ...] | list[str] = (), valid_days: float = 1) -> Issued:
        """A certificate for `name` (its subject's CN) naming `hosts` (IP addresses or DNS names)
        as subject alternative names, for server and client use; `valid_days` < 0: expired."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        start, end = now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=valid_days)
        if valid_days < 0:
            start = end - datetime.timedelta(days=1)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
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
