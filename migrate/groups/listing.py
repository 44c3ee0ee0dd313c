"""Both schemes side by side: find a group, list groups, and the rows `groups list` prints.

zk = open_zk("127.0.0.1:2181/prod")
views = find(zk, "billing")                  # {"zk": GroupView, "coordinator": GroupView} (those that exist)
list_groups(zk, scheme="all", states=None)   # [GroupListing, ...]
"""

from __future__ import annotations

import msgspec
from kazoo.client import KazooClient

from core.errors import GroupshiftError, UnknownGroup
from core.scheme import STORES, Rebalancer
from migrate.schemes import coordinator_store, zk_store
from migrate.schemes.model import STATES, GroupView, as_store

MAX_GROUP_NAME = 255


class GroupListing(msgspec.Struct):
    group: str
    scheme: str  # the store's spelling, as printed: "zk" | "coordinator"
    state: str
    members: int
    protocol: str | None
    partitions_with_offsets: int


def check_group_name(group: str) -> str:
    if not group or not group.strip() or "\0" in group or len(group) > MAX_GROUP_NAME:
        raise GroupshiftError(f"{group!r} is not a group id (1-{MAX_GROUP_NAME} characters, no NUL)")
    return group


def read(zk: KazooClient, scheme: str | Rebalancer, group: str, *, live: bool = True) -> GroupView | None:
    if as_store(scheme) is Rebalancer.ZK:
        return zk_store.read_group(zk, group)
    return coordinator_store.read_group(zk, group, live=live)


def find(zk: KazooClient, group: str, scheme: str | Rebalancer = "all") -> dict[Rebalancer, GroupView]:
    """The group under each scheme it exists in (only `scheme` unless "all"); raises `UnknownGroup`."""
    check_group_name(group)
    stores = _stores(scheme)
    views = {s: v for s in stores if (v := read(zk, s, group)) is not None}
    if not views:
        where = "either scheme" if scheme == "all" else f"scheme {stores[0].value}"
        raise UnknownGroup(f"group {group!r} does not exist in {where}; check the name (and --zk)")
    return views


def exists_in(zk: KazooClient, group: str) -> dict[Rebalancer, bool]:
    check_group_name(group)
    return {
        Rebalancer.ZK: zk_store.exists(zk, group),
        Rebalancer.COORDINATOR: coordinator_store.exists(zk, group),
    }


def _stores(scheme: str | Rebalancer) -> tuple[Rebalancer, ...]:
    """The stores `--scheme` names: both for "all", else the one."""
    return STORES if scheme == "all" else (as_store(scheme),)


def list_groups(
    zk: KazooClient, scheme: str | Rebalancer = "all", states: list[str] | None = None
) -> list[GroupListing]:
    """Every group, including offsets-only groups (KAFKA-7141) and groups without offsets (KAFKA-3144)."""
    wanted = None
    if states:
        lookup = {s.lower(): s for s in STATES}
        bad = [s for s in states if s.lower() not in lookup]
        if bad:
            raise GroupshiftError(f"unknown state {bad[0]!r}; use one of {', '.join(STATES)}")
        wanted = {lookup[s.lower()] for s in states}
    out = []
    for s in _stores(scheme):
        names = zk_store.list_groups(zk) if s is Rebalancer.ZK else coordinator_store.list_groups(zk)
        for name in names:
            view = read(zk, s, name)
            if view is None or (wanted and view.state not in wanted):
                continue
            out.append(
                GroupListing(name, s.value, view.state, len(view.members), view.protocol, len(view.offsets))
            )
    return sorted(out, key=lambda g: (g.group, g.scheme))
