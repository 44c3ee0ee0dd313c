"""The migration record: a pure state machine, stored as JSON in `/groupshift/migrations/<g>`.

State transitions
-----------------

    offline: planned -> frozen  -> copied -> verified -> switched -> done      (`ORDER`)
    live:    planned -> bridged -> copied -> verified -> switched -> done      (`LIVE_ORDER`)
    any state but done and rolled_back -> rolled_back

`ENTERED_FROM` is this table as data, one `core.states.Transitions` per mode, built from the mode's
path: a state -> the states it may be entered from (each step from the one before it on the path,
`rolled_back` from any state that is not terminal). `advance` is the one function that changes a
record's state; it refuses a transition that is not in the table (`IllegalTransition`). `done` and
`rolled_back` are terminal: a new migration of the group replaces the record.

`planned` saves the destination's offsets as they were (for a rollback); `frozen` saves the
source's offsets (the snapshot every later step compares with). `bridged` (live mode) lets legacy
and coordinator consumers share the group (`migrate.migration.bridge`); the members carry the
offsets over by committing to both schemes, so a live `copied` means "no legacy member is left".
Nothing here does I/O: the engine (`migrate.migration.offline`, `live`) reads, decides with these
functions, and writes each transition as one ZooKeeper `multi` guarded by the record's version.
Its path, the engine's lock and the bridge's markers are `coordinator/layout.py`'s
(`migration_path`, `migration_lock_path`, `bridge_marker_dir`).

>>> sorted(s for s in State if ENTERED_FROM["offline"].allows(State.PLANNED, s))
[<State.FROZEN: 'frozen'>, <State.ROLLED_BACK: 'rolled_back'>]
>>> State.DONE.value, State.DONE == "done"
('done', True)
"""

from __future__ import annotations

import enum
import itertools

import msgspec

from core import states
from core.errors import GroupshiftError
from core.types import TopicPartition


class State(enum.StrEnum):
    """One state of a migration. The value is what the record stores and `migrate status` prints (a
    StrEnum: the record's JSON is the same as when states were plain strings)."""

    #: The record exists; `prior` holds the destination's offsets before the migration.
    PLANNED = "planned"
    #: Offline: the source's offsets are saved as `snapshot`; the copy may start.
    FROZEN = "frozen"
    #: Live: legacy and coordinator consumers share the group through the bridge.
    BRIDGED = "bridged"
    #: The snapshot's offsets are in the destination (live: no legacy member is left).
    COPIED = "copied"
    #: A second read found the destination equal to the snapshot.
    VERIFIED = "verified"
    #: The group belongs to the destination now (live: the members left bridge mode).
    SWITCHED = "switched"
    #: Finished. Terminal.
    DONE = "done"
    #: The destination was put back as it was. Terminal.
    ROLLED_BACK = "rolled_back"


PLANNED = State.PLANNED
FROZEN = State.FROZEN
BRIDGED = State.BRIDGED
COPIED = State.COPIED
VERIFIED = State.VERIFIED
SWITCHED = State.SWITCHED
DONE = State.DONE
ROLLED_BACK = State.ROLLED_BACK

MODES = ("offline", "live")

# The path a run takes when nothing goes wrong (what `migrate plan` lists as its steps).
ORDER = (PLANNED, FROZEN, COPIED, VERIFIED, SWITCHED, DONE)
LIVE_ORDER = (PLANNED, BRIDGED, COPIED, VERIFIED, SWITCHED, DONE)
TERMINAL = (DONE, ROLLED_BACK)
LEGACY_ASSIGNORS = ("range", "roundrobin")  # what the legacy consumers of a bridged group use

# A record holds two offset lists; ~40 bytes a partition keeps 20,000 partitions far below
# ZooKeeper's 1 MB znode limit (jute.maxbuffer).
MAX_PARTITIONS = 20_000
HISTORY_MAX = 50  # transitions kept in a record (a record is replaced when a new migration starts)


class IllegalTransition(GroupshiftError, states.IllegalTransition):
    """A state change the table does not allow (e.g. a step skipped, or leaving a terminal state).

    A `GroupshiftError`: the CLI says it in one line (a concurrent run, or a record edited by hand)."""


def _table(path: tuple[State, ...]) -> states.Transitions[State]:
    """A mode's table: each step of its path entered from the one before, `rolled_back` from any
    state that is not terminal (a state of the other mode too, though a record never holds it)."""
    steps = {new: {old} for old, new in itertools.pairwise(path)}
    return states.Transitions({**steps, ROLLED_BACK: set(State) - set(TERMINAL)}, IllegalTransition)


#: mode -> the states of a record of that mode and the states each may be entered from.
ENTERED_FROM: dict[str, states.Transitions[State]] = {"offline": _table(ORDER), "live": _table(LIVE_ORDER)}


class Migration(msgspec.Struct):
    group: str
    source: str  # zk | coordinator
    dest: str  # zk | coordinator | kafka (any Kafka-protocol broker, `bootstrap`)
    mode: str  # offline | live
    state: State
    started_ms: int
    updated_ms: int
    overwrite: bool = False
    dest_existed: bool = False  # the destination group existed before (else rollback deletes it)
    prior: list[tuple[str, int, int]] = msgspec.field(default_factory=list)  # destination before
    snapshot: list[tuple[str, int, int]] = msgspec.field(default_factory=list)  # source when frozen
    history: list[tuple[State, int]] = msgspec.field(default_factory=list)  # (state, ms)
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


def transitions(mode: str) -> states.Transitions[State]:
    """The table of `mode` (a record of any other mode follows the offline one)."""
    return ENTERED_FROM["live" if mode == "live" else "offline"]


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


def advance(m: Migration, to: State, now: int, **changes) -> Migration:
    """The record after the transition `m.state -> to`; raises `IllegalTransition` unless the table
    of the record's mode allows it. The one function that changes a record's state."""
    transitions(m.mode).check(m.state, to, "migration of {!r}", m.group)
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
    """Partitions of `want` whose offset `have` does not hold, in order."""
    return sorted([tp for tp, offset in want.items() if have.get(tp) != offset])


_MISSING = object()


def snapshot_equals(rows: list[tuple[str, int, int]], offsets: dict[TopicPartition, int]) -> bool:
    """`as_offsets(rows) == offsets`, without building the dict (a plain (topic, partition) tuple
    finds its TopicPartition key: equal hash, equal tuple)."""
    return len(rows) == len(offsets) and all(offsets.get((t, p), _MISSING) == o for t, p, o in rows)


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
    snap = rec.snapshot if rec is not None and snapshot_matches else None
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
        "source_matches_snapshot": None if snap is None else snapshot_equals(snap, src),
        "record": rec.state if rec else None,
    }
