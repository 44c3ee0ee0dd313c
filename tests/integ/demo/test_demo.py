"""The main job (`make demo`) and the side-by-side comparison, on real ZooKeeper, real coordinator
node processes and Spark.

The demo works in a namespace of its own (a chroot and a log directory) and leaves nothing
behind: these tests compare the test's namespace, and the names around it up to the server's
root, before and after.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from coordinator.node.process import CoordinatorNodes
from experiments.demo import DemoNamespace, format_table, plot, run_demo
from experiments.main_job import format_summary, run_main_job
from tests.snapshots import dir_tree, zk_tree

REPO = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.spark  # the main job runs Spark consumers


def test_demo_consumes_exactly_once_under_both_rebalancers_and_leaves_nothing(
    zk_server, zk, zk_connect, tmp_path
):
    zk.ensure_path("/")  # the test's chroot exists before, so the snapshot holds it
    before = zk_tree(zk_connect)
    out = tmp_path / "out" / "results.json"
    data = tmp_path / "data"
    data.mkdir()
    results = run_demo(zk_connect, data, partitions=3, records_per_partition=300, members=2, out=out)
    assert [r.rebalancer for r in results] == ["zk", "coordinator"]
    for r in results:
        assert (r.records, r.delivered, r.duplicates, r.missing) == (900, 900, 0, 0), r
        assert r.committed_at_end, r
        assert r.first_stable_s > 0 and r.join_settle_s > 0
    assert len(json.loads(out.read_text())) == 2
    assert "join settle time" in format_table(results)
    assert zk_tree(zk_connect) == before
    assert dir_tree(data) == {}
    plot(results, tmp_path / "demo.png")
    assert (tmp_path / "demo.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_job_migrates_spark_consumers_live_exactly_once_and_leaves_nothing(
    zk_server, zk, zk_connect, tmp_path
):
    zk.ensure_path("/")
    before = zk_tree(zk_connect)
    data = tmp_path / "data"
    data.mkdir()
    png = tmp_path / "timeline.png"
    said: list[str] = []
    result = run_main_job(
        zk_connect, data, partitions=3, rate=3000, phase_s=1.5, timeline_png=png, out=tmp_path / "r.json",
        say=said.append,
    )  # fmt: skip
    assert result.exactly_once, format_summary(result)
    assert result.records_in > 0 and result.migration == "done"
    names = [ph.name for ph in result.phases]
    assert names[:2] == ["scheme one", "join"] and names[-2:] == ["scheme three", "drain"]
    assert [ph.members for ph in result.phases] == [2, 3, 3, 3, 3, 3, 3]
    assert all(ph.stable_after_s is not None for ph in result.phases)
    assert sum(ph.records for ph in result.phases) == result.records_in  # every record committed once
    members = {m for _, m, _ in result.timeline}
    assert members == {"legacy-1", "legacy-2", "legacy-3", "coordinator-1", "coordinator-2", "coordinator-3"}
    assert any("bridged" in line for line in said) and any("done" in line for line in said)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "r.json").read_text())["migration"] == "done"
    assert zk_tree(zk_connect) == before
    assert dir_tree(data) == {}


def _wait(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _leaders(zk) -> int:
    shards = zk.get_children("/groupshift/shards") if zk.exists("/groupshift/shards") else []
    return sum(1 for s in shards if zk.exists(f"/groupshift/shards/{s}/leader"))


def test_demo_beside_an_operators_nodes_1_and_2_succeeds_and_changes_nothing(
    zk_server, zk, zk_connect, tmp_path
):
    # The operator's own coordinator nodes 1 and 2 serve the namespace the demo is pointed at.
    with CoordinatorNodes(zk_connect, count=2, shard_handoff=False) as operator:
        shards = operator.options["shards"]
        _wait(lambda: _leaders(zk) == shards, 60, "the operator's nodes to lead every shard")
        before = zk_tree(zk_connect)
        results = run_demo(zk_connect, tmp_path, partitions=2, records_per_partition=200, members=2)
        for r in results:
            assert (r.delivered, r.duplicates, r.missing, r.committed_at_end) == (400, 0, 0, True), r
        assert zk_tree(zk_connect) == before
        assert all(node.alive for node in operator.nodes.values())
        assert sorted(zk.get_children("/groupshift/coordinators/ids")) == ["1", "2"]
    assert dir_tree(tmp_path) == {}


def test_demo_namespace_removes_the_chroot_parents_it_created(zk_server, zk_connect, tmp_path):
    before = zk_tree(zk_connect)
    with DemoNamespace(zk_connect + "/deeper", tmp_path) as ns:
        assert ns.zk_connect.startswith(zk_connect + "/deeper/groupshift-demo-")
        root = KazooClient(hosts=zk_server.connect_string)
        root.start(timeout=10)
        try:
            root.create(ns.chroot + "/consumers/g/ids/c1", b"{}", ephemeral=True, makepath=True)
            assert root.exists(ns.chroot + "/consumers/g/ids/c1")
            ns.close()  # deletes what a session still holds too
        finally:
            root.stop()
            root.close()
        assert zk_tree(zk_connect) == before
    assert dir_tree(tmp_path) == {}


def test_interrupted_demo_cleans_up(zk_server, zk, zk_connect, tmp_path):
    zk.ensure_path("/")
    before = zk_tree(zk_connect)
    env = dict(os.environ, GROUPSHIFT_HOME=str(tmp_path / "home"), PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "cli",
            "demo",
            "--zk",
            zk_connect,
            "--data",
            str(tmp_path),
            "--partitions",
            "2",
            "--rate",
            "1000",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Interrupt once the demo has its namespace and its first group is consuming.
        _wait(
            lambda: (
                any(zk.exists(f"/{c}/consumers") for c in zk.get_children("/")) or proc.poll() is not None
            ),
            120,
            "the demo's first group",
        )
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the CLI prints every thread's stack and goes on
            time.sleep(3)
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"the demo did not exit within 120 s of SIGTERM; stderr:\n{err}") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and lines[-1] == "error: aborted", err
    assert all(line.startswith(("phase ", "migrate ")) for line in lines[:-1]), err  # progress only
    assert zk_tree(zk_connect) == before
    assert dir_tree(tmp_path) == {}
