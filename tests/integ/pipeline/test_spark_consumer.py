"""Spark consumers on real ZooKeeper: group members under every scheme, exactly-once output.

One SparkSession per test process (`local[2]`); consumers of one test share it from threads.
Run as a script (`python tests/integ/pipeline/test_spark_consumer.py --worker SPEC`) this module is a Spark
consumer process that the crash test kills between writing a batch and committing it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

if __name__ == "__main__":  # the worker process: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import pyarrow.parquet as pq
import pytest

REPO = Path(__file__).resolve().parents[3]

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime"),
    pytest.mark.spark,
]


def options(rebalancer: str, bootstrap: str | None) -> dict:
    opts: dict = {
        "consumer_options": {
            "session_timeout_ms": 6000,
            "heartbeat_interval_ms": 200,
            "max_poll_interval_ms": 60_000,
        }
    }
    if rebalancer == "incremental":
        opts.update(rebalancer="server", incremental=True)
    else:
        opts["rebalancer"] = rebalancer
    if rebalancer == "zk":
        opts["consumer_options"]["membership_options"] = {
            "rebalance_backoff_ms": 200,
            "rebalance_max_retries": 50,
        }
    else:
        opts["bootstrap"] = bootstrap
        opts["consumer_options"]["membership_options"] = {"retry_backoff_ms": 50}
    return opts


def read_output(out: Path, topic: str) -> Counter:
    """(partition, offset) -> how many times the output holds it."""
    from pipeline.spark.output import outputs

    seen: Counter = Counter()
    for p, _, _, d in outputs(out, topic):
        for f in d.glob("*.parquet"):
            for off in pq.read_table(f, columns=["offset"]).column("offset").to_pylist():
                seen[(p, off)] += 1
    return seen


@pytest.fixture(scope="module")
def spark():
    from pipeline.spark import spark_session

    session = spark_session("groupshift-tests")
    yield session


def produce(log, topic: str, partitions: int, per_partition: int) -> None:
    for p in range(partitions):
        for start in range(0, per_partition, 50_000):
            n = min(50_000, per_partition - start)
            log.produce(topic, [(b"k", b"v" * 8)] * n, partition=p)


PER_PARTITION = 10_000


# Scheme one and scheme two's incremental form: the watch-driven rebalance and the coordinator's
# member-by-member one. The Spark consumer reads through pipeline.Consumer, whose joins, leaves and
# exactly-once reads under all four rebalancers are test_consumer's (its `env` fixture); Spark
# consumers under scheme three run in test_demo (the main job's live migration, exactly once) and in
# the consume-command tests below.
@pytest.mark.parametrize("rebalancer", ["zk", "incremental"])
def test_two_spark_consumers_write_every_record_exactly_once(spark, zk, zk_connect, tmp_path, rebalancer):
    from coordinator.node.process import CoordinatorNodes
    from pipeline.spark.loop import SparkConsumer
    from topics.log import Log
    from topics.registry import create_topic

    create_topic(zk, "t", partitions=4)
    log = Log(tmp_path / "log")
    log.create("t", 4)
    produce(log, "t", 4, PER_PARTITION)
    out = tmp_path / "out"
    nodes = CoordinatorNodes(zk_connect, count=1).start() if rebalancer != "zk" else None
    try:
        jobs = [
            SparkConsumer(
                spark,
                "spark-g",
                ["t"],
                out=out,
                log=log,
                zk=zk_connect,
                max_records_per_batch=4_000,  # ten batches: both members get some
                transform=lambda df: df.withColumn("length", df["value"].cast("string")),
                **options(rebalancer, nodes.bootstrap if nodes else None),
            )
            for _ in range(2)
        ]
        done = threading.Event()
        threads = [threading.Thread(target=j.run, args=(done.is_set,), daemon=True) for j in jobs]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            committed = jobs[0].consumer.committed([_tp(p) for p in range(4)])
            if all(committed[_tp(p)] == PER_PARTITION for p in range(4)):
                break
            time.sleep(0.2)
        done.set()
        for t in threads:
            t.join(60)
        shares = [sum(b.records for b in j.history if b.committed) for j in jobs]
        for j in jobs:
            j.close()
    finally:
        if nodes is not None:
            nodes.close()
    seen = read_output(out, "t")
    assert not [k for k, n in seen.items() if n > 1], "a record written twice"
    assert set(seen) == {(p, o) for p in range(4) for o in range(PER_PARTITION)}
    assert all(shares), f"one consumer did all the work: {shares}"


def test_a_range_reads_only_its_segments_partition_and_row_groups(spark, tmp_path):
    from pipeline.spark.segments import read_ranges
    from topics.log import Log

    log = Log(tmp_path / "log", segment_records=50_000)  # a whole segment's worth: Parquet
    log.create("t", 2)
    for p in range(2):
        log.produce("t", [(b"k", b"v")] * 50_000, partition=p)  # a segment of two row groups
        log.produce("t", [(b"k", b"v")] * 50_000, partition=p)  # and another segment
    assert log.segments(_tp(0))[0].row_group_bases == (0, 25_000)
    df = read_ranges(spark, log.root / "t", {0: (22_000, 24_000)})
    offsets = df.select("offset")
    rows = offsets.collect()
    assert sorted(r.offset for r in rows) == list(range(22_000, 24_000))
    plan = offsets._jdf.queryExecution().executedPlan()
    text = plan.toString()
    assert "PartitionFilters: [isnotnull(partition" in text and "= 0)]" in text  # partition pruning
    assert "GreaterThanOrEqual(offset,22000)" in text  # pushed down to the Parquet reader
    scan = plan.collectLeaves().apply(0)
    metrics = {k: scan.metrics().get(k).get().value() for k in ("numFiles", "numOutputRows")}
    # One file of the four (picked by name), one row group of its two (skipped by statistics).
    assert metrics == {"numFiles": 1, "numOutputRows": 25_000}, metrics


def test_a_range_reaching_into_the_active_segment_reads_it_too(spark, tmp_path):
    from pipeline.spark.segments import read_ranges, segment_files
    from topics.log import Log

    log = Log(tmp_path / "log", segment_records=1000)
    log.create("t", 2)
    for p in range(2):
        log.produce("t", [(b"k", b"v%d" % i) for i in range(1000)], partition=p)  # Parquet 0..999
        for i in range(1000, 1050, 10):  # small appends: the active segment at 1000
            log.produce("t", [(b"k", b"v%d" % j) for j in range(i, i + 10)], partition=p)
    assert [s.path.suffix for s in log.segments(_tp(0))] == [".parquet", ".index"]
    assert [f.name for f in segment_files(log.root / "t", 0, 990, 1050)] == [
        "segment-00000000000000000000.parquet"
    ]
    assert segment_files(log.root / "t", 0, 1000, 1050) == []
    df = read_ranges(spark, log.root / "t", {0: (990, 1045), 1: (1010, 1020)})
    rows = df.select("partition", "offset", "value").collect()
    assert sorted((r.partition, r.offset, bytes(r.value)) for r in rows) == [
        (p, o, b"v%d" % o) for p, (s, e) in ((0, (990, 1045)), (1, (1010, 1020))) for o in range(s, e)
    ]


def _tp(p: int):
    from core.types import TopicPartition

    return TopicPartition("t", p)


@pytest.mark.parametrize("dies", ["before committing", "before publishing"])
def test_a_consumer_killed_mid_batch_is_replayed_or_recovered_exactly_once(
    spark, zk, zk_connect, tmp_path, dies
):
    """Killed after staging its batch: before the commit the successor writes the ranges again;
    after the commit (before publishing) the successor publishes the staged output."""
    from pipeline.spark.loop import SparkConsumer
    from pipeline.spark.output import outputs
    from topics.log import Log
    from topics.registry import create_topic

    create_topic(zk, "t", partitions=2)
    log = Log(tmp_path / "log")
    log.create("t", 2)
    produce(log, "t", 2, 30_000)
    out = tmp_path / "out"
    spec = {"zk": zk_connect, "log": str(log.root), "out": str(out), "dies": dies}
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 17, proc.stderr[-2000:]
    staged = list(out.glob("t/partition=*/_staging-*"))
    assert staged and not list(outputs(out, "t")), "the killed consumer staged a batch and published nothing"
    committed_by_the_dead = job_committed(zk_connect, log)
    assert (sum(committed_by_the_dead.values()) > 0) == (dies == "before publishing")
    job = SparkConsumer(
        spark,
        "crash-g",
        ["t"],
        out=out,
        log=log,
        zk=zk_connect,
        max_records_per_batch=25_000,
        **options("zk", None),
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            job.run_batch()
            if job.consumer.committed([_tp(0), _tp(1)]) == {_tp(0): 30_000, _tp(1): 30_000}:
                break
    finally:
        job.close()
    seen = read_output(out, "t")
    assert not [k for k, n in seen.items() if n > 1], "a record written twice"
    assert set(seen) == {(p, o) for p in range(2) for o in range(30_000)}


def test_the_consume_command_under_a_coordinator_and_its_bad_input(zk, zk_connect, tmp_path):
    """`consume --until-idle 1` joins a group whose member holds every partition and takes 3 s to
    answer the rebalance, then leaves: the wait for the first assignment is not idleness, so the
    command reads all 30,000 records (it used to stop after 1 s with none)."""
    from coordinator.node.process import CoordinatorNodes
    from pipeline.consumer import Consumer
    from tests.inspect_helpers import run
    from topics.log import Log
    from topics.registry import create_topic

    create_topic(zk, "t", partitions=3)
    log = Log(tmp_path / "log")
    log.create("t", 3)
    produce(log, "t", 3, 10_000)
    out = tmp_path / "out"
    bad = run(
        "consume",
        "--group",
        "cli-g",
        "--topic",
        "t",
        "--out",
        str(out),
        "--transform",
        "no.such:fn",
        zk=zk_connect,
        data=log.root,
    )
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1 and "no.such:fn" in bad.stderr, bad.stderr
    assert not out.exists()
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        holder = Consumer(
            "cli-g",
            ["t"],
            rebalancer="coordinator",
            zk=zk_connect,
            log=log,
            bootstrap=nodes.bootstrap,
            enable_auto_commit=False,
            heartbeat_interval_ms=200,
            session_timeout_ms=6000,
            max_poll_interval_ms=60_000,
        )
        deadline = time.monotonic() + 60
        while len(holder.assignment()) < 3 or holder.rebalance_in_progress:
            assert time.monotonic() < deadline, "the holder never settled on all three partitions"
            holder.poll(100)
        holder.pause(*holder.assignment())
        slow_answer: list[float] = []

        def answer_slowly() -> None:  # stop polling: the group waits for this member's rejoin
            deadline = time.monotonic() + 120
            while not holder.rebalance_in_progress and time.monotonic() < deadline:
                time.sleep(0.05)
            if holder.rebalance_in_progress:
                t0 = time.monotonic()
                time.sleep(3)
                slow_answer.append(time.monotonic() - t0)
            holder.close(autocommit=False)  # LeaveGroup: the rebalance completes without it

        answering = threading.Thread(target=answer_slowly, daemon=True)
        answering.start()
        r = run(
            "consume",
            "--group",
            "cli-g",
            "--topic",
            "t",
            "--out",
            str(out),
            "--rebalancer",
            "coordinator",
            "--bootstrap",
            nodes.bootstrap,
            "--max-records-per-batch",
            "12000",
            "--until-idle",
            "1",
            "--transform",
            "pipeline.spark:with_value_length",
            zk=zk_connect,
            data=log.root,
            timeout=180,
        )
        answering.join(10)
    assert slow_answer, "the consume command's join never reached the holder"
    assert r.returncode == 0, r.stderr[-2000:]
    assert "consumed 30,000 records" in r.stdout, r.stdout
    assert "lag" in r.stderr and "assignment 3 partitions" in r.stderr
    seen = read_output(out, "t")
    assert set(seen) == {(p, o) for p in range(3) for o in range(10_000)} and max(seen.values()) == 1
    some = next(iter(out.glob("t/partition=0/offsets=*/*.parquet")))
    assert pq.read_table(some).column("value_length").to_pylist()[0] == 8  # the transform ran


def test_consume_processes_share_a_group_and_rebalance_on_join_and_leave(zk, zk_connect, tmp_path):
    """Two `groupshift consume` processes (a Spark driver each) in one scheme-three group: the
    second's join splits the partitions, the first's leave (SIGTERM) hands them all back."""
    import signal

    from coordinator.node.process import CoordinatorNodes
    from topics.log import Log
    from topics.registry import create_topic

    create_topic(zk, "t", partitions=4)
    log = Log(tmp_path / "log")
    log.create("t", 4)
    produce(log, "t", 4, 5_000)
    out = tmp_path / "out"
    stop = threading.Event()

    def keep_producing():  # 1,000 records/s: less than one process reads on a loaded runner
        while not stop.is_set():
            produce(log, "t", 4, 50)
            time.sleep(0.2)

    producer = threading.Thread(target=keep_producing, daemon=True)
    with CoordinatorNodes(zk_connect, count=1) as nodes:
        cmd = [sys.executable, "-m", "cli", "consume", "--zk", zk_connect, "--data", str(log.root), "--group",
               "procs", "--topic", "t", "--out", str(out), "--rebalancer", "coordinator", "--bootstrap",
               nodes.bootstrap, "--max-records-per-batch", "2000", "--until-idle", "3"]  # fmt: skip

        def start(name: str) -> tuple[subprocess.Popen, list[str]]:
            proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            started.append(proc)
            lines: list[str] = []
            threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
            return proc, lines

        def assigned(lines: list[str]) -> int | None:
            got = [ln for ln in lines if "assignment" in ln]
            return int(got[-1].rsplit("assignment ", 1)[1].split()[0]) if got else None

        def wait(cond, what: str, timeout: float = 180) -> None:
            # each process starts a Spark JVM of its own: on a loaded two-core runner that takes a while
            deadline = time.monotonic() + timeout
            while not cond():
                assert time.monotonic() < deadline, (
                    f"timed out waiting for {what}",
                    a_lines[-3:],
                    b_lines[-3:],
                    [f"pid {p.pid} exit {p.poll()}" for p in started],
                )
                time.sleep(0.1)

        producer.start()
        started: list[subprocess.Popen] = []
        b_lines: list[str] = []
        a, a_lines = start("a")
        try:
            wait(lambda: assigned(a_lines) == 4, "the first process to hold all four partitions")
            b, b_lines = start("b")
            try:
                wait(lambda: assigned(b_lines) == 2 and assigned(a_lines) == 2, "the join to split them 2/2")
                a.send_signal(signal.SIGTERM)
                a_out, _ = a.communicate(timeout=60)
                wait(lambda: assigned(b_lines) == 4, "the second process to take all four back")
                stop.set()
                producer.join()
                b_out, _ = b.communicate(timeout=120)
            finally:
                b.kill()
        finally:
            stop.set()
            a.kill()
    assert a.returncode == 0 and b.returncode == 0, (a_lines[-3:], b_lines[-3:])
    assert "consumed" in a_out and "consumed" in b_out
    ends = {p: log.latest(_tp(p)) for p in range(4)}
    seen = read_output(out, "t")
    assert not [k for k, n in seen.items() if n > 1], "a record written twice"
    assert set(seen) == {(p, o) for p in range(4) for o in range(ends[p])}


def job_committed(zk_connect, log) -> dict:
    from kazoo.client import KazooClient

    from zk_rebalance.layout import offset_path

    hosts, _, chroot = zk_connect.partition("/")
    zk = KazooClient(hosts=hosts + "/" + chroot)
    zk.start(10)
    try:
        out = {}
        for p in range(2):
            got = zk.exists(offset_path("crash-g", "t", p))
            out[p] = int(zk.get(offset_path("crash-g", "t", p))[0]) if got else 0
        return out
    finally:
        zk.stop()
        zk.close()


def worker_main(spec: dict) -> None:
    """A Spark consumer that dies (exit 17) in its first batch: after staging it, before committing
    it, or after committing it, before publishing it."""
    import pipeline.spark.loop as spark_module
    from pipeline.spark import spark_session
    from pipeline.spark.loop import SparkConsumer
    from topics.log import Log

    spark = spark_session("groupshift-crash")
    job = SparkConsumer(
        spark,
        "crash-g",
        ["t"],
        out=spec["out"],
        log=Log(spec["log"]),
        zk=spec["zk"],
        max_records_per_batch=25_000,
        **options("zk", None),
    )

    def die(*_):
        os._exit(17)

    if spec["dies"] == "before committing":
        job.consumer.commit_planned = die
    else:
        spark_module.publish = die
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job.run_batch()
        time.sleep(0.1)
    os._exit(3)


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker_main(json.loads(sys.argv[2]))
