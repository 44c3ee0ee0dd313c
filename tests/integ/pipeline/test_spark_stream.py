"""The `groupshift` streaming source on real Spark and real ZooKeeper: group-managed partitions,
exactly-once output through the project's writer.

One SparkSession per test process (`local[2]`); the queries of a test run in it, each with its
own reader process (Spark's). Queries in other processes are `groupshift consume` commands.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime"),
    pytest.mark.spark,
]


@pytest.fixture(scope="module")
def spark():
    from pipeline.spark import spark_session

    yield spark_session("groupshift-stream-tests")


def read_output(out: Path, topic: str) -> Counter:
    """(partition, offset) -> how many times the output holds it."""
    from pipeline.spark.output import outputs

    seen: Counter = Counter()
    for p, _, _, d in outputs(out, topic):
        for f in d.glob("*.parquet"):
            for off in pq.read_table(f, columns=["offset"]).column("offset").to_pylist():
                seen[(p, off)] += 1
    return seen


def make_topic(zk, root: Path, topic: str, partitions: int, per_partition: int):
    from topics.log import Log
    from topics.registry import create_topic

    create_topic(zk, topic, partitions=partitions)
    log = Log(root)
    log.create(topic, partitions)
    for p in range(partitions):
        log.produce(topic, [(b"k", b"v" * 8)] * per_partition, partition=p)
    return log


def stream(spark, zk_connect, root, group="g", topic="t", **options):
    reader = (
        spark.readStream.format("groupshift")
        .option("zk", zk_connect)
        .option("group", group)
        .option("subscribe", topic)
        .option("logRoot", str(root))
        .option("sessionTimeoutMs", "6000")
        .option("heartbeatIntervalMs", "200")
    )
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def test_one_query_reads_every_record_exactly_once_and_commits_to_the_group(spark, zk, zk_connect, tmp_path):
    from pipeline.spark.sink import write_exactly_once
    from zk_rebalance.layout import offset_path

    make_topic(zk, tmp_path / "log", "t", 3, 5_000)
    out = tmp_path / "out"
    q = write_exactly_once(
        stream(spark, zk_connect, tmp_path / "log", maxOffsetsPerTrigger=4_000, rebalanceBackoffMs=200),
        out,
        tmp_path / "ck",
        trigger={"availableNow": True},
    )
    q.awaitTermination(180)
    assert q.exception() is None
    from pipeline.spark.query import member_state

    state = member_state(q.lastProgress)
    assert state is not None and len(state["assignment"]) == 3, q.lastProgress
    seen = read_output(out, "t")
    assert len(seen) == 15_000 and set(seen.values()) == {1}
    for p in range(3):
        data, _ = zk.get(offset_path("g", "t", p))
        assert int(data) == 5_000


class Consume:
    """A `groupshift consume` process (a Spark driver, its stream-reader process, its executors)."""

    def __init__(self, args: list[str], checkpoint: Path):
        import subprocess
        import sys
        import threading

        self.cmd = [sys.executable, "-m", "cli", "consume", *args, "--checkpoint", str(checkpoint)]
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def assigned(self) -> int | None:
        got = [ln for ln in self.lines if "assignment" in ln]
        return int(got[-1].rsplit("assignment ", 1)[1].split()[0]) if got else None

    def kill(self) -> None:
        import os
        import signal

        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the driver, its JVM and the JVM's Python workers
        except ProcessLookupError:
            pass
        self.proc.wait(30)

    def stop(self, timeout: float = 120) -> str:
        """SIGTERM: the query stops, its reader leaves, and every process it started ends."""
        import os
        import signal

        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=timeout)

        def group_gone() -> bool:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return True
            return False

        wait_for(group_gone, "the command's JVM and Python workers to end", timeout=30)
        return out


REPO = Path(__file__).resolve().parents[3]


def wait_for(cond, what: str, procs=(), timeout: float = 240) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, (
            f"timed out waiting for {what}",
            [(p.cmd[-1], p.proc.poll(), p.lines[-2:]) for p in procs],
        )
        time.sleep(0.2)


def published_up_to(out: Path, topic: str, ends: dict[int, int]) -> bool:
    """Do the published outputs' names cover every partition's `[0, end)`? (Names only: cheap to poll.)"""
    from pipeline.spark.output import outputs

    covered: dict[int, int] = {}
    for p, start, end, _ in outputs(out, topic):
        covered[p] = covered.get(p, 0) + (end - start)
    return all(covered.get(p, 0) >= end for p, end in ends.items())


def published_ranges_overlap(out: Path, topic: str) -> list:
    from pipeline.spark.output import outputs

    by_partition: dict[int, list[tuple[int, int]]] = {}
    for p, start, end, _ in outputs(out, topic):
        by_partition.setdefault(p, []).append((start, end))
    bad = []
    for p, ranges in by_partition.items():
        ranges.sort()
        bad += [(p, a, b) for a, b in zip(ranges, ranges[1:], strict=False) if a[1] > b[0]]
    return bad


@pytest.mark.parametrize(
    "rebalancer,per_partition",
    [("zk", 2_500), ("incremental", 1_500), ("coordinator", 1_500)],
)
def test_queries_in_processes_join_die_restart_and_write_every_record_exactly_once(
    zk, zk_connect, tmp_path, rebalancer, per_partition
):
    """Two `groupshift consume` queries in one group; a third joins while one is killed (SIGKILL,
    its whole process group) and restarted from its checkpoint, the join and the death in one
    rebalance or two, while a producer writes: every record once in the output, no range published
    by two members."""
    import signal
    import threading

    from coordinator.node.process import CoordinatorNodes
    from core.types import TopicPartition

    log = make_topic(zk, tmp_path / "log", "t", 4, per_partition)
    out = tmp_path / "out"
    stop = threading.Event()

    def keep_producing():
        while not stop.wait(0.2):
            for p in range(4):
                log.produce("t", [(b"k", b"v" * 8)] * 25, partition=p)

    nodes = CoordinatorNodes(zk_connect, count=1).start() if rebalancer != "zk" else None
    scheme = (
        ["--rebalancer", "server", "--incremental"]
        if rebalancer == "incremental"
        else ["--rebalancer", rebalancer]
    )
    args = ["--zk", zk_connect, "--data", str(log.root), "--group", "procs", "--topic", "t",
            "--out", str(out), *scheme, *(["--bootstrap", nodes.bootstrap] if nodes else []),
            "--max-records-per-batch", "2000", "--session-timeout-ms", "5000"]  # fmt: skip
    procs: list[Consume] = []
    producer = threading.Thread(target=keep_producing, daemon=True)
    try:
        producer.start()
        procs += [Consume(args, tmp_path / "ck-a"), Consume(args, tmp_path / "ck-b")]
        a, b = procs
        wait_for(
            lambda: a.assigned() == 2 and b.assigned() == 2, "two queries to split four partitions", procs
        )
        procs.append(Consume(args, tmp_path / "ck-c"))  # a third joins while one dies
        c = procs[-1]
        b.kill()
        procs.append(Consume(args, tmp_path / "ck-b"))  # restarted from its checkpoint
        b2 = procs[-1]
        wait_for(
            lambda: (c.assigned() or 0) >= 1 and (b2.assigned() or 0) >= 1,
            "the third query and the restarted one to get partitions",
            procs,
        )
        stop.set()
        producer.join()
        ends = {p: log.latest(TopicPartition("t", p)) for p in range(4)}
        expected = {(p, o) for p in range(4) for o in range(ends[p])}
        wait_for(lambda: published_up_to(out, "t", ends), "the output to hold every record", procs)
        for proc in (a, c, b2):  # all three at once: each leaves the group and ends its processes
            proc.proc.send_signal(signal.SIGTERM)
        for proc in (a, c, b2):
            proc.stop()
            assert proc.proc.returncode == 0, proc.lines[-3:]
    finally:
        stop.set()
        for proc in procs:
            if proc.proc.poll() is None:
                proc.kill()
        if nodes is not None:
            nodes.close()
    seen = read_output(out, "t")
    assert not [k for k, n in seen.items() if n > 1], "a record written twice"
    assert set(seen) == expected
    assert not published_ranges_overlap(out, "t")


def test_a_query_restarted_after_its_group_moved_on_resumes_from_the_groups_offsets(
    spark, zk, zk_connect, tmp_path
):
    """Query A reads to the end and stops; more records arrive and query B of the same group reads
    them; A restarted from its checkpoint reads nothing twice: the group, not the checkpoint, wins."""
    from core.types import TopicPartition
    from pipeline.spark.sink import write_exactly_once

    log = make_topic(zk, tmp_path / "log", "t", 2, 1_000)
    out = tmp_path / "out"

    def run(checkpoint: str) -> None:
        q = write_exactly_once(
            stream(spark, zk_connect, tmp_path / "log", rebalanceBackoffMs=200),
            out,
            tmp_path / checkpoint,
            trigger={"availableNow": True},
        )
        q.awaitTermination(180)
        assert q.exception() is None

    run("ck-a")
    for p in range(2):
        log.produce("t", [(b"k", b"w")] * 500, partition=p)
    run("ck-b")
    for p in range(2):
        log.produce("t", [(b"k", b"x")] * 200, partition=p)
    run("ck-a")  # its checkpoint ends at 1,000 per partition; the group at 1,500
    seen = read_output(out, "t")
    assert set(seen.values()) == {1}
    assert set(seen) == {(p, o) for p in range(2) for o in range(log.latest(TopicPartition("t", p)))}


@pytest.mark.parametrize(
    "options,message",
    [
        ({"colour": "red"}, "unknown option 'colour'"),
        ({"group": ""}, "option 'group' is required"),
        ({"subscribe": ""}, "option 'subscribe' is required"),
        ({"subscribe": "nope"}, "topic 'nope' is not registered"),
        ({"rebalancer": "kafka"}, "rebalancer must be one of zk, server, coordinator"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be a whole number between 1"),
    ],
)
def test_bad_options_are_refused_at_load_with_one_line_and_change_nothing(
    spark, zk, zk_connect, tmp_path, options, message
):
    from tests.snapshots import dir_tree, zk_tree

    make_topic(zk, tmp_path / "log", "t", 1, 10)
    before = zk_tree(zk_connect), dir_tree(tmp_path)
    opts = {"group": "g", "subscribe": "t", **options}
    reader = (
        spark.readStream.format("groupshift")
        .option("zk", zk_connect)
        .option("logRoot", str(tmp_path / "log"))
    )
    for k, v in opts.items():
        reader = reader.option(k, v)
    with pytest.raises(Exception) as info:
        reader.load()
    assert message in str(info.value)
    assert (zk_tree(zk_connect), dir_tree(tmp_path)) == before


def test_consume_refuses_a_master_that_does_not_answer_and_changes_nothing(zk, zk_connect, tmp_path):
    import subprocess
    import sys

    from testing.zookeeper import free_port
    from tests.snapshots import dir_tree, zk_tree

    make_topic(zk, tmp_path / "log", "t", 1, 10)
    before = zk_tree(zk_connect), dir_tree(tmp_path)
    r = subprocess.run(
        [sys.executable, "-m", "cli", "consume", "--zk", zk_connect, "--data", str(tmp_path / "log"),
         "--group", "g", "--topic", "t", "--out", str(tmp_path / "out"),
         "--spark-master", f"spark://127.0.0.1:{free_port()}"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0
    assert len(r.stderr.strip().splitlines()) == 1 and "does not answer" in r.stderr, r.stderr
    assert (zk_tree(zk_connect), dir_tree(tmp_path)) == before


def test_the_consume_command_under_a_coordinator_and_its_bad_input(zk, zk_connect, tmp_path):
    """`consume --until-idle 1` joins a group whose member holds every partition and takes 3 s to
    answer the rebalance, then leaves: the wait for the first assignment is not idleness, so the
    command reads all 30,000 records, through --transform."""
    import threading
    import time

    from coordinator.node.process import CoordinatorNodes
    from pipeline.consumer import Consumer
    from tests.inspect_helpers import run

    log = make_topic(zk, tmp_path / "log", "t", 3, 10_000)
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
    assert "StreamingQueryProgress" not in r.stderr and "assignment 3 partitions" in r.stderr, r.stderr
    seen = read_output(out, "t")
    assert set(seen) == {(p, o) for p in range(3) for o in range(10_000)} and max(seen.values()) == 1
    some = next(iter(out.glob("t/partition=0/offsets=*/*.parquet")))
    assert pq.read_table(some).column("value_length").to_pylist()[0] == 8  # the transform ran


def test_consume_on_a_standalone_cluster_writes_every_record_exactly_once(zk, zk_connect, tmp_path):
    """A master and two workers from pyspark's distribution: the query's executors (processes of
    the workers) read the log and write the staging output by path; the output holds every record
    once, and the cluster leaves no process behind."""
    from testing.spark_cluster import SparkCluster
    from tests.inspect_helpers import run
    from tests.processes import survivors

    log = make_topic(zk, tmp_path / "log", "t", 2, 5_000)
    out = tmp_path / "out"
    with SparkCluster.start(workers=2, cores=1, memory="1g") as cluster:
        r = run(
            "consume", "--group", "on-cluster", "--topic", "t", "--out", str(out),
            "--spark-master", cluster.master_url, "--max-records-per-batch", "4000", "--until-idle", "2",
            zk=zk_connect, data=log.root, timeout=240,
        )  # fmt: skip
        pids = cluster.processes()
    assert r.returncode == 0, r.stderr[-2000:]
    assert "consumed 10,000 records" in r.stdout, r.stdout
    seen = read_output(out, "t")
    assert set(seen.values()) == {1} and set(seen) == {(p, o) for p in range(2) for o in range(5_000)}
    assert pids and survivors(cluster.dir, seen=set(pids)) == []


@pytest.mark.parametrize("dies", ["before committing", "before publishing"])
def test_a_query_killed_mid_batch_is_replayed_or_recovered_exactly_once(
    spark, zk, zk_connect, tmp_path, dies
):
    """A query's process dies after staging its first batch: before the commit, a successor in the
    group reads the ranges again; after it (before publishing), the successor publishes the staged
    output."""
    import json
    import subprocess
    import sys

    from pipeline.spark.output import outputs
    from pipeline.spark.sink import write_exactly_once

    log = make_topic(zk, tmp_path / "log", "t", 2, 3_000)
    out = tmp_path / "out"
    spec = {
        "zk": zk_connect,
        "log": str(log.root),
        "out": str(out),
        "ck": str(tmp_path / "ck-dead"),
        "dies": dies,
    }
    proc = subprocess.run(
        [sys.executable, __file__, "--worker", json.dumps(spec)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 17, proc.stderr[-2000:]
    assert list(out.glob("t/partition=*/_staging-*")) and not list(outputs(out, "t"))
    q = write_exactly_once(
        stream(spark, zk_connect, log.root, group="crash-g", rebalanceBackoffMs=200),
        out,
        tmp_path / "ck-successor",
        trigger={"availableNow": True},
    )
    q.awaitTermination(180)
    assert q.exception() is None
    seen = read_output(out, "t")
    assert set(seen.values()) == {1} and set(seen) == {(p, o) for p in range(2) for o in range(3_000)}
    assert not list(out.glob("t/partition=*/_staging-*"))


def worker_main(spec: dict) -> None:
    """A query that dies (exit 17) in its first batch, after staging it: before asking for the
    commit, or after the commit, before publishing."""
    import os

    import pipeline.spark.sink as sink
    from pipeline.spark import spark_session

    def die(*_):
        os._exit(17)

    if spec["dies"] == "before committing":
        sink.request_commit = die
    else:
        sink.publish = die
    spark = spark_session("groupshift-crash")
    reader = (
        spark.readStream.format("groupshift")
        .option("zk", spec["zk"])
        .option("group", "crash-g")
        .option("subscribe", "t")
        .option("logRoot", spec["log"])
        .option("maxOffsetsPerTrigger", "2500")
        .option("rebalanceBackoffMs", "200")
    )
    q = sink.write_exactly_once(reader.load(), spec["out"], spec["ck"])
    q.awaitTermination(120)
    os._exit(3)


if __name__ == "__main__":
    import json
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker_main(json.loads(sys.argv[2]))
