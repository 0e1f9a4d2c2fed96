"""What an engine hands back for a cell, and the protocol every engine follows."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from .. import interrupts
from .job import Job
from .records import PhaseRecord

ProgressFn = Callable[[str, int, int], None]


@dataclass
class CellOutcome:
    status: str  # ok | failed | interrupted
    error: str | None = None
    failed_step: tuple[str, int] | None = None  # (phase, iteration); None when it failed outside a phase
    records: list[PhaseRecord] = field(default_factory=list)
    complete_steps: list[tuple[str, int]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    stop_requested: bool = False  # a stop signal came while a finished cell was being wound down: stop after it
    fatal: bool = False  # the engine cannot go on (an MPI rank hung): store this cell, clean up, end the job
    samples: list[tuple[int, str, str, str, float]] = field(default_factory=list)  # (t_ns, probe, device, metric, value)

    def note_late_stop(self) -> None:
        """Take a stop signal that came while the cell was being wound down: the run stops after this cell,
        which keeps its status (an ok cell stays ok; a failed one also says it was stopping)."""
        late = interrupts.take()
        if late is not None and self.status == "ok":
            self.stop_requested = True
        elif late is not None and self.status != "interrupted":
            self.events.append({"kind": "interrupted", "rank": None, "phase": None,
                                "message": f"{interrupts.reason(late)} while the cell was stopping"})
            self.stop_requested = True


class PhaseWatcher(Protocol):
    """Told by an engine's watch loop, on the coordinator, where the cell's phases are and how far their work
    has come (the fault runner acts on it). Times are the coordinator's ``time.perf_counter_ns()``."""

    def phase_started(self, phase: str, iteration: int, t_ns: int) -> None: ...

    def progress(self, phase: str, iteration: int, done_bytes: int, done_ops: int) -> None: ...

    def phase_ended(self, phase: str, iteration: int, t_ns: int) -> None: ...

    def phases_over(self) -> None:
        """Every phase of the cell has ended (its clients may be held before their clean-up: Job.hold)."""
        ...

    def holding(self) -> bool:
        """Whether the cell's clients must still keep its data (a fault plan waiting for the system to heal)."""
        ...


class Engine(Protocol):
    """Runs one cell's clients (local processes, MPI ranks) and reports what they did."""

    name: str

    def run_cell(self, job: Job, nclients: int, timeout: float, on_progress: ProgressFn | None = None,
                 on_clients: Callable[[list[dict[str, Any]]], None] | None = None,
                 watcher: PhaseWatcher | None = None, feed: Any = None) -> CellOutcome: ...

    def processes(self) -> list[dict[str, Any]]: ...

    def describe_hosts(self) -> list[dict[str, Any]]: ...
