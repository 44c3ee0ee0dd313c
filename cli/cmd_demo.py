"""`groupshift demo`: the same consumers under both rebalancers, on the embedded ZooKeeper by default."""

from __future__ import annotations

from pathlib import Path

import click

from cli.main import main, zk_option


@main.command("demo")
@zk_option
@click.option(
    "--data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Log directory (default: $GROUPSHIFT_DATA, else ./.groupshift/data).",
)
@click.option("--partitions", type=click.IntRange(1, 1000), default=6, show_default=True)
@click.option(
    "--records",
    "records_per_partition",
    type=click.IntRange(1),
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
def demo(zk, data, partitions, records_per_partition, members, rebalancers) -> None:
    """Fill a topic, consume it as a group under scheme one (ZooKeeper watches, Kafka 0.8) and scheme
    three (group coordinator) with identical consumer code, then let one more member join; print
    times, exactly-once checks, and write .groupshift/demo/results.json."""
    from core.zk import resolve_zk
    from experiments.demo import format_table, run_demo
    from topics.log import default_root

    data = data or Path(default_root())
    out = Path(".groupshift/demo/results.json")
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
    bad = [r.rebalancer for r in results if r.duplicates or r.missing or not r.committed_at_end]
    if bad:
        raise SystemExit(f"demo found lost, duplicated or uncommitted records under: {', '.join(bad)}")
