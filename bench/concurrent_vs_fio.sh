#!/usr/bin/env bash
# A foreground read beside a background writer paced to a rate: storeval's concurrent workload vs one fio run of
# two jobs (--exitall), same settings (O_DIRECT, 1 MiB, psync); medians, spreads, ratios of both sides.
#
#   bench/concurrent_vs_fio.sh [DIR] [--reps 3] [--size 1GiB] [--rate 20MiB/s]
#
# DIR defaults to bench/out/scratch. Targets: the writer keeps its rate within 2 % in both tools; the foreground
# reads within ±10 % of fio's beside it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
exec "$py" "$here/bench/concurrent_vs_fio.py" "$@"
