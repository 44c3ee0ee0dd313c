#!/usr/bin/env bash
# Run the whole test suite against real ZooKeeper (containers from the local image), in parallel
# workers (pytest-xdist): each worker has a ZooKeeper server and a GROUPSHIFT_HOME of its own, and
# the tests that must not share the cores (ensemble, Spark, fault injection, experiments) run one
# after the other on one worker (tests/conftest.py). Extra arguments go to pytest, e.g.
#   scripts/test.sh tests/test_topics_log.py -n 0      # one file, no workers
# GROUPSHIFT_TEST_WORKERS sets the worker count (default 3: most tests wait on ZooKeeper and
# child processes, so three workers keep two cores busy).
# pytest's exit code 5 ("no tests collected") is a failure here, never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
export TESTCONTAINERS_RYUK_DISABLED=true
workers=${GROUPSHIFT_TEST_WORKERS:-3}
start=$(date +%s)
# --durations=20: the slowest tests, for keeping the suite short.
.venv/bin/python -m pytest -n "$workers" --dist loadgroup --durations=20 "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] FAILED: pytest collected no tests" >&2
  rc=1
fi
# Containers of this run are removed by the fixtures; sweep what a killed run may have left.
.venv/bin/python -c 'from experiments.cluster import sweep_leftovers; sweep_leftovers()' 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
echo "[test] exit $rc after ${elapsed} s ($(( elapsed / 60 )) min $(( elapsed % 60 )) s wall time, $workers workers)" >&2
exit "$rc"
