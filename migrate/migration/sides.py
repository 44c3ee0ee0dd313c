"""The two sides of a migration: which scheme a group is in, its offsets and its live members.

A migration moves a group between the schemes of `core.scheme.MIGRATABLE` (`zk`, `server`,
`coordinator`). Scheme one's groups are `/consumers/<g>`; scheme two's and three's share the
coordinator's store, `/groupshift/groups/<g>` (`core.scheme.store_of`), and are told apart by the
protocol type of the group record (`kind`): `consumer-server` (the draft) and `consumer-incremental`
(KIP-848's form) are scheme two, any other scheme three. A group with offsets and no protocol type
(never joined, or only committed to by tools) belongs to neither yet: either may take it.

    check_args("zk", "server", "live")      # the pair, refused unless the mode can move between them
    check_kind(zk, "billing", "server", "source")   # one line if it is a scheme-three group
    offsets(zk, "server", "billing")        # {TopicPartition: offset}, from the coordinator's store

A migration reads a side once as a `Side` (`side_reader`, run with `zkio.staged` beside the
other side's): whether the group exists, its registrations or stored record, the node leading
its shard, and its offsets with their znodes' mzxid (`Committed.order`); the checks
(`kind_refusal`, `members_of`) then decide from it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec
from kazoo.client import KazooClient

from coordinator.group.records import GroupRecord
from coordinator.layout import decode_group, group_path, offsets_dir
from core.errors import GroupshiftError
from core.scheme import MIGRATABLE, Rebalancer, store_of
from core.types import TopicPartition
from migrate.migration import record as R
from migrate.schemes import coordinator_store, subtree, writes, zk_store, zkio
from migrate.schemes.model import Committed
from zk_rebalance.layout import ids_dir

# The directions a live migration goes: scheme one's consumers replaced through the bridge.
LIVE_DIRECTIONS = ((Rebalancer.ZK, Rebalancer.COORDINATOR), (Rebalancer.ZK, Rebalancer.SERVER))
_NAMES = {Rebalancer.ZK: "one", Rebalancer.SERVER: "two", Rebalancer.COORDINATOR: "three"}


def parse(scheme: str | Rebalancer) -> Rebalancer:
    """A migration's side as a Rebalancer; GroupshiftError "unknown scheme ..." otherwise."""
    return Rebalancer.parse(scheme, MIGRATABLE)


def check_args(source: str | Rebalancer, dest: str | Rebalancer, mode: str) -> tuple[Rebalancer, Rebalancer]:
    """The two schemes of a migration, refused unless their stores differ and `mode` can move between them."""
    source, dest = parse(source), parse(dest)
    if source is dest:
        raise GroupshiftError(
            f"--from and --to are both {source.value}; a migration goes between two schemes"
        )
    if store_of(source) is store_of(dest):
        raise GroupshiftError(
            f"scheme two's and three's groups share the coordinator's store (/groupshift/groups): there is "
            f"nothing to copy from {source.value} to {dest.value}; stop the group's consumers and start them "
            "with the other rebalancer instead"
        )
    if mode not in R.MODES:
        raise GroupshiftError(f"unknown mode {mode!r}; use offline or live")
    if mode == "live" and (source, dest) not in LIVE_DIRECTIONS:
        raise GroupshiftError(
            "a live migration goes from zk to coordinator or to server (the bridge), "
            f"not from {source.value} to {dest.value}; use --mode offline for this direction"
        )
    return source, dest


@dataclass
class Side:
    """One side of a migration as read in one pass (`side_reader`)."""

    scheme: Rebalancer
    group: str
    exists: bool = False
    offsets: dict[TopicPartition, Committed] = field(default_factory=dict)  # with each znode's mzxid
    leaves: zkio.Leaves = field(default_factory=zkio.no_leaves)  # the offset znodes as read
    ids: list[str] = field(default_factory=list)  # scheme one: the registered consumers
    stored: GroupRecord | None = None  # the coordinator's store: the group's record
    shard: int = -1  # the coordinator's store: the group's shard, the node leading it, its epoch's version
    leader: coordinator_store.Leader | None = None
    epoch_version: int = -1
    shared: bool = True  # the container of every group of its store exists (`writes.SHARED`)
    watch: subtree.Subtree | None = None  # on the offsets, set before they were read

    def values(self) -> dict[TopicPartition, int]:
        return {tp: c.offset for tp, c in self.offsets.items()}

    def decoded(self) -> dict[TopicPartition, Committed]:
        """The offsets of `leaves` (what `offsets` holds when read with `decode`)."""
        store = zk_store if store_of(self.scheme) is Rebalancer.ZK else coordinator_store
        return store.offsets_of(self.leaves)

    def known(self) -> writes.Known:
        """What a write to this side needs to know of it (`writes.write_known`)."""
        return writes.Known(
            self.exists, self.leaves, self.leader, self.shard, self.epoch_version, self.shared
        )


def side_reader(
    scheme: str | Rebalancer,
    group: str,
    *,
    known: Iterable[TopicPartition] = (),
    only: Iterable[TopicPartition] | None = None,
    with_offsets: bool = True,
    decode: bool = True,
    watch: bool = False,
    shard: int | None = None,
) -> zkio.Reader:
    """Reader (`zkio.staged`) of a `Side`: three rounds (list the offsets' topics, their
    partitions, read the offsets), the group's other znodes beside them. `known` partitions (read
    before) are read in the first round, so a re-read of a side whose partitions did not change
    (and whose `shard` is known) takes one; `only`: no other offsets are read; not `decode`: the
    offsets are left as read (`leaves`; `decoded` decodes them); `watch`: a `subtree.Subtree`
    watch on the offsets is set before they are read (`Side.watch`)."""
    scheme = parse(scheme)
    side = Side(scheme, group)
    zk_side = store_of(scheme) is Rebalancer.ZK
    if zk_side and not zk_store.valid_name(group):
        return side  # nothing can be stored under /consumers by that name
    store = zk_store if zk_side else coordinator_store
    reads = store.offsets_reader(group, known, only) if with_offsets else zkio.result(zkio.no_leaves())
    shared = ("get", writes.SHARED[store_of(scheme)][-1])
    base = zk_store.offsets_dir(group) if zk_side else offsets_dir(group_path(group))
    watching = [("watch", base)] if watch and with_offsets else []
    if zk_side:
        tops = zkio.read_all(
            [*watching, shared, ("get", zk_store.group_dir(group)), ("children", ids_dir(group))]
        )
        (*watched, container, top, ids), leaves = yield from zkio.together(tops, reads)
        side.ids = sorted(ids or [])
    else:
        tops = zkio.read_all([*watching, shared, ("get", group_path(group))])
        lead = coordinator_store.leader_reader(group, shard)
        (
            (*watched, container, top),
            (side.shard, side.leader, side.epoch_version),
            leaves,
        ) = yield from zkio.together(tops, lead, reads)
        side.stored = _decode_stored(top)
    side.watch = watched[0] if watched else None
    side.shared = container is not None
    side.exists = top is not None
    side.offsets = store.offsets_of(leaves) if decode else {}
    side.leaves = leaves
    return side


def _decode_stored(got) -> GroupRecord | None:
    if got is None or not got[0]:
        return None
    try:
        return decode_group(got[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


def read_side(zk: KazooClient, scheme: str | Rebalancer, group: str, **how) -> Side:
    return zkio.staged(zk, side_reader(scheme, group, **how))[0]


def kind_of(stored: GroupRecord | None) -> tuple[Rebalancer | None, str | None]:
    """(the scheme a coordinator-store group belongs to, its protocol type): SERVER, COORDINATOR, or
    None for a group without one (absent, offsets only, or an unreadable record)."""
    from coordinator.group.metadata import SERVER_PROTOCOL_TYPE
    from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE

    protocol_type = stored.protocol_type if stored is not None else None
    if not protocol_type:
        return None, None
    if protocol_type in (SERVER_PROTOCOL_TYPE, INCREMENTAL_PROTOCOL_TYPE):
        return Rebalancer.SERVER, protocol_type
    return Rebalancer.COORDINATOR, protocol_type


def kind(zk: KazooClient, group: str) -> tuple[Rebalancer | None, str | None]:
    """`kind_of` the group's stored record."""
    return kind_of(_decode_stored(zkio.get_many(zk, [group_path(group)])[0]))


def check_kind(zk: KazooClient, group: str, scheme: str | Rebalancer, side: str) -> None:
    """Refuse a coordinator-store group that belongs to the other of schemes two and three."""
    if parse(scheme) is Rebalancer.ZK:
        return
    why = kind_refusal(group, scheme, kind(zk, group), side)
    if why:
        raise GroupshiftError(why)


def kind_refusal(
    group: str, scheme: str | Rebalancer, found: tuple[Rebalancer | None, str | None], side: str
) -> str | None:
    """Why `scheme` cannot be the `side` ("source", "destination") of a group of kind `found`, or None."""
    scheme = parse(scheme)
    (found, protocol_type) = found
    if scheme is Rebalancer.ZK or found is None or found is scheme:
        return None
    what = f"a scheme-{_NAMES[found]} group ({found.value}: protocol type {protocol_type})"
    if side == "source":
        return f"group {group!r} is {what}, not a {scheme.value} group; use --from {found.value}"
    return (
        f"group {group!r} already exists as {what}, and scheme two's and three's groups share one store; "
        f"migrate --to {found.value}, or delete it first "
        f"(`groupshift groups delete {group} --scheme coordinator`)"
    )


def exists(zk: KazooClient, scheme: str | Rebalancer, group: str) -> bool:
    if store_of(scheme) is Rebalancer.ZK:
        return zk_store.exists(zk, group)
    return coordinator_store.exists(zk, group)


def offsets(zk: KazooClient, scheme: str | Rebalancer, group: str) -> dict[TopicPartition, int]:
    read = zk_store.read_offsets if store_of(scheme) is Rebalancer.ZK else coordinator_store.read_offsets
    return {tp: c.offset for tp, c in read(zk, group).items()}


def live_members(zk: KazooClient, scheme: str | Rebalancer, group: str) -> list[str]:
    """Who is in the group now (scheme one: registered consumer ids; two and three: client/member ids)."""
    return members_of(read_side(zk, scheme, group, with_offsets=False))


def members_of(side: Side) -> list[str]:
    """Who is in the group now: scheme one's registrations; the coordinator's members as the node
    leading the shard describes them (DescribeGroups), or as stored when no node leads it."""
    if store_of(side.scheme) is Rebalancer.ZK:
        return list(side.ids)
    if side.leader is not None:
        described = coordinator_store.describe_live(side.leader, side.group)  # CoordinatorDown: one line
        if described["group_state"] in coordinator_store.IDLE_STATES:
            return []
        return sorted(f"{m['client_id']} ({m['member_id']})" for m in described["members"])
    stored = side.stored.members if side.stored is not None else []
    return sorted(f"{m.client_id} ({m.member_id}, as stored)" for m in stored)


def members_refusal(group: str, scheme: str | Rebalancer, names: list[str], side: str) -> str:
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return (
        f"group {group!r} has {len(names)} live member(s) on the {side} ({parse(scheme).value}): {shown}; "
        "stop them before an offline migration"
    )


def check_idle(zk: KazooClient, group: str, source: str | Rebalancer, dest: str | Rebalancer) -> None:
    src, dst = zkio.staged(
        zk, side_reader(source, group, with_offsets=False), side_reader(dest, group, with_offsets=False)
    )
    check_sides_idle(src, dst)


def check_sides_idle(src: Side, dst: Side | None) -> None:
    """Refuse (`writes.GroupActive`, naming them) when either side (`dst`: None when it is not in
    ZooKeeper) has live members."""
    for side, name in ((src, "source"), (dst, "destination")):
        if side is None:
            continue
        names = members_of(side)
        if names:
            raise writes.GroupActive(members_refusal(side.group, side.scheme, names, name))
