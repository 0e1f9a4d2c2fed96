"""Local engine: the clients of a cell are processes on this machine.

Processes come from a fork server (started once, with numpy and the workloads
already imported), so a cell starts in tens of milliseconds and no client
inherits the coordinator's threads, database handle or network sessions. The
clients synchronise on a ``multiprocessing.Barrier``; this process only
watches: it collects records, updates progress, and when a client fails, dies
or hangs past the phase timeout it breaks the barrier, stops the others
(SIGTERM, then SIGKILL after a grace period) and reports the cell failed with
that client's reason. Ctrl-C stops the clients the same way.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue as queue_mod
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .records import PROGRESS_SLOTS, STOP, ClientStopped, PhaseRecord, set_process_name

GRACE_SECONDS = 10.0
POLL_SECONDS = 0.1

ProgressFn = Callable[[str, int, int], None]


@dataclass
class CellOutcome:
    status: str  # ok | failed | interrupted
    error: str | None = None
    failed_step: tuple[str, int] | None = None  # (phase, iteration); None when it failed outside a phase
    records: list[PhaseRecord] = field(default_factory=list)
    complete_steps: list[tuple[str, int]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    stop_requested: bool = False  # Ctrl-C came while a finished cell was being wound down: stop the run after it
    fatal: bool = False  # the engine cannot go on (an MPI rank hung): store this cell, clean up, end the job
    samples: list[tuple[int, str, str, str, float]] = field(default_factory=list)  # (t_ns, probe, device, metric, value)


class LocalComm:
    """Comm over a multiprocessing barrier and a shared array (for all-reduce)."""

    def __init__(self, rank: int, size: int, barrier: Any, shared: Any, progress: Any = None) -> None:
        self.rank, self.size = rank, size
        self.host_leader = rank == 0  # every local client is on this host
        self._barrier, self._shared, self._progress = barrier, shared, progress

    def phase_done(self, steps: int) -> None:
        """Tell the coordinator this client finished its share of ``steps`` steps (it names laggards)."""
        if self._progress is not None:
            self._progress[PROGRESS_SLOTS * self.rank + 2] = steps

    def barrier(self) -> None:
        self._barrier.wait()

    def allreduce_max(self, value: int) -> int:
        return self._allreduce(value, max)

    def allreduce_min(self, value: int) -> int:
        return self._allreduce(value, min)

    def _allreduce(self, value: int, op: Any) -> int:
        self._shared[self.rank] = value
        self._barrier.wait()
        out = op(self._shared[: self.size])
        self._barrier.wait()
        return out

    def abort(self) -> None:
        self._barrier.abort()


def _client_entry(job: dict, rank: int, size: int, barrier: Any, shared: Any, out: Any, progress: Any) -> None:
    """Entry point of a client process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    set_process_name("storeval-client")

    def stop(signum: int, frame: Any) -> None:
        if not STOP.is_set():
            STOP.set()
            raise ClientStopped("stopped by the engine")

    signal.signal(signal.SIGTERM, stop)
    from .clients import run_client

    try:
        run_client(job, LocalComm(rank, size, barrier, shared, progress), out.put, progress)
    except ClientStopped:
        out.put(("stopped", rank, "?"))
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # reported: now only flush; the engine SIGKILLs if this hangs
        out.close()
        out.join_thread()


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["storeval.engine.clients"])
    return ctx


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class LocalEngine:
    """Runs cells with local client processes."""

    name = "local"

    def __init__(self) -> None:
        self.ctx = _context()

    def run_cell(self, job: dict, nclients: int, timeout: float, on_progress: ProgressFn | None = None,
                 on_clients: Callable[[list[dict[str, Any]]], None] | None = None) -> CellOutcome:
        ctx = self.ctx
        barrier = ctx.Barrier(nclients)
        shared = ctx.RawArray("q", nclients)
        progress = ctx.RawArray("q", PROGRESS_SLOTS * nclients)
        out = ctx.Queue()
        procs = [ctx.Process(target=_client_entry, args=(job, r, nclients, barrier, shared, out, progress),
                             name=f"storeval-client-{r}", daemon=True) for r in range(nclients)]
        watch = _Watch(procs, [tuple(st) for st in job["steps"]], nclients, progress, timeout)
        sampler = None
        samples: list = []
        try:
            for p in procs:
                p.start()
            if on_clients is not None:
                on_clients(_describe(procs))
            sampler = start_sampler(self.ctx, {f"client{r}": p.pid for r, p in enumerate(procs) if p.pid},
                                    job.get("probe_interval", 1.0))
            watch.loop(out, on_progress)
        except KeyboardInterrupt:
            watch.fail("interrupted", watch.current_step(), "interrupted by the user (Ctrl-C)")
        finally:
            deferred: list[int] = []  # a Ctrl-C now waits until the clients are stopped and cleaned up
            old = signal.signal(signal.SIGINT, lambda signum, frame: deferred.append(signum))
            try:
                if watch.status == "ok":
                    for p in procs:
                        p.join(timeout=GRACE_SECONDS)
                if watch.status != "ok" or any(p.is_alive() for p in procs):
                    watch.stop_all(barrier, out)
                for p in procs:
                    p.join(timeout=1)
                out.close()
            finally:
                samples = stop_sampler(sampler)
                signal.signal(signal.SIGINT, old)
        outcome = watch.outcome()
        outcome.samples = samples
        if deferred and outcome.status == "ok":
            outcome.stop_requested = True
        elif deferred and outcome.status != "interrupted":
            outcome.events.append({"kind": "interrupted", "rank": None, "phase": None,
                                   "message": "interrupted by the user (Ctrl-C) while the cell was stopping"})
            outcome.stop_requested = True
        return outcome


def start_sampler(ctx: Any, pids: dict[str, int], interval: float) -> tuple | None:
    """The probe side process of a cell (every engine's: it samples this host while the clients run)."""
    if not interval or interval <= 0:
        return None
    from ..probes.sampler import sampler_main

    stop, out = ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=sampler_main, args=(pids, interval, stop, out), name="storeval-sampler", daemon=True)
    proc.start()
    return proc, stop, out


def stop_sampler(sampler: tuple | None) -> list:
    if sampler is None:
        return []
    proc, stop, out = sampler
    stop.set()
    try:
        rows = out.get(timeout=30)
    except queue_mod.Empty:
        rows = []
    proc.join(timeout=5)
    if proc.is_alive():
        proc.kill()
    out.close()
    return rows


def _describe(procs: list) -> list[dict[str, Any]]:
    """Rank, PID, start time and host of each client process (what the watchdog needs to find them)."""
    import psutil

    host, out = os.uname().nodename, []
    for rank, p in enumerate(procs):
        try:
            created = psutil.Process(p.pid).create_time()
        except psutil.Error:
            created = None
        out.append({"rank": rank, "pid": p.pid, "created": created, "host": host})
    return out


class _Watch:
    """The coordinator's view of one running cell."""

    def __init__(self, procs: list, steps: list[tuple[str, int]], n: int, progress: Any, timeout: float) -> None:
        self.procs, self.steps, self.n, self.progress, self.timeout = procs, steps, n, progress, timeout
        self.iterated = any(it for _, it in steps)
        self.records: dict[tuple[str, int], dict[int, PhaseRecord]] = {st: {} for st in steps}
        self.partials: list[PhaseRecord] = []
        self.finished: set[int] = set()
        self.reported: set[int] = set()  # ranks that sent done/error/stopped
        self.status = "ok"
        self.error: str | None = None
        self.failed_step: tuple[str, int] | None = None
        self.events: list[dict[str, Any]] = []
        self.phase_started = time.monotonic()
        self.current = 0  # index of the step in progress (len(steps) once all are done)

    def label(self, step: tuple[str, int] | None) -> str:
        if step is None:
            return "cleanup"
        return f"{step[0]} (iteration {step[1] + 1})" if self.iterated else step[0]

    def current_step(self) -> tuple[str, int] | None:
        return self.steps[self.current] if self.current < len(self.steps) else None

    # -- message handling ---------------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        kind, rank = msg[0], msg[1]
        if kind == "record":
            rec = PhaseRecord.from_wire(msg[2])
            self.records[rec.step][rank] = rec
            while self.current < len(self.steps) and len(self.records[self.steps[self.current]]) == self.n:
                self.current += 1
                self.phase_started = time.monotonic()
        elif kind == "partial":
            self.partials.append(PhaseRecord.from_wire(msg[2]))
        elif kind == "error":
            _, _, where, iteration, message, err_kind = msg
            step = (where, iteration) if (where, iteration) in self.records else None
            label = self.label(step) if step else where
            self.reported.add(rank)
            self.events.append({"kind": "error", "rank": rank, "phase": label, "message": message, "error_kind": err_kind})
            self.fail("failed", step, f"client {rank} failed in {label}: {message}")
        elif kind == "stopped":
            self.reported.add(rank)
        elif kind == "done":
            self.reported.add(rank)
            self.finished.add(rank)

    def fail(self, status: str, step: tuple[str, int] | None, message: str) -> None:
        if self.status == "ok":
            self.status, self.error, self.failed_step = status, message, step
            if status == "interrupted":
                self.events.append({"kind": "interrupted", "rank": None, "phase": self.label(step), "message": message})

    # -- the watch loop -------------------------------------------------------------------------------
    def loop(self, out: Any, on_progress: ProgressFn | None) -> None:
        while self.status == "ok" and len(self.finished) < self.n:
            try:
                self.handle(out.get(timeout=POLL_SECONDS))
                while True:
                    self.handle(out.get_nowait())
            except queue_mod.Empty:
                pass
            step = self.current_step()
            if on_progress is not None and step is not None:
                slots = range(0, PROGRESS_SLOTS * self.n, PROGRESS_SLOTS)
                on_progress(self.label(step), sum(self.progress[s] for s in slots),
                            sum(self.progress[s + 1] for s in slots))
            self._check_exits(out)
            if self.status == "ok" and time.monotonic() - self.phase_started > self.timeout:
                done = [self.progress[PROGRESS_SLOTS * r + 2] for r in range(self.n)]
                late = [r for r in range(self.n) if done[r] <= self.current and r not in self.records.get(step, {})]
                who = ", ".join(str(r) for r in late) or "?"
                self.events.append({"kind": "timeout", "rank": late[0] if late else None, "phase": self.label(step),
                                    "message": f"phase timeout {self.timeout:g} s"})
                self.fail("failed", step, f"client {who} hung in {self.label(step)} (no end after the phase timeout "
                                          f"of {self.timeout:g} s); all clients stopped")

    def _check_exits(self, out: Any) -> None:
        for rank, p in enumerate(self.procs):
            if p.exitcode is None or rank in self.reported:
                continue
            deadline = time.monotonic() + 1.0  # its last message may still be in the pipe
            while rank not in self.reported and time.monotonic() < deadline:
                try:
                    self.handle(out.get(timeout=POLL_SECONDS))
                except queue_mod.Empty:
                    pass
            if rank not in self.reported:
                self.reported.add(rank)
                step = self.current_step()
                self.events.append({"kind": "died", "rank": rank, "phase": self.label(step),
                                    "message": _exit_reason(p.exitcode)})
                self.fail("failed", step, f"client {rank} {_exit_reason(p.exitcode)} during {self.label(step)}")

    def stop_all(self, barrier: Any, out: Any) -> None:
        """Break the barrier, SIGTERM the live clients, wait for them to clean up, SIGKILL stragglers."""
        try:
            barrier.abort()
        except Exception:  # noqa: BLE001
            pass
        for rank, p in enumerate(self.procs):
            if p.is_alive() and p.pid and rank not in self.reported:  # the others are already on their way out
                try:
                    os.kill(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + GRACE_SECONDS
        while any(p.is_alive() for p in self.procs) and time.monotonic() < deadline:
            try:
                self.handle(out.get(timeout=POLL_SECONDS))
            except queue_mod.Empty:
                pass
        for p in self.procs:
            if p.is_alive():
                p.kill()
        try:
            while True:
                self.handle(out.get_nowait())
        except (queue_mod.Empty, OSError, ValueError):
            pass

    def outcome(self) -> CellOutcome:
        complete = [st for st in self.steps if len(self.records[st]) == self.n]
        records = [rec for st in self.steps for rec in sorted(self.records[st].values(), key=lambda r: r.rank)]
        for rec in self.partials:
            if rec.rank not in self.records[rec.step]:
                rec.extra["partial"] = True
                records.append(rec)
        if self.status == "ok" and len(complete) != len(self.steps):
            self.status, self.error = "failed", "clients ended without finishing every phase"
        return CellOutcome(status=self.status, error=self.error, failed_step=self.failed_step, records=records,
                           complete_steps=complete, events=self.events)
