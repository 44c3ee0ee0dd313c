"""Scheme two's incremental groups, pure: members, epochs, the target assignment, the stored record.

The model `incremental_coordinator.IncrementalCoordinator` works on (docs/scheme-two.md, "The
incremental form"): a `Group` has a group epoch, a target assignment per group epoch computed by a
server-side assignor (`retarget`), and its `Member`s, each with its member epoch and the
partitions it holds or still has to let go of. `Group.record()` is the group as written to
ZooKeeper (a group record of protocol type `consumer-incremental`); the coordinator reads it back
when a node takes the group over.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.assignors.base import Subscription, get_assignor, validate
from coordinator.assignors.payloads import encode_assignment, encode_subscription
from coordinator.group.messages import GroupRecord, MemberRecord, ProtocolRecord
from core.types import TopicPartition

INCREMENTAL_PROTOCOL_TYPE = "consumer-incremental"
#: Server-side assignors: `uniform` (sticky; the default) and `range`.
INCREMENTAL_ASSIGNORS = ("uniform", "range")
_ASSIGNOR_IMPL = {"uniform": "cooperative-sticky", "range": "range"}
EMPTY, ASSIGNING, RECONCILING, STABLE, DEAD = "Empty", "Assigning", "Reconciling", "Stable", "Dead"


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
                MemberRecord(
                    member_id=m.member_id,
                    group_instance_id=None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    session_timeout_ms=m.session_timeout_ms,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    protocol_type=INCREMENTAL_PROTOCOL_TYPE,
                    # The subscription's generation is the member epoch; its owned partitions are
                    # the ones it still has to let go of.
                    protocols=[
                        ProtocolRecord(
                            name=self.assignor,
                            metadata=encode_subscription(
                                Subscription(
                                    m.topics, owned_partitions=tuple(sorted(m.revoking)), generation=m.epoch
                                )
                            ),
                        )
                    ],
                    assignment=encode_assignment(sorted(m.assigned)),
                )
                for m in self.members.values()
            ],
        )
