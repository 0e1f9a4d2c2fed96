"""Engines run the clients of a cell: local processes (default) or MPI ranks."""

from __future__ import annotations

from typing import Any


def choose_engine(placement: str = "spread", clients_per_host: int | None = None) -> Any:
    """The engine a run uses: ``None`` (the local engine, made by the runner) unless an MPI launcher started this
    process; then the MPI engine, built on every rank (its first steps are collective). Without mpi4py the run
    is refused in one line naming the extra."""
    from .mpi import launched_by_mpiexec

    if not launched_by_mpiexec():
        return None
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        from ..errors import InputError
        from ..plugins import missing_extra

        extra = missing_extra("storeval", "mpi4py") or "mpi"
        raise InputError(f"running under mpiexec (the MPI engine) needs the {extra} extra: "
                         f"pip install 'storeval[{extra}]'") from None
    from .mpi import MpiEngine

    return MpiEngine(placement, clients_per_host)
