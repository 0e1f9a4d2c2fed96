"""The servers' side of a phase: what the host's CPU did (user, system, I/O wait, stolen, apart), what the target's
server processes used (CPU in user mode and in the kernel, I/O wait when the kernel counts it, read and write
calls), how busy the target's device was — and when one of them, not the clients, set the figure.

From the counters each host's leader took between the phase's barriers (engine/clients.py): ``/proc/stat``,
``/proc/diskstats`` (the device's busy milliseconds) and each server process's ``/proc/PID/stat`` and ``io``
(probes/server.py). Per phase, into ``fig.probes["servers"]``:

* ``cpu``: shares of the host's CPU time in user mode, in the kernel, waiting for I/O (iowait: a CPU with nothing to
  run while a disk works, kept apart from idle), stolen by a hypervisor, and busy, with the host's CPUs;
* ``processes``: each server process's CPUs used (CPU seconds / phase seconds), user and kernel shares, I/O wait
  seconds (only where ``kernel.task_delayacct`` is on), read and write calls per second;
* ``groups``: per control group of the servers (probes/cgroup.py: a testbed server's own), all its processes'
  CPUs used (user and kernel apart) and the shares of the phase some of its tasks and all its working tasks
  waited for I/O (``io_wait``, ``io_wait_all``: the servers' I/O wait, counted whatever delay accounting says),
  and some waited for a CPU and for memory; and what its processes read and wrote on disk (bytes, operations per
  second: its blkio group, where the host has that hierarchy);
* ``device_busy``: the share of the phase the target's device had I/O in flight.

Warnings: ``disk-bound`` when the target's device was busy DISK_BOUND of the phase; ``server-io-bound`` when a
servers' group had all its working tasks waiting for I/O IO_BOUND of the phase (a network target's disk is its
servers'); ``server-cpu-bound`` when the host was CPU_BOUND busy and the target's servers (their groups where
they have them, else their processes) used most of that. One host only: with clients on
several hosts the counters of different machines do not add up to one device or one CPU.
"""

from __future__ import annotations

from typing import Any

from ..probes.server import TICKS

DISK_BOUND = 0.9  # the target's device busy this share of the phase: the disk set the pace
CPU_BOUND = 0.9  # the host's CPUs busy this share of the phase ...
SERVER_SHARE = 0.5  # ... and the target's server processes used at least this share of that busy time
PSI_SHARES = (("io_wait", "io_some_seconds"), ("io_wait_all", "io_full_seconds"), ("cpu_wait", "cpu_some_seconds"),
              ("memory_wait", "memory_some_seconds"))  # a kernel without PSI gives none of them
IO_BOUND = 0.5  # the servers' group had all its working tasks waiting for I/O this share of the phase
MIN_SECONDS = 0.2  # jiffies (10 ms) and busy milliseconds are too coarse to judge shorter phases


def server_side(fig: Any, merged: dict[str, Any] | None, where: dict[str, Any], hosts: int) -> None:
    """Fill ``fig.probes["servers"]`` and the ``disk-bound`` / ``server-cpu-bound`` warnings of one phase from its
    clients' hosts' probe deltas (``merged``, sanity.merged_probes)."""
    if fig.probes is None or merged is None or not fig.seconds or hosts != 1:
        return
    seconds = fig.seconds
    out: dict[str, Any] = {}
    cpu = merged.get("cpu", {}).get("all", {})
    total = cpu.get("total")
    if total:
        out["cpu"] = {"cpus": round(total / TICKS / seconds, 2), "busy": cpu["busy"] / total,
                      **{k: cpu[k] / total for k in ("user", "system", "iowait", "steal") if k in cpu}}
    procs = merged.get("server", {})
    if procs:
        out["processes"] = {name: {"cpus": p.get("cpu_seconds", 0.0) / seconds,
                                   "user_cpus": p.get("user_seconds", 0.0) / seconds,
                                   "system_cpus": p.get("system_seconds", 0.0) / seconds,
                                   **({"iowait_seconds": p["iowait_seconds"]} if "iowait_seconds" in p else {}),
                                   "read_calls_per_s": p.get("syscr", 0.0) / seconds,
                                   "write_calls_per_s": p.get("syscw", 0.0) / seconds,
                                   "disk_read_bytes": p.get("read_bytes", 0.0),
                                   "disk_write_bytes": p.get("write_bytes", 0.0),
                                   **({"memory_growth_bytes": p["rss_bytes"]} if "rss_bytes" in p else {})}
                              for name, p in procs.items()}
    groups = merged.get("server_group", {})
    if groups:
        out["groups"] = {name: {"cpus": g.get("cpu_seconds", 0.0) / seconds,
                                "user_cpus": g.get("user_seconds", 0.0) / seconds,
                                "system_cpus": g.get("system_seconds", 0.0) / seconds,
                                **{share: min(1.0, g[key] / seconds) for share, key in PSI_SHARES if key in g},
                                **({"disk_read_bytes": g["disk_read_bytes"], "disk_write_bytes": g["disk_write_bytes"],
                                    "disk_read_iops": g.get("disk_read_ops", 0.0) / seconds,
                                    "disk_write_iops": g.get("disk_write_ops", 0.0) / seconds}
                                   if "disk_read_bytes" in g and "disk_write_bytes" in g else {})}
                         for name, g in groups.items()}
    device = where.get("device")
    busy_ms = merged.get("disk", {}).get(device, {}).get("busy_ms") if device else None
    if busy_ms is not None:
        out["device"] = device
        out["device_busy"] = min(1.0, busy_ms / 1000 / seconds)
    if not out:
        return
    fig.probes["servers"] = out
    if seconds < MIN_SECONDS:
        return
    if out.get("device_busy", 0.0) >= DISK_BOUND:
        iowait = out.get("cpu", {}).get("iowait")
        fig.warnings.append({"code": "disk-bound", "message": (
            f"device {device} had I/O in flight {out['device_busy']:.0%} of the phase"
            + (f" (the host's CPUs waited for I/O {iowait:.0%} of their time)" if iowait is not None else "")
            + ": the disk, not the network or the CPUs, set this figure")})
    waited = max(((n, g) for n, g in out.get("groups", {}).items() if "io_wait_all" in g),
                 key=lambda kv: kv[1]["io_wait_all"], default=None)
    if waited is not None and waited[1]["io_wait_all"] >= IO_BOUND:
        name, g = waited
        fig.warnings.append({"code": "server-io-bound", "message": (
            f"the target's servers (control group {name}) had every working task waiting for I/O "
            f"{g['io_wait_all']:.0%} of the phase (some task {g['io_wait']:.0%}): the servers' storage, not the "
            "network or the CPUs, set this figure")})
    host = out.get("cpu")
    if host and (procs or groups) and host["busy"] >= CPU_BOUND:
        # the groups count every process of the servers (helpers and threads that ended included)
        used = sum(p["cpus"] for p in (out.get("groups") or out["processes"]).values())
        if used >= SERVER_SHARE * host["busy"] * host["cpus"]:
            whose = "servers (every process of their control groups)" if groups else "server processes"
            fig.warnings.append({"code": "server-cpu-bound", "message": (
                f"the target's {whose} used {used:.2g} of the host's {host['cpus']:.2g} CPUs and the host "
                f"was {host['busy']:.0%} busy (kernel {host.get('system', 0):.0%}): the servers' CPU may have set "
                "this figure")})
