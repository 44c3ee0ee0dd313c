"""The live migration engine: scheme one -> coordinator while the group keeps consuming (the bridge).

    run(zk, "billing", legacy_assignor="range")   # planned -> bridged; returns while legacy members remain
    ... replace the legacy consumers with coordinator consumers, one by one ...
    run(zk, "billing")                            # bridged -> copied -> verified -> switched -> done

`bridged` tells coordinator consumers to join through `migrate.migration.bridge` (legacy registration,
union assignment, owner znodes, dual commits). The members carry the offsets over by committing
to both schemes (the coordinator's offset of a partition is brought up to the legacy one when a
coordinator member claims it); the engine copies an offset itself only while the coordinator
group has no member (a partition nobody consumes, or every consumer stopped). Once no legacy member is left
(`/consumers/<g>/ids` holds only bridged members), `copied` is recorded when every legacy offset
has reached the coordinator, `verified` when a second read finds them equal, then `switched`
(the members leave bridge mode) and `done`. Each transition is one `multi` under the migration
lock, as in `migrate.migration.offline`; a killed run resumes with `run`, `rollback` undoes it once the
coordinator consumers are stopped (the legacy offsets are current: the members dual-committed).
"""

from __future__ import annotations

import time

from kazoo.client import KazooClient

from core.errors import GroupshiftError, UnknownGroup
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.migration import bridge, offline, report
from migrate.migration import record as R
from migrate.migration.look import Look, look
from migrate.migration.offline import (
    MigrationBusy,
    _dead_here,
    _holder_text,
    _now,
    _Run,
    checkpoint,
    lock_holder,
    offsets,
    read_record,
)
from migrate.migration.sides import Side, check_kind, kind_of, kind_refusal, read_side
from migrate.schemes import coordinator_store, writes, zk_store

SETTLE_S = 30.0  # how long `run` waits for the members' commits to bring the coordinator level
POLL_S = 0.5
MAX_WAIT_S = 86_400.0


def check_args(source: str | Rebalancer, dest: str | Rebalancer, legacy_assignor: str) -> Rebalancer:
    """The destination (coordinator or server), refused unless the pair and the assignor are a live one."""
    _, dest = offline.check_args(source, dest, "live")
    if legacy_assignor not in R.LEGACY_ASSIGNORS:
        raise GroupshiftError(
            f"unknown legacy assignor {legacy_assignor!r}; use {' or '.join(R.LEGACY_ASSIGNORS)} "
            "(the partition.assignment.strategy of the legacy consumers)"
        )
    return dest


def behind(zk: KazooClient, group: str) -> dict[TopicPartition, tuple[int, int | None]]:
    """Partitions whose coordinator offset is not (yet) the legacy one: tp -> (legacy, coordinator)."""
    return _lag(*_legacy_then_coordinator(zk, group))


def _legacy_then_coordinator(zk: KazooClient, group: str) -> tuple[Side, Side]:
    """Both sides, the legacy one first: a bridged member commits there first, then to the
    coordinator, so reading the coordinator's side after gives the commit in between time to land
    (read together, a member committing all the time would almost always look behind)."""
    legacy = read_side(zk, Rebalancer.ZK, group)
    return legacy, read_side(zk, Rebalancer.COORDINATOR, group)


def _lag(src: Side, dst: Side) -> dict[TopicPartition, tuple[int, int | None]]:
    legacy, coord = src.values(), dst.values()
    return {tp: (off, coord.get(tp)) for tp, off in legacy.items() if coord.get(tp) != off}


def plan(
    zk: KazooClient,
    group: str,
    legacy_assignor: str = "range",
    dest: str | Rebalancer = Rebalancer.COORDINATOR,
) -> dict:
    """What a live `run` would do and the checks it makes; writes nothing."""
    dest = check_args(Rebalancer.ZK, dest, legacy_assignor)
    if not zk_store.exists(zk, group):
        raise UnknownGroup(f"group {group!r} does not exist under scheme zk; check the name (and --zk)")
    rec, _ = read_record(zk, group)
    resuming = rec is not None and rec.state not in R.TERMINAL
    src, dst = offsets(zk, Rebalancer.ZK, group), offsets(zk, Rebalancer.COORDINATOR, group)
    legacy_ids, bridged_ids = bridge.registered(zk, group)
    _, lead = coordinator_store.leader(zk, group)
    coord_members = [] if resuming else _coordinator_members(zk, group, lead)
    holder = lock_holder(zk, group)
    try:
        check_kind(zk, group, dest, "destination")
        kind_error = ""
    except GroupshiftError as exc:
        kind_error = str(exc)
    checks = [
        ("destination is not a group of the other coordinator scheme", not kind_error, kind_error),
        ("a coordinator node leads the group's shard", lead is not None, lead.address if lead else ""),
        ("destination has no live members", resuming or not coord_members, ", ".join(coord_members[:10])),
        (
            "destination has no offsets of its own",
            resuming or not dst,
            f"{len(dst)} partitions (`offsets delete` them first)" if dst and not resuming else "",
        ),
        ("no other migration running", holder is None, _holder_text(holder) if holder else ""),
        (
            "no unfinished migration with other arguments",
            R.conflict(rec, Rebalancer.ZK.value, dest.value, "live") is None,
            "",
        ),
        (f"at most {R.MAX_PARTITIONS} partitions", len(src) <= R.MAX_PARTITIONS, str(len(src))),
    ]
    steps = R.LIVE_ORDER if not resuming else R.LIVE_ORDER[R.LIVE_ORDER.index(rec.state) + 1 :]
    return {
        "group": group,
        "from": Rebalancer.ZK.value,
        "to": dest.value,
        "mode": "live",
        "legacy_assignor": legacy_assignor,
        "partitions": len(src),
        "to_copy": len(src),
        "members": legacy_ids,
        "bridged_members": bridged_ids,
        "record": rec.state if rec else None,
        "steps": list(steps),
        "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in checks],
        "offsets": report.offset_rows(src, dst),
    }


def _coordinator_members(zk: KazooClient, group: str, lead: coordinator_store.Leader | None) -> list[str]:
    if lead is None:
        return []
    described = coordinator_store.describe_live(lead, group)  # CoordinatorDown: one line, nothing written
    if described["group_state"] in coordinator_store.IDLE_STATES:
        return []
    return sorted(f"{m['client_id']} ({m['member_id']})" for m in described["members"])


def run(
    zk: KazooClient,
    group: str,
    *,
    legacy_assignor: str = "range",
    wait_s: float = 0.0,
    settle_s: float = SETTLE_S,
    dest: str | Rebalancer = Rebalancer.COORDINATOR,
    say=lambda line: None,
    progress=None,
) -> R.Migration:
    """Bridge the group, or carry a bridged one on as far as it can go now (see the module docstring).

    Returns the record: `bridged` while legacy members remain after `wait_s` seconds, else `done`.
    """
    dest = check_args(Rebalancer.ZK, dest, legacy_assignor)
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise GroupshiftError(f"--wait must be between 0 and {MAX_WAIT_S:g} seconds, not {wait_s:g}")
    seen = look(zk, group, Rebalancer.ZK, dest)
    rec = seen.record
    why = R.conflict(rec, Rebalancer.ZK.value, dest.value, "live")
    if why:
        raise MigrationBusy(why)
    if rec is not None and rec.mode == "live" and rec.state == R.DONE and not _lag(seen.src, seen.dst):
        say(f"migrate {group}: already done (live) from zk to {dest.value}; nothing to do")
        return rec
    resuming = rec is not None and rec.state not in R.TERMINAL
    holder = seen.holder
    if holder is not None and not _dead_here(holder):
        raise MigrationBusy(
            f"a migration of group {group!r} is already running ({_holder_text(holder)}); "
            "wait for it to finish"
        )
    st = _Run(zk, group, say)
    if resuming:
        st.lock()
        try:
            st.rec, st.version = read_record(zk, group)
            if st.rec is None or st.rec.state in R.TERMINAL:
                raise MigrationBusy(f"the migration of {group!r} finished meanwhile; see `migrate status`")
            say(f"migrate {group}: resuming the live migration from {st.rec.state}")
            return _advance(st, wait_s, settle_s, progress)
        finally:
            st.unlock()
    _check_start(zk, group, dest, seen)
    st.rec, st.version = rec, seen.version
    planned = R.new(
        group,
        Rebalancer.ZK.value,
        dest.value,
        "live",
        _now(),
        seen.dst.values(),
        seen.dst.exists,
        False,
        legacy_assignor,
    )
    try:
        # planned and bridged in one write with the lock: the legacy offsets just read are the snapshot
        st.will_take(holder, seen.missing)
        st.write(R.advance(planned, R.BRIDGED, _now(), snapshot=R.as_rows(seen.src.values())))
        return _advance(st, wait_s, settle_s, progress)
    finally:
        st.unlock()


def _check_start(zk: KazooClient, group: str, dest: Rebalancer, seen: Look) -> None:
    if not seen.src.exists:
        raise UnknownGroup(f"group {group!r} does not exist under scheme zk; check the name (and --zk)")
    why = kind_refusal(group, dest, kind_of(seen.dst.stored), "destination")
    if why:
        raise GroupshiftError(why)
    lead = seen.dst.leader
    if lead is None:
        raise GroupshiftError(
            f"no coordinator node leads group {group!r}; start one (`groupshift coordinator serve`) before a "
            f"live migration: the {dest.value} consumers need it"
        )
    names = _coordinator_members(zk, group, lead)
    if names:
        raise writes.GroupActive(
            f"group {group!r} already has {len(names)} {dest.value} member(s) "
            f"({', '.join(names[:10])}) that are not bridged; stop them before a live migration"
        )
    dst = seen.dst.values()
    if dst:
        raise GroupshiftError(
            f"group {group!r} already has {len(dst)} committed offset(s) under {dest.value}; a live "
            "migration starts from none (delete them with `groupshift offsets delete`, or migrate "
            "--mode offline --overwrite)"
        )
    R.check_bound(len(seen.src.offsets), f"group {group!r} under zk")


def _advance(st: _Run, wait_s: float, settle_s: float, progress) -> R.Migration:
    zk, g = st.zk, st.group
    if st.rec.state == R.PLANNED:
        snap = offsets(zk, Rebalancer.ZK, g)
        R.check_bound(len(snap), f"group {g!r} under zk")
        st.write(R.advance(st.rec, R.BRIDGED, _now(), snapshot=R.as_rows(snap)))
    if st.rec.state == R.BRIDGED:
        remaining = _wait_for_legacy(st, wait_s)
        if remaining:
            shown = ", ".join(remaining[:5]) + (" ..." if len(remaining) > 5 else "")
            st.say(
                f"migrate {g}: bridged; {len(remaining)} legacy consumer(s) remain ({shown}): replace "
                f"them with {st.rec.dest} consumers, then run `migrate run {g} --from zk --to {st.rec.dest} "
                "--mode live` again"
            )
            return st.rec
        _settle(st, settle_s, progress)
        st.write(R.advance(st.rec, R.COPIED, _now()))
    if st.rec.state == R.COPIED:
        _settle(st, settle_s, progress)
        st.write(R.advance(st.rec, R.VERIFIED, _now()))
    if st.rec.state == R.VERIFIED:
        remaining, _ = bridge.registered(zk, g)
        if remaining:
            raise GroupshiftError(
                f"legacy consumer(s) joined group {g!r} again ({', '.join(remaining[:5])}); stop them, "
                "then run again (or roll back)"
            )
        _settle(st, settle_s, progress)
        st.write(R.advance(st.rec, R.SWITCHED, _now()))
    if st.rec.state == R.SWITCHED:
        st.write(R.advance(st.rec, R.DONE, _now()))
    return st.rec


def _wait_for_legacy(st: _Run, wait_s: float) -> list[str]:
    deadline = time.monotonic() + wait_s
    shown = None
    while True:
        remaining, bridged = bridge.registered(st.zk, st.group)
        if not remaining or time.monotonic() >= deadline:
            return remaining
        if shown != (len(remaining), len(bridged)):
            shown = (len(remaining), len(bridged))
            st.say(f"migrate {st.group}: waiting: {len(remaining)} legacy, {len(bridged)} bridged member(s)")
        time.sleep(POLL_S)


def _settle(st: _Run, settle_s: float, progress) -> None:
    """Wait until every legacy offset is also the coordinator's: the members' dual commits carry
    them over; while the coordinator group has no member at all, the engine copies them itself
    (through the node, which refuses such a commit once a member joined)."""
    deadline = time.monotonic() + settle_s
    while True:
        src, dst = _legacy_then_coordinator(st.zk, st.group)
        lag, total = _lag(src, dst), len(src.offsets)
        if progress is not None and total:
            progress(total - len(lag), total)
        if not lag:
            return
        if not _coordinator_members(st.zk, st.group, dst.leader):
            todo = {tp: legacy_off for tp, (legacy_off, _) in lag.items()}
            checkpoint("before:copy")
            try:
                how = writes.commit(
                    st.zk, Rebalancer.COORDINATOR, st.group, todo, progress=_copy_step(progress)
                )
            except writes.GroupActive:
                continue  # a coordinator consumer joined meanwhile: it carries them over
            st.say(f"migrate {st.group}: copied {len(todo)} offsets no member carried {how}")
            continue
        if time.monotonic() >= deadline:
            tp = min(lag)
            legacy_off, coord_off = lag[tp]
            raise GroupshiftError(
                f"{len(lag)} partition(s) of {st.group!r} have a coordinator offset that is not the "
                f"legacy one after {settle_s:g}s ({tp.topic}-{tp.partition}: legacy {legacy_off}, "
                f"coordinator {coord_off}); "
                "the coordinator consumers carry offsets over when they claim partitions - check that they "
                "run and subscribe to every topic, then run again"
            )
        time.sleep(POLL_S)


def _copy_step(progress):
    n = [0]

    def step(done: int, total: int) -> None:
        n[0] += 1
        if progress is not None:
            progress(done, total)
        checkpoint(f"copy:{n[0]}")

    return step
