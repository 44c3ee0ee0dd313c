"""The coordinator nodes a member knows, kept current from the cluster itself (pure: no I/O).

A Kafka client is given bootstrap brokers once and then follows the cluster from Metadata; a
member does the same with DescribeCluster (docs/protocol.md). It asks the node that answered its
FindCoordinator, and every `metadata_max_age_ms` the coordinator it is connected to, and uses the
answer as its list of nodes. So a group outlives every node it was started with being replaced by
nodes at new addresses, as long as one node it learned of is reachable when it next looks.

    nodes = KnownNodes([("10.0.0.1", 9000)], max_age_s=30.0)
    nodes.candidates(zk_nodes)             # learned nodes, then ZooKeeper's, then bootstrap
    nodes.learn([("10.0.0.7", 9000), ...], now)
    nodes.due(now)                         # time to ask again
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence

Address = tuple[str, int]
MAX_KNOWN = 1_000  # nodes kept from one answer (a cluster larger than this is not plausible)


class KnownNodes:
    """Bootstrap addresses (always kept: the last resort, as Kafka's re-bootstrap) and the nodes
    learned from the cluster (each answer replaces the previous one)."""

    def __init__(self, bootstrap: Sequence[Address], max_age_s: float, rng: random.Random | None = None):
        self.bootstrap: list[Address] = list(dict.fromkeys(bootstrap))
        self.learned: list[Address] = []
        self.max_age_s = max_age_s
        self.learned_at: float | None = None
        self._rng = rng or random.Random()

    def learn(self, addresses: Iterable[Address], now: float) -> None:
        """Replace the learned nodes with a cluster's answer (an empty answer changes nothing)."""
        fresh = list(dict.fromkeys(addresses))[:MAX_KNOWN]
        if fresh:
            self.learned = fresh
        self.learned_at = now

    def due(self, now: float) -> bool:
        """True when the learned list is older than `max_age_s` (or was never learned)."""
        return self.learned_at is None or now - self.learned_at >= self.max_age_s

    def candidates(self, registered: Iterable[Address] = ()) -> list[Address]:
        """Every node to try, each once: learned, then `registered` (ZooKeeper's registrations, for
        a member that has ZooKeeper), then bootstrap (the last resort), shuffled within each."""
        out: list[Address] = []
        for group in (self.learned, list(registered), self.bootstrap):
            group = [a for a in group if a not in out]
            self._rng.shuffle(group)
            out += group
        return out

    def known(self) -> list[str]:
        """`host:port` of every known node: learned, then bootstrap."""
        return [f"{h}:{p}" for h, p in dict.fromkeys([*self.learned, *self.bootstrap])]
