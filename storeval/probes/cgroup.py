"""Counters of a cgroup v2 control group: what all of a group's processes used, counted by the kernel.

A server counted process by process loses what a process that ended between two samples used, sees a forked
helper only once reaped, and its I/O wait only where ``kernel.task_delayacct`` is on. A group is counted as a
whole: ``cpu.stat`` (CPU time in user mode and in the kernel) and the PSI files (``io.pressure``,
``cpu.pressure``, ``memory.pressure``: the time at least one of its tasks — ``some`` — and all of its non-idle
tasks at once — ``full`` — stalled waiting for I/O, a CPU, memory), present in every v2 group on a kernel with
PSI even where v1 controllers hold the rest (the ``unified`` mount of a hybrid host).

A server's group is the one its processes are in when that is a group storeval's testbed made for it (named
``storeval-KIND-TOKEN``, :data:`SERVER_GROUP`): any other — a terminal's session, a shared slice, the root —
holds more than the server, and its figures then come from its processes alone.
"""

from __future__ import annotations

import os
import re
from pathlib import Path


MOUNTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")  # a hybrid host's v2 mount, then a v2-only host's
# how storeval's testbed names a server's groups (testbed/cgroups.py): the only groups read as a server's
SERVER_GROUP = re.compile(r"storeval-[A-Za-z0-9_.-]+-[0-9a-f]{8}")
BLKIO = "/sys/fs/cgroup/blkio"  # a hybrid host's v1 blkio hierarchy: a group's bytes and operations per device


def mount() -> Path | None:
    """Where the v2 hierarchy is mounted here, or None."""
    for root in MOUNTS:
        p = Path(root)
        if (p / "cgroup.procs").exists() and (p / "cgroup.subtree_control").exists():
            return p
    return None


def group_of(pid: int | str = "self", controller: str = "") -> str | None:
    """The v2 group (a path below the hierarchy: "/" is its root) process ``pid`` is in — with ``controller``,
    its group of that v1 controller's hierarchy (``blkio``); None if it is gone."""
    try:
        with open(f"/proc/{pid}/cgroup", encoding="utf-8") as f:
            for line in f:
                _, names, path = line.rstrip("\n").split(":", 2)
                if (controller in names.split(",")) if controller else names == "":
                    return path
    except (OSError, ValueError):
        return None
    return None


def server_groups(pids: list[int], controller: str = "") -> dict[str, int]:
    """The groups of the server's processes ``pids`` that are groups of their own (see the module docstring),
    each with one of its processes."""
    mine = group_of(controller=controller)
    out: dict[str, int] = {}
    for pid in pids:
        g = group_of(pid, controller)
        if g and g != mine and g not in out and SERVER_GROUP.fullmatch(g.rsplit("/", 1)[-1]):
            out[g] = pid
    return out


def read_blkio(group: str, recursive: bool = False) -> dict[str, float]:
    """What a v1 blkio group's processes (``recursive``: and its child groups') read and wrote on block devices
    (all of them; at the throttling layer, so every request is counted, limited or not): bytes and operations each
    way. Empty when unreadable."""
    out: dict[str, float] = {}
    base = os.path.join(BLKIO, group.lstrip("/"))
    tail = "_recursive" if recursive else ""
    try:
        for name, unit in (("io_service_bytes", "bytes"), ("io_serviced", "ops")):
            with open(os.path.join(base, f"blkio.throttle.{name}{tail}"), encoding="ascii") as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3 and parts[1] in ("Read", "Write"):
                        key = f"disk_{parts[1].lower()}_{unit}"
                        out[key] = out.get(key, 0.0) + float(parts[2])
    except (OSError, ValueError):
        return {}
    return out


def read_server_groups(pids: list[int]) -> dict[str, dict[str, float]]:
    """The server's own v2 groups' counters (:func:`read_groups`), each with what its processes' blkio group
    moved on block devices where they have one of their own (``disk_read_bytes`` … ``disk_write_ops``)."""
    groups = server_groups(pids)
    out = read_groups(list(groups))
    if os.path.isdir(BLKIO):
        blkio = server_groups(pids, "blkio")
        for g, row in out.items():
            b = group_of(groups[g], "blkio")
            if b in blkio and "disk_read_bytes" not in row:
                row.update(read_blkio(b))
    return out


def _pressure(path: str) -> tuple[float, float]:
    """(some, full) stall totals of a PSI file, in seconds."""
    some = full = 0.0
    with open(path, encoding="ascii") as f:
        for line in f:
            kind, _, rest = line.partition(" ")
            total = float(rest.rsplit("total=", 1)[1]) / 1e6
            if kind == "some":
                some = total
            elif kind == "full":
                full = total
    return some, full


IO_STAT = {"rbytes": "disk_read_bytes", "wbytes": "disk_write_bytes", "rios": "disk_read_ops",
           "wios": "disk_write_ops"}


def _io_stat(path: str) -> dict[str, float]:
    """What a v2 group read and wrote on block devices (``io.stat``, where the io controller is the v2
    hierarchy's: a v2-only host), summed over devices; empty where there is no such file."""
    out: dict[str, float] = {}
    try:
        with open(path, encoding="ascii") as f:
            for line in f:
                for field in line.split()[1:]:
                    key, _, value = field.partition("=")
                    if key in IO_STAT:
                        out[IO_STAT[key]] = out.get(IO_STAT[key], 0.0) + float(value)
    except (OSError, ValueError):
        return {}
    return out


def read_groups(groups: list[str], root: Path | None = None) -> dict[str, dict[str, float]]:
    """Per group (its path): CPU seconds in all, in user mode and in the kernel, and the seconds some and all
    of its tasks stalled waiting for I/O (``io_some_seconds``: the group's I/O wait), and some waited for a CPU
    and for memory; on a v2-only host what it read and wrote on disk too (``io.stat``). A group gone or
    unreadable is left out."""
    root = root or mount()
    out: dict[str, dict[str, float]] = {}
    if root is None:
        return out
    for g in groups:
        base = os.path.join(root, g.lstrip("/"))
        try:
            with open(os.path.join(base, "cpu.stat"), encoding="ascii") as f:
                stat = {k: float(v) / 1e6 for k, v in (line.split() for line in f) if k.endswith("_usec")}
        except (OSError, ValueError):
            continue
        row = {"cpu_seconds": stat.get("usage_usec", 0.0), "user_seconds": stat.get("user_usec", 0.0),
               "system_seconds": stat.get("system_usec", 0.0)}
        for kind in ("io", "cpu", "memory"):  # a kernel without PSI (psi=0) has none: the CPU still counts
            try:
                some, full = _pressure(os.path.join(base, f"{kind}.pressure"))
            except (OSError, ValueError, IndexError):
                continue
            row[f"{kind}_some_seconds"] = some
            if kind == "io":
                row["io_full_seconds"] = full
        row.update(_io_stat(os.path.join(base, "io.stat")))
        out[g] = row
    return out
