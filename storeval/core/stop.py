"""The process-wide stop request: the engine sets it, hot loops look at it when they fold.

Beside it, the phase end of a background client (workloads/concurrent.py): while ``UNTIL.check`` is set, a
fold that finds it true raises :class:`PhaseEnded` (every fold from then on; a flush at a loop's end never does);
the kernel's loops take that as a deadline reached (they return what they did, so the workload finishes its phase
as it would at a stonewall), other loops let it end the phase."""

from __future__ import annotations

import threading
from collections.abc import Callable

# Set when the engine asks this client to stop; hot loops look at it when they fold.
STOP = threading.Event()


class ClientStopped(Exception):
    """The engine stopped this client (another client failed, a timeout, or Ctrl-C)."""


class PhaseEnded(ClientStopped):
    """The foreground clients of a concurrent cell finished the phase: a background client's phase ends here.
    A ClientStopped, so every ``except ClientStopped: raise`` lets it through untouched; never sets STOP."""


class _Until:
    """``check()``: whether the phase this background client runs has been ended by its foreground (None: the
    client is not a background client, or not inside a phase)."""

    check: Callable[[], bool] | None = None


UNTIL = _Until()
