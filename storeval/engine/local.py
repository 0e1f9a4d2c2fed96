"""Local engine: the clients of a cell are processes on this machine.

Processes come from a fork server (started once, with numpy and the workloads
already imported), so a cell starts in tens of milliseconds and no client
inherits the coordinator's threads, database handle or network sessions. The
clients synchronise on a ``multiprocessing.Barrier``; this process only
watches: it collects records, updates progress, and when a client fails, dies
or hangs (no progress for the phase timeout) it stops the others (SIGUSR1, then
SIGKILL after a grace period without a sign of life) and reports the cell failed
with that client's reason. A stop signal (Ctrl-C, SIGTERM, SIGHUP; see
``interrupts``) stops the clients the same way and the cell is interrupted.

The fork server and every process it forks start with the stop signals blocked: a Ctrl-C on the
terminal reaches the whole process group, and only the coordinator may act on it (a client that got
it first would die mid-write, a fork server importing numpy would print a traceback). Clients then
unblock SIGTERM and SIGHUP, so one stopped from outside storeval says so, and SIGUSR1, the engine's own
"stop" — the two are told apart.
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

from .. import interrupts
from ..errors import one_line
from ..probes.sampler import Sampler, start_sampler
from .records import P_BEAT, P_BYTES, P_DONE, P_OPS, P_WAIT, PROGRESS_SLOTS, STOP, ClientStopped, PhaseRecord, set_process_name

GRACE_SECONDS = 5.0  # how long stopped clients may take to clean up without a sign of life
POLL_SECONDS = 0.1
ENGINE_STOP = signal.SIGUSR1  # the engine's own request to a client to stop (blocked until it is ready)

ProgressFn = Callable[[str, int, int], None]


@dataclass
class CellOutcome:
    status: str  # ok | failed | interrupted
    error: str | None = None
    failed_step: tuple[str, int] | None = None  # (phase, iteration); None when it failed outside a phase
    records: list[PhaseRecord] = field(default_factory=list)
    complete_steps: list[tuple[str, int]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    stop_requested: bool = False  # a stop signal came while a finished cell was being wound down: stop after it
    fatal: bool = False  # the engine cannot go on (an MPI rank hung): store this cell, clean up, end the job
    samples: list[tuple[int, str, str, str, float]] = field(default_factory=list)  # (t_ns, probe, device, metric, value)


class LocalComm:
    """Comm over a multiprocessing barrier and a shared array (for all-reduce)."""

    def __init__(self, rank: int, size: int, barrier: Any, shared: Any, progress: Any = None) -> None:
        self.rank, self.size = rank, size
        self.host_leader = rank == 0  # every local client is on this host
        self._barrier, self._shared, self._progress = barrier, shared, progress
        self._base = PROGRESS_SLOTS * rank

    def phase_done(self, steps: int) -> None:
        """Tell the coordinator this client finished its share of ``steps`` steps (it names laggards)."""
        if self._progress is not None:
            self._progress[self._base + P_DONE] = steps
            self._progress[self._base + P_BEAT] = time.monotonic_ns()

    def barrier(self) -> None:
        p = self._progress
        if p is None:
            self._barrier.wait()
            return
        p[self._base + P_WAIT] = 1
        try:
            self._barrier.wait()
        finally:
            p[self._base + P_WAIT] = 0
            p[self._base + P_BEAT] = time.monotonic_ns()

    def allreduce_max(self, value: int) -> int:
        return self._allreduce(value, max)

    def allreduce_min(self, value: int) -> int:
        return self._allreduce(value, min)

    def _allreduce(self, value: int, op: Any) -> int:
        self._shared[self.rank] = value
        self.barrier()
        out = op(self._shared[: self.size])
        self.barrier()
        return out

    def abort(self) -> None:
        self._barrier.abort()


def _client_entry(job: dict, rank: int, size: int, barrier: Any, shared: Any, out: Any, progress: Any) -> None:
    """Entry point of a client process (born with the stop signals blocked, see the module's docstring)."""
    stopped_by: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        if not STOP.is_set():
            STOP.set()
            stopped_by.append(signum)
            raise ClientStopped("stopped by the engine" if signum == ENGINE_STOP
                                else f"stopped by {interrupts.signal_name(signum)}")

    def send(msg: tuple) -> None:
        if msg[0] == "stopped" and stopped_by and stopped_by[0] != ENGINE_STOP:  # stopped from outside storeval
            msg = (*msg[:3], interrupts.signal_name(stopped_by[0]))
        out.put(msg)

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
        for sig in (ENGINE_STOP, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, stop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, (ENGINE_STOP, signal.SIGTERM, signal.SIGHUP))
        progress[PROGRESS_SLOTS * rank + P_BEAT] = time.monotonic_ns()
        set_process_name("storeval-client")
        from .clients import run_client

        run_client(job, LocalComm(rank, size, barrier, shared, progress), send, progress)
    except ClientStopped:  # stopped before the client loop could say so itself
        send(("stopped", rank, "start"))
    finally:
        for sig in (ENGINE_STOP, signal.SIGTERM, signal.SIGHUP):  # reported: now only flush; SIGKILL if this hangs
            signal.signal(sig, signal.SIG_IGN)
        out.close()
        out.join_thread()


def _context() -> Any:
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["storeval.engine.clients"])
    return ctx


def start_fork_server() -> None:
    """Start the fork server (once) with the stop signals blocked: it and every process it forks inherit
    that mask, so a terminal's Ctrl-C reaches only the coordinator. Signals that arrive meanwhile wait in
    this process and are delivered, not lost, when the mask is restored."""
    from multiprocessing import forkserver, resource_tracker

    old = signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SHIELD)
    try:
        resource_tracker.ensure_running()  # it ignores SIGINT and SIGTERM, not SIGHUP; it unblocks those two here
        signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SHIELD)
        forkserver.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _exit_reason(code: int | None) -> str:
    if code is None:
        return "did not exit"
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def runqueue_waits(pid: int | None) -> dict[str, int]:
    """Nanoseconds each thread of ``pid`` has spent runnable but waiting for a CPU (/proc schedstat)."""
    out: dict[str, int] = {}
    if not pid:
        return out
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat", encoding="ascii") as f:
                out[tid] = int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return out


class HangClock:
    """How long each client has gone without a sign of progress — counted from when the coordinator saw its
    last one, less the time the client spent waiting for a CPU. A client that progresses slowly is not hung,
    nor is one a busy machine does not schedule, nor one this coordinator looked at late; one that sleeps,
    spins or waits on a frozen server is.

    The CPU waits are read from /proc only for a client that has gone quiet (first after ``check``, a
    quarter of the timeout at most one second); of the time before that first reading — which a starved
    coordinator may take late, when nothing tells a starved client from a hung one — ``check`` counts."""

    def __init__(self, timeout: float, pids: dict[int, int | None], now: Callable[[], int] = time.monotonic_ns,
                 waits: Callable[[int | None], dict[str, int]] = runqueue_waits) -> None:
        self.timeout_ns = int(timeout * 1e9)
        self.check_ns = min(1_000_000_000, self.timeout_ns // 4)
        self.pids, self.now, self.waits = pids, now, waits
        self.state: dict[int, list[Any]] = {}  # rank -> [beat, seen at, waits at the first reading, its time]

    def hung(self, rank: int, beat: int) -> bool:
        now = self.now()
        st = self.state.get(rank)
        if st is None or st[0] != beat:
            self.state[rank] = [beat, now, None, None]
            return False
        if now - st[1] < self.check_ns:
            return False
        if st[2] is None:
            st[2], st[3] = self.waits(self.pids.get(rank)), now
            return False
        if now - st[1] <= self.timeout_ns:
            return False
        after = self.waits(self.pids.get(rank))
        waited = max((w - st[2].get(tid, 0) for tid, w in after.items()), default=0)
        return min(st[3] - st[1], self.check_ns) + (now - st[3]) - waited > self.timeout_ns

    def forget(self, rank: int) -> None:
        self.state.pop(rank, None)


class LocalEngine:
    """Runs cells with local client processes."""

    name = "local"

    def __init__(self) -> None:
        self.ctx = _context()

    def run_cell(self, job: dict, nclients: int, timeout: float, on_progress: ProgressFn | None = None,
                 on_clients: Callable[[list[dict[str, Any]]], None] | None = None) -> CellOutcome:
        """Run one cell. Called inside ``interrupts.deferred()`` (the runner's): a stop signal is acted on
        between two polls of the clients, never while a client is being started or stopped."""
        ctx = self.ctx
        start_fork_server()  # before the first semaphore: that would start the resource tracker unshielded
        barrier = ctx.Barrier(nclients)
        shared = ctx.RawArray("q", nclients)
        progress = ctx.RawArray("q", PROGRESS_SLOTS * nclients)
        out = ctx.Queue()
        procs = [ctx.Process(target=_client_entry, args=(job, r, nclients, barrier, shared, out, progress),
                             name=f"storeval-client-{r}", daemon=True) for r in range(nclients)]
        watch = _Watch(procs, [tuple(st) for st in job["steps"]], nclients, progress, timeout)
        sampler: Sampler | None = None
        try:
            try:
                for p in procs:
                    p.start()
            except OSError as e:  # e.g. the process limit: the clients already started must be stopped
                watch.fail("failed", None, f"the client processes could not be started: {one_line(e)}")
            else:
                if on_clients is not None:
                    on_clients(_describe(procs))
                sampler = start_sampler(ctx, {f"client{r}": p.pid for r, p in enumerate(procs)},
                                        job.get("probe_interval", 1.0))
                watch.loop(out, on_progress, sampler)
        except KeyboardInterrupt as e:  # storeval used without interrupts.install(): Python's own Ctrl-C
            watch.fail("interrupted", watch.current_step(), str(e) or interrupts.reason(None))
        finally:
            started = [p for p in procs if p.pid is not None]
            if watch.status == "ok":  # every client said done: let them exit (they flush their last messages)
                watch.wait_for_exit(started, out)
            if watch.status != "ok" or any(p.is_alive() for p in started):
                watch.stop_all(out)
            out.close()
            samples = sampler.stop(GRACE_SECONDS if watch.status == "ok" else 1.0) if sampler is not None else []
        outcome = watch.outcome()
        outcome.samples = samples
        late = interrupts.take()  # a stop signal while the cell was being wound down: the run stops after it
        if late is not None and outcome.status == "ok":
            outcome.stop_requested = True
        elif late is not None and outcome.status != "interrupted":
            outcome.events.append({"kind": "interrupted", "rank": None, "phase": None,
                                   "message": f"{interrupts.reason(late)} while the cell was stopping"})
            outcome.stop_requested = True
        return outcome

    def processes(self) -> list[dict[str, Any]]:
        return []


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
        self.current = 0  # index of the step in progress (len(steps) once all are done)
        self.clock: HangClock | None = None

    def label(self, step: tuple[str, int] | None) -> str:
        if step is None:
            return "cleanup"
        return f"{step[0]} (iteration {step[1] + 1})" if self.iterated else step[0]

    def current_step(self) -> tuple[str, int] | None:
        return self.steps[self.current] if self.current < len(self.steps) else None

    def step_of(self, done: int) -> tuple[str, int] | None:
        """The step of a client that has finished ``done`` steps."""
        return self.steps[done] if done < len(self.steps) else None

    # -- message handling ---------------------------------------------------------------------------
    def handle(self, msg: tuple) -> None:
        kind, rank = msg[0], msg[1]
        if kind == "record":
            rec = PhaseRecord.from_wire(msg[2])
            self.records[rec.step][rank] = rec
            while self.current < len(self.steps) and len(self.records[self.steps[self.current]]) == self.n:
                self.current += 1
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
            if len(msg) > 3 and self.status == "ok":  # stopped by a signal from outside storeval
                self.stopped_from_outside(rank, msg[3])
        elif kind == "done":
            self.reported.add(rank)
            self.finished.add(rank)

    def stopped_from_outside(self, rank: int, signame: str) -> None:
        """A client got a stop signal that storeval did not send (a batch scheduler stopping the job): the
        cell is interrupted and the run ends as if this process had received it."""
        try:
            interrupts.note(signal.Signals[signame])
        except KeyError:
            pass
        step = self.current_step()
        self.fail("interrupted", step, f"client {rank} was stopped by {signame} during {self.label(step)}")

    def fail(self, status: str, step: tuple[str, int] | None, message: str) -> None:
        if self.status == "ok":
            self.status, self.error, self.failed_step = status, message, step
            if status == "interrupted":
                self.events.append({"kind": "interrupted", "rank": None, "phase": self.label(step), "message": message})

    # -- the watch loop -------------------------------------------------------------------------------
    def loop(self, out: Any, on_progress: ProgressFn | None, sampler: Sampler | None = None) -> None:
        self.clock = HangClock(self.timeout, {r: p.pid for r, p in enumerate(self.procs)})
        while self.status == "ok" and len(self.finished) < self.n:
            sig = interrupts.take()
            if sig is not None:
                self.fail("interrupted", self.current_step(), interrupts.reason(sig))
                break
            try:
                self.handle(out.get(timeout=POLL_SECONDS))
                while True:
                    self.handle(out.get_nowait())
            except queue_mod.Empty:
                pass
            if sampler is not None:
                sampler.drain()
            step = self.current_step()
            if on_progress is not None and step is not None:
                slots = range(0, PROGRESS_SLOTS * self.n, PROGRESS_SLOTS)
                on_progress(self.label(step), sum(self.progress[s + P_BYTES] for s in slots),
                            sum(self.progress[s + P_OPS] for s in slots))
            self._check_exits(out)
            if self.status == "ok":
                self._check_hung()

    def _drain(self, out: Any) -> None:
        try:
            while True:
                self.handle(out.get_nowait())
        except (queue_mod.Empty, OSError, ValueError, EOFError):
            pass

    def _check_exits(self, out: Any) -> None:
        exited = [r for r, p in enumerate(self.procs) if r not in self.reported and p.exitcode is not None]
        if not exited:
            return
        self._drain(out)  # what a client sent before it exited is in the pipe by now
        for rank in exited:
            if rank not in self.reported:
                self.reported.add(rank)
                code = self.procs[rank].exitcode
                step = self.step_of(self.progress[PROGRESS_SLOTS * rank + P_DONE])
                self.events.append({"kind": "died", "rank": rank, "phase": self.label(step),
                                    "message": _exit_reason(code)})
                self.fail("failed", step, f"client {rank} {_exit_reason(code)} during {self.label(step)}")

    def _check_hung(self) -> None:
        hung: list[int] = []
        for r in range(self.n):
            base = PROGRESS_SLOTS * r
            if r in self.reported or self.progress[base + P_WAIT]:  # done, or waiting for a peer
                self.clock.forget(r)
                continue
            if self.clock.hung(r, self.progress[base + P_BEAT]):
                hung.append(r)
        if not hung:
            return
        step = self.step_of(min(self.progress[PROGRESS_SLOTS * r + P_DONE] for r in hung))
        who = ", ".join(str(r) for r in hung)
        self.events.append({"kind": "timeout", "rank": hung[0], "phase": self.label(step),
                            "message": f"phase timeout {self.timeout:g} s"})
        self.fail("failed", step, f"client {who} hung in {self.label(step)} (no progress for the phase timeout "
                                  f"of {self.timeout:g} s); all clients stopped")

    def wait_for_exit(self, procs: list, out: Any) -> None:
        """Clients that finished exit once their last messages are flushed; wait while they do."""
        last = time.monotonic()
        alive = [p for p in procs if p.is_alive()]
        while alive and time.monotonic() - last < GRACE_SECONDS:
            try:
                self.handle(out.get(timeout=POLL_SECONDS))
                last = time.monotonic()
            except queue_mod.Empty:
                pass
            still = [p for p in alive if p.is_alive()]
            if len(still) < len(alive):
                last = time.monotonic()
            alive = still

    def stop_all(self, out: Any) -> None:
        """Ask the live clients to stop, wait while they clean up (as long as one of them still shows a sign of
        life within the grace period), SIGKILL the rest. The signal also takes a client out of a barrier; the
        barrier itself is not touched: aborting it waits for every process asleep in it to wake, and one
        that was killed there never does."""
        started = [p for p in self.procs if p.pid is not None]
        for rank, p in enumerate(self.procs):
            if p.pid is not None and p.is_alive() and rank not in self.reported:  # the others are on their way out
                try:
                    os.kill(p.pid, ENGINE_STOP)
                except ProcessLookupError:
                    pass
        self.wait_for_exit(started, out)
        for p in started:
            if p.is_alive():
                p.kill()
        for p in started:
            p.join(timeout=GRACE_SECONDS)  # SIGKILL is certain; only a busy machine delays the reaping
        self._drain(out)

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
