"""Were the clients' clocks aligned well enough to time a phase that spans hosts?

A phase's time runs from the first client's start to the last client's end, and those stamps come from
different hosts' monotonic clocks. The MPI engine measures each rank's offset from rank 0's clock at a cell's
start and end (NTP-style ping-pong, engine/mpi.py) and shifts the records by the start offset; each record
carries ``extra["clock"]``: the offset, its error (half the fastest round trip), the drift by the cell's end
and its error. Ranks that share rank 0's kernel clock (same host, same boot) need no shift: their alignment is
exact and the measured offset is kept only to show the method's noise.

The residual skew of a rank is what the shift may still be wrong by anywhere in the cell: error at the start
+ |drift| + error at the end (the drift alone when the end was not measured, said so). ``clock-skew`` flags a
phase whose worst residual exceeds SKEW_FRACTION of its duration: its start and end are uncertain by that much.
"""

from __future__ import annotations

from typing import Any

from ..core.records import PhaseRecord

SKEW_FRACTION = 0.01  # a 1 s phase tolerates 10 ms of clock uncertainty, the timer's own is ~1 µs


def residual_ns(clock: dict[str, Any]) -> int:
    """What the record's shift onto rank 0's clock may still be wrong by, anywhere in the cell."""
    if clock.get("same_clock"):
        return 0
    drift = clock.get("drift_ns")
    return int(clock.get("error_ns", 0) + abs(drift or 0) + (clock.get("end_error_ns") or 0))


def clock_table(records: list[PhaseRecord]) -> dict[str, dict[str, Any]]:
    """Per client (rank) of a phase: its host, the measured offsets and the residual skew (JSON, report)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        c = r.extra.get("clock")
        if isinstance(c, dict):
            out[str(r.rank)] = {"host": r.host, **c, "residual_ns": residual_ns(c)}
    return out


def worst_skew(records: list[PhaseRecord]) -> dict[str, int]:
    """Per host: the largest residual skew of its clients' clocks (ns) in these records (the environment's)."""
    out: dict[str, int] = {}
    for r in records:
        c = r.extra.get("clock")
        if isinstance(c, dict):
            out[r.host] = max(out.get(r.host, 0), residual_ns(c))
    return out


def check_clock(fig: Any, records: list[PhaseRecord]) -> None:
    """Record the phase's clock alignment on ``fig`` and flag ``clock-skew`` when it could distort the phase."""
    table = clock_table(records)
    if not table:
        return
    worst_rank, worst = max(table.items(), key=lambda kv: kv[1]["residual_ns"])
    fig.clock = {"skew_ns": worst["residual_ns"], "ranks": table}
    if fig.seconds <= 0 or worst["residual_ns"] <= SKEW_FRACTION * fig.seconds * 1e9:
        return
    drift = worst.get("drift_ns")
    drift_text = (f"drifted {drift / 1e3:+,.0f} µs by the cell's end" if drift is not None
                  else "its drift over the cell was not measured (the cell ended early)")
    fig.flags.append({"code": "clock-skew", "message": (
        f"client {worst_rank}'s clock (host {worst['host']}) was aligned to rank 0's within "
        f"{worst['residual_ns'] / 1e3:,.0f} µs only (offset {worst.get('offset_ns', 0) / 1e3:+,.0f} ± "
        f"{worst.get('error_ns', 0) / 1e3:,.0f} µs; {drift_text}): {worst['residual_ns'] / 1e9 / fig.seconds:.1%} "
        f"of this {fig.seconds * 1e3:,.1f} ms phase, more than the {SKEW_FRACTION:.0%} allowed — keep the hosts' "
        "clocks in step (chrony/PTP) or time longer phases")})
