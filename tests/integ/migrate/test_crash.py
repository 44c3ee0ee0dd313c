"""A migration killed at any step: `migrate run` again finishes it, `migrate rollback` undoes it.

The test hook `GROUPSHIFT_MIGRATE_EXIT_AT=k` ends the `groupshift migrate` process at its k-th
checkpoint (a step boundary: before and after each write of the record — the first takes the
lock, the last releases it — and before and after each copy transaction), as a kill would: no
cleanup, the lock left behind. Scheme one to
scheme three is killed at every named checkpoint (tests/kill_sweep.py), the way back at spot
checks around the copy and the switch. One group per kill point, so the killed runs, the resumes
and the rollbacks each run side by side.

After a resume, the destination holds exactly the source's offsets and the record says done;
after a rollback, the destination holds exactly what it had before (nothing) and the record says
rolled back (a run killed before its first record has nothing to roll back; one killed after its
last transition is done, and is refused a rollback). The source never changes.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest
from kazoo.exceptions import NoNodeError

from coordinator.node.process import CoordinatorNodes
from core.types import TopicPartition as TP
from core.zk import connect
from migrate.migration import offline
from migrate.migration import record as R
from migrate.schemes import zk_store as legacy
from migrate.schemes.writes import commit
from testing.zookeeper import ZkServer
from tests.inspect_helpers import REPO
from tests.kill_sweep import every_named, spots
from tests.snapshots import zk_tree

PARTITIONS = {"a": 4, "b": 3}  # 7 offsets; with --batch 2, several copy transactions
BATCH = "2"


def offsets_for(scheme: str, zk, group: str) -> dict[TP, int]:
    want = {TP(t, p): 1000 + 7 * p + len(t) for t, n in PARTITIONS.items() for p in range(n)}
    if scheme == "zk":
        legacy.write_offsets(zk, group, want, batch=100)
    else:
        commit(zk, "coordinator", group, want)
    return want


def spawn(zk_connect: str, *args: str, exit_at=None, stop_at=None, session_ms=None) -> subprocess.Popen:
    env = dict(os.environ)
    for name in ("GROUPSHIFT_ZK", "GROUPSHIFT_MIGRATE_EXIT_AT", "GROUPSHIFT_MIGRATE_STOP_AT"):
        env.pop(name, None)
    if session_ms is not None:  # outlives a ZooKeeper restart
        env["GROUPSHIFT_ZK_SESSION_TIMEOUT_MS"] = str(session_ms)
    if exit_at is not None:
        env["GROUPSHIFT_MIGRATE_EXIT_AT"] = str(exit_at)
    if stop_at is not None:
        env["GROUPSHIFT_MIGRATE_STOP_AT"] = str(stop_at)
    cmd = [sys.executable, "-m", "cli", "migrate", *args, "--zk", zk_connect]
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(procs: dict[str, subprocess.Popen]) -> dict[str, tuple[int, str]]:
    return {g: (p.wait(120), p.communicate()[1]) for g, p in procs.items()}


def checkpoints_of_one_run(zk, source: str, dest: str) -> list[str]:
    """The checkpoints an uninterrupted run passes (run in this process), by name."""
    offsets_for(source, zk, "count")
    offline.passed.clear()
    offline.run(zk, "count", source, dest, batch=int(BATCH))
    return list(offline.passed)


@pytest.mark.parametrize(
    "source, dest, choose",
    [
        pytest.param("zk", "coordinator", every_named, id="zk-coordinator-every-named-checkpoint"),
        pytest.param("coordinator", "zk", spots, id="coordinator-zk-spot-checks"),
    ],
)
def test_killed_at_a_checkpoint_run_again_finishes_and_rollback_undoes(zk, zk_connect, source, dest, choose):
    names = checkpoints_of_one_run(zk, source, dest)
    points = choose(names)
    if choose is every_named:  # every write of the record (the lock with the first), and the copy
        steps = {"before:copy", "frozen", "copy:1", "copied", "before:done", "done"}
        assert steps <= set(points.values()), points
    want = {}
    killed = {}
    direction = ["--from", source, "--to", dest, "--batch", BATCH]
    for k in points:
        for kind in ("resume", "undo"):
            group = f"{kind}-{k}"
            want[group] = offsets_for(source, zk, group)
            killed[group] = spawn(zk_connect, "run", group, *direction, exit_at=k)
    for group, (code, err) in finish(killed).items():
        assert code == offline.EXIT_CODE, (group, code, err)
        assert "test hook: exiting at checkpoint" in err, (group, err)
        assert offline.offsets(zk, source, group) == want[group]  # the source is never touched

    again = {g: spawn(zk_connect, "run", g, *direction) for g in killed if g.startswith("resume-")}
    again |= {g: spawn(zk_connect, "rollback", g) for g in killed if g.startswith("undo-")}
    for group, (code, err) in finish(again).items():
        rec, _ = offline.read_record(zk, group)
        assert offline.offsets(zk, source, group) == want[group], group
        if group.startswith("resume-"):
            assert code == 0, (group, code, err)
            assert rec is not None and rec.state == R.DONE, (group, rec)
            assert offline.offsets(zk, dest, group) == want[group], group
            assert offline.lock_holder(zk, group) is None, group
        elif rec is None:  # killed before its first record: nothing to roll back, nothing copied
            assert code == 1 and "nothing to roll back" in err, (group, code, err)
            assert offline.offsets(zk, dest, group) == {}, group
        elif rec.state == R.DONE:  # killed after the last transition: done, to be migrated back
            assert code == 1 and "is done" in err, (group, code, err)
            assert offline.offsets(zk, dest, group) == want[group], group
        else:
            assert code == 0, (group, code, err)
            assert rec.state == R.ROLLED_BACK, (group, rec)
            assert offline.offsets(zk, dest, group) == {}, group
            assert offline.lock_holder(zk, group) is None, group


def stopped(proc: subprocess.Popen, timeout: float = 60.0) -> bool:
    """True once `proc` is stopped by SIGSTOP (state T in /proc)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        state = open(f"/proc/{proc.pid}/stat").read().rpartition(")")[2].split()[0]
        if state == "T":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.faults
def test_zookeeper_down_mid_copy_one_line_then_run_again_finishes():
    """ZooKeeper stops between two copy transactions: the run ends with one line and exit 1; once
    ZooKeeper is back, `run` again finishes with exactly the source's offsets."""
    with own_zookeeper("mid-copy") as (server, zk_connect, zk):
        want = offsets_for("zk", zk, "g")
        direction = ["--from", "zk", "--to", "coordinator", "--batch", BATCH]
        proc = spawn(zk_connect, "run", "g", *direction, stop_at="copy:1")
        assert stopped(proc), proc.communicate()
        server.stop()
        proc.send_signal(signal.SIGCONT)
        code, err = finish({"g": proc})["g"]
        assert code == 1, (code, err)
        lines = err.strip().splitlines()
        assert lines[-1].startswith("error: ") and "ZooKeeper" in lines[-1], err
        assert not any("Traceback" in line for line in lines), err
        back_again(server, zk)
        rec, _ = offline.read_record(zk, "g")
        assert rec is not None and rec.state == R.FROZEN  # stopped inside the copy
        assert offline.offsets(zk, "zk", "g") == want
        code, err = finish({"g": spawn(zk_connect, "run", "g", *direction)})["g"]
        assert code == 0, err
        assert offline.offsets(zk, "coordinator", "g") == want
        assert offline.read_record(zk, "g")[0].state == R.DONE


@contextlib.contextmanager
def own_zookeeper(chroot: str):
    """(server, connect string, client) of a ZooKeeper of the test's own, which it may stop."""
    server = ZkServer.start_single()
    try:
        root = connect(server.connect_string)
        root.ensure_path(f"/{chroot}")
        root.stop()
        zk_connect = f"{server.connect_string}/{chroot}"
        zk = connect(zk_connect)
        try:
            yield server, zk_connect, zk
        finally:
            zk.stop()
    finally:
        server.remove()


def back_again(server: ZkServer, zk) -> None:
    """Start the stopped `server` and wait until `zk` is connected to it again."""
    server.start()
    server.wait_until(server.ruok, 60, "ZooKeeper back")
    deadline = time.monotonic() + 60
    while not zk.connected and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_commit_while_the_run_is_stopped_stops_it_before_the_switch(zk, zk_connect):
    """Runs stopped at a checkpoint (SIGSTOP) while the world changes under them, all side by side:
    a consumer commits to the source after the copy's last transaction, before the switch's
    checks (a new offset, the same offset again, a new partition; the way back, from the
    coordinator's store in the middle of the copy; and a copy of one transaction, which switches
    with it, before it), or someone writes a partition of the destination an earlier copy
    transaction wrote. Each run ends with one line and exit 1 before the switch; `rollback` then
    leaves the destination empty (the one-transaction run wrote nothing: nothing to roll back)."""
    a0 = TP("a", 0)
    to_coord = ["--from", "zk", "--to", "coordinator", "--batch", BATCH]
    cases = {  # group: (direction, where to stop, what happens meanwhile, what the refusal says)
        "moved": (
            to_coord,
            "copied",
            lambda: legacy.write_offsets(zk, "moved", {a0: 5}, batch=10),
            "a-0",
        ),
        "again": (  # the same offset: a commit all the same
            to_coord,
            "copied",
            lambda: zk.set("/consumers/again/offsets/a/0", str(want["again"][a0]).encode()),
            "a-0: 1001 -> 1001 (committed again)",
        ),
        "added": (
            to_coord,
            "copied",
            lambda: legacy.write_offsets(zk, "added", {TP("a", 9): 1}, batch=10),
            "a-9: None -> 1",
        ),
        "back": (
            ["--from", "coordinator", "--to", "zk", "--batch", BATCH],
            "copy:1",
            lambda: commit(zk, "coordinator", "back", {a0: 5}),
            "changed since it was frozen",
        ),
        "dest": (
            to_coord,
            "copy:1",
            lambda: commit(zk, "coordinator", "dest", {a0: 5}),
            "differ after the copy",
        ),
        "whole": (
            ["--from", "zk", "--to", "coordinator"],
            "before:copy",
            lambda: legacy.write_offsets(zk, "whole", {a0: 5}, batch=10),
            "a-0: 1001 -> 5",
        ),
    }
    want = {g: offsets_for("coordinator" if g == "back" else "zk", zk, g) for g in cases}
    procs = {g: spawn(zk_connect, "run", g, *d, stop_at=at) for g, (d, at, _, _) in cases.items()}
    for g, proc in procs.items():
        assert stopped(proc), (g, proc.communicate())
        cases[g][2]()
        proc.send_signal(signal.SIGCONT)
    for g, (code, err) in finish(procs).items():
        last = err.strip().splitlines()[-1]
        assert code == 1 and last.startswith("error: ") and "Traceback" not in err, (g, code, err)
        assert cases[g][3] in last and ("changed since it was frozen" in last or g == "dest"), (g, err)
        rec, _ = offline.read_record(zk, g)
        assert (rec is None) if g == "whole" else rec.state in (R.FROZEN, R.COPIED), (g, rec)  # not switched
        assert offline.lock_holder(zk, g) is None, g
    undo = {g: spawn(zk_connect, "rollback", g) for g in cases}
    for g, (code, err) in finish(undo).items():
        assert (code, "nothing to roll back" in err) == ((1, True) if g == "whole" else (0, False)), (g, err)
        assert offline.offsets(zk, "zk" if g == "back" else "coordinator", g) == {}, g


@pytest.mark.faults
def test_the_watch_on_the_source_lost_with_the_connection_the_source_is_read_again():
    """A run watches the source's offsets instead of reading them again before the switch; the
    watch goes with the connection. Two runs stopped after the copy while ZooKeeper restarts (their
    connections are cut, their sessions live on), a consumer commits to one of the sources, and
    the runs go on: the one whose source moved is refused (the commit made no event: the source
    is read again), the other finishes."""
    with own_zookeeper("lost-watch") as (server, zk_connect, zk):
        want = {g: offsets_for("zk", zk, g) for g in ("quiet", "moved")}
        direction = ["--from", "zk", "--to", "coordinator", "--batch", BATCH]
        procs = {
            g: spawn(zk_connect, "run", g, *direction, stop_at="copied", session_ms=60_000) for g in want
        }
        assert all(stopped(p) for p in procs.values()), {g: p.poll() for g, p in procs.items()}
        server.stop()
        back_again(server, zk)
        legacy.write_offsets(zk, "moved", {TP("a", 0): 5}, batch=10)
        for p in procs.values():
            p.send_signal(signal.SIGCONT)
        done = finish(procs)
        assert done["quiet"][0] == 0, done["quiet"]
        assert offline.offsets(zk, "coordinator", "quiet") == want["quiet"]
        code, err = done["moved"]
        assert code == 1 and "changed since it was frozen" in err.strip().splitlines()[-1], (code, err)
        assert offline.read_record(zk, "moved")[0].state == R.COPIED  # not switched


def group_subtrees(zk_connect: str, group: str) -> dict:
    hosts, _, chroot = zk_connect.partition("/")
    out = {}
    for sub in (f"consumers/{group}", f"groupshift/groups/{group}", f"groupshift/migrations/{group}"):
        try:
            out[sub] = zk_tree(f"{hosts}/{chroot}/{sub}", around=False)
        except NoNodeError:
            out[sub] = None
    return out


def test_coordinator_down_one_line_nothing_written_then_run_finishes(zk, zk_connect):
    """The node leading the group's shard is killed (its leader znode lives on until its session
    expires): a migration to the coordinator is refused with one line and writes nothing; once
    the dead node's session expired, the same command migrates through ZooKeeper."""
    want = offsets_for("zk", zk, "g")
    direction = ["--from", "zk", "--to", "coordinator"]
    # The dead node's session must outlive the command's start (a Python process on a loaded
    # machine takes seconds to reach its check), and expire soon after for the second run.
    with CoordinatorNodes(zk_connect, count=1, zk_session_timeout_ms=8000) as nodes:
        leaders = zk.get_children("/groupshift/shards")
        assert leaders
        nodes.kill(1)
        before = group_subtrees(zk_connect, "g")
        code, err = finish({"g": spawn(zk_connect, "run", "g", *direction)})["g"]
        assert code == 1, (code, err)
        assert len(err.strip().splitlines()) == 1 and err.startswith("error: ") and "coordinator" in err, err
        assert group_subtrees(zk_connect, "g") == before
    deadline = time.monotonic() + 60
    while zk.get_children("/groupshift/coordinators/ids") and time.monotonic() < deadline:
        time.sleep(0.2)
    code, err = finish({"g": spawn(zk_connect, "run", "g", *direction)})["g"]
    assert code == 0, err
    assert offline.offsets(zk, "coordinator", "g") == want


@pytest.mark.parametrize("source, dest", [("zk", "coordinator"), ("coordinator", "zk")])
def test_migrations_of_several_groups_at_once_do_not_trip_over_shared_parents(zk, source, dest):
    """A fresh namespace: every run creates the containers all groups share (the lock's and the
    record's parents, `/groupshift/groups` or `/consumers`) at the same moment."""
    import concurrent.futures as cf

    groups = [f"together-{i}" for i in range(8)]
    want = {g: offsets_for(source, zk, g) for g in groups}
    with cf.ThreadPoolExecutor(len(groups)) as pool:
        done = list(pool.map(lambda g: offline.run(zk, g, source, dest), groups))
    assert [m.state for m in done] == [R.DONE] * len(groups)
    for g in groups:
        assert offline.offsets(zk, dest, g) == want[g]
