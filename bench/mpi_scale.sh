#!/usr/bin/env bash
# storeval's own costs under mpiexec as ranks grow (8, 32, 128 on null:// across 4 emulated nodes): barrier
# latency, rank 0's memory, store growth, report time, and a linear model of 1,000 nodes x 8 ranks. Root only.
#
#   bench/mpi_scale.sh [--ranks 8,32,128] [--nodes 4] [--file-size 64MiB] [--items 100]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
cd "$here/bench" && exec "$py" mpi_scale.py "$@"
