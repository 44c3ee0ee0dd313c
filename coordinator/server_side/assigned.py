"""Scheme two on the classic core: the coordinator assigns the partitions itself.

The design of Kafka's 0.9 consumer-rewrite draft (docs/scheme-two.md): a member sends
ServerJoinGroup with its topics, session timeout and strategy and gets back its consumer id, the
generation and its partitions in one answer; it never talks to ZooKeeper, the coordinator alone
watches the subscribed topics' sizes.

A server-assigned group is a classic group of protocol type `consumer-server` that the coordinator
drives on its members' behalf, so the state machine, the ZooKeeper store, failover and offsets are
the classic ones:

* ServerJoinGroup becomes a JoinGroup; the MEMBER_ID_REQUIRED round trip is taken here, inside
  the node, so the new consumer id comes back in the one answer;
* when the join phase completes, the coordinator is the leader: it runs the strategy the group
  agreed on over every member's subscription and the topic sizes it watches, and sends every
  member's SyncGroup itself; each SyncGroup answer goes back as that member's ServerJoinGroup
  answer, with the new generation and its partitions;
* ServerHeartbeat is a Heartbeat whose REBALANCE_IN_PROGRESS is the draft's ILLEGAL_GENERATION
  ("stop fetching, commit, rejoin with your consumer id");
* a subscribed topic that grows (a `topics_changed` input) starts a rebalance.

Pure like the core it wraps: requests, topic sizes and the time go in; outputs come out, among
them `WatchTopics` (read these topics' partition counts and report every change). The classic
APIs pass through unchanged, except that a client may not join or sync a server-assigned group
with them, and DescribeGroups reports such a group in the draft's states.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

import msgspec

from coordinator.assignors.consumer_protocol import (
    SERVER_STRATEGIES,
    by_topic,
    join_protocols,
    partitions_of,
    perform_assignment,
)
from coordinator.assignors.payloads import decode_assignment, decode_subscription
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.messages import Discarded, GroupSnapshot, Output, Respond
from coordinator.group.metadata import SERVER_PROTOCOL_TYPE
from coordinator.group.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    HEARTBEAT,
    JOIN_GROUP,
    SERVER_HEARTBEAT,
    SERVER_JOIN_GROUP,
    SYNC_GROUP,
    DescribeGroupsResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupMember,
    JoinGroupRequest,
    JoinGroupResponse,
    Message,
    ServerHeartbeatResponse,
    ServerJoinGroupRequest,
    ServerJoinGroupResponse,
    SyncGroupAssignment,
    SyncGroupRequest,
    SyncGroupResponse,
)

#: The draft's coordinator states, by the classic state of a server-assigned group. "CatchUp"
#: (elected, its groups not yet loaded) is what a member sees as COORDINATOR_LOAD_IN_PROGRESS.
DRAFT_STATES = {
    EMPTY.value: "Ready",
    PREPARING_REBALANCE.value: "PrepareForRebalance",
    COMPLETING_REBALANCE.value: "Rebalancing",
    STABLE.value: "Steady",
    DEAD.value: "Dead",
}
CATCH_UP = "CatchUp"


@dataclass(frozen=True)
class WatchTopics:
    """Output: read these topics' partition counts (0: no such topic), then report them and every
    later change through `topics_changed`."""

    topics: tuple[str, ...]


# Internal request tokens: the classic request the adapter sent for a client's request.


@dataclass(frozen=True, eq=False)
class _Join:
    client: Any
    request: JoinGroupRequest
    client_id: str
    client_host: str
    check: Any


@dataclass(frozen=True, eq=False)
class _Sync:
    client: Any
    generation_id: int
    member_id: str


@dataclass(frozen=True, eq=False)
class _Beat:
    client: Any


@dataclass
class _Round:
    """One generation's completed join phase, until its assignment is handed out."""

    generation_id: int
    protocol_name: str | None
    leader: str | None = None
    members: list[JoinGroupMember] | None = None  # the leader's view: every member's subscription
    joined: dict[str, _Join] = field(default_factory=dict)  # answered joins awaiting the assignment
    assignments: dict[str, bytes] | None = None


class ServerAssignedCoordinator:
    """A `GroupCoordinator` that also serves server-assigned (scheme two) groups; same interface."""

    def __init__(self, core: GroupCoordinator) -> None:
        self.core = core
        #: topic -> partition count as last reported (0: no such topic); only watched topics.
        self.partitions: dict[str, int] = {}
        self._asked: set[str] = set()  # topics a WatchTopics went out for
        self._rounds: dict[str, _Round] = {}
        self._used: dict[str, dict[str, int]] = {}  # group -> the counts its assignment was made with

    # ------------------------------------------------------------------ the core's interface

    def handle(
        self,
        api_key: int,
        req: Message,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
        request_token: Any = None,
        group_check: Any = None,
    ) -> list[Output]:
        kw = dict(client_id=client_id, client_host=client_host, group_check=group_check)
        if api_key == SERVER_JOIN_GROUP:
            return self._translate(self._server_join(req, now_ms, request_token, **kw), now_ms)
        if api_key == SERVER_HEARTBEAT:
            beat = HeartbeatRequest(
                group_id=req.group_id, generation_id=req.generation_id, member_id=req.consumer_id
            )
            outs = self.core.handle(HEARTBEAT, beat, now_ms, request_token=_Beat(request_token), **kw)
            return self._translate(outs, now_ms)
        if api_key == JOIN_GROUP and (
            req.protocol_type == SERVER_PROTOCOL_TYPE or self._is_server_group(req.group_id)
        ):
            # Server-assigned members join with ServerJoinGroup; the coordinator is their leader.
            code = E.INCONSISTENT_GROUP_PROTOCOL
            return [Respond(request_token, JoinGroupResponse(error_code=code, member_id=req.member_id))]
        if api_key == SYNC_GROUP and self._is_server_group(req.group_id):
            return [Respond(request_token, SyncGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL))]
        outs = self.core.handle(api_key, req, now_ms, request_token=request_token, **kw)
        return self._translate(outs, now_ms)

    def tick(self, now_ms: int) -> list[Output]:
        return self._translate(self.core.tick(now_ms), now_ms)

    def next_deadline(self) -> int | None:
        return self.core.next_deadline()

    def persisted(self, token: int, ok: bool, now_ms: int, error_code: int = E.COORDINATOR_NOT_AVAILABLE):
        return self._translate(self.core.persisted(token, ok, now_ms, error_code), now_ms)

    def snapshot(self, group_id: str) -> GroupSnapshot | None:
        return self.core.snapshot(group_id)

    def load_group(self, snapshot: GroupSnapshot, now_ms: int) -> list[Output]:
        """Take a group over; a server-assigned one gets its topics watched, and is rebalanced if a
        topic's size differs from what its stored assignment was made with (the draft's failover)."""
        outs = self.core.load_group(snapshot, now_ms)
        self._rounds.pop(snapshot.group_id, None)  # no join phase survives a takeover
        record = snapshot.group
        if record is not None and record.protocol_type == SERVER_PROTOCOL_TYPE and record.members:
            used: dict[str, int] = {}
            for m in record.members:
                for p in m.protocols:
                    for t in decode_subscription(p.metadata).topics:
                        used.setdefault(t, 0)
                for tp in decode_assignment(m.assignment).partitions if m.assignment else ():
                    used[tp.topic] = max(used.get(tp.topic, 0), tp.partition + 1)
            self._used[snapshot.group_id] = used
            outs.extend(self._watch(used))
        return self._translate(outs, now_ms)

    def resume(self, now_ms: int) -> list[Output]:
        return self._translate(self.core.resume(now_ms), now_ms)

    def unload_group(self, group_id: str, now_ms: int) -> list[Output]:
        # The round is forgotten after the core's last outputs are translated: a join timer that
        # fell due while the node could not tick fires in them and may open one (a generation of
        # the members that had rejoined), which a group loaded later under the same generation
        # number would otherwise take over, assigning to member ids it does not have.
        outs = self._translate(self.core.unload_group(group_id, now_ms), now_ms)
        self._rounds.pop(group_id, None)
        self._used.pop(group_id, None)
        return outs

    def delete_topics(self, topics, now_ms: int) -> list[Output]:
        return self._translate(self.core.delete_topics(topics, now_ms), now_ms)

    def expire_offsets(self, now_ms: int) -> list[Output]:
        return self._translate(self.core.expire_offsets(now_ms), now_ms)

    def group_ids(self) -> list[str]:
        return self.core.group_ids()

    def group_state(self, group_id: str):
        return self.core.group_state(group_id)

    def heartbeat_due(self, group_id: str, member_id: str, generation_id: int) -> int:
        return self.core.heartbeat_due(group_id, member_id, generation_id)

    def stats(self):
        return self.core.stats()

    # ------------------------------------------------------------------ topic sizes

    def topics_changed(self, counts: dict[str, int], now_ms: int) -> list[Output]:
        """Partition counts read from ZooKeeper (0: no such topic): finish assignments that waited
        for them, and rebalance every group whose assignment was made with other counts."""
        self.partitions.update(counts)
        outs: list[Output] = []
        for gid, rnd in list(self._rounds.items()):
            if rnd.members is not None and rnd.assignments is None:
                outs.extend(self._advance(gid, now_ms))
        for gid, used in list(self._used.items()):
            if any(t in counts and counts[t] != n for t, n in used.items()):
                del self._used[gid]  # set again by the rebalance's assignment
                outs.extend(self.core.request_rebalance(gid, now_ms))
        return self._translate(outs, now_ms)

    def _watch(self, topics) -> list[Output]:
        new = tuple(sorted(t for t in topics if t not in self._asked))
        self._asked.update(new)
        return [WatchTopics(new)] if new else []

    # ------------------------------------------------------------------ internals

    def _is_server_group(self, group_id: str | None) -> bool:
        return bool(group_id) and self.core.protocol_type(group_id) == SERVER_PROTOCOL_TYPE

    def _server_join(self, req: ServerJoinGroupRequest, now_ms: int, token: Any, **kw) -> list[Output]:
        if req.strategy not in SERVER_STRATEGIES:
            code = E.UNKNOWN_PARTITIONING_STRATEGY
            return [Respond(token, ServerJoinGroupResponse(error_code=code, consumer_id=req.consumer_id))]
        generation = self.core.generation(req.group_id) if req.group_id else -1
        join = JoinGroupRequest(
            group_id=req.group_id,
            session_timeout_ms=req.session_timeout_ms,
            # The draft waits for every member of the last generation up to its session timeout.
            rebalance_timeout_ms=req.session_timeout_ms,
            member_id=req.consumer_id,
            protocol_type=SERVER_PROTOCOL_TYPE,
            protocols=join_protocols(
                [req.strategy], req.topics, [], generation, previous=partitions_of(req.owned)
            ),
        )
        internal = _Join(token, join, kw["client_id"], kw["client_host"], kw["group_check"])
        return self.core.handle(JOIN_GROUP, join, now_ms, request_token=internal, **kw)

    def _translate(self, outputs: list[Output], now_ms: int) -> list[Output]:
        """Answer clients for the classic requests made on their behalf; pass the rest through."""
        result: list[Output] = []
        queue = deque(outputs)
        while queue:
            out = queue.popleft()
            token = getattr(out, "request_token", None)
            if isinstance(out, Respond):
                if isinstance(token, (_Join, _Sync, _Beat)):
                    queue.extend(self._answered(token, out.body, now_ms))
                    continue
                if isinstance(out.body, DescribeGroupsResponse):
                    out = Respond(token, self._draft_states(out.body))
            elif isinstance(out, Discarded) and isinstance(token, (_Join, _Sync, _Beat)):
                out = Discarded(token.client)
            result.append(out)
        return result

    def _answered(self, token, body, now_ms: int) -> list[Output]:
        if isinstance(token, _Beat):
            code = body.error_code if isinstance(body, HeartbeatResponse) else E.UNKNOWN_SERVER_ERROR
            if code == E.REBALANCE_IN_PROGRESS:
                code = E.ILLEGAL_GENERATION  # the draft's "rebalance: rejoin"
            return [Respond(token.client, ServerHeartbeatResponse(error_code=code))]
        if isinstance(token, _Sync):
            if not isinstance(body, SyncGroupResponse) or body.error_code:
                code = getattr(body, "error_code", E.UNKNOWN_SERVER_ERROR)
                answer = ServerJoinGroupResponse(error_code=code, consumer_id=token.member_id)
                return [Respond(token.client, answer)]
            tps = decode_assignment(body.assignment).partitions if body.assignment else []
            answer = ServerJoinGroupResponse(
                error_code=E.NONE,
                generation_id=token.generation_id,
                consumer_id=token.member_id,
                strategy=body.protocol_name,
                assignment=by_topic(tps),
            )
            return [Respond(token.client, answer)]
        # a JoinGroup answered
        req = token.request
        if not isinstance(body, JoinGroupResponse):
            code = getattr(body, "error_code", E.UNKNOWN_SERVER_ERROR)
            answer = ServerJoinGroupResponse(error_code=code, consumer_id=req.member_id)
            return [Respond(token.client, answer)]
        if body.error_code == E.MEMBER_ID_REQUIRED:
            again = msgspec.structs.replace(req, member_id=body.member_id)
            internal = _Join(token.client, again, token.client_id, token.client_host, token.check)
            return self.core.handle(
                JOIN_GROUP,
                again,
                now_ms,
                client_id=token.client_id,
                client_host=token.client_host,
                request_token=internal,
                group_check=token.check,
            )
        if body.error_code:
            answer = ServerJoinGroupResponse(error_code=body.error_code, consumer_id=req.member_id)
            return [Respond(token.client, answer)]
        gid = req.group_id
        rnd = self._rounds.get(gid)
        if rnd is None or rnd.generation_id != body.generation_id:
            rnd = self._rounds[gid] = _Round(body.generation_id, body.protocol_name)
        rnd.joined[body.member_id] = token
        if body.members:
            rnd.leader, rnd.members = body.member_id, list(body.members)
        return self._advance(gid, now_ms)

    def _advance(self, gid: str, now_ms: int) -> list[Output]:
        """Assign once the leader's view and the topic sizes are known; then SyncGroup for every
        member whose join was answered (the leader's carries the assignment)."""
        rnd = self._rounds[gid]
        if rnd.members is None:
            return []
        outs: list[Output] = []
        if rnd.assignments is None:
            topics = sorted(
                {t for m in rnd.members for t in decode_subscription(m.metadata, m.group_instance_id).topics}
            )
            outs.extend(self._watch(topics))
            if any(t not in self.partitions for t in topics):
                return outs  # assigned once topics_changed reports them
            per_member, _ = perform_assignment(rnd.protocol_name, rnd.members, self.partitions.get)
            rnd.assignments = {m.member_id: per_member.get(m.member_id, b"") for m in rnd.members}
            self._used[gid] = {t: self.partitions[t] for t in topics}
        order = sorted(rnd.joined, key=lambda mid: mid != rnd.leader)  # the leader's first
        everyone = [SyncGroupAssignment(member_id=m, assignment=a) for m, a in rnd.assignments.items()]
        for mid in order:
            token = rnd.joined.pop(mid)
            sync = SyncGroupRequest(
                group_id=gid,
                generation_id=rnd.generation_id,
                member_id=mid,
                protocol_type=SERVER_PROTOCOL_TYPE,
                protocol_name=rnd.protocol_name,
                assignments=everyone if mid == rnd.leader else [],
            )
            outs.extend(
                self.core.handle(
                    SYNC_GROUP,
                    sync,
                    now_ms,
                    client_id=token.client_id,
                    client_host=token.client_host,
                    request_token=_Sync(token.client, rnd.generation_id, mid),
                    group_check=token.check,
                )
            )
        return outs

    def _draft_states(self, body: DescribeGroupsResponse) -> DescribeGroupsResponse:
        groups = [
            msgspec.structs.replace(g, group_state=DRAFT_STATES.get(g.group_state, g.group_state))
            if g.protocol_type == SERVER_PROTOCOL_TYPE
            else g
            for g in body.groups
        ]
        return msgspec.structs.replace(body, groups=groups)
