"""Run a study: load and plan it, choose the engine, check what can be checked before anything runs (the study's
rules for that engine, the fault plan, outputs, preflight), run the cells, store and analyse them, write the
JSON document and the HTML report, and decide the exit code. Under mpiexec every rank comes here; ranks other
than 0 serve rank 0's cells and return their exit code."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import StorevalError
from . import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, Say
from .results import check_output, write_html, write_json


@dataclass
class RunRequest:
    """What ``storeval run`` was asked: the study (None: the default quick study) and what overrides it."""

    study: str | None = None
    targets: list[str] | None = None
    workloads: list[str] | None = None
    sets: list[str] | None = None
    clients: str | None = None
    repetitions: int | None = None
    phase_timeout: str | None = None
    keep_cache: bool = False
    probe_interval: str | None = None
    placement: str | None = None
    clients_per_host: int | None = None
    results: str = "storeval-results"
    json_out: str | None = None
    html_out: str | None = ""  # None: no report; "": RESULTS/report-RUN_ID.html
    regenerate: bool = False
    exclude_outliers: bool = False
    force: bool = False
    as_tool: str | None = None  # print the peer tool's command per cell instead of running
    command_line: str = "storeval run"
    live: bool | None = None  # the live table under the bars: None: on a terminal only (report/live.py)
    live_json: str | None = None  # each second's per-client rates as JSON lines to this file (-: stdout)
    metrics: str | None = None  # [HOST]:PORT of a Prometheus endpoint serving the same


@dataclass
class RunOutcome:
    """What a run came to, for the caller to show: the stored run analysed, the outputs written, what failed."""

    code: int
    result: Any = None  # runner.RunResult
    store_dir: str = ""
    data: Any = None  # store.RunData, the run as stored
    cells: list = field(default_factory=list)  # analysis.figures.CellFigures
    summary: list = field(default_factory=list)
    json_out: str | None = None  # written
    html_out: str | None = None  # written
    unwritten: list[str] = field(default_factory=list)  # an output that could not be written, one line each
    failing_flags: list[dict] = field(default_factory=list)  # a planned fault that never struck (or was never undone)


def tool_lines(request: RunRequest) -> list[str]:
    """``--as TOOL``: per cell, the ior, mdtest or fio command line that does the same work; nothing runs."""
    from ..peers.commands import lines
    from ..plan import plan

    return list(lines(plan(_load(request)), request.as_tool))


def _load(request: RunRequest) -> Any:
    from ..spec import load_study

    return load_study(request.study, targets=request.targets, workloads=request.workloads, sets=request.sets,
                      clients=request.clients, repetitions=request.repetitions, phase_timeout=request.phase_timeout,
                      keep_cache=request.keep_cache, probe_interval=request.probe_interval,
                      placement=request.placement, clients_per_host=request.clients_per_host)


def run_study(request: RunRequest, say: Say, ui: Any, present: Callable[[RunOutcome], None]) -> int:
    """Run the study and hand the outcome to ``present`` (which shows it) before the job ends; the exit code."""
    from ..engine import choose_engine
    from ..plan import check_placement, plan

    spec = _load(request)
    cells = plan(spec)
    engine = choose_engine(spec.placement, spec.clients_per_host)  # under mpiexec: every rank, collectively
    check_placement(spec, engine)
    if engine is not None and engine.rank != 0:
        return engine.serve()
    try:
        outcome = _run(request, spec, cells, engine, say, ui)
        present(outcome)
        if outcome.result is not None and outcome.result.fatal and engine is not None:
            engine.abort_job(EXIT_FAILED)  # a rank hung: the job ends here, every rank with it
    except BaseException as e:
        if engine is not None:  # the other ranks wait for rank 0's word: tell them before leaving
            engine.shutdown(e.exit_code if isinstance(e, StorevalError) else EXIT_FAILED)
        raise
    if engine is not None:
        engine.shutdown(outcome.code)
    return outcome.code


def _run(request: RunRequest, spec: Any, cells: list, engine: Any, say: Say, ui: Any) -> RunOutcome:
    from ..analysis.figures import analyze
    from ..analysis.timeline import FAILING_FLAGS
    from ..faults import check_cells
    from ..preflight import preflight
    from ..report.document import run_document
    from ..runner import Runner
    from ..store import Store

    results = request.results
    if request.json_out:
        check_output(request.json_out, "--json", creating=results)
    if request.html_out:
        check_output(request.html_out, "--html", creating=results)
    check_cells(cells, spec.testbed, progress_counted=engine is None)
    for line in preflight(spec, cells, results, engine=engine, force=request.force):
        say.warn(line)
    Store.check_location(results)
    store = Store(results)
    # a store that cannot be written holds the cells and says so; at the run's end it waits for the store
    # (bounded) and, if it still cannot store them, raises one line naming the file that keeps them: never `ok`
    store.log = say.warn
    from ..report.live import LiveView, wants_table

    live = LiveView(ui if wants_table(request.live) else None, request.live_json, request.metrics)
    try:
        result = Runner(spec, cells, store, command_line=request.command_line, ui=ui, regenerate=request.regenerate,
                        engine=engine, live=live).run()
    finally:
        live.close()
    # a stopped run reports what ran (a large plan's not-run cells are counted, not loaded and analysed: a stop
    # answers in seconds at any plan size); `storeval report` still shows every cell
    data = store.load_run(result.run_id, ran_only=result.status == "interrupted")
    cell_figs, summary = analyze(data, request.exclude_outliers, store.load_samples(result.run_id))
    out = RunOutcome(EXIT_OK, result, store.dir, data, cell_figs, summary)
    outputs = []
    if request.json_out:
        outputs.append(("--json", request.json_out,
                        lambda path: write_json(store, path, run_document(data, cell_figs, summary), [result.run_id])))
    if request.html_out is not None:
        html = request.html_out or os.path.join(store.dir, f"report-{result.run_id}.html")
        outputs.append(("--html", html, lambda path: write_html(store, data, cell_figs, summary, path)))
    for option, path, write in outputs:
        try:
            write(path)
        except StorevalError as e:  # the run is stored: `storeval report` writes it later
            out.unwritten.append(f"{e} (the run is stored: storeval report {store.dir} --run {result.run_id} "
                                 f"{option} FILE writes it)")
        else:
            if option == "--json":
                out.json_out = path
            else:
                out.html_out = path
    out.failing_flags = [f for cf in cell_figs for ph in cf.phases for f in ph.flags if f["code"] in FAILING_FLAGS]
    if result.status == "interrupted":
        out.code = EXIT_INTERRUPTED
    elif result.status == "failed" or out.unwritten or out.failing_flags:
        out.code = EXIT_FAILED
    return out


@dataclass
class PlannedCell:
    """One cell of a dry run: the cell, and what it asks of the host and the target (``Workload.needs``)."""

    cell: Any  # core.cell.Cell
    memory_per_client: int
    scratch: int  # bytes on the target while it runs, all clients together
    entries: int  # files and directories it makes on the target
    kept: int  # bytes laid out once and kept for later cells and runs


@dataclass
class DryRun:
    """What ``run --dry-run`` found: the study as it resolves, its cells with their needs, and whether preflight
    would let the run start (``refused``: the one line it would stop with)."""

    study: dict
    cells: list[PlannedCell]
    warnings: list[str]
    refused: str | None = None


def dry_run(request: RunRequest) -> DryRun:
    """Everything a run decides before it starts, without starting it: nothing is written, no target is
    reached (a testbed system is not brought up), no engine is started."""
    from ..drivers import driver_class
    from ..errors import InputError
    from ..faults import check_cells
    from ..plan import check_placement, plan
    from ..preflight import preflight
    from ..workloads import make_workload

    spec = _load(request)
    cells = plan(spec)
    check_placement(spec, None)
    out = DryRun(spec.resolved(), [], [])
    made: dict[tuple, Any] = {}
    for cell in cells:
        url = cell.target.url or f"{(cell.target.system or {}).get('scheme', 'file')}://"
        key = (cell.kind, id(cell.params), cell.clients, url)
        if key not in made:  # cells of one configuration (repetitions) need the same
            needs = make_workload(cell.kind, cell.params).needs(cell.clients, driver_class(url).caps)
            made[key] = (needs.client_bytes, needs.scratch_bytes, needs.entries, needs.kept.bytes if needs.kept else 0)
        out.cells.append(PlannedCell(cell, *made[key]))
    try:
        check_cells(cells, spec.testbed)
        out.warnings = preflight(spec, cells, request.results, force=request.force)
    except InputError as e:
        out.refused = str(e)
    return out
