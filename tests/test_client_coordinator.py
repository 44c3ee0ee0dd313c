"""The coordinator client against real coordinator node processes on real ZooKeeper."""

from __future__ import annotations

import threading
import time

import pytest

from coordinator.client import CoordinatorMember
from core.errors import CommitFailed
from core.types import OffsetAndMetadata
from core.types import TopicPartition as TP
from experiments.coordinator_nodes import CoordinatorNodes
from topics.registry import create_topic

FAST = dict(
    session_timeout_ms=1500, heartbeat_interval_ms=100, retry_backoff_ms=50, request_timeout_ms=10_000
)


@pytest.fixture
def nodes(zk_connect):
    with CoordinatorNodes(zk_connect, count=1) as n:
        yield n


class Recorder:
    """A listener that records every callback in order."""

    def __init__(self):
        self.events: list[tuple[str, frozenset]] = []
        self.lock = threading.Lock()

    def _add(self, what, tps):
        with self.lock:
            self.events.append((what, frozenset(tps)))

    def on_partitions_revoked(self, tps):
        self._add("revoked", tps)

    def on_partitions_assigned(self, tps):
        self._add("assigned", tps)

    def on_partitions_lost(self, tps):
        self._add("lost", tps)


def member(zk, nodes, group="g", topics=("t",), **kw):
    opts = {**FAST, **kw}
    return CoordinatorMember(group, list(topics), zk=zk, bootstrap=nodes.bootstrap, **opts)


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def all_stable(members, n_partitions):
    owned = [m.assignment() for m in members]
    gens = {m.generation for m in members}
    union = set().union(*owned)
    return (
        len(gens) == 1
        and -1 not in gens
        and sum(len(o) for o in owned) == n_partitions
        and len(union) == n_partitions
    )


def test_three_members_split_the_partitions_and_commit(zk, nodes):
    create_topic(zk, "t", partitions=6)
    members = [member(zk, nodes) for _ in range(3)]
    for m in members:
        m.start()
    try:
        wait_for(lambda: all_stable(members, 6), what="a stable group of three")
        assert all(len(m.assignment()) == 2 for m in members)
        m0 = members[0]
        tp = next(iter(m0.assignment()))
        m0.commit({tp: OffsetAndMetadata(42, "x")}, m0.generation)
        assert members[1].committed([tp]) == {tp: 42}
        with pytest.raises(CommitFailed):
            m0.commit({tp: 43}, m0.generation - 1)
    finally:
        for m in members:
            m.close()


def test_listener_order_eager(zk, nodes):
    create_topic(zk, "t", partitions=4)
    rec = Recorder()
    a = member(zk, nodes, listener=rec)
    a.start()
    wait_for(lambda: len(a.assignment()) == 4, what="a owns everything")
    b = member(zk, nodes)
    b.start()
    try:
        wait_for(lambda: all_stable([a, b], 4), what="two members")
        names = [e[0] for e in rec.events]
        assert names == ["assigned", "revoked", "assigned"], (rec.events, a.stats, b.stats)
        assert rec.events[1][1] == frozenset(TP("t", p) for p in range(4))  # eager: everything
    finally:
        b.close()
        a.close()
    assert rec.events[-1][0] == "revoked"
