"""ZooKeeper digest credentials and ACLs (`--zk-auth-file`), on the session's real ZooKeeper.

The module builds one secured namespace with every kind of writer groupshift has, all holding
the credential `gs` (and naming the operator `ops` as reader): `topics create`/`produce` (CLI
processes), a coordinator node process (`coordinator serve --zk-auth-file`), a scheme-three
consumer and a scheme-one (0.8) consumer in this process (`$GROUPSHIFT_ZK_AUTH_FILE`), `groups
describe`, `offsets export` and an offline `migrate run`. Then:

* every znode in it carries exactly `digest:gs` ALL + `digest:ops` READ, and a plain client
  (no credential, or the wrong password) gets `NoAuth` reading, listing, changing, creating
  under and deleting every one of them; `ops` reads them all and changes none;
* the CLI without the credential (or with the wrong one) prints one `NoAuth` line naming
  `--zk-auth-file` and changes nothing (the whole tree and the data directory compared);
* a node and a consumer without it stop with that one line, no traceback, no retry loop;
* bad auth files (readable by others, malformed, empty, too big, missing) and a bad read
  principal are refused in one line before anything runs.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import Permissions

from coordinator.node.process import NodeProcess
from core.types import TopicPartition as TP
from core.zk import ZooKeeperNoAuth
from core.zk_auth import ENV_AUTH_FILE, ENV_READ_PRINCIPAL, digest_id
from testing.zookeeper import SUPER_AUTH
from tests.inspect_helpers import REPO, coordinator_consumer, legacy_consumer
from tests.snapshots import changes, dir_tree, zk_tree
from tests.zk_acl_helpers import cli as _cli
from tests.zk_acl_helpers import client, every_writer, reads_and_changes_nothing, refused_everything, znodes
from tests.zk_acl_helpers import ok as _ok
from tests.zk_acl_helpers import secret as _secret
from topics.log import Log

# The module's tests share its servers: they run on one worker, which starts them once.
pytestmark = pytest.mark.xdist_group("test_zk_auth")

PASSWORD, OPS_PASSWORD = "gs-secret-1", "ops-secret-2"
RECORDS = 40  # per partition, 2 partitions


def _one_no_auth_line(done: subprocess.CompletedProcess) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
    assert lines[0].startswith("error: ZooKeeper refused the request: NoAuth"), lines[0]
    assert "--zk-auth-file" in lines[0], lines[0]


class Secured:
    """The namespace, its files and the environments with and without the credential."""

    def __init__(self, zk: str, tmp: Path):
        self.zk, self.hosts, self.chroot = zk, zk.partition("/")[0], "/" + zk.partition("/")[2]
        self.data = tmp / "data"
        self.auth = _secret(tmp / "gs.auth", f"digest:gs:{PASSWORD}\n")
        self.wrong = _secret(tmp / "wrong.auth", "digest:gs:not-the-password\n")
        self.ops_id = digest_id("ops", OPS_PASSWORD)
        base = {k: v for k, v in os.environ.items() if not k.startswith("GROUPSHIFT_ZK")}
        base.update(GROUPSHIFT_ZK=zk, GROUPSHIFT_DATA=str(self.data), PYTHONPATH=str(REPO))
        self.plain = base  # no credential
        self.env = dict(base, **{ENV_AUTH_FILE: str(self.auth), ENV_READ_PRINCIPAL: f"digest:{self.ops_id}"})

    def client(self, auth_data=None) -> KazooClient:
        return client(self.hosts, auth_data)

    def znodes(self) -> list[str]:
        """Every znode of the namespace, the chroot first (read as the test servers' super user)."""
        return znodes(self.hosts, self.chroot)


@pytest.fixture(scope="module")
def secured(module_zk_connect, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zk-auth")
    s = Secured(module_zk_connect + "/sec", tmp)
    # the CLI: the root option and the command's own
    _ok(s.plain, "--zk-auth-file", str(s.auth), "--zk-read-principal", f"digest:{s.ops_id}",
        "topics", "create", "clicks", "-p", "2")  # fmt: skip
    _ok(s.plain, "topics", "produce", "clicks", "-n", str(2 * RECORDS))  # the log only: no ZooKeeper
    with every_writer(s.zk, s.data, s.env, 2 * RECORDS, tmp / "node.log") as node:
        _ok(s.plain, "groups", "describe", "g1", "--zk-auth-file", str(s.auth))
        assert "clicks,0,40" in _ok(s.env, "offsets", "export", "g3")
        s.node = node
        yield s


def test_every_znode_is_closed_to_clients_without_the_credential(secured):
    paths = secured.znodes()
    # every writer's znodes are there: topics, the node, both schemes' groups, the migration
    for must in ("/brokers/topics/clicks", "/consumers/g1/offsets/clicks/0", "/groupshift"):
        assert any(p.endswith(must) or must in p for p in paths), must
    admin = secured.client(SUPER_AUTH)
    try:
        for path in paths:
            acl = admin.get_acls(path)[0]
            assert {(a.id.scheme, a.id.id, a.perms) for a in acl} == {
                ("digest", digest_id("gs", PASSWORD), Permissions.ALL),
                ("digest", secured.ops_id, Permissions.READ),
            }, path
    finally:
        admin.stop()
        admin.close()
    for auth in (None, [("digest", "gs:not-the-password")]):
        refused_everything(secured.client(auth), paths)


def test_the_operator_reads_every_znode_and_changes_none(secured):
    reads_and_changes_nothing(secured.client([("digest", f"ops:{OPS_PASSWORD}")]), secured.znodes())


@pytest.mark.parametrize(
    "args",
    [
        ("topics", "describe", "clicks"),
        ("topics", "create", "other", "-p", "1"),
        ("groups", "describe", "g1"),
        ("groups", "delete", "g3"),
        ("offsets", "export", "g3"),
        ("offsets", "reset", "g1", "--topic", "clicks", "--to-earliest", "--execute"),
        ("migrate", "run", "g3", "--from", "coordinator", "--to", "zk"),
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_cli_without_the_credential_says_noauth_in_one_line_and_changes_nothing(secured, args):
    before = zk_tree(secured.zk), dir_tree(secured.data)
    _one_no_auth_line(_cli(secured.plain, *args))
    _one_no_auth_line(_cli(secured.plain, "--zk-auth-file", str(secured.wrong), *args))
    after = zk_tree(secured.zk), dir_tree(secured.data)
    assert after == before, changes(before[0], after[0]) + changes(before[1], after[1])


def test_a_node_without_the_credential_stops_with_one_line(secured, monkeypatch):
    before = zk_tree(secured.zk)
    monkeypatch.delenv(ENV_AUTH_FILE)
    monkeypatch.delenv(ENV_READ_PRINCIPAL)
    node = NodeProcess.spawn(secured.zk, 2, "--data", str(secured.data))
    try:
        assert node.proc.wait(timeout=30) == 1
    finally:
        node.stop()
    out = [ln for ln in node.output if ln.strip()]
    assert len(out) == 1 and "NoAuth" in out[0] and "--zk-auth-file" in out[0], out
    assert zk_tree(secured.zk) == before


@pytest.mark.parametrize("rebalancer", ["zk", "coordinator"])
def test_a_consumer_without_the_credential_raises_one_noauth_error(secured, rebalancer, monkeypatch):
    monkeypatch.delenv(ENV_AUTH_FILE)
    monkeypatch.delenv(ENV_READ_PRINCIPAL)
    before = zk_tree(secured.zk)
    log = Log(secured.data)
    t0 = time.monotonic()
    with pytest.raises(ZooKeeperNoAuth, match="NoAuth.*--zk-auth-file"):
        if rebalancer == "zk":
            c = legacy_consumer("g1", ["clicks"], secured.zk, log)
        else:
            c = coordinator_consumer("g3", ["clicks"], secured.zk, log, secured.node.address)
        try:
            c.poll(timeout_ms=2000)
            c.commit({TP("clicks", 0): 1})
        finally:
            c.close()
    assert time.monotonic() - t0 < 10  # refused, not retried
    assert zk_tree(secured.zk) == before


BAD_FILES = {
    "readable-by-others": ("digest:gs:pw\n", 0o644, "readable by others; run `chmod o-r"),
    "writable-by-others": ("digest:gs:pw\n", 0o602, "writable by others; run `chmod o-w"),
    "malformed": ("digest:gs\n", 0o600, "malformed"),
    "other-scheme": ("kerberos:gs:pw\n", 0o600, "the schemes are digest and sasl"),
    "two-lines": ("digest:a:b\ndigest:c:d\n", 0o600, "holds 2 credential lines"),
    "empty": ("# nothing\n", 0o600, "is empty"),
    "too-big": ("#" * 5000 + "\ndigest:gs:pw\n", 0o600, "larger than 4096 bytes"),
    "missing": (None, 0, "No such file or directory"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_auth_file_is_refused_in_one_line_before_anything_runs(secured, tmp_path, case):
    text, mode, says = BAD_FILES[case]
    path = tmp_path / "auth"
    if text is not None:
        path.write_text(text)
        path.chmod(mode)
    before = zk_tree(secured.zk), dir_tree(secured.data)
    for args in (
        ("--zk-auth-file", str(path), "topics", "create", "fresh", "-p", "1"),
        ("topics", "create", "fresh", "-p", "1", "--zk-auth-file", str(path)),
    ):
        done = _cli(secured.plain, *args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 1 and len(lines) == 1 and says in lines[0] and str(path) in lines[0], (
            done.stderr
        )
    done = _cli(dict(secured.plain, **{ENV_AUTH_FILE: str(path)}), "topics", "create", "fresh", "-p", "1")
    assert done.returncode == 1 and says in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert (zk_tree(secured.zk), dir_tree(secured.data)) == before


@pytest.mark.parametrize(
    "principal", ["world:anyone", "digest:ops:short", "digest:ops", "auth:", "super:x", "digest:a b:hash"]
)
def test_a_bad_read_principal_is_refused_in_one_line(secured, principal):
    before = zk_tree(secured.zk)
    done = _cli(secured.env, "--zk-read-principal", principal, "topics", "create", "fresh", "-p", "1")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1 and "read principal" in lines[0], done.stderr
    assert zk_tree(secured.zk) == before


def test_zk_digest_prints_the_id_an_acl_names(tmp_path):
    pw = _secret(tmp_path / "pw", OPS_PASSWORD + "\n")
    done = _cli(dict(os.environ, PYTHONPATH=str(REPO)), "zk", "digest", "ops", "--password-file", str(pw))
    assert done.returncode == 0 and done.stdout.strip() == f"digest:{digest_id('ops', OPS_PASSWORD)}", (
        done.stderr
    )
    pw.chmod(0o644)
    done = _cli(dict(os.environ, PYTHONPATH=str(REPO)), "zk", "digest", "ops", "--password-file", str(pw))
    assert done.returncode == 1 and "chmod o-r" in done.stderr and not done.stdout


def test_a_password_never_reaches_a_command_line(secured):
    """The node's command line names the file, never the password."""
    cmdline = Path(f"/proc/{secured.node.proc.pid}/cmdline").read_bytes().decode(errors="replace")
    assert PASSWORD not in cmdline
    environ = Path(f"/proc/{secured.node.proc.pid}/environ").read_bytes().decode(errors="replace")
    assert PASSWORD not in environ and str(secured.auth) in environ
