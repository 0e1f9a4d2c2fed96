"""A phase's work per second, all clients together, with the faults that struck it and what they did to it.

Every client's record carries its bytes and operations per second of its own timed region (``tl_bytes``,
``tl_ops``, counted where each operation ended). The phase's timeline adds them up second by second from the
first client's start. Fault events (storeval/faults.py) carry when they struck relative to the phase's start
as the coordinator saw it (client 0's clock, taken just before its timed region began); they are placed on
the same axis.

The figures of a fault, from that timeline (1-second resolution — say so beside them):

* ``baseline_MiBps``: the mean rate before the fault struck; ``during_MiBps`` / ``after_MiBps``: while it was
  in force and after it was undone (each second's bytes spread evenly over that second);
* ``stall_s``: the longest run of seconds without a completed operation from the fault's start on;
* ``first_error_s``: from the fault's start to the second in which the first operation failed (degraded mode);
* ``recovered_after_s``: seconds from the fault's undo (or its moment, when nothing undoes it) until the start
  of the first whole second at ≥ 90 % of the baseline; ``recovered: false`` when no whole second after it
  reached that, ``null`` when there was no whole second after it (or no baseline) to judge by;
* ``healing_MiBps``: while the system healed itself (storeval/faults.py reads its own word: GlusterFS's heal
  info, HDFS's namenode, Ceph's placement groups), from the struck part's return until the system said it was
  whole, over the part of that inside the phase (``healing_in_phase_s``).

A fault the study asked for and did not get makes the phase a failed experiment: :func:`fault_flags` flags it
``fault-missed`` (its moment did not come within the phase, another fault held its server, or its action
failed) or ``fault-not-undone`` (its undo failed: the server may still be down), and such a flag makes
``storeval run`` exit 1 (:data:`FAILING_FLAGS`).
"""

from __future__ import annotations

import math
from typing import Any

from ..core.records import NS, PhaseRecord

MiB = 1 << 20
RECOVERED_SHARE = 0.9  # back to this share of the baseline counts as recovered
FAULT_KINDS = ("fault", "fault-failed", "fault-missed")
FAILING_FLAGS = ("fault-missed", "fault-not-undone")  # a run with one of these did not do what its study asked


def fault_flags(events: list[dict[str, Any]]) -> list[dict[str, str]]:
    """The flags of a phase's fault events (``events``: the cell's, of this phase and iteration)."""
    flags = []
    missed = "the phase ran without the fault the study asked for"
    for e in events:
        d, message = e.get("detail") or {}, str(e.get("message") or "")
        if e.get("kind") == "fault-missed":
            flag = {"code": "fault-missed", "message": f"{message}: {missed}"}
        elif e.get("kind") == "fault-failed":
            undo = d.get("stage") == "undo" or (d.get("stage") is None and message.startswith(
                ("cont after ", "start after ", "undo after ")))
            flag = {"code": "fault-not-undone", "message": message} if undo else \
                {"code": "fault-missed", "message": f"{message}: {missed}"}
        else:
            continue
        if flag not in flags:
            flags.append(flag)
    return flags


def phase_timeline(records: list[PhaseRecord], events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The phase's aggregate timeline and its faults' figures; None without records."""
    if not records:
        return None
    t0 = min(r.start_ns for r in records)
    end = max(r.end_ns for r in records)
    n = max(1, math.ceil((end - t0) / NS))
    nbytes, nops = [0] * n, [0] * n
    for r in records:
        shift = (r.start_ns - t0) // NS
        for s, (b, o) in enumerate(zip(r.tl_bytes, r.tl_ops)):
            i = min(n - 1, s + shift)
            nbytes[i] += int(b)
            nops[i] += int(o)
    errors: dict[str, list[int]] = {}  # degraded mode: failed operations by kind and second
    retried = lost = 0
    for r in records:
        shift = (r.start_ns - t0) // NS
        for kind, per_second in (r.extra.get("error_timeline") or {}).items():
            row = errors.setdefault(kind, [0] * n)
            for s, count in enumerate(per_second):
                row[min(n - 1, s + shift)] += int(count)
        counts = r.extra.get("degraded") or {}
        retried, lost = retried + counts.get("retried", 0), lost + counts.get("lost", 0)
    seconds = (end - t0) / NS
    failed = [sum(col) for col in zip(*errors.values())] if errors else None
    faults = [fault_figures(e, nbytes, seconds, failed) for e in events if e.get("kind") in FAULT_KINDS]
    return {"resolution_s": 1.0, "seconds": seconds, "bytes": nbytes, "ops": nops,
            **({"errors": errors, "retried": retried, "lost": lost} if errors or retried or lost else {}),
            **({"faults": faults} if faults else {})}


def _rate(values: list[int], lo: float, hi: float, seconds: float) -> float | None:
    """Mean MiB/s over [lo, hi) of the phase, each second's bytes spread evenly over it (the last second is
    as long as the phase lasted into it)."""
    hi = min(hi, seconds)
    if hi - lo < 0.05:  # too little of the phase to speak of a rate
        return None
    total = 0.0
    for s in range(max(0, math.floor(lo)), min(len(values), math.ceil(hi))):
        width = min(1.0, seconds - s)
        overlap = min(hi, s + width) - max(lo, s)
        if overlap > 0 and width > 0:
            total += values[s] * overlap / width
    return total / (hi - lo) / MiB


def fault_figures(event: dict[str, Any], nbytes: list[int], seconds: float,
                  failed: list[int] | None = None) -> dict[str, Any]:
    """Where the fault ``event`` falls on the timeline and what the clients' throughput did around it."""
    d = event.get("detail") or {}
    out: dict[str, Any] = {"kind": event["kind"], "action": d.get("action"), "server": d.get("server"),
                           "planned": d.get("planned"), "expect": d.get("expect"), "message": event.get("message")}
    # the coordinator's phase start is client 0's, taken just before the timed region: within a few ms of t0
    start, end = d.get("t_start_s"), d.get("t_end_s")
    out.update(start_s=start, end_s=end)
    if d.get("healing"):
        out["healing"] = d["healing"]
    if d.get("left_running"):  # what an exec command left in its process group, killed as it ended
        out["left_running"] = d["left_running"]
    if event["kind"] != "fault" or start is None:
        return out
    # the coordinator hears of a phase's end after its closing barriers: a fault due then strikes a phase whose
    # last operation has already ended, and says so
    out["inside_phase"] = start < seconds
    base = _rate(nbytes, 0.0, start, seconds)
    out["baseline_MiBps"] = base
    out["during_MiBps"] = _rate(nbytes, start, end if end is not None else seconds, seconds)
    out["after_MiBps"] = _rate(nbytes, end, seconds, seconds) if end is not None else None
    stall = longest = 0
    for s in range(math.floor(start), len(nbytes)):
        stall = stall + 1 if nbytes[s] == 0 else 0
        longest = max(longest, stall)
    out["stall_s"] = float(longest)
    out["first_error_s"] = next((max(0.0, s - start) for s in range(math.floor(start), len(failed or ()))
                                 if failed and failed[s]), None)
    back_from = end if end is not None else start
    out["recovered"] = None
    out["recovered_after_s"] = None
    whole = range(math.ceil(back_from), math.floor(seconds))  # whole seconds after it, to judge by
    if base and whole:
        for s in whole:
            if nbytes[s] / MiB >= RECOVERED_SHARE * base:
                out["recovered"], out["recovered_after_s"] = True, s - back_from
                break
        else:
            out["recovered"] = False
    out.update(healing_figures(d.get("healing"), nbytes, start, seconds))
    return out


def healing_figures(h: dict[str, Any] | None, nbytes: list[int], start: float, seconds: float) -> dict[str, Any]:
    """The clients' rate while the system healed itself: from the struck part's return (or the system's first
    word that it was short) until it said it was whole, the part of that inside the phase; empty when the
    system said nothing of healing."""
    if not h or h.get("detected_after_s") is None:
        return {}
    lo = start + (h["back_after_s"] if h.get("back_after_s") is not None else h["detected_after_s"])
    hi = start + h["healed_after_s"] if h.get("healed_after_s") is not None else seconds
    inside = max(0.0, min(hi, seconds) - lo)
    return {"healing_MiBps": _rate(nbytes, lo, hi, seconds) if inside > 0 else None, "healing_in_phase_s": inside,
            "healed_in_phase": h.get("healed_after_s") is not None and hi <= seconds}
