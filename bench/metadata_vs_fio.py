"""storeval's metadata workload vs fio's filecreate, filestat and filedelete engines, same file system,
same number of files and processes; prints medians, spreads, storeval/fio ratios and CPU seconds per op.

IOR's mdtest is the natural peer but is not installable from the registries this project may use (it is
built from source with MPI); fio's file engines do the same system calls one file at a time, so they stand
in for it here.

Equal settings: every process works on its own ``--files`` empty files, all in one directory (fio puts all
jobs' files in ``--directory``; storeval runs ``mode=single, depth=0, files_only``), one open file at a
time, files created with O_CREAT and no data, stat() for the stat phase, unlink() for the delete phase.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

from common import OUT, Case, Sample, need, quiesce, storeval_phase


def fio(directory: str, engine: str, files: int, procs: int) -> Sample:
    out = os.path.join(OUT, "fio-md.json")
    subprocess.run(["fio", "--output-format=json", f"--output={out}", "--group_reporting", f"--directory={directory}",
                    "--name=bench", f"--ioengine={engine}", f"--nrfiles={files}", f"--numjobs={procs}",
                    "--filesize=4k", "--bs=4k", "--openfiles=1", "--fallocate=none", "--create_on_open=1"],
                   check=True, capture_output=True)
    with open(out) as f:
        job = json.load(f)["jobs"][-1]
    side = max((job[d] for d in ("read", "write")), key=lambda s: s["total_ios"])
    cpu = (job["usr_cpu"] + job["sys_cpu"]) / 100 * job["job_runtime"] / 1000
    return Sample(side["iops"], cpu_per_op=cpu / max(1, side["total_ios"]))


def clear(directory: str) -> None:
    for name in os.listdir(directory):
        path = os.path.join(directory, name)
        if name.startswith("bench."):
            os.unlink(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("directory", nargs="?", default=os.path.join(OUT, "md-scratch"))
    ap.add_argument("--files", type=int, default=int(os.environ.get("FILES", 20000)), help="files per process")
    ap.add_argument("--procs", default=os.environ.get("PROCS", "1,2"), help="process counts, e.g. 1,2")
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    ap.add_argument("--engine", default=os.environ.get("ENGINE", "auto"), help="storeval's engine (auto, python, psync)")
    a = ap.parse_args()
    need("fio", "fio")
    d = os.path.abspath(a.directory)
    os.makedirs(d, exist_ok=True)
    cases = []
    for procs in [int(x) for x in a.procs.split(",")]:
        common = ["--workload", "metadata", "--clients", str(procs), "--set", f"items={a.files}", "--set", "mode=single",
                  "--set", "files_only=true", "--set", "file_size=0", "--set", f"engine={a.engine}"]
        for phase, engine, fio_prep in (("file-create", "filecreate", None), ("file-stat", "filestat", "filecreate"),
                                        ("file-remove", "filedelete", "filecreate")):
            def sv(phase=phase, procs=procs) -> Sample:
                ph = storeval_phase(f"file://{d}", phase, [*common[:3], str(procs), *common[4:], "--set", f"phases={phase}"])
                cpu = sum(c["cpu_seconds"] for c in ph["client_stats"])
                return Sample(ph["ops_per_s"], cpu_per_op=cpu / max(1, ph["ops"]))

            def ref(engine=engine, procs=procs, fio_prep=fio_prep) -> Sample:
                clear(d)
                if fio_prep:  # the files must exist before fio stats or deletes them
                    fio(d, fio_prep, a.files, procs)
                    quiesce()
                result = fio(d, engine, a.files, procs)
                clear(d)
                return result

            cases.append(Case(f"{phase} ({engine}), {procs} process(es)", "ops/s", sv, ref))
    for case in cases:
        case.run(a.reps)
    if a.directory == os.path.join(OUT, "md-scratch"):
        shutil.rmtree(d, ignore_errors=True)
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nstoreval metadata vs {version} on {d}: {a.files} empty files per process, one shared directory; "
          f"median of {a.reps} alternating runs after a warm-up, [min–max]; storeval engine {a.engine}; "
          "cpu = client CPU seconds per operation; ratio = storeval / fio")
    for case in cases:
        print(case.line("fio"))


if __name__ == "__main__":
    main()
