"""security/tls.py: the node's server context and its checks, a client certificate's principal.

Certificates come from `testing.certs` (files in the test's directory; no network).
"""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID

from core.errors import GroupshiftError
from security.tls import MAX_PEM_BYTES, ServerTls, rfc2253, server_context
from testing.certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("tls"))


@pytest.mark.parametrize(
    "client_auth, mode",
    [("none", ssl.CERT_NONE), ("requested", ssl.CERT_OPTIONAL), ("required", ssl.CERT_REQUIRED)],
)
def test_client_auth_is_kafkas_ssl_client_auth(certs, client_auth, mode):
    ctx = server_context(ServerTls(certs.server_cert, certs.server_key, certs.ca, client_auth))
    assert ctx.verify_mode == mode
    assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


@pytest.mark.parametrize("mode", [0o600, 0o640])
def test_a_key_its_owner_or_group_reads_is_taken(tmp_path, mode):
    """Debian keeps keys 0640, group ssl-cert: only a key every user can read is refused."""
    c = make_certs(tmp_path)
    Path(c.server_key).chmod(mode)
    assert server_context(ServerTls(c.server_cert, c.server_key)) is not None


def test_validity_is_checked_against_the_clock_given(certs):
    settings = ServerTls(certs.server_cert, certs.server_key)
    server_context(settings)  # valid now
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=400)
    with pytest.raises(GroupshiftError, match=r"expired on \d{4}-\d\d-\d\d .*; renew it"):
        server_context(settings, now=later)


def test_every_certificate_of_the_chain_is_checked(tmp_path, certs):
    chain = tmp_path / "chain.pem"
    chain.write_bytes(Path(certs.server_cert).read_bytes() + Path(certs.expired_cert).read_bytes())
    with pytest.raises(GroupshiftError, match="expired on"):
        server_context(ServerTls(str(chain), certs.server_key))


def test_files_are_bounded(tmp_path, certs):
    big = tmp_path / "big.pem"
    big.write_bytes(b"#" * (MAX_PEM_BYTES + 1))
    with pytest.raises(GroupshiftError, match=f"larger than {MAX_PEM_BYTES} bytes"):
        server_context(ServerTls(str(big), certs.server_key))


def test_an_encrypted_key_is_refused_with_what_to_do(tmp_path, certs):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(Path(certs.server_key).read_bytes(), None)
    enc = tmp_path / "enc.key"
    enc.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    enc.chmod(0o600)
    with pytest.raises(GroupshiftError, match="is encrypted; give the key unencrypted"):
        server_context(ServerTls(certs.server_cert, str(enc)))


def _name(*parts) -> x509.Name:
    return x509.Name([x509.RelativeDistinguishedName(p) if isinstance(p, list) else p for p in parts])


A = x509.NameAttribute


@pytest.mark.parametrize(
    "name, principal",
    [
        # Kafka's documentation example: most specific first
        (
            _name(
                A(NameOID.COUNTRY_NAME, "US"),
                A(NameOID.STATE_OR_PROVINCE_NAME, "CA"),
                A(NameOID.LOCALITY_NAME, "Palo Alto"),
                A(NameOID.ORGANIZATION_NAME, "Example"),
                A(NameOID.ORGANIZATIONAL_UNIT_NAME, "eng"),
                A(NameOID.COMMON_NAME, "alice"),
            ),
            "CN=alice,OU=eng,O=Example,L=Palo Alto,ST=CA,C=US",
        ),
        # Java's escaping (checked against X500Principal.getName()): its specials anywhere,
        # every leading and trailing space
        (_name(A(NameOID.COMMON_NAME, "a,b+c=d;e#f ")), r"CN=a\,b\+c\=d\;e\#f\ "),
        (_name(A(NameOID.COMMON_NAME, "  two")), r"CN=\ \ two"),
        (_name([A(NameOID.COMMON_NAME, "x"), A(NameOID.USER_ID, "7")]), "CN=x+UID=7"),  # multi-valued
        # no RFC 2253 keyword: dotted OID and the value's DER in hex (here an IA5String)
        (
            _name(A(NameOID.EMAIL_ADDRESS, "alice@example.com")),
            "1.2.840.113549.1.9.1=#1611616c696365406578616d706c652e636f6d",
        ),
        (_name(A(NameOID.SERIAL_NUMBER, "42")), "2.5.4.5=#13023432"),  # a PrintableString
    ],
)
def test_principal_is_the_subject_as_java_writes_it(name, principal):
    assert rfc2253(name) == principal


def test_a_long_value_has_a_long_form_der_length():
    value = "x" * 200
    assert (
        rfc2253(_name(A(NameOID.EMAIL_ADDRESS, value)))
        == "1.2.840.113549.1.9.1=#1681c8" + value.encode().hex()
    )
