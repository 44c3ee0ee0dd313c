"""Benchmark: the experiment run is its own benchmark — the wall time of `experiment run all` and
of each scenario (the report drawn after the run is timed apart), and the H/S figures at the largest
N side by side per scheme.

Run on demand: `python -m bench.experiments [--quick] [--out DIR] [--from results.json]`.
Targets: `run all` under 10 minutes on this machine; `--quick` under 2 minutes. `--from` prints
the figures of an earlier run without running anything.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from core.scheme import Scheme

TARGET_FULL_S = 600.0
TARGET_QUICK_S = 120.0
SCHEMES = Scheme.names()


def _fault(results: dict, scenario: str, scheme: str) -> dict:
    return results["scenarios"].get(scenario, {}).get("schemes", {}).get(scheme, {})


def _largest(results: dict, scheme: str) -> dict:
    rows = results["scenarios"].get("scale-up", {}).get("schemes", {}).get(scheme, {}).get("one_by_one", [])
    rows = [r for r in rows if "error" not in r]
    return max(rows, key=lambda r: r["n"]) if rows else {}


def figures(results: dict) -> dict[str, dict]:
    """H1–H5 at the largest N (one join into a stable group) and S1–S6 from the fault scenarios."""
    out = {}
    for s in SCHEMES:
        row = _largest(results, s)
        split = _fault(results, "follower-partition", s)
        zombie = _fault(results, "zombie", s)
        cut = _fault(results, "cut-off", s)
        kill = _fault(results, "hard-kill", s)
        out[s] = {
            "N": row.get("n"),
            "H1 fan-out": row.get("fanout"),
            "H2 watch notifications": row.get("watch_notifications"),
            "H3 ZK requests": row.get("zk_requests"),
            "H4 max pause ms": row.get("max_pause_ms"),
            "H5 time to stable ms": row.get("time_to_stable_ms"),
            "S1 conflicts (follower partition)": split.get("conflicts", split.get("s1", {}).get("conflicts")),
            "S2 disagreement (follower partition)": (
                len(split["s2"]["double_claimed"]) if "s2" in split else split.get("generation_conflicts")
            ),
            "S3 unowned partition-s (hard kill)": kill.get("unowned_partition_s"),
            "S4 duplicate committed (zombie + cut-off)": _sum(zombie, cut, "duplicate_committed"),
            "S5 offset regressions (zombie + cut-off)": _sum(zombie, cut, "offset_regressions"),
            "S5 in ZooKeeper, mzxid order (zombie + cut-off)": _sum(zombie, cut, "zk_offset_regressions"),
            "S6 zombie lifetime s (zombie)": zombie.get("zombie", {}).get("lifetime_s"),
        }
    return out


def _sum(a: dict, b: dict, key: str):
    vals = [x[key] for x in (a, b) if key in x]
    return sum(vals) if vals else None


def table(results: dict) -> str:
    fig = figures(results)
    keys = list(next(iter(fig.values())))
    lines = ["| figure | " + " | ".join(SCHEMES) + " |", "|---" * (len(SCHEMES) + 1) + "|"]
    for k in keys:
        cells = [fig[s][k] for s in SCHEMES]
        lines.append(
            f"| {k} | "
            + " | ".join("-" if c is None else f"{c:g}" if isinstance(c, float) else str(c) for c in cells)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", type=Path, help="keep the results here (default: a temporary directory)")
    ap.add_argument("--from", dest="source", type=Path, help="print an earlier run's results.json")
    args = ap.parse_args(argv)
    if args.source:
        results = json.loads(args.source.read_text())
    else:
        from experiments.report import write_report
        from experiments.runner import run_experiments
        from experiments.scenarios import SCENARIOS

        out = args.out or Path(tempfile.mkdtemp(prefix="bench-experiments-"))
        results = run_experiments(list(SCENARIOS), out, quick=args.quick, report=False)
        t = time.monotonic()
        write_report(results, out)
        results["report_s"] = round(time.monotonic() - t, 1)
        print(f"results, plots and REPORT.md: {out}")
    print("| scenario | wall s |\n|---|---|")
    for name, body in results["scenarios"].items():
        print(
            f"| {name} | {body.get('wall_s', '-')} |"
            + (f" error: {body['error']}" if "error" in body else "")
        )
    target = TARGET_QUICK_S if results.get("quick") else TARGET_FULL_S
    wall = results["wall_s"]
    print(f"| **run all{' --quick' if results.get('quick') else ''}** | **{wall}** |")
    if "report_s" in results:
        print(f"| report (plots, REPORT.md), after the run | {results['report_s']} |")
    print()
    print(table(results))
    print()
    what = "run all --quick" if results.get("quick") else "run all"
    verdict = "met" if wall < target else "MISSED"
    print(f"{what}: {wall:.0f} s, target < {target:.0f} s (ratio {wall / target:.2f}): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
