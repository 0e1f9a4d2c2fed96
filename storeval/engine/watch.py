"""The coordinator's view of a running cell: messages, exits, hangs, stopping — shared by the local and MPI engines."""

from __future__ import annotations

import os
import queue as queue_mod
import signal
import time
from collections.abc import Callable
from typing import Any

from .. import interrupts
from ..core.oplog import P_BEAT, P_BYTES, P_DONE, P_ERRS, P_OPS, P_WAIT, PROGRESS_SLOTS
from ..core.outcome import CellOutcome, PhaseWatcher, ProgressFn
from ..core.process import alive
from ..core.records import PhaseRecord
from ..probes.sampler import Sampler

GRACE_SECONDS = 5.0  # how long stopped clients may take to clean up without a sign of life
# How long a client may stay at a barrier after a peer has finished the cell (a barrier that can no longer
# complete: the only doubt is a client released from it that has not been scheduled since), at most the phase
# timeout. A workload whose clients take different steps fails in seconds, not after the hour's timeout.
STRANDED_SECONDS = 30.0
POLL_SECONDS = 0.1
ENGINE_STOP = signal.SIGUSR1  # the engine's own request to a client to stop (blocked until it is ready)


def exit_reason(code: int | None) -> str:
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


class Watch:
    """The coordinator's view of one running cell."""

    def __init__(self, procs: list, steps: list[tuple[str, int]], n: int, progress: Any, timeout: float,
                 watcher: PhaseWatcher | None = None, required: dict[str, tuple[int, float]] | None = None,
                 release: Callable[[], None] | None = None) -> None:
        self.procs, self.steps, self.n, self.progress, self.timeout = procs, steps, n, progress, timeout
        self.watcher = watcher
        self.release = release  # lets the clients held after the last phase (Job.hold) go on to clean up
        self.all_ended = False
        self.required = required or {}  # what -> (pid, start time): processes the cell's path needs
        self.started: set[tuple[str, int]] = set()  # steps the watcher was told had started
        self.iterated = any(it for _, it in steps)
        self.records: dict[tuple[str, int], dict[int, PhaseRecord]] = {st: {} for st in steps}
        self.partials: list[PhaseRecord] = []
        self.finished: set[int] = set()
        self.reported: set[int] = set()  # ranks that sent done/error/stopped
        self.unasked: dict[int, tuple[tuple[str, int] | None, float]] = {}  # stopped while nothing stopped them
        self.status = "ok"
        self.error: str | None = None
        self.failed_step: tuple[str, int] | None = None
        self.events: list[dict[str, Any]] = []
        self.current = 0  # index of the step in progress (len(steps) once all are done)
        self.clock: HangClock | None = None
        self.stranded_clock: HangClock | None = None  # clients at a barrier a finished peer will never reach

    def label(self, step: tuple[str, int] | None) -> str:
        if step is None:
            return "cleanup"
        return f"{step[0]} (iteration {step[1] + 1})" if self.iterated else step[0]

    def step_of_rank(self, rank: int) -> tuple[str, int] | None:
        """The step client ``rank`` is in, from its progress slots (the MPI watch knows it from its reports)."""
        return self.step_of(self.progress[PROGRESS_SLOTS * rank + P_DONE])

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
                self.step_ended(self.steps[self.current], time.perf_counter_ns())
                self.current += 1
        elif kind == "note":  # something the run should say, that fails nothing
            self.events.append({"kind": "warning", "rank": rank, "phase": msg[2], "message": msg[3]})
        elif kind == "checked":  # what a client read back after the phase (Workload.check_after)
            rec = self.records.get((msg[2], msg[3]), {}).get(rank)
            if rec is not None:
                rec.extra["written_check"] = msg[4]
        elif kind == "start":  # client 0 began a phase's timed region (its clock is this host's)
            step = (msg[2], msg[3])
            if step == self.current_step():
                self.step_started(step, msg[4])
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
            elif self.status == "ok":  # a peer's failure (its error may still be on its way) or the workload itself
                self.unasked.setdefault(rank, (self.step_of_rank(rank), time.monotonic()))
        elif kind == "done":
            self.reported.add(rank)
            self.finished.add(rank)

    def step_started(self, step: tuple[str, int], t_ns: int) -> None:
        if self.watcher is not None and step not in self.started:
            self.started.add(step)
            self.watcher.phase_started(step[0], step[1], t_ns)

    def step_ended(self, step: tuple[str, int], t_ns: int) -> None:
        if self.watcher is not None and step in self.started:
            self.watcher.phase_ended(step[0], step[1], t_ns)
        if self.steps and step == self.steps[-1] and not self.all_ended:
            self.all_ended = True
            if self.watcher is not None:
                self.watcher.phases_over()

    def release_when_done(self) -> None:
        """Release the held clients (Job.hold) once every phase has ended and the watcher holds them no more
        (the system healed, or its heal_timeout passed), or at once when the cell failed."""
        if self.release is None:
            return
        if self.status != "ok" or (self.all_ended and (self.watcher is None or not self.watcher.holding())):
            self.release()
            self.release = None

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
    def loop(self, out: Any, on_progress: ProgressFn | None, sampler: Sampler | None = None, feed: Any = None) -> None:
        pids = {r: p.pid for r, p in enumerate(self.procs)}
        self.clock = HangClock(self.timeout, pids)
        self.stranded_clock = HangClock(self.stranded_seconds(), pids)
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
            self.release_when_done()
            step = self.current_step()
            if step is not None and (on_progress is not None or step in self.started):
                slots = range(0, PROGRESS_SLOTS * self.n, PROGRESS_SLOTS)
                done_bytes = sum(self.progress[s + P_BYTES] for s in slots)
                done_ops = sum(self.progress[s + P_OPS] for s in slots)
                if on_progress is not None:
                    on_progress(self.label(step), done_bytes, done_ops)
                if self.watcher is not None and step in self.started:
                    self.watcher.progress(step[0], step[1], done_bytes, done_ops)
            if feed is not None and step is not None:  # the live view: every client's counters (report/live.py)
                p = self.progress
                feed.sample(self.label(step), [(p[s + P_BYTES], p[s + P_OPS], p[s + P_ERRS])
                                               for s in range(0, PROGRESS_SLOTS * self.n, PROGRESS_SLOTS)])
            self._check_exits(out)
            if self.status == "ok":
                self._check_unasked()
            if self.status == "ok":
                self._check_required()
            if self.status == "ok":
                self._check_hung()

    def _check_unasked(self) -> None:
        """A client that stopped though storeval asked nothing of it and no peer's error followed within the grace:
        its peers wait at a barrier it will never reach (the hang watch excuses waiting clients), so the cell fails
        now, naming it."""
        for rank, (step, since) in self.unasked.items():
            if time.monotonic() - since >= GRACE_SECONDS:
                self.fail("failed", step, f"client {rank} stopped during {self.label(step)} though nothing asked it "
                                          "to (its workload raised ClientStopped itself); all clients stopped")
                return

    def _check_required(self) -> None:
        """A process the cell's path depends on (an emulated link's relay) that ended fails the cell at once: its
        clients would otherwise wait on a path that no longer carries anything until the phase timeout."""
        for what, (pid, created) in self.required.items():
            if not alive(pid, created):
                self.fail("failed", self.current_step(), f"{what} (pid {pid}) ended: the cell's clients lost their "
                                                         "path to the target")
                return

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
                                    "message": exit_reason(code)})
                self.fail("failed", step, f"client {rank} {exit_reason(code)} during {self.label(step)}")

    def _check_hung(self) -> None:
        """A working client without progress for the phase timeout has hung. A client waiting at a barrier is
        excused while its peers are still on their way; once a peer has finished the cell, that barrier can never
        complete, and the wait is timed like work."""
        hung: list[int] = []
        stranded: list[int] = []
        for r in range(self.n):
            base = PROGRESS_SLOTS * r
            waiting = self.progress[base + P_WAIT]
            if r in self.reported or (waiting and not self.finished):  # done, or waiting for a peer
                self.clock.forget(r)
                self.stranded_clock.forget(r)
                continue
            clock, other = (self.stranded_clock, self.clock) if waiting else (self.clock, self.stranded_clock)
            other.forget(r)
            if clock.hung(r, self.progress[base + P_BEAT]):
                (stranded if waiting else hung).append(r)
        if not hung and not stranded:
            return
        stuck = hung or stranded
        step = self.step_of(min(self.progress[PROGRESS_SLOTS * r + P_DONE] for r in stuck))
        who = ", ".join(str(r) for r in stuck)
        self.events.append({"kind": "timeout", "rank": stuck[0], "phase": self.label(step),
                            "message": f"phase timeout {self.timeout:g} s"})
        if hung:
            self.fail("failed", step, f"client {who} hung in {self.label(step)} (no progress for the phase timeout "
                                      f"of {self.timeout:g} s); all clients stopped")
        else:
            done = ", ".join(str(r) for r in sorted(self.finished))
            self.fail("failed", step, f"{self.stranded(f'client {who}', step, f'client {done}')}; all clients stopped")

    def stranded_seconds(self) -> float:
        return min(self.timeout, STRANDED_SECONDS)

    def stranded(self, who: str, step: tuple[str, int] | None, done: str) -> str:
        """Why clients ``who`` failed: they waited at a barrier in (or after) ``step`` that ``done``, having
        finished the cell, will never reach."""
        where = f"in {self.label(step)}" if step is not None else f"after {self.label(self.steps[-1])}"
        bound = self.stranded_seconds()
        waited = f"the phase timeout of {bound:g} s" if bound == self.timeout else f"{bound:g} s"
        return (f"{who} waited at a barrier {where} for {waited} after {done} had finished the cell: the clients "
                "did not take the same steps (a workload that calls comm.barrier() a different number of times on "
                "different clients)")

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
