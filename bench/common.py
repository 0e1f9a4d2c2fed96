"""Helpers shared by the bench scripts: run storeval and a reference tool alternately, compare medians.

Each case is warmed up once per tool (first touches of memory and disk on a VM are slow and would land on
whichever tool runs first), then run REPS times with the order of the tools alternating; the medians are
compared and the min–max spread is printed beside them so the reader sees how noisy the machine is.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(HERE, "out")


def quiesce() -> None:
    """Let the previous run's writeback finish — and then go on at once.

    No drop_caches and no pause: a VM that reports freed pages to its host (virtio-balloon free page
    reporting, after about 2 s) makes every allocation of page cache after a pause fault into the host.
    Measured here, 2 GiB buffered writes: 1,850 MiB/s for both tools back to back, but 400–900 MiB/s with
    4 CPU seconds of host faults after a 5 s pause. Running back to back gives both tools the same,
    steady memory; the tools drop the cached pages of their own files before reading.
    """
    os.sync()


def storeval_phase(target: str, phase: str, args: list[str], study_file: bool = False, all_iterations: bool = False,
                   all_phases: bool = False):
    """Run one storeval cell (on a target URL, or the targets of a study file) and return ``phase``'s record
    (every iteration's record with ``all_iterations``; every phase's with ``all_phases``)."""
    os.makedirs(OUT, exist_ok=True)
    out = os.path.join(OUT, "storeval.json")
    where = [target] if study_file else ["--target", target]
    cmd = [sys.executable, "-m", "storeval", "run", *where, "--results", os.path.join(OUT, "results"),
           "--json", out, "--quiet", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"storeval failed: {' '.join(cmd)}\n{proc.stderr}")
    with open(out) as f:
        doc = json.load(f)
    if all_phases:
        return doc["cells"][0]["phases"]
    found = [p for p in doc["cells"][0]["phases"] if p["phase"] == phase]
    return found if all_iterations else found[0]


def alternate(case, reps: int) -> None:
    """A warm-up run of each tool (discarded), then ``reps`` runs of each with the order alternating, each after
    ``case.before_each()``; ``case.samples[tool]`` gets every kept result."""
    for tool in ("storeval", "reference"):
        case.before_each()
        getattr(case, tool)()
    for i in range(reps):
        for tool in ("storeval", "reference") if i % 2 == 0 else ("reference", "storeval"):
            case.before_each()
            case.samples[tool].append(getattr(case, tool)())


@dataclass
class Sample:
    value: float  # the compared figure (MiB/s, ops/s)
    cpu_per_gib: float | None = None  # client CPU seconds per GiB moved
    cpu_per_op: float | None = None  # client CPU seconds per operation (metadata, or any case that gives ops)
    split: str = ""  # how the run's time divided (open, transfer, close; per client), printed beside the figure


@dataclass
class Case:
    name: str
    unit: str
    storeval: Callable[[], Sample]
    reference: Callable[[], Sample]
    before_each: Callable[[], None] = quiesce
    samples: dict[str, list[Sample]] = field(default_factory=lambda: {"storeval": [], "reference": []})

    def run(self, reps: int) -> None:
        alternate(self, reps)
        print(self.line(), file=sys.stderr, flush=True)

    def median(self, tool: str) -> float:
        return statistics.median(s.value for s in self.samples[tool])

    def ratio(self) -> float:
        return self.median("storeval") / self.median("reference")

    def line(self, ref_name: str = "ref") -> str:
        def fmt(tool: str) -> str:
            vals = [s.value for s in self.samples[tool]]
            cpu = [s.cpu_per_gib for s in self.samples[tool] if s.cpu_per_gib is not None]
            per_op = [s.cpu_per_op for s in self.samples[tool] if s.cpu_per_op is not None]
            cpu_txt = f" cpu {statistics.median(cpu):6.3f}s/GiB" if cpu else ""
            cpu_txt += f" {statistics.median(per_op) * 1e6:6.3f}µs/op" if per_op else ""
            return f"{statistics.median(vals):11.1f} [{min(vals):.0f}–{max(vals):.0f}]{cpu_txt}"
        return (f"{self.name:<44} {self.unit:<6} storeval {fmt('storeval')}   {ref_name} {fmt('reference')}   "
                f"ratio {self.ratio():.3f} {self.noise()}")

    def noise(self) -> str:
        """The ratio of each alternating pair of runs (run i of storeval / run i of the reference): when their range
        holds 1.0 the two tools differ by less than one run differs from the next, and the bench says so."""
        pairs = sorted(a.value / b.value for a, b in zip(self.samples["storeval"], self.samples["reference"]) if b.value)
        if len(pairs) < 2:
            return ""
        verdict = "within run-to-run noise" if pairs[0] <= 1.0 <= pairs[-1] else "beyond run-to-run noise"
        return f"(pairs {pairs[0]:.2f}–{pairs[-1]:.2f}: {verdict})"


def need(tool: str, apt_package: str | None = None) -> str:
    path = shutil.which(tool)
    if path:
        return path
    if apt_package and os.geteuid() == 0:
        print(f"installing {apt_package} (apt)", file=sys.stderr)
        if subprocess.run(["apt-get", "install", "-y", apt_package], capture_output=True).returncode:
            subprocess.run(["apt-get", "update"], capture_output=True)
            subprocess.run(["apt-get", "install", "-y", apt_package], capture_output=True, check=True)
        path = shutil.which(tool)
    if not path:
        raise SystemExit(f"{tool} is needed (apt-get install {apt_package or tool})")
    return path


PEERS_BIN = os.path.expanduser("~/.cache/storeval-peers/bin")
PEERS_BUILD = "bash ../shared/peers/build.sh (IOR, mdtest and MPICH's mpiexec into ~/.cache/storeval-peers/bin)"


def peer(tool: str) -> str:
    """A reference tool: ~/.cache/storeval-peers/bin first (IOR and mdtest are launched by the mpiexec they were
    built with, which lives there too), then PATH; else say how to build it."""
    path = os.path.join(PEERS_BIN, tool)
    if os.access(path, os.X_OK):
        return path
    found = shutil.which(tool)
    if found:
        return found
    raise SystemExit(f"{tool} is needed: build it with {PEERS_BUILD}")


def engines(record: dict) -> list[str]:
    """The engines storeval's clients ran a phase with (the bench prints them beside each figure)."""
    return list(record.get("io_engines") or [])


@dataclass
class Battery:
    """Like :class:`Case`, for runs that give several figures at once (mdtest's phases, IOR's write and read):
    each run returns {figure: Sample}; runs alternate between the tools after a warm-up of each."""

    name: str
    unit: str
    storeval: Callable[[], dict[str, Sample]]
    reference: Callable[[], dict[str, Sample]]
    before_each: Callable[[], None] = quiesce
    samples: dict[str, list[dict[str, Sample]]] = field(default_factory=lambda: {"storeval": [], "reference": []})

    def run(self, reps: int) -> None:
        alternate(self, reps)
        for line in self.lines():
            print(line, file=sys.stderr, flush=True)

    def figures(self) -> list[str]:
        return [k for k in self.samples["reference"][0] if all(k in s for s in self.samples["storeval"])]

    def ratio(self, figure: str) -> float:
        med = {t: statistics.median(s[figure].value for s in self.samples[t]) for t in self.samples}
        return med["storeval"] / med["reference"]

    def lines(self, ref_name: str = "ref") -> list[str]:
        out = []
        for figure in self.figures():
            case = Case(f"{self.name}: {figure}", self.unit, self.storeval, self.reference)
            case.samples = {t: [s[figure] for s in self.samples[t]] for t in self.samples}
            out.append(case.line(ref_name))
        return out
