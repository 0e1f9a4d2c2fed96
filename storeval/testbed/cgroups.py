"""Control groups of their own for each testbed server and emulated host: what all their processes used, counted
by the kernel.

A server's processes are counted one by one (probes/server.py), but a process that ends between two samples
takes its counters with it, a helper it forks is counted only once reaped, and how long a process waited for
its disk is counted only where ``kernel.task_delayacct`` is on. The cgroup v2 hierarchy counts a group's CPU
time (``cpu.stat``: user and kernel) and the time its tasks stalled waiting for I/O, a CPU and memory
(``io.pressure``, ``cpu.pressure``, ``memory.pressure``: PSI) whatever its processes do and on every kernel
with PSI, even where v1 controllers hold the rest (the ``unified`` mount of a hybrid host); the v1 blkio
hierarchy counts what a group read and wrote on each disk, and limits it (``disk_rate``, ``disk_iops``).

Each emulated host gets ``storeval-host-NETNS`` in each (testbed/network.py; what hydra launches there joins
them, testbed/mpilaunch.py), and each server ``storeval-KIND-TOKEN`` — below its host's when placed on one: its
name recorded in the server's state before it is made (an exclusive mkdir: a group already there is never
taken), every process the server starts joins it before it runs (``spawn``'s ``groups``), and ``stop`` removes
it once its processes are gone — only a path that is such a group (:func:`is_ours`), and the kernel removes only
an empty one: nothing of anyone's is lost. Where there is no writable hierarchy the server runs without that
group and its figures come from its processes alone.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import time
from pathlib import Path

from ..probes.cgroup import BLKIO, SERVER_GROUP, mount

PREFIX = "storeval-"
EMPTY_WAIT_S = 5.0  # how long stop waits for the group's last processes to be gone before it leaves the group


def hierarchy() -> Path | None:
    """The cgroup v2 hierarchy this process may make groups in (root only), or None."""
    root = mount()
    return root if root is not None and os.access(root, os.W_OK) else None


def new_name(kind: str) -> str:
    """A group name no one else has: the kind and a random token."""
    return f"{PREFIX}{kind}-{secrets.token_hex(4)}"


def host_group(netns: str) -> str:
    """The group of an emulated host (its namespace's name carries its network's own token): everything launched
    onto it — a server placed there (in a group of its own below), the ranks hydra starts there."""
    return f"{PREFIX}host-{netns}"


def make_host(netns: str) -> list[Path]:
    """Make the groups of the emulated host in ``netns`` (v2, and v1 blkio where the host has it), each
    exclusively: one there already is never taken (the host then runs without it); those made."""
    out = []
    for root in (hierarchy(), blkio_hierarchy()):
        if root is None:
            continue
        path = root / host_group(netns)
        try:
            os.mkdir(path)
        except OSError:
            continue
        out.append(path)
    return out


def host_path(netns: str, blkio: bool = False) -> Path | None:
    """The emulated host's v2 group (``blkio``: its v1 blkio group) when it is there."""
    root = Path(BLKIO) if blkio else mount()
    path = root / host_group(netns) if root is not None else None
    return path if path is not None and path.is_dir() else None


def host_paths(netns: str) -> list[Path]:
    """Every group of the emulated host that is there."""
    return [p for p in (host_path(netns), host_path(netns, blkio=True)) if p is not None]


def make(path: Path) -> None:
    """Create the group ``path`` exclusively (FileExistsError if it is there: someone else's)."""
    os.mkdir(path)


def blkio_hierarchy() -> Path | None:
    """The v1 blkio hierarchy this process may make groups in (a hybrid host's, root only), or None."""
    p = Path(BLKIO)
    return p if (p / "cgroup.procs").exists() and os.access(p, os.W_OK) else None


def joiner(*paths: str | None):
    """A ``preexec_fn`` that moves the new process into each group of ``paths`` before it runs its program (its
    children are born there); None without a group. A failed move ends the child before it runs anything."""
    files = [os.path.join(p, "cgroup.procs").encode() for p in paths if p]
    if not files:
        return None

    def join() -> None:
        for procs in files:
            fd = os.open(procs, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    return join


def block_devices(paths: list[str] | list[Path]) -> tuple[list[str], list[str]]:
    """(the disks holding ``paths``, each once; the paths on no block device)."""
    disks: list[str] = []
    none: list[str] = []
    for p in paths:
        d = block_device(p)
        if d is None:
            none.append(str(p))
        elif d not in disks:
            disks.append(d)
    return disks, none


def block_device(path: str | os.PathLike[str]) -> str | None:
    """``MAJOR:MINOR`` of the disk holding ``path`` (or its nearest existing parent): a partition's whole disk,
    as a blkio limit needs it; None when that is no block device (a tmpfs, an overlay, a network file system)."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    dev = os.stat(p).st_dev
    node = f"{os.major(dev)}:{os.minor(dev)}"
    sys_dev = Path("/sys/dev/block") / node
    if not sys_dev.exists():
        return None
    if (sys_dev / "partition").exists():  # the whole disk is the partition's parent in sysfs
        with contextlib.suppress(OSError):
            return (sys_dev.resolve().parent / "dev").read_text().strip()
    return node


def throttle(group: str, device: str, rate: float | None, iops: int | None) -> None:
    """Limit what group ``group`` (a v1 blkio group) reads and writes on ``device``: bytes and operations per
    second, each way (OSError when the kernel refuses)."""
    for way in ("read", "write"):
        for what, value in (("bps", rate), ("iops", iops)):
            if value:
                with open(os.path.join(group, f"blkio.throttle.{way}_{what}_device"), "w", encoding="ascii") as f:
                    f.write(f"{device} {int(value)}")


def adopt(path: str, pid: int) -> None:
    """Move process ``pid`` (one of ours, just started as another user) into group ``path``; one that is gone
    or cannot be moved stays where it is (its figures then come from its processes alone)."""
    with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.procs"), "w", encoding="ascii") as f:
        f.write(str(pid))


_HOST_GROUP = re.compile(r"storeval-host-[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def is_ours(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is named as storeval names its groups, directly in a cgroup hierarchy or in a host's group
    there, with no link on the way: a state edited to name anything else is never acted on."""
    p = Path(path)
    roots = [r for r in (mount(), Path(BLKIO)) if r is not None]
    if not p.is_absolute() or ".." in p.parts or os.path.realpath(p) != str(p):
        return False
    if _HOST_GROUP.fullmatch(p.name):
        return p.parent in roots
    if not SERVER_GROUP.fullmatch(p.name):
        return False
    return p.parent in roots or (_HOST_GROUP.fullmatch(p.parent.name) is not None and p.parent.parent in roots)


def remove(path: str | os.PathLike[str], wait: float = EMPTY_WAIT_S) -> str | None:
    """Remove group ``path`` once it is empty (its processes may take a moment to be gone); None when removed or
    not there, else why it stays (its processes, named; a path that is no group of storeval's, untouched)."""
    if not is_ours(path):
        return "not a control group storeval names (an edited state?): left alone"
    deadline = time.monotonic() + wait
    while True:
        try:
            os.rmdir(path)
            return None
        except FileNotFoundError:
            return None
        except OSError as e:
            if e.errno != errno.EBUSY:
                return e.strerror or str(e)
            if time.monotonic() >= deadline:
                pids = []
                with contextlib.suppress(OSError), open(os.path.join(path, "cgroup.procs"), encoding="ascii") as f:
                    pids = f.read().split()
                return (f"control group still holds process(es) {', '.join(pids)} (stop them)" if pids
                        else "control group still holds groups of its own")
            time.sleep(0.1)
