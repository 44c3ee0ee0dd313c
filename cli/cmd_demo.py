"""`groupshift demo`: the same consumers under both rebalancers, on the embedded ZooKeeper by default."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from cli.main import main, zk_option


@main.command("demo")
@zk_option
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, writable=True, path_type=Path),
    default=None,
    help="Directory for the demo's temporary log directory (default: the system temp dir).",
)
@click.option("--partitions", type=click.IntRange(1, 1000), default=6, show_default=True)
@click.option(
    "--records",
    "records_per_partition",
    type=click.IntRange(1, 10_000_000),
    default=20_000,
    show_default=True,
    help="Records produced per partition.",
)
@click.option("--members", type=click.IntRange(1, 100), default=3, show_default=True)
@click.option(
    "--rebalancer",
    "rebalancers",
    type=click.Choice(["zk", "coordinator"]),
    multiple=True,
    help="Run only these schemes (default: both).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Also draw the timings as a PNG here (needs the 'experiments' extra).",
)
def demo(zk, data, partitions, records_per_partition, members, rebalancers, plot) -> None:
    """Fill a topic, consume it as a group under scheme one (ZooKeeper watches, Kafka 0.8) and scheme
    three (group coordinator) with identical consumer code, then let one more member join; print
    times, exactly-once checks, and write $GROUPSHIFT_HOME/demo/results.json.

    The demo works in a ZooKeeper chroot and a log directory of its own (groupshift-demo-<pid>-<id>)
    and deletes both when it ends, also on failure, Ctrl-C or SIGTERM: an operator's topics, groups
    and coordinator nodes on the same ZooKeeper are neither seen nor changed.
    """
    from core.embedded import groupshift_home
    from core.zk import resolve_zk
    from experiments.demo import format_table, run_demo

    if plot is not None:  # fail before the run, not after it, when the extra is missing
        from core.extras import require

        require("matplotlib", "experiments")
    # SIGTERM unwinds like Ctrl-C, so the demo's namespace and processes are cleaned up.
    signal.signal(signal.SIGTERM, _interrupt)
    out = groupshift_home() / "demo" / "results.json"
    results = run_demo(
        resolve_zk(zk),
        data,
        partitions=partitions,
        records_per_partition=records_per_partition,
        members=members,
        rebalancers=tuple(rebalancers) or ("zk", "coordinator"),
        out=out,
    )
    click.echo(format_table(results))
    click.echo(f"results: {out}")
    if plot is not None:
        from experiments.demo import plot as draw

        draw(results, plot)
        click.echo(f"plot: {plot}")
    bad = [r.rebalancer for r in results if r.duplicates or r.missing or not r.committed_at_end]
    if bad:
        raise SystemExit(f"demo found lost, duplicated or uncommitted records under: {', '.join(bad)}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
