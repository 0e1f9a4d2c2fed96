"""storeval's metadata workload vs mdtest (IOR's), same file system, same work, alternating runs.

Equal settings, as ``mpiexec -n P mdtest -n N -u -F -i 1 -d DIR``: every process creates, stats, reads (empty
files: open, read nothing, close) and removes N files of its own in a directory of its own; storeval runs
``metadata`` with ``clients=P, items=N, mode=unique, files_only=true`` — the same tree (one directory per
client), the same order of names, the names made before the timed loop in both, and each rate the ops of all
processes over the time from the first process's start to the exit of the closing barrier (mdtest's rate).

Per phase: median ops/s of ``--reps`` runs of each tool after a warm-up, the min–max spread, the ratio
storeval / mdtest, and the wall time per operation of one process (P / rate) for both; storeval's client CPU per
operation beside it. The engine storeval ran each phase with is checked (``--engine``, default psync: the
native loop) and printed: a bench that silently measured the Python loop would compare the wrong thing.
Cases: the given directory (a disk file system) and /dev/shm (tmpfs: no device, so the tools' own costs differ).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess

from common import OUT, Battery, Sample, engines, peer, storeval_phase

PHASES = {"File creation": "file-create", "File stat": "file-stat", "File read": "file-read", "File removal": "file-remove"}
ROW = re.compile(r"^\s*(File creation|File stat|File read|File removal)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)")


def mdtest(directory: str, procs: int, items: int) -> dict[str, Sample]:
    where = os.path.join(directory, "mdtest")
    shutil.rmtree(where, ignore_errors=True)
    cmd = [peer("mpiexec"), "-n", str(procs), peer("mdtest"), "-n", str(items), "-u", "-F", "-i", "1", "-d", where]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    shutil.rmtree(where, ignore_errors=True)
    if proc.returncode:
        raise SystemExit(f"mdtest failed: {' '.join(cmd)}\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    out = {}
    for line in proc.stdout.splitlines():
        m = ROW.match(line)
        if m:
            out[PHASES[m.group(1)]] = Sample(float(m.group(3)))  # the mean column (one iteration: all equal)
    if len(out) != len(PHASES):
        raise SystemExit(f"mdtest printed no SUMMARY rate table:\n{proc.stdout[-2000:]}")
    return out


def storeval(directory: str, procs: int, items: int, engine: str) -> dict[str, Sample]:
    target = os.path.join(directory, "storeval")
    os.makedirs(target, exist_ok=True)
    records = storeval_phase(f"file://{target}", "*", [
        "--workload", "metadata", "--clients", str(procs), "--set", f"items={items}", "--set", "mode=unique",
        "--set", "files_only=true", "--set", f"engine={engine}"], all_phases=True)
    shutil.rmtree(target, ignore_errors=True)
    out = {}
    for ph in records:
        if ph["phase"] not in PHASES.values():
            continue
        ran = engines(ph)
        if ran != [engine]:
            raise SystemExit(f"storeval ran {ph['phase']} with engine {ran}, not {engine}: the bench would compare "
                             "another loop (build the native extension: STOREVAL_NATIVE=required pip install -e .)")
        cpu = sum(c["cpu_seconds"] for c in ph["client_stats"])
        out[ph["phase"]] = Sample(ph["ops_per_s"], cpu_per_op=cpu / max(1, ph["ops"]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?", default=os.path.join(OUT, "md-scratch"), help="a directory on a disk")
    ap.add_argument("--items", type=int, default=int(os.environ.get("ITEMS", 20000)), help="files per process (-n)")
    ap.add_argument("--procs", default=os.environ.get("PROCS", "2,8"), help="process counts, e.g. 2,8")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    ap.add_argument("--engine", default=os.environ.get("ENGINE", "psync"), help="storeval's engine (psync, python)")
    ap.add_argument("--shm", action=argparse.BooleanOptionalAction, default=True, help="also on /dev/shm (tmpfs)")
    a = ap.parse_args()
    d = os.path.abspath(a.directory)
    os.makedirs(d, exist_ok=True)
    places = [("disk", d)] + ([("tmpfs", "/dev/shm/storeval-bench-md")] if a.shm else [])
    batteries = []
    for label, where in places:
        os.makedirs(where, exist_ok=True)
        for procs in [int(x) for x in a.procs.split(",")]:
            batteries.append((procs, Battery(f"{label} {procs} proc x {a.items}", "ops/s",
                                             lambda w=where, p=procs: storeval(w, p, a.items, a.engine),
                                             lambda w=where, p=procs: mdtest(w, p, a.items))))
    for _, b in batteries:
        b.run(a.reps)
    shutil.rmtree("/dev/shm/storeval-bench-md", ignore_errors=True)  # ours; the disk directory keeps what it had
    print(f"\nstoreval metadata ({a.engine}) vs mdtest -n {a.items} -u -F -i 1: median of {a.reps} alternating runs "
          f"after a warm-up, [min–max]; disk = {d}; cpu = storeval's client CPU per operation; ratio = storeval / "
          "mdtest; pairs = the ratios of the alternating pairs of runs (when they hold 1.0 the tools differ by less "
          "than one run of either differs from the next: at 20,000 items a stat phase lasts ~30 ms, where a page "
          "fault or a timer tick is a percent); ns/op = one process's wall time per operation (processes / rate)")
    for procs, b in batteries:
        for line, figure in zip(b.lines("mdtest"), b.figures()):
            med = {t: sorted(s[figure].value for s in b.samples[t])[len(b.samples[t]) // 2] for t in b.samples}
            print(f"{line}   ns/op {procs * 1e9 / med['storeval']:,.0f} vs {procs * 1e9 / med['reference']:,.0f}")


if __name__ == "__main__":
    main()
