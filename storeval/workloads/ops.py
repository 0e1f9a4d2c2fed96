"""Timed data operations for workloads: ``run_ops`` runs one ``io(bufs, offset)`` per offset through the kernel
(:func:`storeval.workloads.kernel.measure`: timed into an ``OpLog``, checked, stamped, stonewalled), and
``IOFailure`` is the error it raises — the offset and the underlying error's kind (degraded mode counts it)."""

from __future__ import annotations

import functools

from ..core.oplog import OpLog
from ..errors import StorevalError, error_kind, one_line
from .kernel import NEVER, ShortTransfer, measure


class IOFailure(StorevalError):
    """An operation failed; carries the offset and the underlying error's kind."""

    def __init__(self, offset: int, exc: BaseException) -> None:
        self.offset, self.kind = offset, ("short-transfer" if isinstance(exc, ShortTransfer) else error_kind(exc))
        super().__init__(f"at offset {offset}: {one_line(exc)}")


def run_ops(io, bufs, offsets, log: OpLog, size: int, stamp=None, check=None, deadline_ns: int = NEVER, *,
            lo: int = 0, hi: int | None = None, native=None, recover=None) -> int:
    """One ``io(bufs, offset)`` per offset of ``offsets[lo:hi]``, timed into ``log`` by the kernel (see
    :func:`storeval.workloads.kernel.measure`); ``check`` is a payload checker of ``bufs[0]``. With a
    ``deadline_ns`` it stops after the first operation that ends past it (the stonewall). Returns the count."""
    op = functools.partial(io, bufs) if native is None else None
    return measure(log, size, offsets, op, lo=lo, hi=hi, expect=size, stamp=stamp,
                   check=None if check is None else functools.partial(check.verify, bufs[0]),
                   deadline_ns=deadline_ns, native=native, fail=IOFailure, recover=recover)


__all__ = ["IOFailure", "run_ops"]
