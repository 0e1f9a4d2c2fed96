#!/usr/bin/env bash
# storeval's metadata workload vs fio's filecreate/filestat/filedelete engines (mdtest is not installable
# from the allowed registries) on the same file system,
# same number of files and processes, in one run; prints the ratios.
#
#   bench/metadata_vs_fio.sh [DIR] [--files 20000] [--procs 1,2] [--reps 3] [--engine auto|python|psync]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
exec "$py" "$here/bench/metadata_vs_fio.py" "$@"
