"""Shared fixtures: real ZooKeeper in containers (one server and a 3-node ensemble per test run).

* `zk_server` / `zk_ensemble`: session-scoped, started on first use from the local image.
* `zk_connect`: a connect string with a fresh chroot for this test on the single server.
* `zk`: a started kazoo client on that chroot (stopped after the test).
* `ensemble`: the ensemble, with every fault (pause, stop, partition, client cut) undone after the test.
"""

from __future__ import annotations

import os

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

import atexit
import signal
import uuid

import pytest

from core.zk import connect
from experiments.cluster import ZkEnsemble, ZkServer, sweep_leftovers


def _interrupt(signum, frame):  # run fixture finalizers (container removal) on SIGTERM too
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="session", autouse=True)
def _cleanup_containers():
    previous = signal.signal(signal.SIGTERM, _interrupt)
    sweep_leftovers()  # containers of earlier runs whose process died without cleaning up
    yield
    signal.signal(signal.SIGTERM, previous)


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
def zk_connect(zk_server, request) -> str:
    """`host:port/t-<test>-<uuid>`: a chroot no other test sees."""
    name = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:60]
    return f"{zk_server.connect_string}/t-{name}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def zk(zk_connect):
    client = connect(zk_connect, session_timeout=6.0)
    yield client
    client.stop()
    client.close()
