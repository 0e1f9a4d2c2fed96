#!/usr/bin/env bash
# What the live view (--live table, --live-json, --metrics) costs a null:// cell's clients: ops/s with it on and
# off, alternating runs on a pseudo-terminal (script), medians and spreads.
#
#   bench/live_cost.sh [--size 64GiB] [--clients 2] [--reps 5]
# Target: on ≥ 0.98 × off.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && STOREVAL_NATIVE=required "$here/.venv/bin/pip" install -q -e "$here[metrics]"
fi
exec "$py" "$here/bench/live_cost.py" "$@"
