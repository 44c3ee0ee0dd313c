"""`groupshift consume`: a Spark consumer (PySpark) that is a member of a group under any scheme."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import click

from cli.main import main, zk_option
from core.scheme import Rebalancer
from pipeline.limits import MAX_RECORDS_PER_BATCH


@main.command("consume")
@zk_option
@click.option("--group", required=True, help="The consumer group.")
@click.option("--topic", "topics", multiple=True, required=True, help="A topic to consume (repeatable).")
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Output directory: <out>/<topic>/partition=<p>/offsets=<start>-<end>/ per batch and partition.",
)
@click.option(
    "--rebalancer",
    type=click.Choice(Rebalancer.names()),
    default=Rebalancer.ZK.value,
    show_default=True,
    help="zk: scheme one (Kafka 0.8); server: scheme two (the coordinator assigns); "
    "coordinator: scheme three.",
)
@click.option("--incremental", is_flag=True, help="With --rebalancer server: the incremental form (KIP-848).")
@click.option(
    "--bootstrap", default=None, metavar="HOST:PORT,...", help="Coordinator nodes (default: from ZooKeeper)."
)
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Log root (default: $GROUPSHIFT_DATA, else $GROUPSHIFT_HOME/data).",
)
@click.option(
    "--transform", default=None, metavar="MODULE:FUNCTION", help="DataFrame -> DataFrame applied per batch."
)
@click.option(
    "--max-records-per-batch",
    type=click.IntRange(1, MAX_RECORDS_PER_BATCH),
    default=100_000,
    show_default=True,
)
@click.option(
    "--until-idle",
    type=click.FloatRange(0.1, 86_400),
    default=None,
    metavar="SECONDS",
    help="Stop once nothing was left to read for this long, counted while the group has settled the "
    "assignment (default: run until Ctrl-C or SIGTERM).",
)
def consume(
    zk,
    group,
    topics,
    out,
    rebalancer,
    incremental,
    bootstrap,
    data,
    transform,
    max_records_per_batch,
    until_idle,
):
    """Consume TOPICs as a member of GROUP with Spark: plan offset ranges of the owned partitions,
    read them with Spark's Parquet reader, apply --transform, write each range under a name of its
    own (a replay overwrites it), and commit fenced by the generation. Switching --rebalancer
    changes nothing else. Progress on stderr; a summary at the end."""
    from core.errors import GroupshiftError
    from pipeline.spark import load_transform, spark_session
    from pipeline.spark.loop import SparkConsumer

    if incremental and Rebalancer(rebalancer) is not Rebalancer.SERVER:
        raise GroupshiftError(
            "--incremental is scheme two's incremental form: use it with --rebalancer server"
        )
    fn = load_transform(transform)  # a bad MODULE:FUNCTION fails before anything starts
    if data is None:  # the log root from the environment is checked as --data is, before Spark starts
        from topics.log import default_root

        data = default_root()
    stop = {"now": False}

    def on_signal(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    from core.embedded import groupshift_home

    spark = spark_session(f"groupshift-consume-{group}", jvm_log=groupshift_home() / "spark.log")
    job = SparkConsumer(
        spark,
        group,
        list(topics),
        out=out,
        transform=fn,
        max_records_per_batch=max_records_per_batch,
        rebalancer=rebalancer,
        incremental=incremental,
        zk=zk,
        log_root=data,
        bootstrap=bootstrap,
    )
    idle_since = [time.monotonic()]
    shown = [None]  # the assignment last shown

    def done() -> bool:
        if stop["now"]:
            return True
        if job.consumer.rebalance_in_progress:
            # Not idle while the group decides who reads what: a consumer waiting for its first
            # assignment has nothing to read only because it owns nothing yet.
            idle_since[0] = time.monotonic()
        if job.progress.assignment != shown[0] and job.progress.assignment:
            show(None, job.progress)  # a rebalance's outcome is shown at once, before a batch
        return (
            until_idle is not None
            and job.progress.lag == 0
            and time.monotonic() - idle_since[0] >= until_idle
        )

    def show(batch, progress) -> None:
        if batch is not None:
            idle_since[0] = time.monotonic()
        shown[0] = progress.assignment
        line = (
            f"\r{progress.records:,} records  {progress.rate:,.0f}/s  lag {progress.lag:,}  "
            f"batches {progress.batches} (abandoned {progress.abandoned})  "
            f"assignment {len(progress.assignment)} partitions"
        )
        if sys.stderr.isatty():
            click.echo(line, err=True, nl=False)
        else:
            click.echo(line.lstrip("\r"), err=True)

    try:
        progress = job.run(done, on_batch=show)
    except KeyboardInterrupt:
        progress = job.progress
    finally:
        job.close()
    if sys.stderr.isatty():
        click.echo(err=True)
    seconds = time.monotonic() - progress.started
    click.echo(
        f"consumed {progress.records:,} records in {progress.batches} batches "
        f"({progress.abandoned} abandoned) in {seconds:.1f} s, {progress.rate:,.0f} records/s; "
        f"output in {out}"
    )
