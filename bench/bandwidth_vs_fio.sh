#!/usr/bin/env bash
# storeval vs fio, same settings, in one run; prints medians, spreads, ratios and CPU per GiB and per op.
#
#   bench/bandwidth_vs_fio.sh [DIR] [--reps 3] [--cases null,shm,disk,buffered] [--seq-size 1GiB]
#                             [--rand-size 128MiB] [--shm-size 1GiB] [--null-size 16GiB]
#
# DIR (the disk cases) defaults to bench/out/scratch. Cases: null:// vs fio ioengine=null; 4 KiB random reads
# on /dev/shm at QD1 (psync) and QD32 (io_uring); O_DIRECT on DIR: 4 KiB random reads QD1/QD32 and 1 MiB
# sequential writes and reads; buffered sequential (1 and 2 clients) with --cases buffered.
# Targets: null >= 1.0x fio, /dev/shm >= 0.95x fio, O_DIRECT on disk >= 1.0x fio.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
exec "$py" "$here/bench/bandwidth_vs_fio.py" "$@"
