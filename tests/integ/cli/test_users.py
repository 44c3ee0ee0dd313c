"""`groupshift users add|list|remove` against real ZooKeeper: Kafka's znodes, the listing, bad input.

Each command runs as a real process. The credentials land where and as Kafka's brokers read them
(`/config/users/<user>`, `{"version":1,"config":{MECHANISM: "salt=...,..."}}`, plus a change
notification); bad input is one line on stderr, a non-zero exit, and the namespace unchanged.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import Permissions

from security.credentials import CHANGES, USERS, CredentialStore
from security.scram import ScramCredential, make_credential, plain_matches
from testing.zookeeper import SUPER_AUTH
from tests.inspect_helpers import ok, run
from tests.snapshots import changes, zk_tree

REPO = Path(__file__).resolve().parents[3]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def _spawn(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "cli", *args],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.fixture
def pw(tmp_path) -> Path:
    p = tmp_path / "pw"
    p.write_text("pencil\n")
    p.chmod(0o600)
    return p


def test_add_list_remove_in_kafkas_layout(zk_connect, zk, pw):
    adds = [  # at once: two of them write alice's znode, each conditional on the version it read
        ("alice", "--mechanism", "PLAIN"),
        ("alice", "--mechanism", "SCRAM-SHA-256", "--iterations", "8192"),
        ("bob=1,x", "--mechanism", "SCRAM-SHA-512"),
    ]
    running = [_spawn("users", "add", *a, "--password-file", str(pw), "--zk", zk_connect) for a in adds]
    said = [p.communicate(timeout=60) for p in running]
    assert [p.returncode for p in running] == [0, 0, 0], said
    assert said[0][0] == "user alice: PLAIN credential set (4096 iterations)\n"
    doc = json.loads(zk.get(f"{USERS}/alice")[0])
    assert doc["version"] == 1 and sorted(doc["config"]) == ["PLAIN", "SCRAM-SHA-256"]
    scram = ScramCredential.from_kafka(doc["config"]["SCRAM-SHA-256"])
    assert scram.iterations == 8192
    assert scram == make_credential("SCRAM-SHA-256", "pencil", 8192, salt=scram.salt)  # the password's
    assert plain_matches(ScramCredential.from_kafka(doc["config"]["PLAIN"]), "pencil")
    assert b"pencil" not in zk.get(f"{USERS}/alice")[0]
    assert zk.exists(f"{USERS}/bob%3D1%2Cx")  # Kafka's Sanitizer names the znode
    notices = sorted(zk.get_children(CHANGES))
    assert len(notices) == 3 and all(n.startswith("config_change_") for n in notices)
    assert sorted(json.loads(zk.get(f"{CHANGES}/{n}")[0])["entity_path"] for n in notices) == [
        "users/alice",
        "users/alice",
        "users/bob%3D1%2Cx",
    ]

    assert ok("users", "list", "--zk", zk_connect).splitlines() == [
        "USER     MECHANISM      ITERATIONS",
        "alice    PLAIN          4096",
        "alice    SCRAM-SHA-256  8192",
        "bob=1,x  SCRAM-SHA-512  4096",
    ]
    assert json.loads(ok("users", "list", "-o", "json", "--zk", zk_connect)) == {
        "alice": {"PLAIN": {"iterations": 4096}, "SCRAM-SHA-256": {"iterations": 8192}},
        "bob=1,x": {"SCRAM-SHA-512": {"iterations": 4096}},
    }

    assert (
        ok("users", "remove", "alice", "--mechanism", "PLAIN", "--zk", zk_connect)
        == "user alice: removed PLAIN\n"
    )
    assert ok("users", "remove", "alice", "--zk", zk_connect) == "user alice: removed SCRAM-SHA-256\n"
    assert json.loads(zk.get(f"{USERS}/alice")[0]) == {"version": 1, "config": {}}  # Kafka keeps the znode
    assert ok("users", "list", "--zk", zk_connect).splitlines() == [
        "USER     MECHANISM      ITERATIONS",
        "bob=1,x  SCRAM-SHA-512  4096",
    ]
    assert len(zk.get_children(CHANGES)) == 5
    # A writer deletes notifications older than Kafka's 15 minutes (the newest always stays).
    assert CredentialStore(zk).purge_notifications(now=time.time() + 3600) == 4
    assert len(zk.get_children(CHANGES)) == 1


def test_bad_input_is_one_line_and_changes_nothing(zk_connect, zk, tmp_path, pw):
    ok("users", "add", "alice", "--mechanism", "PLAIN", "--password-file", str(pw), "--zk", zk_connect)
    shared = tmp_path / "shared"
    shared.write_text("pencil\n")
    shared.chmod(0o644)
    empty = tmp_path / "empty"
    empty.write_text("")
    empty.chmod(0o600)

    def add(user: str = "carol", password_file: Path = pw, *more: str) -> tuple[str, ...]:
        return ("users", "add", user, "--password-file", str(password_file), "--zk", zk_connect, *more)

    plain = ("--mechanism", "PLAIN")
    cases = {
        "unknown mechanism": add("carol", pw, "--mechanism", "GSSAPI"),
        "mechanism in lower case": add("carol", pw, "--mechanism", "plain"),
        "readable by others": add("carol", shared, *plain),
        "missing file": add("carol", tmp_path / "nope", *plain),
        "empty file": add("carol", empty, *plain),
        "a name with a space": add("ca rol", pw, *plain),
        "an empty name": add("", pw, *plain),
        "a principal, not a name": add("User:carol", pw, *plain),
        "a name too long": add("c" * 256, pw, *plain),
        "too few iterations": add("carol", pw, "--mechanism", "SCRAM-SHA-256", "--iterations", "4095"),
        "too many iterations": add("carol", pw, "--mechanism", "SCRAM-SHA-512", "--iterations", "16385"),
        "no mechanism": add(),
        "remove an unknown user": ("users", "remove", "nobody", "--zk", zk_connect),
        "remove a mechanism she lacks": (
            "users",
            "remove",
            "alice",
            "--mechanism",
            "SCRAM-SHA-512",
            "--zk",
            zk_connect,
        ),
        "list a missing chroot": ("users", "list", "--zk", zk_connect + "/missing"),
        "remove in a missing chroot": ("users", "remove", "alice", "--zk", zk_connect + "/missing"),
    }
    before = zk_tree(zk_connect)
    running = {name: _spawn(*args) for name, args in cases.items()}  # in parallel: a second, not ten
    said = {}
    for name, p in running.items():
        out, err = p.communicate(timeout=60)
        lines = err.strip().splitlines()
        assert p.returncode != 0 and out == "", (name, p.returncode, out, err)
        assert len(lines) == 1 and lines[0].startswith("error: "), (name, err)
        said[name] = lines[0]
    assert zk_tree(zk_connect) == before, changes(before, zk_tree(zk_connect))
    for name, words in {
        "unknown mechanism": "'GSSAPI' is not one of 'PLAIN', 'SCRAM-SHA-256', 'SCRAM-SHA-512'",
        "readable by others": "readable by others; chmod o-r",
        "missing file": "cannot read the password file",
        "a principal, not a name": "without Kafka's principal prefix",
        "too few iterations": "4095 is not in the range 4096<=x<=16384",
        "remove an unknown user": "user nobody has no SASL credentials",
        "remove a mechanism she lacks": "user alice has no SCRAM-SHA-512 credential",
        "list a missing chroot": "missing",
    }.items():
        assert words in said[name], (name, said[name])


def test_with_a_zookeeper_credential_the_users_are_closed_to_others(zk_connect, tmp_path, pw, zk_server):
    """`--zk-auth-file`: the user's znode and its notification carry the credential's ACL only; a
    client without it gets NoAuth, `users list` without it is one NoAuth line."""
    auth = tmp_path / "zk-auth"
    auth.write_text("digest:gs:gs-secret\n")
    auth.chmod(0o600)
    ok(
        "users",
        "add",
        "alice",
        "--mechanism",
        "SCRAM-SHA-256",
        "--password-file",
        str(pw),
        "--zk-auth-file",
        str(auth),
        zk=zk_connect,
    )
    assert "alice" in ok("users", "list", "--zk-auth-file", str(auth), zk=zk_connect)
    outsider = KazooClient(hosts=zk_server.connect_string, timeout=10)
    admin = KazooClient(hosts=zk_server.connect_string, timeout=10, auth_data=SUPER_AUTH)
    outsider.start()
    admin.start()
    try:
        chroot = "/" + zk_connect.split("/", 1)[1]
        notices = admin.get_children(f"{chroot}{CHANGES}")
        for path in (f"{chroot}{USERS}", f"{chroot}{USERS}/alice", f"{chroot}{CHANGES}/{notices[0]}"):
            acl, _ = admin.get_acls(path)
            assert [(a.id.scheme, a.perms) for a in acl] == [("digest", Permissions.ALL)], (path, acl)
            with pytest.raises(NoAuthError):
                outsider.get(path)
    finally:
        for c in (outsider, admin):
            c.stop()
            c.close()
    done = run("users", "list", zk=zk_connect)
    assert done.returncode == 1 and "NoAuth" in done.stderr and len(done.stderr.strip().splitlines()) == 1, (
        done.stderr
    )
