#!/usr/bin/env bash
# storeval vs warp against the same local MinIO, same object size and concurrency, GET and PUT; prints the
# storeval/warp ratios. Builds MinIO and warp from the Go module proxy on first use (cached).
#
#   bench/s3_vs_warp.sh [--size 16MiB] [--concurrency 1,4] [--objects 48] [--duration 15s] [--reps 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
cd "$here/bench" && exec "$py" s3_vs_warp.py "$@"
