"""What the SERVER moved: counters of a target's server, read at the instants the host counters are.

An interface counts every process's traffic (loopback above all), so a network target's "moved" bytes come from
its server's processes on this host (``server_pids``, written by ``storeval testbed up``, settable for any
server on the same host): CPU seconds (/proc/PID/stat) and, from /proc/PID/io, the bytes each read and wrote
through syscalls (``rchar``/``wchar``) and from/to storage (``read_bytes``/``write_bytes``: what its disk did).

XRootD's own summary statistics (``kXR_query stats``, the ``link`` section of ``xrd.report``) were tried first
and left out: XRootD 5.5.3 adds a connection's bytes to them only when the connection closes, so they cannot be
read at a phase's barriers (measured: 8 MB written on an open connection left ``<in>``/``<out>`` unchanged).

A snapshot is ``{probe: {device: {metric: value}}}`` like ``counters.snapshot`` so ``counters.delta`` and
``counters.merge`` apply; the PIDs are read only on the host (and boot) that wrote them.
"""

from __future__ import annotations

import os
from typing import Any

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def boot_id() -> str:
    """This host's boot id: PIDs in a job mean something only on the host (and boot) that wrote them."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def server_spec(options: dict[str, Any]) -> dict[str, Any]:
    """Where a target's server counters are, from its options (``server_pids``); empty when unknown."""
    pids = [int(p) for p in options.get("server_pids") or []]
    return {"pids": pids, "boot_id": boot_id()} if pids else {}


def read_server_processes(pids: list[int]) -> dict[str, dict[str, float]]:
    """Per server process (``name:pid``): CPU seconds (user + system, /proc/PID/stat) and /proc/PID/io."""
    out: dict[str, dict[str, float]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            with open(f"/proc/{pid}/io", encoding="ascii") as f:
                io = dict(line.split(":", 1) for line in f)
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            out[f"{name}:{pid}"] = {
                "cpu_seconds": (int(fields[11]) + int(fields[12])) / TICKS,
                "rchar": float(io["rchar"]), "wchar": float(io["wchar"]),
                "read_bytes": float(io["read_bytes"]), "write_bytes": float(io["write_bytes"])}
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out


class ServerProbe:
    """The host leader's handle on its target's server processes; ``snapshot()`` is a few /proc reads."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.pids = spec.get("pids", []) if spec.get("boot_id") == boot_id() else []

    def snapshot(self) -> dict[str, dict[str, dict[str, float]]]:
        return {"server": read_server_processes(self.pids)} if self.pids else {}
