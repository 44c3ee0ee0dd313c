"""What crosses the core's boundary besides requests and responses: outputs and persisted records.

Requests and responses are the structs of `coordinator/wire/schema.py`. Outputs are what the core asks
its driver to do: `Respond` (answer a request, now or later), a `Write` (one frozen dataclass per
kind: group metadata, a static member's replacement, offsets, offset deletion, group deletion;
the driver matches on the type and, when it carries a token, reports back with `persisted`),
`StateChanged` (metrics) and `Discarded` (a parked request Kafka never answers). Records
(`GroupRecord`, `MemberRecord`, `OffsetRecord`, `GroupSnapshot`) are plain msgspec structs: what
the store writes and what a node taking a shard over loads back with
`GroupCoordinator.load_group`. They live in `coordinator/group/records.py` (the ZooKeeper layout's
readers need them without the rest) and are re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from coordinator.group.records import GroupRecord as GroupRecord
from coordinator.group.records import GroupSnapshot as GroupSnapshot
from coordinator.group.records import MemberRecord as MemberRecord
from coordinator.group.records import OffsetRecord as OffsetRecord
from coordinator.group.records import ProtocolRecord as ProtocolRecord
from coordinator.group.state import GroupState
from coordinator.wire.schema import Response
from core.types import TopicPartition

# ------------------------------------------------------------------------------------- outputs


class Respond(NamedTuple):
    """Send `body` as the response to the request the driver registered as `request_token`."""

    request_token: Any
    body: Response


class StateChanged(NamedTuple):
    """A group changed state (for metrics and logs); `old` is None for a group just created or
    loaded."""

    group_id: str
    old: GroupState | None
    new: GroupState


# Writes: something durable the driver stores for the group's shard. `token` is None when the core
# does not care about the outcome (Kafka ignores it there); otherwise the driver reports the
# outcome exactly once with `GroupCoordinator.persisted(token, ok, now_ms, error_code)`.


@dataclass(frozen=True, slots=True)
class WriteGroupMetadata:
    """Write the group's metadata: members, generation, leader and assignments (Kafka's
    GroupMetadataValue). Issued when the leader's assignment is accepted (with a token) and when
    a join phase ends with no member left."""

    group_id: str
    record: GroupRecord
    token: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteStaticReplacement(WriteGroupMetadata):
    """The group's metadata after a static member rejoined with a new member id in a Stable group
    (no rebalance): written like any group metadata; `old_member_id` is fenced from now on."""

    old_member_id: str
    new_member_id: str


@dataclass(frozen=True, slots=True)
class WriteOffsets:
    """Upsert committed offsets, all or none (one OffsetCommit); `generation_id` is the
    committing member's, as the request carried it (-1 for an admin or simple consumer)."""

    group_id: str
    offsets: list[OffsetRecord]
    generation_id: int
    token: int | None = None


@dataclass(frozen=True, slots=True)
class DeleteOffsets:
    """Remove these partitions' committed offsets (expiry, OffsetDelete, deleted topics)."""

    group_id: str
    partitions: list[TopicPartition]
    token: int | None = None


@dataclass(frozen=True, slots=True)
class DeleteGroup:
    """Remove the group and all of its offsets (deleted, or Empty with its last offsets gone)."""

    group_id: str
    token: int | None = None


Write = WriteGroupMetadata | WriteOffsets | DeleteOffsets | DeleteGroup


class Discarded(NamedTuple):
    """A parked JoinGroup/SyncGroup that the coordinator will never answer (Kafka drops it).

    Happens when the same member parks a second JoinGroup/SyncGroup (Kafka replaces the first and never
    answers it) or when a member
    with a parked SyncGroup is removed. Clients time out such requests; the driver may release them.
    """

    request_token: Any


Output = Respond | Write | StateChanged | Discarded
