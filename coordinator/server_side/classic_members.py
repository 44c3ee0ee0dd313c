"""Classic members inside a consumer-protocol group: JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

KIP-848's mixed groups (docs/scheme-two.md, "Online upgrade and downgrade"): a group upgraded
from a classic one keeps the members that have not restarted with the consumer protocol, and new
classic members may join it. They keep speaking the classic protocol; the coordinator assigns for
them as for every other member, and the classic calls carry the reconciliation:

* **JoinGroup** updates the member (its subscription, protocols, timeouts: a subscription change is
  a new group epoch) and reconciles it: the partitions its subscription no longer owns among those
  to revoke are let go, it moves to the target's epoch, it takes the free partitions of its
  target. The answer's generation is its member epoch; there is no leader and no member list (the
  server assigns). A new member (no id) gets MEMBER_ID_REQUIRED first. The answer waits for the
  group's record to be written.
* **SyncGroup** returns the member's current partitions as a ConsumerProtocolAssignment, or
  REBALANCE_IN_PROGRESS when the group moved on since its JoinGroup.
* **Heartbeat** answers REBALANCE_IN_PROGRESS when the member is behind the group epoch, has
  partitions to let go, or waits for partitions that are free now: it rejoins, and its next
  JoinGroup/SyncGroup carries the new assignment. An eager member gives up all its partitions
  before it rejoins, a cooperative one only those taken away.
* **LeaveGroup** removes the member (a new group epoch).

A generation that is not the member's epoch gets ILLEGAL_GENERATION (commits too:
`incremental_admin`), protocols the group's classic members do not share or another protocol type
INCONSISTENT_GROUP_PROTOCOL, a member id the group does not know as a classic member
UNKNOWN_MEMBER_ID. Session timeouts are the members' own.

`ClassicMembers` is a base of `incremental_coordinator.IncrementalCoordinator`, whose groups,
reconciliation and timers it uses. Pure: requests and the time in, outputs out.
"""

from __future__ import annotations

import uuid
from typing import Any

from coordinator.assignors.payloads import decode_subscription, encode_assignment, payload_version
from coordinator.group.messages import Output, Respond, WriteGroupMetadata
from coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE
from coordinator.server_side.incremental_groups import AnswerWrite, Group, Member
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    SYNC_GROUP,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)


def should_rejoin(group: Group, member: Member) -> bool:
    """Kafka's three reasons a classic member of a consumer-protocol group must rejoin: it is behind
    the group epoch, it has partitions to let go, or partitions of its target are free now."""
    if member.epoch < group.epoch or member.revoking:
        return True
    waiting = group.target.get(member.member_id, frozenset()) - member.assigned
    return any(group.owner(tp, member.member_id) is None for tp in waiting)


def supports(group: Group, protocol_type: str, names: frozenset[str]) -> bool:
    """Kafka's rule for a classic member joining a consumer-protocol group: protocol type
    `consumer`, and a protocol every classic member of the group lists (any, if there is none)."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE or not names:
        return False
    classic = [m for m in group.members.values() if m.classic is not None]
    return not classic or any(all(name in {n for n, _ in m.classic or ()} for m in classic) for name in names)


class ClassicMembers:
    """The classic calls of `IncrementalCoordinator`'s groups (see the module docstring)."""

    # IncrementalCoordinator's: its groups, settings and topic sizes; and it provides `_watch`,
    # `_reconcile`, `_schedule_session`, `_remove` and `_written`.
    groups: dict[str, Group]
    partitions: dict[str, int]
    min_session_timeout_ms: int
    max_session_timeout_ms: int

    def _classic(self, api_key: int, req: Any, now: int, token: Any, **kw) -> list[Output]:
        check = kw["group_check"]
        if check is not None and (code := check(req.group_id)):
            return [Respond(token, P.precheck_error_body(api_key, req, code))]
        group = self.groups[req.group_id]
        if api_key == JOIN_GROUP:
            return self._classic_join(group, req, now, token, **kw)
        if api_key == SYNC_GROUP:
            return [Respond(token, self._classic_sync(group, req, now))]
        if api_key == HEARTBEAT:
            return [Respond(token, HeartbeatResponse(error_code=self._classic_heartbeat(group, req, now)))]
        assert api_key == LEAVE_GROUP
        return self._classic_leave(group, req, now, token)

    def _classic_member(
        self, group: Group, member_id: str, instance_id: str | None
    ) -> tuple[int, Member | None]:
        member = group.members.get(member_id)
        if instance_id is not None and (holder := group.holder(instance_id)) is not None:
            if holder.member_id != member_id:
                return E.FENCED_INSTANCE_ID, None
        if member is None or member.classic is None:
            return E.UNKNOWN_MEMBER_ID, None
        return E.NONE, member

    def _classic_join(self, group: Group, req: JoinGroupRequest, now: int, token: Any, **kw) -> list[Output]:
        mid = req.member_id

        def error(code: int) -> list[Output]:
            return [Respond(token, JoinGroupResponse(error_code=code, member_id=mid))]

        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            return error(E.INVALID_SESSION_TIMEOUT)
        protocols = tuple((p.name, p.metadata) for p in req.protocols)
        if not supports(group, req.protocol_type, frozenset(name for name, _ in protocols)):
            return error(E.INCONSISTENT_GROUP_PROTOCOL)
        try:
            sub = decode_subscription(protocols[0][1])
        except ValueError:
            return error(E.INCONSISTENT_GROUP_PROTOCOL)  # not a consumer subscription
        if not mid:
            new_id = f"{kw['client_id']}-{uuid.uuid4()}"
            if req.group_instance_id is None:  # KIP-394: come back with this id
                return [Respond(token, JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id=new_id))]
            if group.holder(req.group_instance_id) is not None:
                return error(E.FENCED_INSTANCE_ID)  # static replacement: not in mixed groups (yet)
            mid = new_id
        member = group.members.get(mid)
        if req.group_instance_id is not None and (holder := group.holder(req.group_instance_id)) is not None:
            if holder is not member:
                return error(E.FENCED_INSTANCE_ID)
        if member is not None and member.classic is None:
            return error(E.UNKNOWN_MEMBER_ID)  # a member of the consumer protocol
        out: list[Output] = []
        rebalance_ms = req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms
        if member is None:  # Kafka admits any member id here, as a new member
            member = group.members[mid] = Member(
                mid,
                kw["client_id"],
                kw["client_host"],
                req.session_timeout_ms,
                rebalance_ms,
                (),
                instance_id=req.group_instance_id,
            )
        member.session_timeout_ms, member.rebalance_timeout_ms = req.session_timeout_ms, rebalance_ms
        member.classic, member.rack_id = protocols, sub.rack
        topics = tuple(sorted(set(sub.topics)))
        bump = topics != member.topics
        before = (member.assigned, member.revoking, group.epoch, member.epoch)
        member.names = member.topics = topics
        out.extend(self._watch(group))
        if bump:
            group.epoch += 1
            group.state_timestamp = now
            group.retarget(self.partitions, bump=False)
        owned = frozenset(sub.owned_partitions)
        for _ in range(2):
            # What it lists as owned is all it holds: what it was asked to let go of and does not
            # list is let go (an eager member lets everything go before it joins).
            if member.revoking and not (owned & member.revoking):
                member.revoking, member.revoke_deadline = frozenset(), None
            self._reconcile(group, member, now)
        self._schedule_session(group, member, now)
        resp = JoinGroupResponse(
            error_code=E.NONE,
            generation_id=member.epoch,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=protocols[0][0],
            leader="",
            member_id=mid,
            members=[],
        )
        if (member.assigned, member.revoking, group.epoch, member.epoch) == before and not bump:
            out.append(Respond(token, resp))
        else:  # its SyncGroup hands out what this wrote: answered once written
            out.append(WriteGroupMetadata(group.group_id, group.record(), AnswerWrite(Respond(token, resp))))
        return out

    def _classic_sync(self, group: Group, req: SyncGroupRequest, now: int) -> SyncGroupResponse:
        code, member = self._classic_member(group, req.member_id, req.group_instance_id)
        if member is None:
            return SyncGroupResponse(error_code=code)
        assert member.classic is not None
        name, metadata = member.classic[0]
        if req.generation_id != member.epoch:
            return SyncGroupResponse(error_code=E.ILLEGAL_GENERATION)
        if (req.protocol_type is not None and req.protocol_type != CONSUMER_PROTOCOL_TYPE) or (
            req.protocol_name is not None and req.protocol_name != name
        ):
            return SyncGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL)
        if group.epoch > member.epoch and not member.revoking:
            return SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS)  # the group moved on: rejoin
        self._schedule_session(group, member, now)
        return SyncGroupResponse(
            error_code=E.NONE,
            protocol_type=CONSUMER_PROTOCOL_TYPE,
            protocol_name=name,
            assignment=encode_assignment(
                sorted(member.assigned), version=payload_version(member.classic[0][1])
            ),
        )

    def _classic_heartbeat(self, group: Group, req: HeartbeatRequest, now: int) -> int:
        code, member = self._classic_member(group, req.member_id, req.group_instance_id)
        if member is None:
            return code
        if req.generation_id != member.epoch:
            return E.ILLEGAL_GENERATION
        self._schedule_session(group, member, now)
        return E.REBALANCE_IN_PROGRESS if should_rejoin(group, member) else E.NONE

    def _classic_leave(self, group: Group, req: LeaveGroupRequest, now: int, token: Any) -> list[Output]:
        results, removed = [], False
        for leaving in req.members:
            mid = leaving.member_id
            if not mid and leaving.group_instance_id is not None:
                holder = group.holder(leaving.group_instance_id)
                mid = holder.member_id if holder is not None else ""
            code, member = self._classic_member(group, mid, leaving.group_instance_id)
            if member is not None:
                self._remove(group, member, now)
                removed = True
            results.append(
                LeaveGroupMemberResponse(
                    member_id=leaving.member_id, group_instance_id=leaving.group_instance_id, error_code=code
                )
            )
        resp = Respond(token, LeaveGroupResponse(error_code=E.NONE, members=results))
        if not removed:
            return [resp]
        return [*self._written(group, now), resp]
