"""The consumer protocol, pure: subscriptions, the rebalance protocol, the leader's job.

What a member puts in JoinGroup (one subscription per assignor it lists, docs/protocol.md "Consumer
protocol payloads"), which rebalance protocol its assignors allow (cooperative only if all of
them support it), what the leader sends in SyncGroup (`perform_assignment` runs the assignor the
group voted for), what a cooperative member revokes, and scheme two's partition lists
(`by_topic`, `partitions_of`). Shared by the member side (`coordinator.member`) and scheme two's
server side (`coordinator.server_side`, which runs the assignors for its members). No I/O: the
members do that.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from coordinator.assignors.base import Assignor, Subscription, collector_paused, get_assignor
from coordinator.assignors.payloads import (
    decode_subscription,
    encode_assignment,
    encode_cooperative_user_data,
    encode_sticky_user_data,
    encode_subscription,
    payload_version,
)
from coordinator.wire.schema import JoinGroupMember, JoinGroupProtocol, ServerAssignedTopic
from core.types import TopicPartition

PROTOCOL_TYPE = "consumer"
EAGER, COOPERATIVE = "eager", "cooperative"
#: The strategies a scheme-two coordinator runs for its members (the draft's server-side ones).
SERVER_STRATEGIES = ("range", "roundrobin", "sticky")


def resolve_assignors(assignors: Sequence[str | Assignor]) -> dict[str, Assignor]:
    """Protocol name -> assignor, in preference order: names are looked up, instances kept as given
    (Kafka's `partition.assignment.strategy` also takes configured instances)."""
    out: dict[str, Assignor] = {}
    for a in assignors:
        inst = a if isinstance(a, Assignor) else get_assignor(a)
        out.setdefault(inst.name, inst)
    return out


def rebalance_protocol(assignors: Sequence[str | Assignor]) -> str:
    """The rebalance protocol for a member's assignors: cooperative only if every one supports it.

    >>> rebalance_protocol(["cooperative-sticky"]), rebalance_protocol(["cooperative-sticky", "range"])
    ('cooperative', 'eager')
    """
    protocols = [set(a.supported_protocols) for a in resolve_assignors(assignors).values()]
    return COOPERATIVE if all(COOPERATIVE in p for p in protocols) else EAGER


def cooperative_changes(
    owned: set[TopicPartition], assigned: set[TopicPartition]
) -> tuple[set[TopicPartition], set[TopicPartition]]:
    """(revoked, added) when a member that owned `owned` is given `assigned`.

    >>> a, b, c = (TopicPartition("t", i) for i in range(3))
    >>> cooperative_changes({a, b}, {b, c}) == ({a}, {c})
    True
    """
    return owned - assigned, assigned - owned


def subscription_user_data(
    protocol_name: str, owned: Iterable[TopicPartition], generation: int, assignor: Assignor | None = None
) -> bytes:
    """The assignor's own bytes in a member's subscription (Kafka's `subscriptionUserData`); an
    assignor instance may supply its own with a `subscription_user_data()` method."""
    own = getattr(assignor, "subscription_user_data", None)
    if own is not None:
        return own()
    if protocol_name == "sticky":
        return encode_sticky_user_data(sorted(owned), generation)
    if protocol_name == "cooperative-sticky":
        return encode_cooperative_user_data(generation)
    return b""


def join_protocols(
    assignors: Sequence[str | Assignor],
    topics: Sequence[str],
    owned: Iterable[TopicPartition],
    generation: int,
    rack: str | None = None,
    previous: Iterable[TopicPartition] | None = None,
) -> list[JoinGroupProtocol]:
    """JoinGroup `protocols`: one entry per assignor, most preferred first, each with its subscription.

    `owned` are the partitions the member still holds (none after an eager revocation);
    `previous` is its last assignment, which the eager ``sticky`` assignor keeps in its user data.
    """
    owned = sorted(owned)
    previous = owned if previous is None else sorted(previous)
    return [
        JoinGroupProtocol(
            name=name,
            metadata=encode_subscription(
                Subscription(
                    list(topics),
                    owned_partitions=owned,
                    generation=generation,
                    rack=rack,
                    user_data=subscription_user_data(name, previous, generation, assignor),
                )
            ),
        )
        for name, assignor in resolve_assignors(assignors).items()
    ]


def perform_assignment(
    protocol_name: str,
    members: Sequence[JoinGroupMember],
    partitions_for: Callable[[str], int | None],
    assignor: Assignor | None = None,
) -> tuple[dict[str, bytes], dict[str, int]]:
    """The leader's job: run the selected assignor over every member's subscription.

    `members` are the JoinGroup response's `members`; `assignor` is the leader's instance for
    `protocol_name` (default: looked up by name). Returns the SyncGroup assignment bytes per
    member and the partition counts used (the leader watches them for changes).
    """
    assignor = assignor or get_assignor(protocol_name)
    # Decoding every member's owned partitions makes as many TopicPartition tuples as the assignor
    # does (a million in a large group): the collector is paused for the whole step, not only for
    # `assign` (see `collector_paused`).
    with collector_paused():
        subscriptions = {m.member_id: decode_subscription(m.metadata, m.group_instance_id) for m in members}
        counts = {}
        for topic in sorted({t for s in subscriptions.values() for t in s.topics}):
            n = partitions_for(topic)
            if n:
                counts[topic] = n
        result = assignor.assign(counts, subscriptions)
        # each member gets its assignment in the payload version it subscribed in (docs/protocol.md)
        versions = {m.member_id: payload_version(m.metadata) for m in members}
        return {
            member: encode_assignment(tps, version=versions[member]) for member, tps in result.items()
        }, counts


def by_topic(tps: Iterable[TopicPartition]) -> list[ServerAssignedTopic]:
    """Partitions as scheme two's wire lists them: per topic, in order."""
    out: dict[str, list[int]] = {}
    for tp in sorted(tps):
        out.setdefault(tp.topic, []).append(tp.partition)
    return [ServerAssignedTopic(topic=t, partitions=ps) for t, ps in out.items()]


def partitions_of(topics: Iterable[ServerAssignedTopic]) -> set[TopicPartition]:
    return {TopicPartition(t.topic, p) for t in topics for p in t.partitions}
