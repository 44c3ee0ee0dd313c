"""Scheme two's core across a shard reload: a join phase of the unloaded group must not survive it.

The node stops ticking while ZooKeeper is away; when it then unloads the shard, the join timer that
fell due meanwhile fires first (in the core's `_begin`) and completes a generation with the one
member that had rejoined. Seen in the follower-partition experiment: the group, loaded again from
ZooKeeper one generation earlier, reached that generation number again and every member was
assigned nothing, for good.
"""

from __future__ import annotations

from coordinator.assignors.consumer_protocol import partitions_of
from coordinator.group.context import CoordinatorConfig
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.messages import Respond, Write
from coordinator.server_side.assigned import ServerAssignedCoordinator, WatchTopics
from coordinator.wire.schema import (
    SERVER_HEARTBEAT,
    SERVER_JOIN_GROUP,
    ServerHeartbeatRequest,
    ServerJoinGroupRequest,
)

SESSION_MS = 1000
PARTITIONS = 4


class Node:
    """The core with every write succeeding at once and topic `t` of 4 partitions."""

    def __init__(self) -> None:
        config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100)
        self.core = ServerAssignedCoordinator(GroupCoordinator(config))
        self.now = 1_000
        self.answers: dict[str, object] = {}

    def run(self, outputs) -> None:
        for out in outputs:
            if isinstance(out, Respond):
                self.answers[out.request_token] = out.body
            elif isinstance(out, WatchTopics):
                self.run(self.core.topics_changed(dict.fromkeys(out.topics, PARTITIONS), self.now))
            elif isinstance(out, Write) and out.token is not None:
                self.run(self.core.persisted(out.token, True, self.now))

    def join(self, token: str, consumer_id: str = "") -> None:
        self.answers.pop(token, None)
        body = ServerJoinGroupRequest(
            group_id="g",
            consumer_id=consumer_id,
            session_timeout_ms=SESSION_MS,
            topics=["t"],
            strategy="range",
        )
        self.run(self.core.handle(SERVER_JOIN_GROUP, body, self.now, client_id=token, request_token=token))

    def beat(self, token: str, generation: int, consumer_id: str) -> int:
        self.answers.pop(token, None)
        body = ServerHeartbeatRequest(group_id="g", generation_id=generation, consumer_id=consumer_id)
        self.run(self.core.handle(SERVER_HEARTBEAT, body, self.now, client_id=token, request_token=token))
        return self.answers[token].error_code


def test_a_generation_completed_while_unloading_is_not_handed_out_after_the_reload():
    node = Node()
    node.join("a")
    a = node.answers["a"].consumer_id
    node.join("b")  # parked: a must rejoin
    assert node.beat("a-beat", 1, a) != 0
    node.join("a", a)
    b = node.answers["b"].consumer_id
    assert node.answers["a"].generation_id == node.answers["b"].generation_id == 2
    stored = node.core.snapshot("g")  # generation 2 with a and b, as ZooKeeper has it

    node.join("c")  # a rebalance: a and b do not rejoin (their node is cut off from ZooKeeper)
    node.now += 3 * SESSION_MS  # the join timer falls due while the node cannot tick
    node.run(node.core.unload_group("g", node.now))  # ZooKeeper was away too long: give the shard up

    node.run(node.core.load_group(stored, node.now))  # claimed again: generation 2 from ZooKeeper
    for token, member in (("c", ""), ("a", a), ("b", b)):
        node.join(token, member)
    answers = [node.answers[t] for t in ("a", "b", "c")]
    assert {x.error_code for x in answers} == {0}
    assert {x.generation_id for x in answers} == {3}
    held = [partitions_of(x.assignment) for x in answers]
    assert all(held), held  # every member got partitions (it was nothing, for every member)
    assert sorted(tp.partition for tps in held for tp in tps) == list(range(PARTITIONS))
