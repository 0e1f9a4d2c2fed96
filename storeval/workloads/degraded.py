"""Degraded mode: what a stream does when an operation fails (the ``on_error`` parameter of every workload).

* ``fail`` (the default): the operation's error fails the phase — and the cell — with a readable reason; the
  other clients' work up to then is kept (the engine stores every client's partial record).
* ``retry``: the same operation is tried again — after a pause that doubles from 50 ms up to 1 s, with the
  driver told to talk to the server again and the stream's handle reopened where the workload can — until it
  succeeds or ``retry_for`` has passed since its first failure; then it fails the phase as under ``fail``.
* ``continue``: the operation is counted as lost and the stream goes on with the next one.

Every error is counted by kind (``error_kind``: the errno name, ``timeout``, the library's class …) and by
second of the phase (``rec.extra["error_timeline"]``), with the first message of each kind
(``rec.extra["error_samples"]``); ``rec.extra["degraded"]`` says how many operations were retried and lost.
None of this runs while operations succeed: the kernel calls it only from its error path.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from ..core.oplog import PhaseRecorder
from ..core.records import NS
from ..core.stop import STOP, ClientStopped
from ..errors import error_kind, one_line
from ..fields import Duration
from .base import Params, param

FIRST_PAUSE = 0.05  # seconds before the first retry; doubles up to MAX_PAUSE
MAX_PAUSE = 1.0
SAMPLE_CHARS = 300  # of the first message of each kind of error


class DegradedParams(Params):
    """The parameters of a workload whose timed loop is the kernel's: what a failed operation does."""

    on_error: Literal["fail", "retry", "continue"] = param(
        "fail", "what a failed operation does: fail the phase, retry it (up to retry_for), or count it lost and "
                "go on")
    retry_for: Annotated[Duration, Field(gt=0)] = param(
        120.0, "under on_error: retry, how long one operation is tried again before the phase fails")


class PhaseErrors:
    """The phase's errors by kind and second, shared by its streams (and threads)."""

    def __init__(self, rec: PhaseRecorder) -> None:
        self.rec = rec
        self.lock = threading.Lock()
        self.timeline: dict[str, list[int]] = rec.extra.setdefault("error_timeline", {})
        self.samples: dict[str, str] = rec.extra.setdefault("error_samples", {})
        self.counts: dict[str, int] = rec.extra.setdefault("degraded", {"retried": 0, "lost": 0})

    def count(self, exc: BaseException, t_ns: int) -> None:
        kind = error_kind(exc)
        second = max(0, (t_ns - self.rec.start_ns) // NS)
        with self.lock:
            self.rec.error(kind)
            per_second = self.timeline.setdefault(kind, [])
            if len(per_second) <= second:
                per_second.extend([0] * (second + 1 - len(per_second)))
            per_second[second] += 1
            if kind not in self.samples:
                self.samples[kind] = one_line(exc)[:SAMPLE_CHARS]

    def note(self, what: str, count: int = 1) -> None:
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + count


class Degraded:
    """The ``recover`` of one stream for the kernel (see :func:`storeval.workloads.kernel.measure`): called
    with the item whose operation failed and the error; returns None to fail the phase, or ``(again, op,
    restart)``: ``again`` to try the item again (else it is lost and the stream goes on), ``op`` the operation
    to go on with when the handle was reopened (None: the same), ``restart`` the item to go on from when the
    reopened handle holds less than was acknowledged (None: the failed one). ``reopen()`` returns that
    ``(op, restart)`` pair; ``rewound(item, restart)`` counts what has to be done again."""

    def __init__(self, policy: str, retry_for: float, errors: PhaseErrors, driver: Any = None,
                 reopen: Callable[[], tuple[Callable | None, Any]] | None = None,
                 rewound: Callable[[Any, Any], None] | None = None) -> None:
        self.policy = policy
        self.retry_for_ns = int(retry_for * NS)
        self.errors = errors
        self.driver = driver
        self.reopen = reopen
        self.rewound = rewound
        self.item: Any = None
        self.since = 0
        self.attempt = 0
        self.lost: list[Any] = []  # the items given up under continue (never acknowledged)

    def __call__(self, item: Any, exc: BaseException) -> tuple[bool, Callable | None, Any] | None:
        t = time.perf_counter_ns()
        self.errors.count(exc, t)
        if self.policy == "fail":
            return None
        if self.policy == "continue":
            self.errors.note("lost")
            self.lost.append(item)
            return False, None, None
        if self.attempt == 0 or item != self.item:  # this item's first failure opens its window
            self.item, self.since, self.attempt = item, t, 0
        if t - self.since >= self.retry_for_ns:
            return None
        self.attempt += 1
        self.errors.note("retried")
        _pause(min(MAX_PAUSE, FIRST_PAUSE * 2 ** (self.attempt - 1)))
        if self.driver is not None:
            self.driver.retry_server()  # it may be back: do not fail at once with its last failure
        op = restart = None
        if self.reopen is not None:
            try:
                op, restart = self.reopen()
            except ClientStopped:
                raise
            except Exception as e:  # noqa: BLE001 - the reopen's failure is one more error; the window decides
                self.errors.count(e, time.perf_counter_ns())
            if restart is not None and self.rewound is not None:
                self.rewound(item, restart)
        return True, op, restart


def _pause(seconds: float) -> None:
    """Sleep, but end at once when the engine stops the clients."""
    end = time.monotonic() + seconds
    while True:
        if STOP.is_set():
            raise ClientStopped("stopped by the engine")
        left = end - time.monotonic()
        if left <= 0:
            return
        time.sleep(min(left, 0.05))
