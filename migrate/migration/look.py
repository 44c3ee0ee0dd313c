"""What a migration reads: the record, the lock and both sides in one pass, and the source again
before the switch.

A fresh run needs, before it writes anything, the record and the lock, and of each side whether
the group exists, which scheme of the coordinator's store it belongs to, its live members and
its offsets. `look` reads all of it with `zkio.staged` readers, each round of every reader in one
batch: three rounds (list the offsets' topics, list their partitions, read the offsets) for both
sides together, plus a DescribeGroups for a side whose shard a coordinator node leads. The
offsets come with their znodes' mzxid (`Committed.order`), which `recheck` compares before the
switch: it reads the partitions seen beside their listings and the members of both sides, in one
round when nothing was added — or only the members, when a watch set on the source's offsets
before they were read (`look(..., watch=True)`, `migrate.schemes.subtree`) proves that nothing
changed since.

    seen = look(zk, "billing", Rebalancer.ZK, Rebalancer.COORDINATOR)
    seen.record, seen.holder, seen.src.offsets, seen.dst.leader
    src, dst = recheck(zk, seen.src, seen.dst)     # the source now, and the destination's members
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from kazoo.client import KazooClient

from coordinator.layout import MIGRATION_LOCKS, MIGRATIONS, ROOT, migration_lock_path, migration_path
from core.scheme import Rebalancer
from migrate.migration import record as R
from migrate.migration.sides import Side, side_reader
from migrate.schemes import zkio
from migrate.schemes.subtree import Subtree

# The containers every group's record and lock share (created once, before the first lock).
SHARED = (ROOT, MIGRATIONS, MIGRATION_LOCKS)


@dataclass
class Look:
    """A migration's world as one pass read it."""

    record: R.Migration | None
    version: int  # the record's (-1: none)
    holder: dict | None  # the lock's holder ({"pid", "host", "since_ms", "version"}), None: unlocked
    missing: list[str]  # `SHARED` containers that do not exist yet
    src: Side
    dst: Side


def record_reader(group: str) -> zkio.Reader:
    """Reader (`zkio.staged`) of (record, its version, lock holder, missing `SHARED` containers)."""
    got = yield [("get", migration_path(group)), ("get", migration_lock_path(group))] + [
        ("get", p) for p in SHARED
    ]
    rec, lock = got[0], got[1]
    missing = [p for p, g in zip(SHARED, got[2:], strict=True) if g is None]
    if rec is None:
        decoded, version = None, -1
    else:
        decoded, version = R.decode(rec[0], migration_path(group)), rec[1].version
    return decoded, version, _holder(lock), missing


def _holder(got) -> dict | None:
    if got is None:
        return None
    try:
        holder = json.loads(got[0])
    except ValueError:
        holder = {}
    if not isinstance(holder, dict):
        holder = {}
    holder["version"] = got[1].version
    return holder


def read_record(zk: KazooClient, group: str) -> tuple[R.Migration | None, int]:
    rec, version, _, _ = zkio.staged(zk, record_reader(group))[0]
    return rec, version


def lock_holder(zk: KazooClient, group: str) -> dict | None:
    return zkio.staged(zk, record_reader(group))[0][2]


def look(zk: KazooClient, group: str, source: Rebalancer, dest: Rebalancer, *, watch: bool = False) -> Look:
    """The record, the lock and both sides, read together; `watch`: with a watch on the source's
    offsets set before they are read (`Side.watch`: the caller closes it)."""
    (rec, version, holder, missing), src, dst = zkio.staged(
        zk, record_reader(group), side_reader(source, group, watch=watch), side_reader(dest, group)
    )
    return Look(rec, version, holder, missing, src, dst)


def sides(zk: KazooClient, group: str, source: Rebalancer, dest: Rebalancer) -> tuple[Side, Side]:
    """Both sides, read together (a resumed run, under its lock)."""
    src, dst = zkio.staged(zk, side_reader(source, group), side_reader(dest, group))
    return src, dst


def recheck(
    zk: KazooClient, src: Side, dst: Side | None, watch: Subtree | None = None
) -> tuple[Side, Side | None]:
    """The source again and the destination's group and members (not its offsets; `dst` None: not
    in ZooKeeper), as they are now.

    With a `watch` on the source's offsets set before `src` was read, one small round reads the
    members and, when the watch proves that nothing changed below the offsets since (it is
    trusted and saw no event up to that round's answer), the source's offsets are `src`'s. Else
    they are read again (their partitions `src` saw in the first round, beside their listings;
    left undecoded: `proof.rewritten` compares the znodes): one round when the source gained no
    partition and the shards are known."""
    if watch is not None:
        now_src, now_dst = _sides(
            zk, side_reader(src.scheme, src.group, with_offsets=False, shard=_shard(src)), dst
        )
        if watch.trusted() and watch.changed is None:
            now_src.offsets, now_src.leaves = src.offsets, src.leaves
            return now_src, now_dst
    now = side_reader(src.scheme, src.group, known=src.offsets, decode=False, shard=_shard(src))
    return _sides(zk, now, dst)


def _sides(zk: KazooClient, src_reader: zkio.Reader, dst: Side | None) -> tuple[Side, Side | None]:
    if dst is None:
        return zkio.staged(zk, src_reader)[0], None
    got_src, got_dst = zkio.staged(
        zk, src_reader, side_reader(dst.scheme, dst.group, with_offsets=False, shard=_shard(dst))
    )
    return got_src, got_dst


def _shard(side: Side) -> int | None:
    return side.shard if side.shard >= 0 else None
