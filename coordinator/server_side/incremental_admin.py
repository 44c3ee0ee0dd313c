"""Scheme two's incremental groups seen from outside their members: commits fenced by member epoch,
OffsetFetch, DescribeGroups, ConsumerGroupDescribe, ListGroups and DeleteGroups.

`IncrementalAdmin` is a base of `incremental_coordinator.IncrementalCoordinator`, whose groups
(`self.groups`) and classic core (`self.inner`, which keeps the offsets) it uses. Pure: requests
and the time in, outputs out.
"""

from __future__ import annotations

from typing import Any

import msgspec

from coordinator.assignors.base import Subscription
from coordinator.assignors.payloads import encode_assignment, encode_subscription
from coordinator.group.messages import DeleteGroup, Output, Respond
from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE, Group
from coordinator.wire import errors as E
from coordinator.wire.schema import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    OFFSET_COMMIT,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteGroupsResult,
    DescribedGroup,
    DescribedMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListedGroup,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
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
            code = E.STALE_MEMBER_EPOCH
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
                    group_instance_id=None,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=encode_subscription(Subscription(m.topics, generation=m.epoch)),
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

    def _list(self, outputs: list[Output]) -> list[Output]:
        out = []
        for o in outputs:
            if isinstance(o, Respond) and isinstance(o.body, ListGroupsResponse) and not o.body.error_code:
                listed = [g for g in o.body.groups if g.group_id not in self.groups]
                listed += [
                    ListedGroup(
                        group_id=g.group_id, protocol_type=INCREMENTAL_PROTOCOL_TYPE, group_state=g.state
                    )
                    for g in self.groups.values()
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
