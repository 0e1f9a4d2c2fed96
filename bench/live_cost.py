"""What the live view costs the clients: a null:// cell's operations per second with the live view on and off.

The null target does no I/O (storeval's own ceiling: every operation is the timed loop alone), so anything the
coordinator's watching took from the clients would show here first. "on" draws the live table on a terminal
(run under ``script``, a pseudo-terminal, so rich really redraws it), streams JSON lines and serves the
Prometheus endpoint, all at the 1-second refresh; "off" is ``--no-live`` on the same pseudo-terminal (the
progress bars only). Both run the native null engine (checked). Runs alternate after a warm-up of each; medians
of ``--reps``. Target: "on" within 2 % of "off".
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import socket
import subprocess
import sys

from common import OUT, Case, Sample, engines


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(live: bool, size: str, clients: int) -> Sample:
    os.makedirs(OUT, exist_ok=True)
    out = os.path.join(OUT, "live.json")
    cmd = [sys.executable, "-m", "storeval", "run", "--target", "null://live", "--workload", "bandwidth",
           "--clients", str(clients), "--set", f"file_size={size}", "--set", "transfer_size=4KiB",
           "--set", "phases=randread", "--results", os.path.join(OUT, "results"), "--json", out, "--no-html"]
    if live:
        cmd += ["--live", "--live-json", os.path.join(OUT, "live.jsonl"), "--metrics", f"127.0.0.1:{free_port()}"]
    else:
        cmd += ["--no-live"]
    proc = subprocess.run(["script", "-qec", shlex.join(cmd), "/dev/null"], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"storeval failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}")
    with open(out) as f:
        ph = json.load(f)["cells"][0]["phases"][0]
    if engines(ph) != ["null"]:
        raise SystemExit(f"storeval ran {engines(ph)}, not the native null engine: build the native extension")
    if live:
        with open(os.path.join(OUT, "live.jsonl")) as f:
            lines = [json.loads(line) for line in f]
        if not lines:
            raise SystemExit("the live view wrote no line: the cell was shorter than a second (raise --size)")
    return Sample(ph["ops_per_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="64GiB", help="bytes each client 'reads' (4 KiB each): a few seconds")
    ap.add_argument("--clients", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    case = Case(f"null:// 4KiB randread, {a.clients} clients: live view on (table, JSON lines, metrics) vs off",
                "ops/s", lambda: run(True, a.size, a.clients), lambda: run(False, a.size, a.clients))
    case.run(a.reps)
    print(f"\nstoreval with its live view vs without: median of {a.reps} alternating runs after a warm-up, "
          "[min–max]; ratio = on / off (target ≥ 0.98)")
    print(case.line("off"))


if __name__ == "__main__":
    main()
