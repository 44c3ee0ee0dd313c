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
"""

from __future__ import annotations

import msgspec
from kazoo.client import KazooClient

from coordinator.layout import decode_group, group_path
from core.errors import GroupshiftError
from core.scheme import MIGRATABLE, Rebalancer, store_of
from core.types import TopicPartition
from migrate.migration import record as R
from migrate.schemes import coordinator_store, writes, zk_store, zkio
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


def kind(zk: KazooClient, group: str) -> tuple[Rebalancer | None, str | None]:
    """(the scheme a coordinator-store group belongs to, its protocol type): SERVER, COORDINATOR, or
    None for a group without one (absent, offsets only, or an unreadable record)."""
    from coordinator.group.metadata import SERVER_PROTOCOL_TYPE
    from coordinator.server_side.incremental_groups import INCREMENTAL_PROTOCOL_TYPE

    got = zkio.get_many(zk, [group_path(group)])[0]
    if got is None or not got[0]:
        return None, None
    try:
        record = decode_group(got[0])
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None, None
    protocol_type = record.protocol_type if record is not None else None
    if not protocol_type:
        return None, None
    if protocol_type in (SERVER_PROTOCOL_TYPE, INCREMENTAL_PROTOCOL_TYPE):
        return Rebalancer.SERVER, protocol_type
    return Rebalancer.COORDINATOR, protocol_type


def check_kind(zk: KazooClient, group: str, scheme: str | Rebalancer, side: str) -> None:
    """Refuse a coordinator-store group that belongs to the other of schemes two and three."""
    scheme = parse(scheme)
    if scheme is Rebalancer.ZK:
        return
    found, protocol_type = kind(zk, group)
    if found is None or found is scheme:
        return
    what = f"a scheme-{_NAMES[found]} group ({found.value}: protocol type {protocol_type})"
    if side == "source":
        raise GroupshiftError(
            f"group {group!r} is {what}, not a {scheme.value} group; use --from {found.value}"
        )
    raise GroupshiftError(
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
    if store_of(scheme) is Rebalancer.ZK:
        return sorted(zkio.children(zk, ids_dir(group)) or [])
    _, lead = coordinator_store.leader(zk, group)
    if lead is not None:
        described = coordinator_store.describe_live(lead, group)  # CoordinatorDown: one line, nothing written
        if described["group_state"] in coordinator_store.IDLE_STATES:
            return []
        return sorted(f"{m['client_id']} ({m['member_id']})" for m in described["members"])
    got = zkio.get_many(zk, [group_path(group)])[0]
    stored = decode_group(got[0]) if got is not None and got[0] else None
    return sorted(f"{m.client_id} ({m.member_id}, as stored)" for m in (stored.members if stored else []))


def members_refusal(group: str, scheme: str | Rebalancer, names: list[str], side: str) -> str:
    shown = ", ".join(names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
    return (
        f"group {group!r} has {len(names)} live member(s) on the {side} ({parse(scheme).value}): {shown}; "
        "stop them before an offline migration"
    )


def check_idle(zk: KazooClient, group: str, source: str | Rebalancer, dest: str | Rebalancer) -> None:
    for scheme, side in ((source, "source"), (dest, "destination")):
        names = live_members(zk, scheme, group)
        if names:
            raise writes.GroupActive(members_refusal(group, scheme, names, side))
