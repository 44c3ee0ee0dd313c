"""Scheme one on a secured ZooKeeper without a chroot: a refused request stops the member cleanly.

The module runs a ZooKeeper server of its own and uses it without a chroot (`--zk HOST:PORT`), so
`connect()`'s early check of the chroot has nothing to read and a consumer meets `NoAuth` on its
member's own threads. The user `gs` writes the tree (a topic, a group that consumed and committed),
naming the operator `ops` as reader. Then:

* a consumer without `gs`'s credential — none, the operator's read-only one, another user's —
  raises the one-line `ZooKeeperNoAuth` from its next poll() (and commit()) within seconds: no
  traceback, no thread left running, its session closed, nothing changed in ZooKeeper;
* a member refused after it registered and claimed (a rebalance, or a watch of a stable member)
  releases its registration and owner znodes at once;
* manual assignment's offsets say the same line;
* `groupshift consume` exits with that line alone.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions

from core.types import TopicPartition as TP
from core.zk import ZooKeeperNoAuth, connect
from core.zk_auth import ENV_AUTH_FILE, ENV_READ_PRINCIPAL, digest_id
from pipeline.consumer import Consumer
from testing.zookeeper import SUPER_AUTH, ZkServer
from tests.inspect_helpers import REPO, consume, legacy_consumer, make_topic, wait_for
from tests.snapshots import changes, zk_tree
from tests.zk_acl_helpers import cli, client, secret
from topics.log import Log
from zk_rebalance.layout import TopicCount, encode_registration
from zk_rebalance.member import ZkMemberState

# The module's tests share its server: they run on one worker, which starts it once (but for
# the `consume` test, which runs in the Spark lane).
shared = pytest.mark.xdist_group("test_zk_refused")

PASSWORDS = {"gs": "gs-secret-1", "ops": "ops-secret-2", "mallory": "not-gs-3"}
NOAUTH = r"^ZooKeeper refused the request: NoAuth on /\S+ \(.*--zk-auth-file"
REFUSED_WITHIN_S = 5.0
GS_ONLY = [ACL(Permissions.ALL, Id("digest", digest_id("gs", PASSWORDS["gs"])))]


class Tree:
    """The server, its tree written by `gs`, the log, and each user's credential file."""

    def __init__(self, server: ZkServer, tmp: Path):
        self.zk = server.connect_string  # no chroot
        self.log = Log(tmp / "data")
        self.auth = {
            user: secret(tmp / f"{user}.auth", f"digest:{user}:{pw}\n") for user, pw in PASSWORDS.items()
        }
        self.readers = f"digest:{digest_id('ops', PASSWORDS['ops'])}"

    def admin(self) -> KazooClient:
        """The test server's super user: sets up ACLs no groupshift process would write."""
        return client(self.zk, SUPER_AUTH)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    server = ZkServer.start_single()
    try:
        t = Tree(server, tmp_path_factory.mktemp("zk-refused"))
        saved = {k: os.environ.get(k) for k in (ENV_AUTH_FILE, ENV_READ_PRINCIPAL)}
        os.environ.update({ENV_AUTH_FILE: str(t.auth["gs"]), ENV_READ_PRINCIPAL: t.readers})
        try:
            zk = connect(t.zk)
            try:
                make_topic(zk, t.log, "clicks", 2, 20)
            finally:
                zk.stop()
                zk.close()
            c = legacy_consumer("billing", ["clicks"], t.zk, t.log)
            try:
                consume(c, 40)
            finally:
                c.close()
        finally:
            for k, v in saved.items():
                os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
        yield t
    finally:
        server.remove()


@pytest.fixture
def clean_exit(monkeypatch, caplog):
    """Fails the test if a thread died with an exception or groupshift logged a traceback or a
    warning (a process's stderr would show them)."""
    died: list = []
    monkeypatch.setattr(threading, "excepthook", died.append)
    caplog.set_level(logging.INFO)
    yield
    assert not died, [f"{d.thread.name}: {d.exc_type.__name__}" for d in died]
    ours = ("zk_rebalance", "pipeline", "core")
    loud = [
        r
        for r in caplog.records
        if r.name.split(".")[0] in ours and (r.exc_info or r.levelno >= logging.WARNING)
    ]
    assert not loud, [r.getMessage() for r in loud]


def _as(monkeypatch, tree: Tree, user: str | None) -> None:
    monkeypatch.delenv(ENV_READ_PRINCIPAL, raising=False)
    if user is None:
        monkeypatch.delenv(ENV_AUTH_FILE, raising=False)
    else:
        monkeypatch.setenv(ENV_AUTH_FILE, str(tree.auth[user]))


def _poll_until_refused(consumer) -> float:
    """Seconds until poll() raised the one NoAuth line (pytest fails the test if it never does)."""
    t0 = time.monotonic()
    with pytest.raises(ZooKeeperNoAuth, match=NOAUTH):
        while time.monotonic() - t0 < REFUSED_WITHIN_S:
            consumer.poll(timeout_ms=100)
    return time.monotonic() - t0


def _stopped(member) -> None:
    """The member ended every thread of its own and closed its session, before close()."""
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.name.startswith(member.consumer_id)],
        REFUSED_WITHIN_S,
        "the member's threads to end",
    )
    assert member.state is ZkMemberState.REFUSED and not member.zk.connected


def _children(tree: Tree, path: str) -> list[str]:
    admin = tree.admin()
    try:
        return admin.get_children(path)
    finally:
        admin.stop()
        admin.close()


@pytest.mark.parametrize(
    "user", [None, "ops", "mallory"], ids=["no-credential", "read-only-operator", "other-user"]
)
@shared
def test_a_consumer_the_tree_refuses_raises_one_noauth_line_at_poll(tree, user, monkeypatch, clean_exit):
    _as(monkeypatch, tree, user)
    before = zk_tree(tree.zk)
    c = legacy_consumer("billing", ["clicks"], tree.zk, tree.log)
    try:
        assert _poll_until_refused(c) < REFUSED_WITHIN_S
        _stopped(c.membership)
        with pytest.raises(ZooKeeperNoAuth, match=NOAUTH):
            c.commit({TP("clicks", 0): 1})
        with pytest.raises(ZooKeeperNoAuth, match=NOAUTH):
            c.poll(timeout_ms=0)
        used = f"the credential in {tree.auth[user]}" if user else "no credential"
        assert f"this process used {used}" in str(c.membership.fatal_error)
    finally:
        c.close()
    assert zk_tree(tree.zk) == before, changes(before, zk_tree(tree.zk))


def _open(tree: Tree, *paths: str) -> None:
    """Znodes anyone may change (as an open tree, or one written before the credential was used)."""
    admin = tree.admin()
    try:
        for path in paths:
            admin.create(path, b"", acl=OPEN_ACL_UNSAFE, makepath=True)
    finally:
        admin.stop()
        admin.close()


def _consumer(tree: Tree, group: str, topic: str = "clicks", **membership) -> Consumer:
    return Consumer(
        group,
        [topic],
        rebalancer="zk",
        zk=tree.zk,
        log=tree.log,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        membership_options={"rebalance_backoff_ms": 100, **membership},
    )


@shared
def test_a_member_refused_after_it_claimed_releases_its_znodes(tree, monkeypatch, clean_exit):
    """The operator may register and claim in a group whose ids and owners are open, but not read
    the offsets only `gs` may: refused after claiming (the offsets are read after the claim), the
    member's registration and owner znodes go with its session, at once."""
    _open(tree, "/consumers/shared/ids", "/consumers/shared/owners")
    admin = tree.admin()
    try:
        admin.create("/consumers/shared/offsets/clicks/0", b"7", acl=GS_ONLY, makepath=True)
    finally:
        admin.stop()
        admin.close()
    _as(monkeypatch, tree, "ops")
    c = _consumer(tree, "shared", read_offsets_after_claim=True)
    try:
        _poll_until_refused(c)
        _stopped(c.membership)
        events = c.membership.events.counters
        assert events["registered"] == 1 and events["owner_created"] == 2 and events["refused"] == 1
        assert _children(tree, "/consumers/shared/ids") == []
        assert _children(tree, "/consumers/shared/owners/clicks") == []
    finally:
        c.close()


@shared
def test_a_stable_member_refused_in_a_later_rebalance_stops_and_releases_its_znodes(
    tree, monkeypatch, clean_exit
):
    """A consumer without credentials consumes an open topic in an open group; then a member
    holding `gs`'s credential joins, its registration readable by `gs` (and `ops`) only. The
    consumer's rebalance cannot read it: it stops, its partitions lost, its znodes released."""
    admin = tree.admin()
    try:
        data, _ = admin.get("/brokers/topics/clicks")  # two partitions, as the log's "clicks"
        admin.create("/brokers/topics/open", data, acl=OPEN_ACL_UNSAFE)
    finally:
        admin.stop()
        admin.close()
    tree.log.create("open", 2)
    for p in range(2):
        tree.log.produce("open", [(b"k", b"v")] * 5, partition=p)
    _open(tree, "/consumers/open/ids", "/consumers/open/owners")
    _as(monkeypatch, tree, None)
    c = _consumer(tree, "open", topic="open")
    try:
        consume(c, 10)
        assert c.membership.state is ZkMemberState.STABLE and len(c.assignment()) == 2
        admin = tree.admin()
        try:  # what a member started with gs's credential registers
            registration = encode_registration(TopicCount.static({"open": 1}), int(time.time() * 1000))
            admin.create("/consumers/open/ids/open_gs", registration, acl=GS_ONLY, ephemeral=True)
            _poll_until_refused(c)
            _stopped(c.membership)
            assert c.assignment() == set()  # lost: the listener dropped them
            assert _children(tree, "/consumers/open/ids") == ["open_gs"]
            assert _children(tree, "/consumers/open/owners/open") == []
        finally:
            admin.stop()
            admin.close()
    finally:
        c.close()


@shared
def test_manual_assignment_offsets_say_noauth_in_one_line(tree, monkeypatch, clean_exit):
    _as(monkeypatch, tree, None)
    c = Consumer("billing", rebalancer="zk", zk=tree.zk, log=tree.log, enable_auto_commit=False)
    try:
        with pytest.raises(ZooKeeperNoAuth, match=NOAUTH):
            c.assign([TP("clicks", 0)])  # reads the group's committed offset
        answered = threading.Event()
        got: list = []
        c.commit_async({TP("clicks", 0): 1}, lambda offsets, exc: (got.append(exc), answered.set()))
        assert answered.wait(REFUSED_WITHIN_S), "the async commit never answered"
        assert isinstance(got[0], ZooKeeperNoAuth), got
    finally:
        c.close(autocommit=False)


@pytest.mark.spark
def test_groupshift_consume_exits_with_the_one_noauth_line(tree, tmp_path):
    """The operator's read-only credential lets `consume` find the topic, then its stream reader's
    member is refused registering: the command exits 1 with that line alone, nothing written."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPSHIFT_ZK")}
    env.update(PYTHONPATH=str(REPO))
    before = zk_tree(tree.zk)
    done = cli(
        env, "--zk-auth-file", str(tree.auth["ops"]), "consume", "--zk", tree.zk,
        "--data", str(tree.log.root), "--group", "billing", "--topic", "clicks",
        "--out", str(tmp_path / "out"), "--until-idle", "1",
        timeout=240,
    )  # fmt: skip
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("error: ZooKeeper refused the request: NoAuth on /consumers/billing/ids/")
    assert f"the credential in {tree.auth['ops']}" in lines[0] and not done.stdout
    assert zk_tree(tree.zk) == before
    assert not any((tmp_path / "out").rglob("*.parquet"))
