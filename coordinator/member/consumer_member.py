"""Scheme three's consumer side: `CoordinatorMember`, a consumer-group member of a coordinator group.

`CoordinatorMember` implements `core.membership.Membership`. It is the consumer's half of a group
member (Kafka's `ConsumerCoordinator`, kafka-python's `ConsumerCoordinator`): the assignors it
proposes and, as the leader, runs; the listener callbacks in Kafka's order; offset commits fenced
by the generation; and, as the leader, a watch on the subscribed topics' sizes. The generic half —
finding the coordinator, JoinGroup/SyncGroup, the heartbeat thread, the poll timer, leaving — is
`group_member.GroupMember` (and `classic.ClassicProtocol`), whose hooks this class fills in.

Listener callbacks run in Kafka's order:

* eager protocols (range, roundrobin, sticky): `on_partitions_revoked(all)` before JoinGroup,
  `on_partitions_assigned(all)` after SyncGroup;
* cooperative (every configured assignor supports it, e.g. cooperative-sticky): nothing before
  JoinGroup; after SyncGroup `on_partitions_revoked(owned - assigned)` then
  `on_partitions_assigned(assigned - owned)`, and a follow-up rejoin if something was revoked,
  so partitions that stay are never interrupted;
* `on_partitions_lost(owned)` instead of revoked once the member learnt it was fenced.

    member = CoordinatorMember("billing", ["clicks"], zk=zk, assignors=["cooperative-sticky", "range"],
                               listener=my_listener, session_timeout_ms=10_000)
    member.start()
    member.poll(1.0)                              # poll_driven=True: rebalances run in here
    member.commit({TopicPartition("clicks", 0): OffsetAndMetadata(42)}, member.generation)
    member.close()                                # revoke, LeaveGroup (dynamic members only)

With `server_assigned=True` the member is scheme two's draft form (docs/scheme-two.md):
`CoordinatorMember(..., server_assigned=True)` builds a `ServerAssignedMember`, whose join and
heartbeat are `server_assigned.ServerAssigned`'s (the coordinator assigns); offsets, LeaveGroup
and FindCoordinator are the same. Scheme two's incremental form is `incremental_member.IncrementalMember`.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from kazoo.exceptions import KazooException

from coordinator.assignors.base import Assignor
from coordinator.assignors.consumer_protocol import (
    EAGER,
    PROTOCOL_TYPE,
    cooperative_changes,
    join_protocols,
    perform_assignment,
    rebalance_protocol,
    resolve_assignors,
)
from coordinator.member.classic import ClassicProtocol
from coordinator.member.connection import error_name, zk_partition_counts
from coordinator.member.server_assigned import ServerAssigned
from coordinator.member.state import NO_GENERATION, Generation, MemberState
from coordinator.wire import codec as wire
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    JoinGroupRequest,
    JoinGroupResponse,
    Message,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    OffsetFetchRequest,
    OffsetFetchTopic,
    SyncGroupAssignment,
)
from core.errors import CommitFailed, GroupshiftError, RebalanceFailed
from core.types import OffsetAndMetadata, TopicPartition
from core.zk import REFUSALS, ZooKeeperNoAuth, refused_by_acl

log = logging.getLogger(__name__)

# What a commit refused because the group moved on answers (CommitFailed, not an error).
COMMIT_FENCED = (E.ILLEGAL_GENERATION, E.UNKNOWN_MEMBER_ID, E.REBALANCE_IN_PROGRESS, E.FENCED_INSTANCE_ID)


def _acl_hint(errors: set[int]) -> str:
    if errors & {E.GROUP_AUTHORIZATION_FAILED, E.TOPIC_AUTHORIZATION_FAILED}:
        return (
            " (the coordinator's ACLs refuse this client; an operator grants Read on the group and "
            "its topics with `groupshift acls add`)"
        )
    return ""


class CoordinatorMember(ClassicProtocol):
    """One consumer-group member under scheme three (see the module docstring)."""

    server_assigned = False  # scheme two's draft form: `ServerAssignedMember`

    def __new__(cls, *args: Any, server_assigned: bool = False, **kw: Any):
        # `server_assigned=True` picks scheme two's draft form (the coordinator assigns).
        if server_assigned and cls is CoordinatorMember:
            cls = ServerAssignedMember
        return super().__new__(cls)

    def __init__(
        self,
        group_id: str,
        topics: Sequence[str],
        *,
        assignors: Sequence[str | Assignor] = ("range",),
        partitions_for: Callable[[str], int | None] | None = None,
        rack: str | None = None,
        server_assigned: bool = False,
        **options: Any,
    ):
        """`options` are `GroupMember`'s: bootstrap, zk, listener, session_timeout_ms (10 s),
        heartbeat_interval_ms (3 s), max_poll_interval_ms (5 min), rebalance_timeout_ms (default
        max_poll_interval_ms), group_instance_id, client_id, retry_backoff_ms (100),
        request_timeout_ms (30 s), poll_driven (False), coordinator_timeout_ms (30 s),
        metadata_max_age_ms (30 s). `server_assigned` picks the class (see `__new__`)."""
        if not assignors:
            raise GroupshiftError("a member needs at least one assignor (partition.assignment.strategy)")
        by_name = resolve_assignors(assignors)  # fails fast with the list of known names
        self.validate_assignors(by_name)
        super().__init__(group_id, **options)
        self.topics = list(topics)
        self.assignors = list(by_name)  # protocol names, most preferred first
        self._assignors = by_name
        self.protocol = rebalance_protocol(list(by_name.values()))
        self.rack = rack
        if partitions_for is None:
            partitions_for = self.default_partitions_for()
        if partitions_for is None:
            if self._zk is None:
                raise GroupshiftError(
                    "pass partitions_for or a ZooKeeper client (the leader needs topic sizes)"
                )
            partitions_for = zk_partition_counts(self._zk)
        self._partitions_for = partitions_for
        self._leader_counts: dict[str, int] | None = None
        self._watched: set[str] = set()
        self.rebalance_listeners: list[Callable[[int, set[TopicPartition]], None]] = []

    # -- hooks of its own --------------------------------------------------------------------------

    def validate_assignors(self, by_name: Mapping[str, Assignor]) -> None:
        """Refuse assignors this member cannot propose (raise GroupshiftError). Default: any."""

    def default_partitions_for(self) -> Callable[[str], int | None] | None:
        """Topic sizes for the leader when the caller gave none (None: read them from ZooKeeper)."""
        return None

    # -- GroupMember's and ClassicProtocol's hooks ---------------------------------------------------

    def protocol_type(self) -> str:
        return PROTOCOL_TYPE

    def join_request(self, gen: Generation) -> tuple[int, Message]:
        """JoinGroup with one subscription per assignor, most preferred first."""
        with self._cv:
            owned = set(self._owned)
            stable_gen = self._stable_generation
        body = JoinGroupRequest(
            group_id=self.group_id,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.rebalance_timeout_ms,
            member_id=gen.member_id,
            group_instance_id=self.group_instance_id,
            protocol_type=PROTOCOL_TYPE,
            protocols=join_protocols(
                list(self._assignors.values()),
                self.topics,
                owned,
                stable_gen,
                self.rack,
                previous=self._last_assignment,
            ),
            reason=None,
        )
        return wire.JOIN_GROUP, body

    def perform_assignment(
        self, gen: Generation, join: JoinGroupResponse
    ) -> list[SyncGroupAssignment] | None:
        """The leader runs the assignor the group voted for (and watches the topics' sizes it used)."""
        if not (join.leader == gen.member_id and join.members):
            with self._cv:
                self._leader_counts = None
            return []
        try:
            per_member, counts = perform_assignment(
                gen.protocol_name,
                join.members,
                self._partitions_for,
                self._assignors.get(gen.protocol_name),
            )
        except REFUSALS as exc:
            # Refused, not away (the ACL does not change by itself): fatal, as a refused group is.
            self._fail(exc if isinstance(exc, ZooKeeperNoAuth) else refused_by_acl(exc))
            return None
        except KazooException as exc:
            # ZooKeeper is away (topic sizes unreadable): not the assignor's fault, join again.
            log.warning(
                "group %s: the leader cannot read topic sizes from ZooKeeper (%s); joining again",
                self.group_id,
                type(exc).__name__,
            )
            self._retry_at = time.monotonic() + self.retry_backoff
            return None
        except Exception as exc:
            self._fail(RebalanceFailed(f"the leader's assignor {gen.protocol_name!r} failed: {exc}"))
            return None
        self.stats["zk_requests"] += len(counts)
        assignments = [SyncGroupAssignment(member_id=m, assignment=a) for m, a in per_member.items()]
        with self._cv:
            self._leader_counts = counts
        self._watch_topics(counts)
        return assignments

    def explain_join_error(self, code: int) -> str:
        return {
            E.INCONSISTENT_GROUP_PROTOCOL: f"the group's members use assignors none of which match "
            f"{self.assignors}; list an assignor the other members use",
            E.UNKNOWN_PARTITIONING_STRATEGY: f"the coordinator has no strategy {self.assignors[0]!r}",
        }.get(code) or super().explain_join_error(code)

    def on_join_prepare(self) -> None:
        """Before JoinGroup: revoke (eager), revoke unsubscribed topics (cooperative), or report lost."""
        with self._cv:
            owned, gen = set(self._owned), self._generation
        if not owned:
            return
        if gen.generation_id == NO_GENERATION or not gen.member_id:
            revoked, method = owned, "on_partitions_lost"
        elif self.protocol == EAGER:
            revoked, method = owned, "on_partitions_revoked"
        else:
            revoked = {tp for tp in owned if tp.topic not in self.topics}
            method = "on_partitions_revoked"
        if revoked:
            self._call_listener(method, revoked)
            with self._cv:
                self._owned -= revoked

    def on_join_complete(self, gen: Generation, assigned: set[TopicPartition]) -> None:
        """After SyncGroup: tell the listener, in Kafka's order, what changed."""
        self.stats["rebalances"] += 1
        self._last_assignment = set(assigned)
        with self._cv:
            owned = set(self._owned)
        unsubscribed = {tp for tp in assigned if tp.topic not in self.topics}
        if unsubscribed:
            self.request_rejoin(f"assignment {sorted(unsubscribed)} does not match the subscription")
        if self.protocol == EAGER:
            with self._cv:
                self._owned = set(assigned)
                self._stable_generation = gen.generation_id
                self._needs_join_prepare = True
            self._call_listener("on_partitions_assigned", assigned)
        else:
            revoked, added = cooperative_changes(owned, assigned)
            if revoked:
                self._call_listener("on_partitions_revoked", revoked)
            with self._cv:
                self._owned = (owned - revoked) | added
                self._stable_generation = gen.generation_id
                self._needs_join_prepare = True
            self._call_listener("on_partitions_assigned", added)
            if revoked:
                # The revoked partitions go to their new owners in a follow-up rebalance (KIP-429).
                self.request_rejoin(f"revoked {len(revoked)} partitions for their new owners")
        for fn in list(self.rebalance_listeners):
            fn(gen.generation_id, set(assigned))
        log.info(
            "group %s: %s stable at generation %d with %d partitions",
            self.group_id,
            gen.member_id,
            gen.generation_id,
            len(assigned),
        )

    def _watch_topics(self, counts: Mapping[str, int]) -> None:
        """The leader rejoins when a subscribed topic's partition count changes (metadata refresh)."""
        if self._zk is None:
            return
        from topics.registry import topic_path

        for topic in self.topics:
            if topic in self._watched:
                continue
            self._watched.add(topic)
            self.stats["zk_requests"] += 1
            self._zk.DataWatch(topic_path(topic), self._partition_count_watcher(topic))

    def _partition_count_watcher(self, topic: str) -> Callable[[bytes | None, Any], bool | None]:
        def changed(data: bytes | None, stat: Any) -> bool | None:
            with self._cv:
                if self._closed:
                    return False  # ends the watch
                used = self._leader_counts
            if used is None or data is None:
                return None
            try:
                n = len(json.loads(data)["partitions"])
            except (ValueError, KeyError, TypeError):
                return None
            if used.get(topic, 0) != n:
                self.request_rejoin(f"topic {topic} now has {n} partitions")
            return None

        return changed

    # -- offsets -------------------------------------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, OffsetAndMetadata | int], generation: int) -> None:
        """OffsetCommit fenced by `generation`; raises `CommitFailed` when the group moved on.

        Retries NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / load-in-progress and dropped
        connections (with rediscovery) for up to the request timeout.
        """
        if not offsets:
            return
        with self._cv:
            gen = self._generation
            standalone = generation == NO_GENERATION and not self._threads
            if standalone:
                # Not a group member (manual assignment): Kafka's commit outside any generation,
                # accepted only while the group has no members.
                gen = Generation()
            elif (
                generation != self._stable_generation or not gen.member_id or self.state == MemberState.CLOSED
            ):
                raise CommitFailed(
                    f"commit for generation {generation} refused: the member holds generation "
                    f"{self._stable_generation} ({self.state.value}); the group rebalanced or fenced this "
                    "member, so these records will be delivered again — keep calling poll() (it rejoins) "
                    "and process what it returns"
                )
        body = offset_commit_request(
            self.group_id, offsets, generation, gen.member_id, None if standalone else self.group_instance_id
        )
        resp = self._control_request(wire.OFFSET_COMMIT, body, retry_coordinator=True)
        errors = {p.error_code for t in resp.topics for p in t.partitions if p.error_code}
        if not errors:
            return
        fenced = errors & set(COMMIT_FENCED)
        if fenced:
            code = min(fenced)
            with self._cv:
                current = self._generation == gen and gen.generation_id == generation
                stable = self.state == MemberState.STABLE
            if E.fences_member(code) and current and stable:
                # With a JoinGroup/SyncGroup in flight the group may just have moved to the generation
                # its answer brings this member: that answer, not the commit, decides.
                self._reset_generation(f"commit answered {error_name(code)}")
            elif code == E.REBALANCE_IN_PROGRESS and current and stable:
                self.request_rejoin("commit answered REBALANCE_IN_PROGRESS")
            raise CommitFailed(
                f"commit refused by the coordinator ({error_name(code)}): generation {generation} is no "
                "longer current; the records will be delivered to the partitions' new owner — keep "
                "polling (the member rejoins) and process the new assignment"
            )
        raise GroupshiftError(
            f"offset commit failed: {', '.join(sorted(map(error_name, errors)))}{_acl_hint(errors)}"
        )

    def committed(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int | None]:
        """The group's committed offsets (OffsetFetch); None where nothing was committed."""
        partitions = sorted(set(partitions))
        if not partitions:
            return {}
        topics: dict[str, list[int]] = {}
        for tp in partitions:
            topics.setdefault(tp.topic, []).append(tp.partition)
        body = OffsetFetchRequest(
            group_id=self.group_id,
            topics=[OffsetFetchTopic(name=t, partition_indexes=ps) for t, ps in topics.items()],
        )
        resp = self._control_request(wire.OFFSET_FETCH, body, retry_coordinator=True, top_level=True)
        if resp.error_code:
            raise GroupshiftError(
                f"offset fetch failed: {error_name(resp.error_code)}{_acl_hint({resp.error_code})}"
            )
        out: dict[TopicPartition, int | None] = dict.fromkeys(partitions)
        for t in resp.topics:
            for p in t.partitions:
                off = p.committed_offset
                out[TopicPartition(t.name, p.partition_index)] = None if off < 0 else off
        return out


def offset_commit_request(
    group_id: str,
    offsets: Mapping[TopicPartition, OffsetAndMetadata | int],
    generation: int,
    member_id: str,
    group_instance_id: str | None = None,
) -> OffsetCommitRequest:
    """OffsetCommit for `offsets` (next offsets to read), per topic in partition order."""
    topics: dict[str, list[OffsetCommitPartition]] = {}
    for tp, om in sorted(offsets.items()):
        off, meta = (om.offset, om.metadata) if isinstance(om, OffsetAndMetadata) else (int(om), "")
        topics.setdefault(tp.topic, []).append(
            OffsetCommitPartition(partition_index=tp.partition, committed_offset=off, committed_metadata=meta)
        )
    return OffsetCommitRequest(
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=group_instance_id,
        topics=[OffsetCommitTopic(name=t, partitions=ps) for t, ps in topics.items()],
    )


class ServerAssignedMember(ServerAssigned, CoordinatorMember):
    """A scheme-two member in the draft form: `CoordinatorMember(..., server_assigned=True)`."""
