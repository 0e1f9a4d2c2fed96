"""Stop signals: Ctrl-C (SIGINT), SIGTERM (what a batch scheduler or ``kill`` sends) and SIGHUP (the
terminal went away) all end a run the same way — clients stopped, their files removed, the running cell
stored as ``interrupted`` — and the process exits with 128 + the signal's number (130, 143, 129).

A signal must never cut the coordinator's bookkeeping in half: a client started but not yet known, a
cell stopped but not stored, a state file half written, a message half read from a pipe. So once
:func:`install` has run, a stop signal raises :class:`Interrupted` only inside ``with interruptible():``
(the command line as a whole, a connection attempt); inside ``with deferred():`` it is only noted, and
the code there acts on it at its own safe points through :func:`take` (an engine between two polls of
its clients, the runner between cells). A signal noted and not taken is raised when the deferred region
is left for an interruptible one. Without :func:`install` (storeval used as a library, tests) Python's
own Ctrl-C handling is untouched.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Blocked in storeval's helper processes (fork server, clients until they are ready, probe sampler, watchdog)
# from their birth: the stop signals, and SIGUSR1, the local engine's own "stop" to a client.
SHIELD = (*STOP_SIGNALS, signal.SIGUSR1)

_installed = False
_first: int | None = None  # the first stop signal this process received (its exit code)
_pending: int | None = None  # noted in a deferred region and not acted upon yet
_raised = False  # an Interrupted was raised: a library may hand it on as another error (DuckDB: "Query interrupted")
_regions: list[bool] = []  # innermost last: True = interruptible, False = deferred


class Interrupted(KeyboardInterrupt):
    """A stop signal arrived where the code can be interrupted (a KeyboardInterrupt, so code that
    handles Ctrl-C handles SIGTERM and SIGHUP the same way)."""

    def __init__(self, signum: int) -> None:
        super().__init__(reason(signum))
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def reason(signum: int | None) -> str:
    """What stopped the run, in the words stored with the interrupted cell."""
    if signum is None or signum == signal.SIGINT:
        return "interrupted by the user (Ctrl-C)"
    if signum == signal.SIGTERM:
        return "terminated by SIGTERM (a batch scheduler or kill)"
    if signum == signal.SIGHUP:
        return "stopped by SIGHUP (the terminal went away)"
    return f"stopped by {signal_name(signum)}"


def _on_signal(signum: int, frame: Any) -> None:
    global _first, _pending, _raised
    if _first is None:
        _first = signum
    if _regions and _regions[-1]:
        _pending, _raised = None, True
        raise Interrupted(signum)
    if _pending is None:
        _pending = signum


def install() -> None:
    """Handle the stop signals from now on (a signal already ignored — ``nohup``, a shell's background
    job — stays ignored). Until a region says otherwise they are noted, not raised."""
    global _installed
    if _installed:
        return
    for sig in STOP_SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _on_signal)
    _installed = True


def installed() -> bool:
    return _installed


def received() -> int | None:
    """The first stop signal this process received (or a client reported, see :func:`note`)."""
    return _first


def requested() -> bool:
    return _first is not None


def raised() -> bool:
    """Whether a stop signal was raised as :class:`Interrupted` (an error that follows is its consequence)."""
    return _raised


def take() -> int | None:
    """The stop signal noted and not yet acted upon, if any; the caller acts on it now."""
    global _pending
    sig, _pending = _pending, None
    return sig


def note(signum: int) -> None:
    """A client of this run was stopped by ``signum`` from outside storeval: the run ends as if this
    process had received it (same exit code)."""
    global _first
    if _first is None:
        _first = signum


def exit_code(default: int = 130) -> int:
    return 128 + _first if _first is not None else default


def _raise_pending() -> None:
    global _raised
    sig = take()
    if sig is not None:
        _raised = True
        raise Interrupted(sig)


@contextmanager
def interruptible() -> Iterator[None]:
    """A stop signal raises :class:`Interrupted` here (at once, if one is already noted)."""
    if not _installed:
        yield
        return
    _regions.append(True)
    try:
        _raise_pending()
        yield
    finally:
        _regions.pop()


class deferred:
    """A stop signal is only noted here; it is raised on leaving, into an interruptible region, unless
    the code took it (:func:`take`) or is already leaving with an exception."""

    def __enter__(self) -> deferred:
        _regions.append(False)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _regions.pop()
        if exc_type is None and _installed and _regions and _regions[-1]:
            _raise_pending()
