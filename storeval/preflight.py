"""Before anything runs: what every cell of a study needs, against what this host and its targets have.

A study that cannot fit — more client processes than the system allows, buffers larger than memory, more
data than a target's file system holds — is refused with one line that names the cell, the numbers and
the fix, before the results store or any target is touched: not after minutes of swapping, a full disk
or a fork that fails half-way. Each workload declares its own needs (``Workload.needs``); this module adds
what the engine costs (a process per client, its threads, the coordinator's open files, the results
store's growth) and compares with the host: MemAvailable, free space and inodes of local file systems,
``kernel.pid_max``, ``kernel.threads-max``, RLIMIT_NPROC and RLIMIT_NOFILE.

``--force`` lets through what only may not fit (more memory than is available now, more data than is free
now); nothing lets through what cannot fit at all (more memory than the host has, more processes than the
kernel allows, a buffer larger than RAM, offsets beyond 64 bits). Remote targets (S3, XRootD, HDFS) cannot
tell their free space cheaply, so their space is not checked. Under mpiexec the clients are ranks that
already run: what counts is the share of a cell's clients on its busiest host.
"""

from __future__ import annotations

import os
import resource
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError
from .units import format_size

MAX_OFFSET = (1 << 63) - 1  # off_t, and every storage API's offsets
ENGINE_TASKS = 3  # fork server, resource tracker, watchdog (and the probe sampler when sampling)
TASKS_PER_CLIENT = 2  # the client's main thread and its queue's feeder thread (I/O threads come on top)
FILES_PER_CLIENT = 2  # the coordinator's descriptors per client process (its sentinel and the pipe to it)
FILES_BASE = 64  # the coordinator's own descriptors: the results store, the watchdog, the queue, stdio
RECORD_BYTES = 4096  # a client's record of a phase in the results store (histogram, timeline), with margin
CELL_BYTES = 16384  # a cell's rows, phases, events and probe samples in the results store


@dataclass(frozen=True)
class Space:
    """A file system as statvfs sees it."""

    path: str  # the directory asked about
    device: int
    free: int
    total: int
    free_entries: int
    total_entries: int  # 0 where the file system does not count inodes (btrfs); total is 0 where it counts no
    # blocks either (ramfs): such a file system's space is not checked


def space_of(path: str) -> Space:
    """The file system holding ``path`` (or, if it does not exist yet, its nearest existing parent)."""
    probe = os.path.abspath(path)
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    st = os.statvfs(probe)
    return Space(path=path, device=os.stat(probe).st_dev, free=st.f_bavail * st.f_frsize,
                 total=st.f_blocks * st.f_frsize, free_entries=st.f_favail, total_entries=st.f_files)


def _read_int(path: str) -> int | None:
    try:
        with open(path, encoding="ascii") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _running_tasks() -> int:
    """Tasks (processes and threads) on the host now: the denominator of /proc/loadavg's fourth field."""
    try:
        with open("/proc/loadavg", encoding="ascii") as f:
            return int(f.read().split()[3].split("/")[1])
    except (OSError, ValueError, IndexError):
        return 0


def _user_tasks() -> int:
    """Processes and threads of this user (what RLIMIT_NPROC counts)."""
    import psutil

    uid, total = os.getuid(), 0
    for proc in psutil.process_iter(["uids", "num_threads"]):
        info = proc.info
        if info.get("uids") is not None and info["uids"].real == uid:
            total += info.get("num_threads") or 1
    return total


@dataclass(frozen=True)
class Host:
    """What this host can give a run."""

    mem_available: int
    mem_total: int
    swap_total: int
    tasks: int  # running now
    pid_max: int | None
    threads_max: int | None
    nproc_limit: int | None  # RLIMIT_NPROC (None: unlimited, or not enforced for root)
    user_tasks: int  # this user's tasks now (counted only when nproc_limit is set)
    nofile_hard: int | None  # RLIMIT_NOFILE's hard limit (None: unlimited); the soft one is raised as needed

    @classmethod
    def here(cls) -> Host:
        import psutil

        vm = psutil.virtual_memory()
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        nproc_limit = None if nproc == resource.RLIM_INFINITY or os.geteuid() == 0 else nproc
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        return cls(mem_available=vm.available, mem_total=vm.total, swap_total=psutil.swap_memory().total,
                   tasks=_running_tasks(), pid_max=_read_int("/proc/sys/kernel/pid_max"),
                   threads_max=_read_int("/proc/sys/kernel/threads-max"), nproc_limit=nproc_limit,
                   user_tasks=_user_tasks() if nproc_limit is not None else 0,
                   nofile_hard=None if hard == resource.RLIM_INFINITY else hard)


@dataclass
class Problem:
    """One thing that does not fit: what needs how much and what there is; the fix; whether --force may pass it."""

    kind: str  # memory, buffer, offsets, pid_max, threads-max, nproc, open-files, space, entries
    hard: bool  # cannot fit at all: --force does not help
    size: float  # how far beyond (need / have), to name the worst cell
    text: str
    fix: str

    @property
    def message(self) -> str:
        return f"{self.text} ({self.fix})" if self.hard else f"{self.text} ({self.fix}, or --force to run it anyway)"


CLIENTS_FIX = "lower --clients or run under mpiexec across hosts"


@dataclass
class _Disk:
    """What the run puts on one local file system: the largest cell's scratch, kept data, the results."""

    space: Space
    cell: Any = None  # the cell with the most scratch here
    root: str = ""  # its target's directory
    scratch: int = 0
    scratch_what: str = ""
    scratch_fix: str = ""
    entries: int = 0
    entries_cell: Any = None
    entries_root: str = ""
    entries_fix: str = ""
    kept: dict[str, tuple[int, str, str]] = field(default_factory=dict)  # path -> (bytes, what, fix)
    results: int = 0


def _cell(cell: Any) -> str:
    return f"cell {cell.index} ({cell.label})"


def _plural(n: int, word: str) -> str:
    return f"{n:,} {word}{'' if n == 1 else 'es' if word.endswith('ss') else 's'}"


def _biggest(needs: tuple) -> Any:
    return max(needs, key=lambda n: n.bytes) if needs else None


def _recorded(needs: Any, params: Any) -> Any:
    """A workload's needs plus what ``record: N`` holds per client: N rows of its trace, once in the client's
    columns and once more as the array sent back with the phase's record."""
    import dataclasses

    from .drivers.recording import ROW_DTYPE
    from .workloads.base import Need

    bound = getattr(params, "record", False)
    if not bound:
        return needs
    rows = Need(2 * bound * ROW_DTYPE.itemsize, f"the trace of record: {bound:,} operations", "lower record")
    return dataclasses.replace(needs, memory=(*needs.memory, rows))


def _local_path(url: str) -> str | None:
    """The local path holding a target's data (a file system's), None for any other target: its driver says."""
    from .drivers import driver_class

    return driver_class(url).carrier(url).path


def _present(directory: str) -> int:
    """Bytes of the files already in ``directory`` (kept data a run reuses instead of writing anew)."""
    try:
        return sum(e.stat().st_size for e in os.scandir(directory) if e.is_file(follow_symlinks=False))
    except OSError:
        return 0


def _on_one_host(engine: Any) -> Callable[[int], int]:
    """Clients of a k-client cell on its busiest host: all of them locally, the placement's share under MPI."""
    if engine is None or not hasattr(engine, "order"):
        return lambda n: n
    return lambda n: max(Counter(engine.hosts[r] for r in engine.order[:n]).values())


class Preflight:
    """Adds up what each cell needs, per cell and per file system, and keeps what does not fit."""

    def __init__(self, study: Any, cells: list, results: str, *, engine: Any = None, host: Host | None = None,
                 space: Callable[[str], Space] = space_of) -> None:
        self.study, self.cells, self.results = study, cells, results
        self.spawns = engine is None or not hasattr(engine, "order")  # local: every client is a new process
        self.share = _on_one_host(engine)
        self.host = host or Host.here()
        self.space = space
        self.problems: list[Problem] = []
        self.open_files = 0  # what the coordinator will need (the soft limit is raised to it)
        self._tasks_judged: set[tuple[int, int]] = set()  # (clients, threads) whose processes were counted

    # -- per cell ----------------------------------------------------------------------------------------
    def check(self) -> list[Problem]:
        from .drivers import driver_class
        from .workloads import make_workload

        disks: dict[int, _Disk] = {}
        results_disk = self._disk(disks, self.results)
        worst: dict[tuple[str, bool], Problem] = {}
        records = 0
        # A plan shares one parameter dict between the cells of a combination (repetitions, client counts,
        # targets): each is validated once, and cells whose needs are the same as an earlier one's (same
        # parameters, clients and target) add only their records — the first such cell is the one a problem
        # names anyway. So a 100,000-cell plan is checked in a moment.
        made: dict[tuple[str, int], tuple[Any, int]] = {}
        caps: dict[str, Any] = {}
        roots: dict[str, str | None] = {}
        judged: set[tuple[str, int, int, str, str]] = set()
        for cell in self.cells:
            key = (cell.kind, id(cell.params))
            if key not in made:
                wl = make_workload(cell.kind, cell.params)
                made[key] = (wl, len(wl.steps()))
            wl, steps = made[key]
            records += cell.clients * steps
            # a testbed system's target has its URL once it runs: its driver is known by the scheme it will have
            url = cell.target.url or f"{(cell.target.system or {}).get('scheme', 'file')}://"
            shape = (*key, cell.clients, url, cell.target.url)
            if shape in judged:
                continue
            judged.add(shape)
            if url not in caps:
                caps[url] = driver_class(url).caps
            needs = _recorded(wl.needs(cell.clients, caps[url]), wl.p)
            for p in self._cell_problems(cell, needs):
                key2 = (p.kind, p.hard)
                if key2 not in worst or p.size > worst[key2].size:
                    worst[key2] = p
            if cell.target.url and cell.target.url not in roots:
                roots[cell.target.url] = _local_path(cell.target.url)
            root = roots[cell.target.url] if cell.target.url else None
            if root is not None:
                self._on_disk(self._disk(disks, root), cell, needs, root)
        if results_disk is not None:
            results_disk.results = records * RECORD_BYTES + len(self.cells) * CELL_BYTES
        self.problems = list(worst.values())
        for disk in disks.values():
            self.problems += self._disk_problems(disk)
        return self.problems

    def _disk(self, disks: dict[int, _Disk], path: str) -> _Disk | None:
        try:
            sp = self.space(path)
        except OSError:
            return None
        return disks.setdefault(sp.device, _Disk(space=sp))

    def _on_disk(self, disk: _Disk | None, cell: Any, needs: Any, root: str) -> None:
        if disk is None:
            return
        if needs.scratch_bytes > disk.scratch:
            disk.cell, disk.root, disk.scratch = cell, root, needs.scratch_bytes
            disk.scratch_fix = _biggest(needs.scratch).fix
            disk.scratch_what = " + ".join(n.what for n in needs.scratch if n.bytes)
        if needs.entries > disk.entries:
            disk.entries, disk.entries_cell, disk.entries_root = needs.entries, cell, root
            disk.entries_fix = _biggest(needs.scratch).fix if needs.scratch else "lower --clients"
        if needs.kept is not None and needs.kept_dir:
            where = os.path.join(root, needs.kept_dir)
            if where not in disk.kept:
                disk.kept[where] = (max(0, needs.kept.bytes - _present(where)), needs.kept.what, needs.kept.fix)

    def _cell_problems(self, cell: Any, needs: Any) -> list[Problem]:
        """What does not fit of one cell; the numbers are compared first and the words made only for a problem
        (this runs for every distinct cell of a plan of up to 100,000)."""
        h, out = self.host, []
        n, here = cell.clients, self.share(cell.clients)
        # memory: a process per local client and its buffers; under MPI the ranks' processes exist already
        per = needs.client_bytes if self.spawns else needs.client_bytes - needs.process_bytes
        total = here * per + needs.leader_bytes

        def head() -> tuple[str, str]:
            what = _cell(cell)
            shares = [(here * needs.process_bytes if self.spawns else 0, "", needs.clients_fix or CLIENTS_FIX)]
            shares += [(here * m.bytes, m.what, m.fix) for m in needs.memory]
            shares += [(m.bytes, f"{m.what} in client 0", m.fix) for m in needs.leader]
            _, mostly, fix = max(shares, key=lambda s: s[0])
            how = f"{here:,} × {format_size(per)}" + (f", mostly {mostly}" if mostly else "")
            if self.spawns:
                return f"{what} needs {_plural(n, 'client process')}, about {format_size(total)} of memory ({how})", fix
            return (f"{what} puts {here:,} of its {n:,} clients on one host, about {format_size(total)} of memory "
                    f"there ({how})"), fix

        if needs.largest_buffer > h.mem_total:
            _, fix = head()
            buffer_fix = _biggest(needs.memory).fix if needs.memory else fix
            out.append(Problem("buffer", True, needs.largest_buffer / h.mem_total,
                               f"{_cell(cell)} needs single buffers of {format_size(needs.largest_buffer)}, more "
                               f"than this host's {format_size(h.mem_total)} of memory", buffer_fix))
        elif total > h.mem_total + h.swap_total:
            text, fix = head()
            out.append(Problem("memory", True, total / (h.mem_total + h.swap_total),
                               f"{text}; this host has {format_size(h.mem_total + h.swap_total)} of memory in all",
                               fix))
        elif total > h.mem_available:
            text, fix = head()
            out.append(Problem("memory", False, total / max(1, h.mem_available),
                               f"{text}; this host has {format_size(h.mem_available)} available", fix))
        if needs.extent > MAX_OFFSET:
            out.append(Problem("offsets", True, needs.extent / MAX_OFFSET,
                               f"{_cell(cell)} needs offsets up to {format_size(needs.extent)}, beyond the 8 EiB of "
                               "the 64-bit offsets every file system and storage API takes",
                               _biggest(needs.scratch).fix if needs.scratch else "lower file_size"))
        if self.spawns and (n, needs.threads) not in self._tasks_judged:  # the same count: the same verdict
            self._tasks_judged.add((n, needs.threads))
            out += self._process_problems(cell, needs)
        return out

    def _process_problems(self, cell: Any, needs: Any) -> list[Problem]:
        h, out = self.host, []
        fix = needs.clients_fix or CLIENTS_FIX
        n = cell.clients
        engine = ENGINE_TASKS + (1 if self.study.probe_interval > 0 else 0)
        tasks = n * (TASKS_PER_CLIENT + (needs.threads if needs.threads > 1 else 0)) + engine

        def head() -> str:
            return f"{_cell(cell)} needs {_plural(n, 'client process')} ({tasks:,} tasks with their threads)"

        for limit, name in ((h.pid_max, "kernel.pid_max"), (h.threads_max, "kernel.threads-max")):
            if limit is not None and h.tasks + tasks > limit:
                out.append(Problem(name, True, (h.tasks + tasks) / limit,
                                   f"{head()}; this system runs at most {limit:,} tasks at once ({name}) and "
                                   f"{h.tasks:,} are running", fix))
        if h.nproc_limit is not None and h.user_tasks + tasks > h.nproc_limit:
            out.append(Problem("nproc", True, (h.user_tasks + tasks) / h.nproc_limit,
                               f"{head()}; your limit is {h.nproc_limit:,} processes and threads (ulimit -u) and "
                               f"{h.user_tasks:,} are running", fix + ", or raise ulimit -u"))
        files = FILES_PER_CLIENT * n + FILES_BASE
        self.open_files = max(self.open_files, files)
        if h.nofile_hard is not None and files > h.nofile_hard:
            out.append(Problem("open-files", True, files / h.nofile_hard,
                               f"{_cell(cell)} needs about {files:,} open files in storeval's coordinator "
                               f"({FILES_PER_CLIENT} per client process); the limit is {h.nofile_hard:,} (ulimit -Hn)",
                               fix))
        return out

    # -- per file system -----------------------------------------------------------------------------------
    def _disk_problems(self, disk: _Disk) -> list[Problem]:
        sp = disk.space
        parts: list[tuple[int, str, str, str, str]] = []  # (bytes, what, fix, who needs, where)
        if disk.scratch:
            parts.append((disk.scratch, disk.scratch_what, disk.scratch_fix, f"{_cell(disk.cell)} needs", disk.root))
        for where, (nbytes, what, fix) in disk.kept.items():
            if nbytes:
                parts.append((nbytes, f"{what}, kept in {where}", fix, "this study needs", where))
        if disk.results:
            parts.append((disk.results, f"the results store, about {format_size(disk.results)}",
                          "choose another --results", "this study's results need", os.path.abspath(self.results)))
        need = sum(p[0] for p in parts)
        out = []
        if parts and sp.total and need > sp.free:  # a file system that counts no blocks (ramfs) cannot tell
            _, _, fix, who, where = max(parts, key=lambda p: p[0])
            head = f"{who} about {format_size(need)} on the file system of {where} ({' + '.join(p[1] for p in parts)})"
            if need > sp.total:
                out.append(Problem("space", True, need / max(1, sp.total),
                                   f"{head}; it holds {format_size(sp.total)} in all", fix))
            else:
                out.append(Problem("space", False, need / max(1, sp.free),
                                   f"{head}; it has {format_size(sp.free)} free", f"{fix}, or free space there"))
        if disk.entries and sp.total_entries and sp.free_entries >= 0 and disk.entries > sp.free_entries:  # XFS grows its inodes: only may
            out.append(Problem("entries", False, disk.entries / max(1, sp.free_entries),
                               f"{_cell(disk.entries_cell)} creates {disk.entries:,} files and directories on the file "
                               f"system of {disk.entries_root}; it has {sp.free_entries:,} free inodes of "
                               f"{sp.total_entries:,}", disk.entries_fix))
        return out

    # -- the verdict ------------------------------------------------------------------------------------
    def verdict(self, force: bool) -> list[str]:
        """Raise InputError for the worst problem that cannot be forced (or any, without ``force``); return
        the lines to warn with for what ``force`` let through."""
        hard = sorted((p for p in self.problems if p.hard), key=lambda p: -p.size)
        soft = sorted((p for p in self.problems if not p.hard), key=lambda p: -p.size)
        if hard:
            raise InputError(hard[0].message)
        if soft and not force:
            raise InputError(soft[0].message)
        return [f"{p.text} (--force: running it anyway)" for p in soft]

    def raise_open_files(self) -> None:
        """Lift the soft limit of open files to what the coordinator will need (the hard limit allows it)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft != resource.RLIM_INFINITY and self.open_files > soft:
            top = self.open_files if hard == resource.RLIM_INFINITY else min(self.open_files, hard)
            resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


def preflight(study: Any, cells: list, results: str, *, engine: Any = None, force: bool = False,
              host: Host | None = None, space: Callable[[str], Space] = space_of) -> list[str]:
    """Check every cell against this host before anything runs: InputError (one line, exit 2) for the first
    thing that does not fit; the warnings for what ``force`` let through."""
    check = Preflight(study, cells, results, engine=engine, host=host, space=space)
    check.check()
    warnings = check.verdict(force)
    check.raise_open_files()
    return warnings
