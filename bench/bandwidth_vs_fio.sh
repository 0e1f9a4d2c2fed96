#!/usr/bin/env bash
# storeval vs fio on the same file system, same settings, in one run; prints medians, spreads and ratios.
#
#   bench/bandwidth_vs_fio.sh [DIR] [--reps N] [--seq-size 2GiB] [--rand-size 256MiB]
#
# DIR defaults to bench/out/scratch (the repository's file system). Cases: sequential 1 MiB writes (with fsync)
# and reads, 1 and 2 clients, buffered and O_DIRECT; 4 KiB random O_DIRECT reads at queue depth 1 and 32;
# storeval's own ceiling on null://. Targets: sequential within 5 % of fio, random-read IOPS at least 0.9x fio.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
exec "$py" "$here/bench/bandwidth_vs_fio.py" "$@"
