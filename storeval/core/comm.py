"""How the clients of a cell synchronise: the one interface workloads see of local processes and MPI ranks."""

from __future__ import annotations

from typing import Protocol


class Arrival(Protocol):
    """One client's arrival at a non-blocking barrier (:meth:`Comm.ibarrier`)."""

    def test(self) -> bool:
        """Whether every client of the communicator has arrived (cheap: a background client asks at each fold)."""
        ...

    def wait(self) -> None:
        """Wait until every client has arrived (untimed work only; a stop or an abort ends the wait)."""
        ...


class Comm(Protocol):
    """How the clients of a cell synchronise (local processes or MPI ranks)."""

    rank: int
    size: int

    def barrier(self) -> None: ...

    def allreduce_max(self, value: int) -> int: ...

    def allreduce_min(self, value: int) -> int: ...

    def phase_done(self, steps: int) -> None: ...

    def abort(self) -> None: ...

    def split(self, color: int) -> "Comm":
        """The communicator of the clients of part ``color`` (the cell's ``Job.parts``: consecutive ranks, each
        part's count in order), for a workload whose parts synchronise apart (workloads/concurrent.py). Every
        client calls it once, before its first phase."""
        ...

    def ibarrier(self) -> Arrival:
        """Arrive at a barrier without waiting for it; every client arrives once per use, in the same order."""
        ...

    def hold(self) -> None:
        """Wait until the coordinator releases the cell's clients (``Job.hold``: after the last phase, while a
        fault plan waits for the system to heal, the cell's data must still be there); a stop or an abort
        ends the wait. Every client calls it once, after its last phase."""
        ...
