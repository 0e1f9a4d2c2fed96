"""storeval's own costs as the MPI job grows: 8, 32, 128 … ranks on null:// across emulated nodes.

What is measured per rank count (``--ranks``), each run a bandwidth cell (write and read, ``--file-size`` per
rank of null://: the storage costs nothing, so what remains is storeval's own work) and a metadata cell:

* **barrier latency**: per phase, the last rank's end to the last rank's exit from the closing barrier (the
  records' ``end_ns`` and ``barrier_ns`` in the store), the median over the run's phases;
* **coordinator memory**: rank 0's peak resident set (sampled every 0.1 s by this script through /proc, its
  children included — the probe side process);
* **store growth**: bytes the run added to the DuckDB store, and its rows in ``records``;
* **report time**: ``storeval report RUN`` on the stored run (terminal report, no HTML), wall seconds;
* **wall**: ``mpiexec`` start to end, start-up (Python imports on every rank) included.

Then a least-squares line per figure against ranks, and what it gives for 1,000 nodes × 8 ranks (8,000 ranks):
a model from measurements on one 2-core machine, whose ranks share two CPUs — on a cluster each node's ranks
have their own, so the per-rank slopes here are upper bounds of the CPU-bound parts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import duckdb
import psutil

TARGET_RANKS = 8000


def storeval(*args: str, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``storeval ARGS`` in a process group of its own: when this script is stopped (``timeout``'s SIGTERM, a
    Ctrl-C) or the command runs over, the whole group — ``mpiexec`` and its ranks included — gets SIGTERM, then
    SIGKILL, before the emulated nodes are brought down (a rank still inside a node keeps it busy)."""
    proc = subprocess.Popen([sys.executable, "-m", "storeval", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        _stop_group(proc)
        raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _stop_group(proc: subprocess.Popen, grace: float = 30.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)  # the group this script made for it (start_new_session): nothing else
        except ProcessLookupError:
            return
        try:
            proc.communicate(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


class PeakRss(threading.Thread):
    """Peak RSS of rank 0 (the process whose environment says PMI_RANK=0) and its children."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak = 0
        self.done = threading.Event()
        self.rank0: psutil.Process | None = None

    def _find(self) -> psutil.Process | None:
        for p in psutil.process_iter(["cmdline"]):
            cmd = p.info["cmdline"] or []
            if "storeval" in cmd and "run" in cmd:
                try:
                    if p.environ().get("PMI_RANK") == "0":
                        return p
                except psutil.Error:
                    continue
        return None

    def run(self) -> None:
        while not self.done.is_set():
            if self.rank0 is None:
                self.rank0 = self._find()
            if self.rank0 is not None:
                try:
                    family = [self.rank0, *self.rank0.children(recursive=True)]
                    self.peak = max(self.peak, sum(q.memory_info().rss for q in family))
                except psutil.Error:
                    pass
            self.done.wait(0.1)


def one(bed: Path, hosts: list[str], ranks: int, file_size: str, items: int, work: Path) -> dict:
    results = work / "results"  # one store for every count: what each run adds is its growth
    before = results.joinpath("storeval.duckdb").stat().st_size if results.joinpath("storeval.duckdb").exists() else 0
    study = work / "study.yaml"
    study.write_text(json.dumps({
        "targets": {"null": {"url": "null://"}},
        "workloads": {"bw": {"bandwidth": {"file_size": file_size, "transfer_size": "1MiB",
                                           "phases": ["write", "read"]}},
                      "md": {"metadata": {"items": items}}},
        "clients": [ranks]}))
    sampler = PeakRss()
    sampler.start()
    t0 = time.monotonic()
    run = storeval("testbed", "mpiexec", "--dir", str(bed), "-hosts", ",".join(hosts), "-n", str(ranks),
                   sys.executable, "-m", "storeval", "run", str(study), "--results", str(results), "--json",
                   str(work / f"out-{ranks}.json"), "--no-html", "-q", timeout=3600)
    wall = time.monotonic() - t0
    sampler.done.set()
    sampler.join()
    if run.returncode not in (0, 1):
        raise SystemExit(f"{ranks} ranks: storeval failed:\n{run.stderr[-3000:]}")
    doc = json.loads((work / f"out-{ranks}.json").read_text())
    run_id = doc["run_id"]
    con = duckdb.connect(str(results / "storeval.duckdb"), read_only=True)
    rows = con.execute("SELECT cell_id, phase, iteration, max(end_ns), max(barrier_ns), count(*) FROM records "
                       "WHERE run_id = ? GROUP BY cell_id, phase, iteration", [run_id]).fetchall()
    con.close()
    barriers = [(exit_ - end) / 1e6 for _, _, _, end, exit_, _ in rows if exit_ and exit_ > end]
    after = (results / "storeval.duckdb").stat().st_size
    t1 = time.monotonic()
    rep = storeval("report", str(results), "--run", run_id, timeout=3600, env={**os.environ, "COLUMNS": "200"})
    report_s = time.monotonic() - t1
    if rep.returncode:
        raise SystemExit(f"report of {ranks} ranks failed: {rep.stderr[-2000:]}")
    return {"ranks": ranks, "wall_s": wall, "barrier_ms": statistics.median(barriers) if barriers else None,
            "rank0_peak_MiB": sampler.peak / (1 << 20), "store_growth_MiB": (after - before) / (1 << 20),
            "records": sum(n for *_, n in rows), "report_s": report_s}


def fit(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default=os.environ.get("RANKS", "8,32,128"))
    ap.add_argument("--nodes", type=int, default=int(os.environ.get("NODES", 4)))
    ap.add_argument("--file-size", default=os.environ.get("FILE_SIZE", "64MiB"), help="per rank, of null://")
    ap.add_argument("--items", type=int, default=int(os.environ.get("ITEMS", 100)), help="metadata items per rank")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("emulated nodes are network namespaces: run as root")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # `timeout`: the ranks stop, the nodes come down
    work = Path(tempfile.mkdtemp(prefix="storeval-mpi-scale-"))
    bed = work / "bed"
    up = storeval("testbed", "nodes", "up", str(a.nodes), "--dir", str(bed), timeout=600)
    if up.returncode:
        raise SystemExit(f"testbed nodes up failed: {up.stderr[-2000:]}")
    hosts = [f"node{i}" for i in range(1, a.nodes + 1)]
    rows = []
    try:
        for n in [int(x) for x in a.ranks.split(",")]:
            rows.append(one(bed, hosts, n, a.file_size, a.items, work))
            r = rows[-1]
            print(f"{n:>5} ranks: wall {r['wall_s']:7.1f} s  barrier {r['barrier_ms'] or 0:7.2f} ms  rank 0 peak "
                  f"{r['rank0_peak_MiB']:7.0f} MiB  store +{r['store_growth_MiB']:6.2f} MiB ({r['records']} records)  "
                  f"report {r['report_s']:5.1f} s", file=sys.stderr, flush=True)
    finally:
        storeval("testbed", "down", "--dir", str(bed), timeout=600)
    print(f"\nstoreval under mpiexec on null:// across {a.nodes} emulated nodes of one 2-core machine "
          f"(bandwidth {a.file_size} per rank write+read, metadata {a.items} items per rank; one run per count)")
    print(f"{'ranks':>6} {'wall s':>8} {'barrier ms':>11} {'rank0 MiB':>10} {'store MiB':>10} {'records':>8} {'report s':>9}")
    for r in rows:
        print(f"{r['ranks']:>6} {r['wall_s']:>8.1f} {r['barrier_ms'] or 0:>11.2f} {r['rank0_peak_MiB']:>10.0f} "
              f"{r['store_growth_MiB']:>10.2f} {r['records']:>8} {r['report_s']:>9.1f}")
    xs = [float(r["ranks"]) for r in rows]
    print(f"\nlinear model (least squares over the counts above) at {TARGET_RANKS} ranks (1,000 nodes × 8):")
    for key, unit in (("wall_s", "s"), ("barrier_ms", "ms"), ("rank0_peak_MiB", "MiB"), ("report_s", "s")):
        ys = [float(r[key] or 0) for r in rows]
        a0, b = fit(xs, ys)
        print(f"  {key:<17} {a0:10.3f} + {b:.5f} × ranks → {a0 + b * TARGET_RANKS:12.1f} {unit}")
    # the store: the first run made the file (its fixed size is not growth), and DuckDB grows in whole blocks,
    # so what a record costs is read over all later runs together
    later = rows[1:]
    if later and sum(r["records"] for r in later):
        per = sum(r["store_growth_MiB"] for r in later) / sum(r["records"] for r in later)
        records = TARGET_RANKS * later[-1]["records"] / later[-1]["ranks"]
        print(f"  store             {per * 1024:10.3f} KiB per record (runs after the first) × {records:,.0f} records "
              f"→ {per * records:12.1f} MiB")


if __name__ == "__main__":
    main()
