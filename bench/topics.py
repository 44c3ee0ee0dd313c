"""Data-plane benchmark: produce and fetch throughput, end-offset lookup with 1,000 segments.

Run on demand:  .venv/bin/python -m bench.topics [--records 1000000] [--dir /tmp/x]

* produce: records/s for batches of 10k records with 100-byte values (Arrow tables in, appended
  to the active segment, rolled to Parquet every 100k records), to one partition and keyed over 8
  partitions (Kafka's partitioner);
* fetch: records/s through the pipelined `Fetcher` into Python — each poll hands out Arrow
  batches and the loop touches every record's offset and value length (vectorised), so all
  records really crossed into the caller; a second figure converts to Python objects;
* end offset: `Log.latest()` on a partition with 1,000 segments — cold (new Log: list the
  directory, read the newest footer) and warm (cached);
* small appends: 2,000 produce calls of 10 records (a small Arrow table, as the experiments'
  producer sends, and Python tuples) against one 20,000-record call: write records/s, read-back
  records/s through `Log.read` in a new Log, and the files the partition holds (an active
  segment is three: index, keys, values).

Targets (issue 4): produce >= 500k records/s, fetch >= 1M records/s on one core. Issue 27: small
appends written at >= 100k records/s and read at >= 50 % of the one-batch read rate.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402

from core.types import TopicPartition  # noqa: E402
from topics.fetcher import Fetcher, records  # noqa: E402
from topics.log import Log  # noqa: E402

BATCH = 10_000
VALUE = 100


def make_batches(n_batches: int, keyed: bool) -> list[pa.Table]:
    rng = np.random.default_rng(1)
    out = []
    for b in range(n_batches):
        values = pa.FixedSizeBinaryArray.from_buffers(
            pa.binary(VALUE), BATCH, [None, pa.py_buffer(rng.bytes(BATCH * VALUE))]
        ).cast(pa.binary())
        cols = {"value": values}
        if keyed:
            cols["key"] = pa.array([b"user-%d" % (i % 5000) for i in range(b * BATCH, (b + 1) * BATCH)])
        out.append(pa.table(cols))
    return out


def bench_produce(root: Path, total: int) -> dict[str, float]:
    log = Log(root)
    log.create("p1", 1)
    log.create("p8", 8)
    n = total // BATCH
    results = {}
    for name, topic, keyed, partition in (
        ("one partition", "p1", False, 0),
        ("keyed, 8 partitions", "p8", True, None),
    ):
        batches = make_batches(n, keyed)
        t = time.perf_counter()
        for batch in batches:
            log.produce(topic, batch, partition)
        dt = time.perf_counter() - t
        results[name] = n * BATCH / dt
    return results


def bench_fetch(root: Path, total: int, max_poll_records: int) -> dict[str, float]:
    log = Log(root)
    tp = TopicPartition("p1", 0)
    assert log.latest(tp) >= total
    out = {}
    with Fetcher(log, max_poll_records=max_poll_records, auto_offset_reset="earliest") as f:
        f.assign({tp})
        t = time.perf_counter()
        n = value_bytes = last = 0
        while n < total:
            for _, batch in f.poll(1.0).items():
                n += batch.num_rows
                value_bytes += pc.sum(pc.binary_length(batch.column("value"))).as_py()
                last = batch.column("offset")[-1].as_py()
        dt = time.perf_counter() - t
        assert last == n - 1 and value_bytes == n * VALUE
        out[f"Arrow batches, max_poll_records={max_poll_records}"] = n / dt
    sample = min(total, 200_000)
    with Fetcher(log, max_poll_records=max_poll_records, auto_offset_reset="earliest") as f:
        f.assign({tp})
        t = time.perf_counter()
        n = 0
        while n < sample:
            for tp_, batch in f.poll(1.0).items():
                n += len(records(tp_, batch))
        out["Python ConsumerRecord objects"] = n / (time.perf_counter() - t)
    return out


def bench_end_offset(root: Path, segments: int = 1000) -> dict[str, float]:
    log = Log(root, segment_records=10)  # every 10-record produce fills a segment: Parquet
    log.create("many", 1)
    tp = TopicPartition("many", 0)
    one = pa.table({"value": [b"x" * VALUE] * 10})
    for _ in range(segments):
        log.produce("many", one, 0)
    assert len(log.segments(tp)) == segments
    time.sleep(1.1)  # let the directory's mtime age past the racy window, as on a quiet partition
    cold = []
    for _ in range(20):
        fresh = Log(root)
        t = time.perf_counter()
        end = fresh.latest(tp)
        cold.append(time.perf_counter() - t)
        assert end == segments * 10
    warm_log = Log(root)
    warm_log.latest(tp)
    t = time.perf_counter()
    reps = 10_000
    for _ in range(reps):
        warm_log.latest(tp)
    warm = (time.perf_counter() - t) / reps
    return {"cold (list + newest footer)": statistics.median(cold), "warm (cached)": warm}


SMALL_CALLS = 2_000
SMALL = 10
READ_RECORDS = 5_000


def bench_small_appends(root: Path) -> dict[str, tuple[float, float, int]]:
    """{case: (write records/s, read records/s, files in the partition)}."""
    rng = np.random.default_rng(2)
    values = [rng.bytes(VALUE) for _ in range(SMALL)]
    table = pa.table({"value": pa.array(values, pa.binary())})
    tuples = [(b"user-%d" % i, v) for i, v in enumerate(values)]
    total = SMALL_CALLS * SMALL
    big = pa.table({"value": pa.array(values * SMALL_CALLS, pa.binary())})
    out = {}
    for name, calls, options in (
        # A whole segment's worth goes straight to Parquet: the one-batch case the issue measured.
        ("one call of 20,000, Parquet", [big], {"segment_records": total}),
        ("one call of 20,000, active segment", [big], {}),
        ("2,000 calls of 10, Arrow table", [table] * SMALL_CALLS, {}),
        ("2,000 calls of 10, Python tuples", [tuples] * SMALL_CALLS, {}),
    ):
        log = Log(root, **options)
        topic = f"small-{len(out)}"
        log.create(topic, 1)
        t = time.perf_counter()
        for call in calls:
            log.produce(topic, call, 0)
        write = total / (time.perf_counter() - t)
        tp = TopicPartition(topic, 0)
        reader = Log(root)  # caches of its own: lists, parses and decodes everything
        t = time.perf_counter()
        n = offset = 0
        while offset < total:
            batch, offset = reader.read(tp, offset, READ_RECORDS)
            n += batch.num_rows
        read = n / (time.perf_counter() - t)
        assert n == total and log.latest(tp) == total
        files = sum(1 for f in os.listdir(log.partition_dir(tp)) if f.startswith("segment-"))
        out[name] = (write, read, files)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument(
        "--dir", type=Path, default=None, help="Where to write (default: a temp dir, removed after)."
    )
    args = ap.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="groupshift-bench-"))
    try:
        print(
            f"groupshift topics benchmark — {args.records:,} records, values {VALUE} B, batches of {BATCH:,}"
        )
        print(
            f"pyarrow {pa.__version__}, python {sys.version.split()[0]}, {os.cpu_count()} CPUs, root {root}"
        )
        for name, rate in bench_produce(root / "log", args.records).items():
            note = "(target >= 500,000)" if name == "one partition" else "(8 appends per 10k batch)"
            print(f"produce  {name:<40} {rate:>12,.0f} records/s   {note}")
        for mpr in (500, 10_000):
            for name, rate in bench_fetch(root / "log", args.records, mpr).items():
                if "Python" in name and mpr != 10_000:
                    continue
                note = "" if "Python" in name else "(target >= 1,000,000)"
                print(f"fetch    {name:<40} {rate:>12,.0f} records/s   {note}")
        for name, secs in bench_end_offset(root / "ends").items():
            print(f"latest() 1,000 segments, {name:<24} {secs * 1e6:>10,.1f} µs")
        small = bench_small_appends(root / "small")
        parquet_read = small["one call of 20,000, Parquet"][1]
        active_read = small["one call of 20,000, active segment"][1]
        for name, (write, read, files) in small.items():
            line = (
                f"small    {name:<40} {write:>12,.0f} records/s written, {read:>11,.0f} read,"
                f" {files} file{'s' if files != 1 else ''}"
            )
            if name.startswith("2,000"):
                line += (
                    f"   (write {write / 100_000:.1f}x the 100k target; read {read / parquet_read:.0%} of"
                    f" the Parquet one-call rate, {read / active_read:.0%} of the active one-call rate)"
                )
            print(line)
    finally:
        if args.dir is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
