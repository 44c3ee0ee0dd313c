"""The comparison experiments, small: every scenario once through `groupshift experiment run all
--quick` (real ZooKeeper containers, coordinator nodes and worker processes), a 30-second chaos run,
and the CLI's refusals. Each test asserts the direction of a result, not a timing."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
COORDINATOR = ("two", "two-incremental", "three-eager", "three-cooperative")

pytestmark = pytest.mark.experiments  # the experiments lane: ensembles, nodes, workers of their own


def groupshift(*args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run(
        [sys.executable, "-m", "cli", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("experiments") / "out"
    proc = groupshift("experiment", "run", "all", "--out", str(out), "--quick")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text()), proc


def timeline(out: Path, scenario: str, name: str, limit: int = 80) -> str:
    """What a failing figure is made of, for the assertion message: the ownership changes and
    commits of the partitions two members committed (or whose outputs were committed twice),
    around the first such commit, from the run's processing logs."""
    from experiments import analysis
    from zk_rebalance.events import read_events

    events = read_events((out / "logs" / scenario / name).glob("*.jsonl"))
    if not events:
        return "(no processing logs)"
    index = analysis._Index(events)
    twice = {tp for (tp, _), n in analysis.committed_outputs(events, index).items() if n > 1}
    owners = analysis.committing_owners(events, analysis.holdings(events), index)
    two = [c for c in owners if len(c["owners"]) > 1]
    tps = twice | {c["partition"] for c in two}
    first = min([c["t"] for c in two] or [e["t"] for e in events])
    t0 = events[0]["t"]

    def touches(e: dict) -> bool:
        if e["ev"] in ("assigned", "revoked", "lost"):
            return bool(tps & set(e["partitions"]))
        if e["ev"] in ("commit", "commit_begin"):
            return any(b[0] in tps for b in e["batches"])
        return e["ev"] == "process" and e["tp"] in tps or e["member"] == "driver"

    lines = [
        f"{e['t'] - t0:8.3f} {e['member']:>6} {e['ev']} "
        + json.dumps({k: v for k, v in e.items() if k not in ("t", "wall", "member", "ev")})[:200]
        for e in events
        if e["t"] >= first - 2.0 and touches(e)
    ]
    head = f"partitions {sorted(tps)}; commits by two owners: {two[:3]}"
    return "\n".join([head, *lines[:limit]])


def scheme(results: dict, scenario: str, name: str) -> dict:
    figures = results["scenarios"][scenario]["schemes"][name]
    assert "error" not in figures, f"{scenario}/{name}: {figures['error']}"
    return figures


def test_every_scenario_ran_and_the_report_stands_alone(quick_run):
    out, results, proc = quick_run
    from experiments.scenarios import SCENARIOS

    assert set(results["scenarios"]) == set(SCENARIOS)
    for name, body in results["scenarios"].items():
        assert "error" not in body, f"{name}: {body['error']}"
    report = (out / "REPORT.md").read_text()
    for name in SCENARIOS:
        assert name in report
    for png in ("time_to_stable.png", "zk_requests.png", "watch_notifications.png", "join_pause.png"):
        assert (out / "plots" / png).stat().st_size > 1000
    assert "../" not in report and "shared/" not in report
    assert "[" in proc.stderr and "scenario zombie" in proc.stderr  # the live progress display


def test_scheme_one_watch_notifications_grow_with_n_and_the_coordinators_stay_constant(quick_run):
    _, results, _ = quick_run
    scale = results["scenarios"]["scale-up"]["schemes"]
    one = {row["n"]: row for row in scale["one"]["one_by_one"]}
    assert one[8]["watch_notifications"] > one[4]["watch_notifications"]
    for name in COORDINATOR:
        rows = scale[name]["one_by_one"]
        notes = [row["watch_notifications"] for row in rows]
        assert max(notes) - min(notes) <= 1, (name, notes)


def test_zombies_commit_under_scheme_one_and_are_fenced_under_the_coordinators(quick_run):
    """A member cut off past its session keeps believing it owns its partitions under every scheme.
    Under scheme one its commit blocked across the cut is re-issued by its ZooKeeper client in the new
    session on its return and lands over the new owner's offsets: ZooKeeper's own write order (mzxid)
    shows the offset going backwards, every run. (Whether that costs committed duplicates depends on
    whether the group's next rebalance reads the regressed offset before the new owner commits again,
    so it is reported, not asserted.) A SIGSTOPped member commits over the new owner only when its
    poll wins the race against the session-expiry notice on waking, so that scenario is only checked
    for the fence."""
    out, results, _ = quick_run
    one = scheme(results, "cut-off", "one")
    assert one["zombie"]["takeover"] and one["double_ownership_s"] > 0
    assert one["zk_offset_regressions"] >= 1, one
    for scenario in ("zombie", "cut-off"):
        assert scheme(results, scenario, "one")["zombie"]["takeover"]
        for name in COORDINATOR:
            f = scheme(results, scenario, name)
            assert f["zombie"]["takeover"], (scenario, name)
            assert f["zombie"]["commits_accepted"] == 0, (scenario, name)
            assert f["zombie"]["commits_refused"] >= 1 or f["zombie"]["records"] == 0, (scenario, name)
            assert f["duplicate_committed"] == 0 and f["double_owner_commits"] == 0, (
                scenario,
                name,
                timeline(out, scenario, name),
            )


def test_a_partitioned_follower_gives_scheme_one_a_stale_decision_unless_it_syncs(quick_run):
    out, results, _ = quick_run
    faithful = scheme(results, "follower-partition", "one")
    assert faithful["s1"]["conflicts"] > 0 or faithful["s2"]["double_claimed"]
    assert faithful["stale_decisions"] >= 1
    synced = scheme(results, "follower-partition", "one-sync")
    assert synced["conflicts"] == 0 and synced["s2"]["double_claimed"] == []
    assert synced["stale_decisions"] == 0
    for name in COORDINATOR:
        f = scheme(results, "follower-partition", name)
        assert f["generation_conflicts"] == 0, name
        assert f["double_owner_commits"] == 0, timeline(out, "follower-partition", name)


def test_the_coordinator_schemes_lose_nothing_in_any_fault_scenario(quick_run):
    out, results, _ = quick_run
    for scenario in results["scenarios"]:
        if scenario == "scale-up":
            continue
        for name in COORDINATOR:
            f = scheme(results, scenario, name)
            if "skipped" in f:
                continue
            assert f["drained"], (scenario, name)
            assert f["lost"] == 0, (scenario, name, f["lost"])
            assert f["duplicate_committed"] == 0, (scenario, name, timeline(out, scenario, name))
            assert f["max_owners_at_commit"] <= 1, (scenario, name, timeline(out, scenario, name))


def test_thirty_seconds_of_chaos_lose_nothing_under_schemes_two_and_three(tmp_path):
    out = tmp_path / "chaos"
    proc = groupshift(
        "experiment",
        "chaos",
        "--scheme",
        ",".join(COORDINATOR),
        "--duration",
        "30s",
        "--seed",
        "11",
        "--out",
        str(out),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    result = json.loads((out / "chaos.json").read_text())
    assert len(result["actions"]) >= 5
    for name in COORDINATOR:
        f = result["schemes"][name]
        assert f["verdict"] == [] and f["lost"] == 0 and f["duplicate_committed"] == 0, (name, f["verdict"])


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time (field 22 of /proc/PID/stat) of every process below `root`."""
    parents, starts = {}, {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            parents[int(entry.name)], starts[int(entry.name)] = int(fields[1]), fields[19]
    found, frontier = {}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in found:
                found[child] = starts[child]
                frontier.append(child)
    return found


def _still_running(procs: dict[int, str]) -> list[int]:
    alive = []
    for pid, start in procs.items():
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if fields[19] == start and fields[0] != "Z":
            alive.append(pid)
    return alive


def _with_marker(marker: str, pids: set[int] | None = None) -> list[str]:
    """`pid: command line` of the processes (of `pids`, or any) whose command line holds `marker`."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (pids is None or int(entry.name) in pids):
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker in cmdline:
                out.append(f"{entry.name}: {cmdline[:200]}")
    return out


def _docker(*args: str) -> list[str]:
    return subprocess.run(["docker", *args, "-q"], capture_output=True, text=True, check=True).stdout.split()


def _wait_for(condition, timeout: float, what: str, poll: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(poll)
    raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")


@pytest.mark.parametrize(
    "args, mid_run, sig",
    [
        (
            ["chaos", "--scheme", "two,three-eager", "--duration", "2m", "--seed", "3"],
            r"chaos t=",
            signal.SIGTERM,
        ),
        (["run", "hard-kill", "--quick", "--scheme", "one,two"], r"hard-kill: settling", signal.SIGINT),
    ],
    ids=["chaos-sigterm", "run-sigint"],
)
def test_a_signal_mid_run_stops_every_process_and_container_it_started(tmp_path, args, mid_run, sig):
    """Mid-run (members, coordinator nodes and containers up), SIGTERM or SIGINT makes the command
    stop them all and exit with one line: no process it started runs on (by process tree and by the
    run's namespace in their command lines), no container or network of it is left (its ZooKeeper
    chroots lived there), and its data directory is gone."""
    err = tmp_path / "stderr"
    with open(err, "w") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli", "experiment", *args, "--out", str(tmp_path / "out")],
            cwd=REPO,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
            stdout=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        _wait_for(lambda: re.search(mid_run, err.read_text()) or proc.poll() is not None, 300, mid_run)
        assert proc.poll() is None, err.read_text()[-3000:]
        started = _descendants(proc.pid)
        owned = ("--filter", f"label=groupshift.owner-pid={proc.pid}")
        assert len(started) >= 4 and _docker("ps", *owned), err.read_text()[-2000:]
        cmdlines = " ".join(_with_marker("groupshift-exp-", pids=set(started)))
        tags = set(re.findall(r"groupshift-exp-([0-9a-f]{6})", cmdlines))
        assert len(tags) == 1, cmdlines  # the run's namespace, in its workers' and nodes' --zk
        proc.send_signal(sig)
        code = proc.wait(120)
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = err.read_text().strip().splitlines()
    assert code == 128 + sig, lines[-5:]
    assert lines[-1].startswith(f"error: interrupted by {signal.Signals(sig).name}"), lines[-5:]
    assert _still_running(started) == []
    for tag in tags:
        assert _with_marker(f"groupshift-exp-{tag}") == []
        assert list(Path(tempfile.gettempdir()).glob(f"groupshift-exp-{tag}-*")) == []
    assert _docker("ps", "-a", *owned) == [] and _docker("network", "ls", *owned) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "nosuch"], "no scenario 'nosuch'"),
        (["run", "hard-kill,nosuch"], "no scenario 'nosuch'"),
        (["run", "zombie", "--scheme", "four"], "schemes are"),
        (["chaos", "--scheme", "two", "--duration", "0s"], "between 1s and 1h"),
        (["chaos", "--scheme", "two", "--duration", "soon"], "is not a number"),
        (["chaos", "--scheme", "", "--duration", "5s"], "schemes are"),
        (["chaos", "--scheme", "two", "--drain-timeout", "2h"], "--drain-timeout"),
    ],
)
def test_bad_input_is_one_line_and_creates_nothing(tmp_path, args, message):
    out = tmp_path / "never"
    proc = groupshift("experiment", *args, "--out", str(out), timeout=60)
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not out.exists()
