"""The test harness's own checks: a snapshot sees its namespace and every write around it, costs only
its namespace, a test's namespace is removed whole when the test ends, and a lane holds (its tests
run on one worker)."""

from __future__ import annotations

import uuid

import pytest
from kazoo.client import KazooClient

from core.zk import connect
from tests.namespaces import remove_namespace
from tests.snapshots import changes, zk_tree


def _root(zk_server) -> KazooClient:
    client = KazooClient(hosts=zk_server.connect_string)
    client.start(timeout=10)
    return client


def test_a_write_inside_beside_or_above_the_namespace_is_caught(zk_server, zk_connect):
    namespace = f"{zk_connect}/app/ns"
    zk = connect(namespace)
    root = _root(zk_server)
    chroot = "/" + zk_connect.split("/", 1)[1]
    stray_top = f"/stray-{uuid.uuid4().hex[:8]}"
    try:
        zk.ensure_path("/consumers/g/offsets/t/0")
        before = zk_tree(namespace)
        assert zk_tree(namespace) == before  # reading changes nothing
        writes = [
            lambda: zk.set("/consumers/g/offsets/t/0", b"5"),  # inside
            lambda: root.create(f"{chroot}/app/beside"),  # a sibling of the namespace, in its parent
            lambda: root.create(f"{chroot}/stray"),  # in a grandparent
            lambda: root.set(chroot, b"data"),  # new data on the top-level znode above it
            lambda: root.create(stray_top),  # at the server's root
        ]
        for write in writes:
            write()
            after = zk_tree(namespace)
            assert after != before, "a write was not seen"
            assert changes(before, after)
            before = after
    finally:
        zk.stop()
        zk.close()
        root.delete(stray_top)
        root.stop()
        root.close()


def test_a_snapshot_reads_only_its_namespace(zk_server, zk_connect):
    """What other tests keep on the server is neither read nor compared: the cost is the namespace's."""
    mine, theirs = connect(f"{zk_connect}/mine"), connect(f"{zk_connect}-theirs")
    try:
        mine.ensure_path("/a")
        for i in range(200):
            theirs.ensure_path(f"/deep/{i}")
        snapshot = zk_tree(f"{zk_connect}/mine")
        znodes = sorted(path for kind, path in snapshot if kind == "znode")
        chroot = "/" + zk_connect.split("/", 1)[1]
        # the namespace itself, plus the znodes at the root (no deeper)
        assert [p for p in znodes if p.startswith(chroot + "/")] == [f"{chroot}/mine", f"{chroot}/mine/a"]
        assert all(p.count("/") == 1 for p in znodes if not p.startswith(chroot + "/"))
        theirs.create("/deep/0/x")  # another namespace changes: not this test's business
        assert zk_tree(f"{zk_connect}/mine") == snapshot
    finally:
        for c in (mine, theirs):
            c.stop()
            c.close()


def test_a_namespace_and_its_siblings_are_removed_whole(zk_server, zk_connect):
    chroot = zk_connect.split("/", 1)[1]
    other = f"{zk_server.connect_string}/t-other-{uuid.uuid4().hex[:8]}"
    clients = [connect(c) for c in (zk_connect, f"{zk_connect}-sibling", other)]
    try:
        for c in clients:
            for i in range(50):
                c.ensure_path(f"/tree/{i}/leaf")
        clients[0].create("/tree/0/leaf/alive", ephemeral=True)  # a live session's ephemeral too
        remove_namespace(zk_connect)
        root = _root(zk_server)
        try:
            names = root.get_children("/")
            assert chroot not in names and f"{chroot}-sibling" not in names
            assert other.split("/", 1)[1] in names  # someone else's namespace is kept
        finally:
            root.stop()
            root.close()
        remove_namespace(other)
    finally:
        for c in clients:
            c.stop()
            c.close()


@pytest.mark.experiments
def test_a_lane_is_one_xdist_group(request):
    """Under `--dist loadgroup` a test of a lane carries the group xdist schedules by. If pytest or
    xdist stop honouring it (pytest 9.2 with xdist 3.8 silently did), the lane's tests would run
    side by side on every worker: this fails instead."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by xdist with --dist loadgroup (scripts/test.sh does)")
    assert request.node.nodeid.endswith("@experiments"), request.node.nodeid


@pytest.mark.ensemble
def test_the_ensembles_tests_run_alone(request):
    """A test of the shared ensemble is a fault-injection test: marked `faults`, so scripts/test.sh
    runs it in the phase where nothing else runs."""
    assert request.node.get_closest_marker("faults") is not None


def test_a_zookeeper_container_whose_port_was_taken_starts_on_another(monkeypatch):
    """The port a server is pinned to is chosen free, but another process can bind it first (tests
    run in parallel): the start is retried on a new port, never left to luck."""
    import socket

    from experiments import cluster

    taken = socket.socket()
    taken.bind(("0.0.0.0", 0))
    taken.listen()
    ports = iter([taken.getsockname()[1]])
    real = cluster.free_port
    monkeypatch.setattr(cluster, "free_port", lambda: next(ports, None) or real())
    try:
        with cluster.ZkServer.start_single() as server:
            assert server.port != taken.getsockname()[1]
            assert server.ruok()
    finally:
        taken.close()
