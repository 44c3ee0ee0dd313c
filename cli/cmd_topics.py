"""`groupshift topics create|add-partitions|describe|list|delete|produce|tail|retain`: the data plane."""

from __future__ import annotations

import contextlib
import json
import time
from datetime import UTC, datetime
from pathlib import Path

import click
import numpy as np
import pyarrow as pa

from cli.main import main, zk_option
from core.types import TopicPartition

data_option = click.option(
    "--data",
    "data",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Log root directory (default: $GROUPSHIFT_DATA, else $GROUPSHIFT_HOME/data).",
)


@contextlib.contextmanager
def _store(zk: str | None, data: Path | None, registry: bool = True):
    from core.zk import connect
    from topics.store import TopicStore

    client = connect(zk) if registry else None
    try:
        yield TopicStore(data, client)
    finally:
        if client is not None:
            client.stop()
            client.close()


@main.group("topics")
def topics_group() -> None:
    """Topics: partitioned Parquet logs, registered in ZooKeeper as Kafka 0.8 did (/brokers/topics)."""


@topics_group.command("create")
@click.argument("topic")
@click.option("--partitions", "-p", type=int, required=True, help="Number of partitions.")
@click.option("--replication-factor", "-r", type=int, default=1, show_default=True)
@zk_option
@data_option
def create(topic: str, partitions: int, replication_factor: int, zk, data) -> None:
    """Create TOPIC: its log directories, then /brokers/topics/TOPIC in ZooKeeper."""
    with _store(zk, data) as store:
        info = store.create_topic(topic, partitions, replication_factor)
    click.echo(
        f"created topic {info.name} with {len(info.partitions)} partitions in {store.log.root / topic}"
    )


@topics_group.command("add-partitions")
@click.argument("topic")
@click.option("--partitions", "-p", type=int, required=True, help="The new (larger) number of partitions.")
@zk_option
@data_option
def add_partitions(topic: str, partitions: int, zk, data) -> None:
    """Grow TOPIC to --partitions partitions (fires scheme one's data watch)."""
    with _store(zk, data) as store:
        info = store.add_partitions(topic, partitions)
    click.echo(f"topic {info.name} now has {len(info.partitions)} partitions")


@topics_group.command("describe")
@click.argument("topic")
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
@click.argument("topic")
@zk_option
@data_option
def delete(topic: str, zk, data) -> None:
    """Delete TOPIC's registration and all its data."""
    with _store(zk, data) as store:
        store.delete_topic(topic)
    click.echo(f"deleted topic {topic}")


@topics_group.command("produce")
@click.argument("topic")
@click.option("--file", "-f", "file", type=click.File("rb"), help="One record per line ('-' for stdin).")
@click.option("--count", "-n", type=int, help="Produce N generated records instead of a file.")
@click.option(
    "--partition", type=int, default=None, help="Target partition (default: by key, Kafka's partitioner)."
)
@click.option("--key-separator", default=None, help="Split each line into KEY<SEP>VALUE at the first SEP.")
@click.option(
    "--keys", type=int, default=0, help="Generated records: use K distinct keys key-<i%K> (0: null keys)."
)
@click.option(
    "--value-size", type=int, default=100, show_default=True, help="Generated records: value bytes."
)
@click.option("--batch-size", type=int, default=10_000, show_default=True, help="Records per produce call.")
@data_option
def produce(topic, file, count, partition, key_separator, keys, value_size, batch_size, data) -> None:
    """Append records to TOPIC from --file (a record per line) or --count generated records."""
    from topics.log import Log

    if (file is None) == (count is None):
        raise click.UsageError("give exactly one of --file or --count")
    log = Log(data)
    totals: dict[int, list[int]] = {}
    started = time.perf_counter()

    def send(table: pa.Table) -> None:
        for r in log.produce(topic, table, partition):
            t = totals.setdefault(r.partition, [r.base_offset, 0])
            t[1] += r.count

    if count is not None:
        for start in range(0, count, batch_size):
            n = min(batch_size, count - start)
            idx = np.arange(start, start + n)
            values = [f"record-{i}".encode().ljust(value_size, b".") for i in idx.tolist()]
            cols = {"value": pa.array(values, pa.binary())}
            if keys:
                cols["key"] = pa.array([f"key-{i % keys}".encode() for i in idx.tolist()], pa.binary())
            send(pa.table(cols))
    else:
        sep = key_separator.encode() if key_separator else None
        batch_k: list[bytes | None] = []
        batch_v: list[bytes] = []
        for line in file:
            line = line.rstrip(b"\r\n")
            if sep is not None and sep in line:
                k, _, v = line.partition(sep)
            else:
                k, v = None, line
            batch_k.append(k)
            batch_v.append(v)
            if len(batch_v) >= batch_size:
                send(
                    pa.table({"key": pa.array(batch_k, pa.binary()), "value": pa.array(batch_v, pa.binary())})
                )
                batch_k, batch_v = [], []
        if batch_v:
            send(pa.table({"key": pa.array(batch_k, pa.binary()), "value": pa.array(batch_v, pa.binary())}))
    elapsed = time.perf_counter() - started
    n = sum(c for _, c in totals.values())
    for p in sorted(totals):
        base, c = totals[p]
        click.echo(f"partition {p}: {c} records at offsets {base}..{base + c - 1}")
    click.echo(f"produced {n} records to {topic} in {elapsed:.2f}s")


@topics_group.command("tail")
@click.argument("topic")
@click.option(
    "--partition", "partitions", type=int, multiple=True, help="Only these partitions (repeatable)."
)
@click.option(
    "--lines", "-n", type=int, default=10, show_default=True, help="Start N records before the end."
)
@click.option("--from-beginning", is_flag=True, help="Start at the earliest offset.")
@click.option("--offset", type=int, default=None, help="Start at this offset (in every chosen partition).")
@click.option("--follow", "-F", is_flag=True, help="Keep printing new records until interrupted.")
@click.option("--limit", type=int, default=None, help="Stop after this many records in all.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
@data_option
def tail(topic, partitions, lines, from_beginning, offset, follow, limit, as_json, data) -> None:
    """Print TOPIC's newest records (through the pipelined fetcher); --follow keeps going."""
    from topics.fetcher import Fetcher
    from topics.log import Log

    log = Log(data)
    tps = [TopicPartition(topic, p) for p in (partitions or range(log.partitions(topic)))]
    ends = {tp: log.latest(tp) for tp in tps}
    printed = 0
    with Fetcher(log, max_poll_records=10_000, auto_offset_reset="earliest") as fetcher:
        fetcher.assign(tps)
        for tp in tps:
            earliest = log.earliest(tp)
            if offset is not None:
                start = offset
            elif from_beginning:
                start = earliest
            else:
                start = max(earliest, ends[tp] - lines)
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


@topics_group.command("retain")
@click.argument("topic")
@click.option(
    "--max-age", type=float, default=None, help="Delete segments whose newest record is older (seconds)."
)
@click.option("--max-segments", type=int, default=None, help="Keep at most this many segments per partition.")
@click.option("--max-bytes", type=int, default=None, help="Keep each partition at most this large (bytes).")
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
