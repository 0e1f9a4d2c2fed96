"""The lean buffers hot loops record into, and the recorder that turns a phase's threads into a PhaseRecord.

A hot loop writes each operation's end time and latency into preallocated
``array('q')`` buffers (one C store each, no allocation) and calls
:meth:`OpLog.fold` every ``cap`` operations; folding turns the batch into
histogram counts and per-second byte/op counts with numpy. Memory is constant
per thread, whatever the number of operations.
"""

from __future__ import annotations

import resource
import time
from array import array
from typing import Any

import numpy as np

from ..histogram import Histogram
from .process import HOST
from .records import GAP_NS, MAX_GAPS, NS, PhaseRecord, quiet_spans
from .stop import STOP, UNTIL, ClientStopped, PhaseEnded

# Per client in the shared progress array: bytes and ops of the running phase, phases finished, the
# CLOCK_MONOTONIC time (ns) of its last sign of progress (phase start, fold, phase end, barrier exit) and
# 1 while it waits in a barrier. The engines' hang detection counts from the last sign of progress and
# skips clients waiting for a peer: a client that is slowly progressing is not hung.
FOLD_EVERY_NS = 250_000_000  # a loop folds at least this often (OpLog.due)
FOLD_ENDING_NS = 50_000_000  # ... this often in a background client (UNTIL set): it ends this soon after its foreground
PROGRESS_SLOTS = 6
P_BYTES, P_OPS, P_DONE, P_BEAT, P_WAIT, P_ERRS = range(PROGRESS_SLOTS)  # P_ERRS: the phase's errors (live view)


MAX_MARKS = 512  # progress marks kept per thread: a phase of any length costs at most 8 KiB of them


def fold_cap(op_bytes: int) -> int:
    """Operations per fold: about every 16 MiB of data, between 16 and 4096 operations."""
    return int(min(4096, max(16, (16 << 20) // max(1, op_bytes))))


class OpLog:
    """Per-thread latency/end-time buffers folded into a histogram and a per-second timeline."""

    __slots__ = ("ends", "lats", "sizes", "cap", "hist", "tl_bytes", "tl_ops", "t0", "bytes", "ops",
                 "progress", "slot", "ops_pending", "last_end", "gaps", "marks", "mark_every", "folds", "due")

    def __init__(self, t0: int, cap: int = 4096, progress: Any = None, slot: int = 0) -> None:
        self.cap = cap
        self.ends = array("q", bytes(8 * cap))
        self.lats = array("q", bytes(8 * cap))
        self.sizes = array("q", bytes(8 * cap))
        self.hist = Histogram()
        self.tl_bytes = np.zeros(16, dtype=np.int64)
        self.tl_ops = np.zeros(16, dtype=np.int64)
        self.t0 = t0
        self.bytes = 0
        self.ops = 0
        self.progress = progress
        self.slot = slot
        self.ops_pending = 0  # operations buffered by add() and not folded yet
        self.last_end = -1  # end of the last folded operation (-1: none yet; the first pause starts at t0)
        self.gaps: list[tuple[int, int]] = []  # (start, length) of pauses of GAP_NS or more between completions
        # progress marks: (end of a fold's last operation, bytes done by then), one per fold — every 16 MiB or
        # 4,096 operations at most (fold_cap) — thinned to every 2nd, 4th... fold once MAX_MARKS are held, so the
        # bytes done at any moment (a stonewall's) are measured to within the few folds between two marks
        self.marks: list[tuple[int, int]] = []
        self.mark_every = 1
        self.folds = 0
        # the loops also fold once this time has passed (perf_counter_ns), however few operations they buffered:
        # the progress slot — the bars, the hang watch, the live view — never lags the work by more than FOLD_EVERY_NS
        self.due = time.perf_counter_ns() + (FOLD_EVERY_NS if UNTIL.check is None else FOLD_ENDING_NS)

    def fold(self, n: int, size: int | None = None) -> None:
        """Fold the first ``n`` buffered operations; ``size`` is their common size, else ``sizes`` holds them.
        Then raise ClientStopped once the engine asked to stop, and PhaseEnded once a background client's phase
        is over (every fold from then on: a loop started after it ends at its first fold)."""
        self._take(n, size)
        if STOP.is_set():
            raise ClientStopped("stopped by the engine")
        until = UNTIL.check
        if until is not None and until():
            raise PhaseEnded("the foreground ended the phase")

    def _take(self, n: int, size: int | None = None) -> None:
        self.due = time.perf_counter_ns() + (FOLD_EVERY_NS if UNTIL.check is None else FOLD_ENDING_NS)
        if n:
            ends = np.frombuffer(self.ends, dtype=np.int64, count=n)
            self.hist.record_many(np.frombuffer(self.lats, dtype=np.int64, count=n))
            secs = np.maximum((ends - self.t0) // NS, 0)
            top = int(secs.max()) + 1
            if top > len(self.tl_ops):
                grow = max(top, 2 * len(self.tl_ops))
                self.tl_ops = np.concatenate([self.tl_ops, np.zeros(grow - len(self.tl_ops), np.int64)])
                self.tl_bytes = np.concatenate([self.tl_bytes, np.zeros(grow - len(self.tl_bytes), np.int64)])
            ops = np.bincount(secs, minlength=top)
            if size is None:
                sizes = np.frombuffer(self.sizes, dtype=np.int64, count=n)
                nbytes = np.bincount(secs, weights=sizes, minlength=top).astype(np.int64)
                total = int(sizes.sum())
            else:
                nbytes = ops * size
                total = n * size
            self.tl_ops[:top] += ops
            self.tl_bytes[:top] += nbytes
            pauses = np.diff(ends, prepend=self.last_end if self.last_end >= 0 else self.t0)
            long = np.flatnonzero(pauses >= GAP_NS)
            if long.size and len(self.gaps) < MAX_GAPS:
                for i in long[: MAX_GAPS - len(self.gaps)].tolist():
                    self.gaps.append((int(ends[i] - pauses[i]), int(pauses[i])))
            self.last_end = int(ends[-1])
            self.ops += n
            self.bytes += total
            self.folds += 1
            if self.folds % self.mark_every == 0:
                self.marks.append((int(ends.max()), self.bytes))
                if len(self.marks) > MAX_MARKS:
                    self.marks = self.marks[1::2]  # marks[i] is fold (i + 1) * mark_every's: keep the even folds
                    self.mark_every *= 2
            if self.progress is not None:
                self.progress[self.slot + P_BYTES] += total
                self.progress[self.slot + P_OPS] += n
                self.progress[self.slot + P_BEAT] = time.monotonic_ns()

    def add(self, t_start: int, t_end: int, nbytes: int = 0) -> None:
        """Record one operation (slow path for metadata-sized loops); folds when the buffer is full."""
        i = self.ops_pending
        self.ends[i] = t_end
        self.lats[i] = t_end - t_start
        self.sizes[i] = nbytes
        i += 1
        if i == self.cap or t_end >= self.due:
            self.ops_pending = 0  # before the fold, which may raise (a stop, a phase's end) once it has folded
            self.fold(i)
            return
        self.ops_pending = i

    def settle(self, n: int, size: int | None = None) -> None:
        """A loop's last fold: as :meth:`fold`, but a phase's end does not interrupt what is over anyway."""
        self._take(n, size)
        if STOP.is_set():
            raise ClientStopped("stopped by the engine")

    def flush(self) -> None:
        """Fold whatever :meth:`add` left in the buffers (a loop's end)."""
        n, self.ops_pending = self.ops_pending, 0
        self.settle(n)

    def worked(self, t_end: int) -> None:
        """The thread computed (it did not wait for storage) until ``t_end``: a pause counts from then on."""
        self.flush()
        self.last_end = max(self.last_end, t_end)



class PhaseRecorder:
    """Times one client's phase and merges the OpLogs of its threads into a PhaseRecord."""

    def __init__(self, rank: int, phase: str, progress: Any = None, iteration: int = 0) -> None:
        self.rank = rank
        self.phase = phase
        self.iteration = iteration
        self.progress = progress
        self.logs: list[OpLog] = []
        self.errors: dict[str, int] = {}
        self.extra: dict[str, Any] = {}
        self.start_ns = 0
        self.end_ns = 0
        self._ru0: Any = None
        self.latency: Histogram | None = None  # when set (latency_of_requests), the phase's latencies instead

    def clear_progress(self) -> None:
        """Zero this client's work in the progress slot (before the phase's barriers: once client 0 says the
        phase has begun, no slot still counts the previous phase)."""
        if self.progress is not None:
            slot = PROGRESS_SLOTS * self.rank
            self.progress[slot + P_BYTES] = self.progress[slot + P_OPS] = self.progress[slot + P_ERRS] = 0

    def begin(self) -> None:
        if self.progress is not None:
            slot = PROGRESS_SLOTS * self.rank
            self.progress[slot + P_BYTES] = self.progress[slot + P_OPS] = self.progress[slot + P_ERRS] = 0
            self.progress[slot + P_BEAT] = time.monotonic_ns()
        self._ru0 = resource.getrusage(resource.RUSAGE_SELF)
        self.start_ns = time.perf_counter_ns()
        for log in self.logs:
            log.t0 = self.start_ns

    def oplog(self, cap: int = 4096) -> OpLog:
        """A fresh OpLog for one thread of this phase (create them before the timed region)."""
        log = OpLog(self.start_ns, cap, self.progress, PROGRESS_SLOTS * self.rank)
        self.logs.append(log)
        return log

    def latency_of_requests(self, requests: Any) -> None:
        """The phase's latencies are those of the requests the driver made (``Driver.take_requests``): its
        calls only filled buffers those requests carried. Says so in ``extra["latency_of"]``."""
        self.latency = requests.hist
        self.extra["latency_of"] = {"what": requests.what, "requests": requests.count, "bytes": requests.bytes}

    def error(self, kind: str, count: int = 1) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + count
        if self.progress is not None:  # the live view's error count
            self.progress[PROGRESS_SLOTS * self.rank + P_ERRS] += count

    def finish(self) -> None:
        self.end_ns = time.perf_counter_ns()
        self._ru1 = resource.getrusage(resource.RUSAGE_SELF)

    def record(self, barrier_ns: int) -> PhaseRecord:
        hist = self.latency if self.latency is not None else Histogram.merged(log.hist for log in self.logs)
        length = max((len(log.tl_ops) for log in self.logs), default=0)
        tl_ops = np.zeros(length, np.int64)
        tl_bytes = np.zeros(length, np.int64)
        for log in self.logs:
            tl_ops[: len(log.tl_ops)] += log.tl_ops
            tl_bytes[: len(log.tl_bytes)] += log.tl_bytes
        seconds = max(1, -(-(self.end_ns - self.start_ns) // NS))
        ru0, ru1 = self._ru0, self._ru1
        extra = dict(self.extra)
        marks = progress_marks(self.logs, self.start_ns)
        if marks:
            extra["marks"] = marks
        worked = [(log.t0, log.last_end, log.gaps) for log in self.logs if log.last_end >= 0]
        if worked:  # when this client last completed an operation, and when none of its threads did
            start = self.start_ns
            extra["last_op_ns"] = max(last for _, last, _ in worked) - start
            extra["gaps"] = [[t - start, n] for t, n in quiet_spans(worked)]
        return PhaseRecord(
            rank=self.rank, host=HOST, phase=self.phase, iteration=self.iteration,
            bytes=sum(log.bytes for log in self.logs), ops=sum(log.ops for log in self.logs),
            errors=dict(self.errors), start_ns=self.start_ns, end_ns=self.end_ns, barrier_ns=barrier_ns,
            cpu_user=ru1.ru_utime - ru0.ru_utime, cpu_sys=ru1.ru_stime - ru0.ru_stime, hist=hist,
            tl_bytes=tl_bytes[:seconds].tolist(), tl_ops=tl_ops[:seconds].tolist(), extra=extra)


def progress_marks(logs: list[OpLog], start_ns: int) -> list[list[int]]:
    """One client's progress marks over all its threads: [ns after the phase's start, bytes done by then], each
    thread's bytes at a mark of another taken as of its own last mark before it (a lower bound, never more than
    was done)."""
    if len(logs) == 1:
        return [[t - start_ns, b] for t, b in logs[0].marks]
    events = sorted((t, i, b) for i, log in enumerate(logs) for t, b in log.marks)
    done = [0] * len(logs)
    out = []
    for t, i, b in events:
        done[i] = b
        out.append([t - start_ns, sum(done)])
    while len(out) > MAX_MARKS:
        out = out[1::2]  # as a thread's own marks are thinned
    return out
