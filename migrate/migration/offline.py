"""The offline migration engine: move a stopped group's offsets between scheme one and the coordinator's
schemes (two: `server`, three: `coordinator`; `migrate.migration.sides` says which group is which).

    run(zk, "billing", "zk", "coordinator")   # planned -> frozen -> copied -> verified -> switched -> done
    rollback(zk, "billing")                   # destination back to what it was; record rolled_back

Every check happens before anything is written (a refused command changes nothing). A run
holds an ephemeral lock `/groupshift/migration-locks/<g>` (a second run is refused; a lock left
by a dead process on this host is taken over); every write of the record is one `multi`
checking the lock and the record's version. Offsets are read and written with the inspect
tools' readers and writers (`migrate.schemes`: `zk_store`, `coordinator_store`, `writes`).

A fresh run reads each offset twice and writes it once: `look` reads the record, the lock and
both sides together (the source's offsets with their mzxids are the snapshot); the lock and the
record (planned, frozen) are one `multi`; the copy's last transaction carries the record
(copied, and verified when it wrote every partition: `proof`); before the switch `look.recheck`
reads the source again beside both sides' members; switched and done are one `multi` with the
lock's release.

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

from coordinator.layout import migration_lock_path, migration_path
from core.errors import GroupshiftError, UnknownGroup
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.migration import proof
from migrate.migration import record as R
from migrate.migration.look import SHARED, Look, lock_holder, look, read_record, recheck
from migrate.migration.look import sides as read_sides
from migrate.migration.sides import (
    Side,
    check_args,
    check_idle,
    check_sides_idle,
    exists,
    kind_of,
    kind_refusal,
    live_members,
    offsets,
    parse,
    side_reader,
)
from migrate.schemes import writes, zk_store, zkio
from migrate.schemes.subtree import Subtree

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


def _holder_text(h: dict) -> str:
    return f"pid {h.get('pid')} on {h.get('host')}"


# -- run -------------------------------------------------------------------------------------------


class _Run:
    """One process's hold on a group's migration: the lock, the record and its version.

    A resumed run takes the lock on its own (`lock`); a fresh one takes it with the record's
    first write (`will_take`): on its own (`write`), or riding with the copy (`write_ops`)."""

    def __init__(self, zk: KazooClient, group: str, say):
        self.zk, self.group, self.say = zk, group, say
        self.rec: R.Migration | None = None
        self.version = -1
        self.locked = False
        self.taking: tuple[dict | None] | None = None  # (a dead run's lock to delete) until taken

    def _lock_data(self) -> bytes:
        return json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since_ms": _now()}).encode()

    def lock(self) -> None:
        zkio.ensure_shared(self.zk, SHARED)
        for attempt in range(3):
            try:
                self.zk.create(migration_lock_path(self.group), self._lock_data(), ephemeral=True)
            except NodeExistsError:
                holder = lock_holder(self.zk, self.group)
                if holder is None:
                    continue  # released in between
                if attempt == 0 and _dead_here(holder):
                    _clear_dead_lock(self.zk, self.group)
                    continue
                raise _busy(self.group, holder) from None
            self.locked = True
            checkpoint("locked")
            return
        raise MigrationBusy(f"the migration lock of {self.group!r} could not be taken; run again")

    def will_take(self, holder: dict | None, missing: list[str]) -> None:
        """The next write of the record takes the lock (`holder`: a lock a dead process on this
        host left, deleted in it); `missing`: the shared containers, created now."""
        for path in missing:
            try:
                self.zk.create(path, b"")
            except NodeExistsError:
                pass
        self.taking = (holder,)

    def unlock(self) -> None:
        if not self.locked:
            return
        try:
            self.zk.delete(migration_lock_path(self.group))
        except NoNodeError:
            pass
        self.locked = False

    def write_ops(self, new: R.Migration, *, taken: bool = False) -> list[tuple]:
        """`zk_store.run_ops` ops writing `new`: guarded by the lock and the record's version, or,
        while this run has not taken the lock yet, taking it. `taken`: as the write after the one
        that takes it (a copy's last transaction when its first took the lock)."""
        lock, path, data = migration_lock_path(self.group), migration_path(self.group), R.encode(new)
        version = self.version + 1 if taken else self.version
        record = ("create", path, data) if version < 0 else ("set", path, data, version)
        if self.taking is None or taken:
            return [("check", lock, 0), record]
        holder = self.taking[0]
        dead = [("delete", lock, holder["version"])] if holder is not None else []
        return [*dead, ("ephemeral", lock, self._lock_data()), record]

    def write(self, new: R.Migration, *, release: bool = False) -> None:
        """One write of the record: one multi (`write_ops`); with `release`, the lock is deleted
        in it (the run's last write)."""
        checkpoint(f"before:{new.state}")
        ops = self.write_ops(new) + ([("delete", migration_lock_path(self.group), 0)] if release else [])
        results = _commit(zk_store.transaction(self.zk, ops))
        if any(isinstance(r, Exception) for r in results):
            raise self.refused(results)
        self.wrote(new)
        self.locked = self.locked and not release

    def refused(self, why) -> GroupshiftError:
        """The error for a write of the record that ZooKeeper refused (`why`: its results, or the
        error of a copy transaction that carried the record): another run took the lock meanwhile,
        or the record changed under this run."""
        if self.taking is not None:
            try:
                holder = lock_holder(self.zk, self.group)
            except GroupshiftError:
                holder = None
            if holder is not None and not _dead_here(holder):
                return _busy(self.group, holder)
        if isinstance(why, GroupshiftError):
            return why
        return MigrationBusy(
            f"the migration record of {self.group!r} changed under this run ({why!r}); "
            "check `migrate status` and run again"
        )

    def wrote(self, new: R.Migration, copy_line: str | None = None) -> None:
        """`new` is stored (one write may carry several transitions: each is said, and
        `copy_line`, the copy's summary, before `copied`)."""
        if self.taking is not None:
            self.taking, self.locked = None, True
        fresh = self.rec is None or self.rec.state in R.TERMINAL  # a new migration replaces the record
        states = [s for s, _ in new.history[0 if fresh else len(self.rec.history) :] or new.history[-1:]]
        for state in states:
            if copy_line and (state == R.COPIED or R.COPIED not in states):
                self.say(copy_line)
                copy_line = None
            self.say(f"migrate {self.group}: {state}")
        self.rec, self.version = new, self.version + 1
        checkpoint(new.state)


def _busy(group: str, holder: dict) -> MigrationBusy:
    return MigrationBusy(
        f"a migration of group {group!r} is already running ({_holder_text(holder)}); wait for it to finish"
    )


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
    seen = look(zk, group, source, dest, watch=True)  # the watch spares the source's second read
    try:
        return _run(zk, seen, mode, overwrite, batch, say, progress)
    finally:
        if seen.src.watch is not None:
            seen.src.watch.close()


def _run(zk: KazooClient, seen: Look, mode: str, overwrite: bool, batch: int, say, progress) -> R.Migration:
    group, source, dest = seen.src.group, seen.src.scheme, seen.dst.scheme
    rec = seen.record
    why = R.conflict(rec, source.value, dest.value, mode)
    if why:
        raise MigrationBusy(why)
    if _already_done(rec, seen.dst, source, dest) and not overwrite:
        _clear_dead_lock(zk, group)
        say(f"migrate {group}: already done from {source.value} to {dest.value}; nothing to do")
        return rec
    resuming = rec is not None and rec.state not in R.TERMINAL
    if seen.holder is not None and not _dead_here(seen.holder):
        raise _busy(group, seen.holder)
    if not resuming:
        if not seen.src.exists:
            raise UnknownGroup(
                f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
            )
        for side, name in ((seen.src, "source"), (seen.dst, "destination")):
            why = kind_refusal(group, side.scheme, kind_of(side.stored), name)
            if why:
                raise GroupshiftError(why)
    check_sides_idle(seen.src, seen.dst)
    st = _Run(zk, group, say)
    if resuming:
        st.lock()
        try:
            st.rec, st.version = read_record(zk, group)  # re-read under the lock
            if st.rec is None or st.rec.state in R.TERMINAL:
                raise MigrationBusy(f"the migration of {group!r} finished meanwhile; see `migrate status`")
            say(f"migrate {group}: resuming from {st.rec.state}")
            return _advance(st, batch, progress, watch=seen.src.watch)
        finally:
            st.unlock()
    src, dst = seen.src.values(), seen.dst.values()
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
    # The offsets `look` read are the snapshot and the copy's baseline; their mzxids are what the
    # source must still show before the switch. Planned and frozen are one write, which takes the
    # lock (with the copy's first transaction when that is written in ZooKeeper).
    planned = R.new(group, source.value, dest.value, mode, _now(), dst, seen.dst.exists, overwrite)
    st.rec, st.version = rec, seen.version
    st.will_take(seen.holder, seen.missing)
    try:
        frozen = R.advance(planned, R.FROZEN, _now(), snapshot=R.as_rows(src))
        return _advance(st, batch, progress, seen.src, seen.dst, frozen, seen.src.watch)
    finally:
        st.unlock()


def _already_done(rec: R.Migration | None, dst: Side, source: Rebalancer, dest: Rebalancer) -> bool:
    """The same migration finished (maybe by a run killed right after its last transition) and
    the destination still holds exactly what it copied: running it again changes nothing."""
    if rec is None or rec.state != R.DONE or (rec.source, rec.dest) != (source.value, dest.value):
        return False
    return not R.diff(R.as_offsets(rec.snapshot), dst.values())


def _clear_dead_lock(zk: KazooClient, group: str) -> None:
    """Remove the lock of a killed run on this host (its session has not expired yet)."""
    holder = lock_holder(zk, group)
    if holder is not None and _dead_here(holder):
        try:
            zk.delete(migration_lock_path(group), version=holder["version"])
        except (NoNodeError, BadVersionError):
            pass


# Above this size the record is written on its own, not with the copy's last transaction (a
# request must stay below ZooKeeper's 1 MB jute.maxbuffer; 1,000 offsets take about 150 KB).
FOLD_RECORD_BYTES = 256 * 1024


def _advance(
    st: _Run,
    batch: int,
    progress,
    src: Side | None = None,
    dst: Side | None = None,
    frozen: R.Migration | None = None,
    watch: Subtree | None = None,
) -> R.Migration:
    """Carry the migration on from its recorded state; `src`, `dst`: both sides as this run read
    them a moment ago, before freezing (a fresh run), else they are read now, under the lock;
    `frozen`: a fresh run's first record, not written yet (the write that takes the lock);
    `watch`: on the source's offsets, set before this run read them (`look.recheck`)."""
    zk, g = st.zk, st.group
    if frozen is None and st.rec.state == R.PLANNED:  # killed between planning and freezing (older versions)
        check_idle(zk, g, st.rec.source, st.rec.dest)
        checkpoint("before:snapshot")
        snap = offsets(zk, st.rec.source, g)
        R.check_bound(len(snap), f"group {g!r} under {st.rec.source}")
        st.write(R.advance(st.rec, R.FROZEN, _now(), snapshot=R.as_rows(snap)))
    m = frozen or st.rec
    want = src.values() if frozen is not None else R.as_offsets(m.snapshot)  # frozen: the snapshot of src
    if src is None or dst is None:  # resumed: a consumer may have committed since the snapshot
        src, dst = read_sides(zk, g, parse(m.source), parse(m.dest))
        _check_snapshot(m, src.values())
    pending: list[R.State] = []  # transitions proven, not written yet: they ride with the next write
    if m.state in (R.FROZEN, R.COPIED):
        pending = _copy(st, m, want, dst, batch, progress, lambda: switch_checks(st, src, dst, watch))
    if st.rec.state == R.VERIFIED or R.VERIFIED in pending:
        switch(st, src, dst, pending, watch)
    elif st.rec.state == R.SWITCHED:
        st.write(R.advance(st.rec, R.DONE, _now()), release=True)
    return st.rec


def switch(
    st: _Run, src: Side, dst: Side | None, pending: list[R.State], watch: Subtree | None = None
) -> None:
    """`switch_checks`, then `pending`, switched and done in one write that releases the lock."""
    switch_checks(st, src, dst, watch)
    st.write(_through(st.rec, [*pending, R.SWITCHED, R.DONE]), release=True)


def switch_checks(st: _Run, src: Side, dst: Side | None, watch: Subtree | None = None) -> None:
    """What the switch needs: both sides idle and the source as this run read it (`src`; one
    batched read with the destination's members, `dst`: None when it is not in ZooKeeper;
    `watch`: `look.recheck`)."""
    now_src, now_dst = recheck(st.zk, src, dst, watch)
    check_sides_idle(now_src, now_dst)
    if proof.rewritten(src.leaves, now_src.leaves):
        moved = proof.source_moved(src.group, src.scheme.value, src.offsets, now_src.decoded())
        if moved:  # else only znodes that hold no offset changed
            raise moved


def _through(m: R.Migration, states: list[R.State]) -> R.Migration:
    for state in states:
        m = R.advance(m, state, _now())
    return m


def _check_snapshot(m: R.Migration, now: dict[TopicPartition, int]) -> None:
    moved = proof.snapshot_moved(m.group, m.source, R.as_offsets(m.snapshot), now)
    if moved:
        raise moved


def _check_source(zk: KazooClient, m: R.Migration, want: dict[TopicPartition, int]) -> None:
    """The source's offsets now must be the snapshot `want` (a consumer committed meanwhile: refused)."""
    moved = proof.snapshot_moved(m.group, m.source, want, offsets(zk, m.source, m.group))
    if moved:
        raise moved


def _copy(
    st: _Run,
    m: R.Migration,
    want: dict[TopicPartition, int],
    dst: Side,
    batch: int,
    progress,
    checks=lambda: None,
) -> list[R.State]:
    """Write what the destination lacks; returns the transitions proven and not yet written.

    `m`: the record as it is (or as this run's first write, not done yet, will store it). Written
    in ZooKeeper, the copy carries the record: its last transaction moves it to `copied` (and
    `verified` when it wrote every partition), and its first takes the lock and stores the
    record when this run has not yet. Partitions the last transaction did not write are read
    back once (`proof.read_back`). A fresh run whose copy is one transaction makes the switch's
    `checks` first and switches with it: the lock is taken and released in it, the record goes
    from planned to done."""
    zk = st.zk
    todo = {tp: want[tp] for tp in R.diff(want, dst.values())}
    batch = max(1, min(batch, writes.BATCH))
    back = proof.read_back(want, todo, batch)
    known = dst.known()
    in_zk = bool(todo) and writes.in_zookeeper(m.dest, known)
    whole = st.taking is not None and in_zk and not back  # fresh, one transaction proving everything
    states = ([R.COPIED] if m.state == R.FROZEN else []) + ([] if back else [R.VERIFIED])
    new = _through(m, states + ([R.SWITCHED, R.DONE] if whole else []))
    fold = in_zk and bool(states) and len(R.encode(new)) <= FOLD_RECORD_BYTES
    if whole and fold:
        states.extend([R.SWITCHED, R.DONE])
    else:
        whole, new = False, _through(m, states)
    if st.taking is not None and not fold:
        st.write(m)  # the lock and the record's first write on their own
    checkpoint("before:copy")
    if todo:
        first, last = (), ()
        if whole:
            checks()  # the switch's, just before the transaction that switches
            last = [*st.write_ops(new), ("delete", migration_lock_path(st.group), 0)]
        elif fold and st.taking is not None and len(todo) > batch:
            first, last = st.write_ops(m), st.write_ops(new, taken=True)
        elif fold:
            last = st.write_ops(new)
        n = [0]
        started = time.monotonic()

        def step(done: int, total: int) -> None:
            n[0] += 1
            if n[0] == 1 and first:
                st.wrote(m)
            if progress is not None:
                progress(done, total)
            checkpoint(f"copy:{n[0]}")

        try:
            how = writes.write_known(
                zk, m.dest, m.group, todo, known, first=first, last=last, progress=step, batch=batch
            )
        except GroupshiftError as exc:
            raise st.refused(exc) from None
        secs = max(time.monotonic() - started, 1e-6)
        line = f"migrate {m.group}: copied {len(todo)} offsets {how} ({len(todo) / secs:,.0f} partitions/s)"
        if fold:
            st.wrote(new, line)
            st.locked = st.locked and not whole  # released with the switch
            states = []
        else:
            st.say(line)
    if back:
        differ = proof.copy_differs(want, back, _read_back(zk, dst, back))
        if differ:
            raise differ
        states.append(R.VERIFIED)
    return states


def _read_back(zk: KazooClient, dst: Side, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The destination's offsets of `tps` now (one round: their znodes beside the listings)."""
    shard = dst.shard if dst.shard >= 0 else None
    return zkio.staged(zk, side_reader(dst.scheme, dst.group, known=tps, only=tps, shard=shard))[0].values()


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
