"""A client's security settings from a Kafka client properties file: what is read, what is refused."""

from __future__ import annotations

import os

import pytest

from core.errors import GroupshiftError
from security import client_config as C


def write(tmp_path, text: str, mode: int = 0o600):
    p = tmp_path / "client.properties"
    p.write_text(text)
    os.chmod(p, mode)
    return p


def test_sasl_ssl_settings_reach_every_client(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("x")
    p = write(
        tmp_path,
        "# a comment\nsecurity.protocol=sasl_ssl\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.username=alice\nsasl.password: s3cret=x\nssl.ca.location={ca}\n"
        "ssl.endpoint.identification.algorithm=none\n",
    )
    s = C.load(p)
    assert (s.protocol, s.mechanism, s.username, s.password) == (
        "SASL_SSL",
        "SCRAM-SHA-512",
        "alice",
        "s3cret=x",
    )
    assert s.tls and s.sasl and not s.check_hostname and s.path == str(p)
    conf = s.confluent()
    assert conf["security.protocol"] == "SASL_SSL" and conf["ssl.ca.location"] == str(ca)
    assert (
        conf["sasl.mechanism"] == "SCRAM-SHA-512" and conf["ssl.endpoint.identification.algorithm"] == "none"
    )
    kp = C.from_properties(
        {"security.protocol": "SASL_PLAINTEXT", "sasl.username": "alice", "sasl.password": "p"}
    ).kafka_python()
    assert kp == {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": "p",
    }


def test_plaintext_is_the_default(tmp_path):
    s = C.load(write(tmp_path, ""))
    assert s.protocol == "PLAINTEXT" and not s.tls and not s.sasl and s.ssl_context() is None
    assert C.PLAINTEXT.confluent() == {"security.protocol": "PLAINTEXT"}


@pytest.mark.parametrize(
    "text, mode, words",
    [
        ("security.protocol=SASL_PLAINTEXT\nsasl.username=a\nsasl.password=b\n", 0o644, "readable by others"),
        (
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=GSSAPI\nsasl.username=a\nsasl.password=b\n",
            0o600,
            "unknown SASL mechanism",
        ),
        ("security.protocol=SASL_SSL\nsasl.username=a\n", 0o600, "needs sasl.password"),
        ("security.protocol=TLS\n", 0o600, "security.protocol='TLS'"),
        ("bootstrap.servers=x:1\n", 0o600, "unknown setting 'bootstrap.servers'"),
        ("just words\n", 0o600, "line 1 is not key=value"),
        ("ssl.ca.location=/nonexistent/ca.pem\n", 0o600, "cannot be read"),
        ("ssl.endpoint.identification.algorithm=dns\n", 0o600, "expected https or none"),
    ],
)
def test_bad_files_are_refused_in_one_line(tmp_path, text, mode, words):
    with pytest.raises(GroupshiftError) as info:
        C.load(write(tmp_path, text, mode))
    assert words in str(info.value) and "\n" not in str(info.value)


def test_a_missing_or_huge_file_is_refused(tmp_path):
    with pytest.raises(GroupshiftError, match="cannot read the client config"):
        C.load(tmp_path / "absent")
    big = write(tmp_path, "#" * (C.MAX_FILE_BYTES + 1))
    with pytest.raises(GroupshiftError, match="larger than"):
        C.load(big)


def test_the_principal_the_acls_see(tmp_path):
    from testing.certs import make_certs

    certs = make_certs(tmp_path / "tls")
    sasl = C.ClientSecurity(protocol="SASL_SSL", mechanism="PLAIN", username="alice", cert=certs.client_cert)
    assert sasl.principal == "User:alice"  # SASL wins over a client certificate, as on the node
    tls = C.ClientSecurity(protocol="SSL", ca=certs.ca, cert=certs.client_cert, key=certs.client_key)
    assert tls.principal == certs.client_principal == "User:CN=alice,OU=eng"
    assert C.ClientSecurity(protocol="SSL", cert=str(tmp_path / "gone.pem")).principal == "User:?"
    assert C.PLAINTEXT.principal == "User:ANONYMOUS"
