"""Scheme three's group protocol on the member's side: JoinGroup, then SyncGroup, and Heartbeat.

`ClassicProtocol` fills in `group_member.GroupMember`'s join and heartbeat hooks with Kafka's
classic protocol: JoinGroup (answered with a generation, the leader and, for the leader, every
member's subscription), then SyncGroup (the leader sends the assignment its `perform_assignment`
computed; every member gets its own), and Heartbeat, whose REBALANCE_IN_PROGRESS flags a rejoin
and whose fencing errors (`errors.fences_member`) make the member forget its generation. What the
members exchange — the consumer protocol — is `consumer_member.CoordinatorMember`'s, through the
hooks declared here: `protocol_type()` and `perform_assignment(gen, join)`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from coordinator.assignors.payloads import decode_assignment
from coordinator.member.connection import Connection, ConnectionLost, error_name
from coordinator.member.group_member import GroupMember, InFlight, JoinStep
from coordinator.member.state import NO_GENERATION, Generation, MemberState
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    HeartbeatRequest,
    JoinGroupResponse,
    Message,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)
from core.errors import RebalanceFailed

log = logging.getLogger(__name__)


class ClassicProtocol(GroupMember):
    """A member speaking JoinGroup/SyncGroup/Heartbeat (see the module docstring)."""

    # -- hooks it declares -------------------------------------------------------------------------

    def protocol_type(self) -> str:
        """The protocol type JoinGroup and SyncGroup carry (Kafka's `protocol_type()`)."""
        raise NotImplementedError

    def perform_assignment(
        self, gen: Generation, join: JoinGroupResponse
    ) -> list[SyncGroupAssignment] | None:
        """The assignments this member sends in SyncGroup for generation `gen` (the leader's job;
        none for a follower), or None when no SyncGroup goes out now (the hook retried or failed)."""
        raise NotImplementedError

    # -- GroupMember's hooks -------------------------------------------------------------------------

    def on_join_answer(self, conn: Connection, in_flight: InFlight, resp: Any) -> JoinStep:
        """The join protocol's answer: JoinGroup's (then SyncGroup goes out), then SyncGroup's."""
        if in_flight.api == wire.JOIN_GROUP:
            return JoinStep.AGAIN if self._on_join_response(conn, in_flight, resp) else JoinStep.STOP
        return JoinStep.STABLE if self._on_sync_response(in_flight, resp) else JoinStep.AGAIN

    def heartbeat_request(self, gen: Generation) -> tuple[int, Message]:
        """The heartbeat (API key, body) for `gen`."""
        return (
            wire.HEARTBEAT,
            HeartbeatRequest(
                group_id=self.group_id,
                generation_id=gen.generation_id,
                member_id=gen.member_id,
                group_instance_id=self.group_instance_id,
            ),
        )

    def heartbeat_error(self, code: int) -> int:
        """What a heartbeat's error code means, as Heartbeat's (default: itself)."""
        return code

    def heartbeat(self, conn: Connection, gen: Generation) -> bool:
        """Send one heartbeat for `gen` and act on its answer; True when it was answered without error."""
        api, body = self.heartbeat_request(gen)
        self.stats["heartbeats"] += 1
        try:
            resp = conn.request(
                api, body, max(self.heartbeat_interval_ms / 1000, self.session_timeout_ms / 1000)
            )
        except ConnectionLost as exc:
            self.mark_coordinator_unknown(str(exc))
            return False
        code = self.heartbeat_error(resp.error_code)
        with self._cv:
            if self._generation != gen:
                return False  # answered for a generation we already left behind
            if code in (E.NONE, E.REBALANCE_IN_PROGRESS):
                self._last_heartbeat_ok = time.monotonic()
            if code == E.REBALANCE_IN_PROGRESS:
                # Only a stable member rejoins for it (as Kafka's heartbeat handler): one that has
                # rejoined since this heartbeat went out is in that very rebalance already, and a
                # second rejoin would make the group rebalance once more after it completes.
                if self.state == MemberState.STABLE:
                    self.request_rejoin("heartbeat answered REBALANCE_IN_PROGRESS")
                return False
        if code == E.NONE:
            return True
        if E.fences_member(code):
            self._reset_generation(f"heartbeat answered {error_name(code)}")
        elif E.coordinator_moved(code):
            self.mark_coordinator_unknown(f"heartbeat answered {error_name(code)}")
        elif code == E.GROUP_AUTHORIZATION_FAILED:  # an ACL was removed while the member was in
            self.refused("Heartbeat")
        elif code == E.FENCED_INSTANCE_ID:
            self._fail(
                RebalanceFailed(
                    f"group {self.group_id!r}: another member took over group_instance_id "
                    f"{self.group_instance_id!r}; this one is fenced and stops"
                )
            )
        else:
            log.warning("group %s: heartbeat answered %s", self.group_id, error_name(code))
        return False

    # -- JoinGroup and SyncGroup ---------------------------------------------------------------------

    def _on_join_response(self, conn: Connection, in_flight: InFlight, resp: JoinGroupResponse) -> bool:
        """Phase two's answer: a generation (then the leader assigns and SyncGroup goes out at once)
        or an error. False when the join loop must stop (look the coordinator up, fatal error)."""
        code = resp.error_code
        if code == E.MEMBER_ID_REQUIRED:
            with self._cv:
                self._generation = Generation(NO_GENERATION, resp.member_id, None)
            return True
        if code:
            return self._handle_join_error("JoinGroup", code)
        if resp.protocol_type not in (None, self.protocol_type()):
            self._fail(RebalanceFailed(f"JoinGroup answered protocol type {resp.protocol_type!r}"))
            return False
        with self._cv:
            if self._closed:
                return False
            if self.state != MemberState.PREPARING_REBALANCE or self._generation != in_flight.generation:
                # Fenced or left (poll timeout) while the JoinGroup was in flight: join afresh.
                log.info("group %s: JoinGroup answered after the member left; joining again", self.group_id)
                self._rejoin_needed = True
                return True
            gen = self._generation = Generation(resp.generation_id, resp.member_id, resp.protocol_name)
            self._set_state(MemberState.COMPLETING_REBALANCE)
            self._last_heartbeat_ok = time.monotonic()  # a long join phase is not a dead coordinator
            self._cv.notify_all()
        return self._send_sync(conn, gen, resp)

    def _send_sync(self, conn: Connection, gen: Generation, join: JoinGroupResponse) -> bool:
        """Phase three: the leader assigns; everyone sends SyncGroup. False when the loop must stop."""
        assignments = self.perform_assignment(gen, join)
        if assignments is None:
            return not self._closed  # retried later (True), or failed for good (False)
        body = SyncGroupRequest(
            group_id=self.group_id,
            generation_id=gen.generation_id,
            member_id=gen.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=self.protocol_type(),
            protocol_name=gen.protocol_name,
            assignments=assignments,
        )
        return self._send(conn, wire.SYNC_GROUP, body, gen, "syncs") is not None

    def _on_sync_response(self, in_flight: InFlight, resp: SyncGroupResponse) -> bool:
        """SyncGroup's answer; True when the member is stable in the generation it synced."""
        gen = in_flight.generation
        code = resp.error_code
        if code:
            self._handle_join_error("SyncGroup", code)
            return False
        assigned = set(decode_assignment(resp.assignment).partitions)
        with self._cv:
            if self._closed or self._generation != gen:
                return False
            self._become_stable_locked(gen)
        self.on_join_complete(gen, assigned)
        return True
