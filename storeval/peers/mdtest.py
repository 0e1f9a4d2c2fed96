"""mdtest: its text output (the "SUMMARY rate" table) read as a metadata run, and a metadata cell as the mdtest
command line that does the same work."""

from __future__ import annotations

import re
from datetime import datetime

from ..core.cell import Cell
from ..core.records import NS
from ..workloads.metadata import DEFAULT_PHASES, tree_size
from .base import parse_guarded, IMPORTED, PeerCell, PeerError, PeerRun, record, split_command

TOOL = "mdtest"
COUNTING = ("mdtest's rate: the operations of all tasks in a phase / the phase's time between the barriers around "
            "it, one rate per iteration (-i); its SUMMARY prints max, min, mean and std dev over the iterations, not "
            "the iterations themselves, so up to 2 iterations are stored exactly (which was first is not said) and "
            "more as the mean alone; storeval's ops/s of an imported phase is that rate")
PHASE = {"directory creation": "dir-create", "directory stat": "dir-stat", "directory removal": "dir-remove",
         "file creation": "file-create", "file stat": "file-stat", "file read": "file-read",
         "file removal": "file-remove", "tree creation": "tree-create", "tree removal": "tree-remove"}
ORDER = ["tree-create", "dir-create", "dir-stat", "dir-remove", "file-create", "file-stat", "file-read",
         "file-remove", "tree-remove"]
ROW = re.compile(r"^\s*([A-Za-z][A-Za-z ]*?)\s*:?\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$")


def detect(text: str) -> bool:
    return "mdtest" in text[:4096] and ("SUMMARY rate" in text or "Command line used:" in text
                                         or "was launched with" in text)


def _flags(argv: list[str]) -> dict[str, str | bool]:
    """mdtest's options from its command line (short options, values attached or apart)."""
    takes = set("abdefGiIlnNpsVwWxz")  # options that take a value (-a api, -n items …)
    out: dict[str, str | bool] = {}
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg.startswith("-") and len(arg) >= 2 and not arg.startswith("--"):
            flag = arg[1]
            if flag in takes:
                value = arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")
                i += 0 if arg[2:] else 1
                out[flag] = value
            else:
                for ch in arg[1:]:
                    out[ch] = True
        i += 1
    return out


def load(text: str, name: str) -> PeerRun:
    return parse_guarded(_load, text, name, "mdtest")


def _load(text: str, name: str) -> PeerRun:
    if not detect(text):
        raise PeerError(f"{name}: not mdtest output (no 'mdtest' header; save mdtest's standard output, e.g. "
                        "mdtest … > mdtest.log)")
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip().startswith("SUMMARY rate")), None)
    if start is None:
        raise PeerError(f"{name}: mdtest output without its 'SUMMARY rate' table (the run did not finish, or this "
                        "is stderr: import the standard output of an mdtest run that ended)")
    m = re.search(r"\(of (\d+) iterations?\)", lines[start])
    iterations = int(m.group(1)) if m else 1
    version = re.search(r"(mdtest-\S+) was launched with (\d+) total task", text)
    tasks = int(version.group(2)) if version else 1
    cmd = re.search(r"^Command line used:\s*(.*)$", text, re.M)
    command = cmd.group(1).strip() if cmd else None
    argv = split_command(command)
    flags = _flags(argv)
    began = re.search(r"-- started at (\S+ \S+) --", text)
    date = None
    if began:
        try:
            date = datetime.strptime(began.group(1), "%m/%d/%Y %H:%M:%S").isoformat()
        except ValueError:
            date = began.group(1)
    items_line = re.search(r"^(\d+) tasks?, (\d+) (files|directories|files/directories)\s*$", text, re.M)
    total_items = int(items_line.group(2)) if items_line else None
    depth, branching = int(flags.get("z") or 0), int(flags.get("b") or 1)
    rates: dict[str, tuple[float, float, float, float]] = {}
    skipped = []
    for line in lines[start + 1:]:
        if line.startswith("--") or line.startswith("SUMMARY") or (not line.strip() and rates):
            break
        row = ROW.match(line)
        if not row:
            continue
        label = row.group(1).strip().lower()
        mx, mn, mean, sd = (float(row.group(k)) for k in range(2, 6))
        if label not in PHASE:
            skipped.append(f"{row.group(1).strip()}: storeval has no such phase")
            continue
        if mx == 0 and mean == 0:
            continue  # a phase mdtest did not run
        rates[PHASE[label]] = (mx, mn, mean, sd)
    if not rates:
        raise PeerError(f"{name}: mdtest's SUMMARY rate table has no rows (import the output of a run that ended)")
    host = None
    steps, records, t = [], [], 0
    unique = bool(flags.get("u"))
    tree_ops = tree_size(depth, branching) * (tasks if unique else 1)
    for it in range(min(iterations, 2) if iterations <= 2 else 1):
        for phase in ORDER:
            if phase not in rates:
                continue
            mx, mn, mean, sd = rates[phase]
            rate = mean if iterations > 2 else (mx, mn)[it] if iterations == 2 else mean
            ops = tree_ops if phase.startswith("tree") else (total_items or tasks * int(flags.get("n") or 1))
            said = (f"imported, measured by {version.group(1) if version else 'mdtest'} — storeval did not time this "
                    f"(SUMMARY of {iterations} iteration{'s' if iterations != 1 else ''}: max {mx:g}, min {mn:g}, "
                    f"mean {mean:g}, std dev {sd:g} ops/s")
            said += "; only the mean is stored)" if iterations > 2 else ")"
            records.append(record(phase, it, 0, ops, ops / rate if rate > 0 else 0.0, t, host or "?",
                                  extra={"warnings": [{"code": IMPORTED, "message": said}],
                                         "peer": {"max": mx, "min": mn, "mean": mean, "stddev": sd,
                                                  "iterations": iterations}}))
            t = records[-1].end_ns + NS
            steps.append((phase, it))
    params = {"items": int(flags["n"]) if "n" in flags else None,
              "items_per_dir": int(flags["I"]) if "I" in flags else None, "depth": depth, "branching": branching,
              "leaf_only": bool(flags.get("L")), "file_size": int(flags.get("w") or 0),
              "iterations": min(iterations, 2) if iterations <= 2 else 1, "stat_stride": int(flags.get("N") or 0),
              "files_only": bool(flags.get("F")), "dirs_only": bool(flags.get("D")),
              "mode": "unique" if unique else "shared" if flags.get("c") else "single",
              "random_order": bool(flags.get("R")),
              # mdtest runs its whole set, less -F/-D's half, as storeval's default phases do; -C/-T/-E/-r pick some
              "phases": [p for p in ORDER if p in rates] if any(flags.get(f) for f in "CTEr") else DEFAULT_PHASES}
    if iterations > 2:
        skipped.append(f"{iterations} iterations: mdtest's SUMMARY gives their max/min/mean/std dev only; the mean "
                       "is stored as one iteration")
    path = str(flags.get("d") or "")
    cell = PeerCell("metadata", params, tasks, steps, records, skipped)
    return PeerRun(TOOL, version.group(1) if version else None, command, host, date, path or "mdtest",
                   f"file://{path}" if path.startswith("/") else f"mdtest:{path}", COUNTING, [cell])


# -- storeval cell → mdtest command line ---------------------------------------------------------------------
def render(cell: Cell, path: str | None) -> tuple[list[str], list[str]]:
    """(argv, what mdtest cannot express) of the mdtest run doing ``cell``'s work in directory ``path``."""
    if cell.kind != "metadata":
        return [], [f"mdtest runs metadata workloads, not {cell.kind} (use --as ior or --as fio for bandwidth)"]
    p, cannot = cell.settings, []
    argv = ["mpiexec", "-n", str(cell.clients), "mdtest"]
    if p.get("items_per_dir") is not None:
        argv += ["-I", str(p["items_per_dir"])]
    else:
        argv += ["-n", str(p["items"] if p.get("items") is not None else 100)]
    if p.get("mode") == "unique":
        argv.append("-u")
    elif p.get("mode") == "shared":
        argv.append("-c")
    if p.get("depth"):
        argv += ["-z", str(p["depth"])]
    if p.get("branching", 1) != 1:
        argv += ["-b", str(p["branching"])]
    if p.get("leaf_only"):
        argv.append("-L")
    if p.get("files_only"):
        argv.append("-F")
    if p.get("dirs_only"):
        argv.append("-D")
    if p.get("stat_stride"):
        argv += ["-N", str(p["stat_stride"])]
    if p.get("file_size"):
        argv += ["-w", str(p["file_size"]), "-e", str(p["file_size"])]
    if p.get("random_order"):
        argv.append("-R")
    if p.get("deadline"):
        argv += ["-W", str(int(p["deadline"]))]
    if p.get("repeat_for"):
        cannot.append(f"repeat_for {p['repeat_for']}: mdtest makes one pass over the items per phase")
    phases = set(p.get("phases") or [])
    if "dir-list" in phases:
        cannot.append("phase dir-list: mdtest has no directory-listing phase")
    if "file-mix" in phases:
        cannot.append("phase file-mix: mdtest runs one kind of operation per phase, never a mix")
    left = set(ORDER) - phases - ({"dir-create", "dir-stat", "dir-remove"} if p.get("files_only") else set()) \
        - ({"file-create", "file-stat", "file-read", "file-remove"} if p.get("dirs_only") else set())
    if left:
        cannot.append(f"phases without {', '.join(sorted(left))}: mdtest runs every phase of its set (-C/-T/-E/-r "
                      "choose only create, stat, read, remove as a whole)")
    argv += ["-i", str(p.get("iterations", 1)), "-d", f"{path or 'TARGET'}/mdtest-cell-{cell.index:04d}"]
    return argv, cannot
