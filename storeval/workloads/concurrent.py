"""Several workloads at once in one cell: skim readers while a writer runs, a metadata storm beside bulk reads.

A ``concurrent`` workload is made of named parts, each a workload of its own (any kind, its own parameters) run by
its own clients::

    concurrent:
      parts:
        skim:   {clients: 4, skim: {...}}
        writer: {clients: 1, background: true, bandwidth: {phases: [write], rate: 50MiB/s, file_size: 8GiB}}

The cell runs the sum of the parts' clients (the study's client counts do not apply), ranks in the order the parts
are written. Each part synchronises apart (``Comm.split``: its barriers, its stonewall's all-reduce, its cache
drops are its clients' alone) and works in a directory of its own under the cell's.

Steps: the cell's phases are the foreground parts' phases, in step — step k runs the k-th phase of every foreground
part at once (named by those phases, ``read`` or ``read+file-stat``). A background part runs its one phase from the
start of every step until every foreground client has finished the step: each foreground client arrives at a
non-blocking barrier (``Comm.ibarrier``) when it is done, the background clients arrive as they start, and their
loops look at it each time they fold (``core/stop.py`` UNTIL: within 50 ms), ending the phase as a deadline would.
A background phase that runs out of work first says so (``background-short``).

Reports: every client's record carries its part as its client group, so each part is reported on its own (its
aggregate over its own span, per-client rates, fairness, the part's own workload figures: a paced writer's share of
its rate held) and all parts together (the phase's row ``all``).
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..core.oplog import PhaseRecorder
from ..core.stop import UNTIL, PhaseEnded
from ..drivers.base import Capabilities, Driver, join
from ..redact import visible
from . import make_workload, workload_class
from .base import Best, ClientContext, Figure, Need, Needs, Params, Report, Workload, param

PART_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
SETTLE_SECONDS = 1.0  # at clean-up, how long an arrival still pending is given to complete (after a failure)
STEP_JOIN = "+"


class Part(BaseModel):
    """One part of a concurrent cell: its workload (``kind`` and validated ``params``), its clients, and
    whether it runs in the background."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    clients: Annotated[int, Field(ge=1)] = param(..., "how many clients run this part", "count")
    background: bool = param(False, "run this part's one phase for as long as the foreground parts run each step")
    kind: str
    params: dict[str, Any]

    @model_validator(mode="before")
    @classmethod
    def _one_workload(cls, raw: Any) -> Any:
        """``{clients: N, background: B, KIND: {params}}`` as a study writes it (or ``kind``/``params`` as stored)."""
        if not isinstance(raw, dict):
            raise ValueError("is not a part (write NAME: {clients: 2, bandwidth: {...}})")
        if "kind" in raw:
            return raw
        rest = {k: v for k, v in raw.items() if k not in ("clients", "background")}
        if len(rest) != 1:
            named = ", ".join(map(str, rest)) or "none"
            raise ValueError(f"names {len(rest)} workloads ({named}); a part runs exactly one (write KIND: {{params}} "
                             "beside clients and background)")
        (kind, params), = rest.items()
        return {k: v for k, v in raw.items() if k in ("clients", "background")} | {"kind": kind, "params": params}

    @model_validator(mode="after")
    def _valid_workload(self) -> Part:
        if self.kind == "concurrent":
            raise ValueError("a part cannot itself be concurrent (list its parts here instead)")
        cls = workload_class(self.kind)
        checked = cls.Params.model_validate(self.params or {})
        if checked.record:
            raise ValueError(f"{self.kind}.record: set record on the concurrent workload (it records every part)")
        wl = cls(checked)
        if cls.target_params:
            raise ValueError(f"{self.kind} names another target ({', '.join(cls.target_params)}), which a part cannot")
        if wl.fixed_clients() is not None:
            raise ValueError(f"{self.kind} fixes its own client count ({wl.fixed_clients()}), which a part cannot")
        if wl.client_parts():
            raise ValueError(f"{self.kind} splits its clients into parts of its own; it cannot be a part")
        if [it for _, it in wl.steps()] != [0] * len(wl.phases()):
            raise ValueError(f"{self.kind}.iterations: a part runs each phase once (leave iterations out)")
        if self.background:
            if len(wl.phases()) != 1:
                raise ValueError(f"a background part runs one phase the whole time; {self.kind} runs "
                                 f"{', '.join(wl.phases())} (choose one with phases: [...])")
            for name in ("deadline", "stonewall", "time_limit"):
                if getattr(checked, name, None) is not None:
                    raise ValueError(f"{self.kind}.{name}: a background part runs until the foreground ends each "
                                     "step; leave its deadline out")
        object.__setattr__(self, "params", checked.model_dump(mode="json"))
        return self


class ConcurrentParams(Params):
    parts: dict[str, Part] = param(..., "the workloads that run at once, by name: each {clients: N, KIND: {params}}, "
                                        "background: true for a load held while the others are measured")

    @model_validator(mode="after")
    def _consistent(self) -> ConcurrentParams:
        if len(self.parts) < 2:
            raise ValueError("parts: give at least two parts (one workload alone is that workload)")
        for name in self.parts:
            if name == "all" or not PART_NAME.fullmatch(name):
                raise ValueError(f"parts: {visible(name)!r} cannot name a part (it names a directory and a report row: "
                                 "letters, digits, '.', '_' and '-', at most 64, not starting with '.' or '-'; "
                                 "'all' is every client)")
        front = {n: make_workload(p.kind, p.params).phases() for n, p in self.parts.items() if not p.background}
        if not front:
            raise ValueError("parts: every part is background; make at least one a foreground part (its phases are "
                             "the cell's steps)")
        if len({len(ph) for ph in front.values()}) > 1:
            raise ValueError("parts: the foreground parts run their phases in step, so each runs as many: " +
                             ", ".join(f"{n} runs {len(ph)} ({', '.join(ph)})" for n, ph in front.items()) +
                             " (give them as many phases, or make one background)")
        return self


class Concurrent(Workload):
    kind = "concurrent"
    Params = ConcurrentParams
    PHASES = ("<the foreground parts' phases, in step>",)
    summary = "several workloads at once in one cell, each with its own clients; reported apart and together"
    report = Report(
        columns=(Figure("MiB/s", "MiB/s", caption="bytes of the row's clients over their span",
                        value=lambda r: r.bandwidth),
                 Figure("ops/s", "ops/s", caption="operations of the row's clients over their span",
                        value=lambda r: r.ops_per_s),
                 Figure("rate held", "share", direction="share", share=True,
                        caption="a paced part: the lowest share of its rate (or IOPS) a client held",
                        value=lambda r: r.extras.get("rate_held")),
                 Figure("part's own", caption="a part's row: the first figure of its workload's own table",
                        text=lambda r: _own_figure(r))),
        how_measured=("The parts run at once, each with its own clients, barriers and directory. Each step runs the "
                      "k-th phase of every foreground part; a background part runs its one phase from the step's "
                      "start until the last foreground client ends it (its loops end at their next fold, within "
                      "50 ms). A part's row: its clients' bytes (operations) over its own span, first start to last "
                      "end; all: every client's over the step's span."),
        rate=Best(lambda r: r.bandwidth, (), each_phase=True, caption="all parts together"),
        section="Concurrent workloads")
    p: ConcurrentParams

    def __init__(self, params: ConcurrentParams) -> None:
        super().__init__(params)
        self.parts: dict[str, Workload] = {n: make_workload(p.kind, p.params) for n, p in params.parts.items()}
        # step -> part -> its phase, made once: a client looks its phase up inside the timed region
        self.runs = dict(_steps(params, {n: part.phases() for n, part in self.parts.items()}))
        self.first: dict[str, int] = {}
        rank = 0
        for n, p in params.parts.items():
            self.first[n] = rank
            rank += p.clients

    # -- coordinator side -----------------------------------------------------------------------
    @classmethod
    def phases_of(cls, params: Params) -> list[str]:
        return [step for step, _ in _steps(params)]

    def phases(self) -> list[str]:
        return list(self.runs)

    @classmethod
    def preload_for(cls, params: Params) -> tuple[str, ...]:
        """Every part's heavy modules (a skim part's uproot), imported by the fork server, not in a timed region."""
        modules: list[str] = []
        for part in params.parts.values():
            cls_ = workload_class(part.kind)
            modules += cls_.preload_for(cls_.Params.model_validate(part.params))
        return tuple(dict.fromkeys(modules))

    def fixed_clients(self) -> int | None:
        return sum(p.clients for p in self.p.parts.values())

    def client_parts(self) -> tuple[tuple[str, int], ...]:
        return tuple((n, p.clients) for n, p in self.p.parts.items())

    def _runs(self, step: str) -> dict[str, str]:
        """Part -> the phase it runs in ``step``."""
        return self.runs[step]

    def skipped(self, caps: Capabilities) -> dict[str, str]:
        out = {}
        for step in self.phases():
            for name, ph in self._runs(step).items():
                why = self.parts[name].skipped(caps).get(ph)
                if why:
                    out[step] = f"part {name} ({ph}): {why}"
                    break
        return out

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        """The foreground parts' work (a background part's ends with them: not known before)."""
        nbytes = ops = 0
        for name, ph in self._runs(phase).items():
            if not self.p.parts[name].background:
                b, o = self.parts[name].expected(ph, self.p.parts[name].clients)
                nbytes, ops = nbytes + b, ops + o
        return nbytes, ops

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """A client runs one part: the largest part's client; the target holds every part's files at once."""
        each = {n: self.parts[n].needs(p.clients, caps) for n, p in self.p.parts.items()}
        big = max(each.values(), key=lambda x: x.client_bytes)

        def named(name: str, needs: tuple[Need, ...]) -> tuple[Need, ...]:
            return tuple(dataclasses.replace(x, what=f"part {name}: {x.what}") for x in needs)

        kept = next(((x.kept, x.kept_dir) for x in each.values() if x.kept is not None), (None, None))
        return Needs(memory=big.memory, process_bytes=big.process_bytes,
                     leader=tuple(m for n, x in each.items() for m in named(n, x.leader)),
                     scratch=tuple(m for n, x in each.items() for m in named(n, x.scratch)),
                     entries=sum(x.entries for x in each.values()) + len(each),
                     kept=kept[0], kept_dir=kept[1],
                     largest_buffer=max(x.largest_buffer for x in each.values()),
                     extent=max(x.extent for x in each.values()), threads=max(x.threads for x in each.values()))

    def prepare_target(self, driver: Driver, *, regenerate: bool = False, log=lambda message: None,
                       clients: int = 1) -> None:
        for name, part in self.parts.items():
            part.prepare_target(driver, regenerate=regenerate, log=log, clients=self.p.parts[name].clients)

    def target_data_key(self) -> str | None:
        keys = [f"{n}={k}" for n, part in self.parts.items() if (k := part.target_data_key()) is not None]
        return "; ".join(keys) if keys else None

    @classmethod
    def direction(cls, phase: str, params: dict[str, Any]) -> str | None:
        """The direction of a step whose parts all move data the same way (their sum is then checked against
        what the device or server counted); None when they differ."""
        p = cls.Params.model_validate(params)
        runs = dict(_steps(p)).get(phase, {})
        ways = {workload_class(p.parts[n].kind).direction(ph, p.parts[n].params) for n, ph in runs.items()}
        return ways.pop() if len(ways) == 1 else None

    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        part = extra.get("part")
        if not part:
            return {}
        own = workload_class(part["kind"]).client_extra(extra, seconds, cpu_seconds)
        return {**own, "part": part["name"], "part_kind": part["kind"], "part_phase": part["phase"]}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """One part's clients (its group row): its workload's own phase figures. Several parts (the whole step):
        each part's under ``parts``, with their warnings lifted to the step, each naming its part."""
        by: dict[str, list[dict[str, Any]]] = {}
        for c in clients:
            if c.get("part"):
                by.setdefault(c["part"], []).append(c)
        if not by:
            return {}
        figures = {}
        for name, mine in by.items():
            kind = mine[0]["part_kind"]
            figures[name] = workload_class(kind).phase_extra(mine, seconds, moved if len(by) == 1 else None)
        if len(by) == 1:
            return next(iter(figures.values()))
        out: dict[str, Any] = {"parts": {}}
        for name, fig in figures.items():
            for key in ("warnings", "flags"):
                for w in fig.pop(key, []):
                    out.setdefault(key, []).append({**w, "message": f"part {name}: {w['message']}"})
            out["parts"][name] = fig
        held = [f["rate_held"] for f in figures.values() if f.get("rate_held") is not None]
        if held:
            out["rate_held"] = min(held)
        return out

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        for name, part in self.parts.items():
            part.cell_cleanup(driver, join(cell_dir, name), self.p.parts[name].clients)
            driver.rmdir_quietly(join(cell_dir, name))

    @classmethod
    def describe_settings(cls, params: dict[str, Any], exclude: set[str]) -> str:
        words = []
        for name, raw in (params.get("parts") or {}).items():
            part = Part.model_validate(raw)
            how = workload_class(part.kind).describe_settings(part.params, set())
            phases = make_workload(part.kind, part.params).phases()
            words.append(f"part {name} — {part.clients} client{'s' if part.clients > 1 else ''}"
                         f"{' in the background' if part.background else ''}, {part.kind} {'+'.join(phases)}"
                         + (f" ({how})" if how else ""))
        return "; ".join(words)

    # -- client side ------------------------------------------------------------------------------
    def _mine(self, rank: int) -> str:
        for name, first in reversed(self.first.items()):
            if rank >= first:
                return name
        raise ValueError(f"client {rank} belongs to no part")

    def prepare(self, c: ClientContext) -> None:
        """This client's part: its communicator (every client splits, once), its directory (client 0 makes them
        all), its context, then the part's own set-up."""
        name = self._mine(c.rank)
        index = list(self.p.parts).index(name)
        sub = c.comm.split(index)
        if c.rank == 0:
            for n in self.parts:
                c.driver.ensure_dir(join(c.cell_dir, n))
        c.comm.barrier()
        part = self.p.parts[name]
        ph_of = self.runs
        faulted = frozenset(ph_of[step][name] for step in c.faulted if step in ph_of and name in ph_of[step])
        ctx = dataclasses.replace(c, rank=sub.rank, nclients=sub.size, comm=sub, cell_dir=join(c.cell_dir, name),
                                  seed=(c.seed << 8) + index, state={}, faulted=faulted,
                                  host_leader=c.host_leader or sub.rank == 0)
        c.state.update(name=name, ctx=ctx, background=part.background, arrival=None)
        self.parts[name].prepare(ctx)

    def _phase(self, c: ClientContext, step: str) -> str:
        return self._runs(step)[c.state["name"]]

    def before_phase(self, c: ClientContext, phase: str) -> None:
        st = c.state
        if st["arrival"] is not None:  # every client passed the last step's closing barrier: all arrived
            st["arrival"].wait()
            st["arrival"] = None
        ctx = st["ctx"]
        ctx.server_cache = None
        self.parts[st["name"]].before_phase(ctx, self._phase(c, phase))
        c.server_cache = ctx.server_cache

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        st = c.state
        name, ctx, ph = st["name"], st["ctx"], self._phase(c, phase)
        part = self.parts[name]
        rec.extra["group"] = name
        rec.extra["part"] = {"name": name, "kind": part.kind, "phase": ph, "background": st["background"]}
        if not st["background"]:
            part.run_phase(ctx, ph, rec)
            st["arrival"] = c.comm.ibarrier()  # after the work: a background client ends when all have arrived
            return
        arrival = st["arrival"] = c.comm.ibarrier()  # a background client arrives as it starts
        UNTIL.check = arrival.test
        try:
            part.run_phase(ctx, ph, rec)
        except PhaseEnded:
            pass  # ended at a fold outside the kernel's loops: what was folded is the record
        finally:
            UNTIL.check = None
        if not arrival.test():
            ctx.warn(rec, "background-short", f"background part {name} finished its {ph} before the foreground "
                                              "finished the step: for the rest of it, it put no load on the target "
                                              "(give it more to do: a larger file_size or more items)")

    def check_after(self, c: ClientContext, phase: str) -> dict[str, Any] | None:
        return self.parts[c.state["name"]].check_after(c.state["ctx"], self._phase(c, phase))

    def cleanup(self, c: ClientContext) -> None:
        st = c.state
        if not st.get("ctx"):
            return
        arrival = st.get("arrival")
        if arrival is not None:  # complete the last step's arrival (MPI frees no pending request)
            until = time.monotonic() + SETTLE_SECONDS
            while not arrival.test() and time.monotonic() < until:
                time.sleep(0.01)
        self.parts[st["name"]].cleanup(st["ctx"])
        for n in self.parts:  # the last client to finish finds them empty
            c.driver.rmdir_quietly(join(c.cell_dir, n))


def _own_figure(r: Any) -> str:
    """A part's row: its workload's first figure as that workload's table prints it (a skim's events/s)."""
    part = (r.params.get("parts") or {}).get(r.group) if r.group else None
    if not part:
        return "–"
    kind = part.get("kind") or next((k for k in part if k not in ("clients", "background")), None)
    try:
        fig = workload_class(kind).report.columns[0]
        return f"{fig.name} {fig.cell(r)}"
    except Exception:  # noqa: BLE001 - a figure that needs what a group's summary lacks is not printed
        return "–"


def _steps(p: ConcurrentParams, phases: dict[str, list[str]] | None = None) -> list[tuple[str, dict[str, str]]]:
    """The cell's steps: (name, part -> the phase it runs), the foreground parts' phases in step (``phases``:
    each part's phases, when its workload is already made)."""
    if phases is None:
        phases = {n: make_workload(part.kind, part.params).phases() for n, part in p.parts.items()}
    front = [n for n, part in p.parts.items() if not part.background]
    out = []
    for k in range(len(phases[front[0]])):
        runs = {n: (phases[n][k] if n in front else phases[n][0]) for n in p.parts}
        # the first foreground part's phases are distinct, so no two steps share a name
        out.append((STEP_JOIN.join(dict.fromkeys(runs[n] for n in front)), runs))
    return out
