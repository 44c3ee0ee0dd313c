"""Run comparison scenarios end to end: clusters up, scenarios in turn, `results.json`, plots, REPORT.md.

    results = run_experiments(["hard-kill", "zombie"], Path("out"), quick=True)
    results["scenarios"]["zombie"]["schemes"]["one"]["duplicate_committed"]

Scale-up runs first, with nothing beside it (`Scenario.alone`: its figures are milliseconds and
its server counters one scheme's); then the scenarios of each ZooKeeper cluster run in a lane of
their own, side by side: the single server's in turn in one, the ensemble's (follower-partition) in
the other, each with its own servers, counters and coordinator nodes. The ensemble starts beside the
single server, and the members' fork server (`experiments/launcher.py`) does its imports meanwhile.

A live progress display goes to `progress` (the CLI passes a stderr printer): one line per step,
with the elapsed time. A scenario that fails records its error and the run goes on.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from core.scheme import Scheme
from experiments.harness import Lab
from experiments.scenarios import SCENARIOS, Context, fault_settings, run_scenario
from experiments.worker import DEFAULT_SCHEMES


def versions(lab: Lab | None = None, cluster: str = "single") -> dict[str, str]:
    """Versions of Python, the libraries and the lab's ZooKeeper (`cluster`: one the run started)."""
    out = {"python": platform.python_version()}
    for dist in ("groupshift", "kazoo", "pyarrow", "matplotlib", "testcontainers", "confluent-kafka"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "not installed"
    if lab is not None:
        try:
            from core.four_letter import four_letter

            host, port = lab.host_port(cluster)
            first = four_letter(host, port, "srvr").splitlines()[0]
            out["zookeeper"] = first.split(":", 1)[1].strip().split(",")[0]
        except Exception:
            out["zookeeper"] = "unknown"
    return out


def stderr_progress(start: float) -> Callable[[str], None]:
    def show(line: str) -> None:
        print(f"[{time.monotonic() - start:6.1f}s] {line}", file=sys.stderr, flush=True)

    return show


def run_experiments(
    names: Sequence[str],
    out: Path,
    quick: bool = False,
    schemes: Sequence[str] = DEFAULT_SCHEMES,
    zk: str | None = None,
    progress: Callable[[str], None] | None = None,
    report: bool = True,
) -> dict:
    start = time.monotonic()
    show = progress or stderr_progress(start)
    logging.getLogger("kazoo").setLevel(logging.CRITICAL)  # reconnect chatter during faults
    out = Path(out)
    results: dict = {
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "quick": quick,
        "schemes": list(schemes),
        "scenarios": {},
    }
    kafka = fault_settings(quick) if any(Scheme(s).kafka for s in schemes) else None
    written = threading.Lock()

    def run_one(name: str) -> None:
        show(f"scenario {name}")
        try:
            body = run_scenario(ctx, name)
        except Exception as exc:  # one broken scenario must not lose the others' figures
            body = {"description": SCENARIOS[name].description, "error": f"{type(exc).__name__}: {exc}"}
        show(f"scenario {name} done in {body.get('wall_s', '?')} s")
        with written:
            results["scenarios"][name] = body
            _write(out, results, start)

    with Lab(out, zk=zk, kafka=kafka) as lab:
        ctx = Context(lab, quick=quick, schemes=tuple(schemes), progress=show)
        lanes = _lanes(names)
        ensemble = "ensemble" in lanes
        show(f"starting ZooKeeper{', a 3-node ensemble' if ensemble else ''} and two coordinator nodes")
        lab.launcher()  # the members' fork server does its imports meanwhile
        starting = _thread(_start_ensemble, lab) if ensemble else None
        lab.nodes()
        if starting is not None:
            starting.join()
        results["versions"] = versions(lab)
        for name in lanes.pop(ALONE, []):
            run_one(name)
        # each cluster's scenarios in a lane of their own: they share no server, counter or node
        side = [_thread(lambda lane=lane: [run_one(n) for n in lane]) for lane in list(lanes.values())[1:]]
        for name in next(iter(lanes.values()), []):
            run_one(name)
        for t in side:
            t.join()
        results["scenarios"] = {n: results["scenarios"][n] for n in names if n in results["scenarios"]}
        results["settings"] = {"fault_scenarios": {**vars(ctx.settings)}, "quick": quick}
    results["wall_s"] = round(time.monotonic() - start, 1)
    _write(out, results, start)
    if report:
        from experiments.report import write_report

        write_report(results, out)
        show(f"report written to {out / 'REPORT.md'}")
    return results


ALONE = "alone"


def _lanes(names: Sequence[str]) -> dict[str, list[str]]:
    """The scenarios by lane, in order: those that run by themselves first (`Scenario.alone`), then
    one lane per ZooKeeper cluster, the single server's first."""
    lanes: dict[str, list[str]] = {ALONE: [], "single": []}
    for name in names:
        scenario = SCENARIOS[name]
        lanes.setdefault(ALONE if scenario.alone else scenario.cluster, []).append(name)
    return {lane: found for lane, found in lanes.items() if found}


def _start_ensemble(lab: Lab) -> None:
    try:
        lab.ensemble()
    except Exception:  # the scenario that needs it tries again and reports the error
        pass


def _thread(target: Callable, *args) -> threading.Thread:
    # daemon: an interrupted run's main thread cleans up and exits without waiting for it (the lab,
    # stopping, makes whatever it starts next fail at once)
    t = threading.Thread(target=target, args=args, daemon=True)
    t.start()
    return t


def _write(out: Path, results: dict, start: float) -> None:
    results["wall_s"] = round(time.monotonic() - start, 1)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(out / "results.json")
