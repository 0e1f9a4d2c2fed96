"""The HTML report: one self-contained file (plotly.js, data and styles inline; no network request at all).

Everything in it comes from the same analysis as the terminal tables and the JSON document: the summary
table prints ``document["table"]`` through the same formatter, the phase tables are the terminal's rows.
A Content-Security-Policy of ``default-src 'none'`` makes the browser refuse any request the page might
try, so "works offline" is enforced, not hoped for.
"""

from __future__ import annotations

import json
import sys
from functools import lru_cache
from typing import Any

import yaml
from jinja2 import Environment, PackageLoader, select_autoescape

from ..analysis.figures import CellFigures, ConfigSummary
from ..analysis.scaling import along_settings, scaling as scaling_of
from ..analysis import overview
from ..analysis.table import summary_table
from ..store import RunData
from . import assets, charts
from ..workloads import WORKLOADS
from .terminal import (HEAL_CAPTION, HEAL_COLUMNS, cell_results, describe_settings, fault_rows, heal_rows,
                       network_tables, phase_tables, scaling_rows, table_caption, table_columns, table_rows, where_of)


@lru_cache(maxsize=1)
def _bundle() -> tuple[str, str | None]:
    """(the plotly.js the page embeds, None or why it is the full 4.8 MB bundle and not the partial one).

    The partial bundle (report/assets: bar, scatter, pie) is installed with storeval, of the version plotly
    embeds; without it (an install made offline) the page still works, bigger, and says so once on stderr."""
    from plotly.offline import get_plotlyjs, get_plotlyjs_version

    want, path = get_plotlyjs_version(), assets.bundle_path()
    have = assets.version_of(path)
    why = f"the partial bundle {assets.PACKAGE} {want} is not installed"
    if have == want:
        try:
            return path.read_text(encoding="utf-8"), None
        except (OSError, UnicodeDecodeError) as e:
            why = f"the partial bundle {assets.PACKAGE} {want} cannot be read ({e.__class__.__name__})"
    elif have is not None:
        why = f"the {assets.PACKAGE} installed is {have}, not {want} (the plotly.js plotly embeds)"
    full = get_plotlyjs()
    note = (f"this page embeds the full plotly.js ({len(full) / 1e6:.1f} MB, not 1.2 MB): {why}; "
            "fetch it with `python -m storeval.report.assets`")
    print(f"warning: {note}", file=sys.stderr, flush=True)
    return full, note


def plotly_js() -> str:
    """The plotly.js inlined in the page: the partial bundle when installed, else the full one."""
    return _bundle()[0]


@lru_cache(maxsize=1)
def _env() -> Environment:
    return Environment(loader=PackageLoader("storeval.report", "templates"), autoescape=select_autoescape(["j2"]),
                       trim_blocks=True, lstrip_blocks=True)


def _figures_json(groups: dict[str, list[tuple[str, dict]]]) -> tuple[dict[str, list[tuple[str, str]]], str]:
    """Give every chart an id; returns {section: [(id, title)]} and the JSON the page's script reads."""
    ids: dict[str, list[tuple[str, str]]] = {}
    figures: dict[str, dict] = {}
    for section, items in groups.items():
        ids[section] = []
        for i, (title, fig) in enumerate(items):
            chart_id = f"{section}-{i}"
            figures[chart_id] = fig
            ids[section].append((chart_id, title))
    text = json.dumps(figures, default=float, allow_nan=False).replace("</", "<\\/")
    return ids, text


def _messages(summary: list[ConfigSummary]) -> list[dict[str, str]]:
    seen: dict[str, dict[str, str]] = {}
    for r in summary:
        where = where_of(r)
        for cls, mark, items in (("flag", "✗", r.flags), ("warn", "⚠", r.warnings)):
            for item in items:
                text = f"{mark} {item['code']}: {item['message']} {where}"
                seen.setdefault(text, {"cls": cls, "text": text})
        for o in r.outliers:
            value = f"{o['value']:.4g}" if isinstance(o.get("value"), (int, float)) else "?"
            text = (f"outlier: repetition {o['repetition'] + 1} (cell {o['cell']}) with {value} "
                    f"{where}{' — excluded' if r.outliers_excluded else ''}")
            seen.setdefault(text, {"cls": "warn", "text": text})
    return list(seen.values())


def _bundle_messages() -> list[dict[str, str]]:
    """The page's own note when it carries the full plotly.js (bigger than it should be, and why)."""
    note = _bundle()[1]
    if not note:
        return []
    warning = {"code": "plotly-full-bundle", "message": note}
    return [{"cls": "warn", "text": f"⚠ {warning['code']}: {warning['message']}"}]


def _when(t: Any) -> Any:
    """A run's start or end to the second (the store keeps microseconds no reader needs)."""
    return t.strftime("%Y-%m-%d %H:%M:%S") if hasattr(t, "strftime") else t


def _clean(value: Any) -> Any:
    """JSON cannot carry NaN or infinity: charts get null instead."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


OVERVIEW = "overview"  # the first screen's figures; every other section of figure_groups is detail


def figure_groups(run: RunData, cells: list[CellFigures], summary: list[ConfigSummary],
                  samples: list[tuple]) -> dict[str, list[tuple[str, dict]]]:
    """Every chart of the report, by section: {section: [(title, plotly figure as a dict)]}, JSON-clean.

    ``overview`` comes first: one compact figure per question, every system side by side; the other sections
    are the detail the page folds away. The HTML page and ``report --figures`` both draw from this, so a file
    figure is the page's figure."""
    scaling = scaling_of(cells) + along_settings(cells, run.study)
    colors = charts.system_colors(overview.systems(summary, run.study))
    kinds = [k for k in WORKLOADS if any(s.kind == k for s in summary) and WORKLOADS[k].report.charts]
    at_one_count = scaling_of(cells, min_points=1) + along_settings(cells, run.study)  # one client count too
    groups = {
        OVERVIEW: charts.overview_scaling(at_one_count, colors)
        + charts.overview_metadata(overview.metadata_rates(summary), colors)
        + charts.overview_fairness(overview.fairness_rows(cells, charts.MAX_FAIRNESS_ROWS + 1))
        + charts.overview_efficiency(overview.efficiency(run, cells), colors),
        "faults": charts.fault_charts([cf for cf in cells if cf.cell.repetition == 0]),  # its timeline per configuration
        "scaling": charts.scaling_charts(scaling),
        "fairness": charts.fairness_charts(cells),
        **{kind: charts.workload_charts(kind, summary) for kind in kinds},  # each workload's own section
        "latency": charts.latency_charts(summary, cells),
        "timeline": charts.timeline_charts(run.cells, samples, run.events)
        + charts.link_charts(run.cells, samples, run.events),
    }
    return {k: [(t, _clean(f)) for t, f in v] for k, v in groups.items()}


def _cost_rows(run: RunData, summary: list[ConfigSummary]) -> list[list[str]]:
    """The cost table's text rows (analysis/overview.py ``costs``)."""
    rows = []
    for c in overview.costs(run.study, summary):
        cur = c["currency"]
        best = c["best"]
        rows.append([c["target"], f"{c['per_tb']:,.2f} {cur}" if c["per_tb"] is not None else "–",
                     f"{c['per_gbps']:,.2f} {cur}" if c["per_gbps"] is not None else "–",
                     f"{c['best_GBps']:.3g} GB/s ({best['workload']} {best['phase']}, {best['clients']} cl.)"
                     if best else "not measured",
                     f"{c['bandwidth_cost']:,.0f} {cur}" if c["bandwidth_cost"] is not None else "–"])
    return rows


def render_report(run: RunData, cells: list[CellFigures], summary: list[ConfigSummary],
                  samples: list[tuple], *, runs: list[dict[str, Any]] | None = None,
                  differences: list[str] | None = None) -> str:
    """The page: runs and environment differences (several runs), the Table 1 with its conditions, the overview
    figures and cost table, then every detail section folded in a ``<details>`` reached from the contents.

    ``runs``: [{run_id, started, finished, command_line, engine, targets, status}] when the page shows several
    runs (``report --runs``); ``differences``: one line per environment difference between them."""
    from ..analysis.fairness import RULE as FAIRNESS_RULE

    scaling = scaling_of(cells) + along_settings(cells, run.study)
    table = summary_table(summary)
    columns = table_columns(table)
    conditions = [describe_settings(row["kind"], params, set(row["factors"]) | {"clients"}) or "–"
                  for row, params in overview.table1(summary)]
    kinds = [k for k in WORKLOADS if any(s.kind == k for s in summary) and WORKLOADS[k].report.charts]
    groups = figure_groups(run, cells, summary, samples)
    ids, figures_json = _figures_json(groups)
    workload_sections = [{"anchor": kind, "name": WORKLOADS[kind].report.section or kind, "kind": kind,
                          "table": WORKLOADS[kind].report.section_table, "charts": ids[kind]}
                         for kind in kinds if ids[kind]]
    extra_tables = {t["id"]: t for t in network_tables(summary)}  # issue 17: groups' fairness, links, RTT
    network = [extra_tables[k] for k in ("rtt-table", "links-table") if k in extra_tables]
    saturation_rows = [[s["target"], s["workload"], s["phase"], s["saturation_clients"], s["workers_to_peak"]]
                       for s in scaling if s.get("along", "clients") == "clients"]
    by_setting: dict[str, list[dict[str, Any]]] = {}
    for s in scaling:
        if s.get("along", "clients") != "clients":
            by_setting.setdefault(s["along"], []).append(s)
    setting_tables = []
    for along, rows in by_setting.items():
        cols, text_rows = scaling_rows(rows, along)
        setting_tables.append({"along": along, "columns": cols, "rows": text_rows})
    fault_table = fault_rows(cells)
    detail = [("phases", "Phases", True)] + [
        (anchor, name, bool(ids[key] or extra)) for anchor, name, key, extra in (
            ("scaling", "Scaling", "scaling", saturation_rows or setting_tables),
            ("fairness", "Fairness", "fairness", extra_tables.get("fairness-table")))] + [
        (w["anchor"], w["name"], True) for w in workload_sections] + [
        ("latency", "Latency", bool(ids["latency"])), ("timelines", "Probe timelines", bool(ids["timeline"])),
        ("network", "Network", bool(network)), ("messages", "Flags and warnings", True),
        ("environment", "Environment", True), ("study", "Study", True)]
    sections = [(a, n) for a, n, shown in detail if shown]
    events = [[e.get("cell"), e["t"].isoformat(timespec="seconds") if e.get("t") else "", e.get("kind"),
               "" if e.get("rank") is None else e["rank"], e.get("phase") or "", e.get("message") or ""]
              for e in run.events]
    return _env().get_template("report.html.j2").render(
        title=f"storeval report {run.run_id}", run=run, sections=sections, runs=runs, differences=differences or [],
        run_rows=[[r.get("run_id", ""), _when(r.get("started")) or "", _when(r.get("finished")) or "–", r.get("status") or "",
                   r.get("engine") or "", ", ".join(r.get("targets") or []), r.get("command_line") or ""]
                  for r in runs or []],
        table_columns=[*columns, "conditions"], table_rows=[[*r, c] for r, c in zip(table_rows(table), conditions)],
        table_caption=table_caption(table),
        table_numeric=[i for i, c in enumerate(columns) if "/s" in c or c in ("clients", "read", "write", "rate")],
        overview_charts=ids[OVERVIEW], cost_rows=_cost_rows(run, summary),
        phase_tables=phase_tables(summary), cell_results=cell_results(cells), scaling_charts=ids["scaling"],
        saturation_rows=saturation_rows,
        setting_tables=setting_tables, fairness_table=extra_tables.get("fairness-table"), network_tables=network,
        saturation_rule=scaling[0]["rule"] if scaling else "", fairness_charts=ids["fairness"],
        fairness_rule=FAIRNESS_RULE, workload_sections=workload_sections,
        latency_charts=ids["latency"], timeline_charts=ids["timeline"], fault_charts=ids["faults"],
        fault_rows=fault_table, heal_rows=heal_rows(cells), heal_columns=list(HEAL_COLUMNS), heal_caption=HEAL_CAPTION,
        probe_interval=run.study.get("probe_interval", 1.0), events=events,
        messages=_messages(summary) + _bundle_messages(),
        environment=json.dumps(run.environment, indent=2, default=str),
        study=yaml.safe_dump(run.study, sort_keys=False, allow_unicode=True),
        outliers_excluded=any(s.outliers_excluded for s in summary),
        figures_json=figures_json, plotly_js=plotly_js())
