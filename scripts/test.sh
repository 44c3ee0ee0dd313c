#!/usr/bin/env bash
# Run the whole test suite against real ZooKeeper (containers from the local image).
# pytest's exit code 5 ("no tests collected") is a failure here, never a pass.
set -uo pipefail
cd "$(dirname "$0")/.."
export TESTCONTAINERS_RYUK_DISABLED=true
start=$(date +%s)
.venv/bin/python -m pytest --durations=30 "$@"  # the slowest tests, for keeping the suite short
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "[test] FAILED: pytest collected no tests" >&2
  rc=1
fi
# Containers of this run are removed by the fixtures; sweep what a killed run may have left.
.venv/bin/python -c 'from experiments.cluster import sweep_leftovers; sweep_leftovers()' 2>/dev/null || true
echo "[test] exit $rc after $(( $(date +%s) - start )) s" >&2
exit "$rc"
