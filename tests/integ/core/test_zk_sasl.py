"""SASL to ZooKeeper (`sasl:USER:PASSWORD` in `--zk-auth-file`: DIGEST-MD5 through kazoo and
pure-sasl), on a real ZooKeeper of the module's own whose JAAS `Server` section lists the users
`gs` and `ops` and which loads ZooKeeper's SASL provider (`testing.zookeeper.ServerSasl`).

The module builds one namespace with groupshift's writers all holding `sasl:gs` and naming
`sasl:ops` as reader: `topics create` (the CLI), a coordinator node process, a scheme-three and a
scheme-one consumer in this process (`$GROUPSHIFT_ZK_AUTH_FILE`), `offsets export` and an offline
`migrate run`. Then:

* every znode carries exactly `sasl:gs` ALL + `sasl:ops` READ; a client without credentials, or
  with the same name and password as a digest credential, gets `NoAuth` on each; one with the
  wrong SASL password is refused its login (`AuthFailed`); `ops` reads everything, changes nothing;
* the CLI and a node without the credential, or with the wrong SASL password, say so in one line
  and change nothing;
* a malformed `sasl:` line is refused in one line before anything runs, and a server that has no
  SASL provider (the session's ZooKeeper) refuses a `sasl:` ACL in one line, nothing created.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import AuthFailedError, ConnectionClosedError
from kazoo.security import Permissions

from coordinator.node.process import NodeProcess
from core.zk import watch_refusal
from core.zk_auth import ENV_AUTH_FILE, ENV_READ_PRINCIPAL, ZK_SECURITY_ENV
from testing.zookeeper import SUPER_AUTH, ServerSasl, ZkServer
from tests.inspect_helpers import REPO
from tests.namespaces import chroot_for
from tests.snapshots import changes, dir_tree, zk_tree
from tests.zk_acl_helpers import cli as _cli
from tests.zk_acl_helpers import client, every_writer, reads_and_changes_nothing, refused_everything, znodes
from tests.zk_acl_helpers import ok as _ok
from tests.zk_acl_helpers import secret as _secret

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_zk_sasl")

PASSWORD, OPS_PASSWORD = "gs-sasl-secret-1", "ops-sasl-secret-2"
RECORDS = 40  # over 2 partitions
OWN, READER = ("sasl", "gs", Permissions.ALL), ("sasl", "ops", Permissions.READ)


def _one_line(done: subprocess.CompletedProcess, *says: str) -> str:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
    assert all(s in lines[0] for s in says), lines[0]
    return lines[0]


class Sasl:
    """The server, the namespace, the auth files and the environments with and without them."""

    def __init__(self, server: ZkServer, tmp: Path):
        self.server, self.hosts = server, server.connect_string
        self.zk = f"{self.hosts}/{chroot_for('zk_sasl')}/sec"  # its parent too is closed
        self.chroot = "/" + self.zk.partition("/")[2]
        self.data = tmp / "data"
        self.auth = _secret(tmp / "gs.auth", f"sasl:gs:{PASSWORD}\n")
        self.wrong = _secret(tmp / "wrong.auth", "sasl:gs:not-the-password\n")
        base = {k: v for k, v in os.environ.items() if k not in ZK_SECURITY_ENV}
        base.update(GROUPSHIFT_ZK=self.zk, GROUPSHIFT_DATA=str(self.data), PYTHONPATH=str(REPO))
        self.plain = base  # no credential
        self.env = dict(base, **{ENV_AUTH_FILE: str(self.auth), ENV_READ_PRINCIPAL: "sasl:ops"})

    def client(self, auth_data=None, sasl=None) -> KazooClient:
        return client(self.hosts, auth_data, sasl)

    def znodes(self) -> list[str]:
        """Every znode of the namespace, the chroot first (read as the test servers' super user)."""
        return znodes(self.hosts, self.chroot)

    def snapshot(self):
        return zk_tree(self.zk), dir_tree(self.data)


def _sasl(user: str, password: str) -> dict:
    return {"mechanism": "DIGEST-MD5", "username": user, "password": password}


@pytest.fixture(scope="module")
def sasl(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zk-sasl")
    server = ZkServer.start_single(sasl=ServerSasl((("gs", PASSWORD), ("ops", OPS_PASSWORD))))
    try:
        s = Sasl(server, tmp)
        _ok(s.plain, "--zk-auth-file", str(s.auth), "--zk-read-principal", "sasl:ops",
            "topics", "create", "clicks", "-p", "2")  # fmt: skip
        _ok(s.plain, "topics", "produce", "clicks", "-n", str(RECORDS))  # the log only: no ZooKeeper
        with every_writer(s.zk, s.data, s.env, RECORDS, tmp / "node.log"):
            pass  # they wrote; the node stops: the tests read what they left
        yield s
    finally:
        server.remove()


def test_every_znode_carries_the_sasl_acl_and_nothing_else(sasl):
    paths = sasl.znodes()
    for must in ("/brokers/topics/clicks", "/consumers/g1/offsets/clicks/0", "/groupshift"):
        assert any(must in p for p in paths), must
    admin = sasl.client(SUPER_AUTH)
    try:
        for path in paths:
            acl = admin.get_acls(path)[0]
            assert {(a.id.scheme, a.id.id, a.perms) for a in acl} == {OWN, READER}, path
    finally:
        admin.stop()
        admin.close()


def test_clients_without_the_sasl_login_get_noauth_on_every_znode(sasl):
    paths = sasl.znodes()
    # no credential, and the same user and password as a digest credential: another principal
    for auth in (None, [("digest", f"gs:{PASSWORD}")]):
        refused_everything(sasl.client(auth), paths)


def test_a_wrong_sasl_password_is_refused_at_login(sasl):
    # The login follows the connect, and a refusal takes kazoo through AUTH_FAILED to CLOSED at
    # once: it may come before start() sees the connection (start() would then time out) or after
    # it (the next request fails). Either way core.zk's state listener sees it as it happens.
    c = KazooClient(hosts=sasl.hosts, timeout=10.0, sasl_options=_sasl("gs", "not-the-password"))
    refused = watch_refusal(c)
    try:
        c.start_async()
        assert refused.wait(10), f"no refusal within 10 s; the client is {c.client_state}"
        with pytest.raises((AuthFailedError, ConnectionClosedError)):
            c.get(sasl.chroot)
    finally:
        c.stop()
        c.close()


def test_the_sasl_reader_reads_every_znode_and_changes_none(sasl):
    reads_and_changes_nothing(sasl.client(sasl=_sasl("ops", OPS_PASSWORD)), sasl.znodes())


@pytest.mark.parametrize(
    "args", [("groups", "delete", "g3"), ("offsets", "export", "g3")], ids=lambda a: "-".join(a[:2])
)
def test_the_cli_without_the_credential_or_with_a_wrong_one_is_one_line(sasl, args):
    before = sasl.snapshot()
    _one_line(_cli(sasl.plain, *args), "NoAuth", "no credential", "--zk-auth-file")
    _one_line(
        _cli(sasl.plain, "--zk-auth-file", str(sasl.wrong), *args),
        "refused the credential (AuthFailed)",
        str(sasl.wrong),
    )
    after = sasl.snapshot()
    assert after == before, changes(before[0], after[0]) + changes(before[1], after[1])
    # and with it, the same command works on that tree
    assert "clicks,0," in _ok(sasl.env, "offsets", "export", "g3")


def test_a_node_with_a_wrong_sasl_password_stops_with_one_line(sasl, monkeypatch):
    before = sasl.snapshot()
    monkeypatch.setenv(ENV_AUTH_FILE, str(sasl.wrong))
    node = NodeProcess.spawn(sasl.zk, 2, "--data", str(sasl.data))
    try:
        assert node.proc.wait(timeout=30) == 1
    finally:
        node.stop()
    out = [ln for ln in node.output if ln.strip()]
    assert len(out) == 1 and "AuthFailed" in out[0] and str(sasl.wrong) in out[0], out
    assert sasl.snapshot() == before


@pytest.mark.parametrize(
    "line, says",
    [
        ("sasl:gs\n", "is malformed"),
        ("sasl:g+s:pw\n", "the SASL user 'g+s' is not"),
        ("sasl:a@b:pw\n", "the SASL user 'a@b' is not"),
        ("sasl:gs:two words\n", "the password must be"),
        ("kerberos:gs:pw\n", "the schemes are digest and sasl"),
    ],
)
def test_a_bad_sasl_line_is_refused_in_one_line_before_anything_runs(sasl, tmp_path, line, says):
    path = _secret(tmp_path / "auth", line)
    before = sasl.snapshot()
    done = _cli(sasl.plain, "--zk-auth-file", str(path), "topics", "create", "fresh", "-p", "1")
    _one_line(done, says, str(path))
    assert sasl.snapshot() == before


def test_zk_digest_is_for_digest_users_only(tmp_path):
    pw = _secret(tmp_path / "pw", OPS_PASSWORD + "\n")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    done = _cli(env, "zk", "digest", "sasl:ops", "--password-file", str(pw))
    assert not done.stdout
    _one_line(done, "digest ids only", "sasl:ops")


def test_a_server_without_the_sasl_provider_refuses_a_sasl_acl_in_one_line(zk_connect, tmp_path):
    """The session's ZooKeeper has no SASL provider: a `sasl:` reader is InvalidACL there."""
    auth = _secret(tmp_path / "gs.auth", "digest:gs:pw\n")
    base = {k: v for k, v in os.environ.items() if k not in ZK_SECURITY_ENV}
    env = dict(base, PYTHONPATH=str(REPO), GROUPSHIFT_ZK=zk_connect, GROUPSHIFT_DATA=str(tmp_path / "data"))
    _ok(dict(env, **{ENV_AUTH_FILE: str(auth)}), "topics", "create", "first", "-p", "1")  # the chroot
    before = zk_tree(zk_connect), dir_tree(tmp_path / "data")
    for args in (
        ("topics", "create", "second", "-p", "1"),  # in the namespace
        ("topics", "create", "second", "-p", "1", "--zk", zk_connect + "-new"),  # its chroot too
    ):
        done = _cli(dict(env, **{ENV_AUTH_FILE: str(auth), ENV_READ_PRINCIPAL: "sasl:ops"}), *args)
        _one_line(done, "InvalidACL", "scheme sasl", "authProvider.sasl=")
    assert (zk_tree(zk_connect), dir_tree(tmp_path / "data")) == before
    hosts, _, chroot = zk_connect.partition("/")
    admin = KazooClient(hosts=hosts, timeout=10.0, auth_data=SUPER_AUTH)
    admin.start(timeout=10)
    try:
        assert admin.exists(f"/{chroot}-new") is None
    finally:
        admin.stop()
        admin.close()
