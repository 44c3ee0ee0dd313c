"""Spark's standalone cluster manager (`testing.spark_cluster`) and sessions on it: a job runs on the
executors the workers start, and every process the cluster started is gone once it stops — when
the `with` ends, when an exception leaves it, and when its owner is killed with SIGKILL. A master
URL that is malformed or does not answer is refused before any JVM starts.

Processes are found in /proc, independently of the module under test: a cluster's process is one
the test saw while the cluster ran, or one whose environment, command line or working directory
names the cluster's directory.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import GroupshiftError
from testing.spark_cluster import SparkCluster, stop_processes
from tests.processes import cmdline, survivors

REPO = Path(__file__).resolve().parents[3]
EXECUTOR = "CoarseGrainedExecutorBackend"

pytestmark = [
    pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime"),
    pytest.mark.spark,
]


def until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while not (result := check()):
        assert time.monotonic() < deadline, f"timed out after {timeout:g} s waiting for {what}"
        time.sleep(0.1)
    return result


def executors(cluster: SparkCluster, count: int) -> list[int]:
    """The cluster's executor JVMs, once `count` of them run."""

    def running() -> list[int] | None:
        found = [pid for pid in cluster.processes() if EXECUTOR in cmdline(pid)]
        return found if len(found) == count else None

    return until(running, 30, f"{count} executors")


@pytest.fixture
def no_session():
    """No SparkSession of an earlier test module left running in this process (one per process)."""
    from pyspark import SparkContext

    if SparkContext._active_spark_context is not None:
        SparkContext._active_spark_context.stop()
    yield


def cluster_session(app: str, cluster: SparkCluster):
    from pipeline.spark.session import spark_session

    # Jobs wait until both executors registered, so both take tasks.
    return spark_session(
        app,
        master=cluster.master_url,
        **{"spark.cores.max": str(cluster.cores), "spark.scheduler.minRegisteredResourcesRatio": "1.0"},
    )


def test_a_job_runs_on_the_executors_and_an_exception_inside_the_with_stops_every_process(
    no_session, tmp_path
):
    """Tasks run in the executors' Python workers (importing groupshift from this checkout) and
    write and read through a path every process sees; an exception raised inside the `with` while
    the executors still run stops every process of the cluster and removes its directory."""
    spark = None
    try:
        with pytest.raises(RuntimeError, match="inside the with"):
            with SparkCluster.start(workers=2, cores=1, memory="1g") as cluster:
                assert re.fullmatch(r"spark://127\.0\.0\.1:\d+", cluster.master_url)
                assert len(cluster.pids) == 3  # the master and two workers
                spark = cluster_session("groupshift-cluster-test", cluster)
                rdd = spark.sparkContext.parallelize(range(1000), 4)
                assert rdd.sum() == 499500
                where = rdd.map(
                    lambda _: (os.getpid(), __import__("pipeline.spark.session").__file__)
                ).distinct()
                runners = where.collect()
                # Spark's output and input through a path every process sees: written by the executors.
                spark.range(1000).write.parquet(str(tmp_path / "out"))
                assert spark.read.parquet(str(tmp_path / "out")).count() == 1000
                jvms = executors(cluster, 2)  # the executors still run: the cluster stops them
                seen = set(cluster.processes())
                raise RuntimeError("inside the with")
        # the tasks ran in Python workers of the executors, which import groupshift from this checkout
        assert {pid for pid, _ in runners} <= seen - {os.getpid()}, (runners, seen)
        assert {file for _, file in runners} == {str(REPO / "pipeline" / "__init__.py")}
        assert set(jvms) <= seen and set(cluster.pids) <= seen
        assert survivors(cluster.dir, seen) == []
        assert not cluster.dir.exists()
        cluster.stop()  # again: nothing to do
    finally:
        if spark is not None:
            spark.stop()


OWNER = """
import json, sys, time
sys.path.insert(0, {repo!r})
from testing.spark_cluster import SparkCluster
cluster = SparkCluster.start(workers=1)
print(json.dumps({{"dir": str(cluster.dir), "pids": cluster.processes()}}), flush=True)
time.sleep(600)
"""


def test_the_cluster_stops_when_its_owner_is_killed():
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER.format(repo=str(REPO))], stdout=subprocess.PIPE, text=True
    )
    cluster_dir = None
    try:
        started = json.loads(owner.stdout.readline())
        cluster_dir, seen = Path(started["dir"]), set(started["pids"])
        assert len(seen) == 2 and survivors(cluster_dir) != []  # the master and one worker
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        gone = lambda: survivors(cluster_dir, seen) == [] and not cluster_dir.exists()
        until(gone, 30, "every process of the cluster to stop and its directory to go")
    finally:
        owner.kill()
        owner.wait()
        if cluster_dir is not None:  # the test failed: stop what it left
            stop_processes(str(cluster_dir), [])
            shutil.rmtree(cluster_dir, ignore_errors=True)


NO_JVM = """
import sys
sys.path.insert(0, {repo!r})
from core.errors import GroupshiftError
from pipeline.spark.session import spark_session
try:
    spark_session("groupshift-dead-master", master={url!r})
except GroupshiftError as exc:
    from pyspark import SparkContext
    print(SparkContext._gateway is None, exc, sep="\\n")
"""


def test_a_master_that_does_not_answer_is_refused_in_one_line_before_a_jvm_starts():
    from pipeline.spark.session import check_master

    with socket.socket() as held:  # bound, not listening: connections to it are refused
        held.bind(("127.0.0.1", 0))
        url = f"spark://127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(GroupshiftError) as refused:
            check_master(url)
        assert str(refused.value) == (
            f"the Spark master {url} does not answer (Connection refused); "
            "start it, or give the URL of one that runs"
        )
        started = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-c", NO_JVM.format(repo=str(REPO), url=url)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.stdout.splitlines() == ["True", str(refused.value)], out.stderr
    assert time.monotonic() - started < 10
    for malformed in ("spark://127.0.0.1", "yarn", "local[0]", "spark://h:1,h:2", "mesos://h:5050"):
        with pytest.raises(GroupshiftError, match="^not a Spark master URL: ") as bad:
            check_master(malformed)
        assert "\n" not in str(bad.value)
