"""The offline migration engine: move a stopped group's offsets between scheme one and the coordinator's
schemes (two: `server`, three: `coordinator`; `migrate.migration.sides` says which group is which).

    run(zk, "billing", "zk", "coordinator")   # planned -> frozen -> copied -> verified -> switched -> done
    rollback(zk, "billing")                   # destination back to what it was; record rolled_back

Every check happens before anything is written (a refused command changes nothing). A run
holds an ephemeral lock `/groupshift/migration-locks/<g>` (a second run is refused; a lock left
by a dead process on this host is taken over); every transition of the record is one `multi`
checking the lock and the record's version. Offsets are read and written with the inspect
tools' readers and writers (`migrate.schemes`: `zk_store`, `coordinator_store`, `writes`).

Test hooks: `GROUPSHIFT_MIGRATE_EXIT_AT=k` makes the process exit (code 99) at the k-th
checkpoint it reaches (or at the checkpoint named k), to test that a killed migration resumes
or rolls back; `GROUPSHIFT_MIGRATE_STOP_AT=k` stops it there (SIGSTOP) until it gets SIGCONT, to
change the world under a run (stop ZooKeeper mid-copy).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from collections import deque

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from coordinator.layout import (
    MIGRATION_LOCKS,
    MIGRATIONS,
    ROOT,
    migration_lock_path,
    migration_path,
)
from core.errors import GroupshiftError, UnknownGroup
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.migration import bridge
from migrate.migration import record as R
from migrate.migration.sides import (
    check_args,
    check_idle,
    check_kind,
    exists,
    live_members,
    offsets,
    parse,
)
from migrate.schemes import writes, zkio

EXIT_CODE = 99
_reached = 0  # checkpoints this process passed (the k of GROUPSHIFT_MIGRATE_EXIT_AT=k)
# Their names, the newest last (tests choose kill points by name: clear it, run, read it).
passed: deque[str] = deque(maxlen=1_000)


class MigrationBusy(GroupshiftError):
    """Another migration of the group holds the lock, or an unfinished one has other arguments."""


def checkpoint(name: str) -> None:
    """A step boundary: the test hook may end the process here, as a kill would."""
    global _reached
    _reached += 1
    passed.append(name)
    at = os.environ.get("GROUPSHIFT_MIGRATE_EXIT_AT")
    if at and (at == name or at == str(_reached)):
        sys.stderr.write(f"test hook: exiting at checkpoint {_reached} ({name})\n")
        sys.stderr.flush()
        os._exit(EXIT_CODE)
    at = os.environ.get("GROUPSHIFT_MIGRATE_STOP_AT")
    if at and (at == name or at == str(_reached)):
        sys.stderr.write(f"test hook: stopped at checkpoint {_reached} ({name})\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSTOP)


# -- reads ---------------------------------------------------------------------------------------


def read_record(zk: KazooClient, group: str) -> tuple[R.Migration | None, int]:
    got = zkio.get_many(zk, [migration_path(group)])[0]
    if got is None:
        return None, -1
    return R.decode(got[0], migration_path(group)), got[1].version


def lock_holder(zk: KazooClient, group: str) -> dict | None:
    got = zkio.get_many(zk, [migration_lock_path(group)])[0]
    if got is None:
        return None
    try:
        holder = json.loads(got[0])
    except ValueError:
        holder = {}
    holder["version"] = got[1].version
    return holder


# -- plan ------------------------------------------------------------------------------------------


def plan(
    zk: KazooClient, group: str, source: str | Rebalancer, dest: str | Rebalancer, mode: str = "offline"
) -> dict:
    """What `run` would do, and the checks it would make; writes nothing."""
    source, dest = check_args(source, dest, mode)
    if not exists(zk, source, group):
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
        )
    src, dst = offsets(zk, source, group), offsets(zk, dest, group)
    rec, _ = read_record(zk, group)
    members = {s: live_members(zk, s, group) for s in (source, dest)}
    holder = lock_holder(zk, group)
    resuming = rec is not None and rec.state not in R.TERMINAL
    checks = [
        *_kind_checks(zk, group, source, dest),
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
    rows = [
        {"topic": tp.topic, "partition": tp.partition, "source": src[tp], "destination": dst.get(tp)}
        for tp in sorted(src)
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
        "offsets": rows,
    }


def _kind_checks(zk: KazooClient, group: str, source: Rebalancer, dest: Rebalancer) -> list[tuple]:
    """`plan`'s rows for `check_kind` (scheme two's and three's groups share the coordinator's store)."""
    rows = []
    for scheme, side in ((source, "source"), (dest, "destination")):
        if scheme is Rebalancer.ZK:
            continue
        try:
            check_kind(zk, group, scheme, side)
        except GroupshiftError as exc:
            rows.append((f"{side} is not a group of the other coordinator scheme", False, str(exc)))
        else:
            rows.append((f"{side} is not a group of the other coordinator scheme", True, ""))
    return rows


def _holder_text(h: dict) -> str:
    return f"pid {h.get('pid')} on {h.get('host')}"


# -- run -------------------------------------------------------------------------------------------


class _Run:
    """One process's hold on a group's migration: the lock, the record and its version."""

    def __init__(self, zk: KazooClient, group: str, say):
        self.zk, self.group, self.say = zk, group, say
        self.rec: R.Migration | None = None
        self.version = -1

    def lock(self) -> None:
        data = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since_ms": _now()}).encode()
        zkio.ensure_shared(self.zk, [ROOT, MIGRATIONS, MIGRATION_LOCKS])
        for attempt in range(3):
            try:
                self.zk.create(migration_lock_path(self.group), data, ephemeral=True)
            except NodeExistsError:
                holder = lock_holder(self.zk, self.group)
                if holder is None:
                    continue  # released in between
                if attempt == 0 and _dead_here(holder):
                    _clear_dead_lock(self.zk, self.group)
                    continue
                raise MigrationBusy(
                    f"a migration of group {self.group!r} is already running ({_holder_text(holder)}); "
                    "wait for it to finish"
                ) from None
            checkpoint("locked")
            return
        raise MigrationBusy(f"the migration lock of {self.group!r} could not be taken; run again")

    def unlock(self) -> None:
        try:
            self.zk.delete(migration_lock_path(self.group))
        except NoNodeError:
            pass

    def write(self, new: R.Migration) -> None:
        """One transition: one multi, guarded by the lock and the record's version."""
        path = migration_path(self.group)
        checkpoint(f"before:{new.state}")
        txn = self.zk.transaction()
        txn.check(migration_lock_path(self.group), version=0)
        if self.version < 0:
            txn.create(path, R.encode(new))
        else:
            txn.set_data(path, R.encode(new), version=self.version)
        results = _commit(txn)
        if any(isinstance(r, Exception) for r in results):
            raise MigrationBusy(
                f"the migration record of {self.group!r} changed under this run ({results!r}); "
                "check `migrate status` and run again"
            )
        self.rec, self.version = new, self.version + 1
        self.say(f"migrate {self.group}: {new.state}")
        checkpoint(new.state)


def run(
    zk: KazooClient,
    group: str,
    source: str | Rebalancer,
    dest: str | Rebalancer,
    *,
    mode: str = "offline",
    overwrite: bool = False,
    batch: int = writes.BATCH,
    say=lambda line: None,
    progress=None,
) -> R.Migration:
    """Start or resume the migration; returns the record in state done (live mode: `live.run`)."""
    source, dest = check_args(source, dest, mode)
    if mode != "offline":
        raise GroupshiftError(
            "migrate.migration.offline.run migrates offline; --mode live is migrate.migration.live.run"
        )
    rec, version = read_record(zk, group)
    why = R.conflict(rec, source.value, dest.value, mode)
    if why:
        raise MigrationBusy(why)
    if _already_done(zk, rec, source, dest) and not overwrite:
        _clear_dead_lock(zk, group)
        say(f"migrate {group}: already done from {source.value} to {dest.value}; nothing to do")
        return rec
    resuming = rec is not None and rec.state not in R.TERMINAL
    holder = lock_holder(zk, group)
    if holder is not None and not _dead_here(holder):
        raise MigrationBusy(
            f"a migration of group {group!r} is already running ({_holder_text(holder)}); "
            "wait for it to finish"
        )
    if not resuming:
        if not exists(zk, source, group):
            raise UnknownGroup(
                f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
            )
        check_kind(zk, group, source, "source")
        check_kind(zk, group, dest, "destination")
    check_idle(zk, group, source, dest)
    if not resuming:
        src, dst = offsets(zk, source, group), offsets(zk, dest, group)
        if not src:
            raise GroupshiftError(
                f"group {group!r} has no committed offsets under {source.value}; nothing to migrate"
            )
        R.check_bound(len(src), f"group {group!r} under {source.value}")
        if dst and not overwrite:
            raise GroupshiftError(
                f"group {group!r} already has {len(dst)} committed offset(s) under {dest.value}; "
                "pass --overwrite to replace them (a rollback restores them)"
            )
    state = _Run(zk, group, say)
    state.lock()
    try:
        if resuming:
            state.rec, state.version = read_record(zk, group)  # re-read under the lock
            if state.rec is None or state.rec.state in R.TERMINAL:
                raise MigrationBusy(f"the migration of {group!r} finished meanwhile; see `migrate status`")
            say(f"migrate {group}: resuming from {state.rec.state}")
            return _advance(state, batch, progress)
        state.version = version
        state.rec = rec
        new = R.new(group, source.value, dest.value, mode, _now(), dst, exists(zk, dest, group), overwrite)
        if rec is None:
            state.version = -1
        state.write(new)
        # The offsets read by the checks above serve as the snapshot and the copy's baseline: a
        # consumer that committed since is caught before the switch (the source is read again
        # and must equal the snapshot), and the copy is verified by reading the destination back.
        return _advance(state, batch, progress, read=(src, dst))
    finally:
        state.unlock()


def _already_done(zk: KazooClient, rec: R.Migration | None, source: Rebalancer, dest: Rebalancer) -> bool:
    """The same migration finished (maybe by a run killed right after its last transition) and
    the destination still holds exactly what it copied: running it again changes nothing."""
    if rec is None or rec.state != R.DONE or (rec.source, rec.dest) != (source.value, dest.value):
        return False
    return not R.diff(R.as_offsets(rec.snapshot), offsets(zk, dest, rec.group))


def _clear_dead_lock(zk: KazooClient, group: str) -> None:
    """Remove the lock of a killed run on this host (its session has not expired yet)."""
    holder = lock_holder(zk, group)
    if holder is not None and _dead_here(holder):
        try:
            zk.delete(migration_lock_path(group), version=holder["version"])
        except (NoNodeError, BadVersionError):
            pass


def _advance(st: _Run, batch: int, progress, read: tuple[dict, dict] | None = None) -> R.Migration:
    """Carry the migration on from its recorded state; `read`: the (source, destination) offsets
    this run read a moment ago, before planning (a fresh run), so it need not read them again."""
    zk, g = st.zk, st.group
    m = st.rec
    assert m is not None
    fresh = False  # the snapshot was read by this run a moment ago
    dest_now = None
    if m.state == R.PLANNED:
        if read is None:  # a fresh run checked a moment ago; the check before the switch follows
            check_idle(zk, g, m.source, m.dest)
        checkpoint("before:snapshot")
        snap = read[0] if read is not None else offsets(zk, m.source, g)
        R.check_bound(len(snap), f"group {g!r} under {m.source}")
        st.write(R.advance(m, R.FROZEN, _now(), snapshot=R.as_rows(snap)))
        fresh = True
        dest_now = read[1] if read is not None else None
    while st.rec.state in (R.FROZEN, R.COPIED):
        m = st.rec
        want = R.as_offsets(m.snapshot)
        if not fresh:  # resumed: a consumer may have committed since the snapshot
            _check_source(zk, m, want)
        if m.state == R.FROZEN or R.diff(want, offsets(zk, m.dest, g)):
            _copy(zk, m, want, batch, progress, st.say, dest_now)
            dest_now = None
        if m.state == R.FROZEN:
            st.write(R.advance(m, R.COPIED, _now()))
        have = offsets(zk, m.dest, g)
        bad = R.diff(want, have)
        if bad:
            tp = bad[0]
            raise GroupshiftError(
                f"{len(bad)} partition(s) differ after the copy ({tp.topic}-{tp.partition}: "
                f"source {want[tp]}, "
                f"destination {have.get(tp)}); run again to copy them again, or roll back"
            )
        st.write(R.advance(st.rec, R.VERIFIED, _now()))
    if st.rec.state == R.VERIFIED:
        m = st.rec
        check_idle(zk, g, m.source, m.dest)
        _check_source(zk, m, R.as_offsets(m.snapshot))
        st.write(R.advance(m, R.SWITCHED, _now()))
    if st.rec.state == R.SWITCHED:
        st.write(R.advance(st.rec, R.DONE, _now()))
    return st.rec


def _check_source(zk: KazooClient, m: R.Migration, want: dict[TopicPartition, int]) -> None:
    now = offsets(zk, m.source, m.group)
    if now != want:
        moved = [tp for tp in sorted(set(now) | set(want)) if now.get(tp) != want.get(tp)]
        tp = moved[0]
        raise GroupshiftError(
            f"the source group {m.group!r} ({m.source}) changed since it was frozen: "
            f"{len(moved)} partition(s) "
            f"differ ({tp.topic}-{tp.partition}: {want.get(tp)} -> {now.get(tp)}); a consumer committed "
            "meanwhile; stop it and roll back (`migrate rollback`), then migrate again"
        )


def _copy(zk, m: R.Migration, want, batch: int, progress, say, dest_now=None) -> None:
    have = offsets(zk, m.dest, m.group) if dest_now is None else dest_now
    todo = {tp: want[tp] for tp in R.diff(want, have)}
    checkpoint("before:copy")
    if not todo:
        return
    n = [0]
    started = time.monotonic()

    def step(done: int, total: int) -> None:
        n[0] += 1
        if progress is not None:
            progress(done, total)
        checkpoint(f"copy:{n[0]}")

    how = writes.commit(zk, m.dest, m.group, todo, progress=step, batch=batch)
    secs = max(time.monotonic() - started, 1e-6)
    say(f"migrate {m.group}: copied {len(todo)} offsets {how} ({len(todo) / secs:,.0f} partitions/s)")


# -- rollback ------------------------------------------------------------------------------------


def rollback(
    zk: KazooClient, group: str, *, batch: int = writes.BATCH, say=lambda line: None, progress=None
) -> R.Migration:
    """Put the destination back as it was before the migration; the record becomes rolled_back."""
    rec, version = read_record(zk, group)
    if rec is None:
        raise GroupshiftError(f"no migration of group {group!r} is recorded; nothing to roll back")
    if rec.state == R.DONE:
        raise GroupshiftError(
            f"the migration of {group!r} from {rec.source} to {rec.dest} is done; migrate it back with "
            f"`migrate run {group} --from {rec.dest} --to {rec.source}`"
        )
    if rec.state == R.ROLLED_BACK:
        raise GroupshiftError(f"the migration of {group!r} is already rolled back")
    holder = lock_holder(zk, group)
    if holder is not None and not _dead_here(holder):
        raise MigrationBusy(
            f"a migration of group {group!r} is running ({_holder_text(holder)}); "
            "wait for it before rolling back"
        )
    if rec.mode == "live":
        # The legacy consumers may go on: the bridged members committed to their offsets too.
        names = live_members(zk, rec.dest, group)
        if names:
            raise writes.GroupActive(
                f"group {group!r} has {len(names)} coordinator member(s) of the live migration: "
                f"{', '.join(names[:10])}; stop them (legacy consumers may keep running) before rolling back"
            )
    else:
        check_idle(zk, group, rec.source, rec.dest)
    st = _Run(zk, group, say)
    st.lock()
    try:
        st.rec, st.version = read_record(zk, group)
        m = st.rec
        if m is None or m.state in R.TERMINAL:
            raise MigrationBusy(f"the migration of {group!r} finished meanwhile; see `migrate status`")
        _restore(zk, m, batch, progress, say)
        st.write(R.advance(m, R.ROLLED_BACK, _now()))
        return st.rec
    finally:
        st.unlock()


def _restore(zk: KazooClient, m: R.Migration, batch: int, progress, say) -> None:
    g, dest = m.group, m.dest
    if not m.dest_existed:
        if exists(zk, dest, g):
            checkpoint("before:restore")
            how = writes.delete_group(zk, dest, g)
            say(f"migrate {g}: deleted the destination group it created ({dest}): {how}")
        return
    prior = R.as_offsets(m.prior)
    have = offsets(zk, dest, g)
    back = {tp: prior[tp] for tp in R.diff(prior, have)}
    extra = [tp for tp in R.as_offsets(m.snapshot) if tp in have and tp not in prior]
    checkpoint("before:restore")
    if back:
        how = writes.commit(zk, dest, g, back, progress=progress, batch=batch)
        say(f"migrate {g}: restored {len(back)} destination offsets {how}")
    checkpoint("restored")
    if extra:
        how = writes.delete_partitions(zk, dest, g, extra)
        say(f"migrate {g}: removed {len(extra)} copied offsets: {how}")


# -- verify, status ----------------------------------------------------------------------------------


def verify(zk: KazooClient, group: str, source: str | Rebalancer, dest: str | Rebalancer) -> dict:
    """Compare the destination with the source now (and with the frozen snapshot, when recorded)."""
    source, dest = parse(source), parse(dest)
    if not exists(zk, source, group):
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
        )
    src, dst = offsets(zk, source, group), offsets(zk, dest, group)
    rec, _ = read_record(zk, group)
    ours = rec is not None and (rec.source, rec.dest) == (source.value, dest.value)
    return R.verify_report(group, source.value, dest.value, src, dst, rec, ours)


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


# -- helpers -----------------------------------------------------------------------------------------


def _now() -> int:
    return int(time.time() * 1000)


def _commit(txn) -> list:
    zkio.requests["multi"] += 1
    try:
        return txn.commit()
    except NodeExistsError as exc:
        return [exc]
    except Exception as exc:  # connection loss, timeouts: nothing of the transaction was applied
        raise GroupshiftError(
            f"ZooKeeper refused the write ({exc!r}); nothing was written, run again"
        ) from None


def _dead_here(holder: dict) -> bool:
    """A lock taken by a process of this host that no longer exists (killed before its session expired)."""
    if holder.get("host") != socket.gethostname() or not isinstance(holder.get("pid"), int):
        return False
    try:
        os.kill(holder["pid"], 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False
