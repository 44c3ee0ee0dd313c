"""The group coordinator core: Kafka's classic group protocol as a pure, sans-IO state machine.

Everything that affects the state machine lives here and in `group_metadata.py` (states, their
valid previous states, members): requests and the current time go in; responses (immediate or
released later), persistence effects, state changes and timer deadlines come out. There are no
sockets, no ZooKeeper and no clock in this module — the driver (`coordinator/server.py`) owns
those. Behaviour is `coordinator-spec.md` §0-§14 with the choices of `PROTOCOL.md`.

Usage::

    core = GroupCoordinator(CoordinatorConfig())
    outputs = core.handle(JOIN_GROUP, JoinGroupRequest(...), now_ms, client_id="c1", client_host="/10.0.0.7",
                          request_token=conn_and_correlation_id)
    for out in outputs:
        match out:
            case Respond(token, body): ...          # send body as the response to `token`
            case WriteGroupMetadata(group_id, record, token): ...   # (WriteStaticReplacement too)
            case WriteOffsets(group_id, offsets, generation_id, token): ...
            case DeleteOffsets(group_id, partitions) | DeleteGroup(group_id): ...
                # write it; then, if its token is not None: outputs += core.persisted(token, ok, now_ms)
            case StateChanged(group_id, old, new): ...   # metrics
            case Discarded(token): ...              # Kafka never answers this parked request
    # timers: call core.tick(now_ms) once now_ms > core.next_deadline()

Timers fire when `now_ms > deadline` (strictly); timers created while firing are scheduled from
`now_ms`. `handle` and `persisted` first fire every timer already due, so a driver that is late
calling `tick` still sees Kafka's order of events. Nothing a client sends makes this module raise:
requests arrive already validated by a codec (`coordinator/protocol.py`).
`IllegalStateTransition` can only come from a bug in this module.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from heapq import heappop, heappush
from typing import Any

from msgspec import UNSET

from coordinator import error_codes as E
from coordinator.group_metadata import Group, Member, build_group
from coordinator.group_requests import (
    AssignmentWrite,
    OffsetCommitWrite,
    PendingWrite,
    RequestHandlers,
    StaticReplacementWrite,
)
from coordinator.group_state import (
    COMPLETING_REBALANCE,
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransition,
)
from coordinator.messages import (
    DeleteGroup,
    Discarded,
    GroupSnapshot,
    Output,
    Respond,
    StateChanged,
    Write,
    WriteGroupMetadata,
)
from coordinator.schema import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
    ErrorResponse,
    JoinGroupMember,
    JoinGroupResponse,
    Message,
    Response,
    SyncGroupResponse,
)

__all__ = [
    "CoordinatorConfig",
    "GroupCoordinator",
    "GroupState",
    "IllegalStateTransition",
    "VALID_PREVIOUS_STATES",
    "Respond",
    "Write",
    "StateChanged",
    "Discarded",
    "Output",
    "GroupCheck",
]

#: Called by the core with a group id; returns 0 if this node serves the group, else the §2.1
#: error (COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR).
GroupCheck = Callable[[str], int]


@dataclass(frozen=True)
class CoordinatorConfig:
    """Broker settings of §13 (Kafka's defaults) plus the two protocol-version switches."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_max_size: int = 2**31 - 1
    offsets_retention_ms: int = 10080 * 60 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    new_member_join_timeout_ms: int = 300_000
    # PROTOCOL.md: every dynamic member goes through MEMBER_ID_REQUIRED (JoinGroup v4+).
    # False gives the v0-v3 behaviour (added at once).
    require_known_member_id: bool = True
    # JoinGroup v9+ semantics for a static replacement in Stable (§5.2); PROTOCOL.md's JoinGroup
    # response has no `skip_assignment`, so the default is the v8 behaviour.
    supports_skip_assignment: bool = False


class _DelayedJoin:
    """The pending join-phase operation: DelayedJoin, or InitialDelayedJoin (§6.1, §6.2)."""

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


def _uuid_member_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4()}"


class GroupCoordinator(RequestHandlers):
    """All groups of one coordinator node (the groups of the shards it leads)."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self._new_member_id = member_id_factory or _uuid_member_id
        self._groups: dict[str, Group] = {}
        self._heap: list[tuple[int, int, int, Group, Any]] = []
        self._seq = itertools.count()
        self._write_seq = 0
        self._pending_writes: dict[int, PendingWrite] = {}
        self._out: list[Output] = []
        self._now = 0
        self._next_retention_check: int | None = None
        self._handlers = {
            JOIN_GROUP: self._join_group,
            SYNC_GROUP: self._sync_group,
            HEARTBEAT: self._heartbeat,
            LEAVE_GROUP: self._leave_group,
            OFFSET_COMMIT: self._offset_commit,
            OFFSET_FETCH: self._offset_fetch,
            DESCRIBE_GROUPS: self._describe_groups,
            LIST_GROUPS: self._list_groups,
            DELETE_GROUPS: self._delete_groups,
            OFFSET_DELETE: self._offset_delete,
        }

    # ================================================================== public API

    def handle(
        self,
        api_key: int,
        req: Message,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
        request_token: Any = None,
        group_check: GroupCheck | None = None,
    ) -> list[Output]:
        """Handle one request (`api_key`'s struct of `coordinator/schema.py`, as a codec decoded
        it); the response may come later."""
        out = self._begin(now_ms)
        handler = self._handlers.get(api_key)
        if handler is None:
            message = f"api {api_key} is not served by the group coordinator"
            out.append(
                Respond(request_token, ErrorResponse(error_code=E.UNSUPPORTED_VERSION, error_message=message))
            )
            return out
        handler(req, request_token, client_id, client_host, group_check)
        return out

    def tick(self, now_ms: int) -> list[Output]:
        """Fire every timer whose deadline is < now_ms (session expiry, join/sync phases, retention)."""
        return self._begin(now_ms)

    def next_deadline(self) -> int | None:
        """Earliest pending deadline; call `tick(t)` with some t > it. None when nothing is due."""
        heap = self._heap
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
        candidates = [heap[0][0]] if heap else []
        if self._next_retention_check is not None:
            candidates.append(self._next_retention_check)
        return min(candidates) if candidates else None

    def persisted(
        self, token: int, ok: bool, now_ms: int, error_code: int = E.COORDINATOR_NOT_AVAILABLE
    ) -> list[Output]:
        """Report the outcome of a `Write` that carried `token`. `error_code` is the storage error on
        failure (Kafka's codes; the core maps it per §4/§10 — e.g. NOT_COORDINATOR when fenced)."""
        out = self._begin(now_ms)
        match self._pending_writes.pop(token, None):
            case AssignmentWrite() as pending:
                self._on_sync_persisted(pending, ok, error_code)
            case StaticReplacementWrite() as pending:
                self._on_static_persisted(pending, ok, error_code)
            case OffsetCommitWrite() as pending:
                self._on_offsets_persisted(pending, token, ok, error_code)
        return out

    def snapshot(self, group_id: str) -> GroupSnapshot | None:
        """The group's metadata and committed offsets as plain data (None if not held)."""
        group = self._groups.get(group_id)
        if group is None:
            return None
        return GroupSnapshot(group_id, group.to_record(), list(group.offsets.committed.values()))

    def load_group(self, snapshot: GroupSnapshot, now_ms: int) -> list[Output]:
        """Take a group over (shard failover): Stable with its members if it has any, else Empty;
        same generation, so members keep heartbeating. Rebalances if over `group.max_size`."""
        out = self._begin(now_ms)
        if snapshot.group_id in self._groups:
            self._unload(self._groups[snapshot.group_id])
        group = build_group(snapshot, now_ms)
        self._groups[group.group_id] = group
        out.append(StateChanged(group.group_id, None, group.state))
        for m in group.members.values():
            self._schedule_session(group, m, m.session_timeout_ms)
        if len(group.members) > self.config.group_max_size:
            self._prepare_rebalance(group)
        return out

    def resume(self, now_ms: int) -> list[Output]:
        """The node answered COORDINATOR_NOT_AVAILABLE for a while (its ZooKeeper was away) and
        serves again with the groups it kept: members could not heartbeat meanwhile, so each gets
        a full session timeout from now before its timer may fire, as when a group is loaded.
        Call it before any other input at `now_ms`."""
        self._now = now_ms
        for group in self._groups.values():
            for m in group.members.values():
                if m.session_deadline is not None:
                    self._schedule_session(group, m, m.session_timeout_ms)
        return self._begin(now_ms)

    def unload_group(self, group_id: str, now_ms: int) -> list[Output]:
        """Stop serving a group (its shard moved away): Dead, parked requests get NOT_COORDINATOR."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is not None:
            self._unload(group)
        return out

    def delete_topics(self, topics: Iterable[str], now_ms: int) -> list[Output]:
        """Topics were deleted: drop their offsets from every group at once (§11)."""
        out = self._begin(now_ms)
        gone = frozenset(topics)
        for group in list(self._groups.values()):
            tps = [tp for tp in group.offsets.committed if tp.topic in gone]
            self._remove_offsets(group, tps)
        return out

    def expire_offsets(self, now_ms: int) -> list[Output]:
        """Run the offset retention check now (it also runs every retention check interval)."""
        out = self._begin(now_ms)
        self._expire_offsets()
        return out

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def group_state(self, group_id: str) -> GroupState | None:
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def stats(self) -> dict[str, tuple[GroupState, int]]:
        """`{group_id: (state, member count)}` of every group held, for metrics."""
        return {gid: (g.state, len(g.members)) for gid, g in self._groups.items()}

    # ================================================================== plumbing

    def _begin(self, now_ms: int) -> list[Output]:
        self._now = now_ms
        out = self._out = []
        if self._next_retention_check is None:
            self._next_retention_check = now_ms + self.config.offsets_retention_check_interval_ms
        heap = self._heap
        if heap and heap[0][0] < now_ms:
            self._fire_timers(now_ms)
        if self._next_retention_check < now_ms:
            self._next_retention_check = now_ms + self.config.offsets_retention_check_interval_ms
            self._expire_offsets()
        return out

    def _respond(self, token: Any, body: Response) -> None:
        self._out.append(Respond(token, body))

    def _transition(self, group: Group, target: GroupState) -> None:
        old = group.transition_to(target, self._now)
        self._out.append(StateChanged(group.group_id, old, target))

    def _live(self, group: Group) -> bool:
        return self._groups.get(group.group_id) is group and group.state is not DEAD

    def _create_group(self, group_id: str) -> Group:
        group = self._groups[group_id] = Group(group_id, self._now)
        self._out.append(StateChanged(group_id, None, EMPTY))
        return group

    def _expect(self, pending: PendingWrite) -> int:
        """The token of a write whose outcome `persisted` will report, remembered with `pending`."""
        self._write_seq += 1
        token = self._write_seq
        self._pending_writes[token] = pending
        return token

    def _write(self, write: Write) -> None:
        self._out.append(write)

    def _remove_group(self, group: Group) -> None:
        """Dead and gone (deleted, or Empty with no offsets left); the store forgets it too."""
        self._transition(group, DEAD)
        del self._groups[group.group_id]
        self._write(DeleteGroup(group.group_id))

    def _unload(self, group: Group) -> None:
        del self._groups[group.group_id]
        self._transition(group, DEAD)
        # Kafka answers parked JoinGroups (PreparingRebalance) and SyncGroups (Stable,
        # CompletingRebalance); any other parked request — only a static replacement awaiting its
        # write — is answered the same way rather than left hanging.
        for m in group.members.values():
            if m.awaiting_join:
                self._respond(
                    group.unpark_join(m),
                    JoinGroupResponse(error_code=E.NOT_COORDINATOR, member_id=m.member_id),
                )
            if m.awaiting_sync:
                self._respond(group.unpark_sync(m), SyncGroupResponse(error_code=E.NOT_COORDINATOR))

    # ------------------------------------------------------------------- timers

    def _push(self, deadline: int, kind: int, group: Group, key: Any) -> None:
        heappush(self._heap, (deadline, next(self._seq), kind, group, key))

    def _schedule_session(self, group: Group, m: Member, timeout_ms: int) -> None:
        """(Re)start a member's expiry timer (§6.3): O(1), the heap entry moves lazily."""
        deadline = self._now + timeout_ms
        m.session_deadline = deadline
        hd = m.heap_deadline
        if hd is None or deadline < hd:
            m.heap_deadline = deadline
            heappush(self._heap, (deadline, next(self._seq), _SESSION, group, m))

    def _add_pending_member(self, group: Group, member_id: str, timeout_ms: int) -> None:
        deadline = self._now + timeout_ms
        group.pending_members[member_id] = deadline
        self._push(deadline, _PENDING, group, member_id)

    def _timer_is_stale(self, deadline: int, kind: int, group: Group, key: Any) -> bool:
        if self._groups.get(group.group_id) is not group or group.state is DEAD:
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

    def _fire_timers(self, now: int) -> None:
        heap = self._heap
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
                    self._try_complete_join(group)
            elif kind == _JOIN:
                self._on_join_timeout(group, key)
            else:
                group.sync_op = None
                self._on_pending_sync_expired(group, key)

    def _on_session_expired(self, group: Group, m: Member) -> None:
        # A parked member is "satisfied" unless it is new (§6.3); it is not rescheduled here —
        # join completion or assignment propagation schedules its next timer.
        m.session_deadline = None
        if not m.is_new and (m.awaiting_join or m.awaiting_sync):
            return
        self._remove_member_and_update_group(group, m)

    # ============================================================ core procedures

    def _validate_member(self, group: Group, member_id: str, instance_id: str | None) -> int:
        """§2.2: the instance id (if any) must map to this member id, which must be a member."""
        if instance_id is not None:
            current = group.static_members.get(instance_id)
            if current is None:
                return E.UNKNOWN_MEMBER_ID
            if current != member_id:
                return E.FENCED_INSTANCE_ID
        if member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        return E.NONE

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        req: Any,
        protocols: list,
        token: Any,
        client_id: str,
        client_host: str,
    ) -> None:
        """§7.1."""
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
        self._schedule_session(group, m, self.config.new_member_join_timeout_ms)
        if group.can_rebalance:
            self._prepare_rebalance(group)

    def _update_member_and_park(self, group: Group, m: Member, protocols: list, req: Any, token: Any) -> None:
        """§7.2; a JoinGroup already parked by this member is replaced, never answered (§14.6)."""
        group.update(m, protocols, req.rebalance_timeout_ms, req.session_timeout_ms)
        had, old = group.park_join(m, token)
        if had:
            self._out.append(Discarded(old))

    def _prepare_rebalance(self, group: Group) -> None:
        """§7.3."""
        if group.state is COMPLETING_REBALANCE:
            for m in group.members.values():
                m.assignment = b""
            self._propagate_assignment(group, E.REBALANCE_IN_PROGRESS)
        group.sync_op = None
        group.pending_sync_members.clear()
        if group.state is EMPTY:
            delay = self.config.group_initial_rebalance_delay_ms
            op = _DelayedJoin(self._now + delay, True, delay, max(group.rebalance_timeout_ms() - delay, 0))
        else:
            op = _DelayedJoin(self._now + group.rebalance_timeout_ms())
        self._transition(group, PREPARING_REBALANCE)
        group.join_op = op
        self._push(op.deadline, _JOIN, group, op)
        if op.initial and op.delay_ms == 0:
            self._on_join_timeout(group, op)  # §6.2: with D = 0 the first window expires at once
        else:
            self._try_complete_join(group)

    def _maybe_prepare_rebalance(self, group: Group) -> None:
        if group.can_rebalance:
            self._prepare_rebalance(group)

    def _try_complete_join(self, group: Group) -> None:
        """DelayedJoin completes early once everyone joined; InitialDelayedJoin never does (§6)."""
        op = group.join_op
        if op is not None and not op.initial and group.has_all_members_joined():
            group.join_op = None
            self._complete_join(group)

    def _on_join_timeout(self, group: Group, op: _DelayedJoin) -> None:
        group.join_op = None
        if op.initial and group.new_member_added and op.remaining_ms != 0:
            # §6.2: extend by a window of min(D, R) only if someone new arrived in this one.
            group.new_member_added = False
            delay = min(self.config.group_initial_rebalance_delay_ms, op.remaining_ms)
            nxt = _DelayedJoin(self._now + delay, True, delay, max(op.remaining_ms - op.delay_ms, 0))
            group.join_op = nxt
            self._push(nxt.deadline, _JOIN, group, nxt)
            if delay == 0:
                self._on_join_timeout(group, nxt)
        else:
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        """§7.5: drop dynamic members that did not rejoin, elect, vote, start the next generation."""
        for m in [m for m in group.members.values() if not m.awaiting_join and m.group_instance_id is None]:
            group.remove(m)
            m.session_deadline = None
            if m.awaiting_sync:
                self._out.append(Discarded(group.unpark_sync(m)))
        if group.state is DEAD:
            return
        if not group.elect_joined_leader() and group.members:
            # Only non-rejoined static members are left: wait for them (or their expiry).
            op = _DelayedJoin(self._now + group.rebalance_timeout_ms())
            group.join_op = op
            self._push(op.deadline, _JOIN, group, op)
            return
        group.generation_id += 1
        group.pending_sync_members.clear()
        # Kafka leaves a flag set during the last window behind; clearing it keeps §6.2's promise
        # that a group coming back from Empty waits exactly one window.
        group.new_member_added = False
        if not group.members:
            group.protocol_name = None
            group.subscribed_topics = group.compute_subscribed_topics()
            self._transition(group, EMPTY)
            self._write(WriteGroupMetadata(group.group_id, group.to_record()))
            return
        group.protocol_name = group.select_protocol()
        group.subscribed_topics = group.compute_subscribed_topics()
        self._transition(group, COMPLETING_REBALANCE)
        leader_id = group.leader_id
        pending_sync = group.pending_sync_members
        for mid, m in group.members.items():
            if m.awaiting_join:
                token = group.unpark_join(m)
                self._respond(
                    token, self._join_ok(group, mid, group.member_list() if mid == leader_id else [])
                )
            self._schedule_session(group, m, m.session_timeout_ms)
            m.is_new = False
            pending_sync.add(mid)
        op = _DelayedSync(self._now + group.rebalance_timeout_ms(), group.generation_id)
        group.sync_op = op
        self._push(op.deadline, _SYNC, group, op)

    def _on_pending_sync_expired(self, group: Group, op: _DelayedSync) -> None:
        """§6.4: members that never sent SyncGroup are removed — even once the group is Stable."""
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
        self._prepare_rebalance(group)

    def _remove_member_and_update_group(self, group: Group, m: Member) -> None:
        """§7.4 (leave, session expiry)."""
        if m.awaiting_join:
            self._respond(
                group.unpark_join(m), JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id="")
            )
        if m.awaiting_sync:
            # Kafka removes the member without answering its parked SyncGroup.
            self._out.append(Discarded(group.unpark_sync(m)))
        group.remove(m)
        m.session_deadline = None
        state = group.state
        if state is STABLE or state is COMPLETING_REBALANCE:
            self._prepare_rebalance(group)
        elif state is PREPARING_REBALANCE:
            self._try_complete_join(group)

    def _propagate_assignment(self, group: Group, error: int) -> None:
        """Answer every parked SyncGroup with its member's assignment (or the error) (§4)."""
        if error == E.NONE:
            ptype, pname = group.protocol_type, group.protocol_name
        else:
            ptype = pname = None
        for m in group.members.values():
            if m.awaiting_sync:
                token = group.unpark_sync(m)
                self._respond(
                    token,
                    SyncGroupResponse(
                        error_code=error, protocol_type=ptype, protocol_name=pname, assignment=m.assignment
                    ),
                )
                self._schedule_session(group, m, m.session_timeout_ms)

    def _join_ok(self, group: Group, member_id: str, members: list[JoinGroupMember]) -> JoinGroupResponse:
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
