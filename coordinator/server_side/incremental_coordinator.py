"""Scheme two's incremental form on the server: ConsumerGroupHeartbeat and the members' timers.

The coordinator assigns, and each member converges on its own (the model — groups, epochs, target
assignments, the stored record — is in `incremental_groups`; this module answers the heartbeats
and runs the timers).

KIP-848's consumer group protocol (docs/scheme-two.md, "The incremental form"): there is no
group-wide barrier and no join phase. Every member sends ConsumerGroupHeartbeat; the coordinator
keeps

* a **group epoch**, bumped whenever the membership or a subscription changes (or a subscribed
  topic's size, which the node watches);
* a **target assignment** per group epoch, computed by a server-side assignor over every member's
  subscription: `uniform` (sticky: a partition stays with its owner unless the balance needs it
  elsewhere) or `range`;
* per member, a **member epoch** and its current assignment, which converges on the target
  member by member: a partition that moves is first revoked from its owner (the owner learns it in
  its next heartbeat answer, commits, and heartbeats again without it), and only then given to
  its new owner, in that member's next heartbeat answer. A member whose partitions do not move is
  never asked to stop anything: its epoch is bumped in its next heartbeat answer.

Commits are fenced by member epoch (OffsetCommit's `generation_id` carries it): only the member's
current epoch commits. A member that misses its session timeout, or holds a partition to revoke
for longer than its rebalance timeout, is removed and its partitions go to their targets.

The group's state is written to ZooKeeper (as a group record of protocol type
`consumer-incremental`) before a heartbeat that changed it is answered, so another node taking the
group over continues with the same epochs and assignments. Offsets are the classic core's
(`inner`), which this class wraps: it answers ConsumerGroupHeartbeat and the classic APIs for its
own groups and passes everything else through. Pure: requests, topic sizes and the time in,
outputs out.
"""

from __future__ import annotations

import heapq
import re
import uuid
from typing import Any

import msgspec

from coordinator.assignors.consumer_protocol import by_topic, partitions_of
from coordinator.group.messages import GroupSnapshot, Output, Respond, WriteGroupMetadata
from coordinator.server_side.classic_members import ClassicMembers
from coordinator.server_side.group_conversion import (
    MigrationPolicy,
    from_classic,
    may_downgrade,
    to_classic,
    upgrade_refusal,
)
from coordinator.server_side.incremental_admin import IncrementalAdmin
from coordinator.server_side.incremental_groups import (
    INCREMENTAL_ASSIGNORS,
    INCREMENTAL_PROTOCOL_TYPE,
    LEFT_STATIC_EPOCH,
    Group,
    Member,
    members_of,
    resolve,
)
from coordinator.server_side.incremental_groups import AnswerWrite as _Write
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    CONSUMER_GROUP_DESCRIBE,
    CONSUMER_GROUP_HEARTBEAT,
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    SERVER_HEARTBEAT,
    SERVER_JOIN_GROUP,
    SYNC_GROUP,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)

_SESSION, _REVOKE = 0, 1
#: The heartbeat interval suggested to a member waiting for partitions its target holds that are
#: still being released: it comes back soon for them instead of a whole interval later.
WAITING_HEARTBEAT_MS = 10


def _member_id(group_id: str) -> str:
    return f"{group_id}-{uuid.uuid4()}"


class IncrementalCoordinator(IncrementalAdmin, ClassicMembers):
    """Incremental scheme-two groups in front of `inner` (a `ServerAssignedCoordinator`)."""

    def __init__(
        self,
        inner: Any,
        *,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        heartbeat_interval_ms: int = 5000,
        migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL,
    ) -> None:
        self.inner = inner
        self.migration_policy = migration_policy
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.groups: dict[str, Group] = {}
        self.topic_names: frozenset[str] | None = None  # every topic, once the node listed them
        self._timers: list[tuple[int, int, str, str, int]] = []  # (deadline, kind, group, member, id)

    # ------------------------------------------------------------------ the core's interface

    @property
    def partitions(self) -> dict[str, int]:
        return self.inner.partitions

    def handle(
        self,
        api_key: int,
        req: Any,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
        request_token: Any = None,
        group_check: Any = None,
    ) -> list[Output]:
        out = self._fire(now_ms)
        kw = dict(client_id=client_id, client_host=client_host, group_check=group_check)
        gid = getattr(req, "group_id", None)
        if api_key == CONSUMER_GROUP_HEARTBEAT:
            out.extend(self._heartbeat(req, now_ms, request_token, **kw))
        elif gid in self.groups and api_key == JOIN_GROUP and not self.groups[gid].members:
            # An empty consumer-protocol group (offsets only) becomes a classic group: Kafka's rule.
            del self.groups[gid]
            out.extend(self.inner.handle(api_key, req, now_ms, request_token=request_token, **kw))
        elif gid in self.groups and api_key in (JOIN_GROUP, SYNC_GROUP, HEARTBEAT, LEAVE_GROUP):
            out.extend(self._classic(api_key, req, now_ms, request_token, **kw))  # classic members
        elif gid in self.groups and api_key == SERVER_JOIN_GROUP:
            # The draft's members cannot enter an incremental group.
            body = P.precheck_error_body(api_key, req, E.INCONSISTENT_GROUP_PROTOCOL)
            out.append(Respond(request_token, body))
        elif gid in self.groups and api_key == SERVER_HEARTBEAT:
            out.append(Respond(request_token, P.precheck_error_body(api_key, req, E.UNKNOWN_MEMBER_ID)))
        elif gid in self.groups and api_key == OFFSET_COMMIT:
            out.extend(self._offset_commit(req, now_ms, request_token, **kw))
        elif gid in self.groups and api_key == OFFSET_FETCH:
            out.extend(self._offset_fetch(req, now_ms, request_token, **kw))
        elif api_key == CONSUMER_GROUP_DESCRIBE:
            out.extend(self._consumer_describe(req, request_token, **kw))
        elif api_key == DESCRIBE_GROUPS and any(g in self.groups for g in req.groups):
            out.extend(self._describe(req, now_ms, request_token, **kw))
        elif api_key == LIST_GROUPS:
            out.extend(
                self._list(req, self.inner.handle(api_key, req, now_ms, request_token=request_token, **kw))
            )
        elif api_key == DELETE_GROUPS and any(g in self.groups for g in req.groups_names):
            out.extend(self._delete(req, now_ms, request_token, **kw))
        else:
            out.extend(self.inner.handle(api_key, req, now_ms, request_token=request_token, **kw))
        return out

    def tick(self, now_ms: int) -> list[Output]:
        return self._fire(now_ms) + self.inner.tick(now_ms)

    def next_deadline(self) -> int | None:
        mine = self._timers[0][0] if self._timers else None
        theirs = self.inner.next_deadline()
        return min((d for d in (mine, theirs) if d is not None), default=None)

    def persisted(self, token: Any, ok: bool, now_ms: int, error_code: int = E.COORDINATOR_NOT_AVAILABLE):
        if isinstance(token, _Write):
            if token.respond is None:
                return []
            if ok:
                return [token.respond]
            body, code = token.respond.body, E.map_group_write_error(error_code)
            if isinstance(body, ConsumerGroupHeartbeatResponse):
                failed = msgspec.structs.replace(
                    body,
                    error_code=code,
                    error_message="the group's state could not be written to ZooKeeper; heartbeat again",
                    assignment=None,
                )
            else:  # a classic member's JoinGroup
                failed = msgspec.structs.replace(body, error_code=code)
            return [Respond(token.respond.request_token, failed)]
        return self.inner.persisted(token, ok, now_ms, error_code)

    def snapshot(self, group_id: str) -> GroupSnapshot | None:
        return self.inner.snapshot(group_id)

    def load_group(self, snapshot: GroupSnapshot, now_ms: int) -> list[Output]:
        """Take a group over: an incremental one continues with its stored epochs and assignments."""
        record = snapshot.group
        if record is None or record.protocol_type != INCREMENTAL_PROTOCOL_TYPE:
            return self.inner.load_group(snapshot, now_ms)
        group = Group(record.group_id, record.protocol_name or "uniform", record.generation_id)
        group.assignment_epoch = record.generation_id
        group.state_timestamp = record.state_timestamp or now_ms
        for member in members_of(record):
            group.members[member.member_id] = member
            group.target[member.member_id] = member.assigned
            self._schedule_session(group, member, now_ms)
            if member.revoking:
                member.revoke_deadline = now_ms + member.rebalance_timeout_ms
                self._push(member.revoke_deadline, _REVOKE, group, member)
        self.groups[group.group_id] = group
        out = self.inner.load_group(GroupSnapshot(snapshot.group_id, None, snapshot.offsets), now_ms)
        # The target is recomputed once the topics' sizes are known (a change in them meanwhile
        # is the draft's "failure at step 1": it rebalances).
        group.sizes = {}
        out.extend(self._watch(group))
        if all(t in self.partitions for t in group.topics()):
            group.retarget(self.partitions, bump=False)
        return out

    def resume(self, now_ms: int) -> list[Output]:
        for group in self.groups.values():
            for m in group.members.values():
                self._schedule_session(group, m, now_ms)
        return self.inner.resume(now_ms)

    def unload_group(self, group_id: str, now_ms: int) -> list[Output]:
        self.groups.pop(group_id, None)
        return self.inner.unload_group(group_id, now_ms)

    def delete_topics(self, topics, now_ms: int) -> list[Output]:
        return self.inner.delete_topics(topics, now_ms)

    def expire_offsets(self, now_ms: int) -> list[Output]:
        return self.inner.expire_offsets(now_ms)

    def group_ids(self) -> list[str]:
        return sorted(set(self.inner.group_ids()) | set(self.groups))

    def group_state(self, group_id: str):
        return self.inner.group_state(group_id)

    def heartbeat_due(self, group_id: str, member_id: str, generation_id: int) -> int:
        """WatchGroup's question (the classic core's rule for its groups): would the member's next
        heartbeat move it? For an incremental group, `Group.has_news`."""
        group = self.groups.get(group_id)
        if group is None:
            return self.inner.heartbeat_due(group_id, member_id, generation_id)
        member = group.members.get(member_id)
        if member is None or member.classic is not None:
            return E.UNKNOWN_MEMBER_ID
        return E.REBALANCE_IN_PROGRESS if group.has_news(member, generation_id) else E.NONE

    def stats(self):
        return self.inner.stats()

    def topics_changed(self, counts: dict[str, int], now_ms: int) -> list[Output]:
        out = self.inner.topics_changed(counts, now_ms)
        for group in self.groups.values():
            topics = group.topics()
            if topics and all(t in self.partitions for t in topics):
                if any(group.sizes.get(t) != self.partitions[t] for t in topics):
                    # A new epoch, unless the current one still waits for its target (or the
                    # group was just taken over).
                    bump = bool(group.sizes) and group.assignment_epoch == group.epoch
                    group.retarget(self.partitions, bump=bump)
                    out.append(WriteGroupMetadata(group.group_id, group.record(), _Write(None)))
        return out

    def topics_listed(self, names: frozenset[str], now_ms: int) -> list[Output]:
        """Every topic there is (the node's watch on /brokers/topics): the members subscribed by
        regex are resolved again; a group where one's topics changed gets a new epoch and target."""
        self.topic_names = frozenset(names)
        out: list[Output] = []
        for group in self.groups.values():
            moved = False
            for m in group.members.values():
                if m.regex is not None and (topics := resolve(m.names, m.regex, names)) != m.topics:
                    m.topics, moved = topics, True
            if moved:
                group.epoch += 1
                group.retarget(self.partitions, bump=False)
                out.extend(self._watch(group))
                out.append(WriteGroupMetadata(group.group_id, group.record(), _Write(None)))
        return out

    # ------------------------------------------------------------------ ConsumerGroupHeartbeat

    def _heartbeat(self, req: ConsumerGroupHeartbeatRequest, now: int, token: Any, **kw) -> list[Output]:
        gid, mid, epoch = req.group_id, req.member_id, req.member_epoch

        def error(code: int, message: str | None) -> list[Output]:
            return [Respond(token, ConsumerGroupHeartbeatResponse(code, message, member_id=mid))]

        if not gid:
            return error(E.INVALID_GROUP_ID, "the group id is empty")
        check = kw["group_check"]
        if check is not None and (code := check(gid)):
            return error(code, None)
        if req.subscribed_topic_regex:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as exc:
                return error(E.INVALID_REGULAR_EXPRESSION, f"subscribed_topic_regex: {exc}")
        group = self.groups.get(gid)
        if group is None:
            if epoch != 0:
                return error(E.UNKNOWN_MEMBER_ID, f"group {gid!r} has no member {mid!r}; join with epoch 0")
            if self.inner.core.stats().get(gid, (None, 0))[1] and (
                refusal := upgrade_refusal(self.migration_policy, self.inner.snapshot(gid).group)
            ):
                return error(E.GROUP_ID_NOT_FOUND, refusal)  # Kafka 4.0: "not a consumer group"
        if epoch == 0:
            return self._join(group, req, now, token, **kw)
        if req.instance_id is not None:  # a static member: its instance id says who it is
            holder = group.holder(req.instance_id)
            if holder is None:
                return error(E.UNKNOWN_MEMBER_ID, f"no member of {gid!r} has instance id {req.instance_id!r}")
            if holder.member_id != mid:
                return error(
                    E.FENCED_INSTANCE_ID, f"instance id {req.instance_id!r} is held by another member"
                )
        if mid not in group.members:
            return error(E.UNKNOWN_MEMBER_ID, f"{mid!r} is not a member of {gid!r}; join with epoch 0")
        if group.members[mid].classic is not None:
            return error(E.UNKNOWN_MEMBER_ID, f"{mid!r} is a classic member of {gid!r}: it uses JoinGroup")
        member = group.members[mid]
        if epoch < 0:  # leaving: -1, or -2 for a static member that will be replaced
            if epoch == LEFT_STATIC_EPOCH and req.instance_id is not None:
                member.left = True  # its partitions wait for its replacement (`_join`) or its session's end
                member.revoking, member.revoke_deadline = frozenset(), None  # it let go of them on leaving
                self._schedule_session(group, member, now)
            else:
                self._remove(group, member, now)
            resp = ConsumerGroupHeartbeatResponse(E.NONE, member_id=mid, member_epoch=epoch)
            return self._written(group, now, Respond(token, resp))
        if member.left:
            return error(E.FENCED_MEMBER_EPOCH, f"{mid!r} left the group: rejoin with epoch 0")
        owned = None if req.topic_partitions is None else partitions_of(req.topic_partitions)
        holds_no_more = owned is not None and owned <= member.assigned
        nothing_to_revoke = member.assigned <= group.target.get(mid, frozenset()) and not member.revoking
        if member.epoch < epoch <= group.assignment_epoch and holds_no_more and nothing_to_revoke:
            # An epoch bump this node (or the one before a takeover) answered without writing it.
            member.previous_epoch, member.epoch = member.epoch, epoch
        if epoch != member.epoch and not (epoch == member.previous_epoch and holds_no_more):
            # Kafka's rule: a lost answer may leave the member one epoch behind, holding no more than
            # its assignment; anything else is a zombie.
            return error(
                E.FENCED_MEMBER_EPOCH,
                f"member epoch {epoch} is not {member.epoch}: rejoin with epoch 0",
            )
        self._schedule_session(group, member, now)
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        bump = self._subscribe(member, req)
        return self._answer(group, member, owned, now, token, bump, dirty=bump)

    def _subscribe(self, member: Member, req: ConsumerGroupHeartbeatRequest) -> bool:
        """Take the request's subscription (names, regex: None is unchanged, a regex "" is none);
        True if it changed."""
        names = member.names
        if req.subscribed_topic_names is not None:
            names = tuple(sorted(set(req.subscribed_topic_names)))
        regex = member.regex if req.subscribed_topic_regex is None else req.subscribed_topic_regex or None
        if (names, regex) == (member.names, member.regex):
            return False
        member.names, member.regex = names, regex
        member.topics = resolve(names, regex, self._known_topics())
        return True

    def _known_topics(self) -> frozenset[str]:
        return self.topic_names if self.topic_names is not None else frozenset(self.partitions)

    def _join(self, group: Group | None, req: ConsumerGroupHeartbeatRequest, now: int, token: Any, **kw):
        mid = req.member_id

        def error(code: int, message: str) -> list[Output]:
            return [Respond(token, ConsumerGroupHeartbeatResponse(code, message, member_id=mid))]

        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            return error(E.INVALID_REQUEST, "a joining member must give subscribed_topic_names or a regex")
        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            return error(E.INVALID_SESSION_TIMEOUT, "session_timeout_ms is outside the node's range")
        assignor = req.server_assignor or (group.assignor if group and group.members else "uniform")
        if assignor not in INCREMENTAL_ASSIGNORS:
            return error(
                E.UNSUPPORTED_ASSIGNOR, f"server_assignor {assignor!r} is not one of {INCREMENTAL_ASSIGNORS}"
            )
        if (
            group is not None
            and group.members
            and req.server_assignor
            and req.server_assignor != group.assignor
        ):
            return error(E.INCONSISTENT_GROUP_PROTOCOL, f"the group uses server_assignor {group.assignor!r}")
        held = group.holder(req.instance_id) if group is not None and req.instance_id is not None else None
        if held is not None and held.member_id != mid and not held.left:
            return error(
                E.UNRELEASED_INSTANCE_ID, f"instance id {req.instance_id!r} is held by another member"
            )
        upgraded: list[Output] = []
        if group is None:
            group, upgraded = self._upgraded(req.group_id, now)
            group = group or Group(req.group_id, assignor, state_timestamp=now)
            self.groups[req.group_id] = group
        group.assignor = assignor
        old = group.members.get(mid) if mid else None
        if old is not None and old is not held:
            self._remove(group, old, now, retarget=False)  # a fenced member rejoining: a new incarnation
        if not mid:
            mid = _member_id(req.group_id)
        member = Member(
            mid,
            kw["client_id"],
            kw["client_host"],
            req.session_timeout_ms,
            req.rebalance_timeout_ms if req.rebalance_timeout_ms > 0 else req.session_timeout_ms,
            (),
            instance_id=req.instance_id,
            rack_id=req.rack_id,
        )
        bump = self._subscribe(member, req)
        if held is not None and held.left:
            # A static member restarting: it takes over the one that left, its partitions and its
            # epoch, and nobody else moves unless its subscription differs.
            del group.members[held.member_id]
            group.target[mid] = group.target.pop(held.member_id, frozenset())
            member.epoch, member.previous_epoch, member.assigned = (
                held.epoch,
                held.previous_epoch,
                held.assigned,
            )
            bump = (member.names, member.regex, member.topics) != (held.names, held.regex, held.topics)
        elif held is not None:  # the holder itself rejoining after a fencing: a new incarnation
            self._remove(group, held, now, retarget=False)
        group.members[mid] = member
        self._schedule_session(group, member, now)
        return upgraded + self._answer(
            group, member, frozenset(), now, token, bump, dirty=True, had=frozenset()
        )

    def _answer(
        self,
        group: Group,
        member: Member,
        owned,
        now: int,
        token: Any,
        bump: bool,
        dirty: bool = False,
        had: frozenset | None = None,
    ):
        """Reconcile `member` and answer it; `bump`: its subscription changed (a new group epoch),
        `dirty`: the group's record changed, `had`: what the member holds before this answer
        (default: what the group thinks it holds)."""
        before = (member.assigned if had is None else had, member.revoking, group.epoch)
        out = self._watch(group)
        if bump:
            group.epoch += 1
            group.retarget(self.partitions, bump=False)
        if owned is not None and member.revoking and not (owned & member.revoking):
            member.revoking = frozenset()  # the member let them go (after committing)
            member.revoke_deadline = None
        self._reconcile(group, member, now)
        if owned is not None and member.revoking and not (owned & member.revoking):
            # This very heartbeat says the member does not hold what it now has to give up (it
            # had not taken it yet): nothing to wait for, as in Kafka's CurrentAssignmentBuilder.
            # Waiting would stall: the member sends its owned partitions only when they change.
            member.revoking, member.revoke_deadline = frozenset(), None
            self._reconcile(group, member, now)
        waiting = member.epoch == group.assignment_epoch and bool(
            group.target.get(member.member_id, frozenset()) - member.assigned
        )
        resp = ConsumerGroupHeartbeatResponse(
            E.NONE,
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=WAITING_HEARTBEAT_MS if waiting else self.heartbeat_interval_ms,
            assignment=by_topic(member.assigned),
        )
        if (member.assigned, member.revoking, group.epoch) == before and not dirty:
            # Unchanged, or only the member's epoch moved: not written (a node taking over accepts
            # the newer epoch of a member that holds no more than it knows; see `_heartbeat`).
            out.append(Respond(token, resp))
        elif member.assigned - before[0]:
            # A partition given is answered once it is written: another node taking the group over
            # must not give it to anyone else while this member fetches it.
            out.append(WriteGroupMetadata(group.group_id, group.record(), _Write(Respond(token, resp))))
        else:
            # Nothing given (a join, a revocation, a new epoch): losing this write can only make
            # another node think the member holds more, or fence it — never two owners.
            out.append(WriteGroupMetadata(group.group_id, group.record(), _Write(None)))
            out.append(Respond(token, resp))
        return out

    def _reconcile(self, group: Group, member: Member, now: int) -> None:
        """Move `member` toward its target: revoke first; take a partition only once it is free."""
        if group.assignment_epoch < group.epoch and member.epoch == 0 and not member.assigned:
            member.epoch = group.epoch  # a new member: its partitions come with the target
        if group.assignment_epoch < group.epoch or member.revoking:
            return  # no target for this epoch yet (topic sizes unknown), or waiting for a release
        target = group.target.get(member.member_id, frozenset())
        if member.epoch != group.assignment_epoch:
            to_revoke = member.assigned - target
            if to_revoke:
                member.assigned -= to_revoke
                member.revoking = to_revoke
                member.revoke_deadline = now + member.rebalance_timeout_ms
                self._push(member.revoke_deadline, _REVOKE, group, member)
                return
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch
        free = {tp for tp in target - member.assigned if group.owner(tp, member.member_id) is None}
        if free:
            member.assigned |= free

    def _remove(self, group: Group, member: Member, now: int, retarget: bool = True) -> None:
        group.members.pop(member.member_id, None)
        group.target.pop(member.member_id, None)
        group.epoch += 1
        group.state_timestamp = now
        if retarget:
            group.retarget(self.partitions, bump=False)

    # ------------------------------------------------------------------ timers

    def _push(self, deadline: int, kind: int, group: Group, member: Member) -> None:
        heapq.heappush(self._timers, (deadline, kind, group.group_id, member.member_id, id(member)))

    def _schedule_session(self, group: Group, member: Member, now: int) -> None:
        """Move the member's session deadline. One timer entry per member: a heartbeat pushes none
        while an entry at or before the new deadline is pending (it re-arms when it fires), so
        the heap holds one entry per member, not one per heartbeat."""
        member.session_deadline = now + member.session_timeout_ms
        if member.session_armed is None or member.session_armed > member.session_deadline:
            member.session_armed = member.session_deadline
            self._push(member.session_deadline, _SESSION, group, member)

    def _fire(self, now: int) -> list[Output]:
        out: list[Output] = []
        while self._timers and self._timers[0][0] < now:
            deadline, kind, gid, mid, ident = heapq.heappop(self._timers)
            group = self.groups.get(gid)
            member = group.members.get(mid) if group else None
            if member is None or id(member) != ident:
                continue
            if kind == _SESSION:
                if member.session_armed != deadline:
                    continue  # an entry replaced by an earlier one
                if member.session_deadline > deadline:  # heartbeats moved it: wait for the new one
                    member.session_armed = member.session_deadline
                    self._push(member.session_deadline, _SESSION, group, member)
                    continue
                member.session_armed = None
            if kind == _REVOKE and (member.revoke_deadline != deadline or not member.revoking):
                continue
            self._remove(group, member, now)
            out.extend(self._written(group, now))
        return out

    # ------------------------------------------------------------------ online upgrade, downgrade

    def _upgraded(self, gid: str, now: int) -> tuple[Group | None, list[Output]]:
        """The classic group `gid` (with members, of protocol type `consumer`: `upgrade_refusal`
        said yes) as a consumer-protocol group, its members out of the classic core; (None, [])
        when the classic core has no members in `gid`."""
        snapshot = self.inner.snapshot(gid)
        if snapshot is None or snapshot.group is None or not snapshot.group.members:
            return None, []
        group = from_classic(snapshot.group, now)
        out = self.inner._translate(self.inner.core.release_members(gid, now), now)
        for member in group.members.values():
            self._schedule_session(group, member, now)
        return group, out

    def _written(self, group: Group, now: int, respond: Respond | None = None) -> list[Output]:
        """After members were removed: the group's record written, `respond` once it is. A group
        left with classic members only turns back into a classic group first, if the policy says so."""
        if not may_downgrade(self.migration_policy, group):
            return [WriteGroupMetadata(group.group_id, group.record(), _Write(respond))]
        record = to_classic(group, now)
        del self.groups[group.group_id]
        adopted = self.inner._translate(self.inner.core.adopt_members(record, now), now)
        return [WriteGroupMetadata(group.group_id, record, _Write(respond)), *adopted]

    # ------------------------------------------------------------------ records

    def _watch(self, group: Group) -> list[Output]:
        return self.inner._watch(group.topics())
