"""Use cases: what each command does — run a study, report and compare runs, import, export, clean, bring a
testbed up — with typed requests and results. The CLI (``storeval.cli``) only parses arguments into a request and
prints what comes back; nothing here prints. Lines a use case has to say while it works (a warning before a
run starts, a stored held result) go to the :class:`Say` it is given."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


def _quiet(line: str) -> None:
    return None


@dataclass
class Say:
    """Where a use case's lines go while it works: ``info`` (progress), ``warn`` (the run goes on) and ``error``
    (one part failed, the rest goes on). Plain text: the caller makes it safe to print."""

    info: Callable[[str], None] = _quiet
    warn: Callable[[str], None] = _quiet
    error: Callable[[str], None] = _quiet


EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130

__all__ = ["Say", "EXIT_OK", "EXIT_FAILED", "EXIT_INPUT", "EXIT_INTERRUPTED"]
