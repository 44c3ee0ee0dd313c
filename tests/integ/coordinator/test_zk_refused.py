"""Schemes two and three on a partly secured ZooKeeper: a refusal met by a long-lived task stops it.

Each test's namespace is created open (as a tree written before anyone used a credential), then
part of it is written by the user `gs` (`--zk-auth-file`), whose znodes nobody else may read. So a
process without that credential passes its start-up check of the chroot and meets `NoAuth` later,
on one of its own tasks:

* a coordinator node that may not read the ACL changes an operator wrote with the credential
  stops (shards released, registration gone) and exits 1 with the one `NoAuth` line, instead of
  enforcing stale ACLs and warning forever;
* a scheme-three consumer that may not list the nodes registered by a node holding the credential
  raises the one-line `ZooKeeperNoAuth` from poll() at once, not "no coordinator answered" after
  its coordinator timeout.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from coordinator.node.process import NodeProcess
from core.zk import ZooKeeperNoAuth, connect
from core.zk_auth import ENV_AUTH_FILE
from pipeline.consumer import Consumer
from testing.zookeeper import SUPER_AUTH
from tests.inspect_helpers import REPO, make_topic
from tests.zk_acl_helpers import client, ok, secret
from topics.log import Log

REFUSED_WITHIN_S = 10.0


def _open_namespace(zk_connect: str) -> None:
    """Create the chroot without a credential: open to every client."""
    client = connect(zk_connect)
    client.stop()
    client.close()


def _gs_auth(tmp_path: Path) -> Path:
    return secret(tmp_path / "gs.auth", "digest:gs:gs-secret-1\n")


def _children(zk_connect: str, path: str) -> list[str]:
    hosts, _, chroot = zk_connect.partition("/")
    admin = client(hosts, SUPER_AUTH)
    try:
        return admin.get_children(f"/{chroot}{path}")
    finally:
        admin.stop()
        admin.close()


def test_a_node_refused_the_acl_changes_stops_with_one_line(zk_connect, tmp_path):
    _open_namespace(zk_connect)
    node = NodeProcess.start(
        zk_connect, 1, "--data", str(tmp_path / "data"), "--authorizer", "acl", "--super-users", "User:admin"
    )
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GROUPSHIFT_ZK")}
        env["PYTHONPATH"] = str(REPO)
        ok(env, "--zk-auth-file", str(_gs_auth(tmp_path)), "acls", "add", "--zk", zk_connect,
           "--allow-principal", "User:alice", "--operation", "Read", "--group", "billing")  # fmt: skip
        assert node.proc.wait(timeout=REFUSED_WITHIN_S) == 1
    finally:
        node.stop()
    out = list(node.output)
    assert out[-1].startswith("error: ZooKeeper refused the request: NoAuth"), out[-5:]
    assert "this process used no credential" in out[-1] and "--zk-auth-file" in out[-1]
    assert not any("Traceback" in line or '"level": "warning"' in line for line in out), out
    assert _children(zk_connect, "/groupshift/coordinators/ids") == []  # unregistered


def test_a_consumer_refused_the_node_list_raises_noauth_at_poll(zk_connect, tmp_path, monkeypatch):
    _open_namespace(zk_connect)
    log = Log(tmp_path / "data")
    monkeypatch.setenv(ENV_AUTH_FILE, str(_gs_auth(tmp_path)))
    zk = connect(zk_connect)
    try:
        make_topic(zk, log, "clicks", 2, 10)
    finally:
        zk.stop()
        zk.close()
    node = NodeProcess.start(zk_connect, 1, "--data", str(log.root))
    try:
        monkeypatch.delenv(ENV_AUTH_FILE)
        c = Consumer(
            "g3", ["clicks"], rebalancer="coordinator", zk=zk_connect, log=log, auto_offset_reset="earliest"
        )
        try:
            t0 = time.monotonic()
            with pytest.raises(
                ZooKeeperNoAuth, match=r"^ZooKeeper refused the request: NoAuth on /groupshift"
            ):
                while time.monotonic() - t0 < REFUSED_WITHIN_S:
                    c.poll(timeout_ms=100)
            assert time.monotonic() - t0 < 2  # at once: not after the 30 s coordinator timeout
        finally:
            c.close()
    finally:
        node.stop()
