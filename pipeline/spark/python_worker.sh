#!/bin/sh
# The interpreter Spark starts for its Python workers (`spark.pyspark.python`, set by session.py).
# Spark puts the installed PySpark's own pyspark.zip and py4j zip first on a worker's PYTHONPATH,
# and a zip's modules are compiled on every start (zipimport writes no .pyc): 0.75 s of CPU per
# worker instead of 0.27 s. Those zips are copies of the installed packages, which carry their
# compiled modules, so they are dropped from the path; anything else on it is kept as it is.
keep=
rest=$PYTHONPATH
while [ -n "$rest" ]; do
  entry=${rest%%:*}
  case "$rest" in *:*) rest=${rest#*:} ;; *) rest= ;; esac
  case "$entry" in
    "$GROUPSHIFT_PYSPARK_LIB"/*.zip) ;;
    *) keep=${keep:+$keep:}$entry ;;
  esac
done
PYTHONPATH=$keep
export PYTHONPATH
python=${GROUPSHIFT_SPARK_PYTHON:?not set: start Spark through pipeline.spark.spark_session}
# A stream reader's process is forked from the driver's warm-runner server when it runs
# (pipeline/spark/warm_runner.py): warm_client.py stands for it, or becomes this interpreter.
if [ "$1" = -m ] && [ "$2" = pyspark.sql.streaming.python_streaming_source_runner ] && [ -S "${GROUPSHIFT_WARM_RUNNER:-}" ]; then
  exec "$python" -I -S "$(dirname "$0")/warm_client.py" "$@"
fi
exec "$python" "$@"
