#!/usr/bin/env bash
# storeval's bandwidth workload vs IOR (-a POSIX -F -C -e, O_DIRECT by default) on the same file system, same
# work, alternating runs; prints medians, spreads, ratios, IOR's open/transfer/close split and the device's own
# request counts (with the reason when the tools' transfers reach the device as different numbers of requests).
# IOR and its mpiexec come from ~/.cache/storeval-peers/bin (build them: bash ../shared/peers/build.sh) or PATH.
#
#   bench/bandwidth_vs_ior.sh [DIR] [--size 2048] [--transfer 1] [--procs 2] [--reps 3] [--no-direct] [--hard]
# --hard: IO500's ior-hard shape (one shared file, interleaved 47,008-byte records, buffered).
# Targets: write >= 0.95x IOR; read within ±5 % of IOR, or the reason printed.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && STOREVAL_NATIVE=required "$here/.venv/bin/pip" install -q -e "$here"
fi
exec "$py" "$here/bench/bandwidth_vs_ior.py" "$@"
