"""The report's charts as plotly figure dicts (data + layout), built from the same figures as the tables.

Plain dicts, not plotly.graph_objects: they go into the page as JSON and plotly.js draws them; Python plotly
only supplies that bundled plotly.js. Each function returns a list of ``(title, figure)``; a section with
nothing to show returns none.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import replace
from typing import Any

from ..analysis.figures import CellFigures, ConfigSummary
from ..analysis.scaling import factor_text, factors_text
from ..store import CellRow
from ..workloads import workload_class
from ..workloads.base import Chart

NS = 1e9
MiB = 2**20
FAULT_EVENTS = ("error", "timeout", "died", "interrupted", "cell-failed")
MAX_TIMELINES = 24
MAX_HOST_TIMELINES = 8  # hosts drawn per cell: beyond that the per-host table compares them
MAX_FAIRNESS = 24
MAX_CLIENT_BARS = 64  # clients drawn as a bar each in the fairness charts; beyond, their distribution


def _layout(title: str, x: str, y: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}},
            "margin": {"t": 50, "r": 20, "b": 50, "l": 70}, "height": 380, "legend": {"orientation": "h", "y": -0.2},
            **more}


def _clients(n: int) -> str:
    return f"{n} client" + ("" if n == 1 else "s")


def scaling_charts(scaling: list[dict[str, Any]]) -> list[tuple[str, dict]]:
    """Aggregate vs clients, one line per target (and other factor values), error bars = stderr over repetitions."""
    by_chart: dict[tuple, list[dict]] = defaultdict(list)
    for s in scaling:
        by_chart[(s["workload"], s["phase"], s["figure"], s.get("along", "clients"))].append(s)
    out = []
    for (workload, phase, figure, _), series in by_chart.items():
        unit = workload_class(series[0]["kind"]).report.scaling.unit
        along = series[0].get("along", "clients")
        scale, x_title, xaxis = _x_of(along)
        xaxis = {**xaxis, **_state_ticks(series, along)}
        data = []
        for s in series:
            pts = [p for p in s["series"] if p["aggregate"] is not None]
            name = " ".join([s["target"], *([f"group {s['group']}"] if s.get("group") else []),
                             *([f] if (f := factors_text(s.get("kind"), s["factors"], skip=())) else [])])
            data.append({"type": "scatter", "mode": "lines+markers", "name": name,
                         "x": [p["x"] * scale for p in pts], "y": [p["aggregate"] for p in pts],
                         "error_y": {"type": "data", "array": [p["aggregate_stderr"] or 0 for p in pts],
                                     "visible": True}})
            data.append({"type": "scatter", "mode": "lines", "name": f"{name} per client", "line": {"dash": "dot"},
                         "x": [p["x"] * scale for p in pts], "y": [p["per_client"] for p in pts],
                         "visible": "legendonly"})
        title = f"{workload} · {phase}: aggregate {unit} vs {along}"
        out.append((title, {"data": data, "layout": _layout(title, x_title, f"aggregate {unit}", xaxis=xaxis,
                                                            yaxis={"title": {"text": f"aggregate {unit}"},
                                                                   "rangemode": "tozero"})}))
        for key, label in LINE_FIGURES.items():  # seed 003: events/s and CPU efficiency vs RTT, one line each
            lines = [(s, [p for p in s["series"] if p.get(key) is not None]) for s in series]
            lines = [(s, pts) for s, pts in lines if pts]
            if not lines:
                continue
            data = [{"type": "scatter", "mode": "lines+markers",
                     "name": " ".join([s["target"], *([f"group {s['group']}"] if s.get("group") else []),
                                       *([f] if (f := factors_text(s.get("kind"), s["factors"], skip=())) else [])]),
                     "x": [p["x"] * scale for p in pts], "y": [p[key] for p in pts]} for s, pts in lines]
            title = f"{workload} · {phase}: {label} vs {along}"
            out.append((title, {"data": data, "layout": _layout(title, x_title, label, xaxis=xaxis,
                                                                yaxis={"title": {"text": label},
                                                                       "rangemode": "tozero"})}))
    return out


LINE_FIGURES = {"events_per_s": "events/s", "cpu_efficiency": "CPU efficiency (CPU s / wall s)"}


def _x_of(along: str) -> tuple[float, str, dict[str, Any]]:
    """How a scaling chart's x axis shows ``along``: counts on a log axis (doubling steps), a client group's
    count and link settings on a linear one from zero (RTT and jitter in ms, rate in MiB/s, loss in %)."""
    if along in ("rtt", "jitter"):
        return 1e3, f"{along} (ms)", {"title": {"text": f"{along} (ms)"}, "rangemode": "tozero"}
    if along == "rate":
        return 1 / MiB, "link rate (MiB/s)", {"title": {"text": "link rate (MiB/s)"}, "rangemode": "tozero"}
    if along == "loss":
        return 100.0, "loss (%)", {"title": {"text": "loss (%)"}, "rangemode": "tozero"}
    if along.startswith("clients."):  # a group's count may be 0 (the other groups alone): linear from zero
        return 1.0, along, {"title": {"text": along}, "rangemode": "tozero", "dtick": 1}
    if along == "degraded":  # states, not a quantity: each its own tick, named (healing after the most parts down)
        return 1.0, "state (parts down, or healing)", {"title": {"text": "state (parts down, or healing)"}, "dtick": 1}
    return 1.0, f"{along} (log scale)", {"title": {"text": f"{along} (log scale)"}, "type": "log", "dtick": 0.30103}


def fairness_charts(cells: list[CellFigures]) -> list[tuple[str, dict]]:
    """Per multi-client phase (first repetition of each configuration): per-client rate sorted, and time
    relative to the fastest client, outliers in red (seed 000 figs. 10, 12, 13)."""
    out = []
    seen: set[tuple] = set()
    for cf in cells:
        for ph in cf.phases:
            f = ph.fairness
            key = (cf.cell.config, ph.phase)
            if not f or key in seen or len(out) >= 2 * MAX_FAIRNESS:
                continue
            seen.add(key)
            unit, scale = _rate_unit(cf.cell.kind, f["unit"])
            outliers = set(f["outliers"])
            label = f"{cf.cell.target} · {cf.cell.workload} · {ph.phase} · {_clients(cf.cell.clients)}"
            factors = factors_text(cf.cell.kind, cf.cell.factors)
            if factors:
                label += f" ({factors})"
            group_of = {row["rank"]: row.get("group") for row in f["sorted"]}
            names = list(dict.fromkeys(g for g in group_of.values() if g))
            rows = {row["rank"]: row for row in f["sorted"]}
            rank_order = [row["rank"] for row in f["sorted"]]
            rel = sorted(((int(r), t) for r, t in f["relative_time"].items()), key=lambda rt: rt[1])
            time_order = [r for r, _ in rel]
            times_of = dict(rel)
            if len(rank_order) > MAX_CLIENT_BARS:  # a bar per client is unreadable: draw the distribution
                out += _fairness_distribution(label, unit, scale, f, rows, group_of, names, outliers)
                continue
            rates, times = [], []
            for name in names or [None]:  # one trace per client group: its colour and its legend entry
                mine = [r for r in rank_order if group_of[r] == name] if name else rank_order
                color = GROUP_COLORS[names.index(name) % len(GROUP_COLORS)] if name else "#1f77b4"
                rates.append({
                    "type": "bar", "name": f"group {name}" if name else f"per-client {unit}",
                    "x": [f"client {r}" for r in mine], "y": [rows[r][f["unit"]] * scale for r in mine],
                    "marker": {"color": color, "line": {"color": "#d62728", "width": [3 if r in outliers else 0
                                                                                        for r in mine]}},
                    "text": [("outlier · " if r in outliers else "") + rows[r]["host"] for r in mine]})
                mine_t = [r for r in time_order if group_of.get(r) == name] if name else time_order
                times.append({"type": "bar", "name": f"group {name}" if name else "time / fastest",
                              "x": [f"client {r}" for r in mine_t], "y": [times_of[r] for r in mine_t],
                              "marker": {"color": ["#d62728" if r in outliers and not name else color
                                                   for r in mine_t],
                                         "line": {"color": "#d62728", "width": [3 if r in outliers else 0
                                                                                for r in mine_t]}}})
            title = f"{label}: per-client {unit}, sorted ({_fairness_words(f)})"
            order = {"categoryorder": "array", "categoryarray": [f"client {r}" for r in rank_order]}
            out.append((title, {"data": rates, "layout": _layout(title, "client", unit, barmode="overlay",
                                                                 xaxis={"title": {"text": "client"}, **order})}))
            title = f"{label}: time relative to the fastest client"
            order = {"categoryorder": "array", "categoryarray": [f"client {r}" for r in time_order]}
            out.append((title, {"data": times, "layout": _layout(title, "client", "time / fastest client's",
                                                                 barmode="overlay",
                                                                 xaxis={"title": {"text": "client"}, **order})}))
    return out


def _fairness_words(f: dict) -> str:
    """``Jain 0.987, g1 Jain 0.990, spread 3.1%``: a phase's fairness, each client group's Jain beside it."""
    per_group = "".join(f", {g} Jain {b['jain']:.3f}" for g, b in (f.get("groups") or {}).items()
                        if b and b.get("jain") is not None)
    return f"Jain {f['jain']:.3f}{per_group}, spread {f['spread']:.1%}"


def _fairness_distribution(label: str, unit: str, scale: float, f: dict, rows: dict, group_of: dict,
                           names: list, outliers: set) -> list[tuple[str, dict]]:
    """The fairness charts of a phase with more than MAX_CLIENT_BARS clients: each client group's per-client
    rates (and times relative to the fastest client) sorted, against the share of its clients at or below —
    a curve whose flat part is the bulk and whose tails are the stragglers — outliers marked with their client
    and host."""
    def curve(values: list[tuple[int, float]], name: str | None, color: str) -> list[dict]:
        values = sorted(values, key=lambda rv: rv[1])
        n = len(values)
        xs = [100.0 * (i + 1) / n for i in range(n)]
        traces = [{"type": "scatter", "mode": "lines", "name": f"group {name}" if name else "clients",
                   "x": xs, "y": [v for _, v in values], "line": {"color": color}}]
        marked = [(x, r, v) for x, (r, v) in zip(xs, values) if r in outliers]
        if marked:
            traces.append({"type": "scatter", "mode": "markers", "name": "outliers" + (f" ({name})" if name else ""),
                           "x": [x for x, _, _ in marked], "y": [v for _, _, v in marked],
                           "text": [f"client {r} · {rows[r]['host']}" for _, r, _ in marked],
                           "marker": {"color": "#d62728", "size": 8}})
        return traces

    rel = {int(r): t for r, t in f["relative_time"].items()}
    rates, times = [], []
    for name in names or [None]:
        color = GROUP_COLORS[names.index(name) % len(GROUP_COLORS)] if name else "#1f77b4"
        mine = [r for r in rows if group_of[r] == name] if name else list(rows)
        rates += curve([(r, rows[r][f["unit"]] * scale) for r in mine], name, color)
        times += curve([(r, rel[r]) for r in mine if r in rel], name, color)
    n = len(rows)
    x = "% of clients at or below"
    title = f"{label}: per-client {unit}, distribution of {n} clients ({_fairness_words(f)})"
    out = [(title, {"data": rates, "layout": _layout(title, x, unit, xaxis={"title": {"text": x}, "range": [0, 100]})})]
    title = f"{label}: time relative to the fastest client, distribution of {n} clients"
    out.append((title, {"data": times, "layout": _layout(title, x, "time / fastest client's",
                                                         xaxis={"title": {"text": x}, "range": [0, 100]})}))
    return out


def _rate_unit(kind: str, fairness_unit: str) -> tuple[str, float]:
    """The unit a per-client rate is shown in — the workload's own (MB/s for copy/skim/…, MiB/s for bandwidth;
    units.py) — and the factor from the fairness block's MiB/s to it."""
    if fairness_unit != "MiBps":
        return "ops/s", 1.0
    unit = workload_class(kind).report.scaling.unit
    return ("MB/s", MiB / 1e6) if unit == "MB/s" else ("MiB/s", 1.0)


GROUP_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def workload_charts(kind: str, summary: list[ConfigSummary]) -> list[tuple[str, dict]]:
    """The charts workload ``kind`` declares (``Workload.report.charts``), over its configurations."""
    out = []
    for chart in workload_class(kind).report.charts:
        if chart.figure.name in LINE_FIGURES and "(" not in chart.y:  # the page's one label for it, with its unit
            chart = replace(chart, y=LINE_FIGURES[chart.figure.name])
        rows = [r for r in summary if r.kind == kind]
        out += _by_phase(kind, chart, rows) if chart.by == "phase" else _by_configuration(kind, chart, rows)
    return out


def _by_phase(kind: str, chart: Chart, rows: list[ConfigSummary]) -> list[tuple[str, dict]]:
    """x = phase, one bar group per target × the chart's group parameters (and other factors, clients)."""
    rows = [r for r in rows if chart.figure.of(r) is not None]
    if not rows:
        return []
    groups: dict[str, list[ConfigSummary]] = defaultdict(list)
    for r in rows:
        named = " · ".join(factor_text(kind, g, r.factors.get(g, r.params.get(g, ""))) for g in chart.group)
        others = factors_text(kind, {k: v for k, v in r.factors.items() if k not in chart.group})
        label = " · ".join(filter(None, [r.target, named + ((" " + others) if others else "") if named else others]))
        groups[f"{label} · {r.clients} cl."].append(r)
    data = [{"type": "bar", "name": name, "x": [r.phase for r in rs], "y": [chart.figure.of(r).mean for r in rs],
             "error_y": {"type": "data", "array": [chart.figure.of(r).stderr or 0 for r in rs], "visible": True}}
            for name, rs in groups.items()]
    title = f"{kind}: {chart.title}"
    return [(title, {"data": data, "layout": _layout(title, "phase", chart.y or chart.figure.unit, barmode="group")})]


def _by_configuration(kind: str, chart: Chart, rows: list[ConfigSummary]) -> list[tuple[str, dict]]:
    """One bar per configuration (target · workload · factors · clients), error bars = stderr."""
    if not rows:
        return []
    values = [chart.figure.of(r) for r in rows]
    if not any(v is not None for v in values):
        return []
    names = [f"{r.target} · {r.workload}{(' ' + f) if (f := factors_text(kind, r.factors)) else ''} · "
             f"{r.clients} cl." for r in rows]
    label = chart.y or chart.figure.unit
    data = [{"type": "bar", "name": label, "x": names, "y": [v.mean if v else None for v in values],
             "error_y": {"type": "data", "array": [(v.stderr or 0) if v else 0 for v in values], "visible": True}}]
    title = f"{kind}: {chart.title}"
    return [(title, {"data": data, "layout": _layout(title, "configuration", label, height=420, xaxis={
        "title": {"text": "configuration"}, "automargin": True, "tickfont": {"size": 10}})})]  # whole labels


def latency_charts(summary: list[ConfigSummary], cells: list[CellFigures]) -> list[tuple[str, dict]]:
    """p50/p90/p99/max per phase and configuration (first repetition's merged histogram)."""
    first: dict[tuple, Any] = {}
    for cf in cells:
        for ph in cf.phases:
            if ph.status == "ok" and ph.latency_us.get("p50") is not None:
                first.setdefault((cf.cell.config, ph.phase), (cf, ph))
    by_kind: dict[str, list] = defaultdict(list)
    for cf, ph in first.values():
        by_kind[cf.cell.kind].append((cf, ph))
    out = []
    for kind, items in by_kind.items():
        names = [f"{cf.cell.target} · {cf.cell.workload} · {cf.cell.clients} cl. · {ph.phase}" for cf, ph in items]
        data = [{"type": "bar", "name": q, "x": names, "y": [ph.latency_us.get(q) for _, ph in items]}
                for q in ("p50", "p90", "p99", "max")]
        title = f"{kind}: latency percentiles per operation"
        out.append((title, {"data": data, "layout": _layout(title, "configuration · phase", "µs (log scale)", barmode="group",
                                                            yaxis={"title": {"text": "µs (log scale)"}, "type": "log"})}))
    return out


def _rates(points: list[tuple[int, float]]) -> tuple[list[float], list[float]]:
    """Per-second rates from cumulative counter samples: (t of each interval's end, rate)."""
    xs, ys = [], []
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t1 > t0:
            xs.append(t1)
            ys.append(max(v1 - v0, 0) / ((t1 - t0) / NS))
    return xs, ys


def _first_sampled(cells: list[CellRow], samples: list[tuple], probe: str | None = None):
    """(cell, its samples (t, probe, device, metric, value)) for the first repetition of each configuration that
    has samples (of ``probe`` only, when given)."""
    per_cell: dict[int, list[tuple]] = defaultdict(list)
    for row in samples:
        if probe is None or row[2] == probe:
            per_cell[row[0]].append(row[1:])
    seen: set[int] = set()
    for cell in cells:
        rows = per_cell.get(cell.cell_id)
        if rows and cell.config not in seen:
            seen.add(cell.config)
            yield cell, rows


def timeline_charts(cells: list[CellRow], samples: list[tuple], events: list[dict]) -> list[tuple[str, dict]]:
    """Network, disk and CPU per second while a cell ran, phase boundaries shaded, faults marked.

    One chart per configuration (its first repetition with samples) and per host that sampled it (under MPI
    every host's leader samples its own interfaces, disks and CPU), at most MAX_TIMELINES charts and
    MAX_HOST_TIMELINES hosts per cell (the chart of the last one shown says how many hosts were left out)."""
    out = []
    for cell, rows in _first_sampled(cells, samples):
        by_host: dict[str, list[tuple]] = defaultdict(list)
        for row in rows:
            by_host[row[5] if len(row) > 5 and row[5] else ""].append(row)
        t_zero = min(r[0] for r in rows)  # every host's chart on the cell's one time axis (rank 0's clock)
        hosts = sorted(by_host)
        for i, host in enumerate(hosts[:MAX_HOST_TIMELINES]):
            if len(out) >= MAX_TIMELINES:
                return out
            left = len(hosts) - MAX_HOST_TIMELINES if i == MAX_HOST_TIMELINES - 1 else 0
            chart = _host_timeline(cell, by_host[host], t_zero, events, host if len(hosts) > 1 else "", left)
            if chart is not None:
                out.append(chart)
    return out


def _host_timeline(cell: CellRow, rows: list[tuple], t_zero: int, events: list[dict], host: str,
                   left_out: int) -> tuple[str, dict] | None:
    """One host's probes per second over one cell (``host`` empty: the cell was sampled on one host)."""
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for t, probe, device, metric, value, *_ in rows:
        series[(probe, device, metric)].append((t, value))

    def sec(t: float) -> float:
        return (t - t_zero) / NS

    data = []
    for (probe, device, metric), pts in sorted(series.items()):
        if probe == "net" and metric in ("rx_bytes", "tx_bytes"):
            xs, ys = _rates(pts)
            if any(ys):
                data.append({"type": "scatter", "mode": "lines+markers", "name": f"net {device} {metric[:2]} MiB/s",
                             "x": [sec(x) for x in xs], "y": [y / MiB for y in ys]})
        elif probe == "disk" and metric in ("read_bytes", "write_bytes"):
            xs, ys = _rates(pts)
            data.append({"type": "scatter", "mode": "lines+markers", "name": f"disk {device} {metric[:-6]} MiB/s",
                         "x": [sec(x) for x in xs], "y": [y / MiB for y in ys]})
    busy, total = series.get(("cpu", "all", "busy")), series.get(("cpu", "all", "total"))
    if busy and total:
        xs, b = _rates(busy)
        _, tot = _rates(total)
        data.append({"type": "scatter", "mode": "lines+markers", "name": "CPU busy %", "yaxis": "y2",
                     "line": {"color": CPU_COLOR}, "marker": {"color": CPU_COLOR},
                     "x": [sec(x) for x in xs], "y": [100 * bb / tt if tt else 0 for bb, tt in zip(b, tot)]})
        iowait = series.get(("cpu", "all", "iowait"))
        if iowait:  # kept apart from idle: a CPU with nothing to run while the disk works
            _, w = _rates(iowait)
            if any(w):
                data.append({"type": "scatter", "mode": "lines", "name": "CPU iowait %", "yaxis": "y2",
                             "line": {"color": CPU_COLOR, "dash": "dot"},
                             "x": [sec(x) for x in xs], "y": [100 * ww / tt if tt else 0 for ww, tt in zip(w, tot)]})
        # the target's server processes on this host: their CPU as a share of the host's (samples of "server")
        servers = [pts for (probe, _, metric), pts in series.items() if probe == "server" and metric == "cpu_seconds"]
        if servers:
            used = [0.0] * len(xs)
            for pts in servers:
                px, py = _rates(pts)
                at = dict(zip(px, py))
                used = [u + at.get(x, 0.0) for u, x in zip(used, xs)]
            data.append({"type": "scatter", "mode": "lines", "name": "server processes CPU %", "yaxis": "y2",
                         "line": {"color": SERVER_CPU_COLOR},
                         "x": [sec(x) for x in xs],
                         "y": [100 * u * TICKS / tt if tt else 0 for u, tt in zip(used, tot)]})
    # the servers' control groups (probes/cgroup.py): the share of each second some of their tasks waited for I/O
    for (probe, group, metric), pts in sorted(series.items()):
        if probe == "server_group" and metric == "io_some_seconds":
            gx, gy = _rates(pts)
            if any(gy):
                data.append({"type": "scatter", "mode": "lines", "name": f"servers {group.rsplit('/', 1)[-1]} "
                             "waiting for I/O %", "yaxis": "y2", "line": {"color": SERVER_CPU_COLOR, "dash": "dot"},
                             "x": [sec(x) for x in gx], "y": [min(100.0, 100 * y) for y in gy]})
    # the server processes' resident memory (a level, not a rate): a leak or a cache that grows under load
    memory = [pts for (probe, _, metric), pts in series.items() if probe == "server" and metric == "rss_bytes"]
    if memory:
        level: dict[int, float] = defaultdict(float)
        for pts in memory:
            for t, v in pts:
                level[t] += v
        times = sorted(level)
        data.append({"type": "scatter", "mode": "lines", "name": "server processes memory MiB", "yaxis": "y3",
                     "line": {"color": MEMORY_COLOR, "dash": "dash"},
                     "x": [sec(t) for t in times], "y": [level[t] / MiB for t in times]})
    if not data:
        return None
    shapes, notes = _phase_shapes(cell, sec, _sample_gap(rows))
    spans = _phase_spans(cell)
    faults = [e for e in events if e.get("cell") == cell.cell_id and e.get("kind") in FAULT_EVENTS]
    for e in faults:  # events carry wall-clock times: mark them at the end of the phase they name
        at = max((sp[1] for (ph, _), sp in spans.items() if ph == (e.get("phase") or "").split(" #")[0]),
                 default=rows[-1][0])
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": sec(at), "x1": sec(at), "y0": 0,
                       "y1": 1, "line": {"color": "#d62728", "width": 2, "dash": "dash"}})
        notes.append({"x": sec(at), "y": 0.95, "xref": "x", "yref": "paper", "showarrow": True,
                      "text": f"✗ {e['kind']}", "hovertext": e.get("message") or "", "font": {"color": "#d62728"}})
    where = f" on host {host}" if host else ""
    more = f" ({left_out} more host{'s' if left_out > 1 else ''} sampled, not drawn)" if left_out else ""
    title = (f"cell {cell.cell_id}: {cell.target} · {cell.workload} · {_clients(cell.clients)} "
             f"(rep. {cell.repetition + 1}) — probes per second{where}{more}")
    layout = _layout(title, "seconds since the cell's first sample", "MiB/s", shapes=shapes, annotations=notes,
                     yaxis={"title": {"text": "MiB/s"}, "rangemode": "tozero"},
                     yaxis2={"title": {"text": "CPU busy %"}, "overlaying": "y", "side": "right",
                             "range": [0, 100], "autorange": False, "tickmode": "linear", "dtick": 25},
                     legend={"orientation": "h", "y": -0.32})
    if memory:  # a third axis, on the left beside the rates'
        layout["yaxis3"] = {"title": {"text": "server memory MiB"}, "overlaying": "y", "side": "left",
                            "anchor": "free", "position": 0, "rangemode": "tozero", "showgrid": False}
        layout["xaxis"] = {**layout.get("xaxis", {}), "domain": [0.08, 1]}
    layout["margin"].update(r=70, t=90, b=90)
    return title, {"data": data, "layout": layout}


def _phase_spans(cell: CellRow) -> dict[tuple[str, int], list[int]]:
    """(phase, iteration) → [first start, last end] of all its clients (ns)."""
    spans: dict[tuple[str, int], list[int]] = {}
    for r in cell.records:
        span = spans.setdefault((r.phase, r.iteration), [r.start_ns, r.end_ns])
        span[0], span[1] = min(span[0], r.start_ns), max(span[1], r.end_ns)
    return spans


def _sample_gap(rows: list[tuple]) -> float:
    """The longest gap between two successive samples of a cell (ns): a phase shorter than it may fall
    between two samples, and the chart says so."""
    times = sorted({r[0] for r in rows})
    return max((b - a for a, b in zip(times, times[1:])), default=0)


PHASE_LABEL_ROWS = 3  # phase names stagger over this many heights, so neighbours never overlap


def _phase_shapes(cell: CellRow, sec: Any, gap: float = 0) -> tuple[list[dict], list[dict]]:
    """Shaded spans of a cell's phases (first start to last end of all clients) and their names, staggered over
    PHASE_LABEL_ROWS heights; a phase shorter than the longest gap between samples is marked "< 1 sample"."""
    shapes, notes = [], []
    for i, ((phase, iteration), (start, end)) in enumerate(sorted(_phase_spans(cell).items(), key=lambda kv: kv[1][0])):
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": sec(start), "x1": sec(end), "y0": 0,
                       "y1": 1, "fillcolor": "#1f77b4" if i % 2 == 0 else "#ff7f0e", "opacity": 0.08,
                       "line": {"width": 0}})
        short = gap and end - start < gap
        name = phase + (f" #{iteration + 1}" if iteration else "")
        notes.append({"x": sec(start), "y": 1.01 + 0.06 * (i % PHASE_LABEL_ROWS), "xref": "x", "yref": "paper",
                      "showarrow": False, "xanchor": "left", "yanchor": "bottom",
                      "text": name + (" (< 1 sample)" if short else ""),
                      "hovertext": f"{name}: {(end - start) / NS:.3g} s" + (
                          f", shorter than the {gap / NS:.3g} s between samples" if short else ""),
                      "font": {"size": 10}})
    return shapes, notes


def link_charts(cells: list[CellRow], samples: list[tuple], events: list[dict]) -> list[tuple[str, dict]]:
    """Each emulated host's link per second while a cell ran (issue 17): MiB/s received and sent, its rate
    limit as a dashed line (a saturated link runs along it), drops per second and the tbf queue (right axis), and
    what ran on the host — its control group's CPUs used and the share of each second its tasks waited for I/O
    (a third axis, left).

    One chart per configuration (its first repetition with link samples), at most MAX_TIMELINES."""
    from ..analysis.links import DROPS, link_series, network_event

    out = []
    for cell, rows in _first_sampled(cells, samples, probe="link"):
        if len(out) >= MAX_TIMELINES:
            break
        t_zero = min(r[0] for r in rows)

        def sec(t: float) -> float:
            return (t - t_zero) / NS

        links = (network_event([e for e in events if e.get("cell") == cell.cell_id]) or {}).get("links") or {}
        data, shapes = [], []
        work = False
        end = max(r[0] for r in rows)
        for i, (host, metrics) in enumerate(link_series(rows).items()):
            color = GROUP_COLORS[i % len(GROUP_COLORS)]
            for metric, dash in (("rx_bytes", "solid"), ("tx_bytes", "dot")):
                if metric in metrics:
                    xs, ys = _rates(metrics[metric])
                    data.append({"type": "scatter", "mode": "lines+markers", "name": f"link {host} {metric[:2]} MiB/s",
                                 "x": [sec(x) for x in xs], "y": [y / MiB for y in ys],
                                 "line": {"color": color, "dash": dash}})
            drops = [metrics[k] for k in DROPS if k in metrics]
            if drops:
                total = [(t, sum(_at_time(d, t) for d in drops)) for t, _ in drops[0]]
                xs, ys = _rates(total)
                if any(ys):
                    data.append({"type": "bar", "name": f"link {host} drops/s", "yaxis": "y2", "opacity": 0.5,
                                 "x": [sec(x) for x in xs], "y": ys, "marker": {"color": color}})
            if "tbf_backlog_bytes" in metrics:
                pts = metrics["tbf_backlog_bytes"]
                data.append({"type": "scatter", "mode": "lines", "name": f"link {host} queue KiB", "yaxis": "y2",
                             "x": [sec(t) for t, _ in pts], "y": [v / 1024 for _, v in pts],
                             "line": {"color": color, "dash": "dashdot", "width": 1}})
            for metric, label, dash in (("cpu_seconds", "CPUs used", "solid"), ("io_some_seconds", "I/O wait", "dot")):
                if metric in metrics:  # what ran on the host (its control group): a third axis, CPUs and a share
                    xs, ys = _rates(metrics[metric])
                    if any(ys):
                        work = True
                        data.append({"type": "scatter", "mode": "lines", "name": f"host {host} {label}",
                                     "yaxis": "y3", "x": [sec(x) for x in xs], "y": ys,
                                     "line": {"color": color, "dash": dash, "width": 1}})
            rate = (links.get(host) or {}).get("rate")
            if rate:
                shapes.append({"type": "line", "xref": "x", "yref": "y", "x0": 0, "x1": sec(end), "y0": rate / MiB,
                               "y1": rate / MiB, "line": {"color": color, "width": 1, "dash": "dash"}})
                data.append({"type": "scatter", "mode": "lines", "name": f"link {host} rate {rate / MiB:.4g} MiB/s",
                             "x": [0, sec(end)], "y": [rate / MiB, rate / MiB],
                             "line": {"color": color, "width": 1, "dash": "dash"}})
        if not data:
            continue
        spans, notes = _phase_shapes(cell, sec)
        title = (f"cell {cell.cell_id}: {cell.target} · {cell.workload} · {_clients(cell.clients)} "
                 f"(rep. {cell.repetition + 1}) — emulated links per second")
        layout = _layout(title, "seconds since the cell's first sample", "MiB/s", shapes=spans + shapes,
                         annotations=notes, yaxis2={"title": {"text": "drops/s · queue KiB"}, "overlaying": "y",
                                                    "side": "right", "rangemode": "tozero"})
        layout["margin"]["r"] = 70
        if work:  # the hosts' CPUs used and I/O wait share, on the left beside the rates
            layout["yaxis3"] = {"title": {"text": "CPUs used · I/O wait share"}, "overlaying": "y", "side": "left",
                                "anchor": "free", "position": 0, "rangemode": "tozero", "showgrid": False}
            layout["xaxis"] = {**layout.get("xaxis", {}), "domain": [0.08, 1]}
        out.append((title, {"data": data, "layout": layout}))
    return out


def _at_time(points: list[tuple[int, float]], t: int) -> float:
    """A counter's last value at or before ``t`` (0 before its first sample)."""
    value = 0.0
    for tt, v in points:
        if tt > t:
            break
        value = v
    return value


def fault_charts(cells: list[Any]) -> list[tuple[str, dict]]:
    """For each phase a fault struck or that ran through failed operations: all clients' MiB/s per second and
    the failed operations per second, each fault's interval shaded (red: in force; grey: a fault that did not
    happen or could not act), from the phase's aggregate timeline (analysis/timeline.py)."""
    out = []
    for cf in cells:
        for ph in cf.phases:
            tl = ph.timeline or {}
            if not tl.get("faults") and not tl.get("errors"):
                continue
            if len(out) >= MAX_TIMELINES:
                return out
            xs = [s + 0.5 for s in range(len(tl["bytes"]))]  # each second's count at its middle
            widths = [min(1.0, tl["seconds"] - s) for s in range(len(tl["bytes"]))]
            data = [{"type": "scatter", "mode": "lines+markers", "name": "all clients MiB/s", "x": xs,
                     "y": [b / MiB / w if w > 0 else 0 for b, w in zip(tl["bytes"], widths)]}]
            for kind, per_second in sorted((tl.get("errors") or {}).items()):
                data.append({"type": "bar", "name": f"failed {kind}/s", "yaxis": "y2", "opacity": 0.6,
                             "x": xs[:len(per_second)], "y": per_second})
            shapes, notes = [], []
            for f in tl.get("faults") or []:
                start = f.get("start_s")
                if start is None:
                    continue
                end = f.get("end_s") if f.get("end_s") is not None else start
                struck = f["kind"] == "fault"
                shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": start, "x1": max(end, start + 0.02),
                               "y0": 0, "y1": 1, "fillcolor": "#d62728" if struck else "#7f7f7f", "opacity": 0.15,
                               "line": {"color": "#d62728" if struck else "#7f7f7f", "width": 1}})
                notes.append({"x": start, "y": 1.02, "xref": "x", "yref": "paper", "showarrow": False,
                              "xanchor": "left", "text": f"{f.get('action')} {f.get('server') or ''}".strip(),
                              "hovertext": f.get("message") or "", "font": {"size": 10, "color": "#d62728"}})
            c = cf.cell
            title = (f"cell {c.cell_id}: {c.target} · {c.workload} · {_clients(c.clients)} · {ph.phase}"
                     + (f" #{ph.iteration + 1}" if ph.iteration else "") + " — throughput and failures per second")
            layout = _layout(title, "seconds since the phase's start", "MiB/s", shapes=shapes, annotations=notes,
                             height=320, yaxis={"title": {"text": "MiB/s"}, "rangemode": "tozero"},
                             yaxis2={"title": {"text": "failed operations/s"}, "overlaying": "y", "side": "right",
                                     "rangemode": "tozero"})
            layout["title"]["font"] = {"size": 12}
            out.append((title, {"data": data, "layout": layout}))
    return out


# ---- the overview: one compact figure per question, every system side by side (issue 19) ----------------------

SYSTEM_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
                 "#7f7f7f")
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "cross")
CPU_COLOR = "#2ca02c"  # the CPU line of every probe timeline
SERVER_CPU_COLOR = "#9467bd"  # the target's server processes' share of the CPU
MEMORY_COLOR = "#8c564b"  # the target's server processes' resident memory
TICKS = os.sysconf("SC_CLK_TCK")  # jiffies per second, the unit of /proc/stat's CPU counters
PANEL_HEIGHT = 250
MAX_PANELS = 12
MAX_FAIRNESS_ROWS = 32
X_OF_KIND = {"copy": "workers", "jobs": "jobs"}  # what a client is called on a workload's x axis


def system_colors(systems: list[str]) -> dict[str, str]:
    """One colour per system (target), the same on every figure of the page."""
    return {s: SYSTEM_COLORS[i % len(SYSTEM_COLORS)] for i, s in enumerate(systems)}


def _multiples(title: str, panels: list[dict[str, Any]], columns: int = 3, **more: Any) -> dict[str, Any]:
    """Small multiples in one plotly figure: a grid of panels, each {"title", "data", "x", "y"} (axis dicts),
    with the panel's title above it. The legend names each trace once (its ``legendgroup``)."""
    panels = panels[:MAX_PANELS]
    columns = max(1, min(columns, len(panels)))
    rows = -(-len(panels) // columns)
    gap_x, gap_y = 0.07, 0.5 / rows * 0.45 if rows > 1 else 0.0
    layout: dict[str, Any] = {"title": {"text": title}, "height": 90 + PANEL_HEIGHT * rows,
                              "margin": {"t": 70, "r": 20, "b": 50, "l": 70}, "showlegend": True,
                              "legend": {"orientation": "h", "y": -0.35 / rows if rows else -0.2}, "annotations": [],
                              **more}
    data = []
    shown: set[str] = set()
    for i, p in enumerate(panels):
        r, c = divmod(i, columns)
        n = "" if i == 0 else str(i + 1)
        x0, x1 = c / columns + (gap_x / 2 if c else 0), (c + 1) / columns - (gap_x / 2 if c < columns - 1 else 0)
        y1 = 1 - r / rows - (gap_y / 2 if r else 0)
        y0 = 1 - (r + 1) / rows + (gap_y / 2 if r < rows - 1 else 0)
        layout[f"xaxis{n}"] = {**p["x"], "domain": [x0, x1], "anchor": f"y{n}", "automargin": True}
        layout[f"yaxis{n}"] = {**p["y"], "domain": [y0, y1], "anchor": f"x{n}", "automargin": True}
        layout["annotations"].append({"text": p["title"], "x": (x0 + x1) / 2, "y": y1, "xref": "paper",
                                      "yref": "paper", "xanchor": "center", "yanchor": "bottom", "showarrow": False,
                                      "font": {"size": 12}})
        for t in p["data"]:
            group = t.get("legendgroup", t.get("name"))
            data.append({**t, "xaxis": f"x{n}", "yaxis": f"y{n}", "legendgroup": group,
                         "showlegend": group not in shown})
            shown.add(group)
    return {"data": data, "layout": layout}


def _state_ticks(series: list[dict[str, Any]], along: str) -> dict[str, Any]:
    """The states' axis (``degraded``) names its ticks: 0, 1 … parts down, then healing."""
    if along != "degraded":
        return {}
    named = dict(sorted({p["x"]: str(p.get(along, p["x"])) for s in series for p in s["series"]}.items()))
    return {"tickvals": list(named), "ticktext": list(named.values())}


def _axis(text: str, log: bool = False, **more: Any) -> dict[str, Any]:
    """An axis from zero, or a log axis that says so in its title."""
    if log:
        return {"title": {"text": f"{text} (log scale)"}, "type": "log", **more}
    return {"title": {"text": text}, "rangemode": "tozero", **more}


def _series_name(s: dict[str, Any]) -> str:
    """The system, its client group and every other factor value it holds (sizes as sizes: 64KiB)."""
    from .terminal import fmt_factors

    factors = fmt_factors(s["kind"], s["factors"])
    return " ".join([s["target"], *([f"group {s['group']}"] if s.get("group") else []), *([factors] if factors else [])])


def overview_scaling(scaling: list[dict[str, Any]], colors: dict[str, str]) -> list[tuple[str, dict]]:
    """Per workload and what its x is (clients, or a swept setting: servers, rtt …): one figure of small
    multiples, a panel per phase (and per events/s or CPU-efficiency line), every system in its colour, other
    factor values (transfer size …) as dashes, each named in the legend. Metadata is left to its own figure."""
    by_figure: dict[tuple, list[dict]] = defaultdict(list)
    for s in scaling:
        if s["kind"] == "metadata" and s.get("along", "clients") == "clients":
            continue
        by_figure[(s["workload"], s.get("along", "clients"))].append(s)
    out = []
    for (workload, along), series in by_figure.items():
        kind = series[0]["kind"]
        unit = workload_class(kind).report.scaling.unit
        scale, x_title, _ = _x_of(along)
        x_title = x_title.removesuffix(" (log scale)")  # the overview decides its own scale below, and says it
        if along == "clients":
            x_title = X_OF_KIND.get(kind, "clients")
        xs = [p["x"] * scale for s in series for p in s["series"]]
        log_x = along in ("clients", "servers") and xs and min(xs) > 0 and max(xs) / min(xs) >= 8
        variants = list(dict.fromkeys(tuple(sorted((k, str(v)) for k, v in s["factors"].items())) for s in series))
        panels: dict[tuple, dict[str, Any]] = {}
        for s in series:
            v = variants.index(tuple(sorted((k, str(v)) for k, v in s["factors"].items())))
            style = {"color": colors.get(s["target"], "#444"), "dash": DASHES[v % len(DASHES)]}
            name = _series_name(s)
            for key, label in (("aggregate", f"aggregate {unit}"), *LINE_FIGURES.items()):
                pts = [p for p in s["series"] if p.get(key) is not None]
                if not pts:
                    continue
                ticks = sorted(set(xs))
                panel = panels.setdefault((s["phase"], key), {
                    "title": f"{s['phase']}: {label}", "data": [],
                    "x": _axis(x_title, log=bool(log_x), **(({"tickvals": ticks} if len(ticks) <= 12 else {})
                                                            | _state_ticks(series, along))),
                    "y": _axis(label)})
                trace = {"type": "scatter", "mode": "lines+markers", "name": name, "legendgroup": name,
                         "x": [p["x"] * scale for p in pts], "y": [p[key] for p in pts], "line": style,
                         "marker": {"color": style["color"], "symbol": SYMBOLS[v % len(SYMBOLS)]}}
                if key == "aggregate":
                    trace["error_y"] = {"type": "data", "array": [p["aggregate_stderr"] or 0 for p in pts],
                                        "visible": True}
                panel["data"].append(trace)
        if not panels:
            continue
        what = x_title if along == "clients" else along
        title = f"{workload} ({kind}): {unit} vs {what}, every system side by side"
        out.append((title, _multiples(title, list(panels.values()))))
    return out


def overview_metadata(rates: list[dict[str, Any]], colors: dict[str, str]) -> list[tuple[str, dict]]:
    """Metadata rates per operation, all systems side by side, on a log axis (seed 000 fig. 7): rates spanning
    decades stay visible. One figure per metadata workload."""
    from .terminal import fmt_factors

    by_workload: dict[str, list[dict]] = defaultdict(list)
    for r in rates:
        by_workload[r["workload"]].append(r)
    out = []
    for workload, entries in by_workload.items():
        variants = list(dict.fromkeys(tuple(sorted((k, str(v)) for k, v in e["factors"].items())) for e in entries))
        data = []
        for e in entries:
            v = variants.index(tuple(sorted((k, str(x)) for k, x in e["factors"].items())))
            name = " ".join([e["target"], *([f] if (f := fmt_factors(e["kind"], e["factors"])) else [])])
            phases = list(e["phases"])
            data.append({"type": "bar", "name": name, "x": phases, "y": [e["phases"][p]["mean"] for p in phases],
                         "error_y": {"type": "data", "array": [e["phases"][p]["stderr"] or 0 for p in phases],
                                     "visible": True},
                         "text": [f"{e['phases'][p]['clients']} cl." for p in phases], "textposition": "none",
                         "marker": {"color": colors.get(e["target"], "#444"),
                                    "pattern": {"shape": ["", "/", ".", "x", "-", "+"][v % 6]}}})
        title = f"{workload} (metadata): best ops/s per operation over the client counts"
        out.append((title, {"data": data, "layout": _layout(title, "operation", "ops/s (log scale)", barmode="group",
                                                            height=340, yaxis=_axis("ops/s", log=True, dtick=1))}))
    return out


def overview_fairness(rows: list[dict[str, Any]]) -> list[tuple[str, dict]]:
    """Fairness of every multi-client phase in one figure (seed 000 figs. 10–13): each client a dot — its rate
    (top: a panel per unit — MiB/s, MB/s, ops/s) and its time relative to the fastest client (bottom) —
    coloured by client group, outliers ringed in red."""
    if not rows:
        return []
    from .terminal import fmt_factors

    capped = len(rows) > MAX_FAIRNESS_ROWS  # more phases than a figure can show: the first ones, and it says so
    rows = rows[:MAX_FAIRNESS_ROWS]
    targets, workloads = len({r["target"] for r in rows}) > 1, len({r["workload"] for r in rows}) > 1
    label = [" · ".join([*([r["target"]] if targets else []), *([r["workload"]] if workloads else []), r["phase"],
                         f"{r['clients']} cl.",
                         *([f] if (f := fmt_factors(r["kind"], r["factors"])) else [])]) for r in rows]
    groups = list(dict.fromkeys(c["group"] for r in rows for c in r["per_client"])) or [None]
    panels = []
    for unit in ("MiB/s", "MB/s", "ops/s"):
        mine = [(lab, r) for lab, r in zip(label, rows) if r["unit"] == unit]
        if mine:
            panels.append({"title": f"per-client {unit}", "key": "rate", "rows": mine, "y": _axis(unit)})
    panels.append({"title": "time relative to the fastest client", "key": "relative_time",
                   "rows": list(zip(label, rows)), "y": _axis("time / fastest client's (ratio)")})
    built = []
    for p in panels:
        data = []
        for gi, g in enumerate(groups):
            xs, ys, rings, text = [], [], [], []
            for lab, r in p["rows"]:
                for c in r["per_client"]:
                    if c["group"] == g and c[p["key"]] is not None:
                        xs.append(lab)
                        ys.append(c[p["key"]])
                        rings.append(2 if c["outlier"] else 0)
                        text.append(f"client {c['rank']}" + (" · outlier" if c["outlier"] else ""))
            name = f"group {g}" if g else "client"
            data.append({"type": "scatter", "mode": "markers", "name": name, "legendgroup": name, "x": xs, "y": ys,
                         "text": text, "marker": {"color": GROUP_COLORS[gi % len(GROUP_COLORS)], "size": 7,
                                                  "line": {"color": "#d62728", "width": rings}}})
        built.append({"title": p["title"], "data": data, "y": p["y"],
                      "x": {"title": {"text": "phase (configuration)" if targets or workloads else "phase · clients · factors",
                                      "standoff": 4},
                            "type": "category", "tickfont": {"size": 9}, "tickangle": -50}})
    phases = f"the first {MAX_FAIRNESS_ROWS} multi-client phases" if capped else "every multi-client phase"
    title = f"Fairness: every client of {phases} (first repetition), coloured by client group"
    fig = _multiples(title, built, columns=len(built))
    fig["layout"]["height"] = 440
    fig["layout"]["legend"] = {"orientation": "h", "x": 1, "xanchor": "right", "y": 1.12}
    return [(title, fig)]


def overview_efficiency(rows: list[dict[str, Any]], colors: dict[str, str]) -> list[tuple[str, dict]]:
    """Achieved ÷ declared limit (a declared device or network rate, the interface's link speed, the emulated
    links): how close each system came to what its hardware allows; over 100 % is not physical."""
    if not rows:
        return []
    from .terminal import fmt_factors

    names = [f"{r['target']} · {r['workload']} · {r['phase']}"
             + (f" ({f})" if (f := fmt_factors(r["kind"], r["factors"])) else "") for r in rows]
    data = []
    for target in dict.fromkeys(r["target"] for r in rows):
        mine = [(n, r) for n, r in zip(names, rows) if r["target"] == target]
        data.append({"type": "bar", "name": target, "x": [n for n, _ in mine], "y": [r["ratio"] * 100 for _, r in mine],
                     "marker": {"color": colors.get(target, "#444")},
                     "text": [f"{r['achieved_Bps'] / MiB:.4g} of {r['limit_Bps'] / MiB:.4g} MiB/s ({r['source']})"
                              for _, r in mine], "textposition": "none",
                     "hovertemplate": "%{x}: %{y:.1f} %<br>%{text}<extra></extra>"})
    title = "Efficiency: best aggregate ÷ the limit it must respect"
    layout = _layout(title, "system · workload · phase", "% of limit", barmode="group", height=380,
                     yaxis=_axis("achieved ÷ limit (%)"),
                     xaxis={"title": {"text": "system · workload · phase"}, "automargin": True, "tickangle": -30,
                            "tickfont": {"size": 10}},
                     shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": 100, "y1": 100,
                              "line": {"color": "#b00020", "dash": "dash", "width": 1}}])
    return [(title, {"data": data, "layout": layout})]
