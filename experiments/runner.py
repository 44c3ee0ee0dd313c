"""Run comparison scenarios end to end: clusters up, scenarios in turn, `results.json`, plots, REPORT.md.

    results = run_experiments(["hard-kill", "zombie"], Path("out"), quick=True)
    results["scenarios"]["zombie"]["schemes"]["one"]["duplicate_committed"]

A live progress display goes to `progress` (the CLI passes a stderr printer): one line per step,
with the elapsed time. A scenario that fails records its error and the run goes on.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
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
    with Lab(out, zk=zk, kafka=kafka) as lab:
        ctx = Context(lab, quick=quick, schemes=tuple(schemes), progress=show)
        show("starting ZooKeeper and two coordinator nodes")
        lab.nodes()
        results["versions"] = versions(lab)
        for name in names:
            show(f"scenario {name}")
            try:
                results["scenarios"][name] = run_scenario(ctx, name)
            except Exception as exc:  # one broken scenario must not lose the others' figures
                results["scenarios"][name] = {
                    "description": SCENARIOS[name].description,
                    "error": f"{type(exc).__name__}: {exc}",
                }
            show(f"scenario {name} done in {results['scenarios'][name].get('wall_s', '?')} s")
            _write(out, results, start)
        results["settings"] = {"fault_scenarios": {**vars(ctx.settings)}, "quick": quick}
    results["wall_s"] = round(time.monotonic() - start, 1)
    _write(out, results, start)
    if report:
        from experiments.report import write_report

        write_report(results, out)
        show(f"report written to {out / 'REPORT.md'}")
    return results


def _write(out: Path, results: dict, start: float) -> None:
    results["wall_s"] = round(time.monotonic() - start, 1)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=str))
    tmp.replace(out / "results.json")
