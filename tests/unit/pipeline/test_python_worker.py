"""The interpreter Spark's Python workers start through (`pipeline/spark/python_worker.sh`): the
installed PySpark's own zips leave the worker's PYTHONPATH, nothing else does, and the worker is
the driver's interpreter importing PySpark from its installed, compiled modules."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline.spark.session import PYTHON_WORKER, python_worker, python_worker_env

PRINT = (
    "import os, sys, pyspark; print(os.environ['PYTHONPATH']); print(sys.executable); print(pyspark.__file__)"
)


def run_worker(pythonpath: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [python_worker(), "-c", PRINT],
        env={**os.environ, **env, "PYTHONPATH": pythonpath},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.splitlines()


def test_the_installed_pysparks_zips_leave_the_path_and_nothing_else_does(tmp_path):
    env = python_worker_env()
    lib = env["GROUPSHIFT_PYSPARK_LIB"]
    other = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    path = ":".join([f"{lib}/pyspark.zip", f"{lib}/py4j-0.10.9.9-src.zip", str(other), "", "/opt/extra"])
    pythonpath, executable, pyspark_file = run_worker(path, env)
    assert pythonpath == f"{other}::/opt/extra"
    assert executable == sys.executable
    assert pyspark_file.endswith(os.path.join("site-packages", "pyspark", "__init__.py"))


def test_the_script_is_what_spark_is_given_and_needs_the_interpreter_named():
    assert python_worker() == str(PYTHON_WORKER)
    env = {k: v for k, v in os.environ.items() if k != "GROUPSHIFT_SPARK_PYTHON"}
    out = subprocess.run([python_worker(), "-c", "pass"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "spark_session" in out.stderr
