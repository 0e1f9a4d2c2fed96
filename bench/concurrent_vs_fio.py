"""A foreground measured beside a paced background writer: storeval's ``concurrent`` workload against one fio
invocation of two jobs, same settings; prints medians, spreads and ratios of each side.

The work, in both tools, on the given directory's file system with O_DIRECT (no page cache on either side):

* foreground: one client reading a file of ``--size`` laid out before (untimed), 1 MiB sequential reads, psync
  (storeval: a ``bandwidth`` part with ``phases: [read]``; fio: a job ``--rw=read`` after a layout job);
* background: one client writing 1 MiB blocks paced to ``--rate`` (storeval: a background ``bandwidth`` part
  with ``rate``; fio: ``--rate``), from the foreground's start until it ends (storeval: the background part
  ends when its foreground does; fio: ``--exitall``, which ends every job of the group when the first — the
  reader: the writer has far more to write than the read lasts — finishes).

Figures: the foreground's MiB/s (storeval: its part's bytes over its span; fio: the job's bw, bytes over its
runtime) and the writer's MiB/s beside it, with the share of the rate each tool's writer kept. Runs alternate
between the tools after a warm-up of each; medians of ``--reps``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess

import yaml

from common import OUT, Case, Sample, need, storeval_phase


def clear(directory: str) -> None:
    for name in os.listdir(directory):
        if name.startswith("bench."):
            os.unlink(os.path.join(directory, name))


def fio_pair(directory: str, size_mib: int, rate_mib: int) -> tuple[Sample, Sample]:
    out = os.path.join(OUT, "fio.json")
    clear(directory)
    common = ["--bs=1M", "--direct=1", "--ioengine=psync", "--fallocate=none", "--iomem=mmap"]
    subprocess.run(["fio", "--output-format=json", f"--output={out}", f"--directory={directory}",
                    "--name=layout", *common, f"--size={size_mib}M", "--rw=write", "--end_fsync=1",
                    "--filename=bench.read",
                    "--name=fg", "--stonewall", "--exitall", *common, f"--size={size_mib}M", "--rw=read",
                    "--filename=bench.read",
                    "--name=bg", *common, "--size=4G", "--rw=write", f"--rate={rate_mib}m",
                    "--filename=bench.write"], check=True, capture_output=True)
    with open(out) as f:
        jobs = {j["jobname"]: j for j in json.load(f)["jobs"]}
    clear(directory)
    fg, bg = jobs["fg"]["read"], jobs["bg"]["write"]
    writer = bg["bw_bytes"] / 2**20
    fg_s = Sample(fg["bw_bytes"] / 2**20)
    fg_s.split = f"writer {writer:.2f} MiB/s ({writer / rate_mib:.1%} of its rate)"
    return fg_s, Sample(writer)


def storeval_pair(directory: str, size_mib: int, rate_mib: int) -> tuple[Sample, Sample]:
    study = {"targets": {"d": {"url": f"file://{directory}"}}, "workloads": {"w": {"concurrent": {"parts": {
        "fg": {"clients": 1, "bandwidth": {"phases": ["read"], "file_size": f"{size_mib}MiB",
                                           "transfer_size": "1MiB", "direct": True, "engine": "psync"}},
        "bg": {"clients": 1, "background": True,
               "bandwidth": {"phases": ["write"], "file_size": "4GiB", "transfer_size": "1MiB", "direct": True,
                             "fsync": False, "rate": f"{rate_mib}MiB/s"}}}}}}}
    path = os.path.join(OUT, "concurrent.yaml")
    with open(path, "w") as f:
        yaml.safe_dump(study, f)
    ph = storeval_phase(path, "read", ["--no-html"], study_file=True)
    fg, bg = ph["groups"]["fg"], ph["groups"]["bg"]
    fg_s = Sample(fg["bandwidth_MiBps"])
    fg_s.split = (f"writer {bg['bandwidth_MiBps']:.2f} MiB/s ({bg['bandwidth_MiBps'] / rate_mib:.1%} of its rate; "
                  f"rate_held {bg.get('rate_held', 0):.1%})")
    return fg_s, Sample(bg["bandwidth_MiBps"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("directory", nargs="?", default=os.path.join(OUT, "scratch"))
    ap.add_argument("--reps", type=int, default=int(os.environ.get("REPS", 3)))
    ap.add_argument("--size", default="1GiB", help="the foreground's file")
    ap.add_argument("--rate", default="20MiB/s", help="the background writer's pace, in MiB/s")
    a = ap.parse_args()
    need("fio", "fio")
    from storeval.units import parse_size

    d = os.path.abspath(a.directory)
    os.makedirs(d, exist_ok=True)
    size_mib, rate_mib = parse_size(a.size) >> 20, int(a.rate.split("MiB")[0])
    last: dict[str, Sample] = {}

    def run(tool: str, pair) -> Sample:
        fg, bg = pair(d, size_mib, rate_mib)
        last[tool] = bg
        return fg

    fg_case = Case(f"foreground 1MiB read O_DIRECT beside a writer at {rate_mib} MiB/s", "MiB/s",
                   lambda: run("storeval", storeval_pair), lambda: run("reference", fio_pair))
    writers: dict[str, list[Sample]] = {"storeval": [], "reference": []}
    original = fg_case.before_each

    def before_each() -> None:  # the writer's figure of the run before (each run records both sides)
        for tool, sample in last.items():
            writers[tool].append(sample)
        last.clear()
        original()

    fg_case.before_each = before_each
    fg_case.run(a.reps)
    before_each()
    bg_case = Case(f"its background writer paced to {rate_mib} MiB/s", "MiB/s", lambda: None, lambda: None)
    bg_case.samples = {tool: xs[1:] for tool, xs in writers.items()}  # without the warm-up run's
    clear(d)
    if a.directory == os.path.join(OUT, "scratch"):
        shutil.rmtree(d, ignore_errors=True)
    version = subprocess.run(["fio", "--version"], capture_output=True, text=True).stdout.strip()
    print(f"\nstoreval concurrent vs {version} (two jobs, --exitall): median of {a.reps} alternating runs after a "
          f"warm-up, [min–max]; directory {d}; ratio = storeval / fio")
    for case in (fg_case, bg_case):
        print(case.line("fio"))
    for tool in ("storeval", "reference"):
        print(f"  {'storeval' if tool == 'storeval' else 'fio':8}: " + "; ".join(x.split for x in fg_case.samples[tool]))


if __name__ == "__main__":
    main()
