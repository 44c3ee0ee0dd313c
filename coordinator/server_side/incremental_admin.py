"""Scheme two's incremental groups seen from outside their members: commits and fetches fenced by
member epoch, DescribeGroups, ConsumerGroupDescribe, ListGroups and DeleteGroups.

`IncrementalAdmin` is a base of `incremental_coordinator.IncrementalCoordinator`, whose groups
(`self.groups`) and classic core (`self.inner`, which keeps the offsets) it uses. Pure: requests
and the time in, outputs out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from coordinator.assignors.base import Subscription
from coordinator.assignors.consumer_protocol import by_topic
from coordinator.assignors.payloads import encode_assignment, encode_subscription
from coordinator.group.messages import DeleteGroup, Output, Respond
from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE, Group
from coordinator.wire import codec as P
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    OFFSET_COMMIT,
    OFFSET_FETCH,
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupMember,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedConsumerGroup,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
)


class IncrementalAdmin:
    """The admin and offset side of `IncrementalCoordinator` (see the module docstring)."""

    groups: dict[str, Group]
    inner: Any

    def _offset_commit(self, req: OffsetCommitRequest, now: int, token: Any, **kw) -> list[Output]:
        group = self.groups[req.group_id]
        member = group.members.get(req.member_id)
        code = E.NONE
        if member is None:
            if req.member_id or req.generation_id >= 0 or group.members:
                code = E.UNKNOWN_MEMBER_ID  # only an empty group takes commits from outside it
        elif req.generation_id != member.reported_epoch:
            # A classic member's generation is its member epoch: Kafka's classic error for it.
            code = E.STALE_MEMBER_EPOCH if member.classic is None else E.ILLEGAL_GENERATION
        if code:
            return [Respond(token, OffsetCommitResponse.with_error(req, code))]
        # Fenced here: the classic core stores it as a commit from outside any generation.
        simple = msgspec.structs.replace(req, generation_id=-1, member_id="", group_instance_id=None)
        return self.inner.handle(OFFSET_COMMIT, simple, now, request_token=token, **kw)

    def _described(self, group: Group) -> DescribedGroup:
        return DescribedGroup(
            error_code=E.NONE,
            group_id=group.group_id,
            group_state=group.state,
            protocol_type=INCREMENTAL_PROTOCOL_TYPE,
            protocol_data=group.assignor,
            members=[
                DescribedMember(
                    member_id=m.member_id,
                    group_instance_id=m.instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=encode_subscription(Subscription(m.topics, generation=m.reported_epoch)),
                    member_assignment=encode_assignment(sorted(m.assigned)),
                )
                for m in group.members.values()
            ],
        )

    def _describe(self, req: DescribeGroupsRequest, now: int, token: Any, **kw) -> list[Output]:
        others = [g for g in req.groups if g not in self.groups]
        theirs: dict[str, DescribedGroup] = {}
        out: list[Output] = []
        if others:
            probe = object()
            for o in self.inner.handle(
                DESCRIBE_GROUPS, DescribeGroupsRequest(groups=others), now, request_token=probe, **kw
            ):
                if isinstance(o, Respond) and o.request_token is probe:
                    theirs = {g.group_id: g for g in o.body.groups}
                else:
                    out.append(o)
        groups = [self._described(self.groups[g]) if g in self.groups else theirs[g] for g in req.groups]
        out.append(Respond(token, DescribeGroupsResponse(groups=groups)))
        return out

    def _consumer_describe(self, req: ConsumerGroupDescribeRequest, token: Any, **kw) -> list[Output]:
        """ConsumerGroupDescribe (69): each group with its epochs and its members' current and target
        assignments (topics by name); a group that is not incremental gets GROUP_ID_NOT_FOUND."""
        check = kw.get("group_check")
        described = []
        for gid in req.group_ids:
            group = self.groups.get(gid)
            if check is not None and (code := check(gid)):
                described.append(P.described_consumer_error(gid, code))
            elif group is None:
                message = f"{gid!r} is not a consumer-protocol group"
                described.append(P.described_consumer_error(gid, E.GROUP_ID_NOT_FOUND, message))
            else:
                described.append(_consumer_group(group))
        return [Respond(token, ConsumerGroupDescribeResponse(groups=described))]

    def _offset_fetch(self, req: OffsetFetchRequest, now: int, token: Any, **kw) -> list[Output]:
        """OffsetFetch with a member id and epoch (Kafka v9): only the member's current epoch reads
        its group's offsets; without them (nil, -1) anyone does."""
        group = self.groups[req.group_id]
        if req.member_id or req.member_epoch >= 0:
            member = group.members.get(req.member_id or "")
            if member is None:
                return [Respond(token, P.precheck_error_body(OFFSET_FETCH, req, E.UNKNOWN_MEMBER_ID))]
            if req.member_epoch != member.reported_epoch:
                return [Respond(token, P.precheck_error_body(OFFSET_FETCH, req, E.STALE_MEMBER_EPOCH))]
        return self.inner.handle(OFFSET_FETCH, req, now, request_token=token, **kw)

    def _list(self, req: ListGroupsRequest, outputs: list[Output]) -> list[Output]:
        """The classic core's listing, with the consumer-protocol groups the request's filters take
        (Kafka's group type `consumer`; states compared case-insensitively, as Kafka does)."""
        types = {t.lower() for t in req.types_filter or ()}
        states = {s.lower() for s in req.states_filter or ()}
        mine = [
            g
            for g in self.groups.values()
            if (not types or "consumer" in types) and (not states or g.state.lower() in states)
        ]
        out = []
        for o in outputs:
            if isinstance(o, Respond) and isinstance(o.body, ListGroupsResponse) and not o.body.error_code:
                listed = [g for g in o.body.groups if g.group_id not in self.groups]
                listed += [
                    ListedGroup(
                        group_id=g.group_id, protocol_type=INCREMENTAL_PROTOCOL_TYPE, group_state=g.state
                    )
                    for g in mine
                ]
                o = Respond(o.request_token, msgspec.structs.replace(o.body, groups=listed))
            out.append(o)
        return out

    def _delete(self, req: DeleteGroupsRequest, now: int, token: Any, **kw) -> list[Output]:
        mine = [g for g in req.groups_names if g in self.groups]
        busy = {g for g in mine if self.groups[g].members}
        results: dict[str, int] = dict.fromkeys(busy, E.NON_EMPTY_GROUP)
        out: list[Output] = []
        rest = [g for g in req.groups_names if g not in busy]
        if rest:
            probe = object()
            for o in self.inner.handle(
                DELETE_GROUPS, DeleteGroupsRequest(groups_names=rest), now, request_token=probe, **kw
            ):
                if isinstance(o, Respond) and o.request_token is probe:
                    results.update({r.group_id: r.error_code for r in o.body.results})
                else:
                    out.append(o)
        for g in mine:
            if g in busy:
                continue
            del self.groups[g]
            if results.get(g) == E.GROUP_ID_NOT_FOUND:  # no offsets: only our record to remove
                out.append(DeleteGroup(g))
                results[g] = E.NONE
        body = DeleteGroupsResponse(
            results=[DeleteGroupsResult(group_id=g, error_code=results[g]) for g in req.groups_names]
        )
        out.append(Respond(token, body))
        return out


def _consumer_group(group: Group) -> DescribedConsumerGroup:
    return DescribedConsumerGroup(
        error_code=E.NONE,
        error_message=None,
        group_id=group.group_id,
        group_state=group.state,
        group_epoch=group.epoch,
        assignment_epoch=group.assignment_epoch,
        assignor_name=group.assignor,
        members=[
            ConsumerGroupMember(
                member_id=m.member_id,
                instance_id=m.instance_id,
                rack_id=m.rack_id,
                member_epoch=m.reported_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=list(m.names),
                subscribed_topic_regex=m.regex,
                assignment=by_topic(m.assigned),
                target_assignment=by_topic(group.target.get(m.member_id, ())),
            )
            for m in group.members.values()
        ],
    )
