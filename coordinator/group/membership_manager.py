"""The membership part of the group coordinator core: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

Kafka's `GroupMetadataManager` for classic groups: for each membership API the order of checks and
what each state does (JoinGroup with static replacement, SyncGroup,
Heartbeat, LeaveGroup, DescribeGroups and ListGroups; docs/coordinator-core.md), and the callbacks of
the group
metadata writes it starts. The procedures these requests share (members added and removed,
rebalances, timers) are the `GroupManager`'s (`coordinator/group/group_manager.py`), which the offsets
part uses too; this module knows nothing of offsets."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from coordinator.group.context import CoreContext
from coordinator.group.group_manager import GroupManager
from coordinator.group.messages import (
    Discarded,
    Respond,
    WriteGroupMetadata,
    WriteStaticReplacement,
)
from coordinator.group.metadata import Group, Member, Protocols
from coordinator.group.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupMemberResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

_CLASSIC = "classic"

# Group metadata writes whose outcome the membership part waits for, with what it needs then.


@dataclass(frozen=True, slots=True)
class AssignmentWrite:
    """The leader's SyncGroup in CompletingRebalance: the assignment of `generation_id`."""

    group: Group
    generation_id: int
    assignments: dict[str, bytes]


@dataclass(frozen=True, slots=True)
class StaticReplacementWrite:
    """A static member rejoined a Stable group with a new member id: what to restore on failure."""

    group: Group
    member: Member
    old_member_id: str
    new_member_id: str
    old_protocols: Protocols
    old_rebalance_timeout_ms: int
    old_session_timeout_ms: int
    join_token: Any
    leader_before: str | None


def _uuid_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class MembershipManager:
    """The membership requests of every group the node holds (Kafka's `GroupMetadataManager`)."""

    def __init__(
        self,
        ctx: CoreContext,
        group_manager: GroupManager,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self._ctx = ctx
        self.config = ctx.config
        self.groups = ctx.groups
        self._group_manager = group_manager
        self._new_member_id = member_id_factory or _uuid_member_id

    # ================================================================ JoinGroup

    def join_group(
        self, req: JoinGroupRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid, mid = req.group_id, req.member_id
        if not gid:
            self._ctx.respond(token, JoinGroupResponse(error_code=E.INVALID_GROUP_ID, member_id=mid))
            return
        if check is not None and (err := check(gid)):
            self._ctx.respond(token, JoinGroupResponse(error_code=err, member_id=mid))
            return
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            self._ctx.respond(token, JoinGroupResponse(error_code=E.INVALID_SESSION_TIMEOUT, member_id=mid))
            return
        group = self.groups.get(gid)
        if group is None:
            if mid:
                self._ctx.respond(token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=mid))
                return
            group = self._group_manager.create_group(gid)
        protocols = [(p.name, p.metadata) for p in req.protocols]
        if not self._accept_joining_member(group, mid):
            # Over capacity (group.max.size): the id leaves the group without a rebalance of its own.
            m = group.members.get(mid)
            if m is not None:
                group.remove(m)
                m.session_deadline = None
            group.pending_members.pop(mid, None)
            self._ctx.respond(token, JoinGroupResponse(error_code=E.GROUP_MAX_SIZE_REACHED, member_id=""))
        elif mid == "":
            self._join_new_member(group, req, protocols, token, client_id, client_host)
        else:
            self._join_known_member(group, req, protocols, token, client_id, client_host)
        if group.state is PREPARING_REBALANCE:
            self._group_manager.try_complete_join(group)

    def _accept_joining_member(self, group: Group, member_id: str) -> bool:
        state, max_size = group.state, self.config.group_max_size
        if state is EMPTY or state is DEAD:
            return True
        m = group.members.get(member_id)
        if state is PREPARING_REBALANCE:
            return (m is not None and m.awaiting_join) or group.num_awaiting_join < max_size
        return m is not None or len(group.members) < max_size

    def _join_new_member(
        self,
        group: Group,
        req: JoinGroupRequest,
        protocols: list,
        token: Any,
        client_id: str,
        client_host: str,
    ) -> None:
        """A JoinGroup without a member id: a new member (KIP-394 id round trip) or a static replacement."""
        if group.state is DEAD:
            self._ctx.respond(token, JoinGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, member_id=""))
            return
        if not group.supports_protocols(req.protocol_type, frozenset(name for name, _ in protocols)):
            self._ctx.respond(
                token, JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id="")
            )
            return
        iid = req.group_instance_id
        new_id = self._new_member_id(client_id if iid is None else iid)
        if iid is not None:
            if iid in group.static_members:
                self._replace_static_member(group, req, protocols, token, new_id)
            else:
                self._group_manager.add_member_and_rebalance(
                    group, new_id, req, protocols, token, client_id, client_host
                )
        elif self.config.require_known_member_id:
            # KIP-394: hand out an id and wait for the member to come back with it (a pending member).
            self._group_manager.add_pending_member(group, new_id, req.session_timeout_ms)
            self._ctx.respond(token, JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._group_manager.add_member_and_rebalance(
                group, new_id, req, protocols, token, client_id, client_host
            )

    def _join_known_member(
        self,
        group: Group,
        req: JoinGroupRequest,
        protocols: list,
        token: Any,
        client_id: str,
        client_host: str,
    ) -> None:
        """A JoinGroup from a known member id: rejoin, or fencing of an unknown or replaced id."""
        mid = req.member_id
        if group.state is DEAD:
            self._ctx.respond(token, JoinGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, member_id=mid))
            return
        if not group.supports_protocols(req.protocol_type, frozenset(name for name, _ in protocols)):
            self._ctx.respond(
                token, JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=mid)
            )
            return
        if mid in group.pending_members and req.group_instance_id is None:
            self._group_manager.add_member_and_rebalance(
                group, mid, req, protocols, token, client_id, client_host
            )
            return
        err = self._group_manager.validate_member(group, mid, req.group_instance_id)
        if err:
            self._ctx.respond(token, JoinGroupResponse(error_code=err, member_id=mid))
            return
        m = group.members[mid]
        state = group.state
        if state is PREPARING_REBALANCE:
            self._group_manager.update_member_and_park(group, m, protocols, req, token)
        elif state is COMPLETING_REBALANCE:
            if protocols == m.protocols:
                self._ctx.respond(
                    token,
                    self._group_manager.join_ok(
                        group, mid, group.member_list() if group.is_leader(mid) else []
                    ),
                )
            else:
                self._group_manager.update_member_and_park(group, m, protocols, req, token)
                self._group_manager.prepare_rebalance(group)
        elif state is STABLE:
            if group.is_leader(mid) or protocols != m.protocols:
                self._group_manager.update_member_and_park(group, m, protocols, req, token)
                self._group_manager.prepare_rebalance(group)
            else:
                self._ctx.respond(token, self._group_manager.join_ok(group, mid, []))
        else:  # Empty with members: never produced by normal operation
            self._ctx.respond(token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=mid))

    def _replace_static_member(
        self, group: Group, req: JoinGroupRequest, protocols: list, token: Any, new_id: str
    ) -> None:
        """Static replacement (KIP-345): a known instance id joins with an unknown member id."""
        iid = req.group_instance_id
        assert iid is not None
        old_id = group.static_members[iid]
        m = group.members[old_id]
        leader_before = group.leader_id
        if m.awaiting_join:
            self._ctx.respond(
                group.unpark_join(m), JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, member_id=old_id)
            )
        if m.awaiting_sync:
            self._ctx.respond(group.unpark_sync(m), SyncGroupResponse(error_code=E.FENCED_INSTANCE_ID))
        group.rename(m, new_id)
        self._group_manager.schedule_session(group, m, m.session_timeout_ms)
        pending = StaticReplacementWrite(
            group,
            m,
            old_id,
            new_id,
            m.protocols,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            token,
            leader_before,
        )
        group.update(m, protocols, req.rebalance_timeout_ms, req.session_timeout_ms)
        group.park_join(m, token)
        state = group.state
        if state is STABLE:
            if group.select_protocol() == group.protocol_name:
                # Same protocol: persist the new member id, no rebalance, same generation.
                self._ctx.out.append(
                    WriteStaticReplacement(
                        group.group_id,
                        group.to_record(),
                        self._ctx.expect(pending),
                        old_member_id=old_id,
                        new_member_id=new_id,
                    )
                )
            else:
                self._group_manager.prepare_rebalance(group)
        elif state is COMPLETING_REBALANCE:
            # The leader may have computed the assignment against the old member id.
            self._group_manager.prepare_rebalance(group)

    def static_replacement_persisted(self, pending: StaticReplacementWrite, ok: bool, error: int) -> None:
        group, m, token, leader_before = (
            pending.group,
            pending.member,
            pending.join_token,
            pending.leader_before,
        )
        old_id, new_id = pending.old_member_id, pending.new_member_id
        parked = m.awaiting_join and m.join_token is token
        if ok:
            if not parked:
                return
            group.unpark_join(m)
            if self.config.supports_skip_assignment:
                leader = group.is_leader(new_id)
                extra = dict(
                    leader=group.leader_id or "",
                    members=group.member_list() if leader else [],
                    skip_assignment=leader,
                )
            else:
                # v8 and older: the leader id as it was before the replacement, so a replaced
                # static leader does not run the assignor again.
                extra = dict(leader=leader_before or "", members=[])
            body = JoinGroupResponse(
                error_code=E.NONE,
                generation_id=group.generation_id,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                member_id=new_id,
                **extra,
            )
            self._ctx.respond(token, body)
            return
        if group.members.get(new_id) is not m:
            return
        # Revert (docs/protocol.md: the previous protocols are restored with the id and timeouts).
        group.update(
            m, pending.old_protocols, pending.old_rebalance_timeout_ms, pending.old_session_timeout_ms
        )
        if m.awaiting_join:
            other = group.unpark_join(m)
            if not parked:
                self._ctx.out.append(Discarded(other))
        group.rename(m, old_id)
        self._group_manager.schedule_session(group, m, m.session_timeout_ms)
        if parked:
            self._ctx.respond(
                token,
                JoinGroupResponse(
                    error_code=E.map_group_write_error(error),
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=leader_before or "",
                ),
            )

    # ================================================================ SyncGroup

    def sync_group(
        self, req: SyncGroupRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid, mid = req.group_id, req.member_id
        if not gid:
            self._ctx.respond(token, SyncGroupResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._ctx.respond(
                token,
                SyncGroupResponse(
                    error_code=E.REBALANCE_IN_PROGRESS if err == E.COORDINATOR_LOAD_IN_PROGRESS else err
                ),
            )
            return
        group = self.groups.get(gid)
        if group is None:
            self._ctx.respond(token, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
            return
        if group.state is DEAD:
            self._ctx.respond(token, SyncGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
        err = self._group_manager.validate_member(group, mid, req.group_instance_id)
        if not err and req.generation_id != group.generation_id:
            err = E.ILLEGAL_GENERATION
        if not err and (
            (req.protocol_type is not None and req.protocol_type != group.protocol_type)
            or (req.protocol_name is not None and req.protocol_name != group.protocol_name)
        ):
            err = E.INCONSISTENT_GROUP_PROTOCOL
        if err:
            self._ctx.respond(token, SyncGroupResponse(error_code=err))
            return
        m = group.members[mid]
        state = group.state
        if state is COMPLETING_REBALANCE:
            had, old = group.park_sync(m, token)
            if had:
                self._ctx.out.append(Discarded(old))
            self._synced(group, mid)
            if group.is_leader(mid):
                assignments = dict.fromkeys(group.members, b"")
                for a in req.assignments or ():
                    if a.member_id in assignments:
                        assignments[a.member_id] = a.assignment
                token = self._ctx.expect(AssignmentWrite(group, group.generation_id, assignments))
                self._ctx.out.append(WriteGroupMetadata(gid, group.to_record(assignments), token))
        elif state is STABLE:
            self._synced(group, mid)
            self._ctx.respond(
                token,
                SyncGroupResponse(
                    error_code=E.NONE,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=m.assignment,
                ),
            )
            self._group_manager.schedule_session(group, m, m.session_timeout_ms)
        elif state is PREPARING_REBALANCE:
            self._ctx.respond(token, SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS))
        else:  # Empty: not reachable after the member check
            self._ctx.respond(token, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_op = None  # Kafka's DelayedSync completes once everyone has synced

    def assignment_persisted(self, pending: AssignmentWrite, ok: bool, error: int) -> None:
        group, generation_id, assignments = pending.group, pending.generation_id, pending.assignments
        if not (
            self._group_manager.live(group)
            and group.state is COMPLETING_REBALANCE
            and group.generation_id == generation_id
        ):
            return
        if ok:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            self._group_manager.propagate_assignment(group, E.NONE)
            self._group_manager.transition(group, STABLE)
        else:
            for m in group.members.values():
                m.assignment = b""
            self._group_manager.propagate_assignment(group, E.map_group_write_error(error))
            self._group_manager.maybe_prepare_rebalance(group)

    # ================================================================ Heartbeat

    def heartbeat(
        self, req: HeartbeatRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if not gid:
            err = E.INVALID_GROUP_ID
        elif check is not None and (err := check(gid)):
            if err == E.COORDINATOR_LOAD_IN_PROGRESS:
                err = E.NONE  # blind success while loading
        else:
            err = self._heartbeat_group(self.groups.get(gid), req)
        self._ctx.out.append(Respond(token, HeartbeatResponse(error_code=err)))

    def _heartbeat_group(self, group: Group | None, req: HeartbeatRequest) -> int:
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        state = group.state
        if state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        mid = req.member_id
        if req.group_instance_id is not None:
            err = self._group_manager.validate_member(group, mid, req.group_instance_id)
            if err:
                return err
        m = group.members.get(mid)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if state is EMPTY:
            return E.UNKNOWN_MEMBER_ID
        # Reschedule the session timer (inlined `schedule_session`: this is the hot path).
        deadline = self._ctx.now + m.session_timeout_ms
        m.session_deadline = deadline
        hd = m.heap_deadline
        if hd is None or deadline < hd:
            self._group_manager.schedule_session(group, m, m.session_timeout_ms)
        return E.REBALANCE_IN_PROGRESS if state is PREPARING_REBALANCE else E.NONE

    # ================================================================ LeaveGroup

    def leave_group(
        self, req: LeaveGroupRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if not gid:
            self._ctx.respond(token, LeaveGroupResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._ctx.respond(token, LeaveGroupResponse(error_code=err))
            return
        group = self.groups.get(gid)
        if group is not None and group.state is DEAD:
            self._ctx.respond(token, LeaveGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
        results = []
        for leaving in req.members:
            mid, iid = leaving.member_id, leaving.group_instance_id
            err = E.UNKNOWN_MEMBER_ID if group is None else self._leave_one(group, mid, iid)
            results.append(LeaveGroupMemberResponse(member_id=mid, group_instance_id=iid, error_code=err))
        self._ctx.respond(token, LeaveGroupResponse(error_code=E.NONE, members=results))

    def _leave_one(self, group: Group, mid: str, iid: str | None) -> int:
        if mid == "":
            current = None if iid is None else group.static_members.get(iid)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            self._group_manager.remove_member_and_update_group(group, group.members[current])
            return E.NONE
        if mid in group.pending_members:
            del group.pending_members[mid]
            if group.state is PREPARING_REBALANCE:
                self._group_manager.try_complete_join(group)
            return E.NONE
        err = self._group_manager.validate_member(group, mid, iid)
        if err:
            return err
        self._group_manager.remove_member_and_update_group(group, group.members[mid])
        return E.NONE

    # ================================================================ DescribeGroups, ListGroups

    def describe_groups(
        self, req: DescribeGroupsRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        results = []
        for gid in req.groups:
            if gid is None:
                results.append(DescribedGroup(error_code=E.INVALID_GROUP_ID, group_id=None))
            elif check is not None and (err := check(gid)):
                results.append(DescribedGroup(error_code=err, group_id=gid))
            else:
                results.append(_describe(gid, self.groups.get(gid)))
        self._ctx.respond(token, DescribeGroupsResponse(groups=results))

    def list_groups(
        self, req: ListGroupsRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        states = {s.lower() for s in req.states_filter or ()}
        types = {t.lower() for t in req.types_filter or ()}
        groups = []
        if not types or _CLASSIC in types:
            for gid, group in self.groups.items():
                if states and group.state.value.lower() not in states:
                    continue
                groups.append(
                    ListedGroup(
                        group_id=gid, protocol_type=group.protocol_type or "", group_state=group.state.value
                    )
                )
        self._ctx.respond(token, ListGroupsResponse(error_code=E.NONE, groups=groups))


def _describe(group_id: str, group: Group | None) -> DescribedGroup:
    if group is None:
        return DescribedGroup(error_code=E.NONE, group_id=group_id, group_state=DEAD.value)
    stable = group.state is STABLE
    pn = group.protocol_name if stable else None
    return DescribedGroup(
        error_code=E.NONE,
        group_id=group_id,
        group_state=group.state.value,
        protocol_type=group.protocol_type or "",
        protocol_data=(group.protocol_name or "") if stable else "",
        members=[_describe_member(m, pn, stable) for m in group.members.values()],
    )


def _describe_member(m: Member, protocol_name: str | None, with_data: bool) -> DescribedMember:
    return DescribedMember(
        member_id=m.member_id,
        group_instance_id=m.group_instance_id,
        client_id=m.client_id,
        client_host=m.client_host,
        member_metadata=m.metadata(protocol_name) if with_data else b"",
        member_assignment=m.assignment if with_data else b"",
    )
