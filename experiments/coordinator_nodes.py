"""Real coordinator node processes for tests and experiments (`groupshift coordinator serve`).

    with CoordinatorNodes(zk_connect, count=2, group_initial_rebalance_delay_ms=0) as nodes:
        member = CoordinatorMember("g", ["t"], bootstrap=nodes.bootstrap, zk=zk)
        nodes.kill(1)                          # SIGKILL: another node takes the node's shards over
        nodes.start_node(1)                    # the same node id again, on a new port

Each node is its own process (never an in-process server), started with
`python -m cli coordinator serve --zk ZK --listen 127.0.0.1:0 --node-id N ...` and considered
up when it prints `listening on HOST:PORT`. Every broker option of `NodeConfig` can be passed as a
keyword (`group_min_session_timeout_ms=100` becomes `--group-min-session-timeout-ms 100`).

The pytest fixture factory `coordinator_nodes_fixture` builds a fixture from this class for a
`conftest.py` or a test module.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import GroupshiftError

REPO = Path(__file__).resolve().parent.parent
LISTENING = re.compile(r"listening on (\S+):(\d+)")
# Broker settings that make small test groups fast: short sessions allowed, no initial delay.
TEST_DEFAULTS = {
    "group_min_session_timeout_ms": 100,
    "group_initial_rebalance_delay_ms": 0,
}


class CoordinatorNodeError(GroupshiftError):
    """A coordinator node process did not start; the message carries its output."""


@dataclass
class NodeProcess:
    node_id: int
    proc: subprocess.Popen
    host: str = ""
    port: int = 0
    output: deque = field(default_factory=lambda: deque(maxlen=400))

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None


def serve_command(zk: str, node_id: int, options: dict) -> list[str]:
    cmd = [sys.executable, "-m", "cli", "coordinator", "serve", "--zk", zk, "--listen", "127.0.0.1:0"]
    cmd += ["--node-id", str(node_id)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is False:
            cmd.append("--no-" + key.replace("_", "-"))
        else:
            cmd += [flag, str(value)]
    return cmd


class CoordinatorNodes:
    """A set of coordinator node processes sharing one ZooKeeper (see the module docstring)."""

    def __init__(self, zk_connect: str, count: int = 1, start_timeout: float = 30.0, **options):
        self.zk_connect = zk_connect
        self.count = count
        self.start_timeout = start_timeout
        self.options = {**TEST_DEFAULTS, **options}
        self.nodes: dict[int, NodeProcess] = {}

    def start(self) -> CoordinatorNodes:
        try:
            for node_id in range(1, self.count + 1):
                self.start_node(node_id, wait=False)
            for node in self.nodes.values():
                self._wait_listening(node)
        except BaseException:
            self.close()
            raise
        return self

    def start_node(self, node_id: int, wait: bool = True) -> NodeProcess:
        old = self.nodes.get(node_id)
        if old is not None and old.alive:
            raise CoordinatorNodeError(f"coordinator node {node_id} is already running")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            serve_command(self.zk_connect, node_id, self.options),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        node = NodeProcess(node_id, proc)
        self.nodes[node_id] = node
        threading.Thread(
            target=self._pump, args=(node,), daemon=True, name=f"coordinator-{node_id}-out"
        ).start()
        if wait:
            self._wait_listening(node)
        return node

    def _pump(self, node: NodeProcess) -> None:
        assert node.proc.stdout is not None
        for line in node.proc.stdout:
            node.output.append(line.rstrip("\n"))
            if not node.port:
                m = LISTENING.search(line)
                if m:
                    node.host, node.port = m.group(1), int(m.group(2))

    def _wait_listening(self, node: NodeProcess) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not node.port:
            if not node.alive or time.monotonic() > deadline:
                out = "\n".join(list(node.output)[-40:])
                self.stop_node(node.node_id, sig=signal.SIGKILL)
                raise CoordinatorNodeError(
                    f"coordinator node {node.node_id} did not print 'listening on' within "
                    f"{self.start_timeout:g}s (exit {node.proc.poll()}); output:\n{out}"
                )
            time.sleep(0.02)

    @property
    def bootstrap(self) -> str:
        """`host:port,...` of the running nodes."""
        return ",".join(n.address for n in self.nodes.values() if n.alive and n.port)

    def kill(self, node_id: int) -> None:
        """SIGKILL: the node vanishes (its ZooKeeper session expires later)."""
        self.stop_node(node_id, sig=signal.SIGKILL)

    def stop_node(self, node_id: int, sig: int = signal.SIGTERM, timeout: float = 15.0) -> int | None:
        node = self.nodes.get(node_id)
        if node is None or not node.alive:
            return None if node is None else node.proc.returncode
        try:
            node.proc.send_signal(sig)
            return node.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            node.proc.kill()
            return node.proc.wait(5)

    def pause(self, node_id: int) -> None:
        self.nodes[node_id].proc.send_signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.nodes[node_id].proc.send_signal(signal.SIGCONT)

    def close(self) -> None:
        for node_id, node in list(self.nodes.items()):
            if node.alive:
                node.proc.send_signal(signal.SIGCONT)
                self.stop_node(node_id)

    def __enter__(self) -> CoordinatorNodes:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def coordinator_nodes_fixture(count: int = 1, **options):
    """A pytest fixture (function scope) starting `count` nodes on the test's fresh ZooKeeper chroot.

    coordinator_nodes = coordinator_nodes_fixture(count=2)     # in a conftest.py or test module
    def test_x(coordinator_nodes): ...
    """
    import pytest

    @pytest.fixture
    def coordinator_nodes(zk_connect):
        with CoordinatorNodes(zk_connect, count=count, **options) as nodes:
            yield nodes

    return coordinator_nodes
