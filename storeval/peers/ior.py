"""IOR: its JSON summary (``ior … -O summaryFormat=JSON``) read as a bandwidth run, and a bandwidth cell as the
IOR command line that does the same work."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from ..core.cell import Cell
from ..core.records import NS
from ..workloads.bandwidth import PHASES
from .base import figure, parse_guarded, IMPORTED, MiB, PeerCell, PeerError, PeerRun, record, split_command

TOOL = "ior"
COUNTING = ("IOR's bwMiB: the test's aggregate bytes / the time from the first task's open to the last task's "
            "close (open, transfers, fsync with -e, close: IOR's totalTime), one figure per repetition (-i); "
            "storeval's MiB/s of an imported phase is that figure, its ops/s the transfers over the same time "
            "(IOR's own iops leaves open and close out)")


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("tests"), list) and "Command line" in doc


def _date(text: str | None) -> str | None:
    try:
        return datetime.strptime(text or "", "%a %b %d %H:%M:%S %Y").isoformat()
    except ValueError:
        return text


def parse(doc: dict[str, Any], name: str) -> PeerRun:
    command = doc.get("Command line")
    argv = split_command(command)
    odirect = "--posix.odirect" in argv or "-B" in argv
    machine = str(doc.get("Machine") or "").split()
    host = machine[-1] if machine else None
    summary = {(s.get("TestID"), s.get("operation")): s for s in doc.get("summary") or [] if isinstance(s, dict)}
    cells, t = [], 0
    if not doc["tests"]:
        raise PeerError(f"{name}: IOR JSON without tests (the run ended before its first test: import the JSON of a "
                        "run that did one)")
    for test in doc["tests"]:
        p, opts = test.get("Parameters") or {}, test.get("Options") or {}
        results = test.get("Results")
        if not p or not isinstance(results, list) or not results:
            raise PeerError(f"{name}: IOR test {test.get('TestID', '?')} has no Parameters or Results (the run "
                            "did not finish: import the JSON of a run that did)")
        tasks = opts.get("tasks") or next((s.get("numTasks") for k, s in summary.items()
                                           if k[0] == test.get("TestID")), None) \
            or (p.get("nodes") or 1) * (p.get("tasksPerNode") or 1)
        tid = test.get("TestID", "?")
        tasks = int(figure(tasks, f"test {tid}'s numTasks ({tasks!r})"))
        block, ts = (int(figure(p[k], f"test {tid}'s {k}")) for k in ("blockSize", "transferSize"))
        segments = int(figure(p.get("segmentCount") or 1, f"test {tid}'s segmentCount"))
        per_task = block * segments
        total = per_task * tasks
        rand = bool(p.get("randomOffset"))
        steps, records, seen = [], [], {"write": 0, "read": 0}
        flat = [r for rep in results for r in (rep if isinstance(rep, list) else [rep])]  # older IORs nest them
        for r in flat:
            access = r.get("access")
            if access not in seen:
                continue
            phase = ("rand" if rand else "") + access
            it = seen[access]
            seen[access] += 1
            bw = figure(r.get("bwMiB"), f"test {tid}'s bwMiB of {access} repetition {it}")
            seconds = total / MiB / bw
            how = {"code": IMPORTED, "message": f"imported, measured by IOR {doc.get('Version', '?')} — storeval "
                                               f"did not time this (bwMiB {bw:g}; totalTime {r.get('totalTime')} s: "
                                               f"open {r.get('openTime')} + transfers {r.get('wrRdTime')} + close "
                                               f"{r.get('closeTime')})"}
            records.append(record(phase, it, total, total // ts, seconds, t, host or "?",
                                  extra={"warnings": [how], "peer": {k: r.get(k) for k in (
                                      "bwMiB", "iops", "openTime", "wrRdTime", "closeTime", "totalTime",
                                      "latency")}}))
            t = records[-1].end_ns + NS
            steps.append((phase, it))
        if not records:
            raise PeerError(f"{name}: IOR test {test.get('TestID', '?')} has no write or read results (run ior "
                            "with -w and/or -r)")
        phases = [ph for ph in PHASES if any(ph == s for s, _ in steps)]  # storeval's order, as its runs hold it
        params = {"file_size": per_task, "transfer_size": ts, "phases": phases,
                  "layout": "file-per-client" if p.get("filePerProc") else "shared-file", "direct": odirect,
                  "fsync": bool(p.get("fsync")), "reorder": bool(p.get("reorderTasks")),
                  "deadline": p.get("deadlineForStonewall") or None}
        if segments > 1 and not p.get("filePerProc"):
            params["block_size"] = block  # the clients' blocks interleave in each segment, as storeval's block_size
        notes = []
        if p.get("api") not in (None, "POSIX"):
            notes.append(f"api {p.get('api')}: compared as storeval's bandwidth workload, whatever driver it uses")
        if segments > 1 and p.get("filePerProc"):
            notes.append(f"segmentCount {segments}: storeval's file_size is blockSize × segments ({per_task} bytes)")
        cells.append(PeerCell("bandwidth", params, tasks, steps, records, notes))
    first = doc["tests"][0].get("Parameters") or {}
    path = str(first.get("testFileName") or "")
    return PeerRun(TOOL, doc.get("Version"), command, host, _date(doc.get("Began")), path or "ior",
                   f"file://{path}" if path.startswith("/") else f"ior:{path}", COUNTING, cells)


def load(text: str, name: str) -> PeerRun:
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise PeerError(f"{name}: truncated or invalid IOR JSON ({e}); import the whole file that ior -O "
                        "summaryFormat=JSON wrote, after the run ended") from None
    if not detect(doc):
        raise PeerError(f"{name}: not IOR JSON (no tests and Command line; write it with ior -O summaryFormat=JSON)")
    return parse_guarded(parse, doc, name, "IOR")


# -- storeval cell → IOR command line ------------------------------------------------------------------------
def render(cell: Cell, path: str | None) -> tuple[list[str], list[str]]:
    """(argv, what IOR cannot express) of the IOR run doing ``cell``'s work in directory ``path``."""
    p, cannot = cell.settings, []
    if cell.kind != "bandwidth":
        return [], [f"IOR runs bandwidth workloads, not {cell.kind} (use --as mdtest for metadata)"]
    phases = p.get("phases") or []
    argv = ["mpiexec", "-n", str(cell.clients), "ior", "-a", "POSIX"]
    if p.get("layout") == "file-per-client":
        argv.append("-F")
    block = int(p.get("block_size") or p["file_size"]) if p.get("layout") == "shared-file" else int(p["file_size"])
    argv += ["-t", str(p["transfer_size"]), "-b", str(block)]
    if int(p["file_size"]) > block:
        argv += ["-s", str(int(p["file_size"]) // block)]
    if p.get("direct"):
        argv.append("--posix.odirect")
    if p.get("fsync"):
        argv.append("-e")
    if p.get("reorder"):
        argv.append("-C")
    if any(ph.startswith("rand") for ph in phases):
        argv.append("-z")
        if any(ph in ("write", "read") for ph in phases):
            cannot.append("sequential and random phases in one cell: IOR's -z makes every phase random (run two "
                          "IOR commands)")
    if any(ph in ("write", "rewrite", "randwrite") for ph in phases):
        argv.append("-w")
    if any(ph in ("read", "reread", "randread") for ph in phases):
        argv.append("-r")
    for ph in ("rewrite", "reread"):
        if ph in phases:
            cannot.append(f"phase {ph}: IOR writes and reads once per repetition")
    if p.get("deadline"):
        argv += ["-D", str(int(p["deadline"]))]
    if int(p.get("iodepth") or 1) > 1:
        cannot.append(f"iodepth {p['iodepth']}: IOR's POSIX backend has one transfer in flight per task")
    if p.get("verify"):
        argv.append("-R")
    for ph in phases:
        if ph in ("rw", "randrw"):
            cannot.append(f"phase {ph}: IOR does not mix reads and writes in one phase")
    if str(p.get("distribution") or "uniform") != "uniform":
        cannot.append(f"distribution {p['distribution']}: IOR's -z visits every block once")
    if p.get("rate") or p.get("iops"):
        cannot.append("rate/iops: IOR does not pace its tasks")
    argv += ["-i", "1", "-o", f"{path or 'TARGET'}/ior-cell-{cell.index:04d}/testfile"]
    return argv, cannot
