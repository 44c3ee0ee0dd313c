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


@pytest.mark.parametrize("incremental", [True, False], ids=["incremental", "draft"])
def test_legacy_consumers_replaced_one_by_one_by_scheme_two_consumers(
    zk, zk_connect, node, tmp_path, incremental
):
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

        spec = {**spec, "bootstrap": node.bootstrap, "incremental": incremental}
        members = H.replace_legacy(zk, tmp_path, spec, legacy, procs, rebalancer="server")
        want = H.finish(zk, zk_connect, "server", log, producer, members)
    finally:
        H.end_run(producer, procs)
    H.check_run(zk, zk_connect, procs, members, want)
