"""The writing edge of the tools: commit, delete offsets and delete groups, in either scheme.

Every write first checks, just before writing, that the group has no live members (scheme one:
no `/consumers/<g>/ids` children; scheme three: the coordinator reports the group Empty or Dead,
or — with no node leading the shard — the stored record has no members), and refuses otherwise.

* Scheme one: `multi` transactions of at most `BATCH` ops; an offset that exists is written with
  the version read (a concurrent commit aborts the transaction instead of being mixed with it).
* Scheme three: through the node leading the group's shard (OffsetCommit with generation -1,
  OffsetDelete, DeleteGroups) so its cache stays right; with no leader, in ZooKeeper, each
  transaction starting with `check(shards/<s>/epoch, version)` so a node taking the shard
  meanwhile makes it fail as a whole (the coordinator's own fencing).
"""

from __future__ import annotations

import time
from typing import NamedTuple

from kazoo.client import KazooClient

from coordinator.layout import (
    GROUPS,
    ROOT,
    OffsetZnode,
    decode_group,
    encode_offset_znode,
    epoch_path,
    group_path,
    offset_path,
    offsets_dir,
    znode_name,
)
from coordinator.member.wire_client import commit_body
from coordinator.wire import codec as P
from core.errors import GroupshiftError, UnknownGroup
from core.scheme import Rebalancer, store_of
from core.types import TopicPartition
from migrate.schemes import coordinator_store, zk_store, zkio
from zk_rebalance.layout import ids_dir

BATCH = 1_000  # ops per ZooKeeper transaction, and partitions per OffsetCommit request
# The containers every group of a store shares, parents first.
SHARED = {Rebalancer.ZK: [zk_store.CONSUMERS], Rebalancer.COORDINATOR: [ROOT, GROUPS]}


class GroupActive(GroupshiftError):
    """The group has live members; the write was refused."""


def check_inactive(
    zk: KazooClient, scheme: str | Rebalancer, group: str, what: str
) -> coordinator_store.Leader | None:
    """Raise `GroupActive` unless the group has no live members; returns the shard leader (scheme three)."""
    scheme = store_of(scheme)
    if scheme is Rebalancer.ZK:
        ids = zkio.children(zk, ids_dir(group)) or []
        if ids:
            raise GroupActive(
                f"group {group!r} has {len(ids)} live consumer(s) ({ids[0]}"
                f"{', ...' if len(ids) > 1 else ''}); stop them before {what}"
            )
        return None
    _, lead = coordinator_store.leader(zk, group)
    if lead is not None:
        state = coordinator_store.describe_live(lead, group)
        if state["group_state"] not in coordinator_store.IDLE_STATES:
            raise GroupActive(
                f"group {group!r} is {state['group_state']} with {len(state['members'])} member(s) on "
                f"coordinator {lead.address}; stop them before {what}"
            )
        return lead
    got = zkio.get_many(zk, [group_path(group)])[0]
    if got is not None and got[0]:
        record = decode_group(got[0])
        if record is not None and record.members:
            raise GroupActive(
                f"group {group!r} was stored with {len(record.members)} member(s) and no coordinator node "
                "leads it now; start a node (`groupshift coordinator serve`) so their sessions expire, "
                f"then retry {what}"
            )
    return None


def commit(
    zk: KazooClient,
    scheme: str | Rebalancer,
    group: str,
    offsets: dict[TopicPartition, int],
    progress=None,
    batch: int = BATCH,
) -> str:
    """Write `offsets` for an inactive group; returns how it was written (for the user).

    `batch` (1..BATCH) bounds the ops per transaction and the partitions per OffsetCommit.
    """
    batch = max(1, min(batch, BATCH))
    scheme = store_of(scheme)
    lead = check_inactive(zk, scheme, group, "writing offsets")
    if scheme is Rebalancer.ZK:
        n = zk_store.write_offsets(zk, group, offsets, batch=batch, progress=progress)
        return f"in ZooKeeper ({n} transaction{'s' if n != 1 else ''})"
    if lead is not None:
        _commit_via(lead, group, offsets, progress, batch)
        return f"through coordinator {lead.address}"
    return _commit_in_zk(zk, group, offsets, progress, batch)


class Known(NamedTuple):
    """What a caller read of an inactive group a moment ago (a migration reads both sides before
    it writes anything), so that writing to it needs no read of its own."""

    exists: bool  # the group's znode
    leaves: zkio.Leaves  # its offset znodes (`zk_store.offsets_reader`, `coordinator_store.offsets_reader`)
    leader: coordinator_store.Leader | None = None  # schemes two and three: the node leading its shard
    shard: int = -1  # schemes two and three: the group's shard
    epoch_version: int = -1  # and the version of its epoch znode (-1: none), the fence of a write
    shared: bool = (
        True  # the container all the store's groups share exists (`/consumers`, `/groupshift/groups`)
    )


def write_known(
    zk: KazooClient,
    scheme: str | Rebalancer,
    group: str,
    offsets: dict[TopicPartition, int],
    known: Known,
    *,
    first: list[tuple] | tuple = (),
    last: list[tuple] | tuple = (),
    progress=None,
    batch: int = BATCH,
) -> str:
    """`commit` for a caller that checked the group is inactive and read it (`known`) a moment ago.

    Written in ZooKeeper (`in_zookeeper`), the first transaction also carries the `first` ops and
    the final one the `last` ops (`zk_store.run_ops`); returns how it was written. Every
    transaction applied whole: the destination holds exactly `offsets`, each set with the version
    `known` read (a writer in between fails the transaction instead of being overwritten).
    """
    batch = max(1, min(batch, BATCH))
    if not known.exists and not known.shared:  # created apart: other groups' writes may race for it
        zkio.ensure_shared(zk, SHARED[store_of(scheme)])
    if store_of(scheme) is Rebalancer.ZK:
        ops = zk_store.offset_ops(group, offsets, known.leaves, known.exists)
        n = zk_store.run_ops(zk, ops, batch=batch, progress=progress, first=first, last=last)
        return f"in ZooKeeper ({n} transaction{'s' if n != 1 else ''})"
    if known.leader is not None:
        assert not first and not last, "a write through the node carries no ZooKeeper ops"
        _commit_via(known.leader, group, offsets, progress, batch)
        return f"through coordinator {known.leader.address}"
    guard = (epoch_path(known.shard), known.epoch_version) if known.epoch_version >= 0 else None
    ops = _coordinator_ops(group, offsets, known.leaves, known.exists)
    n = zk_store.run_ops(zk, ops, batch=batch, guard=guard, progress=progress, first=first, last=last)
    return _fenced(known.shard, n)


def in_zookeeper(scheme: str | Rebalancer, known: Known) -> bool:
    """`write_known` writes in ZooKeeper (and carries other ops), not through a coordinator node."""
    return store_of(scheme) is Rebalancer.ZK or known.leader is None


def _commit_via(
    lead: coordinator_store.Leader,
    group: str,
    offsets: dict[TopicPartition, int],
    progress,
    batch: int = BATCH,
) -> None:
    tps = sorted(offsets)
    for i, chunk in enumerate(zkio.chunked(tps, batch)):
        body = commit_body(group, -1, "", {(tp.topic, tp.partition): offsets[tp] for tp in chunk})
        resp = coordinator_store.request(lead, P.OFFSET_COMMIT, body, timeout=30.0)
        bad = [
            (t["name"], p["partition_index"], p["error_code"])
            for t in resp.get("topics", [])
            for p in t["partitions"]
            if p["error_code"]
        ]
        if resp.get("error_code") or bad:
            code = bad[0][2] if bad else resp["error_code"]
            done = f"the first {i * batch} partitions were written; " if i else "nothing was written; "
            raise GroupshiftError(
                f"coordinator {lead.address} refused the commit with {P.ERROR_NAMES.get(code, code)}: {done}"
                "check the group and run the command again"
            )
        if progress is not None:
            progress(min((i + 1) * batch, len(tps)), len(tps))


def _commit_in_zk(
    zk: KazooClient, group: str, offsets: dict[TopicPartition, int], progress, batch: int = BATCH
) -> str:
    shard, guard = _epoch_guard(zk, group)
    # a namespace no coordinator ever ran in has no /groupshift/groups yet
    zkio.ensure_shared(zk, SHARED[Rebalancer.COORDINATOR])
    top, read = zkio.staged(
        zk, zkio.exists_reader(group_path(group)), coordinator_store.offsets_reader(group, only=offsets)
    )
    ops = _coordinator_ops(group, offsets, read, top)
    return _fenced(shard, zk_store.run_ops(zk, ops, batch=batch, guard=guard, progress=progress))


def _fenced(shard: int, n: int) -> str:
    return f"in ZooKeeper, fenced by shard {shard}'s epoch ({n} transaction{'s' if n != 1 else ''})"


def _coordinator_ops(
    group: str, offsets: dict[TopicPartition, int], read: zkio.Leaves, group_exists: bool
) -> list[tuple]:
    """The ops writing `offsets` into the coordinator's store over what `read` found (parents
    created where missing, an existing offset set with the version read)."""
    now = int(time.time() * 1000)
    gpath = group_path(group)
    ops: list[tuple] = [] if group_exists else [("mkdir", gpath)]
    if offsets_dir(gpath) not in read.dirs:
        ops.append(("mkdir", offsets_dir(gpath)))
    made = set(read.dirs)
    leaves, tdir, tz, topic = read.leaves, "", "", None
    for tp in sorted(offsets):
        if tp.topic != topic:  # partitions come topic by topic
            topic = tp.topic
            tz = znode_name(topic)
            tdir = f"{offsets_dir(gpath)}/{tz}"
            if tdir not in made:
                ops.append(("mkdir", tdir))
                made.add(tdir)
        # As the node stores a commit (`coordinator.layout.encode_offset`): no metadata, no generation.
        data = encode_offset_znode(OffsetZnode(offsets[tp], "", -1, now, None))
        path, got = f"{tdir}/{tp.partition}", leaves.get((tz, str(tp.partition)))
        ops.append(("create", path, data) if got is None else ("set", path, data, got[1].version))
    return ops


def delete_group(zk: KazooClient, scheme: str | Rebalancer, group: str) -> str:
    scheme = store_of(scheme)
    exists = zk_store.exists(zk, group) if scheme is Rebalancer.ZK else coordinator_store.exists(zk, group)
    if not exists:
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {scheme.value}; check the name (and --zk)"
        )
    lead = check_inactive(zk, scheme, group, "deleting the group")
    if scheme is Rebalancer.ZK:
        if zkio.children(zk, f"{zk_store.group_dir(group)}/owners") and _any_owner(zk, group):
            raise GroupActive(
                f"group {group!r} still has partition owners; its consumers are stopping, retry"
            )
        return _delete_tree(zk, zk_store.group_dir(group), None)
    if lead is not None:
        resp = coordinator_store.request(lead, P.DELETE_GROUPS, {"groups_names": [group]})
        code = (resp.get("results") or [{"error_code": resp.get("error_code", 0)}])[0]["error_code"]
        if code:
            raise GroupshiftError(
                f"coordinator {lead.address} refused to delete {group!r}: {P.ERROR_NAMES.get(code, code)}"
            )
        return f"through coordinator {lead.address}"
    return _delete_tree_fenced(zk, group, group_path(group))


def delete_offsets(zk: KazooClient, scheme: str | Rebalancer, group: str, topic: str) -> str:
    scheme = store_of(scheme)
    if scheme is Rebalancer.ZK:
        base = zk_store.group_dir(group)
        if zkio.get_many(zk, [f"{base}/offsets/{topic}"])[0] is None:
            raise GroupshiftError(f"group {group!r} has no offsets for topic {topic!r}")
        check_inactive(zk, scheme, group, "deleting offsets")
        done = _delete_tree(zk, f"{base}/offsets/{topic}", None)
        if zkio.get_many(zk, [f"{base}/owners/{topic}"])[0] is not None:
            _delete_tree(zk, f"{base}/owners/{topic}", None)
        return done
    tdir = f"{offsets_dir(group_path(group))}/{znode_name(topic)}"
    parts = zkio.children(zk, tdir)
    if parts is None:
        raise GroupshiftError(f"group {group!r} has no offsets for topic {topic!r}")
    lead = check_inactive(zk, scheme, group, "deleting offsets")
    if lead is not None:
        body = {
            "group_id": group,
            "topics": [
                {"name": topic, "partitions": [{"partition_index": int(p)} for p in parts if p.isdigit()]}
            ],
        }
        resp = coordinator_store.request(lead, P.OFFSET_DELETE, body)
        codes = [resp.get("error_code", 0)] + [
            p["error_code"] for t in resp.get("topics", []) for p in t["partitions"]
        ]
        bad = [c for c in codes if c]
        if bad:
            raise GroupshiftError(
                f"coordinator {lead.address} refused to delete the offsets: "
                f"{P.ERROR_NAMES.get(bad[0], bad[0])}"
            )
        # OffsetDelete removes the partitions' znodes; the node leaves the empty topic znode
        return f"through coordinator {lead.address}"
    return _delete_tree_fenced(zk, group, tdir)


def _any_owner(zk: KazooClient, group: str) -> bool:
    base = f"{zk_store.group_dir(group)}/owners"
    topics = zkio.children(zk, base) or []
    return any(zkio.children_many(zk, [f"{base}/{t}" for t in topics]))


def _delete_tree(zk: KazooClient, root: str, guard: tuple | None) -> str:
    paths = zkio.subtree_paths(zk, root)
    n = zk_store.run_ops(zk, [("delete", p) for p in paths], batch=BATCH, guard=guard)
    return f"{len(paths)} znodes deleted ({n} transaction{'s' if n != 1 else ''})"


def _epoch_guard(zk: KazooClient, group: str) -> tuple[int, tuple[str, int] | None]:
    """(the group's shard, a check of its epoch as read now): what fences a write in ZooKeeper while
    no node leads the shard (a node that claims the shard meanwhile bumps the epoch)."""
    shard, _, epoch_version = zkio.staged(zk, coordinator_store.leader_reader(group))[0]
    return shard, ((epoch_path(shard), epoch_version) if epoch_version >= 0 else None)


def _delete_tree_fenced(zk: KazooClient, group: str, root: str) -> str:
    return _delete_tree(zk, root, _epoch_guard(zk, group)[1])


def delete_partitions(
    zk: KazooClient, scheme: str | Rebalancer, group: str, tps: list[TopicPartition]
) -> str:
    """Delete the committed offsets of exactly these partitions (those that exist) of an inactive group."""
    scheme = store_of(scheme)
    lead = check_inactive(zk, scheme, group, "deleting offsets")
    if scheme is Rebalancer.ZK:
        paths = [zk_store.offset_path(group, tp) for tp in tps]
        guard = None
    elif lead is not None:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(tps):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        body = {
            "group_id": group,
            "topics": [
                {"name": t, "partitions": [{"partition_index": p} for p in ps]} for t, ps in by_topic.items()
            ],
        }
        resp = coordinator_store.request(lead, P.OFFSET_DELETE, body, timeout=30.0)
        codes = [resp.get("error_code", 0)] + [
            p["error_code"] for t in resp.get("topics", []) for p in t["partitions"]
        ]
        bad = [c for c in codes if c]
        if bad:
            raise GroupshiftError(
                f"coordinator {lead.address} refused to delete the offsets: "
                f"{P.ERROR_NAMES.get(bad[0], bad[0])}"
            )
        return f"through coordinator {lead.address}"
    else:
        _, guard = _epoch_guard(zk, group)
        paths = [offset_path(group, *tp) for tp in tps]
    present = [p for p, got in zip(paths, zkio.get_many(zk, paths), strict=True) if got is not None]
    n = zk_store.run_ops(zk, [("delete", p) for p in present], batch=BATCH, guard=guard) if present else 0
    return f"{len(present)} offsets deleted ({n} transaction{'s' if n != 1 else ''})"
