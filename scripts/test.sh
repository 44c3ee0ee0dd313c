#!/usr/bin/env bash
# Run the whole test suite against real ZooKeeper (containers from the local image), in two phases:
#  1. in parallel workers (pytest-xdist): each worker has a ZooKeeper server and a GROUPSHIFT_HOME of
#     its own; the tests of a lane (Spark, the experiments) run on one worker one after the other;
#  2. alone, one after the other: the fault-injection tests (ZooKeeper stopped, paused, cut off,
#     the shared 3-node ensemble), which time sessions and pauses a loaded machine would stretch.
# (tests/conftest.py sorts the tests.) Extra arguments go to pytest in both phases, e.g.
#   scripts/test.sh tests/integ/topics/test_log.py    # one file
#   scripts/test.sh -k describe -n 0                # by name, without workers
# (-m is the script's own, to split the phases: select with -k.)
# GROUPSHIFT_TEST_WORKERS sets the worker count of phase 1 (default 3: most tests wait on
# ZooKeeper and child processes, so three workers keep two cores busy).
# It prints the 20 slowest tests and the wall time. Ctrl-C or SIGTERM stops every worker, which
# stops what its tests started (processes, containers).
# pytest's exit code 5 ("no tests collected") is a failure here when neither phase ran a test.
set -uo pipefail
cd "$(dirname "$0")/.."
export TESTCONTAINERS_RYUK_DISABLED=true
# The suite starts hundreds of Python processes: let them reuse compiled bytecode, kept outside
# the tree (PYTHONDONTWRITEBYTECODE would make each of them compile every module it imports).
unset PYTHONDONTWRITEBYTECODE
export PYTHONPYCACHEPREFIX=${PYTHONPYCACHEPREFIX:-${GROUPSHIFT_CACHE:-$HOME/.cache/groupshift}/pycache}
workers=${GROUPSHIFT_TEST_WORKERS:-3}
reports=$(mktemp -d /tmp/groupshift-test.XXXXXX)
start=$(date +%s)

# pytest runs in a process group of its own (set -m), so an interrupt reaches the master and every
# worker at once and each runs its fixtures' finalizers; an interrupted phase 1 skips phase 2.
set -m
interrupted=0
run_pytest() {
  .venv/bin/python -m pytest "$@" &
  local pid=$!
  trap 'interrupted=1; kill -TERM -- "-'"$pid"'" 2>/dev/null' TERM INT
  local rc
  while :; do
    wait "$pid"
    rc=$?
    kill -0 "$pid" 2>/dev/null || break
  done
  trap - TERM INT
  return "$rc"
}

run_pytest -n "$workers" --dist loadgroup --junitxml="$reports/parallel.xml" "$@" -m "not faults"
rc1=$?
rc2=5
if [ "$interrupted" -eq 0 ]; then
  echo "[test] the fault-injection tests, alone" >&2
  run_pytest --junitxml="$reports/alone.xml" "$@" -n 0 -m faults
  rc2=$?
fi
if [ "$rc1" -eq 5 ] && [ "$rc2" -eq 5 ]; then
  echo "[test] FAILED: pytest collected no tests" >&2
  rc=1
elif [ "$rc1" -ne 0 ] && [ "$rc1" -ne 5 ]; then
  rc=$rc1
elif [ "$rc2" -ne 0 ] && [ "$rc2" -ne 5 ]; then
  rc=$rc2
else
  rc=0
fi
[ "$interrupted" -eq 0 ] || rc=130
# Containers of this run are removed by the fixtures; sweep what a killed run may have left.
.venv/bin/python -c 'from experiments.cluster import sweep_leftovers; sweep_leftovers()' 2>/dev/null || true
.venv/bin/python scripts/slowest_tests.py 20 "$reports/parallel.xml" "$reports/alone.xml" || true
rm -rf "$reports"
elapsed=$(( $(date +%s) - start ))
echo "[test] exit $rc after ${elapsed} s ($(( elapsed / 60 )) min $(( elapsed % 60 )) s wall time, $workers workers)" >&2
exit "$rc"
