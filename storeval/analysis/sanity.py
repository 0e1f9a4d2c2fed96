"""Honesty checks: what really moved, what the hardware allows, and when the client was the limit.

For each phase:

* ``probes`` — bytes read from and written to the target's block device (local file systems) and bytes
  received and sent on the interface towards its server (network targets), CPU busy fraction and page-cache
  growth, from the counters one client per host took just inside the phase's barriers;
* ``read_amplification`` / ``write_amplification`` — bytes that moved (device, or network) / bytes the
  workload asked for: Lustre's read-ahead in seed 000 moved 1.7 times what the skim needed;
* flags ``not-physical`` — a rate above a declared limit (``limits:`` of the target) or above the link speed
  of the interface, with the limit named (the 26 million IOPS of seed 002 were cache); or more than
  LINK_TOLERANCE above ``where["link_rate"]``, the sum of the rates of the emulated links every client sits
  behind (issue 17, links.py), naming those links;
* flag ``stalled`` — no client completed an operation for longer than the stall limit (``limits: {stall:
  2s}`` of the target, default 2 s, or STALL_LATENCIES times the median latency when operations are that
  slow), with every such interval (its start in the phase and its length), or errors were retried inside an
  ``ok`` phase: a frozen server must not pass as a normal figure;
* warnings ``cache-served`` (the device delivered far fewer bytes than were read) and ``client-bound``
  (storeval's clients were busy on CPU most of the phase: the client, not the storage, may set the figure);
* the servers' side (``servers.py``): host CPU split, server processes, device busy; ``disk-bound`` and
  ``server-cpu-bound``;
* the host and duration guards of ``guards.py``: busy-host, swapping, memory-pressure, short-phase, fits-in-ram;
  and ``clock-skew`` (``clocks.py``): MPI clients' clocks not aligned well enough for the phase's length.
"""

from __future__ import annotations

from typing import Any

from ..core.records import NS, PhaseRecord, quiet_spans
from ..probes.counters import merge
from .clocks import check_clock
from .guards import check_host
from .servers import server_side
from ..units import format_size, sig


def format_mib_rate(bps: float) -> str:
    """Bytes per second in MiB/s, the unit of the bandwidth figures a limit is checked against (units.py)."""
    return f"{sig(bps / 2**20)} MiB/s"


def format_rate(bps: float) -> str:
    """Bytes per second in decimal units, as link and device limits are written (MB/s, GB/s)."""
    for unit, scale in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= scale:
            return f"{sig(bps / scale)} {unit}"
    return f"{sig(bps)} B/s"

CLIENT_BOUND = 0.9  # CPU seconds per wall second per client above which the client may be the limit
CACHE_SERVED = 0.1  # device bytes below this fraction of the bytes read means memory served the rest
SHARED_INTERFACE = 2.0  # an interface moving this many times what the clients did carries other traffic
SHARED_INTERFACE_BYTES = 1 << 20  # ... and at least this much more
REPORTED = {"server_minio": "server (minio metrics)", "server_jmx": "server (datanode jmx)"}  # probe: source
CACHE_PROBE = "server_xcache"  # a cache's own record of what it served: hits from its disk, misses from the origin
SERVER_CACHE = 0.1  # server disk reads short of what it served by more than this fraction: its cache served it
MIN_SECONDS = 0.2  # CPU accounting is too coarse to judge shorter phases
STALL_SECONDS = 2.0  # no operation completed by any client for this long is a stall (target limits: stall)
LINK_TOLERANCE = 0.05  # an aggregate this much above the emulated links' rate is not physical (counting slack)
STALL_LATENCIES = 10  # ... or for this many median operations, when operations are that slow


def merged_probes(records: list[PhaseRecord]) -> dict[str, Any] | None:
    """The probe deltas of a phase's host leaders, summed over hosts; None when no client took any."""
    merged: dict[str, Any] = {}
    found = False
    for r in records:
        if "probes" in r.extra:
            merge(merged, r.extra["probes"])
            found = True
    return merged if found else None


def phase_probes(records: list[PhaseRecord], merged: dict[str, Any] | None,
                 where: dict[str, Any]) -> dict[str, Any] | None:
    """The probe deltas of a phase (``merged``), for the device or interface ``where`` names, and what the
    target's server says it moved (``server_*``, with ``server_source``) when its counters were taken."""
    if merged is None:
        return None
    device, iface = where.get("device"), where.get("interface")
    disk = merged.get("disk", {}).get(device, {}) if device else {}
    net = merged.get("net", {}).get(iface, {}) if iface else {}
    cpu = merged.get("cpu", {}).get("all", {})
    mem = merged.get("mem", {}).get("mem", {})
    out = {
        "device": device, "interface": iface,
        "device_read_bytes": disk.get("read_bytes") if device else None,
        "device_write_bytes": disk.get("write_bytes") if device else None,
        "net_rx_bytes": net.get("rx_bytes") if iface else None,
        "net_tx_bytes": net.get("tx_bytes") if iface else None,
        "cpu_busy_fraction": cpu["busy"] / cpu["total"] if cpu.get("total") else None,
        "page_cache_delta_bytes": mem.get("cached_bytes"),
    }
    procs = merged.get("server", {})
    if procs:  # the server's processes on this host: what they moved through syscalls, and their disk
        out["server_processes"] = procs
        out["server_disk_read_bytes"] = sum(p.get("read_bytes", 0.0) for p in procs.values())
        out["server_disk_write_bytes"] = sum(p.get("write_bytes", 0.0) for p in procs.values())
        # A read's data passes through both the server's reads (file) and writes (socket); each may also carry
        # its own noise (MinIO's background scanner reads, XRootD's trace log writes), so the smaller is taken.
        # A write's data is what the server wrote through syscalls (socket receives are not in rchar).
        out.update(server_read_bytes=sum(min(p.get("rchar", 0.0), p.get("wchar", 0.0)) for p in procs.values()),
                   server_write_bytes=sum(p.get("wchar", 0.0) for p in procs.values()),
                   server_source="server process io")
    failures = sorted(merged.get("server_error", {}))
    for probe, label in REPORTED.items():
        # What the server reports is the same whichever host leader read it: one host's delta, never a sum.
        nodes = next((r.extra["probes"][probe] for r in records if probe in r.extra.get("probes", {})), None)
        if nodes is None:
            continue
        if any(v < 0 for m in nodes.values() for v in m.values()):  # a node restarted: its counters began again
            failures.append(f"{label.split('(')[1].rstrip(')')} went back during the phase (a node restarted)")
            continue
        out.update(server_reported=nodes, server_source=label,
                   server_read_bytes=sum(m.get("read_bytes", 0.0) for m in nodes.values()),
                   server_write_bytes=sum(m.get("write_bytes", 0.0) for m in nodes.values()))
        break
    cache = next((r.extra["probes"][CACHE_PROBE] for r in records if CACHE_PROBE in r.extra.get("probes", {})), None)
    if cache is not None:  # one host's delta, as a reported source's
        c = cache.get("cache", {})
        out.update(cache_hit_bytes=c.get("hit_bytes"), cache_miss_bytes=c.get("miss_bytes"),
                   cache_bypass_bytes=c.get("bypass_bytes"), origin_read_bytes=cache.get("origin", {}).get("read_bytes"))
    if failures:  # a reported source that could not be read: the figure falls back, and says why
        out["server_fallback"] = "; ".join(failures)
        if out.get("server_source"):
            out["server_source"] += f" ({out['server_fallback']})"
    return out


def moved_with_source(probes: dict[str, Any] | None, where: dict[str, Any],
                      direction: str) -> tuple[float | None, str | None]:
    """Bytes that really moved for a phase and where that figure comes from, best source first: the server's
    own report or its processes' io, the device under a local file system, and only last the interface
    (which counts every process's traffic)."""
    if not probes:
        return None, None
    if probes.get("server_source"):
        return probes[f"server_{direction}_bytes"], probes["server_source"]
    if where.get("medium") == "device":
        return probes["device_read_bytes" if direction == "read" else "device_write_bytes"], f"device {probes['device']}"
    if where.get("medium") == "network" and probes.get("interface"):
        fallback = f" ({probes['server_fallback']})" if probes.get("server_fallback") else ""
        return (probes["net_rx_bytes" if direction == "read" else "net_tx_bytes"],
                f"interface {probes['interface']} — includes other traffic{fallback}")
    return None, None


def moved(probes: dict[str, Any] | None, where: dict[str, Any], direction: str) -> float | None:
    return moved_with_source(probes, where, direction)[0]


def check(fig: Any, records: list[PhaseRecord], where: dict[str, Any], limits: dict[str, float], direction: str | None,
          hosts: int) -> None:
    """Fill ``fig.probes``, the amplifications, ``fig.flags`` and honesty warnings of one phase."""
    merged = merged_probes(records)
    fig.probes = phase_probes(records, merged, where)
    if fig.status != "ok" or not fig.seconds:
        return
    stalls(fig, records, limits)
    if direction in ("read", "write") and fig.bytes:
        m, source = moved_with_source(fig.probes, where, direction)
        if m is not None:
            setattr(fig, f"{direction}_amplification", m / fig.bytes)
            fig.probes["moved_source"] = source
            if direction == "read" and where.get("medium") == "device" and m < CACHE_SERVED * fig.bytes:
                fig.warnings.append({"code": "cache-served", "message": (
                    f"only {format_size(m)} of the {format_size(fig.bytes)} read came from device {where['device']}: "
                    "memory (the page cache) served the rest")})
            if source and source.startswith("interface"):
                shared_interface(fig, records, m, direction, source)
        if direction == "read":
            server_cache(fig, records)
    rate = fig.bytes / fig.seconds if fig.bytes else 0.0
    for name, limit, source in rate_limits(limits, where, direction, hosts):
        if rate > limit:
            said = (f"is more than {LINK_TOLERANCE:.0%} above the {source}" if name == "link_rate"
                    else f"exceeds the {source} {name} limit of {format_rate(limit)}")
            fig.flags.append({"code": "not-physical", "message": (
                f"{format_mib_rate(rate)} ({format_rate(rate)}) {said}: not physical — cache (or compression) "
                "suspected")})
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
    server_side(fig, merged, where, hosts)  # the servers' CPU and the device: disk-bound, server-cpu-bound (servers.py)
    check_host(fig, records, direction)  # busy host, memory, short phase, data that fits in RAM (guards.py)
    check_clock(fig, records)  # MPI clients' clock alignment across hosts (clocks.py)


def shared_interface(fig: Any, records: list[PhaseRecord], m: float, direction: str, source: str) -> None:
    """Warn when only interface counters exist and the interface moved much more than the clients did: other
    processes' traffic is in the figure."""
    key = "rchar" if direction == "read" else "wchar"  # sockets read with recv() are not in rchar: hence max
    clients = max(float(fig.bytes), sum(r.extra.get("proc_io", {}).get(key, 0.0) for r in records))
    if m > SHARED_INTERFACE * clients and m - clients > SHARED_INTERFACE_BYTES:
        fig.warnings.append({"code": "shared-interface", "message": (
            f"{source.split(' —')[0]} moved {format_size(m)} while storeval's clients {direction} "
            f"{format_size(clients)}: other traffic is in the moved figure and its amplification (a target option "
            "server_pids naming its server's processes on this host counts the server alone)")})


def server_cache(fig: Any, records: list[PhaseRecord]) -> None:
    """Flag a read the server answered from its memory: its page cache was kept (not root, --keep-cache) and
    its disk served much less than it sent."""
    states = {(r.extra.get("cache") or {}).get("server") for r in records if isinstance(r.extra.get("cache"), dict)}
    probes = fig.probes or {}
    served, disk = probes.get("server_read_bytes"), probes.get("server_disk_read_bytes")
    if "kept" not in states or served is None or disk is None or not fig.bytes:
        return
    missing = min(served, fig.bytes) - disk
    if missing > SERVER_CACHE * min(served, fig.bytes):
        fig.flags.append({"code": "server-cache", "message": (
            f"the server's disk read {format_size(max(disk, 0))} of the {format_size(min(served, fig.bytes))} it served "
            f"({probes.get('server_source')}): {format_size(missing)} came from the server's page cache, which "
            "was kept (run as root on the server's host without --keep-cache to drop it)")})


def rate_limits(limits: dict[str, float], where: dict[str, Any], direction: str | None,
                 hosts: int) -> list[tuple[str, float, str]]:
    """(name, bytes/s, where it comes from) of the limits a phase's rate must respect. The emulated links' rate
    comes first when the target is reached over the network (or its medium is not known): the clients' traffic
    passes through those links."""
    if direction not in ("read", "write"):
        return []
    # a local file system's bytes never cross the clients' links
    if where.get("link_rate") and where.get("medium") in ("network", None):
        links = where.get("links") or {}
        named = " + ".join(f"{h} {format_rate(r)}" if len(links) > 1 else h for h, r in links.items())
        return [("link_rate", where["link_rate"] * (1 + LINK_TOLERANCE),
                 f"{format_rate(where['link_rate'])} of emulated link{'s' if len(links) > 1 else ''} "
                 f"{named or '?'} (the links every client sits behind)")] + rate_limits(
                     limits, {**where, "link_rate": None}, direction, hosts)
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
    if fig.errors and not any("degraded" in r.extra for r in records):  # degraded mode flags its own (guards.py)
        counts = ", ".join(f"{kind}×{n}" for kind, n in fig.errors.items())
        fig.flags.append({"code": "stalled", "message": (
            f"errors were retried and the phase still passed ({counts}): the figure includes the retries")})
