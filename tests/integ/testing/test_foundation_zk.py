"""The foundation against real ZooKeeper: client factory, ensemble, faults, embedded server."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time

import pytest
from kazoo.exceptions import NoAuthError
from kazoo.protocol.states import KazooState

from core.errors import GroupshiftError, ZooKeeperUnavailable
from core.zk import ZooKeeperNoAuth, connect, parse_zk
from tests.ports import free_port, on_a_free_port


def test_kazoo_round_trip_in_a_fresh_chroot(zk, zk_connect):
    zk.create("/a/b", b"hello", makepath=True)
    assert zk.get("/a/b")[0] == b"hello"
    # The chroot isolates: the same path seen from the server root lives under the chroot.
    host, chroot = zk_connect.split("/", 1)
    root = connect(host)
    try:
        assert root.get(f"/{chroot}/a/b")[0] == b"hello"
    finally:
        root.stop()
        root.close()


def test_chroots_do_not_see_each_other(zk_connect):
    a = connect(f"{zk_connect}/iso-a")
    b = connect(f"{zk_connect}/iso-b")
    try:
        a.ensure_path("/only-in-a")
        assert not b.exists("/only-in-a")
    finally:
        for c in (a, b):
            c.stop()
            c.close()


@pytest.mark.parametrize(
    "bad",
    ["", "nohost", "host:", "host:99999", ":2181", "a:1,b"],
)
def test_parse_zk_rejects_bad_connect_strings(bad):
    with pytest.raises(GroupshiftError):
        parse_zk(bad)


def test_parse_zk_chroot():
    addr = parse_zk("h1:1,h2:2/x/y")
    assert addr.hosts == "h1:1,h2:2" and addr.chroot == "/x/y"
    assert parse_zk("h1:1/").chroot == ""  # a bare '/' is the root, as ZooKeeper reads it
    with pytest.raises(GroupshiftError, match="bad ZooKeeper chroot"):  # never normalised into another path
        parse_zk("h1:1,h2:2//x//y/")


def test_unreachable_zookeeper_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        with pytest.raises(ZooKeeperUnavailable, match="groupshift zk start"):
            connect(f"127.0.0.1:{port}", connect_timeout=1.0)


def test_digest_auth_closes_the_namespace(zk_connect):
    """The owner's chroot and znodes are neither readable nor writable by a client without the
    credential (docs/security.md); the namespace's teardown deletes them as the server's super user."""
    owner = connect(zk_connect, digest=("alice", "secret"))
    try:
        owner.create("/guarded", b"v")
        with pytest.raises(ZooKeeperNoAuth, match="NoAuth"):
            connect(zk_connect)
        other = connect(zk_connect.partition("/")[0])
        try:
            with pytest.raises(NoAuthError):
                other.get("/" + zk_connect.partition("/")[2] + "/guarded")
        finally:
            other.stop()
            other.close()
    finally:
        owner.stop()
        owner.close()


@pytest.mark.ensemble
def test_ensemble_elects_a_leader_and_replicates(ensemble):
    modes = sorted(s.mode() for s in ensemble.servers.values())
    assert modes == ["follower", "follower", "leader"]
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    a = connect(leader.connect_string + "/repl")
    b = connect(follower.connect_string + "/repl")
    try:
        a.create("/k", b"v1", makepath=True) if not a.exists("/k") else a.set("/k", b"v1")
        b.sync("/k")
        assert b.get("/k")[0] == b"v1"
    finally:
        for c in (a, b):
            c.stop()
            c.close()


@pytest.mark.ensemble
def test_paused_server_suspends_then_expires_the_session(ensemble):
    server = ensemble.followers()[0]
    client = connect(server.connect_string, session_timeout=2.0)
    states: list[tuple[float, KazooState]] = []
    client.add_listener(lambda s: states.append((time.monotonic(), s)))
    watcher = connect(ensemble.leader().connect_string)
    try:
        session_id = client.client_id[0]
        client.create("/eph", ephemeral=True, makepath=True, sequence=True)
        eph = client.get_children("/")
        t0 = time.monotonic()
        server.pause()
        # SUSPENDED after ~0.5-0.6 x the session timeout without a server.
        _wait(lambda: any(s == KazooState.SUSPENDED for _, s in states), 10, "SUSPENDED")
        # The leader expires the session once the timeout passes: its ephemeral znode goes.
        _wait(lambda: not any(n.startswith("eph") for n in watcher.get_children("/")), 15, "session expiry")
        assert time.monotonic() - t0 >= 2.0
        server.unpause()
        # kazoo reports LOST only when it reaches a server again and learns the session expired.
        _wait(lambda: any(s == KazooState.LOST for _, s in states), 20, "LOST after unpause")
        _wait(lambda: client.connected, 20, "reconnect with a new session")
        assert client.client_id[0] != session_id
        assert eph  # it had been created under the old session
    finally:
        for c in (client, watcher):
            c.stop()
            c.close()


@pytest.mark.ensemble
def test_partitioned_follower_serves_stale_reads_until_healed(ensemble):
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    a = connect(leader.connect_string + "/stale")
    b = connect(follower.connect_string + "/stale", session_timeout=20.0)
    try:
        if a.exists("/k"):
            a.set("/k", b"v0")
        else:
            a.create("/k", b"v0")
        b.sync("/k")
        assert b.get("/k")[0] == b"v0"
        ensemble.partition(follower)
        a.set("/k", b"v1")
        # No sync(): the cut-off follower answers from its own, stale, copy.
        assert b.get_async("/k").get(timeout=2)[0] == b"v0"
        ensemble.heal(follower)
        b.stop()
        b.close()
        ensemble.wait_quorum()
        b = connect(follower.connect_string + "/stale")
        b.sync("/k")
        assert b.get("/k")[0] == b"v1"
    finally:
        for c in (a, b):
            c.stop()
            c.close()


@pytest.mark.ensemble
def test_cut_clients_off_one_server(ensemble):
    server = ensemble.followers()[0]
    server.cut_clients()
    with pytest.raises(ZooKeeperUnavailable):
        connect(server.connect_string, connect_timeout=1.5)
    server.restore_clients()
    c = connect(server.connect_string)
    c.stop()
    c.close()


def _wait(check, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


# -- the embedded default -------------------------------------------------------------------


def _groupshift(*args, home, check=True):
    env = dict(os.environ, GROUPSHIFT_HOME=str(home))
    env.pop("GROUPSHIFT_ZK", None)
    proc = subprocess.run(
        [sys.executable, "-m", "cli", *args], capture_output=True, text=True, env=env, timeout=60
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_embedded_zookeeper_start_round_trip_stop(tmp_path):
    port, started = on_a_free_port(
        lambda p: _groupshift("zk", "start", "--port", str(p), home=tmp_path, check=False),
        taken=lambda proc: proc.returncode != 0 and "is already in use" in proc.stderr,
    )
    assert started.returncode == 0, started.stderr
    out = started.stdout
    try:
        assert f"127.0.0.1:{port}" in out
        assert "running" in _groupshift("zk", "status", home=tmp_path).stdout
        env_home = os.environ.get("GROUPSHIFT_HOME")
        os.environ["GROUPSHIFT_HOME"] = str(tmp_path)
        try:
            client = connect()  # no --zk, no GROUPSHIFT_ZK: the embedded default
        finally:
            if env_home is None:
                os.environ.pop("GROUPSHIFT_HOME")
            else:
                os.environ["GROUPSHIFT_HOME"] = env_home
        client.create("/embedded", b"ok")
        assert client.get("/embedded")[0] == b"ok"
        client.stop()
        client.close()
    finally:
        assert "stopped" in _groupshift("zk", "stop", home=tmp_path).stdout
    assert _groupshift("zk", "status", home=tmp_path, check=False).returncode == 3


def test_embedded_zookeeper_port_taken_is_one_line_and_leaves_nothing(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = _groupshift("zk", "start", "--port", str(port), home=tmp_path, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().count("\n") == 0 and "already in use" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert _groupshift("zk", "status", home=tmp_path, check=False).returncode == 3


def test_embedded_zookeeper_without_java_is_one_line(tmp_path):
    env = dict(os.environ, GROUPSHIFT_HOME=str(tmp_path), PATH="/nonexistent")
    proc = subprocess.run(
        [sys.executable, "-m", "cli", "zk", "start", "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1 and "Java is missing" in proc.stderr
    assert proc.stderr.strip().count("\n") == 0


def test_threads_share_one_client(zk):
    # kazoo clients are thread-safe; the factory's client is used from heartbeat threads too.
    errors = []

    def work(i):
        try:
            zk.create(f"/thr/{i}", makepath=True)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(zk.get_children("/thr")) == 8
