#!/usr/bin/env bash
# One idempotent set-up path behind `make demo` and `make test`.
# Fresh Debian machine as root: Debian packages, .venv, Docker engine, local ZooKeeper image,
# the Spark driver's class-data-sharing archive.
# When everything is already in place it only checks, in well under 10 s.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
IMAGE=${GROUPSHIFT_ZK_IMAGE:-groupshift-zk:bookworm-1}
CACHE_DIR=${GROUPSHIFT_CACHE:-$HOME/.cache/groupshift}
STATE_DIR=$ROOT/.groupshift
mkdir -p "$STATE_DIR" "$CACHE_DIR"

step() { printf '[setup] %s\n' "$*" >&2; }
fail() { printf '[setup] FAILED: %s\n' "$*" >&2; exit 1; }

# A step runs in a process group of its own (set -m) while this shell waits, so SIGTERM or Ctrl-C
# here stops it and what it started (pip, apt-get, the archive's Spark JVM) before the set-up exits.
set -m
child=
interrupted() {
  if [ -n "$child" ]; then
    kill -TERM -- "-$child" 2>/dev/null
    wait "$child" 2>/dev/null || true
    for _ in $(seq 300); do  # up to 30 s for the rest of its group (a JVM runs its shutdown hooks)
      kill -0 -- "-$child" 2>/dev/null || break
      sleep 0.1
    done
  fi
  echo "[setup] interrupted" >&2
  exit 130
}
trap interrupted TERM INT
run() {
  "$@" &
  child=$!
  local rc=0
  wait "$child" || rc=$?
  child=
  return "$rc"
}

# 1) Debian packages, only the missing ones.
need=()
[ -x /usr/share/zookeeper/bin/zkServer.sh ] || need+=(zookeeper)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v iptables >/dev/null 2>&1 || need+=(iptables)
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
if ! java -version 2>&1 | grep -q 'version "17'; then need+=(openjdk-17-jre-headless); fi
# Third-party Kafka clients for tests/integ/coordinator/test_kafka_clients.py: kcat (with its own
# librdkafka) and Burrow (the lag checker; its binary is /usr/bin/Burrow).
command -v kcat >/dev/null 2>&1 || need+=(kcat)
command -v Burrow >/dev/null 2>&1 || need+=(burrow)
if [ ${#need[@]} -gt 0 ]; then
  step "installing Debian packages: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  run apt-get update -qq || fail "apt-get update (is the Debian registry reachable?)"
  run apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || fail "apt-get install ${need[*]}"
fi

# 2) Python virtualenv with the project editable, both extras and the dev tools, at the exact
#    versions of constraints.txt (refresh that file with scripts/lock.sh).
if [ ! -x .venv/bin/python ]; then
  step "creating .venv"
  python3 -m venv .venv || fail "python3 -m venv .venv"
fi
stamp=.venv/.groupshift-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ constraints.txt -nt "$stamp" ]; then
  step "installing groupshift (editable, extras spark+experiments, dev tools; versions from constraints.txt)"
  run .venv/bin/pip install -q --upgrade pip >/dev/null
  run .venv/bin/pip install -q -c constraints.txt -e '.[dev]' \
    || fail "pip install -c constraints.txt -e .[dev] (if a pinned version is gone, refresh the pins: scripts/lock.sh)"
  touch "$stamp"
fi

# 3) and 4) Docker engine and the local ZooKeeper image.
run "$ROOT/scripts/zk-image.sh" || exit 1

# 5) The Spark driver's class-data-sharing archive (pipeline/spark/cds.py): once per JVM and
#    PySpark install, in $GROUPSHIFT_CACHE/spark-cds; a driver then starts in a third of the CPU.
if ! .venv/bin/python -c 'import sys; from pipeline.spark import cds; sys.exit(cds.archive_path() is None)' 2>/dev/null; then
  step "writing the Spark driver's class-data-sharing archive (once; about a minute)"
  GROUPSHIFT_CACHE="$CACHE_DIR" run .venv/bin/python -m pipeline.spark.cds >/dev/null \
    || fail "the Spark class-data-sharing archive (python -m pipeline.spark.cds says why)"
fi
