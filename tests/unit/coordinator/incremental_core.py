"""A driver for unit tests of scheme two's incremental core (`IncrementalCoordinator`): requests and
the time in, answers and written records kept, every write succeeding at once."""

from __future__ import annotations

from coordinator.assignors.base import Subscription
from coordinator.assignors.consumer_protocol import by_topic
from coordinator.assignors.payloads import encode_assignment, encode_subscription
from coordinator.group.context import CoordinatorConfig
from coordinator.group.coordinator import GroupCoordinator
from coordinator.group.messages import (
    GroupRecord,
    GroupSnapshot,
    MemberRecord,
    ProtocolRecord,
    Respond,
    Write,
    WriteGroupMetadata,
)
from coordinator.server_side.assigned import ServerAssignedCoordinator, WatchTopics
from coordinator.server_side.incremental_coordinator import IncrementalCoordinator
from coordinator.wire.schema import (
    CONSUMER_GROUP_HEARTBEAT,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    OFFSET_COMMIT,
    SYNC_GROUP,
    ConsumerGroupHeartbeatRequest,
    HeartbeatRequest,
    JoinGroupProtocol,
    JoinGroupRequest,
    LeaveGroupMember,
    LeaveGroupRequest,
    OffsetCommitPartition,
    OffsetCommitRequest,
    OffsetCommitTopic,
    SyncGroupAssignment,
    SyncGroupRequest,
)
from core.types import TopicPartition as TP

SESSION_MS = 1000


class Core:
    """The node's core for incremental groups; `heartbeat` sends ConsumerGroupHeartbeat to group "g"."""

    def __init__(self, **kw):
        config = CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=100)
        self.core = IncrementalCoordinator(
            ServerAssignedCoordinator(GroupCoordinator(config)), min_session_timeout_ms=100, **kw
        )
        self.now = 1_000
        self.answers: dict[str, object] = {}
        self.watched: list[str] = []
        self.records: dict[str, object] = {}  # group -> the last group record written
        self.writes = 0

    def run(self, outputs) -> None:
        for out in outputs:
            if isinstance(out, Respond):
                self.answers[out.request_token] = out.body
            elif isinstance(out, WatchTopics):
                self.watched.extend(out.topics)
            elif isinstance(out, Write):
                self.writes += 1
                if isinstance(out, WriteGroupMetadata):
                    self.records[out.group_id] = out.record
                if out.token is not None:
                    self.run(self.core.persisted(out.token, True, self.now))

    def send(self, api: int, body, token: str = "t", group_check=None):
        self.answers.pop(token, None)
        self.run(
            self.core.handle(
                api,
                body,
                self.now,
                client_id="c",
                client_host="/h",
                request_token=token,
                group_check=group_check,
            )
        )
        return self.answers.get(token)

    def sizes(self, **counts: int) -> None:
        self.run(self.core.topics_changed(counts, self.now))

    def listed(self, *names: str) -> None:
        self.run(self.core.topics_listed(frozenset(names), self.now))

    def advance(self, ms: int) -> None:
        self.now += ms
        self.run(self.core.tick(self.now))

    def heartbeat(
        self,
        member_id: str = "",
        epoch: int = 0,
        owned=None,
        topics=("t",),
        *,
        group: str = "g",
        instance: str | None = None,
        regex: str | None = None,
        rack: str | None = None,
        assignor: str | None = None,
        token: str = "hb",
    ):
        """A ConsumerGroupHeartbeat (epoch 0 joins with `topics`, else topics None: unchanged;
        `owned` None: unchanged)."""
        body = ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=2000,
            subscribed_topic_names=(list(topics) if topics is not None else None) if epoch == 0 else None,
            server_assignor=assignor,
            topic_partitions=None if owned is None else by_topic(owned),
            instance_id=instance,
            rack_id=rack,
            subscribed_topic_regex=regex,
        )
        return self.send(CONSUMER_GROUP_HEARTBEAT, body, token)

    def ack(self, answer, **kw):
        """The member's next heartbeat: it holds what `answer` gave it, at `answer`'s epoch."""
        return self.heartbeat(answer.member_id, answer.member_epoch, owned=set(partitions(answer)), **kw)

    def commit(self, member_id: str, epoch: int, group: str = "g") -> int:
        """An OffsetCommit of t-0 by `member_id` at `epoch` (a generation for classic groups): its error."""
        body = OffsetCommitRequest(
            group_id=group,
            generation_id=epoch,
            member_id=member_id,
            topics=[
                OffsetCommitTopic(
                    name="t", partitions=[OffsetCommitPartition(partition_index=0, committed_offset=7)]
                )
            ],
        )
        return self.send(OFFSET_COMMIT, body, "commit").topics[0].partitions[0].error_code

    # ------------------------------------------------------------ classic members (JoinGroup & co)

    def classic_join(
        self,
        member_id: str = "",
        topics=("t",),
        owned=(),
        *,
        protocols=("range",),
        protocol_type: str = "consumer",
        group: str = "g",
        token: str = "join",
    ):
        """A classic member's JoinGroup (its subscription lists `owned`); the answer (None: parked)."""
        metadata = encode_subscription(Subscription(tuple(topics), owned_partitions=tuple(sorted(owned))))
        body = JoinGroupRequest(
            group_id=group,
            session_timeout_ms=SESSION_MS,
            rebalance_timeout_ms=2000,
            member_id=member_id,
            protocol_type=protocol_type,
            protocols=[JoinGroupProtocol(name=name, metadata=metadata) for name in protocols],
        )
        return self.send(JOIN_GROUP, body, token)

    def classic_sync(self, member_id: str, generation: int, assignments=None, *, group="g", token="sync"):
        """SyncGroup (the leader passes `assignments`: member id -> partitions); the answer."""
        body = SyncGroupRequest(
            group_id=group,
            generation_id=generation,
            member_id=member_id,
            assignments=[
                SyncGroupAssignment(member_id=m, assignment=encode_assignment(sorted(tps)))
                for m, tps in (assignments or {}).items()
            ],
        )
        return self.send(SYNC_GROUP, body, token)

    def classic_beat(self, member_id: str, generation: int, *, group: str = "g") -> int:
        body = HeartbeatRequest(group_id=group, generation_id=generation, member_id=member_id)
        return self.send(HEARTBEAT, body, "beat").error_code

    def classic_leave(self, member_id: str, *, group: str = "g") -> int:
        body = LeaveGroupRequest(group_id=group, members=[LeaveGroupMember(member_id=member_id)])
        return self.send(LEAVE_GROUP, body, "leave").members[0].error_code

    def load_classic(self, generation: int, members: dict[str, set], *, protocols=("range",), offsets=()):
        """Take over a Stable classic group "g" of protocol type `consumer`: `members` (member id ->
        the partitions of "t" it was assigned) at `generation`, with `offsets` (OffsetRecords)."""
        record = GroupRecord(
            group_id="g",
            protocol_type="consumer",
            protocol_name=protocols[0],
            generation_id=generation,
            leader_id=next(iter(members), None),
            state_timestamp=self.now,
            members=[
                MemberRecord(
                    member_id=mid,
                    group_instance_id=None,
                    client_id="c",
                    client_host="/h",
                    session_timeout_ms=SESSION_MS,
                    rebalance_timeout_ms=2000,
                    protocol_type="consumer",
                    protocols=[
                        ProtocolRecord(name, encode_subscription(Subscription(("t",)))) for name in protocols
                    ],
                    assignment=encode_assignment(sorted(tps)),
                )
                for mid, tps in members.items()
            ],
        )
        self.run(self.core.load_group(GroupSnapshot("g", record, list(offsets)), self.now))

    def taken_over(self) -> Core:
        """Another node's core, loaded from the records written here."""
        other = Core()
        for gid, record in self.records.items():
            other.run(other.core.load_group(GroupSnapshot(gid, record, []), other.now))
        return other

    def group(self, gid: str = "g"):
        return self.core.groups[gid]


def partitions(answer) -> set[TP]:
    return {TP(t.topic, p) for t in answer.assignment or () for p in t.partitions}


def owners(core: Core, gid: str = "g") -> dict[TP, list[str]]:
    """Every partition some member of the group holds or still has to let go of -> those members."""
    out: dict[TP, list[str]] = {}
    for mid, m in core.group(gid).members.items():
        for tp in m.assigned | m.revoking:
            out.setdefault(tp, []).append(mid)
    return out
