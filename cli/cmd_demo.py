"""`groupshift demo`: the main job — Spark consumers migrated live from scheme one to scheme three —
or, with `--compare`, the same consumers under each rebalancer side by side."""

from __future__ import annotations

import signal
from pathlib import Path

import click

from cli.main import main, zk_option
from core.scheme import Rebalancer


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
    "--rate",
    type=click.IntRange(100, 1_000_000),
    default=20_000,
    show_default=True,
    help="Main job: records produced per second while it runs.",
)
@click.option(
    "--phase-seconds",
    type=click.FloatRange(1, 600),
    default=8.0,
    show_default=True,
    help="Main job: how long each phase consumes once the group is stable.",
)
@click.option(
    "--spark-master",
    default="local[2]",
    show_default=True,
    metavar="URL",
    help="Main job: local[N] or spark://HOST:PORT (a standalone cluster on this host; its executors "
    "must see --data).",
)
@click.option("--compare", is_flag=True, help="Instead: fill a topic and time each rebalancer side by side.")
@click.option(
    "--records",
    "records_per_partition",
    type=click.IntRange(1, 10_000_000),
    default=20_000,
    show_default=True,
    help="--compare: records produced per partition.",
)
@click.option(
    "--members", type=click.IntRange(1, 100), default=3, show_default=True, help="--compare: members."
)
@click.option(
    "--rebalancer",
    "rebalancers",
    type=click.Choice(Rebalancer.names()),
    multiple=True,
    help="--compare: run only these schemes (default: zk and coordinator).",
)
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="PNG to draw (main job: the ownership timeline, default $GROUPSHIFT_HOME/demo/timeline.png; "
    "--compare: the timings).",
)
def demo(
    zk,
    data,
    partitions,
    rate,
    phase_seconds,
    spark_master,
    compare,
    records_per_partition,
    members,
    rebalancers,
    plot,
):
    """The main job: produce into a topic while Spark consumers read it as one group — two under
    scheme one (Kafka 0.8's ZooKeeper rebalancing), then a third joins — migrate the group live to
    the coordinator (legacy consumers replaced one by one through the bridge), go on under scheme
    three, and drain. Prints each phase's time to a stable group and records/s, checks that the
    output holds every record exactly once, and writes $GROUPSHIFT_HOME/demo/results.json and a PNG
    timeline of partition ownership.

    The demo works in a ZooKeeper chroot and a log directory of its own (groupshift-demo-<pid>-<id>)
    and deletes both when it ends, also on failure, Ctrl-C or SIGTERM: an operator's topics, groups
    and coordinator nodes on the same ZooKeeper are neither seen nor changed.
    """
    from core.embedded import groupshift_home
    from core.extras import require
    from core.zk import resolve_zk

    if plot is not None or not compare:  # fail before the run, not after it, when the extra is missing
        require("matplotlib", "experiments")
    # SIGTERM unwinds like Ctrl-C, so the demo's namespace and processes are cleaned up.
    signal.signal(signal.SIGTERM, _interrupt)
    home = groupshift_home() / "demo"
    if compare:
        _compare(resolve_zk(zk), data, partitions, records_per_partition, members, rebalancers, plot, home)
        return
    from demo.main_job import format_summary, run_main_job
    from pipeline.spark.session import check_master

    check_master(spark_master)  # a master that does not answer is refused before anything starts
    png = plot or home / "timeline.png"
    result = run_main_job(
        resolve_zk(zk),
        data,
        partitions=partitions,
        rate=rate,
        phase_s=phase_seconds,
        spark_master=spark_master,
        out=home / "results.json",
        timeline_png=png,
        say=lambda line: click.echo(line, err=True),
    )
    click.echo(format_summary(result))
    click.echo(f"results: {home / 'results.json'}")
    click.echo(f"timeline: {png}")
    if not result.exactly_once:
        raise SystemExit("the main job's output is not exactly once: see the line above")


def _compare(zk, data, partitions, records_per_partition, members, rebalancers, plot, home: Path) -> None:
    from demo.compare import format_table, run_demo

    out = home / "compare.json"
    results = run_demo(
        zk,
        data,
        partitions=partitions,
        records_per_partition=records_per_partition,
        members=members,
        rebalancers=tuple(rebalancers) or (Rebalancer.ZK, Rebalancer.COORDINATOR),
        out=out,
    )
    click.echo(format_table(results))
    click.echo(f"results: {out}")
    if plot is not None:
        from demo.compare import plot as draw

        draw(results, plot)
        click.echo(f"plot: {plot}")
    bad = [r.rebalancer for r in results if r.duplicates or r.missing or not r.committed_at_end]
    if bad:
        raise SystemExit(f"demo found lost, duplicated or uncommitted records under: {', '.join(bad)}")


def _interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")
