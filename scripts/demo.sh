#!/usr/bin/env bash
# The main job on the embedded default: start the embedded ZooKeeper, then run the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
.venv/bin/groupshift zk start
exec .venv/bin/groupshift demo "$@"
