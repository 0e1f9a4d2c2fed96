#!/usr/bin/env bash
# storeval's tpc workload vs the grid's third-party-copy clients between the testbed's two XRootD sites:
# XRootD TPC against `xrdcp --tpc only`, HTTP-TPC against gfal2 (pull); prints the storeval/peer ratios. Needs root
# (the sites run in a network namespace), xrdcp (xrootd-client) and python3-gfal2 with gfal2-plugin-http (apt).
#
#   bench/tpc_vs_grid.sh [--size 64MiB] [--files 4] [--reps 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
cd "$here/bench" && exec "$py" tpc_vs_grid.py "$@"
