"""The SparkSession every groupshift Spark job uses, and the `--transform` functions.

spark = spark_session("billing", master="spark://10.0.0.5:7077")
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.errors import GroupshiftError


def spark_session(
    app: str = "groupshift", master: str = "local[2]", jvm_log: str | os.PathLike | None = None, **conf: str
):
    """A SparkSession with the settings that keep a small driver fast (one per process; reused).

    `jvm_log`: a file that receives what the JVM writes to stderr (its start-up notices), so that
    a command's own stderr stays one line per message."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.default.parallelism": "2",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.driver.memory": "512m",
        "spark.driver.extraJavaOptions": " ".join(
            ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:ReservedCodeCacheSize=64m")
        ),
        "spark.sql.sources.partitionColumnTypeInference.enabled": "true",
        "spark.sql.streaming.noDataProgressEventInterval": "1000",  # idle progress, for --until-idle
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


def check_master(url: str) -> None:
    """Refuse, with one line, a master URL other than local[N] or spark://HOST:PORT, or one that is silent."""
    import re
    import socket

    if re.fullmatch(r"local(\[(\d+|\*)\])?", url):
        return
    m = re.fullmatch(r"spark://([^:/]+):(\d+)", url)
    if not m:
        raise GroupshiftError(f"--spark-master must be local[N] or spark://HOST:PORT, not {url!r}")
    try:
        socket.create_connection((m.group(1), int(m.group(2))), timeout=3).close()
    except OSError as exc:
        raise GroupshiftError(f"the Spark master {url} does not answer ({exc.strerror or exc})") from None
