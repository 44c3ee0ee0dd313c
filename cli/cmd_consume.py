"""`groupshift consume`: a Spark streaming query (the `groupshift` source) that is a member of a
group under any scheme and writes every record exactly once."""

from __future__ import annotations

import re
import signal
import sys
import time
from pathlib import Path

import click

from cli.main import command_config_option, main, zk_option
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
    "--checkpoint",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Spark's checkpoint location for this query (keep it to restart the query where it was); "
    "default: a new one, removed at exit (the group's offsets still say where to go on).",
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
@command_config_option
@click.option(
    "--data",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Log root, a path every Spark process sees (default: $GROUPSHIFT_DATA, else $GROUPSHIFT_HOME/data).",
)
@click.option(
    "--spark-master",
    default="local[2]",
    show_default=True,
    metavar="URL",
    help="local[N] or spark://HOST:PORT (a standalone cluster; its executors must see --data and --out).",
)
@click.option(
    "--transform", default=None, metavar="MODULE:FUNCTION", help="DataFrame -> DataFrame applied per batch."
)
@click.option(
    "--max-records-per-batch",
    type=click.IntRange(1, MAX_RECORDS_PER_BATCH),
    default=100_000,
    show_default=True,
    help="The source's maxOffsetsPerTrigger.",
)
@click.option(
    "--session-timeout-ms", type=click.IntRange(1_000, 3_600_000), default=10_000, show_default=True
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
    checkpoint,
    rebalancer,
    incremental,
    bootstrap,
    security,
    data,
    spark_master,
    transform,
    max_records_per_batch,
    session_timeout_ms,
    until_idle,
):
    """Consume TOPICs as a member of GROUP with Spark Structured Streaming: the groupshift source
    plans each micro-batch from the partitions the group gives it and the group's offsets, and the
    exactly-once writer stages each range, commits it fenced by the generation, then publishes it.
    Switching --rebalancer changes nothing else. Progress on stderr (Spark's StreamingQueryProgress);
    a summary at the end."""
    import shutil
    import tempfile

    from core.embedded import groupshift_home
    from core.errors import GroupshiftError
    from pipeline.spark import load_transform, spark_session
    from pipeline.spark.options import parse
    from pipeline.spark.session import check_master
    from pipeline.spark.source import check_topics

    if incremental and Rebalancer(rebalancer) is not Rebalancer.SERVER:
        raise GroupshiftError(
            "--incremental is scheme two's incremental form: use it with --rebalancer server"
        )
    fn = load_transform(transform)  # a bad MODULE:FUNCTION fails before anything starts
    if data is None:  # the log root from the environment is checked as --data is, before Spark starts
        from topics.log import default_root

        data = default_root()
    options = {
        "zk": zk,
        "group": group,
        "subscribe": ",".join(topics),
        "rebalancer": rebalancer,
        "logRoot": str(Path(data).resolve()),
        "maxOffsetsPerTrigger": str(max_records_per_batch),
        "sessionTimeoutMs": str(session_timeout_ms),
        "heartbeatIntervalMs": str(max(100, session_timeout_ms // 10)),
        **({"incremental": "true"} if incremental else {}),
        **({"bootstrap": bootstrap} if bootstrap else {}),
        **({"commandConfig": security.path} if security is not None else {}),
    }
    check_topics(parse(options))  # a missing topic is refused before Spark starts
    check_master(spark_master)  # so is a master that does not answer

    stop = {"now": False}

    def on_signal(*_):
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_signal)
    own_checkpoint = checkpoint is None
    if own_checkpoint:
        home = groupshift_home() / "checkpoints"
        home.mkdir(parents=True, exist_ok=True)
        checkpoint = Path(tempfile.mkdtemp(prefix=f"{group}-", dir=home))
    spark = spark_session(
        f"groupshift-consume-{group}", master=spark_master, jvm_log=groupshift_home() / "spark.log"
    )
    from pipeline.spark.query import StreamJob

    job = None
    try:
        job = StreamJob.start(
            spark,
            group,
            list(topics),
            out=Path(out).resolve(),
            checkpoint=Path(checkpoint).resolve(),
            zk=options.pop("zk"),
            rebalancer=rebalancer,
            transform=fn,
            options={k: v for k, v in options.items() if k not in ("group", "subscribe", "rebalancer")},
            name=f"groupshift-{group}",
        )
        _watch(job, stop, until_idle)
    except KeyboardInterrupt:
        pass
    finally:
        if job is not None:
            job.stop()
        spark.stop()
        if own_checkpoint:
            shutil.rmtree(checkpoint, ignore_errors=True)
    progress = job.progress() if job is not None else None
    if sys.stderr.isatty():
        click.echo(err=True)
    if job is not None and job.query.exception() is not None:
        failure = job.query.exception()
        said = _reader_error(failure)  # e.g. ZooKeeper's NoAuth met by the group member
        raise GroupshiftError(said or f"the streaming query failed: {_first_line(failure)}")
    seconds = time.monotonic() - progress.started
    click.echo(
        f"consumed {progress.records:,} records in {progress.batches} batches "
        f"({progress.abandoned} abandoned) in {seconds:.1f} s, {progress.rate:,.0f} records/s; "
        f"output in {out}"
    )


def _watch(job, stop: dict, until_idle: float | None) -> None:
    """Print a line per progress report of the query until stopped, failed or idle."""
    shown = None
    idle_since = time.monotonic()
    from pyspark.errors import StreamingQueryException

    while not stop["now"] and job.query.isActive:
        try:
            job.query.awaitTermination(0.2)
        except StreamingQueryException:
            return  # the query failed: the command says why, in one line
        last = job.query.lastProgress
        progress = job.progress()
        if not progress.settled or (progress.lag or 0) > 0:
            idle_since = time.monotonic()
        if last is not None and last["batchId"] != shown:
            shown = last["batchId"]
            line = (
                f"\rbatch {last['batchId']}: {last['numInputRows']:,} rows  "
                f"{progress.records:,} records committed  {progress.rate:,.0f}/s  lag {progress.lag or 0:,}  "
                f"batches {progress.batches} (abandoned {progress.abandoned})  "
                f"assignment {len(progress.assignment)} partitions"
            )
            if sys.stderr.isatty():
                click.echo(line, err=True, nl=False)
            else:
                click.echo(line.lstrip("\r"), err=True)
        if until_idle is not None and time.monotonic() - idle_since >= until_idle:
            return


# The last line of a Python traceback, `module.Class: message`, of an error raised by our packages.
_RAISED = re.compile(
    r"^((?:core|coordinator|migrate|pipeline|security|topics|zk_rebalance)(?:\.\w+)*)\.(\w+): (\S.*)$"
)
MAX_MESSAGE = 1000


def _reader_error(exc: BaseException) -> str | None:
    """The message of the `GroupshiftError` (an error the user can act on, e.g. ZooKeeper's NoAuth)
    the stream reader raised, which Spark wraps with the reader's whole traceback; None when the
    query failed for another reason."""
    import importlib

    from core.errors import GroupshiftError

    for line in reversed(str(exc).splitlines()):
        m = _RAISED.match(line.strip())
        if not m:
            continue
        try:
            cls = getattr(importlib.import_module(m.group(1)), m.group(2), None)
        except ImportError:
            continue
        if isinstance(cls, type) and issubclass(cls, GroupshiftError):
            return m.group(3)[:MAX_MESSAGE]
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    for line in text:  # Spark wraps a Python error in its own; show the one that says what happened
        if "GroupshiftError" in line or "Error:" in line:
            return line.strip()[:300]
    return (text[0] if text else type(exc).__name__)[:300]
