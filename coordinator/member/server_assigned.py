"""Scheme two's draft form on the member's side: the coordinator assigns (docs/scheme-two.md).

`ServerAssigned` fills in the join and heartbeat hooks of a `CoordinatorMember` for Kafka 0.9's
redesign draft, as `CoordinatorMember(..., server_assigned=True)` builds it
(`consumer_member.ServerAssignedMember`): the member names one strategy the coordinator runs
(`SERVER_STRATEGIES`) and sends ServerJoinGroup, whose one answer carries its consumer id, the
generation and its partitions (the coordinator assigns; the member never reads ZooKeeper);
heartbeats are ServerHeartbeat, and ILLEGAL_GENERATION there means "rebalance": revoke (commit),
then rejoin with the same consumer id. Offsets, LeaveGroup and FindCoordinator are the same as
scheme three's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from coordinator.assignors.base import Assignor
from coordinator.assignors.consumer_protocol import SERVER_STRATEGIES, by_topic, partitions_of
from coordinator.member.classic import ClassicProtocol
from coordinator.member.connection import Connection
from coordinator.member.group_member import InFlight, JoinStep
from coordinator.member.state import NO_GENERATION, Generation, MemberState
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    Message,
    ServerHeartbeatRequest,
    ServerJoinGroupRequest,
    ServerJoinGroupResponse,
)
from core.errors import GroupshiftError

log = logging.getLogger(__name__)


def _not_the_leader(topic: str) -> int | None:
    raise AssertionError("a server-assigned member never assigns")


class ServerAssigned(ClassicProtocol):
    """The draft's join and heartbeat, for a `CoordinatorMember` (see the module docstring)."""

    server_assigned = True
    topics: list[str]
    assignors: list[str]

    def validate_assignors(self, by_name: Mapping[str, Assignor]) -> None:
        if len(by_name) != 1 or next(iter(by_name)) not in SERVER_STRATEGIES:
            raise GroupshiftError(
                f"a server-assigned member names one strategy the coordinator runs "
                f"({', '.join(SERVER_STRATEGIES)}), not {list(by_name)}"
            )

    def default_partitions_for(self) -> Callable[[str], int | None] | None:
        return _not_the_leader  # the coordinator assigns

    def join_request(self, gen: Generation) -> tuple[int, Message]:
        """ServerJoinGroup: the subscription, the one strategy, and the partitions it had."""
        with self._cv:
            previous = set(self._last_assignment)
        body = ServerJoinGroupRequest(
            group_id=self.group_id,
            consumer_id=gen.member_id,
            session_timeout_ms=self.session_timeout_ms,
            topics=list(self.topics),
            strategy=self.assignors[0],
            owned=by_topic(previous),
        )
        return wire.SERVER_JOIN_GROUP, body

    def on_join_answer(self, conn: Connection, in_flight: InFlight, resp: Any) -> JoinStep:
        if in_flight.api != wire.SERVER_JOIN_GROUP:
            return super().on_join_answer(conn, in_flight, resp)
        return JoinStep.STABLE if self._on_server_join_response(in_flight, resp) else JoinStep.STOP

    def heartbeat_request(self, gen: Generation) -> tuple[int, Message]:
        body = ServerHeartbeatRequest(
            group_id=self.group_id, generation_id=gen.generation_id, consumer_id=gen.member_id
        )
        return wire.SERVER_HEARTBEAT, body

    def heartbeat_error(self, code: int) -> int:
        # the draft's "rebalance": revoke, commit, rejoin
        return E.REBALANCE_IN_PROGRESS if code == E.ILLEGAL_GENERATION else code

    def _on_server_join_response(self, in_flight: InFlight, resp: ServerJoinGroupResponse) -> bool:
        """Scheme two's one answer: consumer id, generation and partitions. False when the join loop
        must stop (look the coordinator up, fatal error)."""
        code = resp.error_code
        if code == E.REBALANCE_IN_PROGRESS and resp.consumer_id:
            # The coordinator admitted us (it took the MEMBER_ID_REQUIRED round trip for us) and
            # started another rebalance before answering: rejoin under that id, or it waits for
            # the member it admitted until the session timeout and we join as a stranger.
            with self._cv:
                if self._generation == in_flight.generation and not self._generation.member_id:
                    self._generation = Generation(NO_GENERATION, resp.consumer_id, None)
        if code:
            return self._handle_join_error("ServerJoinGroup", code)
        assigned = partitions_of(resp.assignment)
        with self._cv:
            if self._closed:
                return False
            if self.state != MemberState.PREPARING_REBALANCE or self._generation != in_flight.generation:
                log.info(
                    "group %s: ServerJoinGroup answered after the member left; joining again", self.group_id
                )
                self._rejoin_needed = True
                return True
            gen = self._generation = Generation(resp.generation_id, resp.consumer_id, resp.strategy)
            self._become_stable_locked(gen)
        self.on_join_complete(gen, assigned)
        return True
