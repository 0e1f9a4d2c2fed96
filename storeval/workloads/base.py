"""The Workload protocol: what every client does, phase by phase.

A workload object is built from validated parameters in every client process
(and once in the coordinator, which asks it for its phases, the phases a
target cannot run, and the cleanup of a failed cell). It talks to storage only
through the Driver protocol and decides what it can do from the driver's
capability flags.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import typing

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..drivers.base import Capabilities, Driver
from ..core.comm import Comm
from ..core.oplog import PhaseRecorder
from ..fields import Duration, Size  # noqa: F401 - re-exported for workloads
from ..plugins import PluginError
from ..units import format_duration, format_size_compact, sig


CLIENT_PROCESS_BYTES = 16 << 20  # a bare client process from the fork server (measured: 10-11 MiB USS/PSS), with margin


@dataclass(frozen=True)
class Need:
    """One thing a cell needs, in the user's terms: how much, what it is, and which setting lowers it."""

    bytes: int
    what: str  # "2 × 64 buffers of transfer_size 4 GiB"
    fix: str  # "lower transfer_size or iodepth"


@dataclass(frozen=True)
class Needs:
    """What one cell of a workload asks of the host and the target; ``storeval.preflight`` checks it before
    anything runs. Memory is per client, scratch is for all clients of the cell together."""

    memory: tuple[Need, ...] = ()  # per client, beyond the bare process
    leader: tuple[Need, ...] = ()  # what client 0 alone needs on top (it works for everyone in some modes)
    scratch: tuple[Need, ...] = ()  # bytes on the target while the cell runs (removed after it)
    entries: int = 0  # files and directories the cell creates on the target (inodes)
    kept: Need | None = None  # bytes laid out once per target and kept for later cells and runs
    kept_dir: str | None = None  # where they live, relative to the target's root
    largest_buffer: int = 0  # the largest single allocation of one client
    extent: int = 0  # the largest file (or offset) a client writes or reads
    threads: int = 1  # threads per client process that do I/O
    process_bytes: int = CLIENT_PROCESS_BYTES  # a bare client process of this workload
    # what lowers the client count when it is too many (default: preflight's "lower --clients …"); a workload
    # whose count is fixed by its input (replay's streams) names its own setting
    clients_fix: str = ""

    @property
    def client_bytes(self) -> int:
        return self.process_bytes + sum(n.bytes for n in self.memory)

    @property
    def leader_bytes(self) -> int:
        return sum(n.bytes for n in self.leader)

    @property
    def scratch_bytes(self) -> int:
        return sum(n.bytes for n in self.scratch)


# -- what a workload reports --------------------------------------------------------------------------------
# A workload declares its report in its own class (``report = Report(...)``): the terminal and HTML phase
# tables, Table 1, the scaling lines, ``storeval compare`` and the HTML report's charts read only that.
# ``value`` callables receive a configuration's summary (``analysis.figures.ConfigSummary``: ``bandwidth``,
# ``ops_per_s``, ``stonewall``, ``per_client_MiBps``, ``cpu_seconds_per_GB``, ``latency_p50_us`` …, and
# ``extras``, the workload's own numeric phase figures from ``phase_extra``) and return a summary
# (``mean``, ``stderr``, ``n``, ``min``, ``max``, ``stddev``) or None.

DIRECTIONS = ("read", "write", "rate", "events", "time", "cost", "share", "ratio")
MB_PER_MIB = 2**20 / 1e6  # a figure in MiB/s × this = the figure in MB/s (units.py: which figure uses which)


def summary_text(s: Any, scale: float = 1.0) -> str:
    """A summary as the tables print it: ``mean ± stderr`` over repetitions (``–`` when there is none)."""
    if s is None:
        return "–"
    if s.n > 1 and s.stderr is not None:
        return f"{sig(s.mean * scale)} ± {sig(s.stderr * scale, 2)}"
    return sig(s.mean * scale)


@dataclass(frozen=True)
class Figure:
    """One figure a workload reports per phase: a phase-table column, a compared figure, a chart's bars.

    ``name`` is the column header (or, for ``compare`` figures, the key of the figure in ``extras`` and the
    JSON); ``value(summary)`` how it is computed from the phase figures (default: ``extras[name]``);
    ``text(summary)`` how it is printed when ``mean ± stderr`` (``stat``: one statistic; ``share``: a
    percentage) is not what the reader needs."""

    name: str
    unit: str = ""
    direction: str = "rate"  # read, write, rate, events, time, cost, share, ratio
    caption: str = ""
    value: Callable[[Any], Any] | None = None
    text: Callable[[Any], str] | None = None
    scale: float = 1.0
    stat: str | None = None  # print only this statistic of the summary (max, min, mean, stddev)
    share: bool = False  # print the mean as a percentage
    higher_is_better: bool = True

    def __post_init__(self) -> None:
        if self.direction not in DIRECTIONS:
            raise PluginError(f"figure {self.name!r}: direction {self.direction!r} is not one of {', '.join(DIRECTIONS)}")

    def of(self, r: Any) -> Any:
        """The figure's summary for configuration ``r`` (None when it has none)."""
        return self.value(r) if self.value is not None else r.extras.get(self.name)

    def cell(self, r: Any) -> str:
        """The figure as a table cell."""
        if self.text is not None:
            return self.text(r)
        s = self.of(r)
        if self.stat is not None:
            v = getattr(s, self.stat) if s is not None else None
            return sig(v) if v is not None else "–"
        if self.share:
            return f"{s.mean:.0%}" if s is not None else "–"
        return summary_text(s, self.scale)


@dataclass(frozen=True)
class Best:
    """A figure of the one-glance table (Table 1): the best mean over client counts of ``value``, taken from
    the first of ``phases`` that has one. For the rate: ``phases=None`` takes the phase the read (else the
    write) figure came from, ``each_phase`` gives one entry per phase of ``phases`` that ran (all phases
    when none of them did), ``phases=()`` none at all."""

    value: Callable[[Any], Any]
    phases: tuple[str, ...] | None = ()
    unit: str = "MiB/s"
    scale: float = 1.0
    each_phase: bool = False
    caption: str = ""  # what the figure is, for the note under Table 1 ("bytes requested per second")


@dataclass(frozen=True)
class Scaling:
    """The figure a scaling line follows against the number of clients (``analysis/scaling.py``):
    ``aggregate(phase_figures)`` and ``per_client(phase_figures)`` (mean per client); ``figure`` names it in
    the JSON; ``peak`` also reports the workers to peak (where adding workers stops paying)."""

    figure: str = "MiBps"
    unit: str = "MiB/s"
    aggregate: Callable[[Any], Any] = lambda ph: ph.bandwidth_MiBps
    per_client: Callable[[Any], Any] = lambda ph: ph.client_MiBps[0]
    peak: bool = False


@dataclass(frozen=True)
class Chart:
    """A bar chart of the HTML report, titled ``KIND: title``. ``by="configuration"``: one bar per
    configuration (target · workload · factors · clients); ``by="phase"``: x = phase, one bar group per
    target · ``group`` parameters · other factors · clients. ``figure.value`` gives the bars (mean, error bar
    = stderr); ``y`` labels the axis; configurations without the figure are left out."""

    title: str
    figure: Figure
    by: str = "configuration"
    y: str = ""
    group: tuple[str, ...] = ()


@dataclass(frozen=True)
class Report:
    """Everything the reports say about a workload, declared in its class.

    ``columns``: the phase table's figures, in order (then p50, p99 and notes); ``how_measured``: the note
    under that table; ``read``/``write``/``rate``: Table 1; ``scaling``; ``compare``: the workload's own
    figures ``storeval compare`` tests beside the common ones (bandwidth, ops/s, latency …); ``charts`` and
    ``section``: its section of the HTML report (``section_table`` repeats the phase table there);
    ``amplification``: add the ``moved ×`` column (bytes the target moved / bytes asked for)."""

    columns: tuple[Figure, ...]
    how_measured: str = ""
    read: Best | None = None
    write: Best | None = None
    rate: Best | None = None
    scaling: Scaling = Scaling()
    compare: tuple[Figure, ...] = ()
    charts: tuple[Chart, ...] = ()
    section: str = ""
    section_table: bool = False
    amplification: bool = True


def check_workload(cls: Any, name: str, package: str = "?") -> None:
    """Refuse, in one line, a workload class that storeval could run but not report (or not run)."""
    where = f"workload '{name}' of package {package}"
    if not (isinstance(cls, type) and issubclass(cls, Workload)):
        raise PluginError(f"{where} is not a storeval.workloads.base.Workload subclass; it is left out")
    if getattr(cls, "kind", None) != name:
        raise PluginError(f"{where}: its class says kind = {getattr(cls, 'kind', None)!r}; the entry point's name "
                          f"and the class's kind must be the same")
    if not (isinstance(getattr(cls, "Params", None), type) and issubclass(cls.Params, Params)):
        raise PluginError(f"{where}: Params is not a storeval.workloads.base.Params subclass; it is left out")
    if not getattr(cls, "PHASES", None):
        raise PluginError(f"{where} declares no PHASES; it is left out")
    report = getattr(cls, "report", None)
    if not isinstance(report, Report) or not report.columns:
        raise PluginError(f"{where} declares no report figures, so none of its phases could be reported; it is left "
                          f"out (declare report = Report(columns=(Figure(...), ...)) in its class)")


# -- what a parameter is, in words (``storeval workloads``) -------------------------------------------------
# Every parameter of storeval's workloads is declared with ``param(default, "what it does", unit)``: a pydantic
# Field whose description and unit ``storeval workloads`` prints beside the default, and whose values the
# reports print as a study writes them (sizes as sizes, durations as durations). A plug-in's plain fields
# still print: the unit is then taken from the type, the explanation is "—".

def param(default: Any = ..., description: str = "", unit: str = "") -> Any:
    """A workload parameter with its explanation and unit (``...``: required). The unit may be left out for
    sizes, durations, yes/no, choices and lists, whose type says it."""
    return Field(default, description=description or None, json_schema_extra={"unit": unit} if unit else None)


def _annotated(model: type[BaseModel], name: str) -> list[Any]:
    """The field's type and every type inside it (Optional, Annotated, list): what its unit is read from."""
    info = model.model_fields[name]
    seen, todo = [], [info.annotation]
    while todo:
        t = todo.pop()
        seen.append(t)
        todo.extend(typing.get_args(t) if typing.get_origin(t) is not typing.Literal else ())
    return seen


def _has_validator(model: type[BaseModel], name: str, kind: Any) -> bool:
    func = kind.__metadata__[0].func
    metadata = list(model.model_fields[name].metadata)
    for t in _annotated(model, name):
        metadata += getattr(t, "__metadata__", ())
    return any(getattr(m, "func", None) is func for m in metadata)


def is_size(model: type[BaseModel], name: str) -> bool:
    """Whether a parameter is a size in bytes (printed as ``64KiB``)."""
    return _has_validator(model, name, Size)


def is_duration(model: type[BaseModel], name: str) -> bool:
    """Whether a parameter is a duration in seconds (printed as ``100ms``)."""
    return _has_validator(model, name, Duration)


def choices(model: type[BaseModel], name: str) -> tuple[Any, ...]:
    """The values a choice (``Literal``) parameter, or each item of a list of them, may take."""
    for t in _annotated(model, name):
        if typing.get_origin(t) is typing.Literal:
            return typing.get_args(t)
    return ()


def param_unit(model: type[BaseModel], name: str) -> str:
    """The unit of a parameter: declared with :func:`param`, else read from its type."""
    extra = model.model_fields[name].json_schema_extra
    if isinstance(extra, dict) and extra.get("unit"):
        return str(extra["unit"])
    kinds = _annotated(model, name)
    if is_size(model, name):
        return "bytes (size)"
    if is_duration(model, name):
        return "s (duration)"
    if choices(model, name):
        return "list of choices" if any(typing.get_origin(t) is list for t in kinds) else "choice"
    for t, unit in ((bool, "yes/no"), (int, "count"), (float, "number"), (str, "text"), (dict, "mapping"),
                    (list, "list")):
        if t in kinds or any(typing.get_origin(k) is t for k in kinds):
            return unit
    return "—"


def param_description(model: type[BaseModel], name: str) -> str:
    """What a parameter does, with the values a choice takes; "—" when its workload does not say."""
    text = model.model_fields[name].description
    options = choices(model, name)
    if options and not (text and all(str(o) in text for o in options)):  # the text names them all already
        many = any(typing.get_origin(t) is list for t in _annotated(model, name))
        listed = f"{'any' if many else 'one'} of: {', '.join(map(str, options))}"
        text = f"{text} ({listed})" if text else listed
    return text or "—"


def param_text(model: type[BaseModel] | None, name: str, value: Any, sep: str = "+") -> str:
    """A parameter's value as a study writes it: sizes as sizes (``64KiB``), durations as durations
    (``100ms``), lists joined by ``sep`` (``write+read`` in a label), no value as ``none``."""
    if value is None:
        return "none"
    known = model is not None and name in model.model_fields
    if isinstance(value, bool):
        return "true" if value else "false"
    if known and isinstance(value, (int, float)) and is_size(model, name):
        return format_size_compact(int(value))
    if known and isinstance(value, (int, float)) and is_duration(model, name):
        return format_duration(value)
    if isinstance(value, (list, tuple)):
        return sep.join(param_text(model, name, v) for v in value) if value else "none"
    if isinstance(value, BaseModel):  # a setting of several parts (a mix): as the study writes it
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) if value else "none"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


RECORD_BOUND = 100_000  # record: true keeps at most this many operations per client and phase


class Params(BaseModel):
    """Base of every workload's parameters: unknown keys are errors, values are frozen.

    ``record`` (every workload): write each client's operations of every phase as a trace into the results
    (``record: true``, or ``record: N`` to keep at most N operations per client and phase; docs/traces.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    record: bool | int = param(False, "trace every operation of every phase into the results, for replay (true, "
                                      "or the most operations to keep per client and phase)", "yes/no or count")

    @field_validator("record")
    @classmethod
    def _record_bound(cls, v: bool | int) -> bool | int:
        """False (off) or the bound in operations per client and phase."""
        if v is True:
            return RECORD_BOUND
        if v is False or v == 0:
            return False
        if v < 0:
            raise ValueError("record: give true (or false), or the most operations to keep per client and phase")
        return int(v)


@dataclass
class ClientContext:
    """Everything a client needs to run its part of a cell."""

    rank: int
    nclients: int
    driver: Driver
    cell_dir: str
    seed: int
    comm: Comm
    keep_cache: bool = False  # --keep-cache: leave the page cache alone (reads may be served from memory)
    host_leader: bool = True  # the one client of its host that acts for the host (drop caches, count its traffic)
    state: dict[str, Any] = field(default_factory=dict)  # the workload's per-client state
    server_pids: list[int] = field(default_factory=list)  # the target's server processes on this host (testbed)
    server_cache: str | None = None  # what clear_cache did to the server's page cache this phase
    faulted: frozenset[str] = frozenset()  # phases a fault plan strikes (what they wrote is checked after)
    peers: dict[str, dict[str, Any]] = field(default_factory=dict)  # parameter -> the other target it names
    _peer_drivers: dict[str, Driver] = field(default_factory=dict)

    def peer_driver(self, param: str) -> Driver:
        """A connected driver of the other target that the workload's parameter ``param`` names (tpc's
        ``source``; :attr:`Workload.target_params`), made once per client and shut down with it."""
        if param not in self._peer_drivers:
            from ..drivers import make_driver

            peer = self.peers[param]
            driver = make_driver(peer["url"], peer["options"], client=self.rank)
            driver.name = peer["target"]
            driver.connect()
            self._peer_drivers[param] = driver
        return self._peer_drivers[param]

    def close_peers(self) -> None:
        for driver in self._peer_drivers.values():
            try:
                driver.shutdown()
            except Exception:  # noqa: BLE001 - a server gone away has nothing left to close
                pass
        self._peer_drivers.clear()

    def clear_cache(self, paths: list[str]) -> str:
        """Make the next read of ``paths`` come from the storage, not a page cache — this host's, and that of
        the target's server when it runs on this host (``server_pids``: a read after a write would otherwise
        be served from the server's memory).

        Collective: every client calls it for the same phase, with the paths it will read (none is allowed; a
        client that skipped the call would leave its peers at a barrier it never reaches). Returns what happened
        on the client: ``dropped`` (root: the host's page cache emptied), ``invalidated`` (each file's cached
        pages dropped, posix_fadvise), ``kept`` (--keep-cache), ``none`` (the target's client keeps no page
        cache, or it reads nothing), or
        ``not-cleared``; ``server_cache`` says what happened on the server (``dropped``, ``kept``,
        ``unknown`` for a server elsewhere, ``none`` for a local file system)."""
        client_cache, server_here = self.driver.caps.client_page_cache, bool(self.server_pids)
        no_server = "kept" if server_here else ("none" if client_cache else "unknown")
        self.server_cache = no_server
        if not client_cache and not server_here:
            return "none"
        if self.keep_cache:
            return "kept" if client_cache else "none"
        from ..probes.cache import drop_page_cache, is_root

        if is_root():
            mine = int(drop_page_cache()) if self.host_leader else 1
            if self.comm.allreduce_min(mine):
                self.server_cache = "dropped" if server_here else no_server
                return "dropped" if client_cache else "none"
        if not client_cache or not paths:
            return "none"
        try:
            return "invalidated" if all(self.driver.invalidate(p) for p in paths) else "not-cleared"
        except OSError:
            return "not-cleared"

    def warn(self, rec: PhaseRecorder, code: str, message: str) -> None:
        """Attach a warning (code + sentence) to this client's record of a phase."""
        warnings = rec.extra.setdefault("warnings", [])
        if not any(w["code"] == code for w in warnings):
            warnings.append({"code": code, "message": message})


class Workload(ABC):
    """Base class of workloads; subclasses set ``kind``, ``Params`` and ``PHASES``."""

    kind: ClassVar[str]
    Params: ClassVar[type[Params]]
    PHASES: ClassVar[tuple[str, ...]]
    summary: ClassVar[str] = ""
    report: ClassVar[Report | None] = None  # what the reports show of it (required: see check_workload)
    # parameters that name another target of the study (tpc's ``source``): the spec checks the name, the plan runs
    # no cell whose target is that one, and the runner connects it on the cell's system (ClientContext.peer_driver)
    target_params: ClassVar[tuple[str, ...]] = ()
    # heavy modules its clients use (imported on first use, storeval.lazy): the fork server imports them before a
    # run's first client is born, so no client pays that import inside a timed region, and a run without this
    # workload does not pay it at all
    preload: ClassVar[tuple[str, ...]] = ()

    def __init__(self, params: Params) -> None:
        self.p = params

    @classmethod
    def preload_for(cls, params: Params) -> tuple[str, ...]:
        """The heavy modules a cell of these parameters imports (``preload``; a workload made of others adds
        theirs)."""
        return cls.preload

    # -- coordinator side -----------------------------------------------------------------------
    @classmethod
    def phases_of(cls, params: Params) -> list[str]:
        """The phases a cell of these parameters runs, in order (the fault plan and the cell plan ask it)."""
        chosen = set(getattr(params, "phases", None) or cls.PHASES)
        return [ph for ph in cls.PHASES if ph in chosen]

    def phases(self) -> list[str]:
        """The phases this cell runs, in order."""
        return self.phases_of(self.p)

    def client_parts(self) -> tuple[tuple[str, int], ...]:
        """(name, client count) of the parts a cell's clients split into, in rank order, each part synchronising
        apart (``Comm.split``) and reported as a client group (workloads/concurrent.py); () when all clients run
        alike."""
        return ()

    def steps(self) -> list[tuple[str, int]]:
        """(phase, iteration) in the order clients run them: the phases, ``iterations`` times (mdtest -i)."""
        return [(ph, it) for it in range(getattr(self.p, "iterations", 1)) for ph in self.phases()]

    def skipped(self, caps: Capabilities) -> dict[str, str]:
        """Phases a target with ``caps`` cannot run, with the reason shown to the user."""
        return {}

    def fixed_clients(self) -> int | None:
        """The number of clients these parameters fix (a replay runs one client per traced stream), which every
        cell then runs instead of the study's client counts; None when the study chooses."""
        return None

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        """Total (bytes, ops) of a phase across clients, for progress bars; 0 when unknown."""
        return 0, 0

    def prepare_target(self, driver: Driver, *, regenerate: bool = False, log=lambda message: None,
                       clients: int = 1) -> None:
        """Untimed work on the target before a cell of ``clients`` clients (e.g. writing input files that later
        cells reuse)."""

    def target_data_key(self) -> str | None:
        """Identity of the input data ``prepare_target`` lays out, so a run regenerates it once, not per cell."""
        return None

    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        """Workload-specific figures of one client's phase record (added to ``client_stats``)."""
        return {}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """Workload-specific figures of a phase, from its clients' ``client_extra`` (added to the phase);
        ``moved`` is what the probes saw move for it (device or network bytes), None when unknown."""
        return {}

    @classmethod
    def cell_result(cls, params: dict[str, Any], phases: list[Any]) -> dict[str, Any] | None:
        """A figure of the whole cell from its phases' figures (``analysis.figures.PhaseFigures``), such as
        IO500's score; None when the workload has none. The JSON keeps it as the cell's ``result``."""
        return None

    @staticmethod
    def result_lines(result: dict[str, Any]) -> list[str]:
        """How the terminal prints :meth:`cell_result` under the run's tables."""
        return []

    @staticmethod
    def direction(phase: str, params: dict[str, Any]) -> str | None:
        """Whether a phase reads or writes data ("read", "write"), for amplification and physical limits."""
        return None

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """What a cell of ``nclients`` clients on a target with ``caps`` needs (memory, scratch, entries …),
        computed from the parameters alone, in constant time: checked against the host before anything runs."""
        return Needs()

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        """Remove whatever the cell's clients may have left behind (after a failure); idempotent."""

    @classmethod
    def kill_orphans(cls, run: str) -> list[tuple[int, str]]:
        """On this host, kill what this kind's clients of the dead run ``run`` (its scratch name,
        ``storeval-<run id>``) started and left running, before the watchdog removes the run's files — only
        processes it can prove that run started (a mark it put in their environment, say), never by name.
        Returns (pid, name) of each one killed. The default: clients start nothing that outlives them."""
        return []

    # -- client side ------------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        """Untimed set-up before the first phase (buffers, offsets, pre-filled files)."""

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """Untimed work before the opening barrier of ``phase`` (e.g. dropping cached pages)."""

    @abstractmethod
    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        """Do this client's share of ``phase``, recording every operation into ``rec``."""

    def check_after(self, c: ClientContext, phase: str) -> dict[str, Any] | None:
        """Untimed, after ``phase``'s record was sent and outside every counter window: read back what the
        phase's writes had acknowledged and say what came back intact (a fault's proof that nothing was
        lost; :attr:`ClientContext.faulted`). None when there is nothing to check."""
        return None

    def cleanup(self, c: ClientContext) -> None:
        """Remove what this client created; runs also after a failure."""

    # -- reports ----------------------------------------------------------------------------------
    @classmethod
    def describe_settings(cls, params: dict[str, Any], exclude: set[str]) -> str:
        """How the data moved, in words, from a cell's parameters (less the swept ones in ``exclude``): the
        settings a reader must know to trust a figure, printed above the phase table."""
        return ""
