"""One group's metadata: its state, its members, leader and vote.

Kafka's `GroupMetadata`/`MemberMetadata` (docs/coordinator-core.md). The states
and the states each may be entered from are in `coordinator/group/state.py`; an illegal
transition is a bug that raises `IllegalStateTransition`. The bookkeeping here (awaiting-join
count, protocol counts, instance-id map, pending and pending-sync sets, leader re-pick) keeps
every check the coordinator makes O(1) per request and every join round O(members). The request
handling that drives these transitions lives in `coordinator/group/membership_manager.py` and
`coordinator/group/group_manager.py`.
"""

from __future__ import annotations

from typing import Any

from coordinator.assignors.payloads import subscribed_topics
from coordinator.group.messages import GroupRecord, GroupSnapshot, MemberRecord, ProtocolRecord
from coordinator.group.offsets import GroupOffsets
from coordinator.group.state import (
    CAN_REBALANCE,
    EMPTY,
    STABLE,
    GroupState,
)
from coordinator.wire.schema import JoinGroupMember

CONSUMER_PROTOCOL_TYPE = "consumer"
SERVER_PROTOCOL_TYPE = "consumer-server"  # scheme two: the coordinator assigns (server_assigned.py)
#: Protocol types whose member metadata is a consumer subscription.
CONSUMER_PROTOCOL_TYPES = frozenset({CONSUMER_PROTOCOL_TYPE, SERVER_PROTOCOL_TYPE})


Protocols = list[tuple[str, bytes]]


class Member:
    """One member: identity, timeouts, ordered protocols, assignment and parked requests."""

    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocol_type",
        "protocols",
        "protocol_names",
        "assignment",
        "awaiting_join",
        "join_token",
        "awaiting_sync",
        "sync_token",
        "is_new",
        "session_deadline",
        "heap_deadline",
    )

    def __init__(
        self,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
    ) -> None:
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols = protocols
        self.protocol_names = frozenset(name for name, _ in protocols)
        self.assignment = b""
        self.awaiting_join = False
        self.join_token: Any = None
        self.awaiting_sync = False
        self.sync_token: Any = None
        self.is_new = False
        # Session expiry: the deadline that counts, and the deadline of this member's
        # entry in the coordinator's timer heap (rescheduling only moves the former).
        self.session_deadline: int | None = None
        self.heap_deadline: int | None = None

    def metadata(self, protocol_name: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol_name:
                return metadata
        return b""

    def vote(self, candidates: set[str]) -> str | None:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        return None

    def to_record(self, assignment: bytes | None = None) -> MemberRecord:
        return MemberRecord(
            member_id=self.member_id,
            group_instance_id=self.group_instance_id,
            client_id=self.client_id,
            client_host=self.client_host,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            protocol_type=self.protocol_type,
            protocols=[ProtocolRecord(n, m) for n, m in self.protocols],
            assignment=self.assignment if assignment is None else assignment,
        )


class Group:
    """One group. Members iterate in join order (docs/protocol.md: the tie-break for leader and vote)."""

    __slots__ = (
        "group_id",
        "state",
        "state_timestamp",
        "protocol_type",
        "protocol_name",
        "generation_id",
        "leader_id",
        "members",
        "static_members",
        "pending_members",
        "pending_sync_members",
        "num_awaiting_join",
        "supported_protocols",
        "new_member_added",
        "subscribed_topics",
        "offsets",
        "join_op",
        "sync_op",
    )

    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = EMPTY
        self.state_timestamp = now_ms
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.generation_id = 0
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}
        self.pending_members: dict[str, int] = {}  # member id -> expiry deadline
        self.pending_sync_members: set[str] = set()
        self.num_awaiting_join = 0
        self.supported_protocols: dict[str, int] = {}
        self.new_member_added = False
        # Topics the members subscribe to (consumer groups), computed at each new generation
        # and at load; None when unknown. Used by offset expiry and OffsetDelete.
        self.subscribed_topics: frozenset[str] | None = None
        self.offsets = GroupOffsets()
        self.join_op: Any = None  # the pending DelayedJoin / InitialDelayedJoin
        self.sync_op: Any = None  # the pending DelayedSync

    # ---------------------------------------------------------------- states

    def transition_to(self, target: GroupState, now_ms: int) -> GroupState:
        old = self.state
        target.check_transition_from(old, self.group_id)
        self.state = target
        self.state_timestamp = now_ms
        return old

    @property
    def can_rebalance(self) -> bool:
        return self.state in CAN_REBALANCE

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    # ------------------------------------------------------------- membership

    def supports_protocols(self, protocol_type: str, names: frozenset[str]) -> bool:
        if self.state is EMPTY:
            return protocol_type != "" and bool(names)
        if protocol_type != self.protocol_type:
            return False
        n = len(self.members)
        counts = self.supported_protocols
        return any(counts.get(name, 0) == n for name in names)

    def add(self, member: Member) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        self.members[member.member_id] = member
        self._count_protocols(member, 1)
        if member.awaiting_join:
            self.num_awaiting_join += 1
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)

    def remove(self, member: Member) -> None:
        """Take a member out of every structure (Kafka's `GroupMetadata.remove`); no side effects."""
        mid = member.member_id
        if self.members.pop(mid, None) is None:
            return
        self._count_protocols(member, -1)
        if member.awaiting_join:
            self.num_awaiting_join -= 1
        if member.group_instance_id is not None and self.static_members.get(member.group_instance_id) == mid:
            del self.static_members[member.group_instance_id]
        self.pending_sync_members.discard(mid)
        if self.leader_id == mid:
            self.leader_id = next(iter(self.members), None)

    def rename(self, member: Member, new_id: str) -> None:
        """Static replacement (KIP-345): same member, same position in join order, new member id."""
        old_id = member.member_id
        member.member_id = new_id
        self.members = {(new_id if k == old_id else k): v for k, v in self.members.items()}
        if self.leader_id == old_id:
            self.leader_id = new_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = new_id
        if old_id in self.pending_sync_members:
            self.pending_sync_members.discard(old_id)
            self.pending_sync_members.add(new_id)

    def update(
        self, member: Member, protocols: Protocols, rebalance_timeout_ms: int, session_timeout_ms: int
    ) -> None:
        self._count_protocols(member, -1)
        member.protocols = protocols
        member.protocol_names = frozenset(name for name, _ in protocols)
        self._count_protocols(member, 1)
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms

    def _count_protocols(self, member: Member, delta: int) -> None:
        counts = self.supported_protocols
        for name in member.protocol_names:
            n = counts.get(name, 0) + delta
            if n:
                counts[name] = n
            else:
                del counts[name]

    def park_join(self, member: Member, token: Any) -> tuple[bool, Any]:
        """Park a JoinGroup; returns (had a parked one, its token) — the replaced one is dropped."""
        replaced = (member.awaiting_join, member.join_token)
        if not member.awaiting_join:
            member.awaiting_join = True
            self.num_awaiting_join += 1
        member.join_token = token
        return replaced

    @staticmethod
    def park_sync(member: Member, token: Any) -> tuple[bool, Any]:
        replaced = (member.awaiting_sync, member.sync_token)
        member.awaiting_sync = True
        member.sync_token = token
        return replaced

    @staticmethod
    def unpark_sync(member: Member) -> Any:
        token = member.sync_token
        member.awaiting_sync = False
        member.sync_token = None
        return token

    def unpark_join(self, member: Member) -> Any:
        token = member.join_token
        if member.awaiting_join:
            member.awaiting_join = False
            member.join_token = None
            self.num_awaiting_join -= 1
        return token

    # ------------------------------------------------------- leader and vote

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def elect_joined_leader(self) -> bool:
        """Keep a leader that rejoined, else pick the first rejoined member (Kafka's leader selection)."""
        leader = self.members.get(self.leader_id) if self.leader_id is not None else None
        if leader is None:
            return False
        if leader.awaiting_join:
            return True
        for mid, m in self.members.items():
            if m.awaiting_join:
                self.leader_id = mid
                return True
        return False

    def select_protocol(self) -> str | None:
        """The protocol vote: each member votes for its first protocol every member supports;
        most votes wins, ties go to the protocol whose first voter joined earliest."""
        n = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == n}
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            if choice is not None:
                votes[choice] = votes.get(choice, 0) + 1
        best, best_votes = None, 0
        for name, count in votes.items():
            if count > best_votes:
                best, best_votes = name, count
        return best

    def compute_subscribed_topics(self) -> frozenset[str] | None:
        if self.protocol_type not in CONSUMER_PROTOCOL_TYPES:
            return None
        if not self.members:
            return frozenset()
        if self.protocol_name is None:
            return None
        topics: set[str] = set()
        try:
            for m in self.members.values():
                topics.update(subscribed_topics(m.metadata(self.protocol_name)))
        except ValueError:
            return None
        return frozenset(topics)

    def is_subscribed_to(self, topic: str) -> bool:
        """Kafka's `isSubscribedToTopic`: unknown subscriptions count as subscribed to everything."""
        return self.subscribed_topics is None or topic in self.subscribed_topics

    # ------------------------------------------------------------- records

    def member_list(self) -> list[JoinGroupMember]:
        """The leader's JoinGroup member list: every member with its metadata for the selected protocol."""
        pn = self.protocol_name
        return [
            JoinGroupMember(member_id=mid, group_instance_id=m.group_instance_id, metadata=m.metadata(pn))
            for mid, m in self.members.items()
        ]

    def to_record(self, assignments: dict[str, bytes] | None = None) -> GroupRecord:
        return GroupRecord(
            group_id=self.group_id,
            protocol_type=self.protocol_type,
            protocol_name=self.protocol_name,
            generation_id=self.generation_id,
            leader_id=self.leader_id,
            state_timestamp=self.state_timestamp,
            members=[
                m.to_record(None if assignments is None else assignments.get(mid, b""))
                for mid, m in self.members.items()
            ],
        )


def build_group(snapshot: GroupSnapshot, now_ms: int) -> Group:
    """A group as a node taking its shard over loads it (Kafka's `loadGroup`): Stable if it has
    members, else Empty; generation, leader, protocols and assignments as persisted."""
    group = Group(snapshot.group_id, now_ms)
    rec = snapshot.group
    if rec is not None:
        group.protocol_type = rec.protocol_type
        group.protocol_name = rec.protocol_name
        group.generation_id = rec.generation_id
        if rec.state_timestamp is not None:
            group.state_timestamp = rec.state_timestamp
        for mr in rec.members:
            m = Member(
                mr.member_id,
                mr.group_instance_id,
                mr.client_id,
                mr.client_host,
                mr.session_timeout_ms,
                mr.rebalance_timeout_ms,
                mr.protocol_type,
                [(p.name, p.metadata) for p in mr.protocols],
            )
            m.assignment = mr.assignment
            group.add(m)
        group.protocol_type = rec.protocol_type
        if rec.leader_id in group.members:
            group.leader_id = rec.leader_id
        if group.members:
            group.state = STABLE  # loading is not a transition: the group appears in this state
        group.subscribed_topics = group.compute_subscribed_topics()
    group.offsets.load(snapshot.offsets)
    return group
