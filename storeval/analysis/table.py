"""The study's one-glance table, shaped like seed 000's Table 1: storage × benchmark → read, write, rate, notes.

One row per target × workload (× any swept factor other than clients). Each figure is the best mean over
the client counts measured, with the count at which it was reached — the configuration's capability, not an
arbitrary point of the sweep — and its stderr over repetitions. The JSON document carries these rows
(``table``) and the terminal and HTML reports print exactly them.

What each workload puts in the read, write and rate columns it declares itself (``Workload.report``:
``read``, ``write``, ``rate``, see ``workloads/base.py``), in the unit its phase table uses (``storeval/units.py``
says which figure is in which), e.g.

* read / write: bandwidth's ``read`` (else ``reread``, ``randread``) and ``write`` (else ``rewrite``,
  ``randwrite``) in MiB/s; copy's download / upload and the skim's bytes requested per second in MB/s.
* rate: ops/s for bandwidth (of the read phase) and for the main metadata phases (dir-create, file-create,
  file-stat, file-remove; all of them are in the phase table); events/s for the skim.

Each row carries ``read`` and ``write`` (the figure in that unit, with ``unit``) and, for every byte rate,
``read_MiBps`` and ``write_MiBps``: the same figure in MiB/s, whatever the workload's unit (the JSON's field
names are only ever extended).

Rows of one workload (and its other factors) sit together, its targets in the study's order beside each other:
the table answers "which system, for what".

With client groups (issue 17) the client counts of the groups (factors ``clients.<group>``) are swept like
``clients``: each row takes the best over them, and beneath the row of all clients comes one row per group
(``group``), its figures taken from the group's own summaries (the group's aggregate over its own span) at the
group's client count.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .figures import ConfigSummary
from ..stats import Summary
from ..units import convert_rate, is_byte_rate, plural
from ..workloads import workload_class
from ..workloads.base import Best


def _figure(s: Summary | None, clients: int, phase: str, scale: float = 1.0) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"mean": s.mean * scale, "stderr": s.stderr * scale if s.stderr is not None else None, "n": s.n,
            "clients": clients, "phase": phase}


def in_unit(f: dict[str, Any] | None, unit: str) -> dict[str, Any] | None:
    """A Table-1 figure with its unit named (``unit``)."""
    return None if f is None else {**f, "unit": unit}


def as_MiBps(f: dict[str, Any] | None, unit: str) -> dict[str, Any] | None:
    """A byte-rate figure in MiB/s (the ``read_MiBps``/``write_MiBps`` fields); None for other units."""
    if f is None or not is_byte_rate(unit):
        return None
    return {**f, "mean": convert_rate(f["mean"], unit, "MiB/s"), "stderr": convert_rate(f["stderr"], unit, "MiB/s")}


def _best(candidates: list[dict[str, Any] | None]) -> dict[str, Any] | None:
    found = [c for c in candidates if c is not None]
    return max(found, key=lambda c: c["mean"]) if found else None


def _first_best(best: Best | None, by_phase: dict[str, list[ConfigSummary]]) -> dict[str, Any] | None:
    """The best mean of ``best``'s figure in the first of its phases that has one."""
    found = None
    for phase in (best.phases or ()) if best is not None else ():
        if phase in by_phase and found is None:
            found = _best([_figure(best.value(r), r.clients, r.phase, best.scale) for r in by_phase[phase]])
    return found


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
    reps = plural(total, "rep")  # "in 1 of 1 rep", "in 2 of 3 reps"
    notes = [f"✗ {code} in {k} of {reps}" for code, k in flags.items()]
    outliers = sum(len(r.outliers) for r in rows)
    if outliers:
        excluded = " (excluded)" if any(r.outliers_excluded for r in rows) else ""
        notes.append(f"{outliers} of {reps} outlier{excluded}")
    notes += [f"⚠ {code} in {k} of {reps}" for code, k in warnings.items()]
    return notes


def _notes(rows: list[ConfigSummary]) -> list[str]:
    notes: dict[str, None] = dict.fromkeys(rep_notes(rows))
    for r in rows:
        bad = [st for st in r.statuses if st not in ("ok", "skipped")]
        if bad:
            notes[f"{r.phase} {'/'.join(sorted(set(bad)))} in {len(bad)}/{len(r.statuses)} "
                  f"({plural(r.clients, 'client')})"] = None
        if r.reason and r.statuses and all(st == "skipped" for st in r.statuses):
            notes[f"{r.phase} skipped: {r.reason}"] = None
    return list(notes)


def _counted(k: str) -> bool:
    """A factor that counts clients (all of them, or a group's): the table takes the best over it."""
    return k == "clients" or k.startswith("clients.")


def summary_table(summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    groups: dict[tuple, list[ConfigSummary]] = defaultdict(list)
    for r in summary:
        other = tuple(sorted((k, str(v)) for k, v in r.factors.items() if not _counted(k)))
        groups[(r.target, r.workload, other)].append(r)
    order = list(dict.fromkeys((workload, other) for _, workload, other in groups))  # workloads as they came
    rows = []
    for (target, workload, other), members in sorted(groups.items(), key=lambda g: order.index((g[0][1], g[0][2]))):
        rows.append(_row(target, workload, members))
        names = list(dict.fromkeys(n for r in members for n in r.groups))
        for name in names if len(names) > 1 else ():  # one group alone is the row of all clients
            mine = [r.groups[name] for r in members if name in r.groups]
            rows.append({**_row(target, workload, mine), "group": name})
    return rows


def _row(target: str, workload: str, members: list[ConfigSummary]) -> dict[str, Any]:
    """One row of the table from a configuration's summaries over the client counts (or a group's)."""
    kind = members[0].kind
    factors = {k: v for k, v in members[0].factors.items() if not _counted(k)}
    by_phase: dict[str, list[ConfigSummary]] = defaultdict(list)
    for r in members:
        by_phase[r.phase].append(r)
    report = workload_class(kind).report
    read, write = _first_best(report.read, by_phase), _first_best(report.write, by_phase)
    rates: dict[str, dict[str, Any]] = {}
    rate = report.rate
    if rate is not None and rate.each_phase:
        shown = [ph for ph in rate.phases or () if ph in by_phase] or list(by_phase)
        for phase, rs in ((ph, by_phase[ph]) for ph in shown):
            best = _best([_figure(rate.value(r), r.clients, phase, rate.scale) for r in rs])
            if best is not None:
                rates[phase] = best
    elif rate is not None:
        if rate.phases is None:  # the phase the read (else the write) figure came from
            source = read["phase"] if read else (write["phase"] if write else None)
        else:
            source = next((ph for ph in rate.phases if ph in by_phase), None)
        best = _best([_figure(rate.value(r), r.clients, source, rate.scale)
                      for r in by_phase.get(source, [])]) if source else None
        if best is not None:
            rates[source] = best
    rate_unit = rate.unit if rate is not None else ""
    read_unit, write_unit = (report.read.unit if report.read else ""), (report.write.unit if report.write else "")
    return {"target": target, "workload": workload, "kind": kind, "factors": factors,
            "clients": sorted({r.clients for r in members}), "read": in_unit(read, read_unit),
            "write": in_unit(write, write_unit), "read_MiBps": as_MiBps(read, read_unit),
            "write_MiBps": as_MiBps(write, write_unit), "rate_unit": rate_unit, "rates": rates,
            "notes": _notes(members)}
