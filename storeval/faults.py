"""Running a cell's fault plan from the coordinator (issue 15): the planned actions at their moments, the undo
after ``for``, and an event for each with its real wall-clock and monotonic times.

:class:`FaultRunner` is the engine's :class:`~storeval.core.outcome.PhaseWatcher`: the watch loop tells it
when a phase's timed region begins (client 0's clock, this host's ``perf_counter_ns``), how much work is done,
and when the phase ends. A thread acts at the planned moment, so a slow action (an HDFS datanode shutting
down, a user's command) never holds up the watch loop. Each fault acts once per cell, in the first iteration
of its phase. Whatever is still to be undone when the cell ends is undone then (a stopped server is never
left stopped), and a fault whose moment never came says so (``fault-missed``: the study did not get what it
asked for). One fault at a time per server: a fault whose server (or a node of it, or the whole server of its
node) another fault holds at its moment — acting on it, or in force until its undo — does not act and is
``fault-missed`` too (overlaps known in advance are refused before anything runs).

An ``exec`` command runs in a process group of its own (``core.process.run_bounded``), judged by the shell's
exit status; at its timeout the whole group is killed, and what it left running in its group when it ended
(``sleep 20 &``) is killed then and named in the event (``left_running``): a fault's effect is the state its
command leaves (a daemon stopped, a parameter set), not a process that would run on into later cells.

:func:`check_plan` is the check before anything runs: every server a plan names must be a fault handle of
the testbed (``storeval testbed faults``) that supports the action and its undo, and no two faults timed in
seconds hold one server at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from .core.faultplan import HEALED, UNDO, Fault, check_overlaps, format_duration, handles_overlap, heal_count
from .core.process import run_bounded
from .errors import InputError, StorevalError, one_line
from .redact import redact_text
from .units import format_share, format_size

DEFAULT_TESTBED = "storeval-testbed"  # as `storeval testbed up` names it
OUTPUT_CHARS = 300  # of an exec command's output kept in its event
HEAL_POLL_S = 1.0  # between two readings of what the system still has to heal
MAX_HEAL_SAMPLES = 3600  # readings kept for the timeline (an hour at one a second)
HEAL_BASELINE_WAIT_S = 30.0  # a fault due at once waits this long at most for its system's first reading
HEAL_BYTES_WAIT_S = 60.0  # beyond bytes_still_s: how long the servers' counters may go on moving after the heal
UNDO_WAIT_S = 300.0  # how long a heal watch waits for an undo under way to say when the part was back


def testbed_dir(study_testbed: str | None) -> str:
    return os.path.abspath(study_testbed or DEFAULT_TESTBED)


def check_cells(cells: list, study_testbed: str | None, *, progress_counted: bool = True) -> None:
    """Check the faults the planned cells will act on: those on a testbed the run brings up (a target's
    ``system:``) against its handles once it runs (runner.py), so here only for their timing and overlaps; the
    others against the testbed that runs now."""
    planned = {id(f): f for c in cells if not (c.target.system or {}).get("testbed") for f in c.faults}
    on_systems = [f for c in cells if (c.target.system or {}).get("testbed") for f in c.faults]
    check_plan(list(planned.values()), study_testbed, progress_counted=progress_counted)
    if on_systems:
        check_plan(on_systems, None, progress_counted=progress_counted, handles=False)


def check_plan(faults: list[Fault], study_testbed: str | None, *, progress_counted: bool = True,
               handles: bool = True) -> None:
    """Refuse (one line) a plan whose servers are not fault handles of the testbed, or whose actions they do
    not support, or two faults that would hold one server at once (``check_overlaps``); ``progress_counted``
    False (MPI) refuses ``at`` given as a share of the work; ``handles`` False checks only that and the
    overlaps (a testbed the run has not brought up yet has no handles to check)."""
    servers = [f for f in faults if f.action != "exec"]
    for f in faults:
        if f.at_share is not None and not progress_counted:
            raise InputError(f"{f.where}.at: {format_share(f.at_share)} of the work cannot be timed under mpiexec (the "
                             "coordinator sees no byte counts from other ranks; give a time such as 10s)")
    check_overlaps(faults)
    if not servers or not handles:
        return
    from .testbed.faults import fault_handles

    where = testbed_dir(study_testbed)
    try:
        handles = fault_handles(where)
    except StorevalError as e:
        raise InputError(f"{servers[0].where}.server: {servers[0].server}: {one_line(e)} (the plan's servers are "
                         f"the testbed's in {where}; set testbed: DIR in the study if it is elsewhere)") from None
    for f in servers:
        handle = handles.get(f.server or "")
        if handle is None:
            known = ", ".join(sorted(handles)) or "none"
            raise InputError(f"{f.where}.server: {f.server!r} is not a server of the testbed in {where} (its fault "
                             f"handles: {known})")
        needed = [f.action] + ([UNDO[f.action]] if f.for_s and f.action in UNDO else [])
        for action in needed:
            if action not in handle.actions:
                raise InputError(f"{f.where}.action: {f.server} cannot {action} ({handle.description}: it can "
                                 f"{', '.join(handle.actions)})")


def _wall(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


class _Planned:
    """One fault's progress through the cell: armed → fired → undone."""

    def __init__(self, fault: Fault) -> None:
        self.fault = fault
        self.phase_t0: int | None = None  # the start of the phase it counts from (perf_counter_ns)
        self.iteration = 0
        self.due_ns: int | None = None  # when to act (time-based, once its phase started)
        self.share_reached = False
        self.fired_ns: int | None = None
        self.undo_due_ns: int | None = None
        self.done = False  # nothing more to do (acted and undone, or failed, or missed)
        self.acting = False  # the thread is acting on it now (outside the lock)
        self.early_ns = 0  # its undo was brought forward to the end of the cell's phases by this much
        self.back_ns: int | None = None  # when its undo's action returned (the part serves again)
        # what says how the system heals after it, and what it said when the fault's phase began (its baseline:
        # a system may hold entries to heal of its own already); read in a thread of their own at the phase start
        self.heal_source: Callable[[], dict[str, Any] | None] | None = None
        self.heal_before: dict[str, Any] | None = None
        self.heal_ready = threading.Event()
        self.event: dict[str, Any] | None = None


def bytes_settled(source: Callable[[], dict[str, Any] | None], state: dict[str, Any],
               start: dict[str, float]) -> dict[str, float]:
    """What each server wrote from ``start`` (per part) to the end of the heal: a system that serves its
    counters from a cache (``bytes_still_s``: HDFS's JMX, refreshed once per metrics period) is read again
    until they stood still that long (at most a minute). A part whose counter began again (a process
    started anew) counts from zero."""
    still = float(state.get("bytes_still_s") or 0.0)
    end, since = dict(state.get("bytes") or {}), time.monotonic()
    deadline = since + still + HEAL_BYTES_WAIT_S
    while still > 0 and time.monotonic() < deadline:
        time.sleep(min(HEAL_POLL_S, still / 4))
        try:
            now = dict((source() or {}).get("bytes") or {})
        except Exception:  # noqa: BLE001 - the last reading stands
            break
        if now != end:
            end, since = now, time.monotonic()
        elif time.monotonic() - since >= still:
            break
    return {k: v - start.get(k, 0.0) if v >= start.get(k, 0.0) else v for k, v in end.items()}


class FaultRunner:
    """A cell's fault plan, run on the coordinator while the engine runs the cell."""

    def __init__(self, faults: tuple[Fault, ...] | list[Fault], expected: Callable[[str], tuple[int, int]],
                 study_testbed: str | None, log: Callable[[str], None] | None = None,
                 deadline: float | None = None, on_pending: Callable[[list[dict[str, Any]]], None] | None = None,
                 redundancy: Callable[[], dict[str, int] | None] | None = None) -> None:
        self.planned = [_Planned(f) for f in faults]
        self.expected = expected  # phase → (bytes, ops) the clients will do in all
        self.deadline = deadline  # a phase that a deadline ends: a share of the work is that share of its time
        self.testbed = testbed_dir(study_testbed)
        self.log = log
        self.events: list[dict[str, Any]] = []
        self.on_pending = on_pending  # told the undos in force (the run's watchdog runs them if we die)
        self.redundancy = redundancy  # the target's own word on its redundancy (Driver.redundancy), if no server's
        self.watchers: list[threading.Thread] = []
        self.closed_at: float | None = None  # monotonic time the cell's phases were over
        self.heal_stop = threading.Event()  # the cell failed or was stopped: no heal is waited for
        self.pending: dict[int, dict[str, Any]] = {}
        self.lock = threading.Condition()
        self.closing = False
        self.workers: list[threading.Thread] = []
        self.acted = threading.local()  # each action's thread: what its exec command left running
        self.thread = threading.Thread(target=self._run, name="storeval-faults", daemon=True)
        self.thread.start()

    # -- what the engine tells us (the watch loop's thread; MPI: also client 0's thread) ------------------
    def phase_started(self, phase: str, iteration: int, t_ns: int) -> None:
        with self.lock:
            for p in self.planned:
                if p.fault.phase == phase and p.phase_t0 is None:
                    p.phase_t0, p.iteration = t_ns, iteration
                    if p.fault.action in HEALED:
                        threading.Thread(target=self._heal_baseline, args=(p,), name="storeval-heal-baseline",
                                         daemon=True).start()
                    if p.fault.at_s is not None:
                        p.due_ns = t_ns + int(p.fault.at_s * 1e9)
                    elif self.deadline:
                        p.due_ns = t_ns + int((p.fault.at_share or 0.0) * self.deadline * 1e9)
            self.lock.notify_all()

    def progress(self, phase: str, iteration: int, done_bytes: int, done_ops: int) -> None:
        waiting = [p for p in self.planned if p.fault.phase == phase and p.fault.at_share is not None
                   and p.due_ns is None and p.phase_t0 is not None and p.iteration == iteration and not p.share_reached]
        if not waiting:
            return
        nbytes, nops = self.expected(phase)
        share = done_bytes / nbytes if nbytes else (done_ops / nops if nops else 0.0)
        with self.lock:
            for p in waiting:
                if share >= (p.fault.at_share or 0.0):
                    p.share_reached = True
                    p.due_ns = time.perf_counter_ns()
            self.lock.notify_all()

    def phase_ended(self, phase: str, iteration: int, t_ns: int) -> None:
        with self.lock:
            for p in self.planned:  # a moment that did not come within its phase will not come
                if (p.fault.phase == phase and p.iteration == iteration and p.fired_ns is None and not p.done
                        and not p.acting and p.phase_t0 is not None):
                    if p.due_ns is None or p.due_ns > t_ns:
                        p.done = True
                        self._missed(p, t_ns)
            self.lock.notify_all()

    def phases_over(self) -> None:
        """The cell's last phase has ended: what the plan brings back comes back now (an undo due later is
        brought forward), so that the system can heal while its clients keep the data (Job.hold), and
        ``heal_timeout`` counts from here."""
        now = time.perf_counter_ns()
        with self.lock:
            if self.closed_at is None:
                self.closed_at = time.monotonic()
            for p in self.planned:
                if p.fired_ns is not None and p.undo_due_ns is not None and not p.done and p.undo_due_ns > now:
                    p.early_ns, p.undo_due_ns = p.undo_due_ns - now, now
            self.lock.notify_all()

    def holding(self) -> bool:
        """While an undo is due or under way, or a heal watch goes on (each ends by ``heal_timeout`` after the
        phases): the clients keep the cell's data."""
        with self.lock:
            if any(p.acting or (p.fired_ns is not None and p.undo_due_ns is not None and not p.done)
                   for p in self.planned):
                return True
        return any(w.is_alive() for w in self.watchers)

    @staticmethod
    def holds(faults: tuple[Fault, ...] | list[Fault]) -> bool:
        """Whether a cell with these faults keeps its data after its phases (Job.hold): a kill or stop whose
        system is waited for to heal (a restart too: it heals what it missed)."""
        return any(f.action in HEALED and f.heal_timeout_s > 0 for f in faults)

    # -- the cell's end ------------------------------------------------------------------------------------
    def finish(self, heal: bool = True) -> list[dict[str, Any]]:
        """Undo what is still in force, say which faults never happened, stop the thread; the events. ``heal``
        False (the cell failed or was stopped): the heal watches end now with what they saw."""
        if not heal:
            self.heal_stop.set()
        with self.lock:
            self.closing = True
            self.lock.notify_all()
        self.thread.join()
        for worker in self.workers:  # the actions under way end (an exec command within its timeout)
            worker.join()
        if self.closed_at is None:
            self.closed_at = time.monotonic()
        now = time.perf_counter_ns()
        for p in self.planned:  # what the plan brings back comes back now, so that the system can heal
            if p.done:
                continue
            p.done = True
            if p.fired_ns is None:
                self._missed(p, now)
            elif p.undo_due_ns is not None:
                self._undo(p, early_ns=p.undo_due_ns - now)
        for watcher in self.watchers:  # a kill nothing undoes (a lost node) heals around it, as it would
            watcher.join()
        return self.events

    # -- the thread ----------------------------------------------------------------------------------------
    def _next(self) -> tuple[_Planned | None, bool, float]:
        """The next thing due: (fault, is_undo, seconds until it is due)."""
        best: tuple[_Planned | None, bool, float] = (None, False, 3600.0)
        now = time.perf_counter_ns()
        for p in self.planned:
            if p.done or p.acting:
                continue
            if p.fired_ns is None and p.due_ns is not None:
                wait = (p.due_ns - now) / 1e9
                if wait < best[2]:
                    best = (p, False, wait)
            elif p.fired_ns is not None and p.undo_due_ns is not None:
                wait = (p.undo_due_ns - now) / 1e9
                if wait < best[2]:
                    best = (p, True, wait)
        return best

    def _holder(self, p: _Planned) -> _Planned | None:
        """The fault that holds ``p``'s server (or a node of it, or the server of its node) now: acting on it,
        or in force until its undo. (Under the lock.)"""
        if p.fault.action == "exec":
            return None
        for q in self.planned:
            if q is p or q.fault.action == "exec" or not handles_overlap(p.fault.server, q.fault.server):
                continue
            if q.acting or (q.fired_ns is not None and q.undo_due_ns is not None):
                return q
        return None

    def _run(self) -> None:
        while True:
            refused: tuple[_Planned, _Planned, int] | None = None
            with self.lock:
                while True:
                    if self.closing:
                        return
                    p, is_undo, wait = self._next()
                    if p is not None and wait <= 0:
                        holder = None if is_undo else self._holder(p)
                        if holder is not None:  # one fault at a time per server: this one does not act
                            p.done = True
                            refused = (p, holder, time.perf_counter_ns())
                        else:
                            p.acting = True
                        break
                    self.lock.wait(timeout=min(max(wait, 0.001), 1.0))
            if refused is not None:
                self._missed(refused[0], refused[2], holder=refused[1])
                continue
            # each action in its own thread: one fault's slow action never delays another's moment
            worker = threading.Thread(target=self._do, args=(p, is_undo), name="storeval-fault", daemon=True)
            self.workers.append(worker)
            worker.start()

    def _do(self, p: _Planned, is_undo: bool) -> None:
        try:
            if is_undo:
                self._undo(p, early_ns=p.early_ns)
            else:
                self._fire(p)
        except Exception as e:  # noqa: BLE001 - a fault that cannot act is recorded, the cell goes on
            p.done = True
            self._event(p, "fault-failed", f"{p.fault.label}: {one_line(e)}",
                        {"error": one_line(e), "stage": "undo" if is_undo else "act"})
        finally:
            with self.lock:
                p.acting = False
                self.lock.notify_all()

    # -- acting --------------------------------------------------------------------------------------------
    def _act(self, fault: Fault, action: str) -> str:
        """Do ``action`` now; what was done, in a few words (what an exec command left running, and storeval
        killed, goes to this thread's ``self.acted.left``)."""
        if fault.action == "exec":
            command = fault.run if action == "exec" else fault.undo
            said, self.acted.left = _exec(command or "", fault.timeout_s)
            return said
        from .testbed.faults import act

        return act(self.testbed, fault.server or "", action)

    def _acted(self, fault: Fault, action: str) -> tuple[str, list[str]]:
        self.acted.left = []
        said = self._act(fault, action)
        return said, self.acted.left

    def _fire(self, p: _Planned) -> None:
        f = p.fault
        t_ns, wall = time.perf_counter_ns(), time.time()
        try:
            said, left = self._acted(f, f.action)
        except Exception as e:  # noqa: BLE001
            p.done = True
            self._event(p, "fault-failed", f"{f.label}: {one_line(e)}",
                        {"error": one_line(e), "stage": "act", "start_ns": t_ns, "wall_start": _wall(wall)})
            return
        p.fired_ns = t_ns
        p.event = self._event(p, "fault", f"{f.label}: {said}",
                              {"start_ns": t_ns, "wall_start": _wall(wall), "done": said, "end_ns": None,
                               "wall_end": None, **({"left_running": left} if left else {})})
        if f.action == "restart":
            p.back_ns = time.perf_counter_ns()  # killed and started again: back when the action returned
        if f.action in HEALED:
            watcher = threading.Thread(target=self._watch_healing, args=(p,), name="storeval-healing", daemon=True)
            self.watchers.append(watcher)
            watcher.start()
        undo = UNDO.get(f.action) or ("undo" if f.action == "exec" and f.undo else None)
        if f.for_s and undo:
            p.undo_due_ns = t_ns + int(f.for_s * 1e9)
            self._pending(p, True)
        else:
            p.done = True

    def _undo(self, p: _Planned, early_ns: int = 0) -> None:
        f = p.fault
        action = UNDO.get(f.action, "undo")
        t_ns, wall = time.perf_counter_ns(), time.time()
        p.undo_due_ns = None
        p.done = True
        try:
            said, left = self._acted(f, action)
            p.back_ns = time.perf_counter_ns()
            self._pending(p, False)
        except Exception as e:  # noqa: BLE001 - said in the event: the server may still be down
            said, error, left = "", one_line(e), []
        else:
            error = None
        detail = p.event["detail"] if p.event else {}
        detail.update(end_ns=t_ns, wall_end=_wall(wall), undone=said, t_end_s=self._rel(p, t_ns))
        if left:
            detail["undo_left_running"] = left
        if early_ns > 0:
            detail["undone_early_s"] = early_ns / 1e9
        if p.event is not None:
            p.event["message"] += f"; {action} after {format_duration(round((t_ns - (p.fired_ns or t_ns)) / 1e9, 3))}" \
                + (f" (at the cell's end, {early_ns / 1e9:.1f} s before planned)" if early_ns > 0 else "") \
                + (f": {said}" if said else "")
        if error is not None:
            self._event(p, "fault-failed", f"{action} after {f.label} failed: {error} (the server may still be "
                                           f"{'stopped' if f.action == 'stop' else 'down'})",
                        {"error": error, "stage": "undo"})

    def _heal_baseline(self, p: _Planned) -> None:
        """At the fault's phase start: what will say how the system heals, and what it says before the fault (its
        first reading)."""
        try:
            p.heal_source, p.heal_before = self._heal_source(p.fault)
        except Exception:  # noqa: BLE001 - no source: nothing is watched
            p.heal_source, p.heal_before = None, None
        finally:
            p.heal_ready.set()

    def _heal_source(self, f: Fault) -> tuple[Callable[[], dict[str, Any] | None] | None, dict[str, Any] | None]:
        """What says how the system repairs itself after ``f``, and its first reading: the testbed server the
        fault struck (``Server.healing``: GlusterFS's heal info, HDFS's namenode, Ceph's placement groups), else
        the target's own word on its redundancy (``Driver.redundancy``); (None, None) when neither keeps
        redundancy to repair."""
        if f.server:
            from .testbed.faults import healing

            server = f.server
            try:
                first = healing(self.testbed, server)
            except StorevalError:
                first = None  # no testbed server behind the handle: the target's own word, if it has one
            if first is not None:
                return (lambda: healing(self.testbed, server)), first
        if self.redundancy is None:
            return None, None
        redundancy = self.redundancy

        def from_target() -> dict[str, Any] | None:
            state = redundancy()
            if state is None:
                return None
            return {"pending": sum(int(state.get(k, 0)) for k in ("under", "missing", "pending")), "down": [],
                    "unit": "blocks", "bytes": None, "parts": dict(state),
                    "source": "the target's own report (Driver.redundancy)"}
        first = from_target()
        return (from_target, first) if first is not None else (None, None)

    def _watch_healing(self, p: _Planned) -> None:
        """Once a second from the fault on: what the system says of its own repair (:meth:`_heal_source`), until
        it is whole again having been short — no more pending than when the fault's phase began (a system may
        hold entries of its own: a file a client left open, an older heal), nothing down — or until
        ``heal_timeout`` after the cell's phases. Times are from the fault's moment; the heal itself is timed from
        when the struck part was back or, when nothing brings it back (HDFS re-replicates around a dead datanode),
        from when the system first said it was short. The part is back at the first reading that says nothing is
        down, or when the undo's action returned, whichever came first. The bytes the servers moved meanwhile come
        from the same readings (what they count: ``source``). The figures go into the fault's event."""
        f, t0 = p.fault, p.fired_ns or time.perf_counter_ns()
        p.heal_ready.wait(HEAL_BASELINE_WAIT_S)  # read at the phase's start: there before a fault due a moment later
        source = p.heal_source
        if source is None:
            return
        before = int((p.heal_before or {}).get("pending") or 0)
        seen: dict[str, Any] = {"source": None, "unit": None,
                                "pending_before": None if p.heal_before is None else before,
                                "detected_after_s": None, "back_after_s": None, "healed_after_s": None, "heal_s": None,
                                "max_pending": 0, "pending_at_end": None, "down_at_end": None, "bytes_moved": None,
                                "samples": [], "errors": 0, "last_error": None}
        start_bytes: dict[str, float] | None = None
        state: dict[str, Any] | None = None
        was_down, serving_again = False, None
        while True:
            try:
                state = source()
            except Exception as e:  # noqa: BLE001 - a reading that failed is counted, the watch goes on
                seen["errors"] += 1
                seen["last_error"] = one_line(e)
                state = None
            now = time.perf_counter_ns()
            t = round((now - t0) / 1e9, 3)  # one figure for the sample and the times it marks (compared as equal)
            if state is not None:
                pending, down = int(state.get("pending") or 0), list(state.get("down") or [])
                seen.update(source=state.get("source"), unit=state.get("unit"), pending_at_end=pending,
                            down_at_end=down, parts=state.get("parts"))
                seen["max_pending"] = max(seen["max_pending"], pending)
                if len(seen["samples"]) < MAX_HEAL_SAMPLES:
                    seen["samples"].append([t, pending, len(down)])
                short = pending > before or bool(down)
                if short and seen["detected_after_s"] is None:
                    seen["detected_after_s"] = t
                if down:
                    was_down = True
                elif was_down and serving_again is None:
                    serving_again = t  # the system's own word that the struck part serves again
                if start_bytes is None and state.get("bytes") is not None:
                    start_bytes = dict(state["bytes"])  # the first reading: the moment of the fault
                if not short and seen["detected_after_s"] is not None:
                    seen["healed_after_s"] = t
                    if start_bytes is not None:
                        seen["bytes_by_part"] = bytes_settled(source, state, start_bytes)
                        seen["bytes_moved"] = sum(seen["bytes_by_part"].values()) if seen["bytes_by_part"] else None
                    break
            if self.closed_at is not None and time.monotonic() - self.closed_at >= f.heal_timeout_s:
                break
            if self.heal_stop.wait(HEAL_POLL_S):
                seen["stopped"] = "the cell did not end ok: storeval stopped watching"
                break
        if p.event is None:
            return
        back = self._back_ns(p)
        returns = [s for s in (serving_again, None if back is None else max(0.0, (back - t0) / 1e9)) if s is not None]
        seen["back_after_s"] = min(returns) if returns else None
        healed, detected = seen["healed_after_s"], seen["detected_after_s"]
        if healed is not None:  # from the part's return; a heal done before it came back, from the first word
            came_back = seen["back_after_s"] is not None and seen["back_after_s"] <= healed
            seen["heal_s"] = max(0.0, healed - (seen["back_after_s"] if came_back else detected))
        seen["heal_timeout_s"] = f.heal_timeout_s
        p.event["detail"]["healing"] = seen
        p.event["message"] += f"; {heal_said(seen)}"

    def _back_ns(self, p: _Planned) -> int | None:
        """When the fault's undo brought the part back (its action returned: the testbed said it serves again),
        waiting for an undo under way (at most the time a start may take); None when nothing brought it back."""
        deadline = time.monotonic() + UNDO_WAIT_S
        while time.monotonic() < deadline:
            with self.lock:
                under_way = p.undo_due_ns is not None or (p.acting and p.fired_ns is not None)
            if p.back_ns is not None or not under_way:
                return p.back_ns
            time.sleep(0.05)
        return None

    def _pending(self, p: _Planned, in_force: bool) -> None:
        """Keep the watchdog's list of undos in force up to date (a command line each: it runs them)."""
        f = p.fault
        with self.lock:
            if in_force:
                if f.action == "exec":
                    argv = ["/bin/sh", "-c", f.undo or "true"]
                else:
                    argv = [sys.executable, "-m", "storeval", "testbed", "fault", f.server or "", UNDO[f.action],
                            "--dir", self.testbed]
                self.pending[id(p)] = {"what": f"{UNDO.get(f.action, 'undo')} after {f.label}", "argv": argv,
                                       "timeout": f.timeout_s}
            else:
                self.pending.pop(id(p), None)
            pending = list(self.pending.values())
        if self.on_pending is not None:
            try:
                self.on_pending(pending)
            except Exception:  # noqa: BLE001 - the watchdog's copy is a safety net, not the fault itself
                pass

    def _missed(self, p: _Planned, t_ns: int, holder: _Planned | None = None) -> None:
        f = p.fault
        detail: dict[str, Any] = {}
        if holder is not None:
            why = (f"{holder.fault.where} ({holder.fault.label}) held {holder.fault.server} at its moment, "
                   f"{self._rel(p, t_ns) or 0.0:.2f} s into {f.phase} (one fault at a time per server)")
            detail = {"held_by": holder.fault.where, "t_start_s": self._rel(p, t_ns)}
        elif p.phase_t0 is None:
            why = f"the phase {f.phase} did not start"
        else:
            why = f"the phase {f.phase} ended after {(t_ns - p.phase_t0) / 1e9:.2f} s, before the fault's moment"
        self._event(p, "fault-missed", f"{f.label} did not happen: {why}", detail)

    def _rel(self, p: _Planned, t_ns: int) -> float | None:
        return None if p.phase_t0 is None else (t_ns - p.phase_t0) / 1e9

    def _event(self, p: _Planned, kind: str, message: str, detail: dict[str, Any]) -> dict[str, Any]:
        f = p.fault
        base = {"where": f.where, "action": f.action, "server": f.server, "expect": f.expect,
                "run": redact_text(f.run) if f.run else None, "planned": f.when.replace(" of", "").replace(" into", ""),
                "for_s": f.for_s, "phase_start_ns": p.phase_t0, "iteration": p.iteration}
        if "start_ns" in detail and detail["start_ns"] is not None:
            detail["t_start_s"] = self._rel(p, detail["start_ns"])
        event = {"kind": kind, "t": datetime.now(timezone.utc).replace(tzinfo=None), "rank": None, "phase": f.phase,
                 "message": redact_text(message), "detail": {**base, **detail}}
        self.events.append(event)
        if self.log is not None:
            self.log(event["message"])
        return event


def heal_said(h: dict[str, Any]) -> str:
    """What a fault's heal watch saw, in a few words (its event's message)."""
    unit = h.get("unit") or "items"
    if h.get("healed_after_s") is not None:
        back = (f", {h['heal_s']:.1f} s after it was back" if h.get("back_after_s") is not None
                else f", {h['heal_s']:.1f} s after the system first said so")
        moved = f"; it moved {format_size(h['bytes_moved'])} to heal" if h.get("bytes_moved") is not None else ""
        was = f" ({h['pending_before']:,} before the fault)" if h.get("pending_before") else ""
        return (f"the system said {heal_count(h['max_pending'], unit)} to heal{was} {h['detected_after_s']:.1f} s "
                f"after the fault, healed {h['healed_after_s']:.1f} s after it{back}{moved}")
    if h.get("detected_after_s") is not None:
        down = h.get("down_at_end") or []
        return (f"the system said {unit} to heal {h['detected_after_s']:.1f} s after the fault; "
                f"{h.get('pending_at_end') or 0:,} still pending" + (f" and {', '.join(down)} down" if down else "")
                + " when storeval stopped watching ("
                + (h["stopped"] if h.get("stopped") else f"heal_timeout {format_duration(h.get('heal_timeout_s') or 0)} "
                   "after the cell's phases") + ")")
    if h.get("source") is None and h.get("errors"):
        return f"what the system has to heal could not be read ({h.get('last_error')})"
    return ("the system said nothing was short of redundancy while storeval watched (until "
            f"{format_duration(h.get('heal_timeout_s') or 0)} after the cell's phases: heal_timeout)")


def _exec(command: str, timeout: float) -> tuple[str, list[str]]:
    """Run a user's fault command (``/bin/sh -c``, in a process group of its own, bounded by ``timeout``); what
    it did in a few words, or raise with why it failed. It is judged by the shell's exit status; what it left
    running in its group (``sleep 20 &``) is killed as it ends and named: a fault's effect is the state a
    command leaves (a daemon stopped, a parameter set), never a process that would run on into other cells."""
    try:
        done = run_bounded(["/bin/sh", "-c", command], timeout)
    except OSError as e:
        raise StorevalError(f"the command could not be started: {e.strerror or e}") from None
    last = redact_text(done.last_line(OUTPUT_CHARS))
    killed = _left(done.left)
    if done.timed_out:
        stuck = "" if done.code is not None else " (it did not end even then: it may be in uninterruptible sleep)"
        raise StorevalError(f"the command did not end within {format_duration(timeout)}: storeval killed it"
                            + (f" and {killed}" if killed else "") + stuck
                            + (f"; its last output: {last}" if last else ""))
    if done.code:
        why = f"was killed by {_signal_name(-done.code)}" if done.code < 0 else f"exited with {done.code}"
        raise StorevalError(f"the command {why}" + (f": {last}" if last else "")
                            + (f" (storeval killed {killed})" if killed else ""))
    said = f"ran {redact_text(command)!r}" + (f" ({last})" if last else "") \
        + (f"; storeval killed {killed} it left running" if killed else "")
    return said, [f"{redact_text(name)} (pid {pid})" for pid, name in done.left]


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _left(left: list[tuple[int, str]]) -> str:
    """``2 processes of its group (sleep pid 12, dd pid 13)``; empty when none."""
    if not left:
        return ""
    shown = ", ".join(f"{redact_text(name)} pid {pid}" for pid, name in left[:5])
    more = f" and {len(left) - 5} more" if len(left) > 5 else ""
    return f"{len(left)} process{'es' if len(left) > 1 else ''} of its group ({shown}{more})"
