"""Report stored runs: one run, or several side by side (``--runs``), analysed again from the store and written as
a JSON document, an HTML report or figure files; and export the store's tables."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..errors import InputError
from . import Say
from .results import STDOUT, check_output, open_results, write_html, write_json


@dataclass
class ReportRequest:
    results: str = "storeval-results"
    run_id: str | None = None
    runs: str | None = None  # several side by side: "all" or ids/prefixes separated by commas
    json_out: str | None = None
    html_out: str | None = None
    figures: str | None = None  # a directory for each figure as SVG, PNG and CSV
    exclude_outliers: bool = False


@dataclass
class Report:
    """The analysed run(s), for the caller to print, and what was written."""

    data: Any  # the run (or the runs combined)
    cells: list
    summary: list
    runs: list  # each run's stored data: one, or those side by side
    across: Any = None  # report.across.Across when several runs are side by side
    html_out: str | None = None
    figures: tuple[str, int, str] | None = None  # (directory, figures written, its index file)


def check_request(request: ReportRequest) -> None:
    """Everything about the outputs that can be refused before the store is opened."""
    if request.run_id is not None and request.runs is not None:
        raise InputError("--run and --runs: give one run with --run or several with --runs, not both")
    if request.json_out:
        check_output(request.json_out)
    if request.html_out:
        check_output(request.html_out, "--html")
    if request.figures is not None:
        from ..report.figure_files import check_figures

        check_figures(request.figures)
        inside = [(flag, path) for flag, path in (("--json", request.json_out), ("--html", request.html_out))
                  if path and path != STDOUT
                  and os.path.dirname(os.path.abspath(path)) == os.path.abspath(request.figures)]
        if inside:
            flag, path = inside[0]
            raise InputError(f"{flag} {path}: inside the --figures directory, whose files the figure index "
                             f"owns (write {flag} elsewhere)")


def build_report(request: ReportRequest, say: Say, show: Callable[[Report], None]) -> Report:
    """Analyse the run(s), hand them to ``show``, then write the outputs asked for; figures are drawn before
    anything is shown or written, so a drawing failure leaves nothing behind."""
    from ..analysis.figures import analyze
    from ..report.document import run_document

    check_request(request)
    store = open_results(request.results, say)
    if request.runs is None:
        data = store.load_run(store.resolve_run(request.run_id))
        samples = store.load_samples(data.run_id)
        cells, summary = analyze(data, request.exclude_outliers, samples)
        across, runs = None, [data]
    else:
        from ..report.across import Analysed, combine, parse_runs

        analysed = []
        for one in parse_runs(request.runs, store.run_ids(), store.resolve_run):
            run = store.load_run(one)
            run_samples = store.load_samples(one)
            analysed.append(Analysed(run, *analyze(run, request.exclude_outliers, run_samples), run_samples))
        across = combine(analysed)
        data, cells, summary, samples = across.run, across.cells, across.summary, across.samples
        runs = [a.run for a in analysed]
    drawn = None
    if request.figures is not None:
        from ..report.figure_files import render_figures
        from ..report.html import figure_groups

        drawn = render_figures(request.figures, figure_groups(data, cells, summary, samples))
    out = Report(data, cells, summary, runs, across)
    show(out)
    run_ids = [data.run_id] if across is None else [r["run_id"] for r in across.runs]
    if request.json_out:
        doc = run_document(data, cells, summary)
        if across is not None:
            doc.update(run_id=None, runs=[{**r, "started": _iso(r["started"]), "finished": _iso(r["finished"])}
                                          for r in across.runs],
                       environment_differences=across.differences)
        write_json(store, request.json_out, doc, run_ids)
    if request.html_out:
        write_html(store, data, cells, summary, request.html_out, samples, across)
        out.html_out = request.html_out
    if drawn is not None:
        from ..report.figure_files import write_figures

        index, count = write_figures(request.figures, drawn, run_ids)
        store.record_output(*index)
        out.figures = (request.figures, count, os.path.join(request.figures, "index.json"))
    return out


def _iso(t: Any) -> str | None:
    return t.isoformat() if t is not None else None


def export_tables(results: str, fmt: str, out: str | None, run_id: str | None, say: Say) -> tuple[str, list[str]]:
    """Write the store's tables as JSON, CSV or Parquet files, one per table; (directory, table names)."""
    from ..report.export import FORMATS, export

    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not a format storeval exports (choose json, csv or parquet)")
    store = open_results(results, say)
    run = store.resolve_run(run_id) if run_id is not None else None
    out = out or os.path.join(store.dir, f"export-{fmt}" + (f"-{run}" if run else ""))
    return out, export(store, fmt, out, run)
