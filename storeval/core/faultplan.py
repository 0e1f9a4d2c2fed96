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
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from ..errors import InputError
from ..units import UnitError, format_share, parse_duration, plural
from ..validation import FieldError, mapping_only, pydantic_error, show

ACTIONS = ("stop", "cont", "kill", "start", "restart", "exec")
UNDO = {"stop": "cont", "kill": "start"}  # what ``for`` undoes a server action with
HEALED = ("kill", "stop", "restart")  # actions after which the system's own repair is watched (heal_timeout)
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
    heal_timeout_s: float = 0.0  # after the cell's phases: how long to wait for the system to heal itself

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


def heal_count(n: int, unit: str | None) -> str:
    """``1 entry``, ``9 entries``, ``1 placement group``: a count in what a system heals (Server.healing's unit)."""
    unit = unit or "items"
    one = {"entries": "entry"}.get(unit, unit[:-1] if unit.endswith("s") else unit)
    return plural(int(n), one, unit)


def format_duration(seconds: float) -> str:
    """``10`` → ``10s``, ``120`` → ``2m``, ``3600`` → ``1h``, ``0.5`` → ``0.5s``: as a study would write it."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _duration(example: str) -> BeforeValidator:
    def check(value: Any) -> float | None:
        if value is None:
            return None
        try:
            seconds = parse_duration(value)
        except (UnitError, TypeError, ValueError) as e:
            raise ValueError(f"{e} (e.g. {example})") from None
        if not math.isfinite(seconds) or seconds < 0:
            raise ValueError(f"is not a duration of 0 s or more (e.g. {example})")
        return seconds
    return BeforeValidator(check)


def _at(value: Any) -> tuple[float | None, float | None] | None:
    """(seconds, None) or (None, share) of the phase's work; None: not given."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            share = float(value.strip()[:-1].strip()) / 100
        except ValueError:
            raise ValueError("is not a share of the phase's work (e.g. 30%)") from None
        if not 0 <= share < 1:
            raise ValueError("is not inside the phase (give 0% up to, not including, 100%)")
        return None, share
    return _duration("10s, or 30% of the phase's work").func(value), None


def _one_of(choices: tuple[str, ...], what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if value is not None and value not in choices:
            raise ValueError(f"is not {what} (one of {', '.join(choices)})")
        return value
    return BeforeValidator(check)


def _text(what: str) -> BeforeValidator:
    def check(value: Any) -> Any:
        if value is not None and not isinstance(value, str):
            raise ValueError(f"is not {what}")
        return value
    return BeforeValidator(check)


class FaultEntry(BaseModel):
    """One item of a fault plan as a study writes it. :meth:`fault` checks it against the phases the study's
    workloads run (and the deadlines that end them) and makes the :class:`Fault`."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    action: Annotated[str | None, _one_of(ACTIONS, "an action")] = None
    at: Annotated[tuple[float | None, float | None] | None, BeforeValidator(_at)] = None
    phase: Annotated[str | None, _text("a phase")] = None
    server: Annotated[str | None, _text("a name")] = None  # a testbed fault handle (a label for exec)
    for_: Annotated[float | None, _duration("10s")] = Field(None, alias="for")
    restart_after: Annotated[float | None, _duration("10s")] = None
    run: Any = None  # exec: the command (run by /bin/sh)
    undo: Annotated[str | None, _text("a command")] = None
    target: Annotated[str | None, _text("a target name")] = None
    workload: Any = None
    timeout: Annotated[float | None, _duration("60s")] = None
    expect: Annotated[str | None, _one_of(EXPECT, "an outcome")] = None
    heal_timeout: Annotated[float | None, _duration("5m")] = None
    wait_recovery: Annotated[float | None, _duration("5m")] = None  # heal_timeout's old name

    _mapping = mapping_only("is not a fault (write {at: 10s, phase: read, action: stop, server: NAME, for: 10s})")

    @model_validator(mode="after")
    def _consistent(self) -> FaultEntry:
        """The rules between keys that need nothing but the item."""
        action = self.action
        if action is None:
            raise FieldError(f"is not an action (one of {', '.join(ACTIONS)})", "action", value=None)
        if self.at is None:
            raise FieldError("is missing (when the action happens: 10s after the phase starts, or 30% of its work)",
                             "at")
        if action == "exec":
            if not isinstance(self.run, str) or not self.run.strip():
                raise FieldError("an exec fault needs the command to run (run: \"lctl set_param ...\")", "run")
            if self.undo is not None and not self.undo.strip():
                raise FieldError("is not a command", "undo", value=self.undo)
        else:
            if not self.server or not self.server.strip():
                raise FieldError(f"a {action} fault needs the server it acts on (a testbed fault handle such as "
                                 "hdfs.datanode1; `storeval testbed faults` lists them)", "server")
            for key in ("run", "undo"):
                if getattr(self, key) is not None:
                    raise FieldError(f"only an exec fault runs a command (this one is {action})", key)
        if self.restart_after is not None:
            if action != "kill":
                raise FieldError(f"only a kill is restarted after a while (use for: with {action})", "restart_after")
            if self.for_ is not None:
                raise ValueError("give for or restart_after, not both")
        undo_after = self.for_ if self.for_ is not None else self.restart_after
        if undo_after is not None:
            if undo_after <= 0:
                raise FieldError("must be more than 0 s (e.g. 10s)", "for")
            if action == "exec" and self.undo is None:
                raise FieldError("an exec fault is undone after a while only with an undo command (add undo: "
                                 "\"...\")", "for")
            if action in ("cont", "start", "restart"):
                raise FieldError(f"a {action} is not undone (for: goes with stop, kill or exec)", "for")
        if self.heal_timeout is not None and self.wait_recovery is not None:
            raise ValueError("give heal_timeout or wait_recovery (its old name), not both")
        for key in ("heal_timeout", "wait_recovery"):
            if getattr(self, key) is not None and action not in HEALED:
                raise FieldError(f"only a {', '.join(HEALED[:-1])} or {HEALED[-1]} leaves the system something to heal "
                                 f"(this one is {action})", key)
        if self.timeout is not None:
            if action != "exec":
                raise FieldError("only an exec fault's command has a time limit", "timeout")
            if self.timeout <= 0:
                raise FieldError("must be more than 0 s (e.g. 60s)", "timeout")
        return self

    def fault(self, where: str, phases: dict[str, tuple[str, ...]], bounds: dict[str, dict[str, float]],
              workload: str | None = None) -> Fault:
        """The item in the study: ``phases`` maps each workload it may apply to onto the phases its cells run;
        ``bounds`` maps workload → phase → the seconds after which that phase surely ends (its deadline)."""
        workload = self.workload if self.workload is not None else workload
        if workload is not None:
            if workload not in phases:
                raise InputError(f"{where}.workload: {show(workload)} is not a selected workload (one of "
                                 f"{', '.join(sorted(phases))})")
            scope = {workload: phases[workload]}
        else:
            scope = phases
        possible = sorted({ph for phs in scope.values() for ph in phs})
        phase = self.phase
        if phase is None:
            if len(possible) != 1:
                raise InputError(f"{where}.phase: is missing (the phase whose start 'at' counts from: one of "
                                 f"{', '.join(possible)})")
            phase = possible[0]
        if phase not in possible:
            raise InputError(f"{where}.phase: {show(phase)} is not a phase the workload runs (one of "
                             f"{', '.join(possible)})")
        at_s, at_share = self.at or (None, None)
        if at_s is not None:
            for name, phs in scope.items():
                limit = bounds.get(name, {}).get(phase)
                if phase in phs and limit is not None and at_s >= limit:
                    raise InputError(f"{where}.at: {format_duration(at_s)} is beyond the phase {phase} of {name}, "
                                     f"whose deadline ends it at {format_duration(limit)} (give an earlier at, or a "
                                     "share such as 30%)")
        exec_ = self.action == "exec"
        return Fault(where=where, action=self.action or "", phase=phase, at_s=at_s, at_share=at_share,
                     server=self.server.strip() if self.server else None,
                     for_s=self.for_ if self.for_ is not None else self.restart_after,
                     run=self.run if exec_ else None, undo=self.undo if exec_ else None, target=self.target,
                     workload=workload, timeout_s=self.timeout if self.timeout is not None else DEFAULT_EXEC_TIMEOUT,
                     expect=self.expect,
                     heal_timeout_s=(self.heal_timeout if self.heal_timeout is not None else self.wait_recovery) or 0.0)


def parse_plan(raw: Any, where: str, phases: dict[str, tuple[str, ...]], bounds: dict[str, dict[str, float]],
               workload: str | None = None) -> list[Fault]:
    """A study's (or a workload's) ``faults:`` list, each item validated and placed; one line at the first
    mistake."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InputError(f"{where}: {show(raw)} is not a list of faults (write {where}: [{{at: 10s, action: "
                         "stop, server: NAME, for: 10s}])")
    try:
        entries = TypeAdapter(list[FaultEntry]).validate_python(raw)
    except ValidationError as e:
        raise pydantic_error(e, where, list[FaultEntry]) from None
    return [entry.fault(f"{where}[{i}]", phases, bounds, workload) for i, entry in enumerate(entries)]


KEYS = tuple(f.alias or name for name, f in FaultEntry.model_fields.items())


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
