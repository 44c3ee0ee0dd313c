"""The groups a coordinator node holds and what happens to them: members, rebalances, timers.

The procedures of Kafka's classic group protocol that the request handlers share
(docs/coordinator-core.md, Timers): a group is created and removed, loaded and unloaded; members are
validated, added, updated and removed; a rebalance is prepared, its join phase completed (leader
election, protocol vote, next generation) and its assignment propagated; and the timers that
drive them fire — session expiry, pending members (KIP-394 ids not yet used), the join phase with the
initial delay and the pending-sync phase. The membership part
(`coordinator/group/membership_manager.py`) and the offsets part (`coordinator/group/offset_manager.py`) of
the core are built on one `GroupManager`; it answers parked requests itself when a phase ends.
"""

from __future__ import annotations

import itertools
from heapq import heappop, heappush
from typing import Any

from msgspec import UNSET

from coordinator.group.context import CoreContext
from coordinator.group.messages import (
    DeleteGroup,
    Discarded,
    GroupRecord,
    GroupSnapshot,
    StateChanged,
    WriteGroupMetadata,
)
from coordinator.group.metadata import Group, Member, build_group
from coordinator.group.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE, GroupState
from coordinator.wire import errors as E
from coordinator.wire.schema import JoinGroupMember, JoinGroupResponse, SyncGroupResponse


class _DelayedJoin:
    """The pending join-phase operation: DelayedJoin, or InitialDelayedJoin (Kafka's names)."""

    __slots__ = ("deadline", "initial", "delay_ms", "remaining_ms")

    def __init__(self, deadline: int, initial: bool = False, delay_ms: int = 0, remaining_ms: int = 0):
        self.deadline = deadline
        self.initial = initial
        self.delay_ms = delay_ms
        self.remaining_ms = remaining_ms


class _DelayedSync:
    __slots__ = ("deadline", "generation_id")

    def __init__(self, deadline: int, generation_id: int):
        self.deadline = deadline
        self.generation_id = generation_id


_SESSION, _PENDING, _JOIN, _SYNC = range(4)


class GroupManager:
    """Every group the node holds (in the shared `CoreContext`), its members and its timers."""

    def __init__(self, ctx: CoreContext) -> None:
        self._ctx = ctx
        self.config = ctx.config
        self.groups = ctx.groups
        #: The timer heap: (deadline, sequence, kind, group, key); entries go stale instead of
        #: being removed (`_timer_is_stale`), and a session timer moves lazily.
        self.heap: list[tuple[int, int, int, Group, Any]] = []
        self._seq = itertools.count()

    # ================================================================== groups

    def load_group(self, snapshot: GroupSnapshot) -> None:
        """Take a group over (shard failover): Stable with its members if it has any, else Empty;
        same generation, so members keep heartbeating. Rebalances if over `group.max_size`."""
        if snapshot.group_id in self.groups:
            self.unload(self.groups[snapshot.group_id])
        group = build_group(snapshot, self._ctx.now)
        self.groups[group.group_id] = group
        self._ctx.out.append(StateChanged(group.group_id, None, group.state))
        for m in group.members.values():
            self.schedule_session(group, m, m.session_timeout_ms)
        if len(group.members) > self.config.group_max_size:
            self.prepare_rebalance(group)

    def resume(self) -> None:
        """Every member gets a full session timeout from now before its timer may fire."""
        for group in self.groups.values():
            for m in group.members.values():
                if m.session_deadline is not None:
                    self.schedule_session(group, m, m.session_timeout_ms)

    def release_members(self, group: Group) -> None:
        """The group becomes a consumer-protocol group (KIP-848's online upgrade): its parked
        JoinGroups and SyncGroups get REBALANCE_IN_PROGRESS, its members leave the classic core
        without a rebalance, and an Empty group without protocol type keeps its offsets."""
        self.answer_parked(group, E.REBALANCE_IN_PROGRESS)
        del self.groups[group.group_id]
        self.transition(group, DEAD)
        self.create_group(group.group_id).offsets = group.offsets

    def adopt_members(self, record: GroupRecord) -> Group:
        """A consumer-protocol group of classic members only comes back (KIP-848's online
        downgrade): the group of `record` replaces the offsets-only one, keeping its offsets, and
        rebalances; its members learn it from their next heartbeat."""
        old = self.groups.pop(record.group_id, None)
        group = build_group(GroupSnapshot(record.group_id, record, []), self._ctx.now)
        if old is not None:
            group.offsets = old.offsets
            self.transition(old, DEAD)
        self.groups[group.group_id] = group
        self._ctx.out.append(StateChanged(group.group_id, None, group.state))
        for m in group.members.values():
            self.schedule_session(group, m, m.session_timeout_ms)
        self.prepare_rebalance(group)
        return group

    def transition(self, group: Group, target: GroupState) -> None:
        old = group.transition_to(target, self._ctx.now)
        self._ctx.out.append(StateChanged(group.group_id, old, target))

    def live(self, group: Group) -> bool:
        return self.groups.get(group.group_id) is group and group.state is not DEAD

    def create_group(self, group_id: str) -> Group:
        group = self.groups[group_id] = Group(group_id, self._ctx.now)
        self._ctx.out.append(StateChanged(group_id, None, EMPTY))
        return group

    def remove_group(self, group: Group) -> None:
        """Dead and gone (deleted, or Empty with no offsets left); the store forgets it too."""
        self.transition(group, DEAD)
        del self.groups[group.group_id]
        self._ctx.out.append(DeleteGroup(group.group_id))

    def unload(self, group: Group) -> None:
        del self.groups[group.group_id]
        self.transition(group, DEAD)
        # Kafka answers parked JoinGroups (PreparingRebalance) and SyncGroups (Stable,
        # CompletingRebalance); any other parked request — only a static replacement awaiting its
        # write — is answered the same way rather than left hanging.
        self.answer_parked(group, E.NOT_COORDINATOR)

    def answer_parked(self, group: Group, code: int) -> None:
        """Answer every parked JoinGroup and SyncGroup of the group with the error `code`."""
        for m in group.members.values():
            if m.awaiting_join:
                self._ctx.respond(
                    group.unpark_join(m), JoinGroupResponse(error_code=code, member_id=m.member_id)
                )
            if m.awaiting_sync:
                self._ctx.respond(group.unpark_sync(m), SyncGroupResponse(error_code=code))

    def next_deadline(self) -> int | None:
        """Earliest deadline of a live timer (None if there is none); stale entries are dropped."""
        heap = self.heap
        while heap:
            deadline, _, kind, group, key = heap[0]
            if (
                kind == _SESSION
                and key.heap_deadline == deadline
                and key.session_deadline is not None
                and key.session_deadline > deadline
            ):
                # A rescheduled session timer: move the heap entry to the real deadline.
                heappop(heap)
                key.heap_deadline = key.session_deadline
                heappush(heap, (key.session_deadline, next(self._seq), _SESSION, group, key))
                continue
            if self._timer_is_stale(deadline, kind, group, key):
                heappop(heap)
                continue
            break
        return heap[0][0] if heap else None

    # ------------------------------------------------------------------- timers

    def _push(self, deadline: int, kind: int, group: Group, key: Any) -> None:
        heappush(self.heap, (deadline, next(self._seq), kind, group, key))

    def schedule_session(self, group: Group, m: Member, timeout_ms: int) -> None:
        """(Re)start a member's expiry timer: O(1), the heap entry moves lazily."""
        deadline = self._ctx.now + timeout_ms
        m.session_deadline = deadline
        hd = m.heap_deadline
        if hd is None or deadline < hd:
            m.heap_deadline = deadline
            heappush(self.heap, (deadline, next(self._seq), _SESSION, group, m))

    def add_pending_member(self, group: Group, member_id: str, timeout_ms: int) -> None:
        deadline = self._ctx.now + timeout_ms
        group.pending_members[member_id] = deadline
        self._push(deadline, _PENDING, group, member_id)

    def _timer_is_stale(self, deadline: int, kind: int, group: Group, key: Any) -> bool:
        if self.groups.get(group.group_id) is not group or group.state is DEAD:
            return True
        if kind == _SESSION:
            return (
                key.heap_deadline != deadline
                or key.session_deadline is None
                or group.members.get(key.member_id) is not key
            )
        if kind == _PENDING:
            return group.pending_members.get(key) != deadline
        if kind == _JOIN:
            return group.join_op is not key
        return group.sync_op is not key

    def fire_timers(self, now: int) -> None:
        heap = self.heap
        while heap and heap[0][0] < now:
            deadline, _, kind, group, key = heappop(heap)
            if self._timer_is_stale(deadline, kind, group, key):
                continue
            if kind == _SESSION:
                key.heap_deadline = None
                if key.session_deadline >= now:  # rescheduled since: not expired yet
                    key.heap_deadline = key.session_deadline
                    self._push(key.session_deadline, _SESSION, group, key)
                else:
                    self._on_session_expired(group, key)
            elif kind == _PENDING:
                del group.pending_members[key]
                if group.state is PREPARING_REBALANCE:
                    self.try_complete_join(group)
            elif kind == _JOIN:
                self._on_join_timeout(group, key)
            else:
                group.sync_op = None
                self._on_pending_sync_expired(group, key)

    def _on_session_expired(self, group: Group, m: Member) -> None:
        # A parked member is "satisfied" unless it is new (Kafka's rule); it is not rescheduled here —
        # join completion or assignment propagation schedules its next timer.
        m.session_deadline = None
        if not m.is_new and (m.awaiting_join or m.awaiting_sync):
            return
        self.remove_member_and_update_group(group, m)

    # ============================================================ procedures

    def validate_member(self, group: Group, member_id: str, instance_id: str | None) -> int:
        """Kafka's member validation: the instance id (if any) must map to this member id, which must be
        a member."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    def add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        req: Any,
        protocols: list,
        token: Any,
        client_id: str,
        client_host: str,
    ) -> None:
        """Add a member to the group and park its JoinGroup; rebalance if the group can."""
        m = Member(
            member_id,
            req.group_instance_id,
            client_id,
            client_host,
            req.session_timeout_ms,
            req.rebalance_timeout_ms,
            req.protocol_type,
            protocols,
        )
        m.is_new = True
        m.awaiting_join = True
        m.join_token = token
        if group.state is PREPARING_REBALANCE and group.generation_id == 0:
            group.new_member_added = True
        group.add(m)
        self.schedule_session(group, m, self.config.new_member_join_timeout_ms)
        if group.can_rebalance:
            self.prepare_rebalance(group)

    def update_member_and_park(self, group: Group, m: Member, protocols: list, req: Any, token: Any) -> None:
        """Update a member and park its JoinGroup; one already parked by it is replaced, never answered
        (as Kafka)."""
        group.update(m, protocols, req.rebalance_timeout_ms, req.session_timeout_ms)
        had, old = group.park_join(m, token)
        if had:
            self._ctx.out.append(Discarded(old))

    def prepare_rebalance(self, group: Group) -> None:
        """Start a rebalance: clear assignments of a CompletingRebalance group, enter
        PreparingRebalance, arm the join phase."""
        if group.state is COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
            self.propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        group.sync_op = None
        group.pending_sync_members.clear()
        if group.state is EMPTY:
            delay = self.config.group_initial_rebalance_delay_ms
            op = _DelayedJoin(
                self._ctx.now + delay, True, delay, max(group.rebalance_timeout_ms() - delay, 0)
            )
        else:
            op = _DelayedJoin(self._ctx.now + group.rebalance_timeout_ms())
        self.transition(group, PREPARING_REBALANCE)
        group.join_op = op
        self._push(op.deadline, _JOIN, group, op)
        if op.initial and op.delay_ms == 0:
            self._on_join_timeout(group, op)  # With an initial delay of 0 the first window expires at once
        else:
            self.try_complete_join(group)

    def maybe_prepare_rebalance(self, group: Group) -> None:
        if group.can_rebalance:
            self.prepare_rebalance(group)

    def try_complete_join(self, group: Group) -> None:
        """DelayedJoin completes early once everyone joined; InitialDelayedJoin never does."""
        op = group.join_op
        if op is not None and not op.initial and group.has_all_members_joined():
            group.join_op = None
            self._complete_join(group)

    def _on_join_timeout(self, group: Group, op: _DelayedJoin) -> None:
        group.join_op = None
        if op.initial and group.new_member_added and op.remaining_ms != 0:
            # InitialDelayedJoin: extend by a window of min(D, R) only if someone new arrived in this one.
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, op.remaining_ms)
            nxt = _DelayedJoin(self._ctx.now + delay, True, delay, max(op.remaining_ms - op.delay_ms, 0))
            group.join_op = nxt
            self._push(nxt.deadline, _JOIN, group, nxt)
            if delay == 0:
                self._on_join_timeout(group, nxt)
        else:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """Complete the join phase: drop dynamic members that did not rejoin, elect, vote, start the
        next generation."""
        for m in [m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None]:
            group.remove(m)
            m.session_deadline = None
            if m.awaiting_sync:
                self._ctx.out.append(Discarded(group.unpark_sync(m)))
        if group.state is DEAD:
            return
        if not group.elect_joined_leader() and group.members:
            # Only non-rejoined static members are left: wait for them (or their expiry).
            op = _DelayedJoin(self._ctx.now + group.rebalance_timeout_ms())
            group.join_op = op
            self._push(op.deadline, _JOIN, group, op)
            return
        group.generation_id += 1
        group.pending_sync_members.clear()
        # Kafka leaves a flag set during the last window behind; clearing it keeps the initial delay's promise
        # that a group coming back from Empty waits exactly one window.
        group.new_member_added = False
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            self.transition(group, EMPTY)
            self._ctx.out.append(WriteGroupMetadata(group.group_id, group.to_record()))
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        self.transition(group, COMPLETING_REBALANCE)
        leader_id = group.leader_id
        pending_sync = group.pending_sync_members
        for mid, m in group.members.items():
            if m.awaiting_join:
                token = group.unpark_join(m)
                self._ctx.respond(
                    token, self.join_ok(group, mid, group.member_list() if mid == leader_id else [])
                )
            self.schedule_session(group, m, m.session_timeout_ms)
            m.is_new = False
            pending_sync.add(mid)
        op = _DelayedSync(self._ctx.now + group.rebalance_timeout_ms(), group.generation_id)
        group.sync_op = op
        self._push(op.deadline, _SYNC, group, op)

    def _on_pending_sync_expired(self, group: Group, op: _DelayedSync) -> None:
        """The pending-sync timeout: members that never sent SyncGroup are removed — even once the group
        is Stable."""
        if op.generation_id != group.generation_id or group.state not in (COMPLETING_REBALANCE, STABLE):
            return
        if not group.pending_sync_members:
            return
        for mid in list(group.pending_sync_members):
            m = group.members.get(mid)
            if m is not None:
                group.remove(m)
                m.session_deadline = None
        group.pending_sync_members.clear()
        self.prepare_rebalance(group)

    def remove_member_and_update_group(self, group: Group, m: Member) -> None:
        """Remove a member (leave, session expiry) and rebalance or empty the group."""
        if m.awaiting_join:
            self._ctx.respond(
                group.unpark_join(m), JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id="")
            )
        if m.awaiting_sync:
            # Kafka removes the member without answering its parked SyncGroup.
            self._ctx.out.append(Discarded(group.unpark_sync(m)))
        group.remove(m)
        m.session_deadline = None
        state = group.state
        if state is STABLE or state is COMPLETING_REBALANCE:
            self.prepare_rebalance(group)
        elif state is PREPARING_REBALANCE:
            self.try_complete_join(group)

    def propagate_assignment(self, group: Group, error: int) -> None:
        """Answer every parked SyncGroup with its member's assignment (or the error)."""
        if error == E.NONE:
            ptype, pname = group.protocol_type, group.protocol_name
        else:
            ptype = pname = None
        for m in group.members.values():
            if m.awaiting_sync:
                token = group.unpark_sync(m)
                self._ctx.respond(
                    token,
                    SyncGroupResponse(
                        error_code=error, protocol_type=ptype, protocol_name=pname, assignment=m.assignment
                    ),
                )
                self.schedule_session(group, m, m.session_timeout_ms)

    def join_ok(self, group: Group, member_id: str, members: list[JoinGroupMember]) -> JoinGroupResponse:
        return JoinGroupResponse(
            error_code=E.NONE,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            member_id=member_id,
            members=members,
            skip_assignment=False if self.config.supports_skip_assignment else UNSET,
        )
