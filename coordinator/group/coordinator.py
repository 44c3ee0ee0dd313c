"""The group coordinator core: Kafka's classic group protocol as a pure, sans-IO state machine.

Requests and the current time go in; responses (immediate or released later), writes, state
changes and timer deadlines come out. There are no sockets, no ZooKeeper and no clock in the core —
the driver (`coordinator/node/server.py`) owns those. Behaviour is Kafka's classic group coordinator
(docs/coordinator-core.md) with the choices of docs/protocol.md.

`GroupCoordinator` is the core's one entry point. As Kafka's `GroupCoordinatorShard` composes a
`GroupMetadataManager` and an `OffsetMetadataManager`, it composes two parts that share one
`CoreContext` (`coordinator/group/context.py`: settings, groups, the input being handled):

* the membership part: `MembershipManager` (`coordinator/group/membership_manager.py`) answers
  JoinGroup, SyncGroup, Heartbeat, LeaveGroup, DescribeGroups and ListGroups; `GroupManager`
  (`coordinator/group/group_manager.py`) holds the procedures they share — members added and removed,
  the rebalance phases, and the timers that drive them;
* the offsets part: `OffsetManager` (`coordinator/group/offset_manager.py`) answers OffsetCommit,
  OffsetFetch and OffsetDelete and runs offset retention, asking the `GroupManager` about members;

and itself routes each request to its part, runs DeleteGroups (which spans both) and hands each
write's outcome back to the part that waits for it. A group's states and their valid previous
states are in `coordinator/group/state.py`, its members in `coordinator/group/metadata.py`.

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
requests arrive already validated by a codec (`coordinator/wire/codec.py`).
`IllegalStateTransition` can only come from a bug in this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from coordinator.group.context import CoordinatorConfig, CoreContext, GroupCheck
from coordinator.group.group_manager import GroupManager
from coordinator.group.membership_manager import AssignmentWrite, MembershipManager, StaticReplacementWrite
from coordinator.group.messages import (
    Discarded,
    GroupRecord,
    GroupSnapshot,
    Output,
    Respond,
    StateChanged,
    Write,
)
from coordinator.group.offset_manager import OffsetCommitWrite, OffsetManager
from coordinator.group.state import (
    DEAD,
    EMPTY,
    PREPARING_REBALANCE,
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransition,
)
from coordinator.wire import errors as E
from coordinator.wire.schema import (
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
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    ErrorResponse,
    Message,
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


class GroupCoordinator:
    """All groups of one coordinator node (the groups of the shards it leads)."""

    def __init__(
        self,
        config: CoordinatorConfig | None = None,
        *,
        member_id_factory: Callable[[str], str] | None = None,
    ) -> None:
        self.config = config or CoordinatorConfig()
        self._ctx = ctx = CoreContext(self.config)
        self._groups = ctx.groups
        self.group_manager = GroupManager(ctx)
        self.membership = MembershipManager(ctx, self.group_manager, member_id_factory)
        self.offsets = OffsetManager(ctx, self.group_manager)
        self._heap = self.group_manager.heap
        self._next_retention_check: int | None = None
        m, o = self.membership, self.offsets
        self._handlers = {
            JOIN_GROUP: m.join_group,
            SYNC_GROUP: m.sync_group,
            HEARTBEAT: m.heartbeat,
            LEAVE_GROUP: m.leave_group,
            OFFSET_COMMIT: o.offset_commit,
            OFFSET_FETCH: o.offset_fetch,
            DESCRIBE_GROUPS: m.describe_groups,
            LIST_GROUPS: m.list_groups,
            DELETE_GROUPS: self._delete_groups,
            OFFSET_DELETE: o.offset_delete,
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
        """Handle one request (`api_key`'s struct of `coordinator/wire/schema.py`, as a codec decoded
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
        candidates = []
        deadline = self.group_manager.next_deadline()
        if deadline is not None:
            candidates.append(deadline)
        if self._next_retention_check is not None:
            candidates.append(self._next_retention_check)
        return min(candidates) if candidates else None

    def persisted(
        self, token: int, ok: bool, now_ms: int, error_code: int = E.COORDINATOR_NOT_AVAILABLE
    ) -> list[Output]:
        """Report the outcome of a `Write` that carried `token`. `error_code` is the storage error on
        failure (Kafka's codes; the core maps it as Kafka does for group and offset writes — e.g.
        NOT_COORDINATOR when fenced)."""
        out = self._begin(now_ms)
        match self._ctx.take_pending(token):
            case AssignmentWrite() as pending:
                self.membership.assignment_persisted(pending, ok, error_code)
            case StaticReplacementWrite() as pending:
                self.membership.static_replacement_persisted(pending, ok, error_code)
            case OffsetCommitWrite() as pending:
                self.offsets.commit_persisted(pending, token, ok, error_code)
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
        self.group_manager.load_group(snapshot)
        return out

    def resume(self, now_ms: int) -> list[Output]:
        """The node answered COORDINATOR_NOT_AVAILABLE for a while (its ZooKeeper was away) and
        serves again with the groups it kept: members could not heartbeat meanwhile, so each gets
        a full session timeout from now before its timer may fire, as when a group is loaded.
        Call it before any other input at `now_ms`."""
        self._ctx.now = now_ms
        self.group_manager.resume()
        return self._begin(now_ms)

    def unload_group(self, group_id: str, now_ms: int) -> list[Output]:
        """Stop serving a group (its shard moved away): Dead, parked requests get NOT_COORDINATOR."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is not None:
            self.group_manager.unload(group)
        return out

    def delete_topics(self, topics: Iterable[str], now_ms: int) -> list[Output]:
        """Topics were deleted: drop their offsets from every group at once."""
        out = self._begin(now_ms)
        self.offsets.delete_topics(topics)
        return out

    def expire_offsets(self, now_ms: int) -> list[Output]:
        """Run the offset retention check now (it also runs every retention check interval)."""
        out = self._begin(now_ms)
        self.offsets.expire_offsets()
        return out

    def request_rebalance(self, group_id: str, now_ms: int) -> list[Output]:
        """Start a rebalance of a group that can rebalance (scheme two: a subscribed topic grew)."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is not None:
            self.group_manager.maybe_prepare_rebalance(group)
        return out

    def release_members(self, group_id: str, now_ms: int) -> list[Output]:
        """The group turns into a consumer-protocol group (KIP-848's online upgrade, done by
        `server_side/group_conversion.py`): parked JoinGroup/SyncGroup get REBALANCE_IN_PROGRESS,
        the members leave this core without a rebalance, the offsets stay here."""
        out = self._begin(now_ms)
        group = self._groups.get(group_id)
        if group is not None:
            self.group_manager.release_members(group)
        return out

    def adopt_members(self, record: GroupRecord, now_ms: int) -> list[Output]:
        """A consumer-protocol group of classic members only turns back into a classic group
        (KIP-848's online downgrade): `record`'s members and generation, this core's offsets, and a
        rebalance at once."""
        out = self._begin(now_ms)
        self.group_manager.adopt_members(record)
        return out

    def group_ids(self) -> list[str]:
        return list(self._groups)

    def protocol_type(self, group_id: str) -> str | None:
        group = self._groups.get(group_id)
        return None if group is None else group.protocol_type

    def generation(self, group_id: str) -> int:
        """The group's generation id (-1 for a group this node does not hold)."""
        group = self._groups.get(group_id)
        return -1 if group is None else group.generation_id

    def group_state(self, group_id: str) -> GroupState | None:
        group = self._groups.get(group_id)
        return None if group is None else group.state

    def heartbeat_due(self, group_id: str, member_id: str, generation_id: int) -> int:
        """Whether a member that holds `generation_id` would learn something from a heartbeat now
        (WatchGroup), by the Heartbeat's own rules: REBALANCE_IN_PROGRESS when its heartbeat would
        be answered REBALANCE_IN_PROGRESS or ILLEGAL_GENERATION (rejoin), the error when it would
        be answered another, NONE when it would only say "carry on". No side effect: unlike a
        heartbeat, it moves no session deadline."""
        group = self._groups.get(group_id)
        if group is None or member_id not in group.members:
            return E.UNKNOWN_MEMBER_ID
        if group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if group.state is PREPARING_REBALANCE or group.generation_id != generation_id:
            return E.REBALANCE_IN_PROGRESS
        return E.NONE

    def stats(self) -> dict[str, tuple[GroupState, int]]:
        """`{group_id: (state, member count)}` of every group held, for metrics."""
        return {gid: (g.state, len(g.members)) for gid, g in self._groups.items()}

    # ================================================================== plumbing

    def _begin(self, now_ms: int) -> list[Output]:
        """A new input at `now_ms`: fire every timer already due, then the retention check."""
        ctx = self._ctx
        ctx.now = now_ms
        out = ctx.out = []  # handed to the driver as is: a new list per input
        if self._next_retention_check is None:
            self._next_retention_check = now_ms + self.config.offsets_retention_check_interval_ms
        heap = self._heap
        if heap and heap[0][0] < now_ms:
            self.group_manager.fire_timers(now_ms)
        if self._next_retention_check < now_ms:
            self._next_retention_check = now_ms + self.config.offsets_retention_check_interval_ms
            self.offsets.expire_offsets()
        return out

    # ================================================================ DeleteGroups

    def _delete_groups(
        self, req: DeleteGroupsRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        """Both parts: an Empty group loses its offsets, then the group itself."""
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
                    self.offsets.delete_all(group)
                    self.group_manager.remove_group(group)
                    err = E.NONE
                else:
                    err = E.NON_EMPTY_GROUP
            results.append(DeleteGroupsResult(group_id=gid, error_code=err))
        self._ctx.respond(token, DeleteGroupsResponse(results=results))
