"""Scheme one's groups as Kafka 0.8 wrote them: `/consumers/<g>/{ids,owners,offsets}`, read and written.

Read exactly as a 0.8.2 cluster leaves them: registrations are JSON with `pattern` `static`,
`white_list` or `black_list` and thread counts per topic (a wildcard is expanded over
`/brokers/topics`); owners hold thread ids (`<consumerId>-<n>`); offsets are decimal strings,
the next offset to read. Nothing here writes unless asked to; writes are `multi` transactions.

    view = read_group(zk, "billing")          # GroupView, or None if /consumers/billing is absent
    list_groups(zk)                           # ["billing", ...]
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from kazoo.client import KazooClient
from kazoo.exceptions import RolledBackError

from coordinator.layout import bridge_marker_dir
from core.errors import GroupshiftError
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.schemes import zkio, zkmulti
from migrate.schemes.model import DEAD, EMPTY, REBALANCING, STABLE, Committed, GroupView, Member
from zk_rebalance.layout import (
    BROKER_TOPICS,
    INTERNAL_TOPICS,
    InvalidRegistration,
    decode_registration,
    ids_dir,
    parse_thread_id,
    topic_path,
)
from zk_rebalance.layout import offset_path as layout_offset_path

CONSUMERS = "/consumers"


def group_dir(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def offset_path(group: str, tp: TopicPartition) -> str:
    return layout_offset_path(group, tp.topic, tp.partition)


def list_groups(zk: KazooClient) -> list[str]:
    return sorted(zkio.children(zk, CONSUMERS) or [])


def exists(zk: KazooClient, group: str) -> bool:
    return valid_name(group) and zkio.get_many(zk, [group_dir(group)])[0] is not None


def valid_name(group: str) -> bool:
    # Anything else cannot be a znode name under /consumers (0.8 allows only [a-zA-Z0-9._-]).
    return bool(group) and "/" not in group and "\0" not in group and group not in (".", "..")


def topic_partitions(zk: KazooClient, topics: list[str]) -> dict[str, int | None]:
    """Partition counts from `/brokers/topics/<t>` (None for a topic that is not registered)."""
    from topics.registry import decode_assignment

    out: dict[str, int | None] = {}
    for topic, got in zip(topics, zkio.get_many(zk, [topic_path(t) for t in topics]), strict=True):
        if got is None:
            out[topic] = None
            continue
        try:
            out[topic] = len(decode_assignment(got[0], topic))
        except GroupshiftError:
            out[topic] = None
    return out


def read_offsets(zk: KazooClient, group: str) -> dict[TopicPartition, Committed]:
    """Every `/consumers/<g>/offsets/<t>/<p>`; values that are not decimal offsets are skipped."""
    return offsets_of(zkio.staged(zk, offsets_reader(group))[0])


def offsets_dir(group: str) -> str:
    return f"{group_dir(group)}/offsets"


def offsets_reader(group: str, known: Iterable[TopicPartition] = (), only=None) -> zkio.Reader:
    """Reader (`zkio.staged`) of the group's offset znodes, as `zkio.Leaves` (`offsets_of` decodes
    them); `known` partitions are read in the first round with the listings, `only`: no others."""
    return zkio.leaves_reader(
        offsets_dir(group),
        [_leaf(tp) for tp in known],
        None if only is None else [_leaf(tp) for tp in only],
    )


def _leaf(tp: TopicPartition) -> tuple[str, str]:
    return tp.topic, str(tp.partition)


def offsets_of(read: zkio.Leaves) -> dict[TopicPartition, Committed]:
    out: dict[TopicPartition, Committed] = {}
    tp = tuple.__new__  # a TopicPartition without the namedtuple's Python-level __new__ (half its cost)
    for (topic, p), (data, stat) in read.leaves.items():
        if (data.isdigit() or _signed_digits(data.strip())) and p.isdigit():  # plain digits first
            out[tp(TopicPartition, (topic, int(p)))] = Committed(int(data), stat.mtime, stat.mzxid)
    return out


def _signed_digits(data: bytes) -> bool:
    """An offset as 0.8 writes it, maybe negative (int() takes it; "--5", "+5" or "1_0" are skipped)."""
    return (data[1:] if data[:1] == b"-" else data).isdigit()


def read_group(zk: KazooClient, group: str) -> GroupView | None:
    """The group as stored, with a derived state; None when `/consumers/<g>` does not exist."""
    if not valid_name(group):
        return None
    top = zkio.get_many(zk, [group_dir(group)])[0]
    if top is None:
        return None
    ids, bridged = zkio.children_many(zk, [ids_dir(group), bridge_marker_dir(group)])
    ids, bridged = ids or [], set(bridged or [])
    regs = zkio.get_many(zk, [f"{ids_dir(group)}/{c}" for c in ids])
    owners = _read_owners(zk, group)
    offsets = read_offsets(zk, group)

    all_topics: list[str] | None = None
    members: list[Member] = []
    subscribed_topics: set[str] = set()
    for cid, got in sorted(zip(ids, regs, strict=True), key=lambda x: x[0]):
        if got is None:
            continue  # left while we read
        path = f"{ids_dir(group)}/{cid}"
        owned = sorted(tp for tp, thread in owners.items() if thread == cid)
        try:
            sub = decode_registration(got[0], path)
        except InvalidRegistration as exc:
            members.append(_member(group, cid, owned, {}, "?", str(exc)))
            continue
        if sub.is_wildcard:
            if all_topics is None:
                all_topics = zkio.children(zk, BROKER_TOPICS) or []
            subscribed_topics.update(t for t in all_topics if sub.filter.allows(t))
        else:
            subscribed_topics.update(sub.streams)
        member = _member(group, cid, owned, dict(sub.streams), sub.pattern, None)
        if cid in bridged:  # a coordinator consumer in the group through a live migration's bridge
            member = msgspec.structs.replace(member, client_id=BRIDGED_CLIENT)
        members.append(member)

    subscribed = {
        t: n for t, n in topic_partitions(zk, sorted(subscribed_topics - INTERNAL_TOPICS)).items() if n
    }
    live = {m.member_id for m in members}
    if not members:
        state = EMPTY if offsets or owners else DEAD
    else:
        expected = {TopicPartition(t, p) for t, n in subscribed.items() for p in range(n)}
        covered = all(owners.get(tp) in live for tp in expected)
        state = STABLE if covered and not any(m.error for m in members) else REBALANCING
    notes = []
    if bridged & live:
        notes.append(
            f"{len(bridged & live)} member(s) are coordinator consumers bridged by a live migration "
            "(`migrate status` tells its state)"
        )
    stale = sorted({c for c in owners.values() if c not in live})
    if stale:
        notes.append(f"partitions owned by consumers that are not registered: {', '.join(stale)}")
    return GroupView(
        scheme=Rebalancer.ZK,
        group=group,
        state=state,
        protocol_type="zk-0.8",
        protocol=",".join(sorted({m.pattern for m in members})) or None,
        members=members,
        offsets=offsets,
        owners=owners,
        subscribed=subscribed,
        notes=notes,
    )


def _read_owners(zk: KazooClient, group: str) -> dict[TopicPartition, str]:
    """tp -> owning consumer id (the owner znode holds a thread id `<consumerId>-<n>`)."""
    read = zkio.staged(zk, zkio.leaves_reader(f"{group_dir(group)}/owners"))[0]
    return {
        TopicPartition(t, int(p)): parse_thread_id(data.decode("utf-8", "replace")).consumer
        for (t, p), (data, _) in read.leaves.items()
        if p.isdigit()
    }


def _member(group: str, cid: str, owned, subscription, pattern, error) -> Member:
    # consumer id = <group>_<host>-<ms>-<uuid8> (0.8's consumerIdString); the host is in the middle
    rest = cid[len(group) + 1 :] if cid.startswith(group + "_") else cid
    parts = rest.rsplit("-", 2)
    host = parts[0] if len(parts) == 3 and parts[1].isdigit() else None
    return Member(cid, None, host, None, owned, subscription, pattern, error)


BRIDGED_CLIENT = "coordinator (bridged)"  # the client id shown for a bridged member


# -- writes ------------------------------------------------------------------------------------


def write_offsets(
    zk: KazooClient, group: str, offsets: dict[TopicPartition, int], *, batch: int, progress=None
) -> int:
    """Write offsets as 0.8 does (decimal strings), creating missing parents; one `multi` per batch.

    Returns the number of transactions used.
    """
    zkio.ensure_shared(zk, [CONSUMERS])
    top, read = zkio.staged(zk, zkio.exists_reader(group_dir(group)), offsets_reader(group, only=offsets))
    return run_ops(zk, offset_ops(group, offsets, read, top), batch=batch, progress=progress)


def offset_ops(group: str, offsets: dict[TopicPartition, int], read: zkio.Leaves, group_exists: bool) -> list:
    """The ops writing `offsets` over what `read` (`offsets_reader`) found: parents created where
    missing; an offset that exists set with the version read (a consumer writing meanwhile makes
    the transaction fail, not mix)."""
    base = offsets_dir(group)
    ops: list[tuple] = [("mkdir", p) for p in ([] if group_exists else [group_dir(group)])]
    if base not in read.dirs:
        ops.append(("mkdir", base))
    made = set(read.dirs)
    for tp in sorted(offsets):
        value = str(offsets[tp]).encode()
        tdir = f"{base}/{tp.topic}"
        if tdir not in made:
            ops.append(("mkdir", tdir))
            made.add(tdir)
        got = read.leaves.get((tp.topic, str(tp.partition)))
        if got is None:
            ops.append(("create", offset_path(group, tp), value))
        else:
            ops.append(("set", offset_path(group, tp), value, got[1].version))
    return ops


def run_ops(
    zk: KazooClient,
    ops: list[tuple],
    *,
    batch: int,
    guard: tuple | None = None,
    progress=None,
    first: list[tuple] | tuple = (),
    last: list[tuple] | tuple = (),
) -> int:
    """Run `ops` as `multi` transactions of at most `batch` ops each, not counting the parents
    they create ("mkdir"), each led by `guard` (a check op). `first` ops open the first
    transaction and `last` ops close the final one (a migration's lock and record move with its
    copy). Ops: ("create"|"set"|"delete"|"check", path, ...), ("mkdir", path), ("ephemeral",
    path, data).

    `progress(done, total)` is called after each transaction. Returns the transactions used.
    """
    chunks = _chunks(ops, batch) or ([[]] if first or last else [])
    total = sum(op[0] != "mkdir" for op in ops)
    n = done = 0
    for i, chunk in enumerate(chunks):
        done += sum(op[0] != "mkdir" for op in chunk)
        chunk = (list(first) if i == 0 else []) + chunk + (list(last) if i == len(chunks) - 1 else [])
        txn = transaction(zk, ([("check", *guard)] if guard is not None else []) + chunk)
        zkio.requests["multi"] += 1
        zkio.requests["znodes written"] += sum(op[0] != "check" for op in chunk)
        try:
            results = txn.commit()
        except Exception as exc:  # kazoo raises connection, timeout and request errors here
            raise GroupshiftError(
                f"ZooKeeper refused the write ({exc!r}); nothing of this batch was written"
            ) from None
        failed = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failed:
            earlier = f"{n} earlier transaction(s) were written; " if n else "nothing was written; "
            raise GroupshiftError(
                f"ZooKeeper refused the write ({failed[0]!r}): {earlier}someone changed the group meanwhile, "
                "check it and run the command again"
            )
        n += 1
        if progress is not None:
            progress(done, total)
    return n


def transaction(zk: KazooClient, ops: list[tuple]):
    """The `multi` of `run_ops`'s ops, built and not yet committed (`zkmulti.transaction`)."""
    return zkmulti.transaction(zk, ops)


def _chunks(ops: list[tuple], batch: int) -> list[list[tuple]]:
    """`ops` in runs of `batch`, parents ("mkdir") not counted (one never follows its child)."""
    out: list[list[tuple]] = []
    chunk: list[tuple] = []
    counted = 0
    for op in ops:
        if counted == batch and op[0] != "mkdir":
            out.append(chunk)
            chunk, counted = [], 0
        chunk.append(op)
        counted += op[0] != "mkdir"
    if chunk:
        out.append(chunk)
    return out
