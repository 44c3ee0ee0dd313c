"""Migrate a stopped group's offsets into a group on any Kafka-protocol broker (`--to kafka`).

    plan(zk, "billing", "zk", "127.0.0.1:9093")       # what run would do; writes nothing
    run(zk, "billing", "zk", "127.0.0.1:9093")        # planned -> frozen -> copied -> ... -> done
    verify(zk, "billing", "zk", "127.0.0.1:9093")     # partition by partition
    rollback(zk, "billing")                           # the target's offsets as they were

The same record, lock, checkpoints and states as `migrate.migration.offline` (its `_Run` writes them in
ZooKeeper, `/groupshift/migrations/<g>`); only the destination differs: it is read and written
through `migrate.migration.kafka_target` (confluent-kafka's AdminClient), and the record keeps the
bootstrap. `prior` holds the target group's offsets before the run, for the partitions the
source has and any the broker lists; a rollback commits them again, or deletes the group
(DeleteGroups) when it had none. Every check happens before the record is written.
"""

from __future__ import annotations

import contextlib
import time

import msgspec
from kazoo.client import KazooClient

from core.errors import GroupshiftError, UnknownGroup
from core.scheme import Rebalancer
from core.types import TopicPartition
from migrate.migration import offline, proof, report, sides
from migrate.migration import record as R
from migrate.migration.kafka_target import KafkaTarget, check_bootstrap
from migrate.migration.look import record_reader
from migrate.migration.offline import MigrationBusy, checkpoint
from migrate.migration.sides import side_reader
from migrate.schemes import writes, zkio
from migrate.schemes.model import as_store

DEST = "kafka"


def check_args(source: str | Rebalancer, mode: str = "offline") -> Rebalancer:
    """The source store; refused unless `mode` is offline."""
    if source in (Rebalancer.SERVER, Rebalancer.SERVER.value):
        raise GroupshiftError(
            "--to kafka takes its group from zk or coordinator, not server (scheme two's groups are not "
            "copied to brokers yet); migrate it --to zk first, or use --from coordinator"
        )
    source = as_store(source)
    if mode != "offline":
        raise GroupshiftError(
            "a migration to kafka is offline (--mode offline); the bridge is zk -> coordinator"
        )
    return source


def _conflict(rec: R.Migration | None, source: Rebalancer, bootstrap: str) -> str | None:
    why = R.conflict(rec, source.value, DEST, "offline")
    if why or rec is None or rec.state in R.TERMINAL or rec.bootstrap == bootstrap:
        return why
    return (
        f"an unfinished migration of {rec.group!r} to kafka at {rec.bootstrap} is {rec.state}; finish it "
        f"with `--bootstrap {rec.bootstrap}` or undo it with `migrate rollback`"
    )


def _kafka_listeners(zk: KazooClient) -> set[str]:
    """`HOST:PORT` of every Kafka listener of this ZooKeeper's coordinator nodes."""
    from coordinator.member.connection import registered_nodes

    return {
        f"{rec.kafka_host}:{rec.kafka_port}"
        for rec in registered_nodes(zk)
        if isinstance(rec.kafka_host, str) and isinstance(rec.kafka_port, int)  # nodes with a Kafka listener
    }


def _check_not_itself(zk: KazooClient, group: str, source: Rebalancer, bootstrap: str) -> None:
    """A coordinator group "moved" to this ZooKeeper's own Kafka listener would be copied onto itself."""
    if source is not Rebalancer.COORDINATOR:
        return
    same = sorted(set(bootstrap.split(",")) & _kafka_listeners(zk))
    if same:
        raise GroupshiftError(
            f"--bootstrap {same[0]} is the Kafka listener of this ZooKeeper's coordinator nodes: group "
            f"{group!r} is already served there; give another cluster's brokers"
        )


def _source_members(zk: KazooClient, group: str, source: str | Rebalancer) -> None:
    names = offline.live_members(zk, source, group)
    if names:
        raise writes.GroupActive(sides.members_refusal(group, source, names, "source"))


# -- plan ------------------------------------------------------------------------------------------


def plan(zk: KazooClient, group: str, source: str | Rebalancer, bootstrap: str, security=None) -> dict:
    """What `run` would do, and the checks it would make; writes nothing."""
    source = check_args(source)
    bootstrap = check_bootstrap(bootstrap)
    _check_not_itself(zk, group, source, bootstrap)
    if not offline.exists(zk, source, group):
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
        )
    src = offline.offsets(zk, source, group)
    members = offline.live_members(zk, source, group)
    rec, _ = offline.read_record(zk, group)
    holder = offline.lock_holder(zk, group)
    resuming = rec is not None and rec.state not in R.TERMINAL
    with KafkaTarget(bootstrap, security=security) as t:
        counts = t.partitions(sorted({tp.topic for tp in src}))
        missing = [tp for tp in sorted(src) if counts[tp.topic] is None or tp.partition >= counts[tp.topic]]
        dst = t.offsets(group, list(src))
        target_members = t.members(group)
    absent = f"{missing[0].topic}:{missing[0].partition}" if missing else ""
    checks = [
        ("source has no live members", not members, ", ".join(members[:10])),
        (
            "destination has no live members",
            not target_members,
            ", ".join(target_members[:10])
            if target_members
            else "not checkable: no DescribeGroups on the broker; it refuses a commit into an active group"
            if target_members is None
            else "",
        ),
        ("source has committed offsets", bool(src), f"{len(src)} partitions"),
        (
            "destination has every partition",
            not missing,
            f"{len(missing)} missing, e.g. {absent}" if missing else "",
        ),
        (
            "destination has no offsets of its own",
            resuming or not dst,
            f"{len(dst)} partitions" + ("; resuming" if resuming else " (pass --overwrite)" if dst else ""),
        ),
        ("no other migration running", holder is None, offline._holder_text(holder) if holder else ""),
        ("no unfinished migration with other arguments", _conflict(rec, source, bootstrap) is None, ""),
        (f"at most {R.MAX_PARTITIONS} partitions", len(src) <= R.MAX_PARTITIONS, str(len(src))),
    ]
    return {
        "group": group,
        "from": source.value,
        "to": DEST,
        "bootstrap": bootstrap,
        "mode": "offline",
        "partitions": len(src),
        "to_copy": len(R.diff(src, dst)),
        "members": members,
        "record": rec.state if rec else None,
        "steps": [s for s in R.ORDER if not resuming or R.ORDER.index(s) > R.ORDER.index(rec.state)],
        "checks": [{"check": c, "ok": ok, "detail": d} for c, ok, d in checks],
        "offsets": report.offset_rows(src, dst),
    }


# -- run -------------------------------------------------------------------------------------------


def run(
    zk: KazooClient,
    group: str,
    source: str | Rebalancer,
    bootstrap: str,
    *,
    overwrite: bool = False,
    batch: int = writes.BATCH,
    say=lambda line: None,
    progress=None,
    security=None,
) -> R.Migration:
    """Start or resume the migration into the Kafka-protocol group; returns the record in state done."""
    source = check_args(source)
    bootstrap = check_bootstrap(bootstrap)
    _check_not_itself(zk, group, source, bootstrap)
    # the watch on the source's offsets spares their second read before the switch (`look.recheck`)
    (rec, version, holder, missing), seen = zkio.staged(
        zk, record_reader(group), side_reader(source, group, watch=True)
    )
    with seen.watch or contextlib.nullcontext():  # closed when the run ends
        why = _conflict(rec, source, bootstrap)
        if why:
            raise MigrationBusy(why)
        with KafkaTarget(bootstrap, security=security) as t:
            if _already_done(t, rec, source) and not overwrite:
                offline._clear_dead_lock(zk, group)
                done = f"already done from {source.value} to kafka at {bootstrap}; nothing to do"
                say(f"migrate {group}: {done}")
                return rec
            resuming = rec is not None and rec.state not in R.TERMINAL
            if holder is not None and not offline._dead_here(holder):
                raise MigrationBusy(
                    f"a migration of group {group!r} is already running ({offline._holder_text(holder)}); "
                    "wait for it to finish"
                )
            if not resuming and not seen.exists:
                raise UnknownGroup(
                    f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
                )
            sides.check_sides_idle(seen, None)
            if resuming:
                t.check_idle(group)
            else:
                src = seen.values()
                if not src:
                    raise GroupshiftError(
                        f"group {group!r} has no committed offsets under {source.value}; nothing to migrate"
                    )
                R.check_bound(len(src), f"group {group!r} under {source.value}")
                t.check_partitions(list(src))
                dst = t.offsets(group, list(src))
                t.check_idle(group, dst)
                if dst and not overwrite:
                    raise GroupshiftError(
                        f"group {group!r} already has {len(dst)} committed offset(s) on {bootstrap}; "
                        "pass --overwrite to replace them (a rollback restores them)"
                    )
            st = offline._Run(zk, group, say)
            if resuming:
                st.lock()
                try:
                    st.rec, st.version = offline.read_record(zk, group)  # re-read under the lock
                    if st.rec is None or st.rec.state in R.TERMINAL:
                        raise MigrationBusy(
                            f"the migration of {group!r} finished meanwhile; see `migrate status`"
                        )
                    say(f"migrate {group}: resuming from {st.rec.state}")
                    return _advance(st, t, batch, progress, watch=seen.watch)
                finally:
                    st.unlock()
            new = R.new(group, source.value, DEST, "offline", offline._now(), dst, bool(dst), overwrite)
            new = msgspec.structs.replace(new, bootstrap=bootstrap)
            st.rec, st.version = rec, version
            try:
                # planned and frozen in one write with the lock: the offsets just read are the snapshot
                st.will_take(holder, missing)
                st.write(R.advance(new, R.FROZEN, offline._now(), snapshot=R.as_rows(src)))
                return _advance(st, t, batch, progress, seen, dst, seen.watch)
            finally:
                st.unlock()


def _already_done(t: KafkaTarget, rec: R.Migration | None, source: Rebalancer) -> bool:
    if (
        rec is None
        or rec.state != R.DONE
        or (rec.source, rec.dest, rec.bootstrap) != (source.value, DEST, t.bootstrap)
    ):
        return False
    want = R.as_offsets(rec.snapshot)
    return not R.diff(want, t.offsets(rec.group, list(want)))


def _advance(
    st,
    t: KafkaTarget,
    batch: int,
    progress,
    src: sides.Side | None = None,
    have: dict | None = None,
    watch=None,
) -> R.Migration:
    """Carry the migration on from its recorded state (as `offline._advance`: the commit answers
    prove what the last OffsetCommit wrote, the rest is fetched back once, and the source is read
    again before the switch); `src`, `have`: the source and the target's offsets as a fresh run
    read them a moment ago."""
    zk, g = st.zk, st.group
    m = st.rec
    if m.state == R.PLANNED:  # a run killed between planning and freezing (older versions)
        checkpoint("before:snapshot")
        snap = offline.offsets(zk, m.source, g)
        R.check_bound(len(snap), f"group {g!r} under {m.source}")
        st.write(R.advance(m, R.FROZEN, offline._now(), snapshot=R.as_rows(snap)))
    want = R.as_offsets(st.rec.snapshot)
    if src is None:  # resumed: a consumer may have committed since the snapshot
        src = sides.read_side(zk, st.rec.source, g)
        offline._check_snapshot(st.rec, src.values())
    pending: list[R.State] = []
    if st.rec.state in (R.FROZEN, R.COPIED):
        have = t.offsets(g, list(want)) if have is None else have
        todo = {tp: want[tp] for tp in R.diff(want, have)}
        checkpoint("before:copy")
        if todo:
            _copy(st, t, todo, batch, progress)
        back = proof.read_back(want, todo, batch)
        differ = proof.copy_differs(want, back, t.offsets(g, back) if back else {})
        if differ:
            raise differ
        pending = ([R.COPIED] if st.rec.state == R.FROZEN else []) + [R.VERIFIED]
    if st.rec.state == R.VERIFIED or pending:
        t.check_idle(g)
        offline.switch(st, src, None, pending, watch)
    elif st.rec.state == R.SWITCHED:
        st.write(R.advance(st.rec, R.DONE, offline._now()), release=True)
    return st.rec


def _copy(st, t: KafkaTarget, todo: dict[TopicPartition, int], batch: int, progress) -> None:
    n = [0]
    started = time.monotonic()

    def step(done: int, total: int) -> None:
        n[0] += 1
        if progress is not None:
            progress(done, total)
        checkpoint(f"copy:{n[0]}")

    requests = t.commit(st.group, todo, batch=batch, progress=step)
    secs = max(time.monotonic() - started, 1e-6)
    st.say(
        f"migrate {st.group}: copied {len(todo)} offsets to {t.bootstrap} in {requests} OffsetCommit "
        f"request(s) ({len(todo) / secs:,.0f} partitions/s)"
    )


# -- rollback ------------------------------------------------------------------------------------


def recorded(zk: KazooClient, group: str) -> bool:
    """The group's recorded migration goes to kafka (so `migrate rollback` comes here)."""
    rec, _ = offline.read_record(zk, group)
    return rec is not None and rec.dest == DEST


def rollback(
    zk: KazooClient,
    group: str,
    *,
    bootstrap: str | None = None,
    say=lambda line: None,
    progress=None,
    security=None,
) -> R.Migration:
    """Put the target group back as it was; the record becomes rolled_back."""
    rec, _ = offline.read_record(zk, group)
    if rec is None:
        raise GroupshiftError(f"no migration of group {group!r} is recorded; nothing to roll back")
    if rec.dest != DEST:
        raise GroupshiftError(
            f"the migration of {group!r} goes to {rec.dest}, not to kafka; roll it back without --bootstrap"
        )
    if rec.state == R.DONE:
        raise GroupshiftError(
            f"the migration of {group!r} from {rec.source} to kafka at {rec.bootstrap} is done; "
            "nothing to roll back (the source's offsets were never changed)"
        )
    if rec.state == R.ROLLED_BACK:
        raise GroupshiftError(f"the migration of {group!r} is already rolled back")
    holder = offline.lock_holder(zk, group)
    if holder is not None and not offline._dead_here(holder):
        raise MigrationBusy(
            f"a migration of group {group!r} is running ({offline._holder_text(holder)}); "
            "wait for it before rolling back"
        )
    with KafkaTarget(check_bootstrap(bootstrap) if bootstrap else rec.bootstrap, security=security) as t:
        _source_members(zk, group, rec.source)
        t.check_idle(group)
        st = offline._Run(zk, group, say)
        st.lock()
        try:
            st.rec, st.version = offline.read_record(zk, group)
            m = st.rec
            if m is None or m.state in R.TERMINAL:
                raise MigrationBusy(f"the migration of {group!r} finished meanwhile; see `migrate status`")
            _restore(t, m, progress, say)
            st.write(R.advance(m, R.ROLLED_BACK, offline._now()))
            return st.rec
        finally:
            st.unlock()


def _restore(t: KafkaTarget, m: R.Migration, progress, say) -> None:
    g = m.group
    prior, copied = R.as_offsets(m.prior), R.as_offsets(m.snapshot)
    have = t.offsets(g, sorted(set(prior) | set(copied)))
    checkpoint("before:restore")
    if not prior:
        if not have:
            return
        if t.delete_group(g):
            say(f"migrate {g}: deleted group {g} on {t.bootstrap} (it had no offsets before)")
        else:
            say(
                f"migrate {g}: warning: {t.bootstrap} serves no DeleteGroups; the {len(have)} offset(s) the "
                "copy wrote stay there (delete the group with the broker's own tools)"
            )
        return
    back = {tp: prior[tp] for tp in R.diff(prior, have)}
    extra = [tp for tp in copied if tp in have and tp not in prior]
    if extra:
        if t.delete_group(g):  # Kafka has OffsetDelete, but not every broker: delete and write back
            say(f"migrate {g}: deleted group {g} on {t.bootstrap} to drop {len(extra)} copied offset(s)")
            back = dict(prior)
        else:
            say(
                f"migrate {g}: warning: {t.bootstrap} serves no DeleteGroups; {len(extra)} offset(s) "
                "the copy added for partitions the group had none for stay there"
            )
    if back:
        t.commit(g, back, progress=progress)
        say(f"migrate {g}: restored {len(back)} offsets on {t.bootstrap}")
    checkpoint("restored")


# -- verify ----------------------------------------------------------------------------------------


def verify(zk: KazooClient, group: str, source: str | Rebalancer, bootstrap: str, security=None) -> dict:
    """Compare the target group with the source now (and with the frozen snapshot, when recorded)."""
    source = check_args(source)
    bootstrap = check_bootstrap(bootstrap)
    _check_not_itself(zk, group, source, bootstrap)
    if not offline.exists(zk, source, group):
        raise UnknownGroup(
            f"group {group!r} does not exist under scheme {source.value}; check the name (and --zk)"
        )
    src = offline.offsets(zk, source, group)
    with KafkaTarget(bootstrap, security=security) as t:
        dst = t.offsets(group, list(src))
    rec, _ = offline.read_record(zk, group)
    ours = rec is not None and (rec.source, rec.dest, rec.bootstrap) == (source.value, DEST, bootstrap)
    report = R.verify_report(group, source.value, DEST, src, dst, rec, ours)
    return {k: report[k] for k in ("group", "from", "to")} | {"bootstrap": bootstrap} | report
