"""`groupshift topics create|add-partitions|describe|list|delete|produce|tail|retain`: the data plane.

Every count has a bound (topics/limits.py, listed in docs/topics.md and shown by --help); input
is checked before anything is written, and commands that only read never create anything.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import click

from cli.main import main, zk_option
from core.types import TopicPartition
from topics import limits as L

if TYPE_CHECKING:
    import pyarrow as pa

data_option = click.option(
    "--data",
    "data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Log root directory (default: $GROUPSHIFT_DATA, else $GROUPSHIFT_HOME/data).",
)


def _topic_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    # Checked while parsing, before anything connects or reads; `InvalidTopic` exits 1.
    from topics.registry import validate_topic_name

    return validate_topic_name(value)


topic_argument = click.argument("topic", callback=_topic_name)


@contextlib.contextmanager
def _store(zk: str | None, data: Path | None, *, writes_chroot: bool = False):
    """A `TopicStore` on `--zk`; the chroot must exist unless the command may create it (`create`)."""
    from core.zk import connect
    from topics.store import TopicStore

    client = connect(zk, create_chroot=False, require_chroot=not writes_chroot)
    try:
        yield TopicStore(data, client)
    finally:
        client.stop()
        client.close()


@main.group("topics")
def topics_group() -> None:
    """Topics: partitioned Parquet logs, registered in ZooKeeper as Kafka 0.8 did (/brokers/topics)."""


@topics_group.command("create")
@topic_argument
@click.option(
    "--partitions",
    "-p",
    type=click.IntRange(1, L.MAX_PARTITIONS),
    required=True,
    help="Number of partitions.",
)
@click.option(
    "--replication-factor",
    "-r",
    type=click.IntRange(1, L.MAX_REPLICATION_FACTOR),
    default=1,
    show_default=True,
    help="Replicas per partition (at most the registered brokers).",
)
@zk_option
@data_option
def create(topic: str, partitions: int, replication_factor: int, zk, data) -> None:
    """Create TOPIC: its log directories, then /brokers/topics/TOPIC in ZooKeeper (all or nothing)."""
    from core.zk import ensure_chroot

    with _store(zk, data, writes_chroot=True) as store:
        store.check_create(topic, partitions, replication_factor)
        ensure_chroot(zk)  # only now that the input is known to be good
        info = store.create_topic(topic, partitions, replication_factor)
    click.echo(
        f"created topic {info.name} with {len(info.partitions)} partitions in {store.log.root / topic}"
    )


@topics_group.command("add-partitions")
@topic_argument
@click.option(
    "--partitions",
    "-p",
    type=click.IntRange(1, L.MAX_PARTITIONS),
    required=True,
    help="The new (larger) number of partitions.",
)
@zk_option
@data_option
def add_partitions(topic: str, partitions: int, zk, data) -> None:
    """Grow TOPIC to --partitions partitions (fires scheme one's data watch)."""
    with _store(zk, data) as store:
        info = store.add_partitions(topic, partitions)
    click.echo(f"topic {info.name} now has {len(info.partitions)} partitions")


@topics_group.command("describe")
@topic_argument
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@zk_option
@data_option
def describe(topic: str, as_json: bool, zk, data) -> None:
    """Show TOPIC's partitions: replicas (from ZooKeeper), earliest/latest offsets, segments, bytes."""
    with _store(zk, data) as store:
        info = store.describe(topic)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "topic": info.name,
                    "registered": info.registered,
                    "partitions": [p.__dict__ | {"replicas": list(p.replicas)} for p in info.partitions],
                }
            )
        )
        return
    reg = "registered" if info.registered else "NOT registered in ZooKeeper"
    click.echo(
        f"Topic: {info.name}\tPartitionCount: {len(info.partitions)}\tRecords: {info.records}\t({reg})"
    )
    for p in info.partitions:
        replicas = ",".join(map(str, p.replicas)) or "-"
        click.echo(
            f"\tPartition: {p.partition}\tReplicas: {replicas}\tEarliest: {p.earliest}\tLatest: {p.latest}"
            f"\tSegments: {p.segments}\tBytes: {p.bytes}"
        )


@topics_group.command("list")
@zk_option
@data_option
def list_(zk, data) -> None:
    """List topics (registered in ZooKeeper or present in the log root)."""
    with _store(zk, data) as store:
        for name in store.list_topics():
            click.echo(name)


@topics_group.command("delete")
@topic_argument
@zk_option
@data_option
def delete(topic: str, zk, data) -> None:
    """Delete TOPIC's registration and all its data.

    Refused (nothing deleted) unless TOPIC is registered in the --zk namespace and its data
    directory was created for that registration.
    """
    with _store(zk, data) as store:
        store.delete_topic(topic)
    click.echo(f"deleted topic {topic}")


@topics_group.command("produce")
@topic_argument
@click.option(
    "--file",
    "-f",
    "file",
    type=click.File("rb"),
    help=f"One record per line ('-' for stdin); read whole (at most {L.MAX_FILE_BYTES >> 20} MiB, "
    f"lines of at most {L.MAX_RECORD_BYTES >> 10} KiB) before anything is written.",
)
@click.option(
    "--count",
    "-n",
    type=click.IntRange(1, L.MAX_PRODUCE_COUNT),
    help="Produce N generated records instead of a file.",
)
@click.option(
    "--partition",
    type=click.IntRange(0, L.MAX_PARTITIONS - 1),
    default=None,
    help="Target partition (default: by key, Kafka's partitioner).",
)
@click.option(
    "--key-separator",
    default=None,
    help="--file: split each line into KEY<SEP>VALUE at the first SEP (a line without SEP is refused).",
)
@click.option(
    "--keys",
    type=click.IntRange(0, L.MAX_KEYS),
    default=None,
    help="--count: use K distinct keys key-<i%K> (default 0: null keys).",
)
@click.option(
    "--value-size",
    type=click.IntRange(1, L.MAX_RECORD_BYTES),
    default=None,
    help="--count: pad values to this many bytes (default 100).",
)
@click.option(
    "--batch-size",
    type=click.IntRange(1, L.MAX_BATCH_RECORDS),
    default=10_000,
    show_default=True,
    help=f"Records per produce call (a generated batch holds at most {L.MAX_BATCH_BYTES >> 20} MiB).",
)
@data_option
def produce(topic, file, count, partition, key_separator, keys, value_size, batch_size, data) -> None:
    """Append records to TOPIC from --file (a record per line) or --count generated records."""
    import pyarrow as pa

    from topics.arrow import binary_array
    from topics.errors import UnknownPartition
    from topics.log import Log

    if (file is None) == (count is None):
        raise click.UsageError("give exactly one of --file or --count")
    if file is not None and (keys is not None or value_size is not None):
        raise click.UsageError("--keys and --value-size apply to --count only")
    if count is not None and key_separator is not None:
        raise click.UsageError("--key-separator applies to --file only")
    if key_separator is not None and not key_separator:
        raise click.BadParameter("must not be empty", param_hint="'--key-separator'")
    log = Log(data)
    num_partitions = log.partitions(topic)  # UnknownTopic before reading any input
    if partition is not None and partition >= num_partitions:
        raise UnknownPartition(TopicPartition(topic, partition), num_partitions)
    sep = key_separator.encode() if key_separator else None
    lines = _read_records(file, sep) if file is not None else None
    totals: dict[int, list[int]] = {}
    started = time.perf_counter()

    def send(table: pa.Table) -> None:
        for r in log.produce(topic, table, partition):
            t = totals.setdefault(r.partition, [r.base_offset, 0])
            t[1] += r.count

    if count is not None:
        keys = keys or 0
        value_size = value_size or 100
        batch_size = max(1, min(batch_size, L.MAX_BATCH_BYTES // value_size))
        for start in range(0, count, batch_size):
            n = min(batch_size, count - start)
            idx = range(start, start + n)
            values = [f"record-{i}".encode().ljust(value_size, b".") for i in idx]
            cols = {"value": binary_array(values)}
            if keys:
                cols["key"] = binary_array([f"key-{i % keys}".encode() for i in idx])
            send(pa.table(cols))
    else:
        for start in range(0, len(lines), batch_size):
            batch_k: list[bytes | None] = []
            batch_v: list[bytes] = []
            for line in lines[start : start + batch_size]:
                if sep is not None:  # _read_records saw it in every line
                    k, _, v = line.partition(sep)
                else:
                    k, v = None, line
                batch_k.append(k)
                batch_v.append(v)
            send(pa.table({"key": binary_array(batch_k), "value": binary_array(batch_v)}))
    elapsed = time.perf_counter() - started
    n = sum(c for _, c in totals.values())
    for p in sorted(totals):
        base, c = totals[p]
        click.echo(f"partition {p}: {c} records at offsets {base}..{base + c - 1}")
    click.echo(f"produced {n} records to {topic} in {elapsed:.2f}s")


def _read_records(file, sep: bytes | None = None) -> list[bytes]:
    """The lines of --file, each checked before anything is written: against the record bound,
    and with --key-separator SEP for a SEP in it (Kafka's console producer with parse.key=true
    refuses a line without its key separator too)."""
    name = getattr(file, "name", "-")
    raw = file.read(L.MAX_FILE_BYTES + 1)
    if len(raw) > L.MAX_FILE_BYTES:
        raise click.BadParameter(
            f"{name} is larger than {L.MAX_FILE_BYTES >> 20} MiB; split it and produce the parts in turn",
            param_hint="'--file'",
        )
    lines = [line.rstrip(b"\r") for line in raw.split(b"\n")]
    if lines and lines[-1] == b"":
        lines.pop()  # the newline that ends the last line
    if not lines:
        raise click.BadParameter(f"{name} holds no records (one record per line)", param_hint="'--file'")
    for i, line in enumerate(lines, 1):
        if len(line) > L.MAX_RECORD_BYTES:
            raise click.BadParameter(
                f"line {i} of {name} is {len(line)} bytes; a record holds at most {L.MAX_RECORD_BYTES}",
                param_hint="'--file'",
            )
        if sep is not None and sep not in line:
            raise click.BadParameter(
                f"line {i} of {name} has no key separator {sep.decode(errors='replace')!r}; "
                "write every line as KEY<SEP>VALUE, or drop --key-separator for null keys",
                param_hint="'--file'",
            )
    return lines


@topics_group.command("tail")
@topic_argument
@click.option(
    "--partition",
    "partitions",
    type=click.IntRange(0, L.MAX_PARTITIONS - 1),
    multiple=True,
    help="Only these partitions (repeatable).",
)
@click.option(
    "--lines",
    "-n",
    type=click.IntRange(0, L.MAX_TAIL_LINES),
    default=None,
    help="Start N records before the end of each partition (default 10).",
)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option(
    "--offset",
    type=click.IntRange(0, L.MAX_OFFSET),
    default=None,
    help="Start at this offset in every chosen partition (between its earliest and latest offset).",
)
@click.option("--follow", "-F", is_flag=True, help="Keep printing new records until interrupted.")
@click.option(
    "--limit",
    type=click.IntRange(1, L.MAX_TAIL_LIMIT),
    default=None,
    help="Stop after this many records in all.",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@data_option
def tail(topic, partitions, lines, from_beginning, offset, follow, limit, as_json, data) -> None:
    """Print TOPIC's newest records (through the pipelined fetcher); --follow keeps going."""
    from topics.errors import OffsetOutOfRange
    from topics.fetcher import Fetcher
    from topics.log import Log

    if sum(x is not None and x is not False for x in (lines, offset, from_beginning or None)) > 1:
        raise click.UsageError("give at most one of -n/--lines, --from-beginning, --offset")
    lines = 10 if lines is None else lines
    log = Log(data)
    tps = [TopicPartition(topic, p) for p in (sorted(set(partitions)) or range(log.partitions(topic)))]
    ends = {tp: log.latest(tp) for tp in tps}
    starts = {}
    for tp in tps:
        earliest = log.earliest(tp)
        if offset is not None:
            if not earliest <= offset <= ends[tp]:
                raise OffsetOutOfRange(tp, offset, earliest, ends[tp])
            starts[tp] = offset
        elif from_beginning:
            starts[tp] = earliest
        else:
            starts[tp] = max(earliest, ends[tp] - lines)
    printed = 0
    with Fetcher(log, max_poll_records=10_000, auto_offset_reset="earliest") as fetcher:
        fetcher.assign(tps)
        for tp, start in starts.items():
            fetcher.seek(tp, start)
        while follow or any(fetcher.position(tp) < ends[tp] for tp in tps):
            try:
                polled = fetcher.poll(0.5)
            except KeyboardInterrupt:  # pragma: no cover - interactive
                break
            for tp, batch in sorted(polled.items()):
                if not follow:
                    batch = batch.slice(0, max(0, ends[tp] - batch.column(0)[0].as_py()))
                for rec in _rows(tp, batch):
                    if limit is not None and printed >= limit:
                        return
                    click.echo(json.dumps(rec) if as_json else "\t".join(str(v) for v in rec.values()))
                    printed += 1
            if limit is not None and printed >= limit:
                return


def _rows(tp: TopicPartition, batch: pa.RecordBatch):
    import pyarrow as pa

    ts = batch.column("timestamp").cast(pa.int64()).to_pylist()
    for o, t, k, v in zip(
        batch.column("offset").to_pylist(),
        ts,
        batch.column("key").to_pylist(),
        batch.column("value").to_pylist(),
        strict=True,
    ):
        yield {
            "partition": tp.partition,
            "offset": o,
            "timestamp": datetime.fromtimestamp(t / 1e6, UTC).isoformat(timespec="milliseconds"),
            "key": None if k is None else k.decode("utf-8", "backslashreplace"),
            "value": None if v is None else v.decode("utf-8", "backslashreplace"),
        }


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"{value} is not a finite number", ctx, param)
    return value


@topics_group.command("retain")
@topic_argument
@click.option(
    "--max-age",
    type=click.FloatRange(0, L.MAX_RETAIN_AGE_S, min_open=True),
    callback=_finite,
    default=None,
    help="Delete segments whose newest record is older than this many seconds.",
)
@click.option(
    "--max-segments",
    type=click.IntRange(1, L.MAX_RETAIN_SEGMENTS),
    default=None,
    help="Keep at most this many segments per partition.",
)
@click.option(
    "--max-bytes",
    type=click.IntRange(1, L.MAX_RETAIN_BYTES),
    default=None,
    help="Keep each partition at most this large (bytes).",
)
@data_option
def retain(topic, max_age, max_segments, max_bytes, data) -> None:
    """Apply retention to TOPIC now: delete whole old segments (never the newest)."""
    from topics.log import Log

    if max_age is None and max_segments is None and max_bytes is None:
        raise click.UsageError("give at least one of --max-age, --max-segments, --max-bytes")
    for tp, earliest in (
        Log(data).retain(topic, max_age=max_age, max_segments=max_segments, max_bytes=max_bytes).items()
    ):
        click.echo(f"partition {tp.partition}: earliest offset {earliest}")
