"""Honesty checks: what really moved, what the hardware allows, and when the client was the limit.

For each phase:

* ``probes`` — bytes read from and written to the target's block device (local file systems) and bytes
  received and sent on the interface towards its server (network targets), CPU busy fraction and page-cache
  growth, from the counters one client per host took just inside the phase's barriers;
* ``read_amplification`` / ``write_amplification`` — bytes that moved (device, or network) / bytes the
  workload asked for: Lustre's read-ahead in seed 000 moved 1.7 times what the skim needed;
* flags ``not-physical`` — a rate above a declared limit (``limits:`` of the target) or above the link speed
  of the interface, with the limit named (the 26 million IOPS of seed 002 were cache);
* flag ``stalled`` — no client completed an operation for longer than the stall limit (``limits: {stall:
  2s}`` of the target, default 2 s, or STALL_LATENCIES times the median latency when operations are that
  slow), with every such interval (its start in the phase and its length), or errors were retried inside an
  ``ok`` phase: a frozen server must not pass as a normal figure;
* warnings ``cache-served`` (the device delivered far fewer bytes than were read) and ``client-bound``
  (storeval's clients were busy on CPU most of the phase: the client, not the storage, may set the figure).
"""

from __future__ import annotations

from typing import Any

from ..engine.records import NS, PhaseRecord, quiet_spans
from ..probes.counters import merge
from ..units import format_size, sig


def format_rate(bps: float) -> str:
    """Bytes per second in decimal units, as link and device limits are written (MB/s, GB/s)."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= scale:
            return f"{sig(bps / scale)} {unit}"
    return f"{sig(bps)} B/s"

CLIENT_BOUND = 0.9  # CPU seconds per wall second per client above which the client may be the limit
CACHE_SERVED = 0.1  # device bytes below this fraction of the bytes read means memory served the rest
MIN_SECONDS = 0.2  # CPU accounting is too coarse to judge shorter phases
STALL_SECONDS = 2.0  # no operation completed by any client for this long is a stall (target limits: stall)
STALL_LATENCIES = 10  # ... or for this many median operations, when operations are that slow


def phase_probes(records: list[PhaseRecord], where: dict[str, Any]) -> dict[str, Any] | None:
    """The probe deltas of a phase, summed over hosts, for the device or interface ``where`` names."""
    merged: dict[str, Any] = {}
    found = False
    for r in records:
        if "probes" in r.extra:
            merge(merged, r.extra["probes"])
            found = True
    if not found:
        return None
    device, iface = where.get("device"), where.get("interface")
    disk = merged.get("disk", {}).get(device, {}) if device else {}
    net = merged.get("net", {}).get(iface, {}) if iface else {}
    cpu = merged.get("cpu", {}).get("all", {})
    mem = merged.get("mem", {}).get("mem", {})
    return {
        "device": device, "interface": iface,
        "device_read_bytes": disk.get("read_bytes") if device else None,
        "device_write_bytes": disk.get("write_bytes") if device else None,
        "net_rx_bytes": net.get("rx_bytes") if iface else None,
        "net_tx_bytes": net.get("tx_bytes") if iface else None,
        "cpu_busy_fraction": cpu["busy"] / cpu["total"] if cpu.get("total") else None,
        "page_cache_delta_bytes": mem.get("cached_bytes"),
    }


def moved(probes: dict[str, Any] | None, where: dict[str, Any], direction: str) -> float | None:
    if not probes:
        return None
    if where.get("medium") == "device":
        return probes["device_read_bytes" if direction == "read" else "device_write_bytes"]
    if where.get("medium") == "network":
        return probes["net_rx_bytes" if direction == "read" else "net_tx_bytes"]
    return None


def check(fig: Any, records: list[PhaseRecord], where: dict[str, Any], limits: dict[str, float], direction: str | None,
          hosts: int) -> None:
    """Fill ``fig.probes``, the amplifications, ``fig.flags`` and honesty warnings of one phase."""
    fig.probes = phase_probes(records, where)
    if fig.status != "ok" or not fig.seconds:
        return
    stalls(fig, records, limits)
    if direction in ("read", "write") and fig.bytes:
        m = moved(fig.probes, where, direction)
        if m is not None:
            setattr(fig, f"{direction}_amplification", m / fig.bytes)
            if direction == "read" and where.get("medium") == "device" and m < CACHE_SERVED * fig.bytes:
                fig.warnings.append({"code": "cache-served", "message": (
                    f"only {format_size(m)} of the {format_size(fig.bytes)} read came from device {where['device']}: "
                    "memory (the page cache) served the rest")})
    rate = fig.bytes / fig.seconds if fig.bytes else 0.0
    for name, limit, source in _rate_limits(limits, where, direction, hosts):
        if rate > limit:
            fig.flags.append({"code": "not-physical", "message": (
                f"{format_rate(rate)} exceeds the {source} {name} limit of {format_rate(limit)}: "
                "not physical — cache (or compression) suspected")})
    if limits.get("iops") and fig.ops_per_s and fig.ops_per_s > limits["iops"]:
        fig.flags.append({"code": "not-physical", "message": (
            f"{fig.ops_per_s:,.0f} ops/s exceeds the declared iops limit of {limits['iops']:,.0f}: "
            "not physical — cache suspected")})
    if where.get("medium") == "memory" and fig.bytes:
        fig.warnings.append({"code": "memory-medium", "message": (
            f"the target's file system ({where.get('fstype')}) lives in RAM: these are memory speeds")})
    per_client = fig.cpu_seconds / (fig.seconds * max(1, fig.clients))
    if per_client >= CLIENT_BOUND and fig.bytes and fig.seconds >= MIN_SECONDS:
        fig.warnings.append({"code": "client-bound", "message": (
            f"storeval's clients were busy on CPU {per_client:.0%} of the phase: the client, not the storage, "
            "may have set this figure")})


def _rate_limits(limits: dict[str, float], where: dict[str, Any], direction: str | None,
                 hosts: int) -> list[tuple[str, float, str]]:
    """(name, bytes/s, where it comes from) of the limits a phase's rate must respect."""
    if direction not in ("read", "write"):
        return []
    if where.get("medium") == "device":
        key = f"device_{direction}"
        return [(key, limits[key], "declared")] if limits.get(key) else []
    if where.get("medium") != "network":
        return []
    if limits.get("network"):
        return [("network", limits["network"] * hosts, "declared")]
    if where.get("link_speed_Bps"):
        return [("network", where["link_speed_Bps"] * hosts, f"{where.get('interface')} link speed")]
    return []


def stalls(fig: Any, records: list[PhaseRecord], limits: dict[str, float]) -> None:
    """Flag a phase in which no client made progress for longer than the stall limit (``fig.stalls``: start in
    the phase and length of each such span, seconds), or whose clients retried errors and still passed.

    Each client's record says when it last completed an operation and when none of its threads completed
    any (``gaps``, kept by OpLog as it folds its buffers: nothing is added per operation); a span counts
    while every client still working was in such a pause."""
    start = min(r.start_ns for r in records)
    tracks = [(r.start_ns, r.start_ns + r.extra["last_op_ns"],
               [(r.start_ns + t, n) for t, n in r.extra.get("gaps", [])]) for r in records if "last_op_ns" in r.extra]
    p50 = (fig.latency_us or {}).get("p50")
    limit = max(limits.get("stall", STALL_SECONDS), STALL_LATENCIES * p50 / 1e6 if p50 else 0.0)
    spans = [(t, n) for t, n in quiet_spans(tracks) if n > limit * NS]
    fig.stalls = [{"start_s": round((t - start) / NS, 3), "seconds": round(n / NS, 3)} for t, n in spans]
    if spans:
        where = ", ".join(f"{s['seconds']:.2f} s from {s['start_s']:.2f} s" for s in fig.stalls[:5])
        more = f" and {len(spans) - 5} more" if len(spans) > 5 else ""
        fig.flags.append({"code": "stalled", "message": (
            f"no client completed an operation for {where} into the phase{more} (stall limit {limit:.3g} s): "
            "the figure includes the pause")})
    if fig.errors:
        counts = ", ".join(f"{kind}×{n}" for kind, n in fig.errors.items())
        fig.flags.append({"code": "stalled", "message": (
            f"errors were retried and the phase still passed ({counts}): the figure includes the retries")})
