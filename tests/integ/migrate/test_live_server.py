"""A live migration from scheme one into scheme two (`--to server --mode live`), on real processes.

As `test_live.py` does for scheme three: three legacy consumer processes consume while records
are produced; `migrate run --mode live` bridges the group; each legacy consumer is replaced by a
scheme-two consumer process (`rebalancer="server"`, the incremental form and the draft form), one
at a time; `migrate run` again finishes and the members leave bridge mode. The same logs and
checks (`test_live.check_commits`): per partition no commit moves backwards, each owner epoch
belongs to one member, every record between two commits was polled by the committing member, and
no record is in two successful commits over the whole run.
"""

from __future__ import annotations

import json

import pytest

from tests.integ.migrate import live_harness as H

LIVE = ["--from", "zk", "--to", "server", "--mode", "live"]


def owned(zk) -> set[int]:
    path = "/consumers/billing/owners/events"
    return {int(p) for p in zk.get_children(path)} if zk.exists(path) else set()


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "draft"])
def test_legacy_consumers_replaced_one_by_one_by_scheme_two_consumers(
    zk, zk_connect, node, tmp_path, incremental
):
    from migrate.migration import bridge

    log, spec, producer = H.legacy_world(zk, zk_connect, tmp_path)
    procs: list[H.Proc] = []
    try:
        legacy = H.start_legacy(tmp_path, spec, producer, procs)
        plan = H.cli("migrate", "plan", "billing", *LIVE, "--zk", zk_connect, "-o", "json")
        assert plan.returncode == 0, plan.stdout + plan.stderr
        assert json.loads(plan.stdout)["to"] == "server"
        started = H.cli("migrate", "run", "billing", *LIVE, "--zk", zk_connect, "-o", "json")
        assert started.returncode == 0, started.stderr
        assert json.loads(started.stdout)["state"] == "bridged"
        assert "3 legacy consumer(s) remain" in started.stderr and "server consumers" in started.stderr

        members = []
        for i, old in enumerate(legacy):
            new = H.Proc(
                tmp_path,
                f"server-{i}",
                {**spec, "rebalancer": "server", "bootstrap": node.bootstrap, "incremental": incremental},
            )
            procs.append(new)
            members.append(new)
            # A scheme-two member fetches what the coordinator granted it within the bridged members'
            # legacy share, so a new one may get nothing yet: wait until it is registered and every
            # partition has an owner again, then stop a legacy consumer.
            H.wait_for(
                lambda i=i: len(bridge.registered(zk, "billing")[1]) == i + 1, 60, f"{new.name} to register"
            )
            H.wait_for(lambda: owned(zk) == set(range(H.PARTITIONS)), 60, "every partition to be owned")
            old.stop()
        H.wait_for(
            lambda: set().union(*(m.polled_partitions() for m in members)) == set(range(H.PARTITIONS)),
            60,
            "the scheme-two consumers to consume every partition",
        )
        legacy_left, bridged = bridge.registered(zk, "billing")
        assert legacy_left == [] and len(bridged) == 3

        want = H.finish(zk, zk_connect, "server", log, producer, members)
    finally:
        H.end_run(producer, procs)
    H.check_run(zk, zk_connect, procs, members, want)
