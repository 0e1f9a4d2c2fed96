"""System counters from /proc: what moved on the wire and to the devices, whatever the workload claims.

A snapshot is a flat ``{probe: {device: {metric: value}}}`` of cumulative counters, cheap to take (a few
/proc reads, ~100 µs), so one client per host takes one just inside each phase's barriers and the
difference is exactly what the phase moved. The same snapshots, taken every second by the sampler,
make the timelines of the report.
"""

from __future__ import annotations

import contextlib
from typing import Any

Snapshot = dict[str, dict[str, dict[str, float]]]
SECTOR = 512


def read_diskstats() -> dict[str, dict[str, float]]:
    """Per block device (disks and partitions; not loop or RAM disks): bytes and operations read and
    written, milliseconds busy. The analysis picks the device that holds a target's file system."""
    out: dict[str, dict[str, float]] = {}
    try:
        with open("/proc/diskstats", encoding="ascii") as f:
            for line in f:
                p = line.split()
                if len(p) < 14 or p[2].startswith(("loop", "ram", "zram")):
                    continue
                out[p[2]] = {"read_ops": float(p[3]), "read_bytes": float(p[5]) * SECTOR,
                             "write_ops": float(p[7]), "write_bytes": float(p[9]) * SECTOR, "busy_ms": float(p[12])}
    except OSError:
        pass
    return out


def read_netdev() -> dict[str, dict[str, float]]:
    """Per network interface: bytes and packets received and sent."""
    out: dict[str, dict[str, float]] = {}
    try:
        with open("/proc/net/dev", encoding="ascii") as f:
            for line in f.readlines()[2:]:
                name, _, rest = line.partition(":")
                v = rest.split()
                if len(v) >= 10:
                    out[name.strip()] = {"rx_bytes": float(v[0]), "rx_packets": float(v[1]),
                                         "tx_bytes": float(v[8]), "tx_packets": float(v[9])}
    except OSError:
        pass
    return out


def read_cpu() -> dict[str, dict[str, float]]:
    """Per core and in all, in jiffies: busy (all but idle and iowait), in user mode (user + nice), in the kernel
    (system + irq + softirq), waiting for I/O with nothing else to run (iowait: kept apart from idle, a disk-bound
    host shows it), stolen by the hypervisor (steal), and the total."""
    out: dict[str, dict[str, float]] = {}
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if not line.startswith("cpu"):
                    break
                p = line.split()
                v = [float(x) for x in p[1:9]]  # user nice system idle iowait irq softirq steal
                total = sum(v)
                out["all" if p[0] == "cpu" else p[0]] = {"busy": total - v[3] - v[4], "total": total,
                                                          "user": v[0] + v[1], "system": v[2] + v[5] + v[6],
                                                          "iowait": v[4], "steal": v[7]}
    except OSError:
        pass
    return out


def read_load() -> dict[str, dict[str, float]]:
    """What competes for the host, as cumulative counters (a phase's delta is what it saw): time tasks stalled
    waiting for a CPU and for memory (PSI ``some`` totals, µs), pages swapped in and out."""
    out: dict[str, float] = {}
    for kind in ("cpu", "memory"):
        with (contextlib.suppress(OSError, IndexError, ValueError, StopIteration),
              open(f"/proc/pressure/{kind}", encoding="ascii") as f):
            some = next(line for line in f if line.startswith("some"))
            out[f"{kind}_stall_us"] = float(some.rsplit("total=", 1)[1])
    with contextlib.suppress(OSError, ValueError), open("/proc/vmstat", encoding="ascii") as f:
        for line in f:
            key, _, value = line.partition(" ")
            if key in ("pswpin", "pswpout"):
                out[key] = float(value)
    return {"load": out}


def read_meminfo() -> dict[str, dict[str, float]]:
    """Page cache, dirty and write-back bytes."""
    wanted = {"Cached": "cached_bytes", "Dirty": "dirty_bytes", "Writeback": "writeback_bytes",
              "MemTotal": "total_bytes", "MemAvailable": "available_bytes"}
    out: dict[str, float] = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                if key in wanted:
                    out[wanted[key]] = float(rest.split()[0]) * 1024
    except OSError:
        pass
    return {"mem": out}


def read_process_io(pids: dict[str, int]) -> dict[str, dict[str, float]]:
    """Per client process: bytes it read and wrote through syscalls (rchar/wchar) and from storage."""
    out: dict[str, dict[str, float]] = {}
    for name, pid in pids.items():
        try:
            with open(f"/proc/{pid}/io", encoding="ascii") as f:
                values = dict(line.split(":", 1) for line in f)
            out[name] = {"rchar": float(values["rchar"]), "wchar": float(values["wchar"]),
                         "read_bytes": float(values["read_bytes"]), "write_bytes": float(values["write_bytes"])}
        except (OSError, KeyError, ValueError):
            continue
    return out


def snapshot(pids: dict[str, int] | None = None) -> Snapshot:
    snap: Snapshot = {"disk": read_diskstats(), "net": read_netdev(), "cpu": read_cpu(), "mem": read_meminfo(),
                      "load": read_load()}
    if pids:
        snap["proc"] = read_process_io(pids)
    return snap


def delta(start: Snapshot, end: Snapshot) -> Snapshot:
    """end − start for every counter present in both (gauges such as memory are differenced too)."""
    out: Snapshot = {}
    for probe, devices in end.items():
        for device, metrics in devices.items():
            before = start.get(probe, {}).get(device)
            if before is None:
                continue
            out.setdefault(probe, {})[device] = {m: v - before.get(m, v) for m, v in metrics.items()}
    return out


def flatten(snap: Snapshot) -> list[tuple[str, str, str, float]]:
    """(probe, device, metric, value) rows for the ``samples`` table."""
    return [(probe, device, metric, value) for probe, devices in snap.items()
            for device, metrics in devices.items() for metric, value in metrics.items()]


def merge(into: dict[str, Any], more: dict[str, Any]) -> None:
    """Add the counters of ``more`` (a delta) into ``into``: several hosts' deltas of one phase."""
    for probe, devices in more.items():
        for device, metrics in devices.items():
            slot = into.setdefault(probe, {}).setdefault(device, {})
            for metric, value in metrics.items():
                slot[metric] = slot.get(metric, 0.0) + value
