"""Topic names ↔ topic ids for the Kafka listener: the cache and KIP-848's conversions, pure.

The group coordinator core speaks topic names; KIP-848's clients name owned and assigned topics by
id only (Metadata v10+ serves the ids, `topics.topic_ids` keeps them in ZooKeeper). `TopicIds`
is the node's view of the ids it has read; the listener fills it (off the event loop) before it
converts a request or an answer that names a topic it does not know.

    ids = TopicIds()
    ids.learn("clicks", u)
    req = heartbeat_request(kafka_heartbeat, ids, session_timeout_ms=45_000)   # names for the core
    wire = heartbeat_response(core_answer, ids)                                 # ids for the client
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import msgspec

from coordinator.kafka_wire import messages as M
from coordinator.wire import schema as S

# Bounds the cache: far more topics than a node serves (topics.limits has the per-topic bounds).
MAX_TOPICS = 1_000_000


class TopicIds:
    """Topic name ↔ id, as last read from ZooKeeper (a re-created topic's new id replaces the old)."""

    __slots__ = ("_by_name", "_by_id")

    def __init__(self) -> None:
        self._by_name: dict[str, uuid.UUID] = {}
        self._by_id: dict[uuid.UUID, str] = {}

    def learn(self, name: str, topic_id: uuid.UUID) -> None:
        old = self._by_name.get(name)
        if old == topic_id:
            return
        if old is not None:
            self._by_id.pop(old, None)
        if len(self._by_name) >= MAX_TOPICS and old is None:
            self._by_name.clear()
            self._by_id.clear()
        self._by_name[name] = topic_id
        self._by_id[topic_id] = name

    def forget(self, name: str) -> None:
        old = self._by_name.pop(name, None)
        if old is not None:
            self._by_id.pop(old, None)

    def id_of(self, name: str) -> uuid.UUID | None:
        return self._by_name.get(name)

    def name_of(self, topic_id: uuid.UUID | None) -> str | None:
        return None if topic_id is None else self._by_id.get(topic_id)

    def unknown_names(self, names: Iterable[str]) -> set[str]:
        return {n for n in names if n not in self._by_name}

    def unknown_ids(self, ids: Iterable[uuid.UUID | None]) -> set[uuid.UUID]:
        return {i for i in ids if i is not None and i not in self._by_id}


# ---------------------------------------------------------------- ConsumerGroupHeartbeat


def heartbeat_request(
    req: M.KafkaConsumerGroupHeartbeat, ids: TopicIds, session_timeout_ms: int
) -> S.ConsumerGroupHeartbeatRequest:
    """The core's struct: owned topics by name (an id the node cannot name — a deleted topic — is
    dropped: nobody can be assigned it), the server's session timeout, "" regex as none."""
    owned = None
    if req.topic_partitions is not None:
        owned = []
        for t in req.topic_partitions:
            name = ids.name_of(t.topic_id)
            if name is not None:
                owned.append(S.ServerAssignedTopic(topic=name, partitions=list(t.partitions)))
    return S.ConsumerGroupHeartbeatRequest(
        group_id=req.group_id,
        member_id=req.member_id,
        member_epoch=req.member_epoch,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=req.rebalance_timeout_ms,
        subscribed_topic_names=req.subscribed_topic_names,
        server_assignor=req.server_assignor,
        topic_partitions=owned,
        instance_id=req.instance_id,
        rack_id=req.rack_id,
        subscribed_topic_regex=req.subscribed_topic_regex or None,
    )


def heartbeat_names(resp: S.ConsumerGroupHeartbeatResponse) -> set[str]:
    """The topics an answer names (each needs an id before it is encoded)."""
    return {t.topic for t in resp.assignment or ()}


def heartbeat_response(
    resp: S.ConsumerGroupHeartbeatResponse, ids: TopicIds
) -> M.KafkaConsumerGroupHeartbeatResponse:
    assignment = None
    if resp.assignment is not None:
        assignment = M.KafkaAssignment(
            topic_partitions=[
                M.TopicIdPartitions(topic_id=ids.id_of(t.topic), partitions=list(t.partitions))
                for t in resp.assignment
                if ids.id_of(t.topic) is not None
            ]
        )
    return M.KafkaConsumerGroupHeartbeatResponse(
        error_code=resp.error_code,
        error_message=resp.error_message,
        member_id=resp.member_id or None,
        member_epoch=resp.member_epoch,
        heartbeat_interval_ms=resp.heartbeat_interval_ms,
        assignment=assignment,
    )


# ---------------------------------------------------------------- ConsumerGroupDescribe


def describe_names(resp: S.ConsumerGroupDescribeResponse) -> set[str]:
    return {t.topic for g in resp.groups for m in g.members for t in (*m.assignment, *m.target_assignment)}


def _assignment(topics: list[S.ServerAssignedTopic], ids: TopicIds) -> M.KafkaDescribedAssignment:
    return M.KafkaDescribedAssignment(
        topic_partitions=[
            M.AssignedTopicPartitions(
                topic_id=ids.id_of(t.topic) or uuid.UUID(int=0),
                topic_name=t.topic,
                partitions=list(t.partitions),
            )
            for t in topics
        ]
    )


def describe_response(
    resp: S.ConsumerGroupDescribeResponse, ids: TopicIds
) -> M.KafkaConsumerGroupDescribeResponse:
    """The Kafka form differs only in the assignments: topics named by id and by name."""
    return M.KafkaConsumerGroupDescribeResponse(
        groups=[
            M.KafkaDescribedConsumerGroup(
                **{
                    **msgspec.structs.asdict(g),
                    "members": [
                        M.KafkaConsumerGroupMember(
                            **{
                                **msgspec.structs.asdict(m),
                                "assignment": _assignment(m.assignment, ids),
                                "target_assignment": _assignment(m.target_assignment, ids),
                            }
                        )
                        for m in g.members
                    ],
                }
            )
            for g in resp.groups
        ]
    )


def names_in_answer(body: object) -> set[str]:
    """The topic names an answer of the core names, for the APIs whose wire form uses ids."""
    if isinstance(body, S.ConsumerGroupHeartbeatResponse):
        return heartbeat_names(body)
    if isinstance(body, S.ConsumerGroupDescribeResponse):
        return describe_names(body)
    return set()


def to_wire(body: object, ids: TopicIds) -> object:
    """An answer of the core in its Kafka form (topic ids), for the APIs that need one."""
    if isinstance(body, S.ConsumerGroupHeartbeatResponse):
        return heartbeat_response(body, ids)
    if isinstance(body, S.ConsumerGroupDescribeResponse):
        return describe_response(body, ids)
    return body
