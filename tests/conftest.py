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
  leaks in from the shell that started the run.

Tests that must never run beside another of their kind go in lanes (xdist groups: one worker runs a
lane's tests one after the other), chosen by marker or by the fixtures a test uses:
`ensemble` (the shared 3-node ensemble, and the experiments, which start ensembles of their own),
`spark` (a Spark driver: ~2 GB and a core each) and `faults` (ZooKeeper containers of their own,
stopped, paused or cut off under timing-sensitive clients). Other tests go to any free worker.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import atexit
import signal

import pytest

from core.zk import connect
from experiments.cluster import ZkEnsemble, ZkServer, sweep_leftovers
from tests.namespaces import chroot_for, remove_namespace

# Lanes (see the module docstring): lane -> (markers, fixtures) that put a test in it.
LANES = {
    "ensemble": (("ensemble",), ("zk_ensemble", "ensemble")),
    "spark": (("spark",), ("spark",)),
    "faults": (("faults",), ()),
}


def lane_of(item) -> str | None:
    fixtures = getattr(item, "fixturenames", ())
    for lane, (markers, uses) in LANES.items():
        if any(item.get_closest_marker(m) for m in markers) or any(f in fixtures for f in uses):
            return lane
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the xdist_group marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        lane = lane_of(item)
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
    saved = {k: os.environ.get(k) for k in ("GROUPSHIFT_HOME", "GROUPSHIFT_ZK", "GROUPSHIFT_DATA")}
    os.environ["GROUPSHIFT_HOME"] = str(tmp_path_factory.mktemp("groupshift-home"))
    os.environ.pop("GROUPSHIFT_ZK", None)
    os.environ.pop("GROUPSHIFT_DATA", None)
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
    server.remove()


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
