"""What the inspection tools know about a group, the same shape for both schemes.

`GroupView` is read from ZooKeeper by `migrate.schemes.zk_store` (scheme one, the Kafka 0.8
layout) or `migrate.schemes.coordinator_store` (schemes two and three, `/groupshift/groups`);
`migrate.groups.describe` joins it with the log's end offsets into per-partition rows. Which store
a group is in is a `core.scheme.Rebalancer`, one of `STORES`; its `.value` is how users and the
JSON output spell it ("zk", "coordinator").
"""

from __future__ import annotations

import msgspec

from core.errors import GroupshiftError, UnknownGroup
from core.scheme import STORES, Rebalancer
from core.types import TopicPartition

# Group states. The coordinator's are Kafka's; scheme one has no stored state, so it is derived:
# Stable when every subscribed partition is owned by a live thread, Rebalancing otherwise.
EMPTY, STABLE, REBALANCING, DEAD = "Empty", "Stable", "Rebalancing", "Dead"
STATES = (EMPTY, STABLE, "PreparingRebalance", "CompletingRebalance", REBALANCING, DEAD)
# Scheme two's groups: the draft's coordinator states, and the incremental form's (KIP-848).
STATES += ("Ready", "PrepareForRebalance", "Steady", "Assigning", "Reconciling")


class Committed(msgspec.Struct, frozen=True, gc=False):
    """A committed offset (the next offset to read), when it was written and a total order of writes."""

    offset: int
    commit_ts: int  # ms: the znode's mtime (scheme one, as Burrow) or the stored commit_ts
    order: int  # the znode's mzxid: two reads with the same order saw the same commit
    metadata: str = ""


class Member(msgspec.Struct, frozen=True):
    member_id: str  # scheme one: the consumer id; scheme three: the member id
    client_id: str | None
    host: str | None
    instance_id: str | None
    partitions: list[TopicPartition]  # owned (scheme one) or assigned (scheme three)
    subscription: dict[str, int]  # topic (or regex) -> streams (scheme one: thread count; else 1)
    pattern: str = "static"  # scheme one: static | white_list | black_list
    error: str | None = None  # an unreadable registration
    epoch: int | None = None  # scheme two, incremental: the member epoch
    target: list[TopicPartition] | None = None  # scheme two, incremental: its target assignment


class GroupView(msgspec.Struct):
    scheme: Rebalancer  # ZK (/consumers/<g>) or COORDINATOR (/groupshift/groups/<g>); encodes as its value
    group: str
    state: str
    protocol_type: str | None = None
    protocol: str | None = None
    generation: int | None = None
    leader: str | None = None
    members: list[Member] = msgspec.field(default_factory=list)
    offsets: dict[TopicPartition, Committed] = msgspec.field(default_factory=dict)
    owners: dict[TopicPartition, str] = msgspec.field(default_factory=dict)  # tp -> member id
    subscribed: dict[str, int] = msgspec.field(default_factory=dict)  # topic -> partitions (members' topics)
    coordinator: str | None = None  # "node N host:port" that leads the group, if any
    notes: list[str] = msgspec.field(default_factory=list)  # things the operator should know


def as_store(scheme: str | Rebalancer) -> Rebalancer:
    """`scheme` (a spelling or a Rebalancer) as one of `STORES`; else GroupshiftError "unknown scheme ..."."""
    return Rebalancer.parse(scheme, STORES)


def choose_scheme(group: str, found: dict[Rebalancer, bool], scheme: str | Rebalancer | None) -> Rebalancer:
    """The one store a write applies to: the given one, or the only one the group exists in."""
    if scheme is not None:
        return as_store(scheme)
    where = [s for s in STORES if found.get(s)]
    if not where:
        raise UnknownGroup(f"group {group!r} does not exist in either scheme; check the name (and --zk)")
    if len(where) > 1:
        names = [s.value for s in STORES]
        raise GroupshiftError(
            f"group {group!r} exists under both schemes ({' and '.join(names)}); "
            f"pass --scheme {'|'.join(names)}"
        )
    return where[0]
