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

import os
import signal
import time
from collections.abc import Callable
from typing import Any

from .. import interrupts
from ..core.job import Job
from ..core.oplog import P_BEAT, P_DONE, P_WAIT, PROGRESS_SLOTS
from ..core.outcome import CellOutcome, PhaseWatcher, ProgressFn
from ..core.process import host_facts, set_process_name
from ..core.stop import STOP, ClientStopped
from ..errors import one_line
from ..probes.sampler import Sampler, start_sampler
from ..probes.server import pids_here
from .forkserver import client_context, start_fork_server
from .watch import ENGINE_STOP, GRACE_SECONDS, Watch


HOLD_POLL = 0.05  # seconds between two looks of a held client at the coordinator's release (Comm.hold)


class LocalComm:
    """Comm over a multiprocessing barrier and a shared array: the first ``total`` values for the all-reduce,
    the next ``total`` each client's arrivals at :meth:`ibarrier`. ``parts``: (count, barrier) of each part of
    the cell (Job.parts), for :meth:`split`; ``members``: the cell ranks of this communicator's clients."""

    def __init__(self, rank: int, size: int, barrier: Any, shared: Any, progress: Any = None,
                 parts: tuple = (), members: tuple[int, ...] | None = None, total: int | None = None) -> None:
        self.rank, self.size = rank, size
        self.host_leader = rank == 0  # every local client is on this host
        self._barrier, self._shared, self._progress = barrier, shared, progress
        self._members = members if members is not None else tuple(range(size))
        self._me = self._members[rank]  # this client's rank in the cell: its slots
        self._total = total if total is not None else size
        self._base = PROGRESS_SLOTS * self._me
        self._parts = parts
        self._arrived = 0

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
        self._shared[self._me] = value
        self.barrier()
        out = op(self._shared[m] for m in self._members)
        self.barrier()
        return out

    def abort(self) -> None:
        self._barrier.abort()
        for _, barrier in self._parts:  # a part's clients may wait at their own barrier
            barrier.abort()

    def split(self, color: int) -> LocalComm:
        counts = [n for n, _ in self._parts]
        if not 0 <= color < len(counts):
            raise ValueError(f"part {color} of a cell of {len(counts)} parts")
        first = sum(counts[:color])
        members = tuple(self._members[first:first + counts[color]])
        if self._me not in members:
            raise ValueError(f"client {self.rank} is not one of part {color}'s "
                             f"(clients {first}–{first + counts[color] - 1})")
        sub = LocalComm(members.index(self._me), len(members), self._parts[color][1], self._shared, self._progress,
                        self._parts, members, self._total)
        sub.host_leader = self.host_leader
        return sub

    def hold(self) -> None:
        """Wait, counted as waiting (the hang watch excuses it), until the coordinator sets the shared array's
        last value (the watch loop's release, :func:`_releaser`)."""
        p, slot = self._progress, 2 * self._total
        if p is not None:
            p[self._base + P_WAIT] = 1
        try:
            while not self._shared[slot]:
                if STOP.is_set():
                    raise ClientStopped("stopped while held for the coordinator")
                time.sleep(HOLD_POLL)
                if p is not None:
                    p[self._base + P_BEAT] = time.monotonic_ns()
        finally:
            if p is not None:
                p[self._base + P_WAIT] = 0
                p[self._base + P_BEAT] = time.monotonic_ns()

    def ibarrier(self) -> _Arrival:
        self._arrived += 1
        self._shared[self._total + self._me] = self._arrived
        return _Arrival(self._shared, [self._total + m for m in self._members], self._arrived)


class _Arrival:
    """An arrival at LocalComm.ibarrier: complete once every member's count of arrivals reached this one's."""

    __slots__ = ("shared", "slots", "gen", "done")

    def __init__(self, shared: Any, slots: list[int], gen: int) -> None:
        self.shared, self.slots, self.gen, self.done = shared, slots, gen, False

    def test(self) -> bool:
        if not self.done:
            shared, gen = self.shared, self.gen
            self.done = all(shared[s] >= gen for s in self.slots)
        return self.done

    def wait(self) -> None:
        pause = 0.0005
        while not self.test():
            if STOP.is_set():
                raise ClientStopped("stopped by the engine")
            time.sleep(pause)
            pause = min(pause * 1.5, 0.05)


STOPS = (ENGINE_STOP, signal.SIGTERM, signal.SIGHUP)  # what stops a client process


class StopHandler:
    """A client's stop handler: the first stop signal raises ``ClientStopped`` where the client is, except while
    a message is being queued. Raised inside ``Queue.put`` as its feeder thread starts, it left that thread
    half-started ("KeyError" from threading on stderr) and the message lost; so there it is held and raised
    right after. A flag, not a signal mask: Python runs handlers in the main thread whichever thread the kernel
    picked, so blocking the signal in the main thread alone does not keep the handler out."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.queueing = False
        self.held = False

    def reason(self) -> str:
        if self.signum == ENGINE_STOP:
            return "stopped by the engine"
        return f"stopped by {interrupts.signal_name(self.signum)}"

    def __call__(self, signum: int, frame: Any) -> None:
        if STOP.is_set():
            return
        STOP.set()
        self.signum = signum
        if self.queueing:
            self.held = True
            return
        raise ClientStopped(self.reason())

    def put(self, out: Any, msg: tuple) -> None:
        """``out.put(msg)``, whole, with a stop that arrives meanwhile raised after it."""
        self.queueing = True
        try:
            out.put(msg)
        finally:
            self.queueing = False
        if self.held:
            self.held = False
            raise ClientStopped(self.reason())


def _ignore_stops() -> None:
    for sig in STOPS:
        signal.signal(sig, signal.SIG_IGN)


def _client_entry(job: Job, rank: int, size: int, barrier: Any, shared: Any, out: Any, progress: Any,
                  parts: tuple = ()) -> None:
    """Entry point of a client process (born with the stop signals blocked, see the module's docstring)."""
    stop = StopHandler()

    def send(msg: tuple) -> None:
        if msg[0] == "stopped" and stop.signum not in (None, ENGINE_STOP):  # stopped from outside storeval
            msg = (*msg[:3], interrupts.signal_name(stop.signum))
        stop.put(out, msg)

    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
        for sig in STOPS:
            signal.signal(sig, stop)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOPS)
        progress[PROGRESS_SLOTS * rank + P_BEAT] = time.monotonic_ns()
        set_process_name("storeval-client")
        from .clients import run_client

        run_client(job, LocalComm(rank, size, barrier, shared, progress, parts), send, progress)
    except ClientStopped:  # stopped before the client loop could say so itself
        send(("stopped", rank, "start"))
    finally:
        try:
            _ignore_stops()  # reported: now only flush; SIGKILL if this hangs
        except ClientStopped:  # the one stop (it raises once) arrived as this client was ending anyway
            _ignore_stops()
        out.close()
        out.join_thread()


class LocalEngine:
    """Runs cells with local client processes."""

    name = "local"

    def __init__(self, preload: tuple[str, ...] = ()) -> None:
        self.ctx = client_context(preload)

    def describe_hosts(self) -> list[dict[str, Any]]:
        """The one host every client runs on."""
        return [host_facts()]

    def run_cell(self, job: Job, nclients: int, timeout: float, on_progress: ProgressFn | None = None,
                 on_clients: Callable[[list[dict[str, Any]]], None] | None = None,
                 watcher: PhaseWatcher | None = None, feed: Any = None) -> CellOutcome:
        """Run one cell. Called inside ``interrupts.deferred()`` (the runner's): a stop signal is acted on
        between two polls of the clients, never while a client is being started or stopped."""
        ctx = self.ctx
        start_fork_server()  # before the first semaphore: that would start the resource tracker unshielded
        barrier = ctx.Barrier(nclients)
        # the all-reduce's values, then each client's ibarrier arrivals, then the coordinator's release (Comm.hold)
        shared = ctx.RawArray("q", 2 * nclients + 1)
        progress = ctx.RawArray("q", PROGRESS_SLOTS * nclients)
        parts = tuple((n, ctx.Barrier(n)) for n in job.parts)  # a barrier of each part's own (Comm.split)
        out = ctx.Queue()
        procs = [ctx.Process(target=_client_entry, args=(job, r, nclients, barrier, shared, out, progress, parts),
                             name=f"storeval-client-{r}", daemon=True) for r in range(nclients)]
        relays = {f"the relay of emulated host {host}'s link": (r["pid"], r["created"])
                  for host, spec in job.links.items() if (r := spec.get("relay"))}
        watch = Watch(procs, [tuple(st) for st in job.steps], nclients, progress, timeout, watcher, relays,
                      release=_releaser(shared, 2 * nclients) if job.hold else None)
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
                                        job.probe_interval, job.links, tuple(pids_here(job.server)))
                watch.loop(out, on_progress, sampler, feed)
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
        outcome.note_late_stop()
        return outcome

    def processes(self) -> list[dict[str, Any]]:
        return []


def _releaser(shared: Any, slot: int) -> Any:
    def release() -> None:
        shared[slot] = 1
    return release


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


