"""`groupshift migrate` offline: real ZooKeeper, real consumers of both kinds, a real coordinator node.

* zk -> coordinator -> zk: after each migration a consumer of the other kind goes on exactly
  from the migrated offsets (no record skipped, none delivered twice).
* A group with live members is refused with their names; bad input changes nothing (full tree).
* Crash safety: the test hook ends the process at every checkpoint in turn; `run` again finishes
  with the source's offsets, and `rollback` leaves the destination as it was.
"""

from __future__ import annotations

import json
import os
import socket
import time

import pytest
from kazoo.client import KazooClient

from coordinator.node.process import CoordinatorNodes
from core.types import TopicPartition as TP
from migrate.migration import offline
from migrate.schemes import zk_store as legacy
from pipeline.consumer import Consumer
from tests import cli_fork
from tests.inspect_helpers import REPO, coordinator_consumer, legacy_consumer, make_topic, ok, run, wait_for
from tests.snapshots import zk_tree
from topics.log import Log


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path / "data")


def drain(c: Consumer, want: int, timeout: float = 60.0) -> dict[TP, list[int]]:
    """Poll until `want` records arrived (and a little more, to see extras); commit; offsets by partition."""
    got: dict[TP, list[int]] = {}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < want:
        assert time.monotonic() < deadline, f"got {sum(map(len, got.values()))} of {want} records"
        for tp, records in c.poll(timeout_ms=100).items():
            got.setdefault(tp, []).extend(r.offset for r in records)
    for _ in range(5):  # anything beyond `want` would be a repeat or a wrong start
        for tp, records in c.poll(timeout_ms=100).items():
            got.setdefault(tp, []).extend(r.offset for r in records)
    c.commit()
    return got


TO_COORD = ["--from", "zk", "--to", "coordinator"]


def one_line_failure(r) -> None:
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error: "), r.stderr


def test_zk_to_coordinator_and_back_consumers_continue_exactly(zk, zk_connect, log):
    make_topic(zk, log, "orders", 3, 10)
    old = legacy_consumer("billing", ["orders"], zk_connect, log)
    try:
        got = drain(old, 30)
        assert got == {TP("orders", p): list(range(10)) for p in range(3)}
        # a live group is refused, naming its consumer, and nothing changes
        before = zk_tree(zk_connect)
        [cid] = zk.get_children("/consumers/billing/ids")
        for cmd in ("run", "plan"):
            r = run("migrate", cmd, "billing", "--from", "zk", "--to", "coordinator", zk=zk_connect)
            assert r.returncode == 1 and cid in (r.stderr + r.stdout), r
        one_line_failure(
            run("migrate", "run", "billing", "--from", "zk", "--to", "coordinator", zk=zk_connect)
        )
        assert zk_tree(zk_connect) == before
    finally:
        old.close()
    plan = json.loads(
        ok("migrate", "plan", "billing", "--from", "zk", "--to", "coordinator", "-o", "json", zk=zk_connect)
    )
    assert plan["partitions"] == 3 and all(c["ok"] for c in plan["checks"])
    assert {(o["partition"], o["source"], o["destination"]) for o in plan["offsets"]} == {
        (p, 10, None) for p in range(3)
    }
    assert zk.exists("/groupshift/migrations") is None  # plan writes nothing
    out = json.loads(
        ok("migrate", "run", "billing", "--from", "zk", "--to", "coordinator", "-o", "json", zk=zk_connect)
    )
    assert out["state"] == "done" and [h["state"] for h in out["history"]] == [
        "planned",
        "frozen",
        "copied",
        "verified",
        "switched",
        "done",
    ]
    v = json.loads(
        ok("migrate", "verify", "billing", "--from", "zk", "--to", "coordinator", "-o", "json", zk=zk_connect)
    )
    assert v["equal"] and v["source_matches_snapshot"] and v["partitions"] == 3
    for p in range(3):
        log.produce("orders", [(b"k", b"v")] * 5, partition=p)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        new = coordinator_consumer("billing", ["orders"], zk_connect, log, nodes.bootstrap)
        try:
            assert drain(new, 15) == {TP("orders", p): list(range(10, 15)) for p in range(3)}
        finally:
            new.close()
        wait_for(lambda: not offline.live_members(zk, "coordinator", "billing"), what="an empty group")
        for p in range(3):
            log.produce("orders", [(b"k", b"v")] * 5, partition=p)
        # back to scheme one: its old offsets (10) are there, so --overwrite is needed
        r = run("migrate", "run", "billing", "--from", "coordinator", "--to", "zk", zk=zk_connect)
        one_line_failure(r)
        assert "--overwrite" in r.stderr
        ok("migrate", "run", "billing", "--from", "coordinator", "--to", "zk", "--overwrite", zk=zk_connect)
    assert {tp: c.offset for tp, c in legacy.read_offsets(zk, "billing").items()} == {
        TP("orders", p): 15 for p in range(3)
    }
    old = legacy_consumer("billing", ["orders"], zk_connect, log)
    try:
        assert drain(old, 15) == {TP("orders", p): list(range(15, 20)) for p in range(3)}
    finally:
        old.close()


# -- crash safety ------------------------------------------------------------------------------------

PARTITIONS = {"a": 150, "b": 150, "c": 150}  # 450 offsets: 5 copy transactions with --batch 100


def source_group(zk, group: str) -> dict[TP, int]:
    offsets = {TP(t, p): 1000 + 7 * p for t, n in PARTITIONS.items() for p in range(n)}
    legacy.write_offsets(zk, group, offsets, batch=1000)
    return offsets


def migrate(*args, zk_connect, exit_at=None):
    env = dict(os.environ)
    env.pop("GROUPSHIFT_ZK", None)
    if exit_at is not None:
        env["GROUPSHIFT_MIGRATE_EXIT_AT"] = str(exit_at)
        # the killed run's ephemeral lock outlives it by its session: 2 s here, not the default 10 s
        env["GROUPSHIFT_ZK_SESSION_TIMEOUT_MS"] = "2000"
    argv = ["migrate", *args, "--zk", zk_connect]
    return cli_fork.shared().run(argv, env, timeout=120, cwd=REPO, text=True)


def dest_tree(zk_connect: str, group: str) -> dict:
    hosts, chroot = zk_connect.split("/", 1)
    client = KazooClient(hosts=hosts)
    client.start(timeout=10)
    try:
        there = client.exists(f"/{chroot}/groupshift/groups/{group}") is not None
    finally:
        client.stop()
        client.close()
    return zk_tree(f"{hosts}/{chroot}/groupshift/groups/{group}", around=False) if there else {}


def test_bad_input_one_line_nothing_changed(zk, zk_connect, zk_server):
    source_group(zk, "busy")
    source_group(zk, "taken")
    legacy.write_offsets(zk, "taken", {TP("x", 0): 5}, batch=10)
    # "taken" already has offsets in the coordinator scheme
    from migrate.schemes.writes import commit

    commit(zk, "coordinator", "taken", {TP("a", 0): 1})
    # a lock held by a live process (this one) on this host
    zk.ensure_path("/groupshift/migration-locks")
    holder = {"pid": os.getpid(), "host": socket.gethostname(), "since_ms": 0}
    zk.create("/groupshift/migration-locks/busy", json.dumps(holder).encode(), ephemeral=True)
    before = zk_tree(zk_connect)
    to_coord = ["--from", "zk", "--to", "coordinator"]
    cases = [
        (["run", "nosuch", *to_coord], "does not exist"),
        (["plan", "nosuch", *to_coord], "does not exist"),
        (["verify", "nosuch", *to_coord], "does not exist"),
        (["status", "nosuch"], "no migration"),
        (["rollback", "nosuch"], "no migration"),
        (["run", "busy", *to_coord], "already running"),
        (["run", "taken", *to_coord], "--overwrite"),
        (["run", "busy", "--from", "zk", "--to", "zk"], "both zk"),
        (["run", "busy", *to_coord, "--mode", "live"], "already running"),
        (["plan", "nosuch", *to_coord, "--mode", "live"], "does not exist"),
        (["run", "taken", *to_coord, "--mode", "live"], "no coordinator node leads"),
        (["run", "taken", *to_coord, "--mode", "live", "--overwrite"], "--overwrite is for --mode offline"),
        (["run", "busy", "--from", "coordinator", "--to", "zk", "--mode", "live"], "from zk to coordinator"),
    ]
    for args, text in cases:
        r = migrate(*args, zk_connect=zk_connect)
        one_line_failure(r)
        assert text in r.stderr, (args, r.stderr)
    assert zk_tree(zk_connect) == before
    # ZooKeeper down: one line, no traceback
    r = migrate("run", "busy", *to_coord, zk_connect="127.0.0.1:29911")
    one_line_failure(r)
    # an unfinished migration refuses one in the other direction, and a second run while it is held
    assert migrate(  # in the middle of the copy (100 partitions a transaction: it does not switch with it)
        "run", "taken", *to_coord, "--overwrite", "--batch", "100", zk_connect=zk_connect, exit_at="copy:1"
    ).returncode
    # The killed run's ephemeral lock lives until ZooKeeper expires its session: wait for that,
    # so the snapshot below does not race ZooKeeper's own deletion of it.
    deadline = time.monotonic() + 60
    while zk.exists("/groupshift/migration-locks/taken") and time.monotonic() < deadline:
        time.sleep(0.2)
    before = zk_tree(zk_connect)
    r = migrate("run", "taken", "--from", "coordinator", "--to", "zk", zk_connect=zk_connect)
    one_line_failure(r)
    assert "unfinished migration" in r.stderr
    assert zk_tree(zk_connect) == before
    # rollback of an --overwrite migration puts the destination's own offsets back
    ok("migrate", "rollback", "taken", zk=zk_connect)
    assert offline.offsets(zk, "coordinator", "taken") == {TP("a", 0): 1}
    status = json.loads(ok("migrate", "status", "taken", "-o", "json", zk=zk_connect))
    assert status["state"] == "rolled_back"
