"""What the SERVER moved: counters of a target's server, read at the instants the host counters are.

An interface counts every process's traffic (loopback above all), so a network target's "moved" bytes come,
best first, from what its server reports itself, then from its processes on this host:

* What the server reports: each :class:`~storeval.core.reported.CounterSource` of the target's driver
  (``Driver.counter_sources``: the s3 driver's MinIO metrics, ``metrics_urls``; the hdfs driver's datanode JMX,
  ``jmx``) that its options point at, read until its counters stand still. This module asks each source and
  knows none of them.
* The server's processes on this host (``server_pids``, written by ``storeval testbed up``): CPU seconds
  (/proc/PID/stat) and, from /proc/PID/io, the bytes each moved through syscalls (``rchar``/``wchar``) and
  from/to storage (``read_bytes``/``write_bytes``: what its disk did); and the control group they are in when it
  is one of their own (``server_group``, probes/cgroup.py: a testbed server's; CPU and I/O wait of all of them).

Servers count a request when it completes (a datanode adds a block read's bytes when the read op ends), which
may be just after the client has its data: a reported snapshot is taken again until the counters stand still
(the clients are all held at a barrier then, so what still moves is the phase's own work), for at most the
target's timeout beyond the wait a cache needs. A fetch that fails is recorded as ``server_error`` (the failure,
in the device key) and the analysis falls back to the next source and says why.

A snapshot is ``{probe: {device: {metric: value}}}`` like ``counters.snapshot`` so ``counters.delta`` and
``counters.merge`` apply; the PIDs are read only on the host (and boot) that wrote them.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..errors import one_line
from .cgroup import read_server_groups
from .counters import Snapshot, delta
from ..core.reported import SETTLE_INTERVAL, CounterSource, source_class

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def boot_id() -> str:
    """This host's boot id: PIDs in a job mean something only on the host (and boot) that wrote them."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def server_spec(options: dict[str, Any], sources: tuple[str, ...] = ()) -> dict[str, Any]:
    """Where a target's server counters are, from its options (``server_pids``, and what each reported source
    of its driver, ``sources``, reads: ``reported``, only references to credentials, never keys); empty when
    unknown."""
    spec: dict[str, Any] = {}
    pids = [int(p) for p in options.get("server_pids") or []]
    if pids:
        spec.update(pids=pids, boot_id=boot_id())
    reported = {}
    for path in sources:
        cls = source_class(path)
        data = cls.spec(options)
        if data is not None:
            reported[cls.probe] = {**data, "source": path}
    if reported:
        spec["reported"] = reported
    if spec and "timeout" in options:
        spec["timeout"] = float(options["timeout"])
    return spec


def delay_accounting() -> bool:
    """Whether the kernel counts each task's time waiting for block I/O (``kernel.task_delayacct``): without
    it a process's I/O wait reads 0, so it is left out rather than reported as none."""
    try:
        with open("/proc/sys/kernel/task_delayacct", encoding="ascii") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


def read_server_processes(pids: list[int]) -> dict[str, dict[str, float]]:
    """Per server process (``name:pid``): CPU seconds (/proc/PID/stat, with those of its children once reaped: a
    server that does work through helpers — XRootD's TPC runs ``xrdcp --server`` per copy — is busy in them), in
    user mode and in the kernel apart, the seconds it waited for block I/O when the kernel counts them
    (:func:`delay_accounting`), /proc/PID/io: bytes through syscalls (``rchar``/``wchar``) and from/to
    storage (``read_bytes``/``write_bytes``), read and write calls (``syscr``/``syscw``), and its resident memory
    (``rss_bytes``, /proc/PID/statm: a gauge — a phase's delta is what it grew by, the samples its level)."""
    out: dict[str, dict[str, float]] = {}
    blkio = delay_accounting()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
            with open(f"/proc/{pid}/io", encoding="ascii") as f:
                io = dict(line.split(":", 1) for line in f)
            with open(f"/proc/{pid}/statm", encoding="ascii") as f:
                resident = int(f.read().split()[1]) * PAGE
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()  # fields[k] is stat field k + 3
            user, system = (int(fields[11]) + int(fields[13])) / TICKS, (int(fields[12]) + int(fields[14])) / TICKS
            row = {"cpu_seconds": user + system, "user_seconds": user, "system_seconds": system,
                   "rchar": float(io["rchar"]), "wchar": float(io["wchar"]),
                   "read_bytes": float(io["read_bytes"]), "write_bytes": float(io["write_bytes"]),
                   "syscr": float(io.get("syscr", 0)), "syscw": float(io.get("syscw", 0)),
                   "rss_bytes": float(resident)}
            if blkio and len(fields) > 39:
                row["iowait_seconds"] = int(fields[39]) / TICKS  # delayacct_blkio_ticks
            out[f"{name}:{pid}"] = row
        except (OSError, KeyError, ValueError, IndexError):
            continue
    return out


def pids_here(spec: dict[str, Any]) -> list[int]:
    """The server's process ids of a ``server_spec``, when this is the host (and boot) that wrote them; else none."""
    return list(spec.get("pids", [])) if spec.get("pids") and spec.get("boot_id") == boot_id() else []


class ServerProbe:
    """The host leader's handle on its target's server counters; ``snapshot()`` reads them all (each fetch of a
    reported counter bounded by the target's timeout)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.pids = pids_here(spec)
        self.timeout = float(spec.get("timeout", 30.0))
        reported = spec.get("reported") or {}
        self.sources: list[CounterSource] = [source_class(data["source"])(data, self.timeout)
                                             for data in reported.values()]

    def _settled(self, probe: str, name: str, fetch: Any, snap: Snapshot, still: float = 0.0,
                 pending: Any = None) -> None:
        """Read a reported counter until it has stood still for ``still`` seconds (and over two reads at
        least) and the source has nothing ``pending``, for at most the timeout beyond that; a failure goes into
        ``server_error`` with what failed, never out of here. Counters still moving at the deadline fail too:
        they say nothing of the phase."""
        start = time.monotonic()
        deadline = start + still + self.timeout
        interval = max(SETTLE_INTERVAL, still / 8)
        try:
            last, since = fetch(), start
            while True:
                time.sleep(interval)
                now, t = fetch(), time.monotonic()
                waiting = pending is not None and pending()
                if now != last or waiting:
                    last, since = now, t
                elif t - since >= still:
                    break
                if t > deadline:
                    raise OSError(f"{'a record still pending' if waiting else 'still moving'} after "
                                  f"{t - start:.1f} s")
            snap[probe] = last
        except (OSError, ValueError, KeyError, TypeError) as e:
            why = str(e) if isinstance(e, (OSError, ValueError)) and str(e) else one_line(e)
            snap.setdefault("server_error", {})[f"{name} failed: {why}"] = {"failed": 1.0}

    def snapshot(self) -> Snapshot:
        snap: Snapshot = {}
        if self.pids:
            snap["server"] = read_server_processes(self.pids)
            groups = read_server_groups(self.pids)
            if groups:
                snap["server_group"] = groups
        for source in self.sources:
            self._settled(source.probe, source.name, source.fetch, snap, source.still, source.pending)
        return snap


def server_delta(start: Snapshot, end: Snapshot) -> Snapshot:
    """``counters.delta`` of two snapshots, keeping a reported source's failure at either end (so the
    analysis can say why it fell back)."""
    out = delta(start, end)
    errors = {**start.get("server_error", {}), **end.get("server_error", {})}
    if errors:
        out["server_error"] = {k: {"failed": 1.0} for k in errors}
    return out
