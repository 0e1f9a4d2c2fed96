"""fio: its JSON output (``--output-format=json`` or ``json+``) read as a bandwidth run, and a bandwidth cell as
the fio command line that does the same work."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

from ..core.cell import Cell
from ..core.records import NS
from ..workloads.bandwidth import PHASES
from .base import parse_guarded, IMPORTED, PeerCell, PeerError, PeerRun, percentile_words, record, size_bytes

TOOL = "fio"
COUNTING = ("fio's bw_bytes: a job's (or, with group_reporting, the group's) io_bytes / its runtime (the time its "
            "threads did I/O, without the file layout fio does before), per direction; storeval's MiB/s of an "
            "imported phase is that figure, ops/s its total_ios over the same time; without group_reporting each "
            "job is one client's record; fio's clat percentiles are named in the phase's note (storeval keeps no "
            "histogram of them)")
RW = {"read": [("read", "read")], "write": [("write", "write")], "randread": [("read", "randread")],
      "randwrite": [("write", "randwrite")], "rw": [("read", "read"), ("write", "write")],
      "readwrite": [("read", "read"), ("write", "write")],
      "randrw": [("read", "randread"), ("write", "randwrite")]}
ORDER = ["write", "randwrite", "read", "randread"]


def detect(doc: Any) -> bool:
    return isinstance(doc, dict) and "fio version" in doc and isinstance(doc.get("jobs"), list)


def _bool(v: Any) -> bool:
    return str(v).strip().lower() in ("1", "true", "yes", "on")


def parse(doc: dict[str, Any], name: str) -> PeerRun:
    glob = doc.get("global options") or {}
    by_name: dict[tuple, list[dict]] = {}
    for job in doc["jobs"]:
        by_name.setdefault((job.get("jobname"), job.get("groupid")), []).append(job)
    when = doc.get("timestamp")
    date = datetime.fromtimestamp(when, timezone.utc).replace(tzinfo=None).isoformat() \
        if isinstance(when, (int, float)) else doc.get("time")
    host = next((j.get("hostname") for j in doc["jobs"] if j.get("hostname")), None)
    cells, t, notes, directory = [], 0, [], None
    for (jobname, _), jobs in by_name.items():
        opts = {**glob, **(jobs[0].get("job options") or {})}
        rw = str(opts.get("rw") or opts.get("readwrite") or "read").split(":")[0]
        if rw not in RW:
            notes.append(f"job {jobname}: rw={rw} has no storeval phase (read, write, randread, randwrite, rw, randrw)")
            continue
        numjobs = int(opts.get("numjobs") or 1)
        grouped = len(jobs) == 1 and numjobs > 1
        bs = size_bytes(str(opts.get("bs") or opts.get("blocksize") or "4k").split(",")[0]) or 4096
        size = size_bytes(opts.get("size") or 0) or 0
        directory = directory or opts.get("directory") or opts.get("filename")
        steps, records = [], []
        mixed = len(RW[rw]) > 1
        for direction, phase in sorted(RW[rw], key=lambda x: ORDER.index(x[1])):
            start = t
            for k, job in enumerate(jobs):
                part = job.get(direction) or {}
                nbytes, bw = int(part.get("io_bytes") or 0), float(part.get("bw_bytes") or 0)
                if not nbytes:
                    continue
                seconds = nbytes / bw if bw > 0 else float(part.get("runtime") or 0) / 1e3
                pct = ((part.get("clat_ns") or part.get("lat_ns") or {}).get("percentile") or {})
                lat = {f"p{q}": pct.get(f"{q}.000000") / 1e3 if pct.get(f"{q}.000000") is not None else None
                       for q in (50, 90, 99)}
                said = (f"imported, measured by {doc.get('fio version')} — storeval did not time this (bw_bytes "
                        f"{bw:g}, runtime {part.get('runtime')} ms{', group_reporting' if grouped else ''}"
                        f"{', read and write ran at once (rw=' + rw + ')' if mixed else ''})"
                        + percentile_words("fio", "µs (clat)", lat))
                records.append(record(phase, 0, nbytes, int(part.get("total_ios") or 0), seconds, start,
                                      job.get("hostname") or host or "?", rank=k,
                                      extra={"warnings": [{"code": IMPORTED, "message": said}],
                                             "peer": {"bw_bytes": bw, "iops": part.get("iops"),
                                                      "runtime_ms": part.get("runtime"), "clat_us": lat}}))
            if any(r.phase == phase for r in records):
                steps.append((phase, 0))
                t = max(r.end_ns for r in records) + NS
        if not records:
            notes.append(f"job {jobname}: no bytes read or written")
            continue
        if any((j.get("trim") or {}).get("io_bytes") for j in jobs):
            notes.append(f"job {jobname}: its trims (storeval has no trim phase)")
        params = {"file_size": size - size % bs if size >= bs else bs, "transfer_size": bs,
                  "phases": [ph for ph in PHASES if (ph, 0) in steps], "layout": "file-per-client", "direct": _bool(opts.get("direct")),
                  "fsync": _bool(opts.get("end_fsync")) or _bool(opts.get("fsync_on_close")),
                  "iodepth": int(opts.get("iodepth") or 1)}
        cells.append(PeerCell("bandwidth", params, numjobs, steps, records))
    if not cells:
        raise PeerError(f"{name}: fio JSON with no job that read or wrote bytes ({'; '.join(notes) or 'no jobs'})")
    options = {**glob, **(doc["jobs"][0].get("job options") or {})}
    command = "fio " + " ".join(f"--{k}={v}" for k, v in options.items())  # fio's JSON keeps the options, not argv
    return PeerRun(TOOL, doc.get("fio version"), command, host, date, str(directory or "fio"),
                   f"file://{directory}" if str(directory or "").startswith("/") else "fio:", COUNTING, cells,
                   notes=notes + ["fio's JSON holds the job options, not its command line: the command shown is "
                                  "rebuilt from them"])


def load(text: str, name: str) -> PeerRun:
    start = text.find("{")  # fio may print notes (e.g. "note: both iodepth >= 1 and synchronous …") before it
    try:
        doc = json.loads(text[start:] if start > 0 else text)
    except ValueError as e:
        raise PeerError(f"{name}: truncated or invalid fio JSON ({e}); import the whole file fio "
                        "--output-format=json wrote, after the run ended") from None
    if not detect(doc):
        raise PeerError(f"{name}: not fio JSON (no 'fio version' and jobs; write it with fio --output-format=json)")
    return parse_guarded(parse, doc, name, "fio")


# -- storeval cell → fio command line ------------------------------------------------------------------------
def render(cell: Cell, path: str | None) -> tuple[list[str], list[str]]:
    """(argv, what fio cannot express) of the fio run doing ``cell``'s work in directory ``path``."""
    if cell.kind != "bandwidth":
        return [], [f"fio here stands for bandwidth workloads, not {cell.kind} (use --as mdtest for metadata)"]
    p, cannot = cell.settings, []
    depth = int(p.get("iodepth") or 1)
    argv = ["fio", f"--directory={path or 'TARGET'}/fio-cell-{cell.index:04d}", f"--bs={p['transfer_size']}",
            f"--size={p['file_size']}", f"--numjobs={cell.clients}", f"--iodepth={depth}",
            f"--ioengine={'io_uring' if depth > 1 else 'psync'}", f"--direct={1 if p.get('direct') else 0}",
            "--filename_format=client.$jobnum", "--group_reporting", "--output-format=json"]
    if p.get("fsync"):
        argv.append("--end_fsync=1")
    if p.get("layout") == "shared-file":
        argv.append("--filename=shared")
        cannot.append("layout shared-file: fio's jobs then share the whole file, not a segment each "
                      "(offset_increment comes closest)" if not p.get("block_size") else
                      "layout shared-file with block_size: fio's jobs cannot interleave their blocks in one file")
    if p.get("reorder"):
        cannot.append("reorder: fio has no 'read the next client's data' (IOR -C)")
    if p.get("deadline"):
        cannot.append("deadline: fio's runtime= stops each job at that time, it does not agree on the most work done")
    if p.get("verify"):
        argv.append("--verify=crc32c")
    if any(ph in ("rw", "randrw") for ph in p.get("phases") or []):
        argv.append(f"--rwmixread={(p.get('mix') or {}).get('read', 50)}")
    dist = str(p.get("distribution") or "uniform")
    if dist.startswith(("zipf:", "pareto:")):
        argv.append(f"--random_distribution={dist}")
    elif dist.startswith("hotset:"):  # fio's zoned: O % of the accesses to the first B % of the blocks
        blocks, _, ops = dist.partition(":")[2].partition("/")
        argv.append(f"--random_distribution=zoned:{float(ops):g}/{float(blocks):g}:"
                    f"{100 - float(ops):g}/{100 - float(blocks):g}")
        cannot.append("distribution hotset: fio's zoned puts the hot blocks at the file's start, storeval scatters them")
    if p.get("rate"):
        argv.append(f"--rate={int(p['rate'])}")
    if p.get("iops"):
        argv.append(f"--rate_iops={p['iops']:g}")
    # each phase a job of its own, after the previous one ended (--stonewall), all in one fio command
    for ph in p.get("phases") or []:
        argv += [f"--name={ph}", f"--rw={FIO_RW.get(ph, ph)}", "--stonewall"]
    return argv, cannot


FIO_RW = {"rewrite": "write", "reread": "read"}
