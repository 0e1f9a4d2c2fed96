"""The Workload protocol: what every client does, phase by phase.

A workload object is built from validated parameters in every client process
(and once in the coordinator, which asks it for its phases, the phases a
target cannot run, and the cleanup of a failed cell). It talks to storage only
through the Driver protocol and decides what it can do from the driver's
capability flags.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ..drivers.base import Capabilities, Driver
from ..core.comm import Comm
from ..core.oplog import PhaseRecorder
from ..fields import Duration, Size  # noqa: F401 - re-exported for workloads


CLIENT_PROCESS_BYTES = 16 << 20  # a bare client process from the fork server (measured: 10-11 MiB USS/PSS), with margin


@dataclass(frozen=True)
class Need:
    """One thing a cell needs, in the user's terms: how much, what it is, and which setting lowers it."""

    bytes: int
    what: str  # "2 × 64 buffers of transfer_size 4 GiB"
    fix: str  # "lower transfer_size or iodepth"


@dataclass(frozen=True)
class Needs:
    """What one cell of a workload asks of the host and the target; ``storeval.preflight`` checks it before
    anything runs. Memory is per client, scratch is for all clients of the cell together."""

    memory: tuple[Need, ...] = ()  # per client, beyond the bare process
    leader: tuple[Need, ...] = ()  # what client 0 alone needs on top (it works for everyone in some modes)
    scratch: tuple[Need, ...] = ()  # bytes on the target while the cell runs (removed after it)
    entries: int = 0  # files and directories the cell creates on the target (inodes)
    kept: Need | None = None  # bytes laid out once per target and kept for later cells and runs
    kept_dir: str | None = None  # where they live, relative to the target's root
    largest_buffer: int = 0  # the largest single allocation of one client
    extent: int = 0  # the largest file (or offset) a client writes or reads
    threads: int = 1  # threads per client process that do I/O
    process_bytes: int = CLIENT_PROCESS_BYTES  # a bare client process of this workload

    @property
    def client_bytes(self) -> int:
        return self.process_bytes + sum(n.bytes for n in self.memory)

    @property
    def leader_bytes(self) -> int:
        return sum(n.bytes for n in self.leader)

    @property
    def scratch_bytes(self) -> int:
        return sum(n.bytes for n in self.scratch)


class Params(BaseModel):
    """Base of every workload's parameters: unknown keys are errors, values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class ClientContext:
    """Everything a client needs to run its part of a cell."""

    rank: int
    nclients: int
    driver: Driver
    cell_dir: str
    seed: int
    comm: Comm
    keep_cache: bool = False  # --keep-cache: leave the page cache alone (reads may be served from memory)
    host_leader: bool = True  # the one client of its host that acts for the host (drop caches, count its traffic)
    state: dict[str, Any] = field(default_factory=dict)  # the workload's per-client state
    server_pids: list[int] = field(default_factory=list)  # the target's server processes on this host (testbed)
    server_cache: str | None = None  # what clear_cache did to the server's page cache this phase

    def clear_cache(self, paths: list[str]) -> str:
        """Make the next read of ``paths`` come from the storage, not a page cache — this host's, and that of
        the target's server when it runs on this host (``server_pids``: a read after a write would otherwise
        be served from the server's memory).

        Collective (every client calls it for the same phase). Returns what happened on the client: ``dropped``
        (root: the host's page cache emptied), ``invalidated`` (each file's cached pages dropped,
        posix_fadvise), ``kept`` (--keep-cache), ``none`` (the target's client keeps no page cache), or
        ``not-cleared``; ``server_cache`` says what happened on the server (``dropped``, ``kept``,
        ``unknown`` for a server elsewhere, ``none`` for a local file system)."""
        client_cache, server_here = self.driver.caps.client_page_cache, bool(self.server_pids)
        no_server = "kept" if server_here else ("none" if client_cache else "unknown")
        self.server_cache = no_server
        if not client_cache and not server_here:
            return "none"
        if self.keep_cache:
            return "kept" if client_cache else "none"
        from ..probes.cache import drop_page_cache, is_root

        if is_root():
            mine = int(drop_page_cache()) if self.host_leader else 1
            if self.comm.allreduce_min(mine):
                self.server_cache = "dropped" if server_here else no_server
                return "dropped" if client_cache else "none"
        if not client_cache:
            return "none"
        try:
            return "invalidated" if all(self.driver.invalidate(p) for p in paths) else "not-cleared"
        except OSError:
            return "not-cleared"

    def warn(self, rec: PhaseRecorder, code: str, message: str) -> None:
        """Attach a warning (code + sentence) to this client's record of a phase."""
        warnings = rec.extra.setdefault("warnings", [])
        if not any(w["code"] == code for w in warnings):
            warnings.append({"code": code, "message": message})


class Workload(ABC):
    """Base class of workloads; subclasses set ``kind``, ``Params`` and ``PHASES``."""

    kind: ClassVar[str]
    Params: ClassVar[type[Params]]
    PHASES: ClassVar[tuple[str, ...]]
    summary: ClassVar[str] = ""

    def __init__(self, params: Params) -> None:
        self.p = params

    # -- coordinator side -----------------------------------------------------------------------
    def phases(self) -> list[str]:
        """The phases this cell runs, in order."""
        chosen = set(getattr(self.p, "phases", self.PHASES))
        return [ph for ph in self.PHASES if ph in chosen]

    def steps(self) -> list[tuple[str, int]]:
        """(phase, iteration) in the order clients run them: the phases, ``iterations`` times (mdtest -i)."""
        return [(ph, it) for it in range(getattr(self.p, "iterations", 1)) for ph in self.phases()]

    def skipped(self, caps: Capabilities) -> dict[str, str]:
        """Phases a target with ``caps`` cannot run, with the reason shown to the user."""
        return {}

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        """Total (bytes, ops) of a phase across clients, for progress bars; 0 when unknown."""
        return 0, 0

    def prepare_target(self, driver: Driver, *, regenerate: bool = False, log=lambda message: None,
                       clients: int = 1) -> None:
        """Untimed work on the target before a cell of ``clients`` clients (e.g. writing input files that later
        cells reuse)."""

    def target_data_key(self) -> str | None:
        """Identity of the input data ``prepare_target`` lays out, so a run regenerates it once, not per cell."""
        return None

    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        """Workload-specific figures of one client's phase record (added to ``client_stats``)."""
        return {}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """Workload-specific figures of a phase, from its clients' ``client_extra`` (added to the phase);
        ``moved`` is what the probes saw move for it (device or network bytes), None when unknown."""
        return {}

    @staticmethod
    def direction(phase: str, params: dict[str, Any]) -> str | None:
        """Whether a phase reads or writes data ("read", "write"), for amplification and physical limits."""
        return None

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """What a cell of ``nclients`` clients on a target with ``caps`` needs (memory, scratch, entries …),
        computed from the parameters alone, in constant time: checked against the host before anything runs."""
        return Needs()

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        """Remove whatever the cell's clients may have left behind (after a failure); idempotent."""

    # -- client side ------------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        """Untimed set-up before the first phase (buffers, offsets, pre-filled files)."""

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """Untimed work before the opening barrier of ``phase`` (e.g. dropping cached pages)."""

    @abstractmethod
    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        """Do this client's share of ``phase``, recording every operation into ``rec``."""

    def cleanup(self, c: ClientContext) -> None:
        """Remove what this client created; runs also after a failure."""
