"""The study's one-glance table, shaped like seed 000's Table 1: storage × benchmark → read, write, rate, notes.

One row per target × workload (× any swept factor other than clients). Each figure is the best mean over
the client counts measured, with the count at which it was reached — the configuration's capability, not an
arbitrary point of the sweep — and its stderr over repetitions. The JSON document carries these rows
(``table``) and the terminal and HTML reports print exactly them.

* read / write MiB/s: bandwidth's ``read`` (else ``reread``, ``randread``) and ``write`` (else ``rewrite``,
  ``randwrite``); copy's download / upload; skim's bytes requested per second (read).
* rate: ops/s for bandwidth (of the read phase) and for the main metadata phases (dir-create, file-create,
  file-stat, file-remove; all of them are in the phase table); events/s for the skim.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .figures import ConfigSummary
from ..stats import Summary

READS = ("read", "reread", "randread", "download", "skim")
WRITES = ("write", "rewrite", "randwrite", "upload")
MB_TO_MIB = 1e6 / 2**20
MAIN_METADATA = ("dir-create", "file-create", "file-stat", "file-remove")  # the others are in the phase table


def _figure(s: Summary | None, clients: int, phase: str, scale: float = 1.0) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"mean": s.mean * scale, "stderr": s.stderr * scale if s.stderr is not None else None, "n": s.n,
            "clients": clients, "phase": phase}


def _best(candidates: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    found = [c for c in candidates if c is not None]
    return max(found, key=lambda c: c["mean"]) if found else None


def _read_figure(r: ConfigSummary) -> dict[str, Any] | None:
    if r.kind == "skim":
        return _figure(r.extras.get("MBps"), r.clients, r.phase, MB_TO_MIB)
    return _figure(r.bandwidth, r.clients, r.phase)


def ran(r: ConfigSummary) -> int:
    """How many runs of this phase there were (repetitions × iterations), skipped ones not counted."""
    return sum(1 for st in r.statuses if st != "skipped")


def rep_notes(rows: list[ConfigSummary]) -> list[str]:
    """Flags, warnings and outliers counted over the runs of the phases of ``rows``: one note per code
    (``✗ short-phase in 3 of 3 reps``, ``1 of 3 reps outlier``), never one per repetition or configuration —
    which phase and client count each concerns is in the phase tables and the messages under them."""
    total = sum(ran(r) for r in rows)
    flags: dict[str, int] = {}
    warnings: dict[str, int] = {}
    for r in rows:
        for items, into in ((r.flags, flags), (r.warnings, warnings)):
            for code in dict.fromkeys(x["code"] for x in items):
                into[code] = into.get(code, 0) + r.seen.get(code, 1)
    notes = [f"✗ {code} in {k} of {total} reps" for code, k in flags.items()]
    outliers = sum(len(r.outliers) for r in rows)
    if outliers:
        excluded = " (excluded)" if any(r.outliers_excluded for r in rows) else ""
        notes.append(f"{outliers} of {total} reps outlier{excluded}")
    notes += [f"⚠ {code} in {k} of {total} reps" for code, k in warnings.items()]
    return notes


def _notes(rows: list[ConfigSummary]) -> list[str]:
    notes: dict[str, None] = dict.fromkeys(rep_notes(rows))
    for r in rows:
        bad = [st for st in r.statuses if st not in ("ok", "skipped")]
        if bad:
            notes[f"{r.phase} {'/'.join(sorted(set(bad)))} in {len(bad)}/{len(r.statuses)} ({r.clients} cl.)"] = None
        if r.reason and r.statuses and all(st == "skipped" for st in r.statuses):
            notes[f"{r.phase} skipped: {r.reason}"] = None
    return list(notes)


def summary_table(summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[ConfigSummary]] = defaultdict(list)
    for r in summary:
        other = tuple(sorted((k, str(v)) for k, v in r.factors.items() if k != "clients"))
        groups[(r.target, r.workload, other)].append(r)
    rows = []
    for (target, workload, _), members in groups.items():
        kind = members[0].kind
        factors = {k: v for k, v in members[0].factors.items() if k != "clients"}
        by_phase: dict[str, list[ConfigSummary]] = defaultdict(list)
        for r in members:
            by_phase[r.phase].append(r)
        read = write = None
        for phase in READS:
            if phase in by_phase and read is None:
                read = _best([_read_figure(r) for r in by_phase[phase]])
        for phase in WRITES:
            if phase in by_phase and write is None:
                write = _best([_figure(r.bandwidth, r.clients, r.phase) for r in by_phase[phase]])
        rates: dict[str, dict[str, Any]] = {}
        if kind == "metadata":
            shown = [ph for ph in MAIN_METADATA if ph in by_phase] or list(by_phase)
            for phase, rs in ((ph, by_phase[ph]) for ph in shown):
                best = _best([_figure(r.ops_per_s, r.clients, phase) for r in rs])
                if best is not None:
                    rates[phase] = best
            rate_unit = "ops/s"
        elif kind == "skim":
            best = _best([_figure(r.extras.get("events_per_s"), r.clients, r.phase) for r in by_phase.get("skim", [])])
            if best is not None:
                rates["skim"] = best
            rate_unit = "events/s"
        else:
            source = read["phase"] if read else (write["phase"] if write else None)
            best = _best([_figure(r.ops_per_s, r.clients, source) for r in by_phase.get(source, [])]) if source else None
            if best is not None and kind == "bandwidth":
                rates[source] = best
            rate_unit = "ops/s"
        rows.append({"target": target, "workload": workload, "kind": kind, "factors": factors,
                     "clients": sorted({r.clients for r in members}), "read_MiBps": read, "write_MiBps": write,
                     "rate_unit": rate_unit, "rates": rates, "notes": _notes(members)})
    return rows
