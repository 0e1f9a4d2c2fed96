#!/usr/bin/env bash
# storeval's metadata workload vs mdtest on the same file system and /dev/shm, same work, alternating runs;
# prints per-phase medians, spreads, ratios and ns per operation. mdtest and its mpiexec come from
# ~/.cache/storeval-peers/bin (build them: bash ../shared/peers/build.sh) or PATH.
#
#   bench/metadata_vs_mdtest.sh [DIR] [--items 20000] [--procs 2,8] [--reps 3] [--engine psync|python] [--no-shm]
# Target: file-stat, file-read and file-remove >= 0.95x mdtest.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && STOREVAL_NATIVE=required "$here/.venv/bin/pip" install -q -e "$here"
fi
exec "$py" "$here/bench/metadata_vs_mdtest.py" "$@"
