"""The offsets part of the group coordinator core: OffsetCommit, OffsetFetch, retention, deletion.

Kafka's `OffsetMetadataManager`: OffsetCommit (which commits a group
accepts, in which order the checks run), OffsetFetch and offset retention, OffsetDelete,
and the callbacks of the offset writes it starts. The records themselves (staged, committed,
expired) are kept by each group's `GroupOffsets` (`coordinator/group/offsets.py`). It asks the
`GroupManager` (`coordinator/group/group_manager.py`) whether a committer is a member of the current
generation (a commit keeps the member's session alive) and to create or remove groups, as Kafka's
offsets manager asks its group metadata manager.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from coordinator.group.context import CoreContext
from coordinator.group.group_manager import GroupManager
from coordinator.group.messages import DeleteOffsets, OffsetRecord, WriteOffsets
from coordinator.group.metadata import CONSUMER_PROTOCOL_TYPES, Group
from coordinator.group.offsets import metadata_length
from coordinator.group.state import COMPLETING_REBALANCE, DEAD, EMPTY, PREPARING_REBALANCE, STABLE
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchPartition,
    OffsetFetchRequest,
    OffsetFetchResponse,
    OffsetFetchTopicResponse,
    PartitionResult,
    TopicPartitionResults,
)
from core.types import TopicPartition

#: One OffsetCommit's layout: per topic, per partition, None (written) or the partition's error.
CommitLayout = list[tuple[str, list[tuple[int, int | None]]]]


@dataclass(frozen=True, slots=True)
class OffsetCommitWrite:
    """An offset write the offsets part waits for: one OffsetCommit's accepted offsets (staged
    until written) and whom to answer."""

    group: Group
    offsets: list[OffsetRecord]
    request_token: Any
    layout: CommitLayout


class OffsetManager:
    """Committed offsets of every group the node holds (Kafka's `OffsetMetadataManager`)."""

    def __init__(self, ctx: CoreContext, group_manager: GroupManager) -> None:
        self._ctx = ctx
        self.config = ctx.config
        self.groups = ctx.groups
        self._group_manager = group_manager

    def delete_topics(self, topics: Iterable[str]) -> None:
        """Topics were deleted: drop their offsets from every group at once."""
        gone = frozenset(topics)
        for group in list(self.groups.values()):
            self.remove_offsets(group, [tp for tp in group.offsets.committed if tp.topic in gone])

    def delete_all(self, group: Group) -> None:
        """Forget every committed offset of a group about to be deleted (its `DeleteGroup` write
        removes them from the store)."""
        group.offsets.remove(list(group.offsets.committed))

    # ================================================================ OffsetCommit

    def offset_commit(
        self, req: OffsetCommitRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if gid is None:
            self._ctx.respond(token, OffsetCommitResponse.with_error(req, E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._ctx.respond(token, OffsetCommitResponse.with_error(req, err))
            return
        group = self.groups.get(gid)
        if group is None:
            if req.generation_id >= 0:
                self._ctx.respond(token, OffsetCommitResponse.with_error(req, E.ILLEGAL_GENERATION))
                return
            group = self._group_manager.create_group(gid)  # a "simple" group: offsets only, no protocol type
        err = self._validate_commit(group, req)
        if err:
            self._ctx.respond(token, OffsetCommitResponse.with_error(req, err))
            return
        self._store_offsets(group, req, token)

    def _validate_commit(self, group: Group, req: OffsetCommitRequest) -> int:
        if group.state is DEAD:
            return E.COORDINATOR_NOT_AVAILABLE
        if req.generation_id < 0 and group.state is EMPTY:
            return E.NONE  # the admin / standalone path: no member checks at all
        if req.generation_id >= 0 or req.member_id or req.group_instance_id is not None:
            err = self._group_manager.validate_member(group, req.member_id, req.group_instance_id)
            if err:
                return err
            if req.generation_id != group.generation_id:
                return E.ILLEGAL_GENERATION
        else:
            return E.UNKNOWN_MEMBER_ID  # only members can commit to a non-empty group
        state = group.state
        if state is COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        if state is STABLE or state is PREPARING_REBALANCE:
            m = group.members[req.member_id]
            self._group_manager.schedule_session(group, m, m.session_timeout_ms)
        return E.NONE

    def _store_offsets(self, group: Group, req: OffsetCommitRequest, token: Any) -> None:
        now, max_bytes = self._ctx.now, self.config.offset_metadata_max_bytes
        expire = None if req.retention_time_ms == -1 else now + req.retention_time_ms
        records: dict[TopicPartition, OffsetRecord] = {}
        layout: CommitLayout = []
        for t in req.topics:
            parts: list[tuple[int, int | None]] = []
            for p in t.partitions:
                metadata = p.committed_metadata or ""
                if metadata_length(metadata) > max_bytes:
                    parts.append((p.partition_index, E.OFFSET_METADATA_TOO_LARGE))
                else:
                    parts.append((p.partition_index, None))
                    tp = TopicPartition(t.name, p.partition_index)
                    records.pop(tp, None)  # a partition listed twice: the last one counts
                    records[tp] = OffsetRecord(
                        t.name, p.partition_index, p.committed_offset, metadata, now, expire
                    )
            layout.append((t.name, parts))
        if not records:
            self._ctx.respond(token, _commit_body(layout, E.NONE))
            return
        batch = list(records.values())
        group.offsets.stage(batch)
        seq = self._ctx.expect(OffsetCommitWrite(group, batch, token, layout))
        self._ctx.out.append(WriteOffsets(group.group_id, batch, req.generation_id, seq))

    def commit_persisted(self, pending: OffsetCommitWrite, seq: int, ok: bool, error: int) -> None:
        pending.group.offsets.complete(pending.offsets, seq, ok)
        body = _commit_body(pending.layout, E.NONE if ok else E.map_offset_write_error(error))
        self._ctx.respond(pending.request_token, body)

    # ================================================================ OffsetFetch, retention

    def offset_fetch(
        self, req: OffsetFetchRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if gid is None:
            self._ctx.respond(token, OffsetFetchResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._ctx.respond(token, OffsetFetchResponse(error_code=err))
            return
        group = self.groups.get(gid)
        if group is not None and group.state is DEAD:
            group = None
        topics: list[OffsetFetchTopicResponse] = []
        if req.topics is None:
            if group is not None:
                by_topic: dict[str, list[OffsetFetchPartition]] = {}
                for tp in sorted(group.offsets.committed):
                    by_topic.setdefault(tp.topic, []).append(_fetched(group, tp, req.require_stable))
                topics = [
                    OffsetFetchTopicResponse(name=name, partitions=parts) for name, parts in by_topic.items()
                ]
        else:
            for t in req.topics:
                parts = [
                    _fetched(group, TopicPartition(t.name, p), req.require_stable)
                    for p in t.partition_indexes
                ]
                topics.append(OffsetFetchTopicResponse(name=t.name, partitions=parts))
        self._ctx.respond(token, OffsetFetchResponse(error_code=E.NONE, topics=topics))

    def expire_offsets(self) -> None:
        """Offset retention: which offsets each kind of group may lose, then drop groups left empty."""
        now, retention = self._ctx.now, self.config.offsets_retention_ms
        for group in list(self.groups.values()):
            if group.state is DEAD:
                continue
            offsets = group.offsets
            if group.protocol_type is not None and group.state is EMPTY:
                expired = offsets.expired(now, retention, since_ms=group.state_timestamp)
            elif group.protocol_type is None:
                expired = offsets.expired(now, retention)
            elif (
                group.protocol_type in CONSUMER_PROTOCOL_TYPES
                and group.state is STABLE
                and group.subscribed_topics is not None
            ):
                expired = offsets.expired(now, retention, keep_topics=group.subscribed_topics)
            else:
                expired = []
            self.remove_offsets(group, expired)
            if (
                group.state is EMPTY
                and not offsets.has_offsets()
                and self.groups.get(group.group_id) is group
            ):
                self._group_manager.remove_group(group)

    def remove_offsets(self, group: Group, tps: list[TopicPartition]) -> None:
        removed = group.offsets.remove(tps)
        if removed:
            self._ctx.out.append(DeleteOffsets(group.group_id, removed))
        if removed and group.state is EMPTY and not group.offsets.has_offsets():
            self._group_manager.remove_group(group)

    # ================================================================ OffsetDelete

    def offset_delete(
        self, req: OffsetDeleteRequest, token: Any, client_id: str, client_host: str, check: Any
    ) -> None:
        gid = req.group_id
        if not gid:
            self._ctx.respond(token, OffsetDeleteResponse(error_code=E.INVALID_GROUP_ID))
            return
        if check is not None and (err := check(gid)):
            self._ctx.respond(token, OffsetDeleteResponse(error_code=err))
            return
        group = self.groups.get(gid)
        if group is None or group.state is DEAD:
            self._ctx.respond(token, OffsetDeleteResponse(error_code=E.GROUP_ID_NOT_FOUND))
            return
        if group.state is not EMPTY and group.protocol_type not in CONSUMER_PROTOCOL_TYPES:
            self._ctx.respond(token, OffsetDeleteResponse(error_code=E.NON_EMPTY_GROUP))
            return
        empty = group.state is EMPTY
        eligible: list[TopicPartition] = []
        topics = []
        for t in req.topics:
            subscribed = not empty and group.is_subscribed_to(t.name)
            parts = []
            for p in t.partitions:
                if subscribed:
                    parts.append(
                        PartitionResult(
                            partition_index=p.partition_index, error_code=E.GROUP_SUBSCRIBED_TO_TOPIC
                        )
                    )
                else:
                    eligible.append(TopicPartition(t.name, p.partition_index))
                    parts.append(PartitionResult(partition_index=p.partition_index, error_code=E.NONE))
            topics.append(TopicPartitionResults(name=t.name, partitions=parts))
        self.remove_offsets(group, eligible)
        self._ctx.respond(token, OffsetDeleteResponse(error_code=E.NONE, topics=topics))


def _commit_body(layout: CommitLayout, written: int) -> OffsetCommitResponse:
    return OffsetCommitResponse(
        topics=[
            TopicPartitionResults(
                name=name,
                partitions=[
                    PartitionResult(partition_index=p, error_code=written if err is None else err)
                    for p, err in parts
                ],
            )
            for name, parts in layout
        ]
    )


def _fetched(group: Group | None, tp: TopicPartition, require_stable: bool) -> OffsetFetchPartition:
    if group is not None:
        if require_stable and group.offsets.is_pending(tp):
            return OffsetFetchPartition(
                partition_index=tp.partition,
                committed_offset=-1,
                metadata="",
                error_code=E.UNSTABLE_OFFSET_COMMIT,
            )
        r = group.offsets.committed.get(tp)
        if r is not None:
            return OffsetFetchPartition(
                partition_index=tp.partition,
                committed_offset=r.offset,
                metadata=r.metadata,
                error_code=E.NONE,
            )
    return OffsetFetchPartition(
        partition_index=tp.partition, committed_offset=-1, metadata="", error_code=E.NONE
    )
