"""Is a figure trustworthy given the host it ran on and the time it took?

Each check reads what the host leader's counters saw between the phase's barriers (``record.extra["probes"]``,
one per host) and the records' own times, and adds a flag (the figure is suspect) or a warning (context):

* ``busy-host`` — other processes used CPU the phase could have used: foreign CPU = the host's CPU time in
  user mode − the CPU time of storeval's clients on that host − that of the target's server processes there
  (testbed). Kernel time is left out: the kernel's work for the clients (journal, writeback, kworkers) is not
  foreign load, while other jobs and CPU burners run in user mode;
  flagged when it is at least BUSY_SHARE of the host's CPU capacity over the phase (and at least
  BUSY_MIN_SECONDS of CPU, below the accounting's resolution otherwise) *and*, where the kernel reports CPU
  pressure (PSI), tasks waited for a CPU at least BUSY_SHARE of the phase: only then could the other work have
  taken CPU time the phase wanted. storeval's coordinator, sampler and
  watchdog use a few milliseconds a second and stay below the threshold.
* ``swapping`` — pages were swapped in or out during the phase; ``memory-pressure`` — tasks stalled waiting
  for memory for at least PRESSURE_SHARE of the phase (PSI ``some``).
* ``short-phase`` — the timed region lasted less than MIN_PHASE_SECONDS: the timer, the barriers around it and
  the phase's own start-up (opening files, first requests) are then a share of the figure, and the per-second
  timelines and CPU accounting (10 ms ticks) cannot resolve it.
* ``fits-in-ram`` (warning) — a read phase whose data could be served from memory: the client's page cache was
  kept (``--keep-cache``, no O_DIRECT, no drop) or the server's was, and the data read is under twice the RAM
  of the host that caches it.
"""

from __future__ import annotations

import os
from typing import Any

from ..core.records import PhaseRecord
from ..units import format_size

# the codes that judge the host and the phase's length, not the storage (a busy test machine may add them)
HOST_CODES = frozenset({"busy-host", "swapping", "memory-pressure", "short-phase"})
BUSY_SHARE = 0.10
BUSY_MIN_SECONDS = 0.05
PRESSURE_SHARE = 0.10
MIN_PHASE_SECONDS = 0.5  # barriers and start-up cost ~1 ms, CPU ticks 10 ms: both under 2 % of a phase this long
RAM_FACTOR = 2
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def check_host(fig: Any, records: list[PhaseRecord], direction: str | None) -> None:
    """Add the host and duration flags and warnings of one ``ok`` phase to ``fig``."""
    short_phase(fig, records)
    degraded(fig, records)
    written_check(fig, records)
    for host, probes, cpu in _hosts(records):
        busy_host(fig, host, probes, cpu, fig.seconds)
        memory(fig, host, probes, fig.seconds)
    if direction == "read":
        fits_in_ram(fig, records)


def _hosts(records: list[PhaseRecord]) -> list[tuple[str, dict[str, Any], float]]:
    """(host, its leader's probe delta, CPU seconds of storeval's clients on it) for every host with probes."""
    cpu: dict[str, float] = {}
    for r in records:
        cpu[r.host] = cpu.get(r.host, 0.0) + r.cpu_seconds + r.extra.get("children_cpu_seconds", 0.0)
    return [(r.host, r.extra["probes"], cpu.get(r.host, 0.0)) for r in records if r.extra.get("probes")]


def host_shares(records: list[PhaseRecord]) -> dict[str, float]:
    """Per host of one phase: the share of its CPU capacity other processes used (the environment's host load)."""
    out = {}
    for host, probes, cpu in _hosts(records):
        measured = foreign_cpu(probes, cpu)
        if measured and measured[1]:
            out[host] = round(measured[0] / measured[1], 4)
    return out


def foreign_cpu(probes: dict[str, Any], clients_cpu: float) -> tuple[float, float] | None:
    """(CPU seconds other processes used, the host's CPU capacity in seconds) over the probe window."""
    cpu = probes.get("cpu", {}).get("all")
    if not cpu or not cpu.get("total"):
        return None
    servers = sum(p.get("cpu_seconds", 0.0) for p in probes.get("server", {}).values())
    return max(0.0, cpu.get("user", cpu["busy"]) / TICKS - clients_cpu - servers), cpu["total"] / TICKS


def busy_host(fig: Any, host: str, probes: dict[str, Any], clients_cpu: float, seconds: float) -> None:
    measured = foreign_cpu(probes, clients_cpu)
    if measured is None:
        return
    foreign, capacity = measured
    share = foreign / capacity if capacity else 0.0
    fig.host_load[host] = round(share, 4)
    waited = probes.get("load", {}).get("load", {}).get("cpu_stall_us")
    contended = waited is None or (seconds > 0 and waited / 1e6 >= BUSY_SHARE * seconds)
    if share >= BUSY_SHARE and foreign >= BUSY_MIN_SECONDS and contended:
        wait = f"; tasks waited {waited / 1e6:.2f} s for a CPU" if waited else ""
        fig.flags.append({"code": "busy-host", "message": (
            f"other processes used {share:.0%} of host {host}'s CPU time during the phase ({foreign:.2f} of "
            f"{capacity:.2f} CPU s, beside storeval's clients and the target's servers{wait}): foreign load may "
            "have cut this figure — run on an idle host")})


def memory(fig: Any, host: str, probes: dict[str, Any], seconds: float) -> None:
    load = probes.get("load", {}).get("load", {})
    swapped = load.get("pswpin", 0.0) + load.get("pswpout", 0.0)
    if swapped > 0:
        fig.flags.append({"code": "swapping", "message": (
            f"host {host} swapped {swapped:,.0f} pages in and out during the phase: memory, not only the storage, "
            "set this figure")})
    stall = load.get("memory_stall_us", 0.0) / 1e6
    if seconds and stall >= PRESSURE_SHARE * seconds:
        fig.flags.append({"code": "memory-pressure", "message": (
            f"tasks on host {host} waited {stall:.2f} s for memory during the {seconds:.2f} s phase "
            f"({stall / seconds:.0%}): reclaim slowed the run — free memory or use a smaller data set")})


def short_phase(fig: Any, records: list[PhaseRecord]) -> None:
    if fig.seconds >= MIN_PHASE_SECONDS:
        return
    end = max(r.end_ns for r in records)
    exits = [r.barrier_ns for r in records if r.barrier_ns]
    barrier = f", the closing barrier alone took {(max(exits) - end) / 1e6:.2f} ms" if exits and max(exits) > end else ""
    fig.flags.append({"code": "short-phase", "message": (
        f"the timed phase lasted {fig.seconds * 1e3:.1f} ms, under the {MIN_PHASE_SECONDS:g} s minimum{barrier}: "
        "the timer, the barriers and the phase's start-up are a share of it, and CPU and timeline accounting "
        "cannot resolve it — use more data (file_size, items) or a deadline")})


def degraded(fig: Any, records: list[PhaseRecord]) -> None:
    """Flag a phase that went on through failed operations (``on_error`` retry or continue)."""
    counts = [r.extra["degraded"] for r in records if isinstance(r.extra.get("degraded"), dict)]
    if not counts:
        return
    retried, lost = sum(c.get("retried", 0) for c in counts), sum(c.get("lost", 0) for c in counts)
    rewritten = sum(c.get("rewritten_bytes", 0) for c in counts)
    failed = sum(fig.errors.values())
    if not failed:
        return
    kinds = ", ".join(f"{k} {n:,}" for k, n in sorted(fig.errors.items(), key=lambda kv: -kv[1]))
    again = (f"; {rewritten:,} acknowledged bytes the reopened file had not kept were written again (and are "
             "counted twice)") if rewritten else ""
    fig.flags.append({"code": "degraded", "message": (
        f"{failed:,} operation{'s' if failed != 1 else ''} failed during the phase ({kinds}): {retried:,} tries "
        f"again, {lost:,} operation{'s' if lost != 1 else ''} lost{again} — the figure counts the operations "
        "that succeeded, over a time that includes the failures and the pauses between tries")})


def written_check(fig: Any, records: list[PhaseRecord]) -> None:
    """Add up what the clients read back after a write phase a fault struck (Workload.check_after), and
    flag ``data-lost`` when an acknowledged block did not come back as written."""
    checks = [r.extra["written_check"] for r in records if isinstance(r.extra.get("written_check"), dict)]
    if not checks:
        return
    total: dict[str, Any] = {}
    for check in checks:
        for key, value in check.items():
            if isinstance(value, int):
                total[key] = total.get(key, 0) + value
            elif key == "first_problem" and "first_problem" not in total:
                total[key] = value
    total["clients"] = len(checks)
    fig.written_check = total
    bad = total.get("bytes_lost", 0) + total.get("bytes_corrupted", 0) + total.get("bytes_unreadable", 0)
    if bad:
        fig.flags.append({"code": "data-lost", "message": (
            f"of {total.get('bytes_checked', 0):,} bytes the writes had acknowledged, {total.get('bytes_lost', 0):,} "
            f"were missing, {total.get('bytes_corrupted', 0):,} corrupted and {total.get('bytes_unreadable', 0):,} "
            f"unreadable when read back after the phase" + (f" (first: {total['first_problem']})"
                                                            if total.get("first_problem") else ""))})


def fits_in_ram(fig: Any, records: list[PhaseRecord]) -> None:
    """Warn when a cache that was kept could hold the data the phase read."""
    states = [r.extra["cache"] for r in records if isinstance(r.extra.get("cache"), dict)]
    kept = sorted({side for s in states for side in ("client", "server") if s.get(side) == "kept"})
    rams = [r.extra["host_ram_bytes"] for r in records if r.extra.get("host_ram_bytes")]
    if not kept or not rams or not fig.bytes:
        return
    ram = max(rams)
    if fig.bytes < RAM_FACTOR * ram:
        fig.warnings.append({"code": "fits-in-ram", "message": (
            f"the {format_size(fig.bytes)} read fit in the {format_size(ram)} of RAM of the host whose "
            f"{' and '.join(kept)} page cache was kept (not dropped, no O_DIRECT): memory may have served it — "
            f"read at least {RAM_FACTOR}× RAM, or let storeval drop caches")})

