"""Command line: ``storeval run`` (the main job), ``storeval report``, ``storeval workloads``, ``storeval clean``.

Every error the user can fix is printed as one line (``error: ...``) with exit
code 2 for bad input, never as a traceback. A stop signal (Ctrl-C, SIGTERM,
SIGHUP) ends any command with 128 + its number and no traceback.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from typing import Any, Optional

from . import interrupts

if os.path.basename(sys.argv[0] if sys.argv else "") == "storeval":  # the installed program: stop signals are
    interrupts.install()  # noted from its first moment (python -m storeval does this in __main__.py)

import typer  # noqa: E402
from rich.console import Console

from . import __version__
from .errors import InputError, StorevalError
from .units import plural

from typer.exceptions import TyperException

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Evaluate storage systems: the same battery of tests against every candidate, many clients, "
                       "honest numbers, one report.")

EXIT_OK, EXIT_FAILED, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


def _version(value: bool) -> None:
    if value:
        print(f"storeval {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                       help="Print the version and exit.")) -> None:
    """storeval — evaluate storage systems for data-intensive science."""


def _console(stderr: bool = False) -> Console:
    """Tables on stdout (wide enough to stay readable in a file or a pipe), messages on stderr."""
    from .report.console import console

    return console(stderr)


def _safe(text) -> str:
    """User-given text (names, URLs, paths, errors) for a printed line: see report.console.safe."""
    from .report.console import safe

    return safe(text)


def _check_output(path: str, option: str = "--json", creating: str | None = None) -> None:
    """An output file's place must exist and be writable before anything runs, and an existing file there is
    replaced only if storeval wrote it and nobody changed it since (its ownership header and digest, see
    ``storeval.owned``): never a user's file, never the results store. ``creating`` names a directory this
    command will create (the results directory)."""
    from .outputs import check_output

    check_output(path, option, "json" if option == "--json" else "html", creating)


@app.command()
def run(
    study: Optional[str] = typer.Argument(None, help="Study YAML file. Without one: the default quick study on the "
                                                     "file system of the current directory."),
    target: Optional[list[str]] = typer.Option(None, "--target", help="Target URL (file:///path, null://) or the name of "
                                                                      "a study target; repeat for several."),
    workload: Optional[list[str]] = typer.Option(None, "--workload", help="Workload kind (bandwidth, ...) with default "
                                                                          "parameters, or the name of a study workload."),
    clients: Optional[str] = typer.Option(None, "--clients", help="Client counts to sweep, e.g. 1,2,4."),
    set_: Optional[list[str]] = typer.Option(None, "--set", help="KEY=VALUE for every selected workload that has KEY "
                                                                 "(WORKLOAD.KEY=VALUE for one); a comma list sweeps "
                                                                 "(--set transfer_size=64KiB,1MiB)."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", help="Repetitions of every configuration."),
    results: str = typer.Option("storeval-results", "--results", help="Results directory (DuckDB store)."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the run as a JSON document to this file."),
    html_out: Optional[str] = typer.Option(None, "--html", help="Write the HTML report here (default: "
                                                                "RESULTS/report-RUN_ID.html)."),
    no_html: bool = typer.Option(False, "--no-html", help="Do not write the HTML report."),
    phase_timeout: Optional[str] = typer.Option(None, "--phase-timeout", help="Stop a cell when a client shows no "
                                                                              "progress for this long (e.g. 30m); "
                                                                              "default 1h."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no tables."),
    regenerate: bool = typer.Option(False, "--regenerate", help="Write the skim's ROOT event files anew even if "
                                                                "matching ones are on the target."),
    keep_cache: bool = typer.Option(False, "--keep-cache", help="Do not clear the page cache before reads (results "
                                                                "then say they may come from memory)."),
    probe_interval: Optional[str] = typer.Option(None, "--probe-interval", help="Sample system counters this often "
                                                                                "while cells run (default 1s; 0: off)."),
    exclude_outliers: bool = typer.Option(False, "--exclude-outliers", help="Leave repetitions flagged as outliers out "
                                                                            "of the summaries (the output says so)."),
    placement: Optional[str] = typer.Option(None, "--placement", help="Under mpiexec: spread a cell's clients across "
                                                                      "hosts (default) or pack them host by host."),
    clients_per_host: Optional[int] = typer.Option(None, "--clients-per-host", help="Under mpiexec: at most this many "
                                                                                    "clients on one host."),
    force: bool = typer.Option(False, "--force", help="Run although a cell may need more memory or disk space than "
                                                      "is free now (never beyond what the host has at all)."),
    as_tool: Optional[str] = typer.Option(None, "--as", help="Print, per cell, the ior, mdtest or fio command line "
                                                             "that does the same work, and each setting that tool "
                                                             "cannot express; runs nothing (like a dry run)."),
) -> None:
    """Run a study (or the default quick study) and report the results.

    Under mpiexec every rank runs this command: rank 0 plans, stores and reports, and the cells' clients
    are MPI ranks (``mpiexec -n 64 -hostfile hosts storeval run study.yaml``)."""
    from .plan import plan
    from .report.progress import ProgressUI, QuietUI
    from .spec import load_study
    from .store import Store

    spec = load_study(study, targets=target, workloads=workload, sets=set_, clients=clients,
                      repetitions=repetitions, phase_timeout=phase_timeout, keep_cache=keep_cache,
                      probe_interval=probe_interval, placement=placement, clients_per_host=clients_per_host)
    cells = plan(spec)
    if as_tool is not None:  # the peer's commands, printed; nothing runs
        from .peers.commands import lines

        for line in lines(cells, as_tool):
            print(line)
        raise typer.Exit(EXIT_OK)
    if spec.network is not None and os.geteuid() != 0:
        raise InputError("network: emulated hosts and links are network namespaces, which need root: run storeval "
                         "as root (or drop network: and the groups' host:)")
    engine = None
    from .engine.mpi import launched_by_mpiexec

    if launched_by_mpiexec():
        _require_extra("mpi4py", "running under mpiexec (the MPI engine)")
        from .engine.mpi import MpiEngine

        engine = MpiEngine(spec.placement, spec.clients_per_host)  # every rank: learns the hosts
        if max(spec.clients) > engine.capacity():
            from .units import plural

            per = f" with at most {spec.clients_per_host} per host" if spec.clients_per_host else ""
            raise InputError(f"clients {max(spec.clients)}: mpiexec started {plural(engine.size, 'rank')}, room for "
                             f"{plural(engine.capacity(), 'client')}{per} (start more ranks or lower --clients)")
        placed = next((g for g in (spec.groups or {}).values() if g.host), None)
        if placed is not None:
            raise InputError(f"clients.{placed.name}.host: emulated hosts are this machine's network namespaces, for "
                             "local clients; under mpiexec give the group hosts: [real host names] or ranks: 0-3")
        if engine.rank != 0:
            raise typer.Exit(engine.serve())
    elif any(g.hosts or g.ranks for g in (spec.groups or {}).values()):
        real = next(g for g in spec.groups.values() if g.hosts or g.ranks)
        raise InputError(f"clients.{real.name}.{'hosts' if real.hosts else 'ranks'}: real hosts and ranks are for "
                         "the MPI engine (run under mpiexec); locally, place the group on an emulated host with "
                         "host: NAME")
    elif spec.clients_per_host is not None and max(spec.clients) > spec.clients_per_host:
        raise InputError(f"clients {max(spec.clients)}: without mpiexec every client runs on this host, and "
                         f"clients_per_host is {spec.clients_per_host} (lower --clients, or run under mpiexec "
                         "across hosts)")
    try:
        if json_out:
            _check_output(json_out, "--json", creating=results)
        if html_out and not no_html:
            _check_output(html_out, "--html", creating=results)
        from .faults import check_plan
        from .preflight import preflight

        # the faults the planned cells will act on; those on a testbed system the run brings up are checked
        # against its handles once it runs (runner.py), the others now
        planned = {id(f): f for c in cells if not (c.target.system or {}).get("testbed") for f in c.faults}
        on_systems = [f for c in cells if (c.target.system or {}).get("testbed") for f in c.faults]
        check_plan(list(planned.values()), spec.testbed, progress_counted=engine is None)
        if on_systems:
            check_plan(on_systems, None, progress_counted=engine is None, handles=False)
        for line in preflight(spec, cells, results, engine=engine, force=force):
            _console(stderr=True).print(f"warning: {_safe(line)}", highlight=False)
        Store.check_location(results)
        out = _console()
        err = _console(stderr=True)
        store = Store(results)
        ui = QuietUI() if quiet else ProgressUI(err)
        # `storeval run …` and `python -m storeval run …` (argv[0] is then storeval/__main__.py) both hold the verb
        from_cli = bool(sys.argv) and (sys.argv[0].endswith("storeval") or sys.argv[0].endswith("__main__.py"))
        command_line = shlex.join(["storeval", *sys.argv[1:]]) if from_cli \
            else shlex.join(["storeval", "run", *(sys.argv[1:] if sys.argv else [])])
        code = _run_and_report(spec, cells, store, ui, command_line, regenerate, engine, json_out, quiet,
                               exclude_outliers, out, err, None if no_html else (html_out or ""))
    except BaseException as e:
        if engine is not None:  # the other ranks wait for rank 0's word: tell them before leaving
            engine.shutdown(e.exit_code if isinstance(e, StorevalError) else EXIT_FAILED)
        raise
    if engine is not None:
        engine.shutdown(code)
    raise typer.Exit(code)


def _run_and_report(spec, cells, store, ui, command_line, regenerate, engine, json_out, quiet, exclude_outliers,
                    out, err, html_out) -> int:
    """Run the cells, store them, print the summary; returns the exit code."""
    from .analysis.figures import analyze
    from .report.document import run_document
    from .runner import Runner

    # a store that cannot be written holds the cells and says so; at the run's end it waits for the store
    # (bounded) and, if it still cannot store them, raises one line naming the file that keeps them: never `ok`
    store.log = lambda message: err.print(f"warning: {_safe(message)}", highlight=False)
    result = Runner(spec, cells, store, command_line=command_line, ui=ui, regenerate=regenerate,
                    engine=engine).run()
    # a stopped run reports what ran (a large plan's not-run cells are counted, not loaded and analysed: a stop
    # answers in seconds at any plan size); `storeval report` still shows every cell
    data = store.load_run(result.run_id, ran_only=result.status == "interrupted")
    cell_figs, summary = analyze(data, exclude_outliers, store.load_samples(result.run_id))
    unwritten = False
    outputs = [("--json", json_out, lambda path: _write_json(store, path, run_document(data, cell_figs, summary),
                                                             [result.run_id]))] if json_out else []
    if html_out is not None:
        html_out = html_out or os.path.join(store.dir, f"report-{result.run_id}.html")
        outputs.append(("--html", html_out, lambda path: _write_html(store, data, cell_figs, summary, path)))
    for option, path, write in outputs:
        try:
            write(path)
        except StorevalError as e:  # the run is stored: `storeval report` writes it later
            err.print(f"error: {_safe(e)} (the run is stored: storeval report {_safe(store.dir)} --run "
                      f"{result.run_id} {option} FILE writes it)", highlight=False)
            unwritten = True
            json_out, html_out = (None, html_out) if option == "--json" else (json_out, None)
    if not quiet:
        _print_all(summary, cell_figs, out, data.study)
        failed = (f", {result.failed} failed" if result.failed else "") + \
            (f", {result.not_run} not run" if result.not_run else "")
        out.print(f"run {result.run_id}: {plural(result.cells, 'cell')}{failed}; results in {_safe(store.dir)}"
                  + (f", JSON in {_safe(json_out)}" if json_out else "")
                  + (f", report in {_safe(html_out)}" if html_out else ""))
    for cf in cell_figs:
        if cf.cell.status == "failed":
            err.print(f"[red]cell {cf.cell.cell_id} ({_safe(cf.cell.target)} · {_safe(cf.cell.workload)} · "
                      f"{plural(cf.cell.clients, 'client')}) failed:[/] {_safe(cf.cell.error)}", highlight=False)
    if result.fatal:
        err.print(f"[red]error:[/] {_safe(result.fatal)}; the job is aborted (the cell's files were removed)",
                  highlight=False)
        if engine is not None:
            engine.abort_job(EXIT_FAILED)
    # a fault the study asked for that never struck (or was never undone): the experiment did not happen
    from .analysis.timeline import FAILING_FLAGS

    faulty = [f for cf in cell_figs for ph in cf.phases for f in ph.flags if f["code"] in FAILING_FLAGS]
    for flag in faulty:
        err.print(f"[red]{flag['code']}:[/] {_safe(flag['message'])}", highlight=False)
    code = EXIT_OK
    if result.status == "interrupted":
        err.print("[yellow]interrupted: the running cell was stopped, its files removed and it is stored as interrupted[/]")
        code = EXIT_INTERRUPTED
    elif result.status == "failed" or unwritten or faulty:
        code = EXIT_FAILED
    return code


@app.command()
def report(
    results: str = typer.Argument("storeval-results", help="Results directory."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Run id (default: the latest run)."),
    runs: Optional[str] = typer.Option(None, "--runs", help="Several runs side by side in one report: all, or ids "
                                                           "(or unique prefixes) separated by commas."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Write the run as a JSON document to this file."),
    html_out: Optional[str] = typer.Option(None, "--html", help="Write the self-contained HTML report to this file."),
    figures: Optional[str] = typer.Option(None, "--figures", help="Write each figure of the report into this "
                                                                  "directory as SVG and PNG, with its data as CSV "
                                                                  "(needs Chromium and the figures extra)."),
    exclude_outliers: bool = typer.Option(False, "--exclude-outliers", help="Leave repetitions flagged as outliers out "
                                                                            "of the summaries (the output says so)."),
) -> None:
    """Print the summary of a stored run (or of several side by side); write it as JSON, as an HTML report, or its
    figures as files."""
    from .analysis.figures import analyze
    from .report.document import run_document

    if run_id is not None and runs is not None:
        raise InputError("--run and --runs: give one run with --run or several with --runs, not both")
    if json_out:
        _check_output(json_out)
    if html_out:
        _check_output(html_out, "--html")
    if figures is not None:
        from .report.figure_files import check_figures

        check_figures(figures)
        inside = [(flag, path) for flag, path in (("--json", json_out), ("--html", html_out))
                  if path and os.path.dirname(os.path.abspath(path)) == os.path.abspath(figures)]
        if inside:
            flag, path = inside[0]
            raise InputError(f"{flag} {_safe(path)}: inside the --figures directory, whose files the figure index "
                             f"owns (write {flag} elsewhere)")
    store = _open_results(results)
    console = _console()
    if runs is None:
        data = store.load_run(store.resolve_run(run_id))
        samples = store.load_samples(data.run_id)
        cells, summary = analyze(data, exclude_outliers, samples)
        across = None
    else:
        from .report.across import Analysed, combine, parse_runs

        ids = parse_runs(runs, store.run_ids(), store.resolve_run)
        analysed = []
        for one in ids:
            run = store.load_run(one)
            run_samples = store.load_samples(one)
            analysed.append(Analysed(run, *analyze(run, exclude_outliers, run_samples), run_samples))
        across = combine(analysed)
        data, cells, summary, samples = across.run, across.cells, across.summary, across.samples
    if figures is not None:  # drawn before anything is printed or written: a failure leaves nothing behind
        from .report.figure_files import render_figures
        from .report.html import figure_groups

        drawn = render_figures(figures, figure_groups(data, cells, summary, samples))
    _print_all(summary, cells, console, data.study)
    if across is None:
        _print_run_state(data, console)
    else:
        for a in analysed:
            _print_run_state(a.run, console)
        _print_differences(across, console)
    run_ids = [data.run_id] if across is None else [r["run_id"] for r in across.runs]
    if json_out:
        doc = run_document(data, cells, summary)
        if across is not None:
            doc.update(run_id=None, runs=[{**r, "started": _iso(r["started"]), "finished": _iso(r["finished"])}
                                          for r in across.runs],
                       environment_differences=across.differences)
        _write_json(store, json_out, doc, run_ids)
    if html_out:
        _write_html(store, data, cells, summary, html_out, samples, across)
        console.print(f"report in {_safe(html_out)}", highlight=False)
    if figures is not None:
        from .report.figure_files import write_figures

        index, count = write_figures(figures, drawn, run_ids)
        store.record_output(*index)
        console.print(f"{count} figures in {_safe(figures)} (SVG, PNG and CSV each; index in "
                      f"{_safe(os.path.join(figures, 'index.json'))})", highlight=False)


def _iso(t) -> str | None:
    return t.isoformat() if t is not None else None


def _print_differences(across, console) -> None:
    """Which run is which, and what differed between them, before anyone compares their figures."""
    for r in across.runs:
        console.print(f"run {r['label']} = {_safe(r['run_id'])}: {_safe(', '.join(r['targets']))}"
                      + (f" (cells {r['cells'][0]}–{r['cells'][1]})" if r["cells"] else ""), highlight=False)
    _print_difference_lines(across.differences, console, "the runs' environments and studies do not differ")


def _print_difference_lines(lines: list[str], console, none: str | None = None) -> None:
    """What differed between runs, one fact per line (report --runs and compare say it alike)."""
    if lines:
        console.print(f"what differed between the runs ({len(lines)}; a figure's change may be theirs, not the "
                      "storage's):", highlight=False)
        for line in lines:
            console.print(f"  {_safe(line)}", highlight=False, soft_wrap=True)
    elif none:
        console.print(none, highlight=False)


def _open_results(results: str):
    """An existing results store (a damaged or foreign file is one line); held results that a run could not
    store are stored now, and the user hears about them."""
    from .store import Store

    if not os.path.isdir(results):
        raise InputError(f"{results} is not a results directory (run storeval run first, or pass the directory)")
    store = Store(results, create=False)
    err = _console(stderr=True)
    for path in store.imported:
        err.print(f"stored the held results of {_safe(path)} in {_safe(store.path)}", highlight=False)
    for path in store.unimported:
        err.print(f"warning: held results in {_safe(path)} are not in {_safe(store.path)} yet (the store cannot be "
                  "written now; the next storeval command here tries again)", highlight=False)
    return store


def _print_run_state(data, console) -> None:
    """How the run ended, its failed cells and what went wrong: a stored run says so as its live run did."""
    statuses = [c.status for c in data.cells]
    counts = ", ".join(f"{statuses.count(st)} {st}" for st in dict.fromkeys(statuses) if st != "ok")
    console.print(f"run {_safe(data.run_id)} ({data.started:%Y-%m-%d %H:%M}): {_safe(data.status)}; "
                  f"{plural(len(statuses), 'cell')}" + (f", {_safe(counts)}" if counts else ""), highlight=False)
    said = set()
    for c in data.cells:
        if c.status not in ("ok", "skipped") and c.error:
            said.add(c.error)
            console.print(f"cell {c.cell_id} ({_safe(c.target)} · {_safe(c.workload)} · {plural(c.clients, 'client')}) "
                          f"{_safe(c.status)}: {_safe(c.error)}", highlight=False)
    for e in data.events:
        if e.get("kind") in ("died", "timeout") and e.get("message") and e["message"] not in said:
            console.print(f"{_safe(e['kind'])}: {_safe(e['message'])}", highlight=False)
        elif e.get("kind") in ("left-behind", "cleaned-up"):  # what storeval could not remove, and when it later did
            console.print(_safe(e["message"]) if e["kind"] == "left-behind"
                          else f"cell {e.get('cell')}: {_safe(e['message'])}", highlight=False)
    if data.status == "running":
        console.print("the run is still going, or its coordinator died without a watchdog: figures are partial",
                      highlight=False)


def _print_all(summary, cells, console, study) -> None:
    """The phase tables per workload, the scaling lines, and the one-glance summary table last."""
    from .analysis.scaling import along_settings, scaling
    from .analysis.table import summary_table
    from .report.terminal import print_faults, print_scaling, print_summary, print_table

    print_summary(summary, console)
    print_faults(cells, console)
    print_scaling(scaling(cells) + along_settings(cells, study), console)
    print_table(summary_table(summary), console)


def _write_json(store, path: str, doc: dict, runs: list[str]) -> None:
    """--json: the document with its ownership header, noted in the store's ``outputs`` table."""
    from .report.document import write_document

    mark, size = write_document(path, doc, "run", runs)
    store.record_output(path, mark, size)


def _write_html(store, data, cells, summary, path: str, samples=None, across=None) -> None:
    """--html: the report with its ownership header, noted in the store's ``outputs`` table; ``across``: several
    runs side by side (their list and differences head the page)."""
    from .outputs import write_owned
    from .report.html import render_report

    if across is None:
        text = render_report(data, cells, summary, store.load_samples(data.run_id) if samples is None else samples)
        runs = [data.run_id]
    else:
        text = render_report(data, cells, summary, samples, runs=across.runs, differences=across.differences)
        runs = [r["run_id"] for r in across.runs]
    mark, size = write_owned(path, "--html", "html", "run", runs, text)
    store.record_output(path, mark, size)


def _run_of(ref: str, results: str):
    """A run named as a results directory (its latest run), DIR:RUN_ID, or a run id in --results."""
    if os.path.isdir(ref):
        store = _open_results(ref)
        return store, store.resolve_run(None)
    directory, sep, run_id = ref.rpartition(":")
    if sep and os.path.isdir(directory):
        store = _open_results(directory)
        return store, store.resolve_run(run_id)
    if not os.path.isdir(results):
        raise InputError(f"{ref}: neither a results directory nor a run id in {results} (pass a results directory, "
                         "DIR:RUN_ID, or --results DIR)")
    store = _open_results(results)
    return store, store.resolve_run(ref)


@app.command("import")
def import_(
    files: list[str] = typer.Argument(..., help="Result files: IOR JSON (-O summaryFormat=JSON), mdtest's output, fio "
                                                "JSON (--output-format=json), warp JSON (--json, analyze --json)."),
    results: str = typer.Option("storeval-results", "--results", help="Results directory (DuckDB store)."),
    tool: Optional[str] = typer.Option(None, "--tool", help="ior, mdtest, fio or warp (default: told from each "
                                                            "file's content)."),
    label: Optional[str] = typer.Option(None, "--label", help="Target name of the imported runs (default: the path "
                                                              "or endpoint the tool ran against)."),
) -> None:
    """Import IOR, mdtest, fio or warp results as runs of their own (one per file), so report --runs and compare
    put them beside storeval's. Every file is read first: bad input writes nothing."""
    from .peers import load_file
    from .peers.base import NAMES
    from .peers.importer import import_runs
    from .store import Store

    runs = [load_file(path, tool) for path in files]
    Store.check_location(results)
    store = Store(results)
    command_line = shlex.join(["storeval", "import", *files, "--results", results,
                               *(["--tool", tool] if tool else []), *(["--label", label] if label else [])])
    ids = import_runs(store, runs, label=label, command_line=command_line)
    out = _console()
    for run, run_id in zip(runs, ids):
        tool = NAMES[run.tool]
        out.print(f"run {run_id}: imported {tool} results of {_safe(run.source)} "
                  f"({plural(sum(len(c.steps) for c in run.cells), 'phase')}; measured by {tool}, not "
                  f"timed by storeval); results in {_safe(store.dir)}", highlight=False)


@app.command()
def compare(
    a: str = typer.Argument(..., help="Run A: a results directory (its latest run), DIR:RUN_ID, or a run id."),
    b: str = typer.Argument(..., help="Run B, the same way."),
    results: str = typer.Option("storeval-results", "--results", help="Where run ids are looked up."),
    html_out: Optional[str] = typer.Option(None, "--html", help="Also write the comparison as an HTML page."),
    json_out: Optional[str] = typer.Option(None, "--json", help="Also write the comparison as JSON."),
    exclude_outliers: bool = typer.Option(False, "--exclude-outliers", help="Compare without outlier repetitions."),
    confidence: str = typer.Option("95%", "--confidence", help="Confidence of the test and of the intervals shown "
                                   "(e.g. 95%, 0.99)."),
    min_effect: str = typer.Option("5%", "--min-effect", help="Smallest change called better or worse (e.g. 5%, 2.5)."),
) -> None:
    """Figure by figure: B's change from A in percent with its confidence interval, and whether it is real
    (Welch's t over repetitions, Holm-adjusted, and at least --min-effect)."""
    from rich.table import Table

    from .analysis.figures import analyze
    from .outputs import write_owned
    from .report.compare import (COLUMNS, NUMERIC, change_rows, compare as compare_runs, environment_differences,
                                 render_compare_html, rule)
    from .report.document import write_document

    level = _percent_option("--confidence", confidence, low=50, high=99.99, example="95%")
    effect = _percent_option("--min-effect", min_effect, low=0, high=1000, example="5%")
    if json_out:
        _check_output(json_out)
    if html_out:
        _check_output(html_out, "--html")
    (store_a, id_a), (store_b, id_b) = _run_of(a, results), _run_of(b, results)
    run_a, run_b = store_a.load_run(id_a), store_b.load_run(id_b)
    changes, only_a, only_b, differ = compare_runs(analyze(run_a, exclude_outliers)[1],
                                                   analyze(run_b, exclude_outliers)[1],
                                                   confidence=level / 100, min_effect=effect)
    console = _console()
    if not changes:
        why = "; same names, other parameters: " + "; ".join(differ[:3]) if differ else ""
        raise InputError(f"runs {id_a} and {id_b} have no configuration in common{why} (compare runs of the same "
                         "study)")
    if run_a.study_hash != run_b.study_hash:
        console.print("A and B ran different studies: only configurations with the same parameters are compared",
                      highlight=False)
    environment = environment_differences(run_a, run_b)
    _print_difference_lines(environment, console)
    rule_text = rule(level / 100, effect, sum(c.test is not None for c in changes))
    table = Table(title=f"B = {id_b} against A = {id_a}", caption=rule_text, caption_justify="left")
    for col in COLUMNS:  # numbers never fold: a wrapped interval would read as two
        table.add_column(col, justify="right" if col in NUMERIC else "left", overflow="fold", no_wrap=col in NUMERIC)
    colour = {"better": "green", "worse": "red"}
    for change, row in zip(changes, change_rows(changes)):
        style = colour.get(change.verdict)
        table.add_row(*map(_safe, row), style=style)
    console.print(table)
    for label, items in (("only in A", only_a), ("only in B", only_b), ("not compared, parameters differ", differ)):
        if items:
            console.print(f"{label}: " + _safe("; ".join(items)), highlight=False)
    if json_out:  # no results store owns a comparison: its ownership header alone proves it is storeval's
        write_document(json_out, {"storeval_version": __version__, "a": id_a, "b": id_b, "rule": rule_text,
                                  "confidence": level / 100, "min_effect_percent": effect,
                                  "multiple_comparisons": "holm", "environment_differences": environment,
                                  "changes": [c.as_dict() for c in changes], "only_in_a": only_a, "only_in_b": only_b,
                                  "parameters_differ": differ}, "compare", [id_a, id_b])
    if html_out:
        write_owned(html_out, "--html", "html", "compare", [id_a, id_b],
                    render_compare_html(run_a, run_b, changes, only_a, only_b, differ, rule_text, environment))
        console.print(f"comparison in {_safe(html_out)}", highlight=False)


def _percent_option(option: str, text: str, *, low: float, high: float, example: str) -> float:
    """A percentage given as ``95%``, ``95`` or ``0.95`` (a fraction below 1), checked against its range."""
    problem = InputError(f"{option} {text!r} is not a percentage from {low:g} to {high:g} % (e.g. {option} {example})")
    try:
        value = float(text.strip().removesuffix("%").strip())
    except ValueError:
        raise problem from None
    if not text.strip().endswith("%") and 0 < value < 1 and low >= 1:  # 0.95: a fraction
        value *= 100
    if not (low <= value <= high):  # NaN fails too
        raise problem
    return value


@app.command()
def export(
    results: str = typer.Argument("storeval-results", help="Results directory."),
    fmt: str = typer.Option(..., "--format", help="json, csv or parquet."),
    out: Optional[str] = typer.Option(None, "--out", help="New directory for the files (default: "
                                                          "RESULTS/export-FORMAT[-RUN_ID])."),
    run_id: Optional[str] = typer.Option(None, "--run", help="Only this run (default: every run in the store)."),
) -> None:
    """Write the results store's tables as JSON, CSV or Parquet files, one per table."""
    from .report.export import FORMATS, export as export_tables

    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not a format storeval exports (choose json, csv or parquet)")
    store = _open_results(results)
    run = store.resolve_run(run_id) if run_id is not None else None
    out = out or os.path.join(store.dir, f"export-{fmt}" + (f"-{run}" if run else ""))
    names = export_tables(store, fmt, out, run)
    _console().print(f"{len(names)} tables written to {_safe(out)}: {', '.join(names)}", highlight=False)


def _require_extra(module: str, what: str) -> None:
    """InputError of one line when ``module`` (a library of one of storeval's extras) cannot be imported."""
    import importlib

    from .plugins import missing_extra

    try:
        importlib.import_module(module)
    except ImportError:
        extra = missing_extra("storeval", module) or module
        raise InputError(f"{what} needs the {extra} extra: pip install 'storeval[{extra}]'") from None


@app.command()
def workloads(
    kind: Optional[str] = typer.Argument(None, metavar="KIND", help="Show only this workload kind."),
) -> None:
    """List workload kinds, their phases and their parameters: default, unit and what each does."""
    from rich.table import Table

    from .spec import DEFAULT_CLIENTS, DEFAULT_REPETITIONS, DEFAULT_WORKLOADS
    from .units import plural
    from .workloads import WORKLOADS, workload_class
    from .workloads.base import Params, param_description, param_text, param_unit
    from .workloads.degraded import DegradedParams

    console = Console()
    WORKLOADS.announce()  # a plug-in left out: one warning line each
    kinds = {kind: workload_class(kind)} if kind is not None else dict(WORKLOADS.items())
    for name, cls in kinds.items():
        model = cls.Params
        study = default_study_params(name)
        caption = [f"phases: {', '.join(cls.PHASES)}.",
                   "default: what `storeval run --workload KIND` and a study that leaves the parameter out use."]
        if study:
            caption.append(f"default study: what `storeval run` without a study uses where it differs (with "
                           f"{', '.join(DEFAULT_WORKLOADS)}, clients {','.join(map(str, DEFAULT_CLIENTS))}, "
                           f"{plural(DEFAULT_REPETITIONS, 'repetition')}); blank: the default.")
        table = Table(title=f"{name} — {cls.summary}" if cls.summary else name, caption=" ".join(caption),
                      caption_justify="left", title_justify="left")
        table.add_column("parameter", no_wrap=True)
        table.add_column("default", overflow="fold", max_width=28)
        if study:
            table.add_column("default study", overflow="fold", max_width=28)
        table.add_column("unit", overflow="fold")
        table.add_column("what it does", overflow="fold", ratio=1)
        common = set(Params.model_fields) | set(DegradedParams.model_fields)  # record, on_error …: after its own
        fields = sorted(model.model_fields.items(), key=lambda item: item[0] in common)
        for field, info in fields:
            default = "(required)" if info.is_required() else param_text(model, field, info.default, ", ")
            row = [field, default]
            if study:
                differs = field in study and (info.is_required() or study[field] != info.default)
                row.append(param_text(model, field, study[field], ", ") if differs else "")
            table.add_row(*map(_safe, [*row, param_unit(model, field), param_description(model, field)]))
        console.print(table)


def default_study_params(kind: str) -> dict[str, Any]:
    """The parameters of workload ``kind`` that `storeval run` without a study sets (spec.DEFAULT_WORKLOADS),
    validated as a run validates them, so they print as the run resolves them; {} when it does not run it."""
    from .spec import DEFAULT_WORKLOADS
    from .workloads import workload_class

    model = workload_class(kind).Params
    given = next((params for entry in DEFAULT_WORKLOADS.values() for k, params in entry.items() if k == kind), None)
    if given is None:
        return {}
    resolved = model.model_validate(given)
    return {k: getattr(resolved, k) for k in given}


@app.command()
def clean(
    targets: Optional[list[str]] = typer.Argument(None, metavar="TARGET...",
                                                  help="Target URLs or paths, names of --study's targets, or study "
                                                       "files (all their targets)."),
    study: Optional[str] = typer.Option(None, "--study", help="Study file whose targets TARGET may name (without "
                                                              "TARGET: all of them)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be removed."),
    force: bool = typer.Option(False, "--force", help="Also remove directories whose run cannot be proven dead from "
                                                      "here (another host, no owner record); never a live run's."),
    results: str = typer.Option("storeval-results", "--results", help="Results directory whose runs' testbeds to "
                                                                      "look for (a dead run's servers are stopped)."),
) -> None:
    """Remove the scratch directories (storeval-RUN/) that dead storeval runs left on targets, and stop the
    testbeds dead runs brought up (recorded in the results store)."""
    from .clean import measure, remove_run_dir, scan
    from .drivers import make_driver
    from .errors import one_line
    from .units import format_size, plural

    chosen, failed = [], False
    for t in _clean_targets(targets or [], study):
        if not t.url:
            print(f"{t.name}: a testbed system the run brings up and removes with its data: no scratch directory "
                  f"to clean (the testbeds dead runs left are listed from {_safe(results)})")
            continue
        driver = make_driver(t.url, t.options)
        try:
            driver.connect()
            dirs = scan(driver)
        except Exception as e:  # noqa: BLE001 - one unreachable target does not keep the others dirty
            print(f"error: target {t.name} ({t.url}): {one_line(e)}", file=sys.stderr)
            failed = True
            continue
        if not dirs:
            print(f"{t.url}: no storeval scratch directories")
        for d in dirs:
            if d.state == "dead" or (force and d.state == "unknown"):
                measure(driver, d)
                chosen.append((t, driver, d))
                print(f"{t.url}: {d.name}  {format_size(d.bytes)} in {plural(d.files, 'file')}  {d.state}: {d.why}")
            else:
                hint = " (--force removes it)" if d.state == "unknown" else ""
                print(f"{t.url}: {d.name}  kept, {d.state}: {d.why}{hint}")
    left_testbeds = _dead_runs_testbeds(results)
    total = sum(d.bytes or 0 for _, _, d in chosen)
    what = f"{len(chosen)} director{'y' if len(chosen) == 1 else 'ies'} ({format_size(total)})"
    if not chosen:
        print("nothing to remove")
    elif dry_run:
        print(f"dry run: {what} would be removed")
    else:
        if not yes:
            if not sys.stdin.isatty():
                raise InputError(f"clean: {what} to remove; confirm with --yes (there is no terminal to ask on)")
            if not typer.confirm(f"remove {what}?", default=False):
                print("nothing removed")
                raise typer.Exit(EXIT_FAILED)
        for t, driver, d in chosen:
            try:
                gone = remove_run_dir(driver, d)
            except Exception as e:  # noqa: BLE001
                gone, why = False, one_line(e)
            else:
                why = "something in it could not be removed"
            if gone:
                uploads = f", {d.uploads} incomplete upload(s) aborted" if d.uploads else ""
                print(f"removed {t.url}: {d.name} ({format_size(d.bytes or 0)}{uploads})")
            else:
                print(f"error: {t.url}: {d.name}: {why}", file=sys.stderr)
                failed = True
    for driver in {id(drv): drv for _, drv, _ in chosen}.values():
        try:
            driver.shutdown()
        except Exception:  # noqa: BLE001
            pass
    for run_id, status, directory, kinds, owned in left_testbeds:
        if not owned:  # the study's own `testbed:` directory: another run may use it now, so it is only named
            print(f"run {run_id} ({status}) brought {', '.join(kinds)} up in {_safe(directory)}, the study's testbed "
                  f"directory: `storeval testbed down --dir {_safe(directory)}` stops it if nothing else uses it")
            continue
        print(f"run {run_id} ({status}) left its {', '.join(kinds)} testbed in {_safe(directory)}"
              + ("" if yes and not dry_run else f": `storeval testbed down --dir {_safe(directory)}` stops it"
                 + (" (or clean --yes)" if not dry_run else "")))
        if yes and not dry_run:
            from .testbed import Testbed, TestbedError

            try:
                Testbed(directory).down(log=lambda message: print(f"  {_safe(message)}"))
                print(f"stopped the testbed in {_safe(directory)}")
            except (TestbedError, StorevalError) as e:
                print(f"error: testbed {_safe(directory)}: {_safe(e)}", file=sys.stderr)
                failed = True
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)


def _dead_runs_testbeds(results: str) -> list[tuple[str, str, str, list[str], bool]]:
    """(run, status, directory, kinds, run-owned) of every testbed directory a run that did not end on its own
    (interrupted, or its processes proven gone) brought systems up in and that is still there: its servers may
    still run. The results store records each before its systems start; a run that ended took its own down."""
    from .store import Store

    if not os.path.isfile(os.path.join(results, "storeval.duckdb")):
        return []
    try:
        runs = Store(results, create=False).testbeds()
    except StorevalError as e:
        print(f"warning: {_safe(results)}: {_safe(e)} (the testbeds of dead runs are not looked for)", file=sys.stderr)
        return []
    return [(t.run_id, t.status, d, kinds, owned) for t in runs if t.ended and t.status == "interrupted"
            for d, kinds, owned in t.dirs if os.path.isdir(d)]


def _clean_targets(items: list[str], study: str | None) -> list:
    """The targets ``storeval clean`` names: URLs or paths, names of the study's targets, or study files."""
    from .drivers import normalize_url
    from .spec import make_target, read_yaml

    def of_study(path: str) -> dict:
        entries = read_yaml(path).get("targets") or {}
        if not isinstance(entries, dict) or not entries:
            raise InputError(f"{path}: defines no targets (clean a URL instead: storeval clean file:///path)")
        return {str(n): make_target(str(n), e, f"targets.{n}") for n, e in entries.items()}

    defined = of_study(study) if study else {}
    if not items:
        if not defined:
            raise InputError("clean: name a target (a URL, a path, a study file, or --study FILE)")
        return list(defined.values())
    out = []
    for item in items:
        if item in defined:
            out.append(defined[item])
        elif item.endswith((".yaml", ".yml")) and os.path.isfile(item):
            out += of_study(item).values()
        else:
            url = normalize_url(item)
            if url.startswith("file://") and "://" not in item and not os.path.isdir(item):
                raise InputError(f"clean {item}: no such directory" + (f" and not a target of {study}" if study else
                                                                       " (give a target URL or path)"))
            out.append(make_target(item, {"url": url}, f"clean {item}", f"clean {item}"))
    return out


testbed_app = typer.Typer(no_args_is_help=True, help="Real storage systems on this machine, on loopback or in a private "
                                                      "network namespace: MinIO (S3), XRootD, HDFS, GlusterFS, Ceph, NFS.")
app.add_typer(testbed_app, name="testbed")
TESTBED_DIR_HELP = ("Directory holding the servers' data and state: new, empty or a testbed directory already "
                    "(storeval-testbed.yaml is written beside it).")


def _testbed_log(message: str) -> None:
    """Progress of `storeval testbed` on stderr; paths are data, never markup."""
    _console(stderr=True).print(_safe(message), highlight=False)


@testbed_app.command("up")
def testbed_up(
    servers: Optional[list[str]] = typer.Argument(
        None, help="minio, minio-ec, xrootd, hdfs, glusterfs, ceph, nfs; slurm (a batch system on emulated nodes) "
                   "(default: minio xrootd hdfs)."),
    count: Optional[int] = typer.Option(None, "--servers", min=1, max=16,
                                        help="Storage servers of each system: bricks, OSDs, data servers, MinIO "
                                             "nodes, datanodes (default: each system's own)."),
    kind_of: Optional[str] = typer.Option(None, "--type", help="GlusterFS volume type: distribute, replicate, "
                                                              "disperse."),
    hdfs_datanodes: Optional[int] = typer.Option(None, "--hdfs-datanodes", min=1, max=16,
                                                 help="Datanodes of the HDFS mini-cluster (as --servers)."),
    host: Optional[str] = typer.Option(None, "--host", help="Emulated host (a network namespace of the testbed's "
                                                             "network) the servers run on; made if absent."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Install (first time) and start testbed servers; write storeval-testbed.yaml with a target for each."""
    from .testbed import SERVERS, Testbed, server_class

    kinds = servers or ["minio", "xrootd", "hdfs"]
    for kind in kinds:
        if kind not in SERVERS:
            raise InputError(f"testbed up {kind}: unknown server (choose from {', '.join(SERVERS)})")
    if host is not None:
        from .spec import host_name

        host = host_name(host, "testbed up --host")
        placeable = [k for k in SERVERS if "host" in server_class(k).options_help]
        for kind in kinds:
            if kind not in placeable:
                raise InputError(f"testbed up {kind} --host: {kind} cannot run on an emulated host (those that can: "
                                 f"{', '.join(placeable) or 'none yet'})")
    given = {k: v for k, v in (("servers", count), ("type", kind_of)) if v is not None}
    options: dict[str, dict[str, Any]] = {}
    for kind in kinds:
        takes = server_class(kind).options_help
        # each setting goes to the systems that take it (`up minio hdfs --servers 3`: HDFS's datanodes); one
        # that none of them takes is refused by the first one's check
        mine = {k: v for k, v in given.items() if k in takes or len(kinds) == 1
                or not any(k in server_class(other).options_help for other in kinds)}
        if kind == "hdfs" and hdfs_datanodes is not None:
            mine["servers"] = hdfs_datanodes
        if host is not None:
            mine["host"] = host  # every kind named runs on that host
        options[kind] = server_class(kind).check_options(mine)
    bed = Testbed(directory)
    bed.up(kinds, options, log=_testbed_log)
    if bed.targets_record:
        print(f"targets written to {bed.targets_file}: storeval run {bed.targets_file.name} --workload bandwidth")


@testbed_app.command("status")
def testbed_status(directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP)) -> None:
    """Show the testbed servers as they are now: processes up, frozen or dead, ports, and what to do."""
    from .testbed import Testbed

    lines = Testbed(directory).status()
    print("\n".join(lines) if lines else "no testbed servers running here")


@testbed_app.command("down")
def testbed_down(
    servers: Optional[list[str]] = typer.Argument(None, help="Servers to stop (default: all)."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Stop exactly the processes `testbed up` started and remove what it made (files of others stay, named)."""
    from .testbed import Testbed

    Testbed(directory).down(servers or None, log=_testbed_log)


@testbed_app.command("network")
def testbed_network(
    down: bool = typer.Option(False, "--down", help="Remove the emulated network (stop the servers on it first)."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Show the emulated network: hosts, addresses, links and their counters (bytes, packets, drops, queues)."""
    from .testbed import Testbed
    from .units import format_size

    bed = Testbed(directory)
    if down:
        bed.network_down(log=_testbed_log)
        return
    net = bed.network()
    if net is None:
        print("no emulated network here (`storeval testbed up KIND --host H` or `storeval testbed link HOST` makes one)")
        return
    print("\n".join(net.status()))
    for name, c in net.counters().items():
        line = (f"  {name}: sent {format_size(c['tx_bytes'])} ({c['tx_packets']:.0f} packets), received "
                f"{format_size(c['rx_bytes'])} ({c['rx_packets']:.0f} packets), drops {c['drops']:.0f}")
        if c.get("rate_bytes_s"):
            line += (f"; tbf out: backlog {format_size(c['out_backlog_bytes'])}, drops {c['out_qdisc_drops']:.0f}"
                     f"; in: backlog {format_size(c['in_backlog_bytes'])}, drops {c['in_qdisc_drops']:.0f}")
        if "relay_up_frames" in c:
            line += (f"; relay delay added {c['relay_up_held_p50_s'] * 1e3:.2f}/{c['relay_down_held_p50_s'] * 1e3:.2f} ms"
                     f" (out/in median), lost {c['relay_up_dropped_loss'] + c['relay_down_dropped_loss']:.0f}, "
                     f"queue drops {c['relay_up_dropped_queue'] + c['relay_down_dropped_queue']:.0f}")
        print(line)


@testbed_app.command("link")
def testbed_link(
    host: str = typer.Argument(..., help="Emulated host whose link changes (made, with a link, if absent)."),
    rate: Optional[str] = typer.Option(None, "--rate", help="Rate each way: 1gbit, 125MB/s; `none` for unlimited."),
    rtt: Optional[str] = typer.Option(None, "--rtt", help="Round-trip delay the link adds: 12ms (half each way)."),
    jitter: Optional[str] = typer.Option(None, "--jitter", help="± on each way's delay, order kept: 1ms."),
    loss: Optional[str] = typer.Option(None, "--loss", help="Loss each way: 0.1% (or a fraction, 0.001)."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Change one emulated host's link now (rate, delay, jitter, loss); values not given stay as they are."""
    from .spec import host_name, link_value
    from .testbed import Testbed, TestbedError
    from .testbed.network import LinkSettings

    host = host_name(host, "testbed link HOST")
    bed = Testbed(directory)
    net = bed.network()
    now = net.link_settings(host) if net is not None and host in net.hosts else LinkSettings()
    for key, text in (("rate", rate), ("rtt", rtt), ("jitter", jitter), ("loss", loss)):
        if text is not None:  # the values and their one-line errors are a study's (`network: links:`)
            setattr(now, key, link_value(key, text, f"testbed link --{key}"))
    try:
        now.check(f"testbed link {host}")
    except TestbedError as e:
        raise InputError(str(e)) from None
    net = bed.set_link(host, now, log=_testbed_log)
    print(f"{host} ({net.address(host)}): {now.describe()}")


nodes_app = typer.Typer(no_args_is_help=True, help="Emulated nodes for MPI: hosts of the testbed's network that "
                                                     "mpiexec launches onto, each with its own host name and link.")
testbed_app.add_typer(nodes_app, name="nodes")


@nodes_app.command("up")
def testbed_nodes_up(
    count: int = typer.Argument(..., min=1, max=250, help="How many nodes: PREFIX1 … PREFIXN."),
    prefix: str = typer.Option("node", "--prefix", help="Their names' stem: node → node1, node2, …"),
    rate: Optional[str] = typer.Option(None, "--rate", help="Each node's link rate each way: 1gbit, 125MB/s."),
    rtt: Optional[str] = typer.Option(None, "--rtt", help="Round-trip delay each node's link adds: 2ms."),
    loss: Optional[str] = typer.Option(None, "--loss", help="Loss each way on each node's link: 0.1%."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Make N emulated nodes (network namespaces with their own host names) and print the mpiexec that runs
    across them; nodes that exist already are kept."""
    from .spec import host_name, link_value
    from .testbed import Testbed, TestbedError
    from .testbed.network import LinkSettings

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9-]{0,40}", prefix):
        raise InputError(f"testbed nodes up --prefix: {prefix!r} cannot begin a host name (a letter, then letters, "
                         "digits or '-'; e.g. node)")
    names = [host_name(f"{prefix}{i}", "testbed nodes up --prefix") for i in range(1, count + 1)]
    settings = LinkSettings()
    for key, text in (("rate", rate), ("rtt", rtt), ("loss", loss)):
        if text is not None:
            setattr(settings, key, link_value(key, text, f"testbed nodes up --{key}"))
    linked = settings != LinkSettings()
    try:
        settings.check("testbed nodes up")
    except TestbedError as e:
        raise InputError(str(e)) from None
    bed = Testbed(directory)
    net = bed.network_up({n: (prefix if linked else None) for n in names}, {prefix: settings} if linked else {},
                         log=_testbed_log)
    _print_nodes(net, names, directory)


@nodes_app.command("show")
def testbed_nodes_show(directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP)) -> None:
    """The emulated hosts mpiexec can launch onto, and the mpiexec that does it."""
    from .testbed import Testbed

    net = Testbed(directory).network()
    if net is None:
        print("no emulated network here (`storeval testbed nodes up N` makes nodes)")
        return
    _print_nodes(net, list(net.hosts), directory)


@testbed_app.command("mpiexec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def testbed_mpiexec(
    ctx: typer.Context,
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP + " Give it first."),
) -> None:
    """mpiexec onto the testbed's emulated nodes: `storeval testbed mpiexec -hosts node1,node2 -n 8 storeval run
    STUDY` (MPICH's hydra, launching into each node's namespace under its host name)."""
    from .testbed import Testbed

    net = Testbed(directory).network()
    if net is None:
        raise InputError(f"no emulated network in {directory} (`storeval testbed nodes up N --dir {directory}` "
                         "makes nodes)")
    if not ctx.args:
        raise InputError("testbed mpiexec: give mpiexec's arguments, e.g. -hosts node1,node2 -n 4 storeval run STUDY")
    sys.stdout.flush()
    os.execv(net.mpiexec, [net.mpiexec, *ctx.args])


@testbed_app.command("slurm", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def testbed_slurm(
    ctx: typer.Context,
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP + " Give it first."),
) -> None:
    """Run a command against the testbed's Slurm: `storeval testbed slurm salloc -N 2 mpiexec -n 4 storeval run
    STUDY` (sinfo, squeue, srun, sbatch, scancel alike)."""
    from .testbed import Testbed

    slurm = Testbed(directory).load().get("slurm")
    if slurm is None or not slurm.state.procs or "network" not in slurm.state.info:
        raise InputError(f"no Slurm in {directory} (`storeval testbed up slurm --servers N --dir {directory}` "
                         "starts one)")
    if not ctx.args:
        raise InputError("testbed slurm: give the command, e.g. salloc -N 2 mpiexec -n 4 storeval run STUDY")
    env = {**os.environ, **slurm.environment()}
    here = os.path.dirname(sys.executable)  # this storeval's mpiexec and storeval come first on the PATH
    env["PATH"] = f"{here}:{env.get('PATH', '')}"
    sys.stdout.flush()
    try:
        os.execvpe(ctx.args[0], ctx.args, env)
    except OSError as e:
        raise InputError(f"testbed slurm: cannot run {ctx.args[0]}: {e.strerror}") from None


def _print_nodes(net, names: list[str], directory: str) -> None:
    for name in names:
        info = net.hosts[name]
        link = net.link_settings(name).describe() if info.link else "no link (on the bridge)"
        print(f"{name}: {info.address} in {info.netns}, {link}")
    print(f"mpiexec across them: storeval testbed mpiexec --dir {_safe(directory)} -hosts "
          f"{','.join(names)} -n {len(names)} storeval run STUDY (or {net.mpiexec} -hosts …)")


@testbed_app.command("datanode")
def testbed_datanode(
    action: str = typer.Argument(..., help="stop, start or list"),
    index: Optional[int] = typer.Argument(None, help="Datanode index (0-based, as listed)."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Stop or restart one datanode of the testbed's HDFS mini-cluster (fault tests), or list them."""
    from .testbed import Testbed

    servers = Testbed(directory).load()
    if "hdfs" not in servers:
        raise InputError("no HDFS testbed is running here (start one with: storeval testbed up hdfs)")
    hdfs = servers["hdfs"]
    if action == "list":
        for i, dn in enumerate(hdfs.datanodes()):
            print(i, dn)
    elif action in ("stop", "start"):
        if index is None:
            raise InputError(f"testbed datanode {action}: give the datanode index (see: storeval testbed datanode list)")
        (hdfs.stop_datanode if action == "stop" else hdfs.start_datanode)(index)
        print(f"datanode {index}: {'stopped' if action == 'stop' else 'started'}")
    else:
        raise InputError(f"testbed datanode {action}: choose stop, start or list")


@testbed_app.command("faults")
def testbed_faults(directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP)) -> None:
    """List the fault handles of the running testbed servers (whole servers and their nodes) and their actions."""
    from .testbed.faults import fault_handles

    handles = fault_handles(directory)
    if not handles:
        print("no testbed server runs here: no fault handles")
        return
    width = max(len(h.name) for h in handles.values())
    actions = max(len(",".join(h.actions)) for h in handles.values())
    for h in handles.values():
        print(f"{h.name:<{width}}  {','.join(h.actions):<{actions}}  {h.description}")


@testbed_app.command("fault")
def testbed_fault(
    name: str = typer.Argument(..., help="Fault handle (see `storeval testbed faults`): minio-ec.node2, hdfs.datanode1, xrootd …"),
    action: str = typer.Argument(..., help="stop (SIGSTOP), cont (SIGCONT), kill, start (a killed one, same ports and "
                                           "data) or restart."),
    directory: str = typer.Option("storeval-testbed", "--dir", help=TESTBED_DIR_HELP),
) -> None:
    """Make one testbed server or node hang (stop), resume (cont), crash (kill), come back (start) or restart, now."""
    from .testbed.faults import act

    print(act(directory, name, action))


def _mpi_rank() -> int:
    for key in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if key in os.environ:
            try:
                return int(os.environ[key])
            except ValueError:
                return 0
    return 0


def main(argv: list[str] | None = None) -> None:
    interrupts.install()  # from here a stop signal raises only where the code can be interrupted (interrupts.py)
    command = typer.main.get_command(app)
    err = _console(stderr=True)
    try:
        try:
            with interrupts.interruptible():
                code = command.main(args=argv, prog_name="storeval", standalone_mode=False)
        except Exception:
            if not interrupts.raised():
                raise
            code = EXIT_INTERRUPTED  # the interruption, handed on as a library's error (DuckDB: "Query interrupted")
    except TyperException as e:  # usage errors: unknown option, bad option value, missing argument
        if type(e).__name__ == "NoArgsIsHelpError":
            print(e.format_message() if hasattr(e, "format_message") else str(e))
            code = EXIT_OK
        else:
            message = e.format_message() if hasattr(e, "format_message") else str(e)
            err.print(f"error: {_safe(' '.join(message.split()))} (see storeval --help)")
            code = EXIT_INPUT
    except typer.Abort:  # click's form of a KeyboardInterrupt
        code = interrupts.exit_code(EXIT_INTERRUPTED)
    except StorevalError as e:
        if _mpi_rank() == 0:  # under mpiexec every rank meets the same mistake; one says it
            err.print(f"error: {_safe(e)}")
        code = e.exit_code
    except KeyboardInterrupt:
        code = interrupts.exit_code(EXIT_INTERRUPTED)
    except Exception as e:  # a bug: say so in one line; STOREVAL_DEBUG=1 shows the traceback
        if os.environ.get("STOREVAL_DEBUG"):
            raise
        err.print(f"internal error (a bug in storeval, please report it): {type(e).__name__}: {_safe(e)} "
                  "(rerun with STOREVAL_DEBUG=1 for the traceback)")
        code = EXIT_FAILED
    if code == EXIT_INTERRUPTED:  # a run stopped by SIGTERM (or SIGHUP) says so: 143 (129)
        code = interrupts.exit_code(EXIT_INTERRUPTED)
    sys.exit(code if isinstance(code, int) else 0)
