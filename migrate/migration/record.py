"""The migration record: a pure state machine, stored as JSON in `/groupshift/migrations/<g>`.

    offline: planned -> frozen  -> copied -> verified -> switched -> done
    live:    planned -> bridged -> copied -> verified -> switched -> done
    any state before done -> rolled_back

`planned` saves the destination's offsets as they were (for a rollback); `frozen` saves the
source's offsets (the snapshot every later step compares with). `bridged` (live mode) lets legacy
and coordinator consumers share the group (`migrate.bridge`); the members carry the offsets over
by committing to both schemes, so a live `copied` means "no legacy member is left". Nothing here does I/O: the
engine (`migrate.offline`) reads, decides with these functions, and writes each transition as
one ZooKeeper `multi` guarded by the record's version. Its path, the engine's lock and the bridge's
markers are `coordinator/layout.py`'s (`migration_path`, `migration_lock_path`, `bridge_marker_dir`).
"""

from __future__ import annotations

import msgspec

from core.errors import GroupshiftError
from core.types import TopicPartition

PLANNED, FROZEN, BRIDGED, COPIED, VERIFIED, SWITCHED, DONE, ROLLED_BACK = (
    "planned",
    "frozen",
    "bridged",
    "copied",
    "verified",
    "switched",
    "done",
    "rolled_back",
)
ORDER = (PLANNED, FROZEN, COPIED, VERIFIED, SWITCHED, DONE)
LIVE_ORDER = (PLANNED, BRIDGED, COPIED, VERIFIED, SWITCHED, DONE)
TERMINAL = (DONE, ROLLED_BACK)
MODES = ("offline", "live")
LEGACY_ASSIGNORS = ("range", "roundrobin")  # what the legacy consumers of a bridged group use

# A record holds two offset lists; ~40 bytes a partition keeps 20,000 partitions far below
# ZooKeeper's 1 MB znode limit (jute.maxbuffer).
MAX_PARTITIONS = 20_000
HISTORY_MAX = 50  # transitions kept in a record (a record is replaced when a new migration starts)


class Migration(msgspec.Struct):
    group: str
    source: str  # zk | coordinator
    dest: str  # zk | coordinator | kafka (any Kafka-protocol broker, `bootstrap`)
    mode: str
    state: str
    started_ms: int
    updated_ms: int
    overwrite: bool = False
    dest_existed: bool = False  # the destination group existed before (else rollback deletes it)
    prior: list[tuple[str, int, int]] = msgspec.field(default_factory=list)  # destination before
    snapshot: list[tuple[str, int, int]] = msgspec.field(default_factory=list)  # source when frozen
    history: list[tuple[str, int]] = msgspec.field(default_factory=list)  # (state, ms)
    legacy_assignor: str = "range"  # live mode: the legacy consumers' partition.assignment.strategy
    bootstrap: str = ""  # --to kafka: the Kafka-protocol brokers the destination group lives on


def as_offsets(rows: list[tuple[str, int, int]]) -> dict[TopicPartition, int]:
    return {TopicPartition(t, p): o for t, p, o in rows}


def as_rows(offsets: dict[TopicPartition, int]) -> list[tuple[str, int, int]]:
    return [(tp.topic, tp.partition, offsets[tp]) for tp in sorted(offsets)]


def encode(m: Migration) -> bytes:
    return msgspec.json.encode(m)


def decode(data: bytes, path: str) -> Migration:
    try:
        return msgspec.json.decode(data, type=Migration)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise GroupshiftError(f"the migration record {path} is unreadable ({exc}); inspect it") from None


def order(mode: str) -> tuple[str, ...]:
    return LIVE_ORDER if mode == "live" else ORDER


def new(
    group: str,
    source: str,
    dest: str,
    mode: str,
    now: int,
    prior,
    dest_existed,
    overwrite,
    legacy_assignor: str = "range",
) -> Migration:
    check_bound(len(prior), "the destination")
    return Migration(
        group,
        source,
        dest,
        mode,
        PLANNED,
        now,
        now,
        overwrite,
        dest_existed,
        as_rows(prior),
        [],
        [(PLANNED, now)],
        legacy_assignor,
    )


def check_bound(n: int, where: str) -> None:
    if n > MAX_PARTITIONS:
        raise GroupshiftError(
            f"{where} has {n} partition offsets; a migration handles at most {MAX_PARTITIONS} per group"
        )


def advance(m: Migration, to: str, now: int, **changes) -> Migration:
    """The record after the transition `m.state -> to`; raises if that is not the next step."""
    allowed = to == ROLLED_BACK and m.state not in TERMINAL
    steps = order(m.mode)
    if m.state in steps[:-1]:
        allowed = allowed or steps[steps.index(m.state) + 1] == to
    if not allowed:
        raise GroupshiftError(f"migration of {m.group!r} cannot go from {m.state} to {to}")
    history = (m.history + [(to, now)])[-HISTORY_MAX:]
    return msgspec.structs.replace(m, state=to, updated_ms=now, history=history, **changes)


def conflict(m: Migration | None, source: str, dest: str, mode: str | None = None) -> str | None:
    """Why a new or resumed run with these arguments is refused, or None."""
    if m is None or m.state in TERMINAL:
        return None
    if (m.source, m.dest) != (source, dest) or mode not in (None, m.mode):
        return (
            f"an unfinished migration of {m.group!r} ({m.mode}) from {m.source} to {m.dest} is {m.state}; "
            f"finish it with `migrate run {m.group} --from {m.source} --to {m.dest} --mode {m.mode}` "
            "or undo it with "
            "`migrate rollback`"
        )
    return None


def diff(want: dict[TopicPartition, int], have: dict[TopicPartition, int]) -> list[TopicPartition]:
    """Partitions of `want` whose offset `have` does not hold."""
    return [tp for tp in sorted(want) if have.get(tp) != want[tp]]


def verify_report(
    group: str,
    source: str,
    dest: str,
    src: dict[TopicPartition, int],
    dst: dict[TopicPartition, int],
    rec: Migration | None,
    snapshot_matches: bool,
) -> dict:
    """What `migrate verify` prints: the partitions whose offsets differ between the source and the
    destination, and whether the source still equals the migration record's snapshot (None: no
    record of this migration)."""
    snap = as_offsets(rec.snapshot) if rec is not None and snapshot_matches else None
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "source": src.get(tp), "destination": dst.get(tp)}
        for tp in diff(src, dst)
    ]
    return {
        "group": group,
        "from": source,
        "to": dest,
        "partitions": len(src),
        "equal": not rows,
        "differ": rows,
        "source_matches_snapshot": None if snap is None else snap == src,
        "record": rec.state if rec else None,
    }
