"""An offset commit whose ZooKeeper write landed although the coordinator node could not learn it.

The node's ZooKeeper session is on a follower of the 3-node ensemble that stops hearing its peers
while they still hear it (the first half of a partition: the follower-partition experiment's
iptables rules, one command after the other). The commit's transaction goes out through the
follower, the leader commits it with the other follower, and the answer never comes back: the
node's connection to ZooKeeper is lost with the write unanswered, and it answers
REQUEST_TIMED_OUT. Nothing may then be answered as if the write had not landed:

* the member sends the same commit again (Kafka's consumer retries REQUEST_TIMED_OUT) instead of
  delivering the batch again — a second delivery's commit made it an output committed twice;
* the node reads the group's offsets back from ZooKeeper before it answers for them again.
"""

from __future__ import annotations

import threading
import time
import uuid
from contextlib import contextmanager

import pytest

from coordinator.layout import offset_path
from coordinator.node.process import CoordinatorNodes
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from core.types import TopicPartition
from core.zk import connect
from experiments.split_brain import until
from pipeline.consumer import Consumer
from topics.log import Log
from topics.registry import create_topic

pytestmark = pytest.mark.ensemble


@contextmanager
def node_on_a_follower(ensemble, tmp_path):
    """(admin client on the leader, its connect string, the node on a follower, the follower, a log
    with topic `t`: one partition of 10 records)."""
    leader, follower = ensemble.leader(), ensemble.followers()[0]
    chroot = f"/t-commit-outcome-{uuid.uuid4().hex[:8]}"
    admin = connect(leader.connect_string + chroot)
    log = Log(tmp_path)
    create_topic(admin, "t", 1)
    log.create("t", 1)
    log.produce("t", [(b"k", b"v")] * 10, partition=0)
    try:
        with CoordinatorNodes(
            follower.connect_string + chroot, count=1, shards=1, zk_session_timeout_ms=4000
        ) as nodes:
            yield admin, leader.connect_string + chroot, nodes, follower, log
    finally:
        admin.stop()
        admin.close()


def write_lands_unanswered(ensemble, follower, node, request: threading.Thread) -> None:
    """Run `request` (a commit) while `follower` hears none of its peers, until the node lost its
    ZooKeeper connection with the write unanswered; then heal the follower."""
    for peer in ensemble.servers.values():
        if peer is not follower:
            follower.netns("iptables", "-A", "INPUT", "-s", peer.ip(), "-j", "DROP")
    try:
        request.start()
        until(
            lambda: any("ZooKeeper did not answer the write" in line for line in node.output),
            30,
            "the node's write to be left unanswered",
        )
    finally:
        follower.netns("iptables", "-F")


def test_the_member_commits_again_instead_of_delivering_the_batch_again(ensemble, tmp_path):
    with node_on_a_follower(ensemble, tmp_path) as (admin, zk, nodes, follower, log):
        tp = TopicPartition("t", 0)
        consumer = Consumer(
            "g",
            ["t"],
            zk=zk,
            log=log,
            bootstrap=nodes.bootstrap,
            rebalancer="server",
            session_timeout_ms=3000,
            heartbeat_interval_ms=300,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            membership_options={"retry_backoff_ms": 50},
        )
        delivered: list[int] = []

        def poll(seconds: float) -> None:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not (got := consumer.poll_batches(timeout_ms=100)):
                pass
            if got:
                delivered.extend(got[tp].column("offset").to_pylist())

        outcome: dict = {}

        def commit() -> None:
            try:
                consumer.commit()
                outcome["ok"] = True
            except Exception as exc:  # what the member reports is asserted below
                outcome["error"] = f"{type(exc).__name__}: {exc}"

        try:
            poll(20)
            assert delivered == list(range(10))
            committer = threading.Thread(target=commit)
            write_lands_unanswered(ensemble, follower, nodes.nodes[1], committer)
            committer.join(60)
            assert not committer.is_alive()
            assert b'"offset":10' in admin.get(offset_path("g", "t", 0))[0]  # the write had landed
            poll(3)
            assert delivered == list(range(10)), f"delivered again after {outcome}"
            assert outcome == {"ok": True}
            assert consumer.committed(tp) == 10
        finally:
            consumer.close(autocommit=False)


def test_the_node_answers_for_the_offsets_as_zookeeper_holds_them(ensemble, tmp_path):
    with node_on_a_follower(ensemble, tmp_path) as (admin, _, nodes, follower, _log):
        node = nodes.nodes[1]
        offset = {"partition_index": 0, "committed_offset": 10, "committed_metadata": ""}
        commit = {
            "group_id": "g",
            "generation_id": -1,  # a commit outside any generation, for a group with no members
            "member_id": "",
            "group_instance_id": None,
            "topics": [{"name": "t", "partitions": [offset]}],
        }
        answer: dict = {}
        with node.client(timeout=60) as client:
            committer = threading.Thread(
                target=lambda: answer.update(client.request(wire.OFFSET_COMMIT, commit, timeout=60))
            )
            write_lands_unanswered(ensemble, follower, node, committer)
            committer.join(60)
        assert [p["error_code"] for t in answer["topics"] for p in t["partitions"]] == [E.REQUEST_TIMED_OUT]
        assert b'"offset":10' in admin.get(offset_path("g", "t", 0))[0]  # it had landed all the same

        def committed() -> int | None:
            fetch = {"group_id": "g", "topics": [{"name": "t", "partition_indexes": [0]}]}
            with node.client() as client:
                resp = client.request(wire.OFFSET_FETCH, fetch)
            parts = [p for t in resp["topics"] for p in t["partitions"]]
            if resp["error_code"] or any(p["error_code"] for p in parts):
                return None  # the node is still away or loading: ask again
            return parts[0]["committed_offset"]

        until(lambda: committed() is not None, 30, "the node to answer OffsetFetch again")
        assert committed() == 10
