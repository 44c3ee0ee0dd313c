"""A 3-node ZooKeeper ensemble in Docker, with partition faults between its peers.

    with ZkEnsemble.start() as ens:                     # 3 servers on their own docker network
        leader = ens.leader(); follower = ens.followers()[0]
        ens.partition(follower)                         # iptables in its netns: cut from its peers
        ens.heal(follower)

Its servers are `testing.zookeeper.ZkServer`s; the network is named and labelled like them, so
`testing.leftovers.sweep_leftovers()` removes it once its owner is gone.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid

from core.extras import require
from testing.zookeeper import OWNER_LABEL, PREFIX, ClusterError, ZkServer, ensure_image


class ZkEnsemble:
    """Three servers `zk1..zk3` on their own docker network, with partition faults between peers."""

    def __init__(self, tick_ms: int = 1000, labels: dict[str, str] | None = None):
        Network = require("testcontainers.core.network", "experiments").Network

        tag = uuid.uuid4().hex[:8]
        labels = {OWNER_LABEL: str(os.getpid()), "groupshift.test": "1", **(labels or {})}
        self.network = Network(docker_network_kw={"labels": labels})
        self.network.name = f"{PREFIX}net-{tag}"
        self.tick_ms = tick_ms
        self.servers = {
            i: ZkServer(
                f"{PREFIX}zk{i}-{tag}",
                tick_ms=tick_ms,
                myid=i,
                servers=(1, 2, 3),
                network=self.network,
                labels=labels,
            )
            for i in (1, 2, 3)
        }
        self._partitioned: set[int] = set()

    @classmethod
    def start(
        cls, tick_ms: int = 1000, timeout: float = 60.0, labels: dict[str, str] | None = None
    ) -> ZkEnsemble:
        """Start the three servers; on any failure or interruption (Ctrl-C, SIGTERM turned into
        KeyboardInterrupt) every container and the network are removed before it propagates."""
        ensure_image()
        ens = cls(tick_ms, labels=labels)
        try:
            ens.network.create()
        except Exception as exc:
            raise ClusterError(f"create docker network {ens.network.name}: {exc}") from exc
        errors: list[Exception] = []

        def run(server: ZkServer) -> None:
            try:
                server._run()
            except Exception as exc:
                errors.append(exc)

        threads = [threading.Thread(target=run, args=(s,)) for s in ens.servers.values()]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            if errors:
                raise errors[0]
            ens.wait_quorum(timeout)
        except BaseException:
            for t in threads:  # a container a thread is still creating must exist before removal
                if t.is_alive():
                    t.join()
            ens.remove()
            raise
        return ens

    def wait_quorum(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if sorted(s.mode() for s in self.servers.values()) == ["follower", "follower", "leader"]:
                return
            time.sleep(0.1)
        raise ClusterError(f"the ensemble {self.network.name} formed no quorum within {timeout:g}s")

    @property
    def connect_string(self) -> str:
        return ",".join(s.connect_string for s in self.servers.values())

    def leader(self) -> ZkServer:
        for s in self.servers.values():
            if s.mode() == "leader":
                return s
        raise ClusterError("the ensemble has no leader right now")

    def followers(self) -> list[ZkServer]:
        return [s for s in self.servers.values() if s.mode() == "follower"]

    def partition(self, server: ZkServer) -> None:
        """Cut `server` off from its peers (clients still reach it): it serves stale reads for
        about syncLimit x tickTime, then stops serving."""
        for other in self.servers.values():
            if other is not server:
                ip = other.ip()
                server.netns("iptables", "-A", "INPUT", "-s", ip, "-j", "DROP")
                server.netns("iptables", "-A", "OUTPUT", "-d", ip, "-j", "DROP")
        self._partitioned.add(server.myid)

    def heal(self, server: ZkServer | None = None) -> None:
        """Remove every iptables rule from `server` (or every partitioned server)."""
        targets = [server] if server else [self.servers[i] for i in self._partitioned]
        for s in targets:
            s.netns("iptables", "-F")
            self._partitioned.discard(s.myid)

    def remove(self) -> None:
        for s in self.servers.values():
            s.remove()
        try:
            self.network.remove()
        except Exception:
            subprocess.run(["docker", "network", "rm", self.network.name], capture_output=True)

    def __enter__(self) -> ZkEnsemble:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()
