"""Which ACL each request needs, as Kafka's `KafkaApis` asks it, and the denial in the request's shape.

With `--authorizer acl` every request of either listener passes `RequestAuthorization` before it
reaches the core or the data plane (`dispatch.RequestDispatch.handle`,
`kafka_listener.KafkaListener`). A ruling is one of:

* nothing — the principal may do the whole request;
* an answer — it may do none of it: the request's own error answer, sent at once (the core never
  sees the request, so nothing changes: no member joins, no offset is written);
* a narrowed request and an `amend` — it may do part of it (some groups of a DescribeGroups, some
  topics of an OffsetCommit): the core serves the allowed part, and `amend` adds the denied
  part's errors to the core's answer (or filters a listing).

What each API needs (`GROUP_RULES`, `TOPIC_RULES` and the per-API rules below; Kafka's):

| API | needs |
|---|---|
| JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat, Server* (scheme two) | Group Read |
| OffsetCommit | Group Read, then Topic Read per topic (per-partition TOPIC_AUTHORIZATION_FAILED) |
| OffsetFetch | Group Describe, then Topic Describe per topic (all topics: the others left out) |
| FindCoordinator, DescribeGroups, ConsumerGroupDescribe | Group Describe (per group) |
| ListGroups | Cluster Describe lists every group; without it, the groups it may Describe |
| DeleteGroups | Group Delete (per group) |
| OffsetDelete | Group Delete, then Topic Read per topic |
| Metadata, ListOffsets | Topic Describe per topic (all topics: the others left out) |
| Fetch | Topic Read per topic |
| Produce | Topic Write per topic |
| ApiVersions, DescribeCluster | nothing |

Denials carry Kafka's codes: GROUP_AUTHORIZATION_FAILED (30), TOPIC_AUTHORIZATION_FAILED (29).
A principal's host is its connection's address (`Connection.peer_host` without Kafka's `/`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import msgspec

from coordinator.kafka_wire import messages as M
from coordinator.wire import codec as P
from coordinator.wire import schema as S
from coordinator.wire.errors import GROUP_AUTHORIZATION_FAILED, TOPIC_AUTHORIZATION_FAILED
from security.acls import (
    CLUSTER,
    CLUSTER_NAME,
    DELETE,
    DESCRIBE,
    GROUP,
    READ,
    TOPIC,
    WRITE,
    Authorizer,
    Operation,
)

replace = msgspec.structs.replace


class Ruling(NamedTuple):
    """See the module docstring: `answer` alone, or `request` with `amend`."""

    answer: Any = None
    request: Any = None
    amend: Callable[[Any], Any] | None = None


#: APIs that need one Group operation on the request's `group_id`, or nothing of it.
GROUP_RULES: dict[int, Operation] = {
    S.JOIN_GROUP: READ,
    S.SYNC_GROUP: READ,
    S.HEARTBEAT: READ,
    S.LEAVE_GROUP: READ,
    S.CONSUMER_GROUP_HEARTBEAT: READ,
    S.SERVER_JOIN_GROUP: READ,
    S.SERVER_HEARTBEAT: READ,
    S.WATCH_GROUP: READ,
}
#: APIs anyone may call: a client must learn the versions and the nodes, and authenticate, before
#: it is anyone an ACL could name.
OPEN_APIS = frozenset({S.API_VERSIONS, S.DESCRIBE_CLUSTER, S.SASL_HANDSHAKE, S.SASL_AUTHENTICATE})
#: The data plane: the Topic operation each topic of the request needs.
TOPIC_RULES: dict[int, Operation] = {
    M.METADATA: DESCRIBE,
    M.LIST_OFFSETS: DESCRIBE,
    M.FETCH: READ,
    M.PRODUCE: WRITE,
}


def _host(peer_host: str) -> str:
    return peer_host[1:] if peer_host.startswith("/") else peer_host


def _denied(what: str, name: str, principal: str) -> str:
    return f"{principal} is not authorized: {what} {name!r}"


def _some_topics(body: Any, allowed: list, refused: Any) -> Ruling:
    """A group request some of whose topics are refused (`refused`: their answer): with none
    allowed, that answer at once; else the allowed topics go to the core and the refused ones are
    added to its answer (unless that answer failed as a whole)."""
    if not allowed:
        return Ruling(answer=refused)

    def amend(resp: Any) -> Any:
        if type(resp) is not type(refused) or getattr(resp, "error_code", 0):
            return resp
        return replace(resp, topics=[*resp.topics, *refused.topics])

    return Ruling(request=replace(body, topics=allowed), amend=amend)


class Grants:
    """The group requests one connection's principal was allowed, so that the next of the same kind
    is served without asking the ACLs again: (api, group) pairs, held while the ACLs and the
    principal stay those they were allowed under (any change of either forgets them all)."""

    MAX = 4_096  # pairs a connection remembers; past it the others are asked each time

    __slots__ = ("version", "principal", "allowed")

    def __init__(self) -> None:
        self.version = -1
        self.principal = ""
        self.allowed: set[tuple[int, str | None]] = set()


class RequestAuthorization:
    """The rulings of one node (see the module docstring), over its ACLs' `Authorizer`."""

    def __init__(self, authorizer: Authorizer):
        self.authorizer = authorizer
        self._rules: dict[int, Callable[[str, str, Any], Ruling | None]] = {
            S.FIND_COORDINATOR: self._find_coordinator,
            S.OFFSET_COMMIT: self._offset_commit,
            S.OFFSET_FETCH: self._offset_fetch,
            S.OFFSET_DELETE: self._offset_delete,
            S.DESCRIBE_GROUPS: self._describe_groups,
            S.CONSUMER_GROUP_DESCRIBE: self._consumer_group_describe,
            S.LIST_GROUPS: self._list_groups,
            S.DELETE_GROUPS: self._delete_groups,
        }
        self._data_rules: dict[int, Callable[[str, str, Any], Ruling | None]] = {
            M.METADATA: self._metadata,
            M.LIST_OFFSETS: self._list_offsets,
            M.FETCH: self._fetch,
            M.PRODUCE: self._produce,
        }

    def covers(self, api: int) -> bool:
        """A rule (or openness) is declared for `api`."""
        return api in GROUP_RULES or api in OPEN_APIS or api in self._rules or api in self._data_rules

    # -- the two entry points --------------------------------------------------------------------

    def rule(
        self, principal: str, peer_host: str, api: int, body: Any, grants: Grants | None = None
    ) -> Ruling | None:
        """The ruling on a group request (either listener); None: allowed as it is. `grants`: the
        connection's, which answers a Heartbeat (any GROUP_RULES api) of a group it was allowed
        before without a lookup."""
        op = GROUP_RULES.get(api)
        if op is not None:
            key = (api, body.group_id)
            version = self.authorizer.version
            if grants is not None and grants.version == version and grants.principal == principal:
                if key in grants.allowed:
                    return None
            if self.authorizer.authorize(principal, _host(peer_host), op, GROUP, body.group_id):
                if grants is not None:
                    if grants.version != version or grants.principal != principal:
                        grants.version, grants.principal = version, principal
                        grants.allowed.clear()
                    if len(grants.allowed) < Grants.MAX:
                        grants.allowed.add(key)
                return None
            why = _denied(f"Group {op.value} on", body.group_id, principal)
            return Ruling(answer=P.precheck_error_body(api, body, GROUP_AUTHORIZATION_FAILED, why))
        rule = self._rules.get(api)
        if rule is not None:
            return rule(principal, _host(peer_host), body)
        if api in OPEN_APIS:
            return None
        # An API without a rule is refused rather than served open (a test checks every API has one).
        return Ruling(answer=S.ErrorResponse(error_code=GROUP_AUTHORIZATION_FAILED, error_message="no rule"))

    def rule_data(self, principal: str, peer_host: str, api: int, body: Any) -> Ruling | None:
        """The ruling on a Metadata, ListOffsets, Fetch or Produce request (the Kafka listener)."""
        return self._data_rules[api](principal, _host(peer_host), body)

    # -- helpers ---------------------------------------------------------------------------------

    def _may(self, principal: str, host: str, op: Operation, rtype, name: str) -> bool:
        return self.authorizer.authorize(principal, host, op, rtype, name)

    def _split_topics(self, principal: str, host: str, op: Operation, topics: list, name=lambda t: t.name):
        """(allowed, denied) topics of a request."""
        allowed, denied = [], []
        for t in topics:
            (allowed if self._may(principal, host, op, TOPIC, name(t)) else denied).append(t)
        return allowed, denied

    def _split_groups(self, principal: str, host: str, op: Operation, groups: list[str]):
        denied = {g for g in groups if not self._may(principal, host, op, GROUP, g)}
        return [g for g in groups if g not in denied], denied

    # -- group APIs ------------------------------------------------------------------------------

    def _find_coordinator(self, principal: str, host: str, body: S.FindCoordinatorRequest) -> Ruling | None:
        if body.key_type != 0 or self._may(principal, host, DESCRIBE, GROUP, body.key):
            return None  # (other key types are refused by the node anyway)
        why = _denied("Group Describe on", body.key, principal)
        return Ruling(answer=P.precheck_error_body(S.FIND_COORDINATOR, body, GROUP_AUTHORIZATION_FAILED, why))

    def _offset_commit(self, principal: str, host: str, body: S.OffsetCommitRequest) -> Ruling | None:
        if not self._may(principal, host, READ, GROUP, body.group_id):
            return Ruling(answer=S.OffsetCommitResponse.with_error(body, GROUP_AUTHORIZATION_FAILED))
        allowed, denied = self._split_topics(principal, host, READ, body.topics)
        if not denied:
            return None
        refused = S.OffsetCommitResponse.with_error(replace(body, topics=denied), TOPIC_AUTHORIZATION_FAILED)
        return _some_topics(body, allowed, refused)

    def _offset_fetch(self, principal: str, host: str, body: S.OffsetFetchRequest) -> Ruling | None:
        if not self._may(principal, host, DESCRIBE, GROUP, body.group_id):
            return Ruling(answer=S.OffsetFetchResponse(error_code=GROUP_AUTHORIZATION_FAILED))
        if body.topics is None:  # every committed offset: the topics it may not Describe left out

            def keep_described(resp: Any) -> Any:
                if type(resp) is not S.OffsetFetchResponse:
                    return resp
                topics = [t for t in resp.topics if self._may(principal, host, DESCRIBE, TOPIC, t.name)]
                return replace(resp, topics=topics) if len(topics) != len(resp.topics) else resp

            return Ruling(request=body, amend=keep_described)
        allowed, denied = self._split_topics(principal, host, DESCRIBE, body.topics)
        if not denied:
            return None
        refused = [
            S.OffsetFetchTopicResponse(
                name=t.name,
                partitions=[
                    S.OffsetFetchPartition(
                        partition_index=p,
                        committed_offset=-1,
                        metadata="",
                        error_code=TOPIC_AUTHORIZATION_FAILED,
                    )
                    for p in t.partition_indexes
                ],
            )
            for t in denied
        ]
        return _some_topics(body, allowed, S.OffsetFetchResponse(error_code=0, topics=refused))

    def _offset_delete(self, principal: str, host: str, body: S.OffsetDeleteRequest) -> Ruling | None:
        if not self._may(principal, host, DELETE, GROUP, body.group_id):
            return Ruling(answer=S.OffsetDeleteResponse(error_code=GROUP_AUTHORIZATION_FAILED))
        allowed, denied = self._split_topics(principal, host, READ, body.topics)
        if not denied:
            return None
        refused = [
            S.TopicPartitionResults(
                name=t.name,
                partitions=[
                    S.PartitionResult(
                        partition_index=p.partition_index, error_code=TOPIC_AUTHORIZATION_FAILED
                    )
                    for p in t.partitions
                ],
            )
            for t in denied
        ]
        return _some_topics(body, allowed, S.OffsetDeleteResponse(error_code=0, topics=refused))

    def _per_group(
        self,
        principal: str,
        host: str,
        op: Operation,
        groups: list[str],
        narrow: Callable[[list[str]], Any],
        merge: Callable[[Any, list[str], set[str]], Any],
        empty: Any,
    ) -> Ruling | None:
        """A request over several groups: the groups it may not `op` answered by `merge` with
        GROUP_AUTHORIZATION_FAILED, in the request's order; `empty` is the core's answer to none."""
        allowed, denied = self._split_groups(principal, host, op, groups)
        if not denied:
            return None
        if not allowed:
            return Ruling(answer=merge(empty, groups, denied))
        return Ruling(request=narrow(allowed), amend=lambda resp: merge(resp, groups, denied))

    def _describe_groups(self, principal: str, host: str, body: S.DescribeGroupsRequest) -> Ruling | None:
        def merge(resp: Any, order: list[str], denied: set[str]) -> Any:
            if type(resp) is not S.DescribeGroupsResponse:
                return resp
            served = {g.group_id: g for g in resp.groups}
            return S.DescribeGroupsResponse(
                groups=[
                    P.described_error(g, GROUP_AUTHORIZATION_FAILED) if g in denied else served[g]
                    for g in order
                    if g in denied or g in served
                ]
            )

        return self._per_group(
            principal,
            host,
            DESCRIBE,
            body.groups,
            lambda groups: S.DescribeGroupsRequest(groups=groups),
            merge,
            S.DescribeGroupsResponse(groups=[]),
        )

    def _consumer_group_describe(
        self, principal: str, host: str, body: S.ConsumerGroupDescribeRequest
    ) -> Ruling | None:
        def merge(resp: Any, order: list[str], denied: set[str]) -> Any:
            if type(resp) is not S.ConsumerGroupDescribeResponse:
                return resp
            served = {g.group_id: g for g in resp.groups}
            why = "Group Describe is not authorized"
            return S.ConsumerGroupDescribeResponse(
                groups=[
                    P.described_consumer_error(g, GROUP_AUTHORIZATION_FAILED, why)
                    if g in denied
                    else served[g]
                    for g in order
                    if g in denied or g in served
                ]
            )

        return self._per_group(
            principal,
            host,
            DESCRIBE,
            body.group_ids,
            lambda groups: replace(body, group_ids=groups),
            merge,
            S.ConsumerGroupDescribeResponse(groups=[]),
        )

    def _delete_groups(self, principal: str, host: str, body: S.DeleteGroupsRequest) -> Ruling | None:
        def merge(resp: Any, order: list[str], denied: set[str]) -> Any:
            if type(resp) is not S.DeleteGroupsResponse:
                return resp
            served = {r.group_id: r for r in resp.results}
            return S.DeleteGroupsResponse(
                results=[
                    S.DeleteGroupsResult(group_id=g, error_code=GROUP_AUTHORIZATION_FAILED)
                    if g in denied
                    else served[g]
                    for g in dict.fromkeys(order)
                    if g in denied or g in served
                ]
            )

        return self._per_group(
            principal,
            host,
            DELETE,
            body.groups_names,
            lambda groups: S.DeleteGroupsRequest(groups_names=groups),
            merge,
            S.DeleteGroupsResponse(results=[]),
        )

    def _list_groups(self, principal: str, host: str, body: S.ListGroupsRequest) -> Ruling | None:
        if self._may(principal, host, DESCRIBE, CLUSTER, CLUSTER_NAME):
            return None

        def describable(resp: Any) -> Any:
            if type(resp) is not S.ListGroupsResponse:
                return resp
            return replace(
                resp,
                groups=[g for g in resp.groups if self._may(principal, host, DESCRIBE, GROUP, g.group_id)],
            )

        return Ruling(request=body, amend=describable)

    # -- the data plane --------------------------------------------------------------------------

    def _metadata(self, principal: str, host: str, body: M.MetadataRequest) -> Ruling | None:
        # Served whole, then the topics it may not Describe are left out of a listing of every
        # topic, or answered TOPIC_AUTHORIZATION_FAILED when asked for (by id: with the id only).
        by_name = set(body.topics or ())

        def amend(resp: Any) -> Any:
            if type(resp) is not M.MetadataResponse:
                return resp
            topics = []
            for t in resp.topics:
                if t.name is None or self._may(principal, host, DESCRIBE, TOPIC, t.name):
                    topics.append(t)
                elif t.name in by_name:
                    topics.append(M.MetadataTopic(error_code=TOPIC_AUTHORIZATION_FAILED, name=t.name))
                elif body.topic_ids:
                    topics.append(
                        M.MetadataTopic(error_code=TOPIC_AUTHORIZATION_FAILED, name=None, topic_id=t.topic_id)
                    )
            return replace(resp, topics=topics)

        return Ruling(request=body, amend=amend)

    def _data(
        self, principal: str, host: str, api: int, topics: list, name, rebuild, refuse, answer
    ) -> Ruling | None:
        """A data-plane request over topics: the allowed ones served, the others refused."""
        allowed, denied = self._split_topics(principal, host, TOPIC_RULES[api], topics, name)
        if not denied:
            return None
        refused = [refuse(t) for t in denied]
        if not allowed:
            return Ruling(answer=answer([], refused))
        return Ruling(request=rebuild(allowed), amend=lambda resp: resp and answer(resp, refused))

    def _list_offsets(self, principal: str, host: str, body: M.ListOffsetsRequest) -> Ruling | None:
        return self._data(
            principal,
            host,
            M.LIST_OFFSETS,
            body.topics,
            lambda t: t.name,
            lambda topics: replace(body, topics=topics),
            lambda t: M.ListOffsetsTopicResponse(
                name=t.name,
                partitions=[
                    M.ListOffsetsPartitionResponse(p.partition_index, TOPIC_AUTHORIZATION_FAILED)
                    for p in t.partitions
                ],
            ),
            lambda resp, refused: M.ListOffsetsResponse(topics=[*(resp.topics if resp else ()), *refused]),
        )

    def _fetch(self, principal: str, host: str, body: M.FetchRequest) -> Ruling | None:
        return self._data(
            principal,
            host,
            M.FETCH,
            body.topics,
            lambda t: t.topic,
            lambda topics: replace(body, topics=topics),
            lambda t: M.FetchTopicResponse(
                topic=t.topic,
                partitions=[
                    M.FetchPartitionResponse(p.partition, TOPIC_AUTHORIZATION_FAILED) for p in t.partitions
                ],
            ),
            lambda resp, refused: M.FetchResponse(responses=[*(resp.responses if resp else ()), *refused]),
        )

    def _produce(self, principal: str, host: str, body: M.ProduceRequest) -> Ruling | None:
        def answer(resp: Any, refused: list) -> Any:
            if body.acks == 0:
                return None
            return M.ProduceResponse(responses=[*(resp.responses if resp else ()), *refused])

        return self._data(
            principal,
            host,
            M.PRODUCE,
            body.topic_data,
            lambda t: t.name,
            lambda topics: replace(body, topic_data=topics),
            lambda t: M.ProduceTopicResponse(
                name=t.name,
                partition_responses=[
                    M.ProducePartitionResponse(p.index, TOPIC_AUTHORIZATION_FAILED) for p in t.partition_data
                ],
            ),
            answer,
        )
