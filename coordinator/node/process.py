"""Coordinator nodes as child processes (`groupshift coordinator serve`): tests, benchmarks, experiments.

    with NodeProcess.start(zk, node_id=1, log_path=tmp / "n1.log") as node:
        with node.client() as c:                     # a WireClient on the node's port
            ...

    with CoordinatorNodes(zk, count=2) as nodes:     # several nodes on one ZooKeeper
        member = CoordinatorMember("g", ["t"], bootstrap=nodes.bootstrap, zk=zk)
        nodes.kill(1)                                # SIGKILL: another node takes its shards over
        nodes.start_node(1)                          # the same node id again, on its old address
        nodes.start_node(1, new_address=True)        # ... or replaced by a node on a new port

Each node is its own process (never an in-process server), started as
`python -m cli coordinator serve --zk ZK --listen 127.0.0.1:0 --node-id N ...`, and up once it
prints `listening on HOST:PORT`. Its stdout and stderr are kept (the last 400 lines in `output`,
all of them in `log_path` when given). Broker options are keywords (`group_min_session_timeout_ms=100`
becomes `--group-min-session-timeout-ms 100`, `shard_handoff=False` becomes `--no-shard-handoff`)
or raw arguments.
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
from pathlib import Path
from typing import Any

from coordinator.member.wire_client import WireClient
from core.errors import GroupshiftError
from core.lifeline import lifeline_env

REPO = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"listening on (\S+):(\d+)")
KAFKA_LISTENING = re.compile(r"^kafka listening on (\S+):(\d+)")
# Broker settings that make small test groups fast: short sessions allowed, no initial delay, and
# 4 shards instead of 50 (a node claims, watches and loads each at start: ~4x faster to listen).
# A test that computes a group's shard passes the count it uses (`shards=50`).
TEST_DEFAULTS: dict[str, Any] = {
    "group_min_session_timeout_ms": 100,
    "group_initial_rebalance_delay_ms": 0,
    "shards": 4,
}


class CoordinatorNodeError(GroupshiftError):
    """A coordinator node process did not start; the message carries its output."""


def serve_command(zk: str, node_id: int, options: dict, *args: str, listen: str = "127.0.0.1:0") -> list[str]:
    cmd = [sys.executable, "-m", "cli", "coordinator", "serve", "--zk", zk, "--listen", listen]
    cmd += ["--node-id", str(node_id)]
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            cmd.append(flag)
        elif value is False:
            cmd.append("--no-" + key.replace("_", "-"))
        else:
            cmd += [flag, str(value)]
    return [*cmd, *args]


class NodeProcess:
    """One node process; `host`/`port` come from its `listening on` line."""

    def __init__(self, node_id: int, proc: subprocess.Popen, log_path: Path | None = None):
        self.node_id = node_id
        self.proc = proc
        self.log_path = log_path
        self.host = ""
        self.port = 0
        self.kafka_host = ""
        self.kafka_port = 0  # with --kafka-listen: from its `kafka listening on` line
        self._wants_kafka = "--kafka-listen" in proc.args if isinstance(proc.args, list) else False
        self.output: deque[str] = deque(maxlen=400)
        self._log = open(log_path, "a") if log_path else None  # noqa: SIM115 - closed by the pump
        threading.Thread(target=self._pump, daemon=True, name=f"coordinator-{node_id}-out").start()

    @classmethod
    def spawn(
        cls,
        zk: str,
        node_id: int,
        *args: str,
        listen: str = "127.0.0.1:0",
        log_path: Path | None = None,
        **options: Any,
    ) -> NodeProcess:
        """Start the process without waiting for it to listen (see `wait_listening`)."""
        env = lifeline_env(dict(os.environ, PYTHONUNBUFFERED="1"))  # it stops if this process is killed
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        proc = subprocess.Popen(
            serve_command(zk, node_id, options, *args, listen=listen),
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
        )
        return cls(node_id, proc, log_path)

    @classmethod
    def start(
        cls,
        zk: str,
        node_id: int,
        *args: str,
        listen: str = "127.0.0.1:0",
        log_path: Path | None = None,
        timeout: float = 30.0,
        **options: Any,
    ) -> NodeProcess:
        """Start the process and wait until it listens; `CoordinatorNodeError` if it does not."""
        return cls.spawn(zk, node_id, *args, listen=listen, log_path=log_path, **options).wait_listening(
            timeout
        )

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        try:
            for line in self.proc.stdout:
                self.output.append(line.rstrip("\n"))
                if self._log is not None:
                    self._log.write(line)
                    self._log.flush()
                k = KAFKA_LISTENING.search(line)
                if k:
                    self.kafka_host, self.kafka_port = k.group(1), int(k.group(2))
                elif not self.port:
                    m = LISTENING.search(line)
                    if m:
                        self.host, self.port = m.group(1), int(m.group(2))
        except (OSError, ValueError):
            pass
        finally:
            if self._log is not None:
                self._log.close()

    def wait_listening(self, timeout: float = 30.0) -> NodeProcess:
        deadline = time.monotonic() + timeout
        while not self.port or (self._wants_kafka and not self.kafka_port):
            if not self.alive or time.monotonic() > deadline:
                code = self.proc.poll()
                self.kill()
                tail = "\n".join(list(self.output)[-40:])
                raise CoordinatorNodeError(
                    f"coordinator node {self.node_id} did not print 'listening on' within "
                    f"{timeout:g}s (exit {code}); output:\n{tail}"
                )
            time.sleep(0.02)
        return self

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def bootstrap(self) -> str:
        return self.address

    @property
    def kafka_bootstrap(self) -> str:
        """`host:port` of the Kafka listener (started with `kafka_listen="127.0.0.1:0"`)."""
        return f"{self.kafka_host}:{self.kafka_port}"

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def client(self, client_id: str = "wire-client", timeout: float = 10.0) -> WireClient:
        return WireClient(self.host, self.port, client_id, timeout)

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def signal(self, sig: int) -> None:
        if self.alive:
            self.proc.send_signal(sig)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        self.signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: the node dies without releasing anything (its ZooKeeper session must expire)."""
        self.signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self, timeout: float = 15.0) -> int:
        """SIGCONT (in case it is paused), SIGTERM, and SIGKILL if it does not exit in `timeout`."""
        self.signal(signal.SIGCONT)
        try:
            return self.terminate(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.proc.returncode

    def __enter__(self) -> NodeProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


class CoordinatorNodes:
    """Node processes `1..count` sharing one ZooKeeper (see the module docstring)."""

    def __init__(
        self,
        zk_connect: str,
        count: int = 1,
        start_timeout: float = 30.0,
        log_dir: Path | None = None,
        **options: Any,
    ):
        self.zk_connect = zk_connect
        self.log_dir = log_dir  # each node's whole output in `node-N.log` there (appended on a restart)
        self.count = count
        self.start_timeout = start_timeout
        self.options = {**TEST_DEFAULTS, **options}
        self.nodes: dict[int, NodeProcess] = {}
        self._addresses: dict[int, tuple[str, str | None]] = {}  # node id -> (listen, kafka listen)

    def start(self) -> CoordinatorNodes:
        try:
            for node_id in range(1, self.count + 1):
                self.start_node(node_id, wait=False)
            for node in self.nodes.values():
                node.wait_listening(self.start_timeout)
        except BaseException:
            self.close()
            raise
        return self

    def start_node(self, node_id: int, wait: bool = True, new_address: bool = False) -> NodeProcess:
        """Start node `node_id`; a node that ran before comes back on its previous address (and
        Kafka listener address), as a restarted server of a real deployment does, unless
        `new_address` (a replacement on fresh ports: members must learn of it from the cluster)."""
        old = self.nodes.get(node_id)
        if old is not None and old.alive:
            raise CoordinatorNodeError(f"coordinator node {node_id} is already running")
        if old is not None and old.port:  # the last address it listened on (a failed start has none)
            self._addresses[node_id] = (old.address, old.kafka_bootstrap if old.kafka_port else None)
        if new_address:
            self._addresses.pop(node_id, None)
        options = dict(self.options)
        listen, kafka = self._addresses.get(node_id, ("127.0.0.1:0", None))
        if kafka is not None and "kafka_listen" in options:
            protocol, sep, _ = str(options["kafka_listen"]).rpartition("://")  # SSL:// stays SSL://
            options["kafka_listen"] = f"{protocol}{sep}{kafka}"
        log_path = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log_path = self.log_dir / f"node-{node_id}.log"
        node = NodeProcess.spawn(self.zk_connect, node_id, listen=listen, log_path=log_path, **options)
        self.nodes[node_id] = node
        if wait:
            node.wait_listening(self.start_timeout)
        return node

    @property
    def bootstrap(self) -> str:
        """`host:port,...` of the running nodes."""
        return ",".join(n.address for n in self.nodes.values() if n.alive and n.port)

    @property
    def kafka_bootstrap(self) -> str:
        """`host:port,...` of the running nodes' Kafka listeners (started with `kafka_listen`)."""
        return ",".join(n.kafka_bootstrap for n in self.nodes.values() if n.alive and n.kafka_port)

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
            node.kill()
            return node.proc.returncode

    def pause(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        self.nodes[node_id].signal(signal.SIGCONT)

    def close(self) -> None:
        for node in list(self.nodes.values()):
            node.stop()

    def __enter__(self) -> CoordinatorNodes:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()


def coordinator_nodes_fixture(count: int = 1, **options: Any):
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
