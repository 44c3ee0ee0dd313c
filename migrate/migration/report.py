"""What a migration would do and what it did: `plan`, `verify` and `status` (they write nothing).

    plan(zk, "billing", "zk", "coordinator")      # the checks `run` makes, the offsets it would copy
    verify(zk, "billing", "zk", "coordinator")    # both sides now, partition by partition
    status(zk, "billing")                         # the recorded state and history

Each reads what it needs in one pass (`migrate.migration.look`): both sides and the record together.
"""

from __future__ import annotations

from kazoo.client import KazooClient

from core.errors import GroupshiftError, UnknownGroup
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.migration import bridge
from migrate.migration import record as R
from migrate.migration.look import Look, lock_holder, look, read_record
from migrate.migration.offline import _dead_here, _holder_text
from migrate.migration.sides import check_args, kind_of, kind_refusal, members_of, parse


def plan(
    zk: KazooClient, group: str, source: str | Rebalancer, dest: str | Rebalancer, mode: str = "offline"
) -> dict:
    """What `run` would do, and the checks it would make; writes nothing."""
    source, dest = check_args(source, dest, mode)
    seen = look(zk, group, source, dest)
    if not seen.src.exists:
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
        )
    src, dst = seen.src.values(), seen.dst.values()
    rec, holder = seen.record, seen.holder
    members = {source: members_of(seen.src), dest: members_of(seen.dst)}
    resuming = rec is not None and rec.state not in R.TERMINAL
    checks = [
        *_kind_checks(seen),
        ("source has no live members", not members[source], ", ".join(members[source][:10])),
        ("destination has no live members", not members[dest], ", ".join(members[dest][:10])),
        ("source has committed offsets", bool(src), f"{len(src)} partitions"),
        (
            "destination has no offsets of its own",
            resuming or not dst,
            f"{len(dst)} partitions" + ("; resuming" if resuming else " (pass --overwrite)" if dst else ""),
        ),
        ("no other migration running", holder is None, _holder_text(holder) if holder else ""),
        (
            "no unfinished migration with other arguments",
            R.conflict(rec, source.value, dest.value) is None,
            "",
        ),
        (f"at most {R.MAX_PARTITIONS} partitions", len(src) <= R.MAX_PARTITIONS, str(len(src))),
    ]
    return {
        "group": group,
        "from": source.value,
        "to": dest.value,
        "mode": mode,
        "partitions": len(src),
        "to_copy": len(R.diff(src, dst)),
        "members": members[source],
        "record": rec.state if rec else None,
        "steps": [s for s in R.ORDER if not resuming or R.ORDER.index(s) > R.ORDER.index(rec.state)],
        "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in checks],
        "offsets": offset_rows(src, dst),
    }


def offset_rows(src: dict[TopicPartition, int], dst: dict[TopicPartition, int]) -> list[dict]:
    """`plan`'s rows: every partition of the source, its offset on both sides."""
    return [
        {"topic": tp.topic, "partition": tp.partition, "source": src[tp], "destination": dst.get(tp)}
        for tp in sorted(src)
    ]


def _kind_checks(seen: Look) -> list[tuple]:
    """`plan`'s rows for `kind_refusal` (scheme two's and three's groups share the coordinator's store)."""
    rows = []
    for side, name in ((seen.src, "source"), (seen.dst, "destination")):
        if side.scheme is Rebalancer.ZK:
            continue
        why = kind_refusal(side.group, side.scheme, kind_of(side.stored), name)
        rows.append((f"{name} is not a group of the other coordinator scheme", why is None, why or ""))
    return rows


def verify(zk: KazooClient, group: str, source: str | Rebalancer, dest: str | Rebalancer) -> dict:
    """Compare the destination with the source now (and with the frozen snapshot, when recorded):
    both sides and the record read together."""
    source, dest = parse(source), parse(dest)
    seen = look(zk, group, source, dest)
    if not seen.src.exists:
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
        )
    rec = seen.record
    ours = rec is not None and (rec.source, rec.dest) == (source.value, dest.value)
    return R.verify_report(group, source.value, dest.value, seen.src.values(), seen.dst.values(), rec, ours)


def status(zk: KazooClient, group: str) -> dict:
    rec, _ = read_record(zk, group)
    if rec is None:
        raise GroupshiftError(f"no migration of group {group!r} is recorded")
    holder = lock_holder(zk, group)
    extra = {}
    if rec.mode == "live":
        legacy_ids, bridged_ids = bridge.registered(zk, group)
        extra = {
            "legacy_assignor": rec.legacy_assignor,
            "legacy_members": legacy_ids,
            "bridged_members": bridged_ids,
        }
    return {
        "group": rec.group,
        "from": rec.source,
        "to": rec.dest,
        "mode": rec.mode,
        "state": rec.state,
        "partitions": len(rec.snapshot),
        "started_ms": rec.started_ms,
        "updated_ms": rec.updated_ms,
        "running": _holder_text(holder) if holder and not _dead_here(holder) else None,
        **({"bootstrap": rec.bootstrap} if rec.bootstrap else {}),
        "history": [{"state": s, "at_ms": t} for s, t in rec.history],
        **extra,
    }
