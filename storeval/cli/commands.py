"""The commands on stored results and studies: run, report, import, compare, export, workloads, clean."""

from __future__ import annotations

import shlex
import sys
from typing import Optional

import typer

from .. import __version__
from ..app import EXIT_FAILED, EXIT_OK, Say
from ..errors import InputError
from ..units import plural
from ..app.results import write_listing
from .common import (JSON_LISTING_HELP, RESULTS, RESULTS_HELP, App, console as _console, safe as _safe,
                     say as _say)
from .present import show_dry_run, show_run

app = App(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
          help="Evaluate storage systems: the same battery of tests against every candidate, many clients, "
               "honest numbers, one report.")


def _version(value: bool) -> None:
    if value:
        print(f"storeval {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                               help="Print the version and exit.")) -> None:
    """storeval — evaluate storage systems for data-intensive science."""


def _results_dir(ctx: typer.Context, old: Optional[str], results: str) -> str:
    """The results directory of report and export: --results DIR like every command, or the old positional
    form (``storeval report DIR``), still taken; both, naming different directories, is refused."""
    if old is None:
        return results
    given = getattr(ctx.get_parameter_source("results"), "name", "") != "DEFAULT"
    if given and old != results:
        raise _Usage(f"the results directory given twice, as {old} and as --results {results}: give it once, "
                     "as --results DIR", ctx=ctx)
    return old


class _Usage(typer.BadParameter):
    """A usage error in storeval's words (main adds where the command's help is)."""

    def format_message(self) -> str:
        return self.message


@app.command()
def run(
    study: Optional[str] = typer.Argument(None, metavar="STUDY",
                                          help="Study YAML file. Without one: the default quick study on the file "
                                               "system of the current directory."),
    target: Optional[list[str]] = typer.Option(None, "--target", metavar="URL|NAME",
                                               help="Target URL (file:///path, null://) or the name of a study "
                                                    "target; repeat for several."),
    workload: Optional[list[str]] = typer.Option(None, "--workload", metavar="KIND|NAME",
                                                 help="Workload kind (bandwidth, ...) with default parameters, or the "
                                                      "name of a study workload."),
    clients: Optional[str] = typer.Option(None, "--clients", metavar="N[,N...]",
                                          help="Client counts to sweep, e.g. 1,2,4."),
    set_: Optional[list[str]] = typer.Option(None, "--set", metavar="KEY=VALUE",
                                             help="KEY=VALUE for every selected workload that has KEY "
                                                  "(WORKLOAD.KEY=VALUE for one); a comma list sweeps (--set "
                                                  "transfer_size=64KiB,1MiB)."),
    repetitions: Optional[int] = typer.Option(None, "--repetitions", metavar="N",
                                              help="Repetitions of every configuration."),
    results: str = typer.Option(RESULTS, "--results", metavar="DIR", help=RESULTS_HELP),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-",
                                           help="Also write the run as a JSON document to this file (-: to stdout, "
                                                "alone: no tables)."),
    html_out: Optional[str] = typer.Option(None, "--html", metavar="FILE", help="Write the HTML report here (default: "
                                                                "RESULTS/report-RUN_ID.html)."),
    no_html: bool = typer.Option(False, "--no-html", help="Do not write the HTML report."),
    phase_timeout: Optional[str] = typer.Option(None, "--phase-timeout", metavar="DURATION",
                                                help="Stop a cell when a client shows no progress for this long (e.g. "
                                                     "30m); default 1h."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars and no tables."),
    regenerate: bool = typer.Option(False, "--regenerate", help="Write the skim's ROOT event files anew even if "
                                                                "matching ones are on the target."),
    keep_cache: bool = typer.Option(False, "--keep-cache", help="Do not clear the page cache before reads (results "
                                                                "then say they may come from memory)."),
    probe_interval: Optional[str] = typer.Option(None, "--probe-interval", metavar="DURATION",
                                                 help="Sample system counters this often while cells run (default 1s; "
                                                      "0: off)."),
    exclude_outliers: bool = typer.Option(False, "--exclude-outliers", help="Leave repetitions flagged as outliers out "
                                                                            "of the summaries (the output says so)."),
    placement: Optional[str] = typer.Option(None, "--placement", metavar="spread|pack",
                                            help="Under mpiexec: spread a cell's clients across hosts (default) or "
                                                 "pack them host by host."),
    clients_per_host: Optional[int] = typer.Option(None, "--clients-per-host", metavar="N",
                                                   help="Under mpiexec: at most this many clients on one host."),
    force: bool = typer.Option(False, "--force", help="Run although a cell may need more memory or disk space than "
                                                      "is free now (never beyond what the host has at all)."),
    as_tool: Optional[str] = typer.Option(None, "--as", metavar="ior|mdtest|fio",
                                          help="Print, per cell, the ior, mdtest or fio command line that does the "
                                               "same work, and each setting that tool cannot express; runs nothing "
                                               "(like a dry run)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved study, every cell with what it needs "
                                                          "and preflight's verdict; runs nothing, touches no target."),
    live: Optional[bool] = typer.Option(None, "--live/--no-live",
                                        help="A table of each client's MiB/s, ops/s and errors under the progress "
                                             "bars, refreshed each second (default: on a terminal)."),
    live_json: Optional[str] = typer.Option(None, "--live-json", metavar="FILE|-",
                                            help="Each second of a running cell, every client's rates and errors, "
                                                 "as JSON lines to this file (-: stdout, alone: no tables)."),
    metrics: Optional[str] = typer.Option(None, "--metrics", metavar="[HOST]:PORT",
                                          help="Serve the live figures as Prometheus gauges on this address (e.g. "
                                               ":9464) while the run goes on."),
) -> None:
    """Run a study (or the default quick study) and report the results.

    Under mpiexec every rank runs this command: rank 0 plans, stores and reports, and the cells' clients
    are MPI ranks (``mpiexec -n 64 -hostfile hosts storeval run study.yaml``)."""
    from ..app.run import RunRequest, run_study, tool_lines
    from ..report.progress import ProgressUI, QuietUI

    # `storeval run …` and `python -m storeval run …` (argv[0] is then storeval/__main__.py) both hold the verb
    from_cli = bool(sys.argv) and (sys.argv[0].endswith("storeval") or sys.argv[0].endswith("__main__.py"))
    command_line = shlex.join(["storeval", *sys.argv[1:]]) if from_cli \
        else shlex.join(["storeval", "run", *(sys.argv[1:] if sys.argv else [])])
    request = RunRequest(study, target, workload, set_, clients, repetitions, phase_timeout, keep_cache,
                         probe_interval, placement, clients_per_host, results, json_out,
                         None if no_html else (html_out or ""), regenerate, exclude_outliers, force, as_tool,
                         command_line, live, live_json, metrics)
    if as_tool is not None:  # the peer's commands, printed; nothing runs
        for line in tool_lines(request):
            print(line)
        raise typer.Exit(EXIT_OK)
    if dry_run:
        raise typer.Exit(show_dry_run(request))
    if live_json == "-" and json_out == "-":
        raise InputError("--live-json - and --json - both want stdout: send one of them to a file")
    err = _console(stderr=True)
    ui = QuietUI() if quiet else ProgressUI(err)
    tables = not quiet and json_out != "-" and live_json != "-"  # stdout holds the document (or the stream) alone
    raise typer.Exit(run_study(request, _say(), ui, lambda outcome: show_run(outcome, not tables)))


@app.command()
def report(
    ctx: typer.Context,
    old_results: Optional[str] = typer.Argument(None, metavar="RESULTS", hidden=True,
                                                help="Results directory, the old way (--results DIR)."),
    results: str = typer.Option(RESULTS, "--results", metavar="DIR", help=RESULTS_HELP),
    run_id: Optional[str] = typer.Option(None, "--run", metavar="RUN_ID", help="Run id (default: the latest run)."),
    runs: Optional[str] = typer.Option(None, "--runs", metavar="all|RUN_ID,...",
                                       help="Several runs side by side in one report: all, or ids (or unique "
                                            "prefixes) separated by commas."),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-",
                                           help="Write the run as a JSON document to this file (-: to stdout, alone: "
                                                "no tables)."),
    html_out: Optional[str] = typer.Option(None, "--html", metavar="FILE",
                                           help="Write the self-contained HTML report to this file."),
    figures: Optional[str] = typer.Option(None, "--figures", metavar="DIR",
                                          help="Write each figure of the report into this directory as SVG and PNG, "
                                               "with its data as CSV (needs Chromium and the figures extra)."),
    exclude_outliers: bool = typer.Option(False, "--exclude-outliers", help="Leave repetitions flagged as outliers out "
                                                                            "of the summaries (the output says so)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No tables: only what was written, and errors."),
) -> None:
    """Print the summary of a stored run (or of several side by side); write it as JSON, as an HTML report, or its
    figures as files."""
    from ..app.report import ReportRequest, build_report
    from ..report.terminal import print_run, print_run_state, print_runs_side_by_side

    console = _console(stderr=json_out == "-")  # --json -: stdout holds the document alone

    def show(r) -> None:
        if quiet or json_out == "-":
            return
        print_run(r.summary, r.cells, console, r.data.study)
        for run in r.runs:
            print_run_state(run, console)
        if r.across is not None:
            print_runs_side_by_side(r.across, console)

    results = _results_dir(ctx, old_results, results)
    r = build_report(ReportRequest(results, run_id, runs, json_out, html_out, figures, exclude_outliers), _say(), show)
    if r.html_out:
        console.print(f"report in {_safe(r.html_out)}", highlight=False)
    if r.figures is not None:
        directory, count, index = r.figures
        console.print(f"{count} figures in {_safe(directory)} (SVG, PNG and CSV each; index in {_safe(index)})",
                      highlight=False)


@app.command("import")
def import_(
    files: list[str] = typer.Argument(..., metavar="FILE",
                                      help="Result files: IOR JSON (-O summaryFormat=JSON), mdtest's output, fio JSON "
                                           "(--output-format=json), warp JSON (--json, analyze --json)."),
    results: str = typer.Option(RESULTS, "--results", metavar="DIR", help=RESULTS_HELP),
    tool: Optional[str] = typer.Option(None, "--tool", metavar="ior|mdtest|fio|warp",
                                       help="ior, mdtest, fio or warp (default: told from each file's content)."),
    label: Optional[str] = typer.Option(None, "--label", metavar="NAME",
                                        help="Target name of the imported runs (default: the path or endpoint the "
                                             "tool ran against)."),
) -> None:
    """Import IOR, mdtest, fio or warp results as runs of their own (one per file), so report --runs and compare
    put them beside storeval's. Every file is read first: bad input writes nothing."""
    from ..app.imports import ImportRequest, import_results

    command_line = shlex.join(["storeval", "import", *files, "--results", results,
                               *(["--tool", tool] if tool else []), *(["--label", label] if label else [])])
    where, runs = import_results(ImportRequest(files, results, tool, label, command_line))
    out = _console()
    for run in runs:
        out.print(f"run {run.run_id}: imported {run.tool} results of {_safe(run.source)} "
                  f"({plural(run.phases, 'phase')}; measured by {run.tool}, not timed by storeval); results in "
                  f"{_safe(where)}", highlight=False)


@app.command()
def compare(
    a: str = typer.Argument(..., metavar="RUN_A",
                            help="Run A: a results directory (its latest run), DIR:RUN_ID, or a run id."),
    b: str = typer.Argument(..., metavar="RUN_B", help="Run B, the same way."),
    results: str = typer.Option(RESULTS, "--results", metavar="DIR", help="Results directory where run ids are "
                                                                          "looked up."),
    html_out: Optional[str] = typer.Option(None, "--html", metavar="FILE",
                                           help="Also write the comparison as an HTML page."),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-",
                                           help="Also write the comparison as JSON (-: to stdout, alone: no table)."),
    exclude_outliers: bool = typer.Option(False, "--exclude-outliers", help="Compare without outlier repetitions."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No table: only what was written, and errors."),
    confidence: str = typer.Option("95%", "--confidence", metavar="PERCENT",
                                   help="Confidence of the test and of the intervals shown (e.g. 95%, 0.99)."),
    min_effect: str = typer.Option("5%", "--min-effect", metavar="PERCENT",
                                   help="Smallest change called better or worse (e.g. 5%, 2.5)."),
) -> None:
    """Figure by figure: B's change from A in percent with its confidence interval, and whether it is real
    (Welch's t over repetitions, Holm-adjusted, and at least --min-effect)."""
    from ..app.compare import CompareRequest, compare_runs
    from ..report.terminal import print_comparison

    c = compare_runs(CompareRequest(a, b, results, html_out, json_out, exclude_outliers, confidence, min_effect),
                     _say())
    console = _console(stderr=json_out == "-")  # --json -: stdout holds the document alone
    if not quiet and json_out != "-":
        print_comparison(c, console)
    if c.html_out:
        console.print(f"comparison in {_safe(c.html_out)}", highlight=False)


@app.command()
def export(
    ctx: typer.Context,
    old_results: Optional[str] = typer.Argument(None, metavar="RESULTS", hidden=True,
                                                help="Results directory, the old way (--results DIR)."),
    results: str = typer.Option(RESULTS, "--results", metavar="DIR", help=RESULTS_HELP),
    fmt: str = typer.Option(..., "--format", metavar="json|csv|parquet", help="File format: json, csv or parquet."),
    out: Optional[str] = typer.Option(None, "--out", metavar="DIR", help="New directory for the files (default: "
                                                          "RESULTS/export-FORMAT[-RUN_ID])."),
    run_id: Optional[str] = typer.Option(None, "--run", metavar="RUN_ID",
                                         help="Only this run (default: every run in the store)."),
) -> None:
    """Write the results store's tables as JSON, CSV or Parquet files, one per table."""
    from ..app.report import export_tables

    out, names = export_tables(_results_dir(ctx, old_results, results), fmt, out, run_id, _say())
    _console().print(f"{len(names)} tables written to {_safe(out)}: {', '.join(names)}", highlight=False)


@app.command()
def workloads(
    kind: Optional[str] = typer.Argument(None, metavar="KIND", help="Show only this workload kind."),
    json_out: Optional[str] = typer.Option(None, "--json", metavar="FILE|-", help=JSON_LISTING_HELP),
) -> None:
    """List workload kinds, their phases and their parameters: default, unit and what each does."""
    from ..report.catalog import workload_docs, workload_tables
    from ..workloads import WORKLOADS

    console = _console()
    WORKLOADS.announce()  # a plug-in left out: one warning line each
    if json_out is not None:
        write_listing(json_out, workload_docs(kind))
        return
    for table in workload_tables(kind):
        console.print(table)


@app.command()
def clean(
    targets: Optional[list[str]] = typer.Argument(None, metavar="TARGET",
                                                  help="Target URLs or paths, names of --study's targets, or study "
                                                       "files (all their targets)."),
    study: Optional[str] = typer.Option(None, "--study", metavar="FILE",
                                        help="Study file whose targets TARGET may name (without TARGET: all of them)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Remove without asking."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be removed."),
    force: bool = typer.Option(False, "--force", help="Also remove directories whose run cannot be proven dead from "
                                                      "here (another host, no owner record); never a live run's."),
    results: str = typer.Option(RESULTS, "--results", metavar="DIR", help="Results directory whose runs' testbeds "
                                                                          "to look for (a dead run's servers are "
                                                                          "stopped)."),
) -> None:
    """Remove the scratch directories (storeval-RUN/) that dead storeval runs left on targets, and stop the
    testbeds dead runs brought up (recorded in the results store)."""
    from ..app.clean import remove, stop_testbed, survey
    from ..units import format_size

    found = survey(targets or [], study, results, force=force, say=_say())
    failed = found.failed
    for kind, item in found.seen:
        if kind == "system":
            print(f"{item}: a testbed system the run brings up and removes with its data: no scratch directory "
                  f"to clean (the testbeds dead runs left are listed from {_safe(results)})")
        elif kind == "unreachable":
            print(f"error: {item}", file=sys.stderr)
        elif kind == "none":
            print(f"{item}: no storeval scratch directories")
        elif item.remove:
            d = item.dir
            print(f"{item.target.url}: {d.name}  {format_size(d.bytes)} in {plural(d.files, 'file')}  {d.state}: {d.why}")
        else:
            hint = " (--force removes it)" if item.dir.state == "unknown" else ""
            print(f"{item.target.url}: {item.dir.name}  kept, {item.dir.state}: {item.dir.why}{hint}")
    chosen = [f for f in found.found if f.remove]
    total = sum(f.dir.bytes or 0 for f in chosen)
    what = f"{len(chosen)} director{'y' if len(chosen) == 1 else 'ies'} ({format_size(total)})"
    try:
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
            for f in chosen:
                gone, why = remove(f)
                if gone:
                    uploads = f", {f.dir.uploads} incomplete upload(s) aborted" if f.dir.uploads else ""
                    print(f"removed {f.target.url}: {f.dir.name} ({format_size(f.dir.bytes or 0)}{uploads})")
                else:
                    print(f"error: {f.target.url}: {f.dir.name}: {why}", file=sys.stderr)
                    failed = True
    finally:
        found.close()
    for t in found.testbeds:
        kinds, where = ", ".join(t.kinds), _safe(t.directory)
        if not t.owned:  # the study's own `testbed:` directory: another run may use it now, so it is only named
            print(f"run {t.run_id} ({t.status}) brought {kinds} up in {where}, the study's testbed directory: "
                  f"`storeval testbed down --dir {where}` stops it if nothing else uses it")
            continue
        print(f"run {t.run_id} ({t.status}) left its {kinds} testbed in {where}"
              + ("" if yes and not dry_run else f": `storeval testbed down --dir {where}` stops it"
                 + (" (or clean --yes)" if not dry_run else "")))
        if yes and not dry_run:
            why = stop_testbed(t, Say(info=lambda message: print(f"  {_safe(message)}")))
            if why is None:
                print(f"stopped the testbed in {where}")
            else:
                print(f"error: testbed {where}: {_safe(why)}", file=sys.stderr)
                failed = True
    raise typer.Exit(EXIT_FAILED if failed else EXIT_OK)
