#!/usr/bin/env bash
# Run the whole test suite against real ZooKeeper (containers from the local image), in parallel
# workers (pytest-xdist): each worker has a ZooKeeper server and a GROUPSHIFT_HOME of its own, and
# the tests that must not run beside another of their kind (ensemble, Spark, fault injection) run
# one after the other on one worker (lanes: tests/conftest.py). Extra arguments go to pytest, e.g.
#   scripts/test.sh tests/test_topics_log.py -n 0      # one file, no workers
# GROUPSHIFT_TEST_WORKERS sets the worker count (default 3: most tests wait on ZooKeeper and
# child processes, so three workers keep two cores busy).
# Ctrl-C or SIGTERM stops every worker, which stops what its tests started (processes, containers).
# pytest's exit code 5 ("no tests collected") is a failure here, never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
export TESTCONTAINERS_RYUK_DISABLED=true
# The suite starts hundreds of Python processes: let them reuse compiled bytecode, kept outside
# the tree (PYTHONDONTWRITEBYTECODE would make each of them compile every module it imports).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-${GROUPSHIFT_CACHE:-$HOME/.cache/groupshift}/pycache}
workers=${GROUPSHIFT_TEST_WORKERS:-3}
start=$(date +%s)
# pytest runs in a process group of its own (set -m), so an interrupt reaches the master and every
# worker at once and each runs its fixtures' finalizers.
set -m
# --durations=20: the slowest tests, for keeping the suite short.
.venv/bin/python -m pytest -n "$workers" --dist loadgroup --durations=20 "$@" &
pytest_pid=$!
trap 'kill -TERM -- "-$pytest_pid" 2>/dev/null' TERM INT
while :; do
  wait "$pytest_pid"
  rc=$?
  kill -0 "$pytest_pid" 2>/dev/null || break
done
trap - TERM INT
if [ "$rc" -eq 5 ]; then
  echo "[test] FAILED: pytest collected no tests" >&2
  rc=1
fi
# Containers of this run are removed by the fixtures; sweep what a killed run may have left.
.venv/bin/python -c 'from experiments.cluster import sweep_leftovers; sweep_leftovers()' 2>/dev/null || true
elapsed=$(( $(date +%s) - start ))
echo "[test] exit $rc after ${elapsed} s ($(( elapsed / 60 )) min $(( elapsed % 60 )) s wall time, $workers workers)" >&2
exit "$rc"
