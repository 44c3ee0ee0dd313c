"""Members follow the cluster: every coordinator node replaced by one at a new address under a
running group of each coordinator scheme, which keeps consuming (DescribeCluster, docs/protocol.md).

The pure part (`KnownNodes`) first, then DescribeCluster on real node processes, then the groups.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from coordinator.member.nodes import KnownNodes
from coordinator.node.process import CoordinatorNodes
from coordinator.wire import codec as P
from core.types import TopicPartition as TP
from pipeline.consumer import Consumer
from tests.commit_loop import CommitLoop
from tests.inspect_helpers import wait_for
from topics.log import Log
from topics.registry import create_topic

# -- KnownNodes -----------------------------------------------------------------------------------


def test_learned_nodes_come_first_and_bootstrap_stays_as_the_last_resort():
    nodes = KnownNodes([("b", 1), ("b", 2)], max_age_s=10.0, rng=random.Random(1))
    assert nodes.due(0.0)
    assert sorted(nodes.candidates()) == [("b", 1), ("b", 2)]
    nodes.learn([("n", 1), ("n", 2), ("b", 2)], now=5.0)
    got = nodes.candidates([("z", 1), ("n", 1)])
    assert sorted(got[:3]) == [("b", 2), ("n", 1), ("n", 2)]  # learned (one is also a bootstrap)
    assert got[3:] == [("z", 1), ("b", 1)]  # then ZooKeeper's, then the rest of bootstrap
    assert not nodes.due(14.9) and nodes.due(15.0)


def test_each_answer_replaces_the_learned_nodes_and_an_empty_one_changes_nothing():
    nodes = KnownNodes([("b", 1)], max_age_s=1.0)
    nodes.learn([("n", 1), ("n", 2)], now=0.0)
    nodes.learn([("n", 3)], now=1.0)
    assert nodes.known() == ["n:3", "b:1"]
    nodes.learn([], now=2.0)
    assert nodes.known() == ["n:3", "b:1"] and not nodes.due(2.5)


# -- DescribeCluster on real nodes ----------------------------------------------------------------


def _described(node) -> dict[int, str]:
    with node.client() as c:
        resp = c.request(P.DESCRIBE_CLUSTER, {})
    assert resp["error_code"] == 0 and resp["controller_id"] == node.node_id
    return {b["broker_id"]: f"{b['host']}:{b['port']}" for b in resp["brokers"]}


def test_describe_cluster_names_every_live_node_and_follows_a_replacement(zk_connect):
    with CoordinatorNodes(zk_connect, count=2) as nodes:
        one, two = nodes.nodes[1], nodes.nodes[2]
        want = {1: one.address, 2: two.address}
        wait_for(lambda: _described(one) == want, 10, "node 1 to see both nodes")
        assert _described(two) == want
        nodes.stop_node(2)
        wait_for(lambda: _described(one) == {1: one.address}, 10, "node 1 to see node 2 gone")
        new = nodes.start_node(2, new_address=True)
        assert new.address != two.address
        wait_for(
            lambda: _described(one) == {1: one.address, 2: new.address},
            10,
            "node 1 to see node 2's new address",
        )
        with one.client() as c:
            versions = {k["api_key"] for k in c.request(P.API_VERSIONS, {})["api_keys"]}
        assert P.DESCRIBE_CLUSTER in versions


def test_a_restarted_node_keeps_its_address(zk_connect):
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        before = nodes.nodes[1].address
        nodes.stop_node(1)
        assert nodes.start_node(1).address == before


# -- groups under node replacement -----------------------------------------------------------------

PARTITIONS = 4
SCHEMES = {
    "two": dict(rebalancer="server"),
    "two-incremental": dict(rebalancer="server", incremental=True),
    "three": dict(rebalancer="coordinator"),
}


@pytest.mark.parametrize("scheme", list(SCHEMES))
def test_every_node_replaced_at_a_new_address_the_group_keeps_consuming(zk, zk_connect, tmp_path, scheme):
    create_topic(zk, "t", partitions=PARTITIONS)
    log = Log(tmp_path)
    log.create("t", PARTITIONS)

    def produce(n: int) -> int:
        for p in range(PARTITIONS):
            log.produce("t", [(b"k", b"v")] * n, partition=p)
        return sum(log.latest(TP("t", p)) for p in range(PARTITIONS))

    with CoordinatorNodes(zk_connect, count=2) as nodes:
        first = {nodes.nodes[n].address for n in nodes.nodes}
        delivered: list = []
        loops = [
            CommitLoop(
                Consumer(
                    "g",
                    ["t"],
                    zk=zk_connect,
                    bootstrap=nodes.bootstrap,  # the only addresses the members are given
                    log=log,
                    session_timeout_ms=3_000,
                    heartbeat_interval_ms=100,
                    auto_offset_reset="earliest",
                    enable_auto_commit=False,
                    max_poll_records=20,
                    membership_options={"retry_backoff_ms": 50, "metadata_max_age_ms": 200},
                    **SCHEMES[scheme],
                ),
                delivered,
                f"m{i}",
            )
            for i in range(2)
        ]
        for lp in loops:
            lp.start()
        try:
            total = produce(50)
            wait_for(lambda: len(set(delivered)) >= total, 60, "the group consuming")
            for node_id in sorted(nodes.nodes):
                nodes.stop_node(node_id)
                new = nodes.start_node(node_id, new_address=True)
                assert new.address not in first
                wait_for(
                    lambda new=new: all(new.address in member(lp).known_nodes for lp in loops),
                    30,
                    f"every member to learn node {node_id}'s new address {new.address}",
                )
            now = {n.address for n in nodes.nodes.values()}
            assert not now & first, "every node has a new address"
            total = produce(50)
            wait_for(lambda: len(set(delivered)) >= total, 60, "the group consuming on the new nodes")
        finally:
            for lp in loops:
                lp.stop()
    counts = Counter(delivered)
    assert not [k for k, n in counts.items() if n > 1], "a record committed twice"
    assert set(counts) == {(TP("t", p), o) for p in range(PARTITIONS) for o in range(100)}


def member(lp: CommitLoop):
    m = lp.consumer._membership
    assert m is not None
    return m
