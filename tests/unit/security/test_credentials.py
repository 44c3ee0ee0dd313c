"""security/credentials.py's pure parts: Kafka's names and JSON for users' configs and change
notifications, user names, and the password file's rules."""

from __future__ import annotations

import json

import pytest

from core.errors import GroupshiftError
from security.credentials import (
    MAX_USER_LENGTH,
    change_notification,
    check_user,
    credentials_in,
    desanitize,
    encode_config,
    parse_config,
    read_password_file,
    sanitize,
    user_of_notification,
    user_path,
)
from security.scram import make_credential


@pytest.mark.parametrize(
    "user, node",
    [
        ("alice", "alice"),
        ("a.b-c_d", "a.b-c_d"),
        ("a b", "a%20b"),  # Kafka's Sanitizer: a space is %20, not +
        ("a*b", "a%2Ab"),  # and * is %2A
        ("a+b/c", "a%2Bb%2Fc"),
        ("é", "%C3%A9"),
        ("x~y", "x%7Ey"),  # Java's URLEncoder encodes ~
    ],
)
def test_user_znode_names_are_kafkas(user, node):
    assert sanitize(user) == node
    assert desanitize(node) == user
    assert user_path(user) == f"/config/users/{node}"


def test_config_and_notification_json_are_kafkas():
    c = make_credential("SCRAM-SHA-256", "pw")
    data = encode_config({"SCRAM-SHA-256": c.to_kafka(), "consumer_byte_rate": "1024"})
    assert json.loads(data) == {
        "version": 1,
        "config": {"SCRAM-SHA-256": c.to_kafka(), "consumer_byte_rate": "1024"},
    }
    assert credentials_in(parse_config(data)) == {"SCRAM-SHA-256": c}  # quotas are not credentials
    assert change_notification("a b") == b'{"version":2,"entity_path":"users/a%20b"}'
    assert user_of_notification(change_notification("a b")) == "a b"
    assert user_of_notification(b'{"version":2,"entity_path":"topics/clicks"}') is None
    assert user_of_notification(b"not json") is None


def test_an_unreadable_credential_is_left_out():
    config = {"PLAIN": "garbage", "SCRAM-SHA-512": make_credential("SCRAM-SHA-512", "x").to_kafka()}
    assert list(credentials_in(config)) == ["SCRAM-SHA-512"]


@pytest.mark.parametrize("data", [b"[]", b"{", b'{"version":1,"config":{"a":1}}', b'{"version":1}'])
def test_a_config_that_is_not_kafkas(data):
    with pytest.raises(ValueError):
        parse_config(data)


@pytest.mark.parametrize(
    "user", ["", "a b", "tab\there", "nul\0", "x" * (MAX_USER_LENGTH + 1), "User:alice"], ids=range(6)
)
def test_bad_user_names(user):
    with pytest.raises(GroupshiftError):
        check_user(user)


def test_good_user_names():
    for user in ("alice", "a=b,c", "ünï", "x" * MAX_USER_LENGTH):
        assert check_user(user) == user


def _file(tmp_path, content: bytes, mode: int = 0o600):
    p = tmp_path / "pw"
    p.write_bytes(content)
    p.chmod(mode)
    return p


@pytest.mark.parametrize(
    "content, password", [(b"pencil\n", "pencil"), (b"pencil", "pencil"), (b"p w\r\n", "p w")]
)
def test_password_files(tmp_path, content, password):
    assert read_password_file(_file(tmp_path, content)) == password


@pytest.mark.parametrize(
    "content, mode, error",
    [
        (b"pencil\n", 0o644, "readable by others; chmod o-r"),
        (b"", 0o600, "empty"),
        (b"\n", 0o600, "empty"),
        (b"a\nb\n", 0o600, "more than one line"),
        (b"a\0b", 0o600, "NUL"),
        (b"\xff\xfe", 0o600, "not UTF-8"),
        (b"p" * 256, 0o600, "more than 255 bytes"),
        (b"p" * 300, 0o600, "at most 255"),
        ("é".encode() * 128, 0o600, "more than 255 bytes"),
    ],
    ids=range(9),
)
def test_bad_password_files(tmp_path, content, mode, error):
    with pytest.raises(GroupshiftError, match=error):
        read_password_file(_file(tmp_path, content, mode))


def test_a_missing_password_file_or_a_directory(tmp_path):
    with pytest.raises(GroupshiftError, match="cannot read"):
        read_password_file(tmp_path / "missing")
    with pytest.raises(GroupshiftError, match="not a regular file"):
        read_password_file(tmp_path)
