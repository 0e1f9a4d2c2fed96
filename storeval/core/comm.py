"""How the clients of a cell synchronise: the one interface workloads see of local processes and MPI ranks."""

from __future__ import annotations

from typing import Protocol


class Comm(Protocol):
    """How the clients of a cell synchronise (local processes or MPI ranks)."""

    rank: int
    size: int

    def barrier(self) -> None: ...

    def allreduce_max(self, value: int) -> int: ...

    def allreduce_min(self, value: int) -> int: ...

    def phase_done(self, steps: int) -> None: ...

    def abort(self) -> None: ...
