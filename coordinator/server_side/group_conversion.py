"""KIP-848's online upgrade and downgrade: a classic group becomes a consumer-protocol group and back.

Kafka 4.0's `group.consumer.migration.policy` (docs/scheme-two.md, "Online upgrade and
downgrade"), pure: what the incremental coordinator asks when it must decide, and the two
conversions as data.

* **Upgrade** (`from_classic`): a member of KIP-848's consumer protocol joins (epoch 0) a
  non-empty classic group of protocol type `consumer`. The classic group's members stay, with
  the partitions the classic core last gave them, their protocols and timeouts, each at member
  epoch = the group's generation, and the group epoch is that generation; the target is what they
  hold, so the joiner's arrival moves only what the assignor must move.
* **Downgrade** (`to_classic`): the last member of the consumer protocol leaves or is fenced and
  only classic members remain. The classic group comes back at the members' newest epoch, with
  the members' protocols and current partitions, and rebalances (the classic core's own
  rules from then on).

Which conversions a node makes is its policy (`MigrationPolicy`, `ALLOWED`).
"""

from __future__ import annotations

import enum
from collections import Counter

from coordinator.assignors.payloads import decode_assignment, decode_subscription
from coordinator.group.messages import GroupRecord
from coordinator.group.metadata import CONSUMER_PROTOCOL_TYPE
from coordinator.server_side.incremental_groups import Group, Member, classic_protocols, member_record


class Conversion(enum.Enum):
    """A change of a group's protocol: (from, to)."""

    UPGRADE = ("classic", "consumer")
    DOWNGRADE = ("consumer", "classic")


class MigrationPolicy(enum.Enum):
    """Kafka's `group.consumer.migration.policy`: which conversions a node makes."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    def allows(self, conversion: Conversion) -> bool:
        return conversion in ALLOWED[self]


#: policy -> the conversions it allows (the table `MigrationPolicy.allows` reads).
ALLOWED: dict[MigrationPolicy, frozenset[Conversion]] = {
    MigrationPolicy.BIDIRECTIONAL: frozenset(Conversion),
    MigrationPolicy.UPGRADE: frozenset({Conversion.UPGRADE}),
    MigrationPolicy.DOWNGRADE: frozenset({Conversion.DOWNGRADE}),
    MigrationPolicy.DISABLED: frozenset(),
}


def upgrade_refusal(policy: MigrationPolicy, record: GroupRecord | None) -> str | None:
    """Why a consumer-protocol member may not join the classic group `record` (None: it may)."""
    gid = record.group_id if record is not None else "?"
    if record is None or record.protocol_type != CONSUMER_PROTOCOL_TYPE:
        kind = record.protocol_type if record is not None else "unknown"
        return f"{gid!r} is a classic group of protocol type {kind!r}, not a consumer group"
    if not policy.allows(Conversion.UPGRADE):
        return (
            f"{gid!r} is a classic group and this node's group.consumer.migration.policy is "
            f"{policy.value!r}: restart its members with the classic protocol, or allow upgrades"
        )
    try:
        from_classic(record, 0)
    except ValueError as exc:
        return f"{gid!r} is a classic group whose members cannot be read: {exc}"
    return None


def from_classic(record: GroupRecord, now: int) -> Group:
    """The consumer-protocol group that the classic group `record` (of protocol type `consumer`,
    with members) becomes; `ValueError` if a member's subscription or assignment is malformed."""
    generation = record.generation_id
    group = Group(record.group_id, "uniform", generation, state_timestamp=now)
    group.assignment_epoch = generation
    for m in record.members:
        protocols = tuple((p.name, p.metadata) for p in m.protocols)
        chosen = next((md for name, md in protocols if name == record.protocol_name), None)
        sub = decode_subscription(chosen if chosen is not None else protocols[0][1])
        assigned = frozenset(decode_assignment(m.assignment).partitions)
        topics = tuple(sorted(set(sub.topics)))
        group.members[m.member_id] = Member(
            m.member_id,
            m.client_id,
            m.client_host,
            m.session_timeout_ms,
            m.rebalance_timeout_ms,
            topics,
            epoch=generation,
            assigned=assigned,
            instance_id=m.group_instance_id,
            rack_id=sub.rack,
            names=topics,
            classic=protocols,
        )
        group.target[m.member_id] = assigned
    return group


def may_downgrade(policy: MigrationPolicy, group: Group) -> bool:
    """A group whose members are all classic (and that has some) turns back into a classic one."""
    return (
        policy.allows(Conversion.DOWNGRADE)
        and bool(group.members)
        and all(m.classic is not None for m in group.members.values())
    )


def to_classic(group: Group, now: int) -> GroupRecord:
    """The classic group record `group` (classic members only) becomes: the protocol the members
    vote for, their current partitions as their assignment, and as generation the newest member
    epoch — the group epoch before the last consumer-protocol member left (its leaving moved the
    epoch on), so that members in step keep committing until they rejoin."""
    members = list(group.members.values())
    return GroupRecord(
        group_id=group.group_id,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=vote(members),
        generation_id=max(m.epoch for m in members),
        leader_id=members[0].member_id,
        state_timestamp=now,
        members=[member_record(m, CONSUMER_PROTOCOL_TYPE, classic_protocols(m)) for m in members],
    )


def vote(members: list[Member]) -> str | None:
    """The classic vote: each member's first protocol among those every member lists; most votes
    wins, a tie goes to the protocol of the earliest voter."""
    common = set.intersection(*({name for name, _ in m.classic or ()} for m in members))
    votes = Counter(next((name for name, _ in m.classic or () if name in common), None) for m in members)
    votes.pop(None, None)
    return max(votes, key=lambda name: votes[name], default=None)  # max keeps the first of a tie
