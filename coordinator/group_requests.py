"""The coordinator's request handlers: for each API, the order of checks and what each state does.

One method per API of `coordinator-spec.md` (§3 JoinGroup, §4 SyncGroup, §8 Heartbeat, §9
LeaveGroup, §10 OffsetCommit, §11 OffsetFetch and retention, §12 admin calls) plus the callbacks
of the writes they start. They run inside `GroupCoordinator` (`coordinator/group.py`), which
supplies the shared procedures (prepare rebalance, join completion, member removal, timers);
this split only keeps each file readable.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coordinator import error_codes as E
from coordinator.group_metadata import CONSUMER_PROTOCOL_TYPE, Group, Member, Protocols
from coordinator.group_state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from coordinator.messages import (
    DeleteOffsets,
    Discarded,
    OffsetRecord,
    Respond,
    WriteGroupMetadata,
    WriteOffsets,
    WriteStaticReplacement,
)
from coordinator.offsets import metadata_length
from coordinator.schema import (
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResult,
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
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
    PartitionResult,
    SyncGroupRequest,
    SyncGroupResponse,
    TopicPartitionResults,
)
from core.types import TopicPartition

if TYPE_CHECKING:
    from coordinator.group import GroupCoordinator as _Base
else:
    _Base = object

_CLASSIC = "classic"

# Writes whose outcome the core waits for, each with what it needs when `persisted` reports it.

#: One OffsetCommit's layout: per topic, per partition, None (written) or the partition's error.
CommitLayout = list[tuple[str, list[tuple[int, int | None]]]]


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


@dataclass(frozen=True, slots=True)
class OffsetCommitWrite:
    """One OffsetCommit's accepted offsets (staged until written) and whom to answer."""

    group: Group
    offsets: list[OffsetRecord]
    request_token: Any
    layout: CommitLayout


PendingWrite = AssignmentWrite | StaticReplacementWrite | OffsetCommitWrite


class RequestHandlers(_Base):
    # ================================================================ JoinGroup (§3)

    def _join_group(
        self, req: JoinGroupRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid, mid = req.group_id, req.member_id
        if not gid:
            self._respond(token, JoinGroupResponse(error_code=E.INVALID_GROUP_ID, member_id=mid))
            return
        if check is not None and (err := check(gid)):
            self._respond(token, JoinGroupResponse(error_code=err, member_id=mid))
            return
        cfg = self.config
        if not cfg.group_min_session_timeout_ms <= req.session_timeout_ms <= cfg.group_max_session_timeout_ms:
            self._respond(token, JoinGroupResponse(error_code=E.INVALID_SESSION_TIMEOUT, member_id=mid))
            return
        group = self._groups.get(gid)
        if group is None:
            if mid:
                self._respond(token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=mid))
                return
            group = self._create_group(gid)
        protocols = [(p.name, p.metadata) for p in req.protocols]
        if not self._accept_joining_member(group, mid):
            # §3.1 step 4: over capacity; the id leaves the group without a rebalance of its own.
            m = group.members.get(mid)
            if m is not None:
                group.remove(m)
                m.session_deadline = None
            group.pending_members.pop(mid, None)
            self._respond(token, JoinGroupResponse(error_code=E.GROUP_MAX_SIZE_REACHED, member_id=""))
        elif mid == "":
            self._join_new_member(group, req, protocols, token, client_id, client_host)
        else:
            self._join_known_member(group, req, protocols, token, client_id, client_host)
        if group.state is PREPARING_REBALANCE:
            self._try_complete_join(group)

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
        """§3.2."""
        if group.state is DEAD:
            self._respond(token, JoinGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, member_id=""))
            return
        if not group.supports_protocols(req.protocol_type, frozenset(name for name, _ in protocols)):
            self._respond(token, JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=""))
            return
        iid = req.group_instance_id
        new_id = self._new_member_id(client_id if iid is None else iid)
        if iid is not None:
            if iid in group.static_members:
                self._replace_static_member(group, req, protocols, token, new_id)
            else:
                self._add_member_and_rebalance(group, new_id, req, protocols, token, client_id, client_host)
        elif self.config.require_known_member_id:
            # KIP-394: hand out an id and wait for the member to come back with it (§5.1).
            self._add_pending_member(group, new_id, req.session_timeout_ms)
            self._respond(token, JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id=new_id))
        else:
            self._add_member_and_rebalance(group, new_id, req, protocols, token, client_id, client_host)

    def _join_known_member(
        self,
        group: Group,
        req: JoinGroupRequest,
        protocols: list,
        token: Any,
        client_id: str,
        client_host: str,
    ) -> None:
        """§3.3."""
        mid = req.member_id
        if group.state is DEAD:
            self._respond(token, JoinGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE, member_id=mid))
            return
        if not group.supports_protocols(req.protocol_type, frozenset(name for name, _ in protocols)):
            self._respond(token, JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=mid))
            return
        if mid in group.pending_members and req.group_instance_id is None:
            self._add_member_and_rebalance(group, mid, req, protocols, token, client_id, client_host)
            return
        err = self._validate_member(group, mid, req.group_instance_id)
        if err:
            self._respond(token, JoinGroupResponse(error_code=err, member_id=mid))
            return
        m = group.members[mid]
        state = group.state
        if state is PREPARING_REBALANCE:
            self._update_member_and_park(group, m, protocols, req, token)
        elif state is COMPLETING_REBALANCE:
            if protocols == m.protocols:
                self._respond(
                    token, self._join_ok(group, mid, group.member_list() if group.is_leader(mid) else [])
                )
            else:
                self._update_member_and_park(group, m, protocols, req, token)
                self._prepare_rebalance(group)
        elif state is STABLE:
            if group.is_leader(mid) or protocols != m.protocols:
                self._update_member_and_park(group, m, protocols, req, token)
                self._prepare_rebalance(group)
            else:
                self._respond(token, self._join_ok(group, mid, []))
        else:  # Empty with members: never produced by normal operation
            self._respond(token, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=mid))

    def _replace_static_member(
        self, group: Group, req: JoinGroupRequest, protocols: list, token: Any, new_id: str
    ) -> None:
        """§5.2: a known instance id joins with an unknown member id."""
        iid = req.group_instance_id
        assert iid is not None
        old_id = group.static_members[iid]
        m = group.members[old_id]
        leader_before = group.leader_id
        if m.awaiting_join:
            self._respond(
                group.unpark_join(m), JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, member_id=old_id)
            )
        if m.awaiting_sync:
            self._respond(group.unpark_sync(m), SyncGroupResponse(error_code=E.FENCED_INSTANCE_ID))
        group.rename(m, new_id)
        self._schedule_session(group, m, m.session_timeout_ms)
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
                self._write(
                    WriteStaticReplacement(
                        group.group_id,
                        group.to_record(),
                        self._expect(pending),
                        old_member_id=old_id,
                        new_member_id=new_id,
                    )
                )
            else:
                self._prepare_rebalance(group)
        elif state is COMPLETING_REBALANCE:
            # The leader may have computed the assignment against the old member id.
            self._prepare_rebalance(group)

    def _on_static_persisted(self, pending: StaticReplacementWrite, ok: bool, error: int) -> None:
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
            self._respond(token, body)
            return
        if group.members.get(new_id) is not m:
            return
        # Revert (PROTOCOL.md: the previous protocols are restored with the id and timeouts).
        group.update(
            m, pending.old_protocols, pending.old_rebalance_timeout_ms, pending.old_session_timeout_ms
        )
        if m.awaiting_join:
            other = group.unpark_join(m)
            if not parked:
                self._out.append(Discarded(other))
        group.rename(m, old_id)
        self._schedule_session(group, m, m.session_timeout_ms)
        if parked:
            self._respond(
                token,
                JoinGroupResponse(
                    error_code=E.map_group_write_error(error),
                    generation_id=group.generation_id,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=leader_before or "",
                ),
            )

    # ================================================================ SyncGroup (§4)

    def _sync_group(
        self, req: SyncGroupRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid, mid = req.group_id, req.member_id
        if not gid:
            self._respond(token, SyncGroupResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._respond(
                token,
                SyncGroupResponse(
                    error_code=E.REBALANCE_IN_PROGRESS if err == E.COORDINATOR_LOAD_IN_PROGRESS else err
                ),
            )
            return
        group = self._groups.get(gid)
        if group is None:
            self._respond(token, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
            return
        if group.state is DEAD:
            self._respond(token, SyncGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
        err = self._validate_member(group, mid, req.group_instance_id)
        if not err and req.generation_id != group.generation_id:
            err = E.ILLEGAL_GENERATION
        if not err and (
            (req.protocol_type is not None and req.protocol_type != group.protocol_type)
            or (req.protocol_name is not None and req.protocol_name != group.protocol_name)
        ):
            err = E.INCONSISTENT_GROUP_PROTOCOL
        if err:
            self._respond(token, SyncGroupResponse(error_code=err))
            return
        m = group.members[mid]
        state = group.state
        if state is COMPLETING_REBALANCE:
            had, old = group.park_sync(m, token)
            if had:
                self._out.append(Discarded(old))
            self._synced(group, mid)
            if group.is_leader(mid):
                assignments = dict.fromkeys(group.members, b"")
                for a in req.assignments or ():
                    if a.member_id in assignments:
                        assignments[a.member_id] = a.assignment
                token = self._expect(AssignmentWrite(group, group.generation_id, assignments))
                self._write(WriteGroupMetadata(gid, group.to_record(assignments), token))
        elif state is STABLE:
            self._synced(group, mid)
            self._respond(
                token,
                SyncGroupResponse(
                    error_code=E.NONE,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    assignment=m.assignment,
                ),
            )
            self._schedule_session(group, m, m.session_timeout_ms)
        elif state is PREPARING_REBALANCE:
            self._respond(token, SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS))
        else:  # Empty: not reachable after the member check
            self._respond(token, SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            group.sync_op = None  # Kafka's DelayedSync completes once everyone has synced

    def _on_sync_persisted(self, pending: AssignmentWrite, ok: bool, error: int) -> None:
        group, generation_id, assignments = pending.group, pending.generation_id, pending.assignments
        if not (
            self._live(group) and group.state is COMPLETING_REBALANCE and group.generation_id == generation_id
        ):
            return
        if ok:
            for mid, m in group.members.items():
                m.assignment = assignments.get(mid, b"")
            self._propagate_assignment(group, E.NONE)
            self._transition(group, STABLE)
        else:
            for m in group.members.values():
                m.assignment = b""
            self._propagate_assignment(group, E.map_group_write_error(error))
            self._maybe_prepare_rebalance(group)

    # ================================================================ Heartbeat (§8)

    def _heartbeat(
        self, req: HeartbeatRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if not gid:
            err = E.INVALID_GROUP_ID
        elif check is not None and (err := check(gid)):
            if err == E.COORDINATOR_LOAD_IN_PROGRESS:
                err = E.NONE  # blind success while loading
        else:
            err = self._heartbeat_group(self._groups.get(gid), req)
        self._out.append(Respond(token, HeartbeatResponse(error_code=err)))

    def _heartbeat_group(self, group: Group | None, req: HeartbeatRequest) -> int:
        if group is None:
            return E.UNKNOWN_MEMBER_ID
        state = group.state
        if state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        mid = req.member_id
        if req.group_instance_id is not None:
            err = self._validate_member(group, mid, req.group_instance_id)
            if err:
                return err
        m = group.members.get(mid)
        if m is None:
            return E.UNKNOWN_MEMBER_ID
        if req.generation_id != group.generation_id:
            return E.ILLEGAL_GENERATION
        if state is EMPTY:
            return E.UNKNOWN_MEMBER_ID
        # Reschedule the session timer (inlined `_schedule_session`: this is the hot path).
        deadline = self._now + m.session_timeout_ms
        m.session_deadline = deadline
        hd = m.heap_deadline
        if hd is None or deadline < hd:
            self._schedule_session(group, m, m.session_timeout_ms)
        return E.REBALANCE_IN_PROGRESS if state is PREPARING_REBALANCE else E.NONE

    # ================================================================ LeaveGroup (§9)

    def _leave_group(
        self, req: LeaveGroupRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if not gid:
            self._respond(token, LeaveGroupResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._respond(token, LeaveGroupResponse(error_code=err))
            return
        group = self._groups.get(gid)
        if group is not None and group.state is DEAD:
            self._respond(token, LeaveGroupResponse(error_code=E.COORDINATOR_NOT_AVAILABLE))
            return
        results = []
        for leaving in req.members:
            mid, iid = leaving.member_id, leaving.group_instance_id
            err = E.UNKNOWN_MEMBER_ID if group is None else self._leave_one(group, mid, iid)
            results.append(LeaveGroupMemberResponse(member_id=mid, group_instance_id=iid, error_code=err))
        self._respond(token, LeaveGroupResponse(error_code=E.NONE, members=results))

    def _leave_one(self, group: Group, mid: str, iid: str | None) -> int:
        if mid == "":
            current = None if iid is None else group.static_members.get(iid)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            self._remove_member_and_update_group(group, group.members[current])
            return E.NONE
        if mid in group.pending_members:
            del group.pending_members[mid]
            if group.state is PREPARING_REBALANCE:
                self._try_complete_join(group)
            return E.NONE
        err = self._validate_member(group, mid, iid)
        if err:
            return err
        self._remove_member_and_update_group(group, group.members[mid])
        return E.NONE

    # ================================================================ OffsetCommit (§10)

    def _offset_commit(
        self, req: OffsetCommitRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if gid is None:
            self._respond(token, OffsetCommitResponse.with_error(req, E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._respond(token, OffsetCommitResponse.with_error(req, err))
            return
        group = self._groups.get(gid)
        if group is None:
            if req.generation_id >= 0:
                self._respond(token, OffsetCommitResponse.with_error(req, E.ILLEGAL_GENERATION))
                return
            group = self._create_group(gid)  # a "simple" group: offsets only, no protocol type
        err = self._validate_commit(group, req)
        if err:
            self._respond(token, OffsetCommitResponse.with_error(req, err))
            return
        self._store_offsets(group, req, token)

    def _validate_commit(self, group: Group, req: OffsetCommitRequest) -> int:
        if group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and group.state is EMPTY:
            return E.NONE  # the admin / standalone path: no member checks at all
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            err = self._validate_member(group, req.member_id, req.group_instance_id)
            if err:
                return err
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        else:
            return E.UNKNOWN_MEMBER_ID  # only members can commit to a non-empty group
        state = group.state
        if state is COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        if state is STABLE or state is PREPARING_REBALANCE:
            m = group.members[req.member_id]
            self._schedule_session(group, m, m.session_timeout_ms)
        return E.NONE

    def _store_offsets(self, group: Group, req: OffsetCommitRequest, token: Any) -> None:
        now, max_bytes = self._now, self.config.offset_metadata_max_bytes
        expire = None if req.retention_time_ms == -1 else now + req.retention_time_ms
        records: dict[TopicPartition, OffsetRecord] = {}
        layout: CommitLayout = []
        for t in req.topics:
            parts: list[tuple[int, int | None]] = []
            for p in t.partitions:
                metadata = p.committed_metadata or ""
                if metadata_length(metadata) > max_bytes:
                    parts.append((p.partition_index, E.OFFSET_METADATA_TOO_LARGE))
                else:
                    parts.append((p.partition_index, None))
                    tp = TopicPartition(t.name, p.partition_index)
                    records.pop(tp, None)  # a partition listed twice: the last one counts
                    records[tp] = OffsetRecord(
                        t.name, p.partition_index, p.committed_offset, metadata, now, expire
                    )
            layout.append((t.name, parts))
        if not records:
            self._respond(token, _commit_body(layout, E.NONE))
            return
        batch = list(records.values())
        group.offsets.stage(batch)
        seq = self._expect(OffsetCommitWrite(group, batch, token, layout))
        self._write(WriteOffsets(group.group_id, batch, req.generation_id, seq))

    def _on_offsets_persisted(self, pending: OffsetCommitWrite, seq: int, ok: bool, error: int) -> None:
        pending.group.offsets.complete(pending.offsets, seq, ok)
        body = _commit_body(pending.layout, E.NONE if ok else E.map_offset_write_error(error))
        self._respond(pending.request_token, body)

    # ================================================================ OffsetFetch, retention (§11)

    def _offset_fetch(
        self, req: OffsetFetchRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if gid is None:
            self._respond(token, OffsetFetchResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._respond(token, OffsetFetchResponse(error_code=err))
            return
        group = self._groups.get(gid)
        if group is not None and group.state is DEAD:
            group = None
        topics: list[OffsetFetchTopicResponse] = []
        if req.topics is None:
            if group is not None:
                by_topic: dict[str, list[OffsetFetchPartition]] = {}
                for tp in sorted(group.offsets.committed):
                    by_topic.setdefault(tp.topic, []).append(_fetched(group, tp, req.require_stable))
                topics = [
                    OffsetFetchTopicResponse(name=name, partitions=parts) for name, parts in by_topic.items()
                ]
        else:
            for t in req.topics:
                parts = [
                    _fetched(group, TopicPartition(t.name, p), req.require_stable)
                    for p in t.partition_indexes
                ]
                topics.append(OffsetFetchTopicResponse(name=t.name, partitions=parts))
        self._respond(token, OffsetFetchResponse(error_code=E.NONE, topics=topics))

    def _expire_offsets(self) -> None:
        """§11 retention: which offsets each kind of group may lose, then drop groups left empty."""
        now, retention = self._now, self.config.offsets_retention_ms
        for group in list(self._groups.values()):
            if group.state is DEAD:
                continue
            offsets = group.offsets
            if group.protocol_type is not None and group.state is EMPTY:
                expired = offsets.expired(now, retention, since_ms=group.state_timestamp)
            elif group.protocol_type is None:
                expired = offsets.expired(now, retention)
            elif (
                group.protocol_type == CONSUMER_PROTOCOL_TYPE
                and group.state is STABLE
                and group.subscribed_topics is not None
            ):
                expired = offsets.expired(now, retention, keep_topics=group.subscribed_topics)
            else:
                expired = []
            self._remove_offsets(group, expired)
            if (
                group.state is EMPTY
                and not offsets.has_offsets()
                and self._groups.get(group.group_id) is group
            ):
                self._remove_group(group)

    def _remove_offsets(self, group: Group, tps: list[TopicPartition]) -> None:
        removed = group.offsets.remove(tps)
        if removed:
            self._write(DeleteOffsets(group.group_id, removed))
        if removed and group.state is EMPTY and not group.offsets.has_offsets():
            self._remove_group(group)

    # ================================================================ admin calls (§12)

    def _describe_groups(
        self, req: DescribeGroupsRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        results = []
        for gid in req.groups:
            if gid is None:
                results.append(DescribedGroup(error_code=E.INVALID_GROUP_ID, group_id=None))
            elif check is not None and (err := check(gid)):
                results.append(DescribedGroup(error_code=err, group_id=gid))
            else:
                results.append(_describe(gid, self._groups.get(gid)))
        self._respond(token, DescribeGroupsResponse(groups=results))

    def _list_groups(
        self, req: ListGroupsRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        states = {s.lower() for s in req.states_filter or ()}
        types = {t.lower() for t in req.types_filter or ()}
        groups = []
        if not types or _CLASSIC in types:
            for gid, group in self._groups.items():
                if states and group.state.value.lower() not in states:
                    continue
                groups.append(
                    ListedGroup(
                        group_id=gid, protocol_type=group.protocol_type or "", group_state=group.state.value
                    )
                )
        self._respond(token, ListGroupsResponse(error_code=E.NONE, groups=groups))

    def _delete_groups(
        self, req: DeleteGroupsRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        results = []
        for gid in req.groups_names:
            if gid is None:
                err = E.INVALID_GROUP_ID
            elif check is not None and (err := check(gid)):
                pass
            else:
                group = self._groups.get(gid)
                if group is None or group.state is DEAD:
                    err = E.GROUP_ID_NOT_FOUND
                elif group.state is EMPTY:
                    group.offsets.remove(list(group.offsets.committed))
                    self._remove_group(group)
                    err = E.NONE
                else:
                    err = E.NON_EMPTY_GROUP
            results.append(DeleteGroupsResult(group_id=gid, error_code=err))
        self._respond(token, DeleteGroupsResponse(results=results))

    def _offset_delete(
        self, req: OffsetDeleteRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if not gid:
            self._respond(token, OffsetDeleteResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._respond(token, OffsetDeleteResponse(error_code=err))
            return
        group = self._groups.get(gid)
        if group is None or group.state is DEAD:
            self._respond(token, OffsetDeleteResponse(error_code=E.GROUP_ID_NOT_FOUND))
            return
        if group.state is not EMPTY and group.protocol_type != CONSUMER_PROTOCOL_TYPE:
            self._respond(token, OffsetDeleteResponse(error_code=E.NON_EMPTY_GROUP))
            return
        empty = group.state is EMPTY
        eligible: list[TopicPartition] = []
        topics = []
        for t in req.topics:
            subscribed = not empty and group.is_subscribed_to(t.name)
            parts = []
            for p in t.partitions:
                if subscribed:
                    parts.append(
                        PartitionResult(
                            partition_index=p.partition_index, error_code=E.GROUP_SUBSCRIBED_TO_TOPIC
                        )
                    )
                else:
                    eligible.append(TopicPartition(t.name, p.partition_index))
                    parts.append(PartitionResult(partition_index=p.partition_index, error_code=E.NONE))
            topics.append(TopicPartitionResults(name=t.name, partitions=parts))
        self._remove_offsets(group, eligible)
        self._respond(token, OffsetDeleteResponse(error_code=E.NONE, topics=topics))


def _commit_body(layout: CommitLayout, written: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            TopicPartitionResults(
                name=name,
                partitions=[
                    PartitionResult(partition_index=p, error_code=written if err is None else err)
                    for p, err in parts
                ],
            )
            for name, parts in layout
        ]
    )


def _fetched(group: Group | None, tp: TopicPartition, require_stable: bool) -> OffsetFetchPartition:
    if group is not None:
        if require_stable and group.offsets.is_pending(tp):
            return OffsetFetchPartition(
                partition_index=tp.partition,
                committed_offset=-1,
                metadata="",
                error_code=E.UNSTABLE_OFFSET_COMMIT,
            )
        r = group.offsets.committed.get(tp)
        if r is not None:
            return OffsetFetchPartition(
                partition_index=tp.partition,
                committed_offset=r.offset,
                metadata=r.metadata,
                error_code=E.NONE,
            )
    return OffsetFetchPartition(
        partition_index=tp.partition, committed_offset=-1, metadata="", error_code=E.NONE
    )


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
