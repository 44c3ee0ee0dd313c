"""`core.zk_auth`: the auth file's form and mode, the read principals, the ACL, the TLS settings."""

from __future__ import annotations

import stat

import pytest
from kazoo.security import ACL, Id, Permissions, make_digest_acl_credential

from core import zk_auth
from core.errors import GroupshiftError
from core.zk import ZkSecurity


@pytest.mark.parametrize(
    "text, says",
    [
        ("", "is empty"),
        ("# only a comment\n\n", "is empty"),
        ("digest:a:b\ndigest:c:d\n", "holds 2 credential lines"),
        ("kerberos:gs:pw\n", "the schemes are digest and sasl"),
        ("gs:pw\n", "the schemes are digest and sasl"),
        ("sasl:gs\n", "malformed"),
        ("sasl:g+s:pw\n", "the SASL user 'g+s'"),
        ("sasl:a@b:pw\n", "the SASL user 'a@b'"),
        ("sasl:gs:two words\n", "the password must be"),
        ("digest:gs\n", "malformed"),
        ("digest::pw\n", "the user ''"),
        ("digest:g s:pw\n", "the user 'g s'"),
        ("digest:gs:\n", "the password must be"),
        ("digest:gs:two words\n", "the password must be"),
        ("digest:gs:" + "x" * (zk_auth.MAX_PASSWORD_CHARS + 1) + "\n", "the password must be"),
    ],
)
def test_a_malformed_auth_text_is_refused_naming_the_file(text, says):
    with pytest.raises(GroupshiftError, match="auth.txt") as err:
        zk_auth.parse_auth_text(text, "auth.txt")
    assert says in str(err.value)


def test_the_auth_text_allows_comments_and_a_password_with_colons():
    cred = zk_auth.parse_auth_text("# groupshift's identity\n\ndigest:gs:a:b:c\n", "f")
    assert (cred.user, cred.password) == ("gs", "a:b:c")
    assert cred.auth_data == [("digest", "gs:a:b:c")]
    assert "a:b:c" not in repr(cred)


def test_a_sasl_credential_logs_in_with_digest_md5_and_is_sasl_user_in_acls():
    cred = zk_auth.parse_auth_text("sasl:gs:a:b\n", "f")
    assert (cred.scheme, cred.user, cred.password) == ("sasl", "gs", "a:b")
    assert cred.kazoo() == {"sasl_options": {"mechanism": "DIGEST-MD5", "username": "gs", "password": "a:b"}}
    assert cred.kazoo() is not cred.kazoo()  # kazoo adds to the dict it is given
    assert cred.auth_data == [] and "a:b" not in repr(cred)
    readers = zk_auth.parse_readers("sasl:ops,digest:" + zk_auth.digest_id("x", "y"))
    assert [(a.perms, a.id) for a in zk_auth.acl_for(cred, readers)] == [
        (Permissions.ALL, Id("sasl", "gs")),
        (Permissions.READ, Id("sasl", "ops")),
        (Permissions.READ, Id("digest", zk_auth.digest_id("x", "y"))),
    ]


def test_the_digest_id_is_kazoos_and_zookeepers():
    assert zk_auth.digest_id("gs", "a:b:c") == make_digest_acl_credential("gs", "a:b:c")


@pytest.mark.parametrize(
    "mode, says",
    [
        (0o644, "readable by others; run `chmod o-r "),
        (0o602, "writable by others; run `chmod o-w "),
        (0o606, "readable by others; run `chmod o-rw "),
    ],  # fmt: skip
)
def test_a_file_others_may_read_or_write_is_refused(mode, says):
    with pytest.raises(GroupshiftError, match="holds a password") as err:
        zk_auth.check_file_mode(stat.S_IFREG | mode, "the ZooKeeper auth file /etc/gs.auth")
    assert says + "/etc/gs.auth`" in str(err.value)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o400])
def test_owner_and_group_may_read(mode):
    zk_auth.check_file_mode(stat.S_IFREG | mode, "f")


def test_load_auth_file_checks_size_mode_and_encoding(tmp_path):
    path = tmp_path / "auth"
    path.write_bytes(b"digest:gs:pw\n")
    path.chmod(0o600)
    assert zk_auth.load_auth_file(str(path)).user == "gs"
    path.write_bytes(b"#" * zk_auth.MAX_AUTH_FILE_BYTES + b"\ndigest:gs:pw\n")
    with pytest.raises(GroupshiftError, match="larger than 4096 bytes"):
        zk_auth.load_auth_file(str(path))
    path.write_bytes("digest:gs:pässword\n".encode())
    with pytest.raises(GroupshiftError, match="not ASCII text"):
        zk_auth.load_auth_file(str(path))
    with pytest.raises(GroupshiftError, match="not a regular file"):
        zk_auth.load_auth_file(str(tmp_path))
    with pytest.raises(GroupshiftError, match="No such file or directory"):
        zk_auth.load_auth_file(str(tmp_path / "missing"))


def test_load_password_file(tmp_path):
    path = tmp_path / "pw"
    path.write_text("# ops\nsecret\n")
    path.chmod(0o600)
    assert zk_auth.load_password_file(str(path)) == "secret"
    path.write_text("a\nb\n")
    with pytest.raises(GroupshiftError, match="holds 2 lines"):
        zk_auth.load_password_file(str(path))


@pytest.mark.parametrize(
    "value",
    [
        "world:anyone",
        "auth:",
        "super:x",
        "digest:ops",
        "digest:ops:short",
        "digest:o ps:" + "A" * 27 + "=",
        "sasl:",
        "sasl:a b",
        "sasl:a@b@c",
        "sasl:a/b/c@R",
        ",".join(["sasl:x"] * (zk_auth.MAX_READERS + 1)),
    ],  # fmt: skip
)
def test_a_bad_read_principal_is_refused(value):
    with pytest.raises(GroupshiftError):
        zk_auth.parse_readers(value)


def test_the_acl_is_the_credential_all_and_the_readers_read_nothing_for_the_world():
    cred = zk_auth.ZkCredential("gs", "pw")
    ops = "digest:" + zk_auth.digest_id("ops", "x")
    readers = zk_auth.parse_readers(f"{ops}, sasl:auditor,x509:CN=ops,ip:10.0.0.0/8")
    assert zk_auth.parse_readers("sasl:zk/host.example@EXAMPLE.COM")  # a Kerberos principal
    acl = zk_auth.acl_for(cred, readers)
    assert acl[0] == ACL(Permissions.ALL, Id("digest", cred.digest_id))
    assert [(a.perms, a.id.scheme) for a in acl[1:]] == [
        (Permissions.READ, s) for s in ("digest", "sasl", "x509", "ip")
    ]
    assert not any(a.id.scheme == "world" for a in acl)
    # the credential's own id named as a reader too is not given a second, weaker entry
    assert zk_auth.acl_for(cred, (Id("digest", cred.digest_id),)) == acl[:1]


def test_tls_settings_go_together():
    assert zk_auth.tls_from(None, None, None) is None
    assert zk_auth.tls_from("ca.pem", None, None).kazoo() == {
        "use_ssl": True, "ca": "ca.pem", "verify_certs": True, "check_hostname": True,
    }  # fmt: skip
    assert zk_auth.tls_from("ca.pem", "c.pem", "k.pem").kazoo()["keyfile"] == "k.pem"
    with pytest.raises(GroupshiftError, match="needs the CA"):
        zk_auth.tls_from(None, "c.pem", "k.pem")
    with pytest.raises(GroupshiftError, match="go together"):
        zk_auth.tls_from("ca.pem", "c.pem", None)


def test_security_from_the_environment(tmp_path, monkeypatch):
    for var in zk_auth.ZK_SECURITY_ENV:
        monkeypatch.delenv(var, raising=False)
    assert ZkSecurity.from_env().kazoo() == {}  # open, as before
    monkeypatch.setenv(zk_auth.ENV_READ_PRINCIPAL, "sasl:ops")
    with pytest.raises(GroupshiftError, match="no ZooKeeper credential"):
        ZkSecurity.from_env()
    path = tmp_path / "auth"
    path.write_text("digest:gs:pw\n")
    path.chmod(0o600)
    monkeypatch.setenv(zk_auth.ENV_AUTH_FILE, str(path))
    kw = ZkSecurity.from_env().kazoo()
    assert kw["auth_data"] == [("digest", "gs:pw")]
    assert [a.id for a in kw["default_acl"]] == [
        Id("digest", zk_auth.digest_id("gs", "pw")),
        Id("sasl", "ops"),
    ]
    # an explicit digest= wins over the file
    assert ZkSecurity.from_env(("other", "pw2")).credential.user == "other"
    assert ZkSecurity.from_env().needs_provider  # the sasl: reader: the server needs its provider
    assert not ZkSecurity(ZkSecurity.from_env().credential).needs_provider  # digest alone
    path.write_text("sasl:gs:pw\n")
    kw = ZkSecurity.from_env().kazoo()
    assert "auth_data" not in kw and kw["sasl_options"]["username"] == "gs"
    assert [a.id for a in kw["default_acl"]] == [Id("sasl", "gs"), Id("sasl", "ops")]
