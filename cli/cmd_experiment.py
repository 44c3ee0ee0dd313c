"""`groupshift experiment list | run NAME|all | chaos`: the comparison experiments on real ZooKeeper
in containers (built from the local image), with results.json, plots and REPORT.md.

Ctrl-C or SIGTERM to `run` or `chaos` stops every worker process, coordinator node and ZooKeeper
container the command started (the `Lab`'s cleanup, `experiments/harness.py`) and exits with
128 + the signal's number and one line on stderr; a second signal during that cleanup is ignored."""

from __future__ import annotations

import contextlib
import json
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import click

from cli.main import main
from core.errors import GroupshiftError
from core.scheme import Scheme


@main.group("experiment")
def experiment() -> None:
    """Compare the three rebalance schemes on real ZooKeeper (Docker containers from the local image)."""


@experiment.command("list")
def list_() -> None:
    """The scenarios, one line each."""
    from experiments.scenarios import SCENARIOS

    width = max(len(n) for n in SCENARIOS)
    for name, scenario in SCENARIOS.items():
        click.echo(f"{name:<{width}}  {scenario.description.split('. ')[0].rstrip('.')}")
    click.echo(f"{'chaos':<{width}}  random faults under load (`groupshift experiment chaos`)")


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; raised in the main thread so every `finally` and `with` runs."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def _stop_on_signals():
    """SIGINT and SIGTERM raise `Interrupted` in the main thread, once: later ones are ignored until
    the block is left (so they cannot cut the cleanup short). On leaving after an interruption:
    one line on stderr, exit 128 + the signal's number."""
    caught: list[int] = []

    def handler(signum, frame):
        if caught:
            return
        caught.append(signum)
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        caught = caught or [signal.SIGINT]
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if caught:
        name = signal.Signals(caught[0]).name
        click.echo(
            f"error: interrupted by {name}: stopped every member, coordinator node and container "
            "this run started",
            err=True,
        )
        sys.exit(128 + caught[0])


def _schemes(value: str) -> list[str]:
    names = [s.strip() for s in value.split(",") if s.strip()]
    bad = [s for s in names if s not in Scheme.names()]
    if bad or not names:
        raise click.BadParameter(f"{', '.join(bad) or value!r}: schemes are {', '.join(Scheme.names())}")
    return list(dict.fromkeys(names))


def _out_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise click.BadParameter(f"{path} exists and is not a directory", param_hint="--out")
    parent = path.resolve().parent
    if not parent.is_dir():
        raise click.BadParameter(f"{parent} does not exist", param_hint="--out")
    return path


_out = click.option(
    "--out",
    type=click.Path(path_type=Path, file_okay=False),
    required=True,
    help="Directory for results.json, REPORT.md, plots/ and logs/ (created; earlier results are replaced).",
)
_scheme = click.option(
    "--scheme",
    "schemes",
    default=",".join(s.value for s in Scheme.defaults()),
    show_default=True,
    help="Comma-separated schemes; kafka-classic and kafka-consumer (librdkafka members through the "
    "nodes' Kafka listeners) only when named.",
)


@experiment.command("run")
@click.argument("name")
@_out
@click.option(
    "--quick", is_flag=True, help="Small groups and N up to 8: every scenario in about two minutes."
)
@_scheme
def run(name: str, out: Path, quick: bool, schemes: str) -> None:
    """Run scenario NAME (several: comma-separated; or `all`) for every scheme; writes results, plots
    and a report to --out."""
    from experiments.scenarios import SCENARIOS

    names = list(SCENARIOS) if name == "all" else list(dict.fromkeys(n.strip() for n in name.split(",")))
    for bad in [n for n in names if n not in SCENARIOS]:
        raise GroupshiftError(f"no scenario {bad!r}; `groupshift experiment list` shows them")
    chosen = _schemes(schemes)
    out = _out_dir(out)
    from experiments.runner import run_experiments

    with _stop_on_signals():
        results = run_experiments(names, out, quick=quick, schemes=chosen)
    click.echo(f"{'scenario':<20} wall s")
    for scenario, body in results["scenarios"].items():
        status = f"  error: {body['error']}" if "error" in body else ""
        click.echo(f"{scenario:<20} {body.get('wall_s', '-'):>6}{status}")
    click.echo(f"{'total':<20} {results['wall_s']:>6}")
    click.echo(f"report: {out / 'REPORT.md'}")


@experiment.command("chaos")
@click.option("--scheme", "schemes", required=True, help="Comma-separated schemes, e.g. two,three-eager.")
@click.option(
    "--duration", default="5m", show_default=True, help="How long faults are injected: 90s, 5m, 1h."
)
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=1, show_default=True)
@click.option(
    "--drain-timeout",
    default=None,
    help="How long the groups may take to drain once the faults end, then the run reports what did "
    "not drain and stops: 90s, 5m (default: 60 s + half the duration, at most 15m; 1s to 1h).",
)
@_out
def chaos(schemes: str, duration: str, seed: int, drain_timeout: str | None, out: Path) -> None:
    """Random joins, leaves, kills, pauses, coordinator and ZooKeeper restarts under load.

    Exits 1 when a coordinator scheme lost a record, committed an output twice, let two owners
    commit one partition, did not drain before the drain timeout or left a member unrecovered;
    scheme one's figures are reported, not judged.
    """
    from experiments.chaos import default_drain_timeout, parse_duration

    chosen = _schemes(schemes)
    try:
        seconds = parse_duration(duration)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--duration") from None
    try:
        drain_s = default_drain_timeout(seconds) if drain_timeout is None else parse_duration(drain_timeout)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--drain-timeout") from None
    out = _out_dir(out)
    from experiments.chaos import run_chaos
    from experiments.harness import Lab, RunSettings
    from experiments.runner import stderr_progress, versions

    start = time.monotonic()
    started = datetime.now(UTC).isoformat(timespec="seconds")
    show = stderr_progress(start)
    settings = RunSettings(workers=3, partitions=6)
    kafka = settings if any(Scheme(s).kafka for s in chosen) else None
    with _stop_on_signals(), Lab(out, kafka=kafka) as lab:
        show(
            f"chaos: {', '.join(chosen)} for {seconds:g}s, seed {seed}, on a 3-node ensemble "
            f"(namespace {lab.namespace}, drain timeout {drain_s:g}s)"
        )
        result = run_chaos(lab, chosen, seconds, seed, settings, progress=show, drain_timeout_s=drain_s)
        result["versions"] = versions(lab, "ensemble")
    result["wall_s"] = round(time.monotonic() - start, 1)
    result["started"] = started
    (out / "chaos.json").write_text(json.dumps(result, indent=1, default=str))
    from experiments.report import write_report

    actions = [a for a in result["actions"] if a[2] != "skipped" and not a[2].startswith("skipped")]
    chaos_view = {
        s: {**f, "duration_s": seconds, "seed": seed, "actions": actions}
        for s, f in result["schemes"].items()
    }
    write_report({**{k: result[k] for k in ("versions", "wall_s", "started")}, "chaos": chaos_view}, out)
    failed = False
    head = (
        "scheme",
        "records",
        "lost",
        "dup. committed",
        "2-owner parts",
        "drain s",
        "behind",
        "unrecovered",
    )
    click.echo("{:<18} {:>8} {:>5} {:>14} {:>13} {:>7} {:>7} {:>11}".format(*head))
    for scheme, f in result["schemes"].items():
        drain = "-" if f["time_to_drain_s"] is None else f"{f['time_to_drain_s']:g}"
        click.echo(
            f"{scheme:<18} {f['records']:>8} {f['lost']:>5} {f['duplicate_committed']:>14} "
            f"{len(f['two_owner_partitions']):>13} {drain:>7} {sum(f['not_drained'].values()):>7} "
            f"{len(f['unrecovered']):>11}" + (f"  FAILED: {'; '.join(f['verdict'])}" if f["verdict"] else "")
        )
        failed = failed or bool(f["verdict"])
    click.echo(f"results: {out / 'chaos.json'}, report: {out / 'REPORT.md'}")
    if failed:
        sys.exit(1)
