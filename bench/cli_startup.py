"""Benchmark: start-up of CLI commands and of a coordinator node, as the tests spawn them.

Its own embedded ZooKeeper (`groupshift zk start --port <free port>` with a temporary
GROUPSHIFT_HOME; `groupshift zk stop` at the end, also on Ctrl-C or SIGTERM). Every command runs
as `<this interpreter> -m cli ...` from the repo root — how the tests and `NodeProcess` run
them — and is timed from spawn to exit, median of 10 runs (after one run not counted):
`python -c pass` (the bare interpreter of the same venv), `--help`, `zk status`, `groups list`
(the embedded ZooKeeper, empty) and one refused bad input. A coordinator node is timed from spawn
to its `listening on` line, median of 5, each in a fresh chroot (as each test has): with the
default 50 shards and with the tests' settings (`coordinator.node.process.TEST_DEFAULTS`).

A Spark driver (`pipeline.spark.spark_session` and a first small query, in a fresh process as
`groupshift consume` starts one) is timed with the class-data-sharing archive that
`scripts/setup.sh` writes (`pipeline.spark.cds`) and without it, alternately, median of 3 each:
the JVM's CPU seconds up to the first result, and the wall time.

Targets: each command < 250 ms and < 4x the bare interpreter measured in the same run; a node
ready < 0.6 s; a Spark driver with the archive at most 0.6x the JVM CPU of one without.

    .venv/bin/python -m bench.cli_startup [--runs 10] [--node-runs 5] [--spark-runs 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from coordinator.node.process import LISTENING, TEST_DEFAULTS, serve_command  # noqa: E402

COMMAND_TARGET_S = 0.25
BARE_RATIO_TARGET = 4.0
NODE_TARGET_S = 0.6
SPARK_CPU_RATIO_TARGET = 0.6

# A driver as `groupshift consume` starts one; prints the JVM's CPU seconds and the wall time.
SPARK_DRIVER = """
import os, sys, time
start = time.perf_counter()
from pipeline.spark import spark_session
spark = spark_session("bench-startup")
spark.range(1000).selectExpr("id % 7 AS k").groupBy("k").count().collect()
took = time.perf_counter() - start
jvm = spark.sparkContext._gateway.proc.pid
fields = open(f"/proc/{jvm}/stat").read().rsplit(")", 1)[1].split()
print((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), took)
spark.stop()
"""

# (label, arguments after `-m cli`, the exit code it must end with)
COMMANDS = [
    ("--help", ["--help"], 0),
    ("zk status", ["zk", "status"], 0),
    ("groups list (empty)", ["groups", "list"], 0),
    ("bad input: topics create a/b -p 1", ["topics", "create", "a/b", "-p", "1"], 1),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GROUPSHIFT_ZK", "GROUPSHIFT_DATA")}
    env["GROUPSHIFT_HOME"] = str(home)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _run(argv: list[str], env: dict[str, str], expect: int) -> float:
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != expect:
        raise SystemExit(
            f"{' '.join(argv[1:])}: exit {done.returncode}, expected {expect}\n{done.stdout}{done.stderr}"
        )
    return took


def _median(argv: list[str], env: dict[str, str], expect: int, runs: int) -> float:
    _run(argv, env, expect)  # not counted: the page cache, .pyc files
    return statistics.median(_run(argv, env, expect) for _ in range(runs))


def _node_ready(zk: str, env: dict[str, str], options: dict) -> float:
    """Spawn to `listening on`, then SIGTERM (the node releases its shards and exits)."""
    argv = serve_command(zk, 1, options)
    start = time.perf_counter()
    env = dict(env, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        argv, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if LISTENING.search(line):
                return time.perf_counter() - start
        raise SystemExit(f"the coordinator node exited ({proc.wait()}) before printing 'listening on'")
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _bytecode(env: dict[str, str]) -> str:
    """Whether the commands find the project's modules compiled, or compile them every run (about
    40 % of a command's time), and the two settings that decide it."""
    dont_write = "set (no .pyc is written)" if env.get("PYTHONDONTWRITEBYTECODE") else "unset"
    prefix = env.get("PYTHONPYCACHEPREFIX") or "unset (__pycache__ beside the sources)"
    settings = f"PYTHONDONTWRITEBYTECODE {dont_write}, PYTHONPYCACHEPREFIX {prefix}"
    # The commands run with this process's environment, so they look where it does.
    if Path(importlib.util.cache_from_source(str(REPO / "cli" / "main.py"))).exists():
        return f"cached (.pyc): {settings}"
    return f"not cached, every process compiles the modules it imports: {settings}"


def _spark_driver(env: dict[str, str], cache: str) -> tuple[float, float]:
    """(JVM CPU seconds, wall seconds) of a driver's start and first query, with `cache` as
    GROUPSHIFT_CACHE (where the archive is looked for)."""
    done = subprocess.run(
        [sys.executable, "-c", SPARK_DRIVER],
        cwd=REPO,
        env=dict(env, GROUPSHIFT_CACHE=cache),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        raise SystemExit(f"the Spark driver failed:\n{done.stderr[-2000:]}")
    cpu, wall = done.stdout.split()
    return float(cpu), float(wall)


def _spark(env: dict[str, str], runs: int) -> bool:
    from pipeline.spark import cds

    archive = cds.archive_path()
    if archive is None:
        print("Spark driver: no class-data-sharing archive (run scripts/setup.sh): MISSED")
        return False
    empty = tempfile.mkdtemp(prefix="groupshift-bench-no-cds-")
    try:
        got: dict[str, list[tuple[float, float]]] = {"with": [], "without": []}
        for _ in range(runs):  # alternately, so that both see the same load
            got["with"].append(_spark_driver(env, str(archive.parent.parent)))
            got["without"].append(_spark_driver(env, empty))
    finally:
        shutil.rmtree(empty, ignore_errors=True)
    cpu = {k: statistics.median(c for c, _ in v) for k, v in got.items()}
    wall = {k: statistics.median(w for _, w in v) for k, v in got.items()}
    for k in ("without", "with"):
        print(f"{'Spark driver, ' + k + ' the archive':<36} {cpu[k]:7.2f} s JVM CPU  {wall[k]:6.2f} s wall")
    ratio = cpu["with"] / cpu["without"]
    met = ratio <= SPARK_CPU_RATIO_TARGET
    print(
        f"{'Spark driver CPU, with / without':<36} {ratio:7.2f}x (target <= {SPARK_CPU_RATIO_TARGET:g}x; "
        f"median of {runs}; {archive.name}): {_verdict(met)}"
    )
    return met


def _verdict(ok: bool) -> str:
    return "met" if ok else "MISSED"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="Runs per command (median).")
    ap.add_argument("--node-runs", type=int, default=5, help="Coordinator node starts (median).")
    ap.add_argument("--spark-runs", type=int, default=3, help="Spark drivers of each kind (0: none).")
    args = ap.parse_args(argv)

    def interrupted(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupted)
    home = Path(tempfile.mkdtemp(prefix="groupshift-bench-startup-"))
    env = _env(home)
    cli = [sys.executable, "-m", "cli"]
    port = _free_port()
    ok = True
    try:
        _run([*cli, "zk", "start", "--port", str(port)], env, 0)
        zk = f"127.0.0.1:{port}"
        print(f"CLI and node start-up: commands run as `{sys.executable} -m cli ...` from {REPO}")
        print(
            f"(as the tests run them), median of {args.runs}; embedded ZooKeeper {zk}; {os.cpu_count()} CPUs"
        )
        print(f"project bytecode: {_bytecode(env)}")
        bare = _median([sys.executable, "-c", "pass"], env, 0, args.runs)
        print(f"{'python -c pass (bare interpreter)':<36} {bare * 1000:7.1f} ms")
        for label, cmd, expect in COMMANDS:
            took = _median([*cli, *cmd], env, expect, args.runs)
            met = took < COMMAND_TARGET_S and took < BARE_RATIO_TARGET * bare
            ok &= met
            print(
                f"{label:<36} {took * 1000:7.1f} ms  {took / COMMAND_TARGET_S:5.2f} of the 250 ms target, "
                f"{took / bare:5.1f}x bare (target < {BARE_RATIO_TARGET:g}x): {_verdict(met)}"
            )
        for label, options in (("node, 50 shards (default)", {}), ("node, tests' settings", TEST_DEFAULTS)):
            ready = statistics.median(
                _node_ready(f"{zk}/bench-node-{time.time_ns()}", env, options) for _ in range(args.node_runs)
            )
            met = ready < NODE_TARGET_S
            ok &= met
            shown = ", ".join(f"{k}={v}" for k, v in options.items()) or "no options"
            print(
                f"{label:<36} {ready * 1000:7.1f} ms  {ready / NODE_TARGET_S:5.2f} of the 600 ms target "
                f"(spawn to 'listening on', median of {args.node_runs}; {shown}): {_verdict(met)}"
            )
        if args.spark_runs:
            ok &= _spark(env, args.spark_runs)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        ok = False
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the clean-up is not interrupted again
        subprocess.run([*cli, "zk", "stop"], cwd=REPO, env=env, capture_output=True)
        shutil.rmtree(home, ignore_errors=True)
    print(
        f"targets (commands < 250 ms and < {BARE_RATIO_TARGET:g}x bare, node < 0.6 s, Spark driver CPU "
        f"<= {SPARK_CPU_RATIO_TARGET:g}x without the archive): {_verdict(ok)}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
