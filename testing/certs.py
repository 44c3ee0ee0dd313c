"""A certificate authority of its own for tests and benchmarks: PEM files in a directory.

    certs = make_certs(tmp_path / "tls")
    # the node:   --tls-cert certs.server_cert --tls-key certs.server_key --tls-ca certs.ca
    # a client:   ssl.create_default_context(cafile=certs.ca), load_cert_chain(certs.client_cert, ...)

`make_certs` writes, with `cryptography`, every file the TLS tests need (`Certs` names them):

* `ca.pem` — the CA every other certificate here is signed by (the clients' and the node's truststore);
* `server.pem`/`server.key` — the node's certificate, for `localhost` and `127.0.0.1`;
* `client.pem`/`client.key` — a client certificate whose subject is `CN=alice,OU=eng`
  (Kafka's principal `User:CN=alice,OU=eng`);
* `expired.pem`/`expired.key` and `future.pem`/`future.key` — server certificates whose validity
  ended yesterday and starts tomorrow;
* `other.key` — a key that belongs to none of the certificates (a certificate/key mismatch);
* `other-ca.pem` with `stranger.pem`/`stranger.key` — a second CA and a client certificate it signed:
  what a node that trusts only `ca.pem` refuses.

Keys are EC P-256 (made in microseconds, and the handshake Kafka's clients prefer); key files are
written mode 0600, as a node wants them.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DAY = dt.timedelta(days=1)
CLIENT_SUBJECT = "CN=alice,OU=eng"  # RFC 2253 form, as Kafka's principal names it


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
        """`coordinator serve`'s TLS options for the node's certificate, this CA and `client_auth`."""
        args = ["--tls-cert", self.server_cert, "--tls-key", self.server_key, "--tls-ca", self.ca]
        return [*args, "--tls-client-auth", client_auth]


def _name(**parts: str) -> x509.Name:
    oids = {"CN": NameOID.COMMON_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME, "O": NameOID.ORGANIZATION_NAME}
    # RFC 2253 lists the most specific part first; the certificate stores it last.
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in reversed(list(parts.items()))])


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _cert(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    server: bool = False,
    not_before: dt.datetime,
    not_after: dt.datetime,
) -> x509.Certificate:
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    if ca:
        usage = dict(key_cert_sign=True, crl_sign=True, digital_signature=False)
    else:
        usage = dict(key_cert_sign=False, crl_sign=False, digital_signature=True)
        purpose = ExtendedKeyUsageOID.SERVER_AUTH if server else ExtendedKeyUsageOID.CLIENT_AUTH
        b = b.add_extension(x509.ExtendedKeyUsage([purpose]), critical=False)
        b = b.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(issuer_key.public_key()), critical=False
        )
    if server:
        names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
        b = b.add_extension(x509.SubjectAlternativeName(names), critical=False)
    b = b.add_extension(
        x509.KeyUsage(
            content_commitment=False,
            key_encipherment=False,
            data_encipherment=False,
            key_agreement=False,
            encipher_only=False,
            decipher_only=False,
            **usage,
        ),
        critical=True,
    )
    return b.sign(issuer_key, hashes.SHA256())


def _write_cert(path: Path, cert: x509.Certificate) -> str:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return str(path)


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> str:
    data = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return str(path)


def make_certs(directory: str | os.PathLike) -> Certs:
    """Write the CA, server and client certificates of the module docstring into `directory`."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.UTC)
    valid = dict(not_before=now - DAY, not_after=now + 365 * DAY)
    ca_key, other_ca_key = _key(), _key()
    ca_name, other_ca_name = _name(CN="groupshift test CA"), _name(CN="another CA")
    ca = _cert(ca_name, ca_key, ca_name, ca_key, ca=True, **valid)
    other_ca = _cert(other_ca_name, other_ca_key, other_ca_name, other_ca_key, ca=True, **valid)
    paths: dict[str, str] = {"ca": _write_cert(d / "ca.pem", ca)}
    paths["other_ca"] = _write_cert(d / "other-ca.pem", other_ca)

    def leaf(stem: str, subject: x509.Name, server: bool, signer=(ca_name, ca_key), **when) -> None:
        key = _key()
        cert = _cert(subject, key, *signer, server=server, **(when or valid))
        paths[f"{stem}_cert"] = _write_cert(d / f"{stem}.pem", cert)
        paths[f"{stem}_key"] = _write_key(d / f"{stem}.key", key)

    node = _name(CN="localhost", OU="groupshift")
    leaf("server", node, True)
    leaf("client", _name(CN="alice", OU="eng"), False)
    leaf("expired", node, True, not_before=now - 30 * DAY, not_after=now - DAY)
    leaf("future", node, True, not_before=now + DAY, not_after=now + 30 * DAY)
    leaf("stranger", _name(CN="mallory", OU="eng"), False, signer=(other_ca_name, other_ca_key))
    paths["other_key"] = _write_key(d / "other.key", _key())
    return Certs(dir=d, **paths)
