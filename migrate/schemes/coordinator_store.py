"""Scheme three's groups: `/groupshift/groups/<g>` read from ZooKeeper, live state from the leading node.

The stored record says who the members were at the last accepted assignment; a node that leads
the group's shard knows more (a rebalance in progress), so `read_group` asks it with
DescribeGroups and falls back to the stored record, with a note, when it does not answer.
Writes (offsets, deletes) go through the leading node so its cache stays right
(`migrate.schemes.writes`), or into ZooKeeper fenced by the shard epoch when no node leads the shard.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from kazoo.client import KazooClient

from coordinator.layout import (
    DEFAULT_SHARDS,
    GROUPS,
    SHARDS,
    decode_group,
    decode_leader,
    decode_offset_znode,
    epoch_path,
    group_path,
    leader_path,
    name_from_znode,
    offsets_dir,
    shard_of,
    znode_name,
)
from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.schemes import zkio
from migrate.schemes.model import EMPTY, STABLE, Committed, GroupView, Member
from migrate.schemes.zk_store import topic_partitions

# A TopicPartition from a (topic, partition) pair without the namedtuple's Python-level __new__
# (half its cost; offsets are decoded by the thousand).
_tp = tuple.__new__

DESCRIBE_TIMEOUT_S = 5.0
# DescribeGroups states of a group without members: Kafka's, and the draft's (scheme two) "Ready".
IDLE_STATES = ("Empty", "Dead", "Ready")


class CoordinatorDown(GroupshiftError):
    """The node leading the group's shard is registered but does not answer."""


class Leader(msgspec.Struct, frozen=True):
    node: int
    epoch: int
    host: str
    port: int
    shard: int
    epoch_version: int  # version of shards/<s>/epoch when read (the fencing check of a ZooKeeper write)

    @property
    def address(self) -> str:
        return f"node {self.node} {self.host}:{self.port}"


def list_groups(zk: KazooClient) -> list[str]:
    return sorted(name_from_znode(z) for z in zkio.children(zk, GROUPS) or [])


def exists(zk: KazooClient, group: str) -> bool:
    return zkio.get_many(zk, [group_path(group)])[0] is not None


def shard_count(zk: KazooClient) -> int:
    return len(zkio.children(zk, SHARDS) or []) or DEFAULT_SHARDS


def leader(zk: KazooClient, group: str) -> tuple[int, Leader | None]:
    """(shard, its leader) for the group; leader None when no node leads the shard."""
    shard, lead, _ = zkio.staged(zk, leader_reader(group))[0]
    return shard, lead


def leader_reader(group: str, shard: int | None = None) -> zkio.Reader:
    """Reader (`zkio.staged`) of the group's shard, its leader (None: no node leads it) and the
    version of its epoch znode (-1: none; what fences a write in ZooKeeper while no node leads
    the shard), in two rounds: the shard count, then the shard's leader and epoch (one, given
    the `shard` read before)."""
    if shard is None:
        shards = (yield [("children", SHARDS)])[0]
        shard = shard_of(group, len(shards or []) or DEFAULT_SHARDS)
    got_leader, got_epoch = yield [("get", leader_path(shard)), ("get", epoch_path(shard))]
    epoch_version = got_epoch[1].version if got_epoch else -1
    if got_leader is None:
        return shard, None, epoch_version
    try:
        rec = decode_leader(got_leader[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return shard, None, epoch_version
    return shard, Leader(rec.node, rec.epoch, rec.host, rec.port, shard, epoch_version), epoch_version


def read_offsets(zk: KazooClient, group: str) -> dict[TopicPartition, Committed]:
    return offsets_of(zkio.staged(zk, offsets_reader(group))[0])


def offsets_reader(group: str, known: Iterable[TopicPartition] = (), only=None) -> zkio.Reader:
    """Reader (`zkio.staged`) of the group's offset znodes, as `zkio.Leaves` (`offsets_of` decodes
    them); `known` partitions are read in the first round with the listings, `only`: no others."""
    return zkio.leaves_reader(
        offsets_dir(group_path(group)),
        [_leaf(tp) for tp in known],
        None if only is None else [_leaf(tp) for tp in only],
    )


def _leaf(tp: TopicPartition) -> tuple[str, str]:
    return znode_name(tp.topic), str(tp.partition)


def offsets_of(read: zkio.Leaves) -> dict[TopicPartition, Committed]:
    out: dict[TopicPartition, Committed] = {}
    for (tz, p), (data, stat) in read.leaves.items():
        if not p.isdigit():
            continue
        try:
            z = decode_offset_znode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            continue
        tp = _tp(TopicPartition, (name_from_znode(tz), int(p)))
        out[tp] = Committed(z.offset, z.commit_ts or stat.mtime, stat.mzxid, z.metadata or "")
    return out


def read_group(zk: KazooClient, group: str, *, live: bool = True) -> GroupView | None:
    """The group as stored (and, with `live`, as its coordinator sees it now); None if absent."""
    got = zkio.get_many(zk, [group_path(group)])[0]
    if got is None:
        return None
    # The coordinator's modules only once there is a group to show (`groups list` of none needs none).
    from coordinator.group.metadata import SERVER_PROTOCOL_TYPE
    from coordinator.server_side.assigned import DRAFT_STATES
    from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE

    notes: list[str] = []
    try:
        record = decode_group(got[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        record = None
        notes.append("the group metadata znode is unreadable; showing offsets only")
    view = GroupView(scheme=Rebalancer.COORDINATOR, group=group, state=EMPTY, offsets=read_offsets(zk, group))
    if record is not None:
        view.protocol_type, view.protocol = record.protocol_type, record.protocol_name
        view.generation, view.leader = record.generation_id, record.leader_id
        view.members = [
            _member(m.member_id, m.client_id, m.client_host, m.group_instance_id, m.assignment, m.protocols)
            for m in record.members
        ]
        view.state = STABLE if record.members else EMPTY
        if record.protocol_type == SERVER_PROTOCOL_TYPE:
            view.state = DRAFT_STATES[view.state]
            notes.append("scheme two: the coordinator assigns the partitions (docs/scheme-two.md)")
        elif record.protocol_type == INCREMENTAL_PROTOCOL_TYPE:
            notes.append(
                "scheme two, incremental: the coordinator assigns and members converge one by one "
                "(docs/scheme-two.md); the generation is the group epoch"
            )
    _, lead = leader(zk, group)
    if lead is not None:
        view.coordinator = lead.address
        if live:
            try:
                described = describe_live(lead, group)
            except CoordinatorDown as exc:
                notes.append(f"{exc}; state and members as last stored")
            else:
                view.state = described["group_state"] or view.state
                if described["group_state"] not in ("Dead", None):
                    view.protocol_type = described["protocol_type"] or view.protocol_type
                    view.protocol = described["protocol_data"] or view.protocol
                    view.members = [
                        _member(
                            m["member_id"],
                            m["client_id"],
                            m["client_host"],
                            m["group_instance_id"],
                            m["member_assignment"],
                            [("", m["member_metadata"])],
                        )
                        for m in described["members"]
                    ]
    else:
        notes.append("no coordinator node leads this group's shard; state as last stored")
    view.owners = {tp: m.member_id for m in view.members for tp in m.partitions}
    topics = sorted({t for m in view.members for t in m.subscription})
    view.subscribed = {t: n for t, n in topic_partitions(zk, topics).items() if n}
    if view.protocol_type == INCREMENTAL_PROTOCOL_TYPE:
        view.members = _with_targets(view, notes)
    view.notes = notes
    return view


def _with_targets(view: GroupView, notes: list[str]) -> list[Member]:
    """An incremental group's members with their target assignment, as a node taking the group over
    computes it from what they hold now (`incremental_groups.Group.retarget`: sticky from the current
    partitions). The leading node's own target can differ while the group reconciles; ConsumerGroupDescribe
    (api 69, on its Kafka listener) answers it exactly."""
    import msgspec.structs

    from coordinator.server_side.incremental_groups import Group
    from coordinator.server_side.incremental_groups import Member as Incremental

    group = Group(view.group, view.protocol or "uniform", view.generation or 0)
    for m in view.members:
        group.members[m.member_id] = Incremental(
            m.member_id,
            m.client_id or "",
            m.host or "",
            0,
            0,
            tuple(sorted(m.subscription)),
            epoch=m.epoch or 0,
            assigned=frozenset(m.partitions),
        )
    try:
        group.retarget(view.subscribed, bump=False)
    except (ValueError, KeyError):
        group.target = {}
    if group.assignment_epoch != group.epoch or not group.target:
        return view.members  # a subscribed topic's size is not known
    notes.append("target: the assignment computed from the members' current partitions (sticky)")
    return [
        msgspec.structs.replace(m, target=sorted(group.target.get(m.member_id, ()))) for m in view.members
    ]


def _member(member_id, client_id, host, instance_id, assignment: bytes, protocols) -> Member:
    from coordinator.assignors.payloads import decode_assignment, decode_subscription

    try:
        partitions = sorted(decode_assignment(assignment or b"").partitions)
    except ValueError:
        partitions = []
    topics: dict[str, int] = {}
    epoch = None
    for proto in protocols:
        metadata = proto[1] if isinstance(proto, tuple) else proto.metadata
        try:
            sub = decode_subscription(metadata)
        except (ValueError, TypeError):
            continue
        topics, epoch = {t: 1 for t in sub.topics}, sub.generation  # incremental: the member epoch
        break
    return Member(member_id, client_id, host, instance_id, partitions, topics, "static", None, epoch)


def describe_live(lead: Leader, group: str) -> dict:
    from coordinator.wire import codec as P

    body = request(lead, P.DESCRIBE_GROUPS, {"groups": [group]})
    groups = body.get("groups") or []
    if not groups:
        raise CoordinatorDown(f"coordinator {lead.address} gave an empty DescribeGroups answer")
    g = groups[0]
    if g.get("error_code"):
        raise CoordinatorDown(
            f"coordinator {lead.address} answered DescribeGroups with "
            f"{P.ERROR_NAMES.get(g['error_code'], g['error_code'])}"
        )
    return g


def request(lead: Leader, api: int, body: dict, timeout: float = DESCRIBE_TIMEOUT_S) -> dict:
    from coordinator.member.wire_client import WireClient, WireError

    try:
        with WireClient(lead.host, lead.port, client_id="groupshift-inspect", timeout=timeout) as client:
            return client.request(api, body, timeout=timeout)
    except (OSError, WireError) as exc:
        raise CoordinatorDown(
            f"coordinator {lead.address} leads the group's shard but does not answer ({exc}); "
            "start it again or wait until its ZooKeeper session expires"
        ) from None
