"""The SparkSession every groupshift Spark job uses, and the `--transform` functions.

spark = spark_session("billing", master="spark://10.0.0.5:7077")

The master is `local`, `local[N]`, `local[*]` (the driver runs the tasks itself) or a standalone
cluster's `spark://HOST:PORT`, checked before any JVM starts (`check_master`): a malformed URL, or
a master that does not accept a connection, is refused in one line.
"""

from __future__ import annotations

import importlib
import os
import re
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import GroupshiftError

REPO = Path(__file__).resolve().parents[2]
LOCAL = re.compile(r"local(\[(\*|[1-9]\d*)\])?")
STANDALONE = re.compile(r"spark://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9][A-Za-z0-9.-]*):(\d{1,5})")
CONNECT_TIMEOUT_S = 3.0
# The driver's JVM, tuned for start-up time (a driver lives for one job): a small serial collector,
# the quick compiler only; plus the class-data-sharing archive when there is one (`cds`).
DRIVER_JAVA_OPTIONS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=64m")
# Spark's Python workers start through this script (see `python_worker`).
PYTHON_WORKER = Path(__file__).resolve().parent / "python_worker.sh"
# On a standalone cluster: each executor's heap (the workers need at least this much memory each).
EXECUTOR_MEMORY = "512m"


def parse_master(url: str) -> tuple[str, int] | None:
    """`spark://HOST:PORT` → (HOST, PORT); a local master → None; anything else: GroupshiftError.

    >>> parse_master("spark://127.0.0.1:7077"), parse_master("local[*]")
    (('127.0.0.1', 7077), None)
    """
    if isinstance(url, str) and LOCAL.fullmatch(url):
        return None
    m = STANDALONE.fullmatch(url) if isinstance(url, str) else None
    if m and 0 < int(m.group(2)) < 65536:
        return m.group(1).strip("[]"), int(m.group(2))
    raise GroupshiftError(
        f"not a Spark master URL: {url!r} (use local, local[N], local[*] or spark://HOST:PORT)"
    )


def check_master(url: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse (GroupshiftError, one line) a malformed master URL, or a standalone master that does not
    accept a TCP connection within `timeout` seconds; a local master needs nothing."""
    _local_address(url, timeout)


def _local_address(url: str, timeout: float) -> str | None:
    """This machine's address on the way to the standalone master of `url` (the address its
    executors reach the driver at); None for a local master."""
    hostport = parse_master(url)
    if hostport is None:
        return None
    try:
        with socket.create_connection(hostport, timeout=timeout) as sock:
            return sock.getsockname()[0]
    except OSError as exc:
        why = f"no answer within {timeout:g} s" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise GroupshiftError(
            f"the Spark master {url} does not answer ({why}); start it, or give the URL of one that runs"
        ) from None


def python_worker() -> str:
    """The interpreter Spark's Python workers run: `python_worker.sh` (this interpreter, PySpark
    imported from its installed, compiled modules rather than from pyspark.zip), or this
    interpreter itself where the script cannot be run."""
    return str(PYTHON_WORKER) if os.access(PYTHON_WORKER, os.X_OK) else sys.executable


def python_worker_env() -> dict[str, str]:
    """What `python_worker.sh` needs in a worker's environment."""
    import pyspark

    lib = Path(pyspark.__file__).resolve().parent / "python" / "lib"
    return {"GROUPSHIFT_SPARK_PYTHON": sys.executable, "GROUPSHIFT_PYSPARK_LIB": str(lib)}


def spark_session(
    app: str = "groupshift", master: str = "local[2]", jvm_log: str | os.PathLike | None = None, **conf: str
):
    """A SparkSession with the settings that keep a small driver fast (one per process; reused:
    asking for another master while one runs is refused).

    `master`: see the module docstring; checked before a JVM starts. On a standalone cluster the
    executors get a 512 MB heap and run this Python interpreter with this repository on their
    PYTHONPATH, and the driver listens at the address the master was reached from.
    `jvm_log`: a file that receives what the JVM writes to stderr (its start-up notices), so that
    a command's own stderr stays one line per message."""
    driver_host = _local_address(master, CONNECT_TIMEOUT_S) or "127.0.0.1"
    worker_env = python_worker_env()
    os.environ.update(worker_env)
    os.environ.setdefault("PYSPARK_PYTHON", python_worker())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", driver_host)
    if python_worker() == str(PYTHON_WORKER):  # the script that routes a reader's start to it
        from pipeline.spark.warm_runner import start as start_warm_runner

        pythonpath = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        start_warm_runner(os.pathsep.join(dict.fromkeys(pythonpath)))  # before the JVM: its env
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from pipeline.spark.cds import java_options  # here: `python -m pipeline.spark.cds` imports this first

    running = SparkContext._active_spark_context
    if running is not None and running.master != master:
        raise GroupshiftError(
            f"this process already runs a SparkSession on {running.master}; stop it before asking "
            f"for one on {master} (one SparkSession per process)"
        )
    standalone = {}
    if master.startswith("spark://"):
        pythonpath = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
        standalone = {
            "spark.executor.memory": EXECUTOR_MEMORY,
            "spark.pyspark.python": python_worker(),
            "spark.executorEnv.PYTHONPATH": os.pathsep.join(dict.fromkeys(pythonpath)),
            **{f"spark.executorEnv.{k}": v for k, v in worker_env.items()},
        }
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.host": driver_host,
        "spark.driver.bindAddress": driver_host,
        "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": " ".join((*DRIVER_JAVA_OPTIONS, *java_options())),
        "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
        "spark.sql.streaming.noDataProgressEventInterval": "1000",  # idle progress, for --until-idle
        # An idle query asks its reader for new offsets every pollingDelay: a round trip to the
        # reader's Python process each time. Spark's 10 ms kept an idle query at 12 % of a core;
        # 100 ms costs 3.5 % and at most 0.1 s of latency for a record that ends an idle spell.
        "spark.sql.streaming.pollingDelay": "100ms",
        **standalone,
        **conf,
    }
    builder = SparkSession.builder.appName(app).master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    if jvm_log is None:
        spark = builder.getOrCreate()
    else:
        Path(jvm_log).parent.mkdir(parents=True, exist_ok=True)
        saved = os.dup(2)
        with open(jvm_log, "ab") as f:
            os.dup2(f.fileno(), 2)  # the JVM started now inherits this as its stderr
            try:
                spark = builder.getOrCreate()
            finally:
                os.dup2(saved, 2)
                os.close(saved)
    spark.sparkContext.setLogLevel("ERROR")
    from pipeline.spark.source import register

    register(spark)  # format("groupshift")
    return spark


def load_transform(spec: str | None) -> Callable[[Any], Any] | None:
    """`module:function` → the function (DataFrame → DataFrame); None → no transformation."""
    if not spec:
        return None
    module, _, name = spec.partition(":")
    if not module or not name:
        raise GroupshiftError(f"--transform must be MODULE:FUNCTION, not {spec!r}")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise GroupshiftError(f"cannot load transform {spec!r}: {exc}") from None
    if not callable(fn):
        raise GroupshiftError(f"transform {spec!r} is not a function")
    return fn


def with_value_length(df: Any) -> Any:
    """An example transformation (`--transform pipeline.spark:with_value_length`): adds the length
    of each record's value."""
    from pyspark.sql import functions as F

    return df.withColumn("value_length", F.length("value"))
