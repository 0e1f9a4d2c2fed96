#!/usr/bin/env bash
# storeval's davs:// driver vs davix-get against the testbed's XRootD over HTTPS (XrdHttp), whole-file GETs, one
# client; prints the storeval/davix ratio. Needs root (the server runs in a network namespace) and davix (apt).
#
#   bench/davs_vs_davix.sh [--size 64MiB] [--files 8] [--reps 3]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-$here/.venv/bin/python}
if [ ! -x "$py" ]; then
  python3 -m venv "$here/.venv" && "$here/.venv/bin/pip" install -q -e "$here"
fi
cd "$here/bench" && exec "$py" davs_vs_davix.py "$@"
