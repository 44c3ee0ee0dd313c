"""`groupshift migrate --to server` / `--from server` offline: scheme two's groups as migration ends.

Real ZooKeeper, a real coordinator node, real consumers of each kind:

* zk -> server: after the run a scheme-two consumer (incremental, then the draft form) goes on
  exactly from the migrated offsets; server -> zk (--overwrite) hands it back to a legacy consumer
  that goes on exactly; `verify` agrees each time.
* A run stopped after `verified` (the exit hook) is rolled back: the scheme-two group it created
  is deleted, the legacy offsets untouched.
* Bad input: a scheme-two group with a live member, a scheme-three group named as scheme two (and
  the reverse), server <-> coordinator, a scheme-two destination of a `--to coordinator` run: one
  line, exit 1, the ZooKeeper tree unchanged.
"""

from __future__ import annotations

import contextlib
import json

import pytest

from coordinator.node.process import CoordinatorNodes
from core.types import TopicPartition as TP
from migrate.migration import offline
from migrate.schemes import zk_store as legacy
from tests.inspect_helpers import coordinator_consumer, make_topic, ok, run, wait_for
from tests.integ.migrate.test_offline import drain, legacy_consumer, migrate, one_line_failure
from tests.snapshots import zk_tree
from topics.log import Log

TO_SERVER = ["--from", "zk", "--to", "server"]
FROM_SERVER = ["--from", "server", "--to", "zk"]


@pytest.fixture
def log(tmp_path):
    return Log(tmp_path / "data")


def server_consumer(group, topics, zk_connect, log, bootstrap, incremental=True):
    return coordinator_consumer(
        group, topics, zk_connect, log, bootstrap, rebalancer="server", incremental=incremental
    )


def produce(log: Log, topic: str, partitions: int, n: int) -> None:
    for p in range(partitions):
        log.produce(topic, [(b"k", b"v")] * n, partition=p)


def test_zk_to_server_and_back_consumers_continue_exactly(zk, zk_connect, log):
    make_topic(zk, log, "orders", 3, 10)
    old = legacy_consumer("billing", ["orders"], zk_connect, log)
    try:
        assert drain(old, 30) == {TP("orders", p): list(range(10)) for p in range(3)}
    finally:
        old.close()
    plan = json.loads(ok("migrate", "plan", "billing", *TO_SERVER, "-o", "json", zk=zk_connect))
    assert plan["to"] == "server" and plan["partitions"] == 3 and all(c["ok"] for c in plan["checks"])
    assert zk.exists("/groupshift/migrations") is None  # plan writes nothing
    out = json.loads(ok("migrate", "run", "billing", *TO_SERVER, "-o", "json", zk=zk_connect))
    assert (out["from"], out["to"], out["state"]) == ("zk", "server", "done")
    assert [h["state"] for h in out["history"]] == list(offline.R.ORDER)
    v = json.loads(ok("migrate", "verify", "billing", *TO_SERVER, "-o", "json", zk=zk_connect))
    assert v["equal"] and v["source_matches_snapshot"] and v["partitions"] == 3
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        # the incremental form (KIP-848) starts exactly at the migrated offsets
        produce(log, "orders", 3, 5)
        assert_continues(server_consumer("billing", ["orders"], zk_connect, log, nodes.bootstrap), 10, 15)
        wait_for(lambda: not offline.live_members(zk, "server", "billing"), what="an empty group")
        # a stored scheme-two group is not a scheme-three one: --from coordinator is refused, and
        # scheme two and three share a store (nothing to copy between them)
        before = zk_tree(zk_connect)
        for args, text in (
            (["run", "billing", "--from", "coordinator", "--to", "zk", "--overwrite"], "use --from server"),
            (["run", "billing", "--from", "server", "--to", "coordinator"], "share the coordinator's store"),
        ):
            r = migrate(*args, zk_connect=zk_connect)
            one_line_failure(r)
            assert text in r.stderr, (args, r.stderr)
        assert zk_tree(zk_connect) == before
        # back to scheme one: its old offsets (10) are there, so --overwrite is needed
        produce(log, "orders", 3, 5)
        r = run("migrate", "run", "billing", *FROM_SERVER, zk=zk_connect)
        one_line_failure(r)
        assert "--overwrite" in r.stderr
        ok("migrate", "run", "billing", *FROM_SERVER, "--overwrite", zk=zk_connect)
        v = json.loads(ok("migrate", "verify", "billing", *FROM_SERVER, "-o", "json", zk=zk_connect))
        assert v["equal"] and v["partitions"] == 3
    assert offline.offsets(zk, "zk", "billing") == {TP("orders", p): 15 for p in range(3)}
    assert_continues(legacy_consumer("billing", ["orders"], zk_connect, log), 15, 20)


def assert_continues(consumer, start: int, end: int, partitions: int = 3) -> None:
    """`consumer` (closed after) reads exactly offsets start..end-1 of every partition of `orders`."""
    with contextlib.closing(consumer):
        want = {TP("orders", p): list(range(start, end)) for p in range(partitions)}
        assert drain(consumer, (end - start) * partitions) == want


def test_zk_to_server_draft_consumer_and_rollback(zk, zk_connect, log):
    make_topic(zk, log, "clicks", 2, 8)
    legacy.write_offsets(zk, "ads", {TP("clicks", 0): 3, TP("clicks", 1): 5}, batch=10)
    # a run stopped after the copy (one partition a transaction: it does not switch with it) is
    # undone: the scheme-two group it created goes away
    stopped = migrate("run", "ads", *TO_SERVER, "--batch", "1", zk_connect=zk_connect, exit_at="copied")
    assert stopped.returncode == 99
    wait_for(lambda: not zk.exists("/groupshift/migration-locks/ads"), timeout=60, what="the lock to expire")
    assert offline.offsets(zk, "server", "ads") == {TP("clicks", 0): 3, TP("clicks", 1): 5}
    rolled = json.loads(ok("migrate", "rollback", "ads", "-o", "json", zk=zk_connect))
    assert rolled["state"] == "rolled_back" and (rolled["from"], rolled["to"]) == ("zk", "server")
    assert zk.exists("/groupshift/groups/ads") is None
    assert offline.offsets(zk, "zk", "ads") == {TP("clicks", 0): 3, TP("clicks", 1): 5}
    # again, to the end; the draft form (ServerJoinGroup) starts at the migrated offsets
    ok("migrate", "run", "ads", *TO_SERVER, zk=zk_connect)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        c = server_consumer("ads", ["clicks"], zk_connect, log, nodes.bootstrap, incremental=False)
        try:
            assert drain(c, 8) == {TP("clicks", 0): list(range(3, 8)), TP("clicks", 1): list(range(5, 8))}
            # a scheme-two group with a live member is refused, naming it, and nothing changes
            before = zk_tree(zk_connect)
            r = migrate("run", "ads", *FROM_SERVER, "--overwrite", zk_connect=zk_connect)
            one_line_failure(r)
            assert "live member" in r.stderr and c.client_id in r.stderr, r.stderr
            assert zk_tree(zk_connect) == before
        finally:
            c.close()


def test_scheme_three_group_is_not_scheme_two(zk, zk_connect, log):
    make_topic(zk, log, "views", 2, 4)
    legacy.write_offsets(zk, "web", {TP("views", 0): 1, TP("views", 1): 1}, batch=10)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        c = coordinator_consumer("web", ["views"], zk_connect, log, nodes.bootstrap)
        try:
            drain(c, 8)
        finally:
            c.close()
        wait_for(lambda: not offline.live_members(zk, "coordinator", "web"), what="an empty group")
        before = zk_tree(zk_connect)
        for args, text in (
            (["run", "web", *FROM_SERVER, "--overwrite"], "use --from coordinator"),
            (["run", "web", *TO_SERVER, "--overwrite"], "migrate --to coordinator"),
            (["run", "web", *TO_SERVER, "--mode", "live"], "migrate --to coordinator"),
            (["run", "web", "--from", "server", "--to", "zk", "--mode", "live"], "from zk to coordinator"),
            (["run", "web", "--from", "server", "--to", "kafka", "--bootstrap", "127.0.0.1:1"], "not server"),
        ):
            r = migrate(*args, zk_connect=zk_connect)
            one_line_failure(r)
            assert text in r.stderr, (args, r.stderr)
        r = migrate("plan", "web", *FROM_SERVER, zk_connect=zk_connect)
        assert r.returncode == 1 and "[FAIL]" in r.stdout and "use --from coordinator" in r.stdout, r
        assert zk_tree(zk_connect) == before


def test_describe_shows_an_incremental_groups_epochs_assignments_and_targets(zk, zk_connect, log):
    make_topic(zk, log, "orders", 3, 4)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        c = server_consumer("inc", ["orders"], zk_connect, log, nodes.bootstrap)
        with contextlib.closing(c):
            drain(c, 12)
            [out] = json.loads(ok("groups", "describe", "inc", "--members", "-o", "json", zk=zk_connect))
            [member] = out["members"]
            assert member["epoch"] >= 1 and member["assignment"] == member["target"] == "orders(0,1,2)", (
                member
            )
            table = ok("groups", "describe", "inc", "--members", zk=zk_connect)
            assert "EPOCH" in table.upper() and "TARGET" in table.upper(), table
            state = json.loads(ok("groups", "describe", "inc", "--state", "-o", "json", zk=zk_connect))
            assert "uniform" in json.dumps(state), state
