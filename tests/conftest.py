"""Shared fixtures: real ZooKeeper in containers, one server per test worker.

The suite runs in parallel workers (pytest-xdist, `scripts/test.sh`); each worker is its own pytest
session, so the session fixtures below exist once per worker:

* `zk_server` / `zk_ensemble`: session-scoped, started on first use from the local image.
* `zk_connect`: a connect string with a fresh chroot for this test on the worker's server, deleted
  (with any sibling `<chroot>-...` the test made) when the test ends; `module_zk_connect` is the
  same for a module's shared fixtures.
* `zk`: a started kazoo client on that chroot (stopped after the test).
* `ensemble`: the ensemble, with every fault (pause, stop, partition, client cut) undone after the test.
* Every worker has a `GROUPSHIFT_HOME` of its own, and no `GROUPSHIFT_ZK` / `GROUPSHIFT_DATA`
  (nor ZooKeeper credentials or TLS settings) leaks in from the shell that started the run.

Where a test runs (`scripts/test.sh`), chosen by marker or by the fixtures it uses:

* `faults`: fault injection under timing-sensitive clients — ZooKeeper containers of the test's
  own stopped, paused or cut off, and every test of the shared 3-node ensemble (marker `ensemble`,
  or the `ensemble` / `zk_ensemble` fixtures). They run after the parallel phase, alone, one after
  the other: a loaded machine would stretch the sessions and pauses they time.
* lanes, in the parallel phase: one worker runs a lane's tests one after the other, never two at
  once — `spark` (a Spark driver: ~2 GB and a core each) and `experiments` (each starts ZooKeeper
  ensembles, coordinator nodes and worker processes of its own).
* every other test, in the parallel phase, on any free worker.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import atexit
import signal

import pytest

from core.zk import connect
from core.zk_auth import ZK_SECURITY_ENV
from testing.ensemble import ZkEnsemble
from testing.leftovers import sweep_leftovers
from testing.zookeeper import ZkServer
from tests.namespaces import chroot_for, remove_namespace

# See the module docstring. The tests run alone (marked `faults` here, so `-m faults` selects them):
ALONE = (("faults", "ensemble"), ("zk_ensemble", "ensemble"))  # markers, fixtures
# lane -> (markers, fixtures) that put a test in it
LANES = {
    "spark": (("spark",), ("spark",)),
    "experiments": (("experiments",), ()),
}


def _has(item, markers: tuple[str, ...], fixtures: tuple[str, ...]) -> bool:
    uses = getattr(item, "fixturenames", ())
    return any(item.get_closest_marker(m) for m in markers) or any(f in uses for f in fixtures)


# First: before the mark plugin deselects by `-m` and before xdist reads the xdist_group marks.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if _has(item, *ALONE):
            item.add_marker(pytest.mark.faults)
            continue
        lane = next((name for name, (m, f) in LANES.items() if _has(item, m, f)), None)
        if lane:
            item.add_marker(pytest.mark.xdist_group(lane))


def _interrupt(signum, frame):  # run fixture finalizers (container removal) on SIGTERM too
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the xdist master (workers: `_worker_environment`)
        signal.signal(signal.SIGTERM, _interrupt)


@pytest.fixture(scope="session", autouse=True)
def _worker_environment(tmp_path_factory):
    """Per worker: a GROUPSHIFT_HOME of its own, none of the shell's ZooKeeper or data settings,
    SIGTERM handled like Ctrl-C, and containers of dead earlier runs swept."""
    unset = ("GROUPSHIFT_ZK", "GROUPSHIFT_DATA", *ZK_SECURITY_ENV)
    saved = {k: os.environ.get(k) for k in ("GROUPSHIFT_HOME", *unset)}
    os.environ["GROUPSHIFT_HOME"] = str(tmp_path_factory.mktemp("groupshift-home"))
    for key in unset:
        os.environ.pop(key, None)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    sweep_leftovers()  # containers of earlier runs whose process died without cleaning up
    yield
    signal.signal(signal.SIGTERM, previous)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def zk_server():
    server = ZkServer.start_single()
    atexit.register(server.remove)
    yield server
    try:
        left = _left_at_the_root(server)
    finally:
        server.remove()
    assert not left, f"tests left znodes at the ZooKeeper server's root, outside any test's namespace: {left}"


def _left_at_the_root(server) -> list[str]:
    """What remains at the root once every test and module deleted its namespace."""
    client = connect(server.connect_string)
    try:
        return sorted(set(client.get_children("/")) - {"zookeeper"})
    finally:
        client.stop()
        client.close()


@pytest.fixture(scope="session")
def zk_ensemble():
    ens = ZkEnsemble.start()
    atexit.register(ens.remove)
    yield ens
    ens.remove()


@pytest.fixture
def ensemble(zk_ensemble):
    yield zk_ensemble
    for server in zk_ensemble.servers.values():
        status = _status(server)
        if status == "paused":
            server.unpause()
        elif status in ("exited", "created"):
            server.start()
        if status in ("running", "paused"):
            server.netns("iptables", "-F")
    zk_ensemble.wait_quorum()


def _status(server) -> str:
    w = server.wrapped
    w.reload()
    return w.status


@pytest.fixture
def zk_connect(zk_server, request):
    """`host:port/t-<test>-<uuid>`: a chroot no other test sees, deleted when the test ends."""
    connect_string = f"{zk_server.connect_string}/{chroot_for(request.node.name)}"
    yield connect_string
    remove_namespace(connect_string)


@pytest.fixture(scope="module")
def module_zk_connect(zk_server, request):
    """`host:port/t-<module>-<uuid>`: a chroot for a module's shared fixtures, deleted after the module."""
    connect_string = f"{zk_server.connect_string}/{chroot_for(request.module.__name__.rpartition('.')[2])}"
    yield connect_string
    remove_namespace(connect_string)


@pytest.fixture
def zk(zk_connect):
    client = connect(zk_connect, session_timeout=6.0)
    yield client
    client.stop()
    client.close()
