"""Scheme two's incremental groups, pure: members, epochs, the target assignment, the stored record.

The model `incremental_coordinator.IncrementalCoordinator` works on (docs/scheme-two.md, "The
incremental form"): a `Group` has a group epoch, a target assignment per group epoch computed by a
server-side assignor (`retarget`), and its `Member`s, each with its member epoch and the
partitions it holds or still has to let go of. `Group.record()` is the group as written to
ZooKeeper (a group record of protocol type `consumer-incremental`); `members_of` reads it back
when a node takes the group over.

A member subscribes by names, by a regular expression (`resolve`: full-match over the topics the
node knows, Kafka's internal topics left out), or both; a static member has an instance id, and
one that left with epoch -2 (`left`) keeps its partitions for a replacement until its session
times out. A member may also be a *classic* one (`Member.classic`: its JoinGroup protocols), a
member of the group from before its online upgrade or one that joined with JoinGroup since
(`classic_members`); it is stored as a member record of protocol type `consumer` whose protocols,
after the first (the subscription every member has), are its own.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from coordinator.assignors.base import Subscription, get_assignor, validate
from coordinator.assignors.payloads import (
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from coordinator.group.messages import GroupRecord, MemberRecord, ProtocolRecord, Respond
from coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE
from core.types import TopicPartition

INCREMENTAL_PROTOCOL_TYPE = "consumer-incremental"
#: Server-side assignors: `uniform` (sticky; the default) and `range`.
INCREMENTAL_ASSIGNORS = ("uniform", "range")
_ASSIGNOR_IMPL = {"uniform": "cooperative-sticky", "range": "range"}
EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"
#: The member epoch of a static member that left (and of its leave heartbeat): KIP-848's -2.
LEFT_STATIC_EPOCH = -2
#: Topics a regular expression never matches (Kafka's internal topics; a name may still list them).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


@dataclass(frozen=True, eq=False)
class AnswerWrite:
    """The token of a group write whose success releases an answer (`respond`; None: none waits)."""

    respond: Respond | None


def resolve(names: Iterable[str], regex: str | None, known: Iterable[str]) -> tuple[str, ...]:
    """A member's topics: its `names` and the `known` topics `regex` matches as a whole (an invalid
    regex is refused before this is called)."""
    topics = set(names)
    if regex:
        pattern = re.compile(regex)
        topics.update(t for t in known if t not in INTERNAL_TOPICS and pattern.fullmatch(t))
    return tuple(sorted(topics))


class _Extra(msgspec.Struct, omit_defaults=True):
    """What the stored subscription's user data adds for a member (JSON, empty when all defaults):
    its named topics and its regex (the subscription's topics are what they resolved to), and
    whether it is a static member that left."""

    names: list[str] | None = None
    regex: str | None = None
    left: bool = False


@dataclass(slots=True)
class Member:
    member_id: str
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    topics: tuple[str, ...]
    epoch: int = 0
    previous_epoch: int = -1
    assigned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()  # still held until the member says it let go
    session_deadline: int = 0
    revoke_deadline: int | None = None
    instance_id: str | None = None  # a static member's
    rack_id: str | None = None
    names: tuple[str, ...] = ()  # the topics it named (`topics`: these and what `regex` matches)
    regex: str | None = None
    left: bool = False  # a static member that left with epoch -2: its partitions wait for a replacement
    #: A classic member's JoinGroup protocols, (name, metadata) in its order of preference; None for
    #: a member of KIP-848's consumer protocol.
    classic: tuple[tuple[str, bytes], ...] | None = None
    #: The deadline of the session timer entry pending for this member (None: none): a heartbeat
    #: only moves `session_deadline`, and the entry re-arms itself when it fires early.
    session_armed: int | None = None

    @property
    def reported_epoch(self) -> int:
        """The epoch clients see: -2 for a static member that left."""
        return LEFT_STATIC_EPOCH if self.left else self.epoch

    def _extra(self) -> bytes:
        if self.regex is None and not self.left:
            return b""
        names = list(self.names) if self.regex is not None else None
        return msgspec.json.encode(_Extra(names, self.regex, self.left))


@dataclass(slots=True)
class Group:
    group_id: str
    assignor: str = "uniform"
    epoch: int = 0  # the group epoch
    assignment_epoch: int = 0  # the group epoch the target was computed for
    target: dict[str, frozenset[TopicPartition]] = field(default_factory=dict)
    members: dict[str, Member] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)  # topic sizes the target was computed with
    state_timestamp: int = 0

    def topics(self) -> set[str]:
        return {t for m in self.members.values() for t in m.topics}

    def holder(self, instance_id: str) -> Member | None:
        """The member holding a static `instance_id`, if any."""
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def owner(self, tp: TopicPartition, but: str) -> str | None:
        for mid, m in self.members.items():
            if mid != but and (tp in m.assigned or tp in m.revoking):
                return mid
        return None

    @property
    def state(self) -> str:
        if not self.members:
            return EMPTY
        if self.assignment_epoch < self.epoch:
            return ASSIGNING
        for mid, m in self.members.items():
            if (
                m.epoch != self.assignment_epoch
                or m.revoking
                or m.assigned != self.target.get(mid, frozenset())
            ):
                return RECONCILING
        return STABLE

    def has_news(self, member: Member, known_epoch: int) -> bool:
        """Whether `member`, which knows `known_epoch`, has something to do that its next heartbeat
        would tell it: the reconciliation's rules (`IncrementalCoordinator._reconcile`), read only.
        It has not heard its epoch; or the target asks it to give partitions up; or partitions of
        its target are free to take. A new epoch that moves none of its partitions is no news (the
        next heartbeat brings it, and commits are fenced by the epoch the member was last told);
        nor is waiting for partitions others still hold, or releasing what it was told to. What
        frees partitions is written, and the node asks again then (coordinator/node/watches.py)."""
        if member.epoch != known_epoch:
            return True
        if self.assignment_epoch < self.epoch or member.revoking:
            return False
        mid = member.member_id
        target = self.target.get(mid, frozenset())
        if member.epoch != self.assignment_epoch and member.assigned - target:
            return True
        return any(self.owner(tp, mid) is None for tp in target - member.assigned)

    def retarget(self, partitions: dict[str, int], bump: bool) -> None:
        """Compute the target assignment for the group epoch from the topics' sizes `partitions`
        (needs every subscribed topic's size)."""
        if bump:
            self.epoch += 1
        topics = self.topics()
        if any(t not in partitions for t in topics):
            return  # computed once topics_changed reports them
        sizes = {t: partitions[t] for t in topics}
        subs = {
            mid: Subscription(m.topics, owned_partitions=tuple(sorted(self.target.get(mid, m.assigned))))
            for mid, m in self.members.items()
        }
        impl = get_assignor(_ASSIGNOR_IMPL[self.assignor])
        if self.assignor == "uniform":
            counts = validate(sizes, subs)
            result = impl.sticky_assign(counts, subs).assignment if counts else {}
        else:
            result = impl.assign(sizes, subs)
        self.target = {mid: frozenset(result.get(mid, ())) for mid in self.members}
        self.sizes = sizes
        self.assignment_epoch = self.epoch

    def record(self) -> GroupRecord:
        """The group as its ZooKeeper record (protocol type `consumer-incremental`)."""
        return GroupRecord(
            group_id=self.group_id,
            protocol_type=INCREMENTAL_PROTOCOL_TYPE,
            protocol_name=self.assignor,
            generation_id=self.epoch,
            leader_id=None,
            state_timestamp=self.state_timestamp,
            members=[
                member_record(
                    m,
                    INCREMENTAL_PROTOCOL_TYPE if m.classic is None else CONSUMER_PROTOCOL_TYPE,
                    # The subscription's generation is the member epoch; its owned partitions are
                    # the ones it still has to let go of; its topics are what it is subscribed to
                    # now (its names and its regex's matches); user data: `_Extra`.
                    [
                        ProtocolRecord(
                            name=self.assignor,
                            metadata=encode_subscription(
                                Subscription(
                                    m.topics,
                                    owned_partitions=tuple(sorted(m.revoking)),
                                    generation=m.epoch,
                                    rack=m.rack_id,
                                    user_data=m._extra(),
                                )
                            ),
                        )
                    ]
                    # a classic member's own protocols follow
                    + classic_protocols(m),
                )
                for m in self.members.values()
            ],
        )


def classic_protocols(m: Member) -> list[ProtocolRecord]:
    """A classic member's JoinGroup protocols as stored (none for a consumer-protocol member)."""
    return [ProtocolRecord(name=name, metadata=metadata) for name, metadata in m.classic or ()]


def member_record(m: Member, protocol_type: str, protocols: list[ProtocolRecord]) -> MemberRecord:
    """`m` as a stored member entry: of `protocol_type`, with `protocols`, its partitions assigned."""
    return MemberRecord(
        member_id=m.member_id,
        group_instance_id=m.instance_id,
        client_id=m.client_id,
        client_host=m.client_host,
        session_timeout_ms=m.session_timeout_ms,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        protocol_type=protocol_type,
        protocols=protocols,
        assignment=encode_assignment(sorted(m.assigned)),
    )


def members_of(record: GroupRecord) -> list[Member]:
    """The members of a stored group record (`Group.record`), as a node taking the group over needs them."""
    members = []
    for m in record.members:
        sub = decode_subscription(m.protocols[0].metadata) if m.protocols else Subscription(())
        extra = msgspec.json.decode(sub.user_data, type=_Extra) if sub.user_data else _Extra()
        members.append(
            Member(
                m.member_id,
                m.client_id,
                m.client_host,
                m.session_timeout_ms,
                m.rebalance_timeout_ms,
                tuple(sub.topics),
                epoch=sub.generation,
                assigned=frozenset(decode_assignment(m.assignment).partitions)
                if m.assignment
                else frozenset(),
                revoking=frozenset(sub.owned_partitions),
                instance_id=m.group_instance_id,
                rack_id=sub.rack,
                names=tuple(sub.topics if extra.names is None else extra.names),
                regex=extra.regex,
                left=extra.left,
                classic=tuple((p.name, p.metadata) for p in m.protocols[1:])
                if m.protocol_type == CONSUMER_PROTOCOL_TYPE
                else None,
            )
        )
    return members
