"""The report's charts as plotly figure dicts (data + layout), built from the same figures as the tables.

Plain dicts, not plotly.graph_objects: they go into the page as JSON and plotly.js draws them; Python plotly
only supplies that bundled plotly.js. Each function returns a list of ``(title, figure)``; a section with
nothing to show returns none.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..analysis.figures import CellFigures, ConfigSummary
from ..analysis.links import link_text
from ..store import CellRow
from ..workloads import workload_class
from ..workloads.base import Chart

NS = 1e9
MiB = 2**20
FAULT_EVENTS = ("error", "timeout", "died", "interrupted", "cell-failed")
MAX_TIMELINES = 24
MAX_FAIRNESS = 24


def _layout(title: str, x: str, y: str, **more: Any) -> dict[str, Any]:
    return {"title": {"text": title}, "xaxis": {"title": {"text": x}}, "yaxis": {"title": {"text": y}},
            "margin": {"t": 50, "r": 20, "b": 50, "l": 70}, "height": 380, "legend": {"orientation": "h", "y": -0.2},
            **more}


def _factors(factors: dict[str, Any]) -> str:
    return " ".join(f"{k}={link_text(k, v)}" for k, v in factors.items() if k != "clients")


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
        data = []
        for s in series:
            pts = [p for p in s["series"] if p["aggregate"] is not None]
            name = " ".join([s["target"], *([f"group {s['group']}"] if s.get("group") else []),
                             *(f"{k}={link_text(k, v)}" for k, v in s["factors"].items())])
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
                                       *(f"{k}={link_text(k, v)}" for k, v in s["factors"].items())]),
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
    return 1.0, along, {"title": {"text": along}, "type": "log", "dtick": 0.30103}


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
            unit = "MiB/s" if f["unit"] == "MiBps" else "ops/s"
            outliers = set(f["outliers"])
            label = f"{cf.cell.target} · {cf.cell.workload} · {ph.phase} · {cf.cell.clients} clients"
            factors = _factors(cf.cell.factors)
            if factors:
                label += f" ({factors})"
            group_of = {row["rank"]: row.get("group") for row in f["sorted"]}
            names = list(dict.fromkeys(g for g in group_of.values() if g))
            rows = {row["rank"]: row for row in f["sorted"]}
            rank_order = [row["rank"] for row in f["sorted"]]
            rel = sorted(((int(r), t) for r, t in f["relative_time"].items()), key=lambda rt: rt[1])
            time_order = [r for r, _ in rel]
            times_of = dict(rel)
            rates, times = [], []
            for name in names or [None]:  # one trace per client group: its colour and its legend entry
                mine = [r for r in rank_order if group_of[r] == name] if name else rank_order
                color = GROUP_COLORS[names.index(name) % len(GROUP_COLORS)] if name else "#1f77b4"
                rates.append({
                    "type": "bar", "name": f"group {name}" if name else f"per-client {unit}",
                    "x": [f"client {r}" for r in mine], "y": [rows[r][f["unit"]] for r in mine],
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
            per_group = "".join(f", {g} Jain {b['jain']:.3f}" for g, b in (f.get("groups") or {}).items()
                                if b and b.get("jain") is not None)
            title = f"{label}: per-client {unit}, sorted (Jain {f['jain']:.3f}{per_group}, spread {f['spread']:.1%})"
            order = {"categoryorder": "array", "categoryarray": [f"client {r}" for r in rank_order]}
            out.append((title, {"data": rates, "layout": _layout(title, "client", unit, barmode="overlay",
                                                                 xaxis={"title": {"text": "client"}, **order})}))
            title = f"{label}: time relative to the fastest client"
            order = {"categoryorder": "array", "categoryarray": [f"client {r}" for r in time_order]}
            out.append((title, {"data": times, "layout": _layout(title, "client", "time / fastest client's",
                                                                 barmode="overlay",
                                                                 xaxis={"title": {"text": "client"}, **order})}))
    return out


GROUP_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def workload_charts(kind: str, summary: list[ConfigSummary]) -> list[tuple[str, dict]]:
    """The charts workload ``kind`` declares (``Workload.report.charts``), over its configurations."""
    out = []
    for chart in workload_class(kind).report.charts:
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
        named = " · ".join(str(r.factors.get(g, r.params.get(g, ""))) for g in chart.group)
        others = _factors({k: v for k, v in r.factors.items() if k not in chart.group})
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
    names = [f"{r.target} · {r.workload}{(' ' + _factors(r.factors)) if _factors(r.factors) else ''} · "
             f"{r.clients} cl." for r in rows]
    label = chart.y or chart.figure.unit
    data = [{"type": "bar", "name": label, "x": names, "y": [v.mean if v else None for v in values],
             "error_y": {"type": "data", "array": [(v.stderr or 0) if v else 0 for v in values], "visible": True}}]
    title = f"{kind}: {chart.title}"
    return [(title, {"data": data, "layout": _layout(title, "configuration", label)})]


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
        out.append((title, {"data": data, "layout": _layout(title, "configuration · phase", "µs (log)", barmode="group",
                                                            yaxis={"title": {"text": "µs"}, "type": "log"})}))
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

    One chart per configuration (its first repetition with samples), at most MAX_TIMELINES."""
    out = []
    for cell, rows in _first_sampled(cells, samples):
        if len(out) >= MAX_TIMELINES:
            break
        t_zero = rows[0][0]
        series: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
        for t, probe, device, metric, value in rows:
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
                         "x": [sec(x) for x in xs], "y": [100 * bb / tt if tt else 0 for bb, tt in zip(b, tot)]})
        shapes, notes = _phase_shapes(cell, sec)
        spans = _phase_spans(cell)
        faults = [e for e in events if e.get("cell") == cell.cell_id and e.get("kind") in FAULT_EVENTS]
        for e in faults:  # events carry wall-clock times: mark them at the end of the phase they name
            at = max((sp[1] for (ph, _), sp in spans.items() if ph == (e.get("phase") or "").split(" #")[0]),
                     default=rows[-1][0])
            shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": sec(at), "x1": sec(at), "y0": 0,
                           "y1": 1, "line": {"color": "#d62728", "width": 2, "dash": "dash"}})
            notes.append({"x": sec(at), "y": 0.95, "xref": "x", "yref": "paper", "showarrow": True,
                          "text": f"✗ {e['kind']}", "hovertext": e.get("message") or "", "font": {"color": "#d62728"}})
        if not data:
            continue
        title = (f"cell {cell.cell_id}: {cell.target} · {cell.workload} · {cell.clients} clients "
                 f"(rep. {cell.repetition + 1}) — probes per second")
        layout = _layout(title, "seconds since the cell's first sample", "MiB/s", shapes=shapes, annotations=notes,
                         yaxis2={"title": {"text": "CPU busy %"}, "overlaying": "y", "side": "right",
                                 "range": [0, 100], "autorange": False})
        layout["margin"]["r"] = 70
        out.append((title, {"data": data, "layout": layout}))
    return out


def _phase_spans(cell: CellRow) -> dict[tuple[str, int], list[int]]:
    """(phase, iteration) → [first start, last end] of all its clients (ns)."""
    spans: dict[tuple[str, int], list[int]] = {}
    for r in cell.records:
        span = spans.setdefault((r.phase, r.iteration), [r.start_ns, r.end_ns])
        span[0], span[1] = min(span[0], r.start_ns), max(span[1], r.end_ns)
    return spans


def _phase_shapes(cell: CellRow, sec: Any) -> tuple[list[dict], list[dict]]:
    """Shaded spans of a cell's phases (first start to last end of all clients) and their names."""
    shapes, notes = [], []
    for i, ((phase, iteration), (start, end)) in enumerate(sorted(_phase_spans(cell).items(), key=lambda kv: kv[1][0])):
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": sec(start), "x1": sec(end), "y0": 0,
                       "y1": 1, "fillcolor": "#1f77b4" if i % 2 == 0 else "#ff7f0e", "opacity": 0.08,
                       "line": {"width": 0}})
        notes.append({"x": sec(start), "y": 1.02, "xref": "x", "yref": "paper", "showarrow": False,
                      "xanchor": "left", "text": phase + (f" #{iteration + 1}" if iteration else ""),
                      "font": {"size": 10}})
    return shapes, notes


def link_charts(cells: list[CellRow], samples: list[tuple], events: list[dict]) -> list[tuple[str, dict]]:
    """Each emulated host's link per second while a cell ran (issue 17): MiB/s received and sent, its rate
    limit as a dashed line (a saturated link runs along it), drops per second and the tbf queue (right axis).

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
        title = (f"cell {cell.cell_id}: {cell.target} · {cell.workload} · {cell.clients} clients "
                 f"(rep. {cell.repetition + 1}) — emulated links per second")
        layout = _layout(title, "seconds since the cell's first sample", "MiB/s", shapes=spans + shapes,
                         annotations=notes, yaxis2={"title": {"text": "drops/s · queue KiB"}, "overlaying": "y",
                                                    "side": "right", "rangemode": "tozero"})
        layout["margin"]["r"] = 70
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
            title = (f"cell {c.cell_id}: {c.target} · {c.workload} · {c.clients} clients · {ph.phase}"
                     + (f" #{ph.iteration + 1}" if ph.iteration else "") + " — throughput and failures per second")
            layout = _layout(title, "seconds since the phase's start", "MiB/s", shapes=shapes, annotations=notes,
                             yaxis2={"title": {"text": "failed operations/s"}, "overlaying": "y", "side": "right",
                                     "rangemode": "tozero"})
            out.append((title, {"data": data, "layout": layout}))
    return out
