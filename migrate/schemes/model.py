"""What the inspection tools know about a group, the same shape for both schemes.

`GroupView` is read from ZooKeeper by `migrate.legacy` (scheme one, the Kafka 0.8 layout) or
`migrate.coordinated` (scheme three, `/groupshift/groups`); `migrate.describe` joins it with the
log's end offsets into per-partition rows.
"""

from __future__ import annotations

import msgspec

from core.errors import GroupshiftError, UnknownGroup
from core.types import TopicPartition

SCHEME_ZK = "zk"  # scheme one: /consumers/<g> (Kafka 0.8)
SCHEME_COORDINATOR = "coordinator"  # scheme three: /groupshift/groups/<g>
SCHEMES = (SCHEME_ZK, SCHEME_COORDINATOR)

# Group states. The coordinator's are Kafka's; scheme one has no stored state, so it is derived:
# Stable when every subscribed partition is owned by a live thread, Rebalancing otherwise.
EMPTY, STABLE, REBALANCING, DEAD = "Empty", "Stable", "Rebalancing", "Dead"
STATES = (EMPTY, STABLE, "PreparingRebalance", "CompletingRebalance", REBALANCING, DEAD)
# Scheme two's groups: the draft's coordinator states, and the incremental form's (KIP-848).
STATES += ("Ready", "PrepareForRebalance", "Steady", "Assigning", "Reconciling")


class Committed(msgspec.Struct, frozen=True):
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


class GroupView(msgspec.Struct):
    scheme: str
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


def check_scheme(scheme: str, allowed: tuple[str, ...] = SCHEMES) -> str:
    if scheme not in allowed:
        raise GroupshiftError(f"unknown scheme {scheme!r}; use one of {', '.join(allowed)}")
    return scheme


def choose_scheme(group: str, found: dict[str, bool], scheme: str | None) -> str:
    """The one scheme a write applies to: the given one, or the only one the group exists in."""
    if scheme is not None:
        return check_scheme(scheme)
    where = [s for s in SCHEMES if found.get(s)]
    if not where:
        raise UnknownGroup(f"group {group!r} does not exist in either scheme; check the name (and --zk)")
    if len(where) > 1:
        raise GroupshiftError(
            f"group {group!r} exists under both schemes (zk and coordinator); pass --scheme zk|coordinator"
        )
    return where[0]
