"""Fault plans: the timed actions a study asks for during a phase (a server stopped, killed, restarted, or any
command a facility uses to turn something off), as validated data.

A plan item says *when* (``at``: seconds after the phase's start, or a share of its work, ``30%``), *in which
phase* (of the workload's phases), *what* (``action``), *to what* (``server``: a testbed fault handle such as
``hdfs.datanode1``; or ``run``: a command), and *for how long* (``for``: the undo — ``cont`` after ``stop``,
``start`` after ``kill``, the ``undo`` command after ``exec``). This module only reads and checks what can be
checked without the servers; :mod:`storeval.faults` resolves the servers and runs the plan from the
coordinator.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InputError
from ..units import UnitError, format_share, parse_duration

ACTIONS = ("stop", "cont", "kill", "start", "restart", "exec")
UNDO = {"stop": "cont", "kill": "start"}  # what ``for`` undoes a server action with
KEYS = ("at", "phase", "action", "server", "for", "restart_after", "run", "undo", "target", "workload", "timeout",
        "expect", "wait_recovery")
EXPECT = ("ok", "failed")  # what the phase should do under the fault (seed 003's matrix states it)
DEFAULT_EXEC_TIMEOUT = 60.0


@dataclass(frozen=True)
class Fault:
    """One action of a plan, validated. ``at_s`` or ``at_share`` says when, relative to ``phase``'s start."""

    where: str  # the YAML path that names it in messages: faults[2], workloads.bw.faults[0]
    action: str
    phase: str
    at_s: float | None = None  # seconds after the phase's start
    at_share: float | None = None  # share (0 … <1) of the phase's expected work
    server: str | None = None  # a testbed fault handle (server actions; a label for exec)
    for_s: float | None = None  # undo after this long
    run: str | None = None  # exec: the command (run by /bin/sh)
    undo: str | None = None  # exec: the command that undoes it
    target: str | None = None  # only in cells of this target
    workload: str | None = None  # only in cells of this workload
    timeout_s: float = DEFAULT_EXEC_TIMEOUT  # exec: how long a command may take
    expect: str | None = None  # what the struck phase should do: ok or failed (shown beside what it did)
    wait_recovery_s: float = 0.0  # after the cell's phases: how long to wait for the target's redundancy

    @property
    def when(self) -> str:
        return f"{format_share(self.at_share)} of" if self.at_share is not None else f"{format_duration(self.at_s or 0.0)} into"

    @property
    def subject(self) -> str:
        return self.server or (self.run or "")

    @property
    def label(self) -> str:
        """``kill minio-ec.node2 at 30% of write for 2m``."""
        undo = f" for {format_duration(self.for_s)}" if self.for_s else ""
        return f"{self.action} {self.subject} at {self.when} {self.phase}{undo}"

    def state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Fault:
        return cls(**d)


def format_duration(seconds: float) -> str:
    """``10`` → ``10s``, ``120`` → ``2m``, ``3600`` → ``1h``, ``0.5`` → ``0.5s``: as a study would write it."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def _duration(value: Any, where: str, example: str) -> float:
    try:
        seconds = parse_duration(value)
    except (UnitError, TypeError, ValueError) as e:
        raise InputError(f"{where}: {_show(value)} {e} (e.g. {example})") from None
    if not math.isfinite(seconds) or seconds < 0:
        raise InputError(f"{where}: {_show(value)} is not a duration of 0 s or more (e.g. {example})")
    return seconds


def _at(value: Any, where: str) -> tuple[float | None, float | None]:
    if isinstance(value, str) and value.strip().endswith("%"):
        text = value.strip()[:-1].strip()
        try:
            share = float(text) / 100
        except ValueError:
            raise InputError(f"{where}: {_show(value)} is not a share of the phase's work (e.g. 30%)") from None
        if not 0 <= share < 1:
            raise InputError(f"{where}: {_show(value)} is not inside the phase (give 0% up to, not including, 100%)")
        return None, share
    if value is None:
        raise InputError(f"{where}: is missing (when the action happens: 10s after the phase starts, or 30% of "
                         "its work)")
    return _duration(value, where, "10s, or 30% of the phase's work"), None


def parse_fault(raw: Any, where: str, phases: dict[str, tuple[str, ...]], bounds: dict[str, dict[str, float]],
                workload: str | None = None) -> Fault:
    """One plan item. ``phases`` maps each workload the item may apply to onto the phases its cells run;
    ``bounds`` maps ``workload`` → ``phase`` → the seconds after which that phase surely ends (its deadline),
    where the parameters say so. Raises InputError (one line, naming ``where``)."""
    if not isinstance(raw, dict):
        raise InputError(f"{where}: {_show(raw)} is not a fault (write {{at: 10s, phase: read, action: stop, "
                         "server: NAME, for: 10s}})")
    for key in raw:
        if key not in KEYS:
            raise InputError(f"{where}.{key}: unknown key of a fault (one of {', '.join(KEYS)})")
    action = raw.get("action")
    if action not in ACTIONS:
        raise InputError(f"{where}.action: {_show(action)} is not an action (one of {', '.join(ACTIONS)})")
    at_s, at_share = _at(raw.get("at"), f"{where}.at")
    workload = raw.get("workload", workload)
    if workload is not None:
        if workload not in phases:
            raise InputError(f"{where}.workload: {_show(workload)} is not a selected workload (one of "
                             f"{', '.join(sorted(phases))})")
        scope = {workload: phases[workload]}
    else:
        scope = phases
    phase = raw.get("phase")
    possible = sorted({ph for phs in scope.values() for ph in phs})
    if phase is None:
        if len(possible) != 1:
            raise InputError(f"{where}.phase: is missing (the phase whose start 'at' counts from: one of "
                             f"{', '.join(possible)})")
        phase = possible[0]
    if phase not in possible:
        raise InputError(f"{where}.phase: {_show(phase)} is not a phase the workload runs (one of "
                         f"{', '.join(possible)})")
    if at_s is not None:
        for name, phs in scope.items():
            limit = bounds.get(name, {}).get(phase)
            if phase in phs and limit is not None and at_s >= limit:
                raise InputError(f"{where}.at: {format_duration(at_s)} is beyond the phase {phase} of {name}, whose "
                                 f"deadline ends it at {format_duration(limit)} (give an earlier at, or a share "
                                 "such as 30%)")
    server, run, undo = raw.get("server"), raw.get("run"), raw.get("undo")
    if action == "exec":
        if not isinstance(run, str) or not run.strip():
            raise InputError(f"{where}.run: an exec fault needs the command to run (run: \"lctl set_param ...\")")
        if undo is not None and (not isinstance(undo, str) or not undo.strip()):
            raise InputError(f"{where}.undo: {_show(undo)} is not a command")
    else:
        if not isinstance(server, str) or not server.strip():
            raise InputError(f"{where}.server: a {action} fault needs the server it acts on (a testbed fault "
                             "handle such as hdfs.datanode1; `storeval testbed faults` lists them)")
        for key in ("run", "undo"):
            if raw.get(key) is not None:
                raise InputError(f"{where}.{key}: only an exec fault runs a command (this one is {action})")
    if server is not None and not isinstance(server, str):
        raise InputError(f"{where}.server: {_show(server)} is not a name")
    for_raw = raw.get("for")
    if raw.get("restart_after") is not None:
        if action != "kill":
            raise InputError(f"{where}.restart_after: only a kill is restarted after a while (use for: with "
                             f"{action})")
        if for_raw is not None:
            raise InputError(f"{where}: give for or restart_after, not both")
        for_raw = raw["restart_after"]
    for_s = None
    if for_raw is not None:
        for_s = _duration(for_raw, f"{where}.for", "10s")
        if for_s <= 0:
            raise InputError(f"{where}.for: must be more than 0 s (e.g. 10s)")
        if action == "exec" and undo is None:
            raise InputError(f"{where}.for: an exec fault is undone after a while only with an undo command "
                             "(add undo: \"...\")")
        if action in ("cont", "start", "restart"):
            raise InputError(f"{where}.for: a {action} is not undone (for: goes with stop, kill or exec)")
    timeout = DEFAULT_EXEC_TIMEOUT
    if raw.get("timeout") is not None:
        if action != "exec":
            raise InputError(f"{where}.timeout: only an exec fault's command has a time limit")
        timeout = _duration(raw["timeout"], f"{where}.timeout", "60s")
        if timeout <= 0:
            raise InputError(f"{where}.timeout: must be more than 0 s (e.g. 60s)")
    wait = 0.0
    if raw.get("wait_recovery") is not None:
        wait = _duration(raw["wait_recovery"], f"{where}.wait_recovery", "5m")
    expect = raw.get("expect")
    if expect is not None and expect not in EXPECT:
        raise InputError(f"{where}.expect: {_show(expect)} is not an outcome (one of {', '.join(EXPECT)})")
    target = raw.get("target")
    if target is not None and not isinstance(target, str):
        raise InputError(f"{where}.target: {_show(target)} is not a target name")
    return Fault(where=where, action=action, phase=phase, at_s=at_s, at_share=at_share,
                 server=server.strip() if isinstance(server, str) else None, for_s=for_s,
                 run=run if action == "exec" else None, undo=undo if action == "exec" else None, target=target,
                 workload=workload, timeout_s=timeout, expect=expect, wait_recovery_s=wait)


def parse_plan(raw: Any, where: str, phases: dict[str, tuple[str, ...]], bounds: dict[str, dict[str, float]],
               workload: str | None = None) -> list[Fault]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError(f"{where}: {_show(raw)} is not a list of faults (write {where}: [{{at: 10s, action: "
                         "stop, server: NAME, for: 10s}}])")
    return [parse_fault(item, f"{where}[{i}]", phases, bounds, workload) for i, item in enumerate(raw)]


def handles_overlap(a: str | None, b: str | None) -> bool:
    """Whether two fault handles reach a common process: the same handle, or a whole server and one of its
    nodes (``minio-ec`` and ``minio-ec.node2``)."""
    if not a or not b:
        return False
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def _may_share_a_cell(a: Fault, b: Fault) -> bool:
    return a.phase == b.phase and (a.target is None or b.target is None or a.target == b.target) and \
        (a.workload is None or b.workload is None or a.workload == b.workload)


def _window(f: Fault) -> tuple[float, float]:
    """[moment, moment + for] in seconds of the phase: what it does, until it is undone (a fault without
    ``for`` is an instant; the next fault on its server acts on the state it left)."""
    at = f.at_s or 0.0
    return at, at + (f.for_s or 0.0)


def check_overlaps(faults: list[Fault]) -> None:
    """Refuse (one line naming both faults) two server faults of one phase whose times in seconds overlap on
    one server or node: the second would act on a server the first holds, and the timeline would show one
    fault's effect as the other's. Faults placed at a share of the work, or in different phases, cannot be
    placed in advance: :class:`storeval.faults.FaultRunner` refuses them as they come (``fault-missed``)."""
    timed = [f for f in faults if f.action != "exec" and f.at_s is not None]
    seen: dict[str, Fault] = {}
    for f in timed:
        seen.setdefault(f.where, f)
    timed = sorted(seen.values(), key=lambda f: (_window(f), f.where))
    for i, a in enumerate(timed):
        a0, a1 = _window(a)
        for b in timed[i + 1:]:
            b0, b1 = _window(b)
            if b0 > a1:
                break
            if not (_may_share_a_cell(a, b) and handles_overlap(a.server, b.server)):
                continue
            where = "the same server" if a.server == b.server else " and its part ".join(
                sorted((a.server or "", b.server or ""), key=len))
            if a.for_s:
                end = f"{format_duration(round(a1, 3))} into {a.phase}"
                how = f"{a.where} holds it until {end}; one fault at a time per server (move {b.where}.at past " \
                      f"{end}, or shorten {a.where}.for)"
            else:
                how = f"both act at {format_duration(a0)} into {a.phase}; one fault at a time per server (give " \
                      f"{b.where}.at another moment)"
            raise InputError(f"{b.where}: {b.label} overlaps {a.where} ({a.label}) on {where}: {how}")
