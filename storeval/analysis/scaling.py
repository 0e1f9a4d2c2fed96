"""Scaling: an aggregate figure against the number of clients, and where it stops growing.

Rules, stated so a reader can check them:
* saturation point = the smallest client count whose mean aggregate reaches 90 % of the largest one;
* workers to peak (the copy study's figure) = the smallest client count whose mean aggregate reaches
  95 % of the largest one — where adding workers stops paying.

Which figure a workload's lines follow (MiB/s, ops/s …) it declares itself (``Workload.report.scaling``).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .figures import CellFigures
from ..stats import summarize
from ..workloads import workload_class

SATURATION = 0.90
PEAK = 0.95


def first_reaching(series: list[tuple[int, float]], fraction: float) -> int | None:
    """Smallest x whose y reaches ``fraction`` of the largest y."""
    if not series:
        return None
    top = max(y for _, y in series)
    return min(x for x, y in series if y >= fraction * top)


def scaling(cells: list[CellFigures], along: str = "clients") -> list[dict[str, Any]]:
    """Per target, workload, phase and other factor values: the aggregate figure against ``along`` — the number of
    clients, or a numeric system setting such as ``servers`` (seed 002's throughput vs storage servers)."""
    groups: dict[tuple, dict[Any, list[tuple[float | None, float | None]]]] = defaultdict(lambda: defaultdict(list))
    meta: dict[tuple, dict[str, Any]] = {}
    for cf in cells:
        x = cf.cell.clients if along == "clients" else cf.cell.factors.get(along)
        if isinstance(x, bool) or not isinstance(x, (int, float)):
            continue
        other = {k: v for k, v in cf.cell.factors.items() if k not in ("clients", along)}
        if along != "clients":
            other["clients"] = cf.cell.clients
        for ph in cf.phases:
            if ph.status != "ok":
                continue
            key = (cf.cell.target, cf.cell.workload, ph.phase, tuple(sorted((k, str(v)) for k, v in other.items())))
            meta[key] = {"target": cf.cell.target, "workload": cf.cell.workload, "kind": cf.cell.kind, "phase": ph.phase,
                         "factors": other, "along": along}
            declared = workload_class(cf.cell.kind).report.scaling
            groups[key][x].append((declared.aggregate(ph), declared.per_client(ph)))
    out = []
    for key, by_x in groups.items():
        if len(by_x) < 2:
            continue
        figure = workload_class(meta[key]["kind"]).report.scaling.figure
        series = []
        for n in sorted(by_x):
            values = by_x[n]
            agg = summarize([v[0] for v in values])
            per = summarize([v[1] for v in values if v[1] is not None])
            series.append({along: n, "x": n, "aggregate": agg.mean if agg else None,
                           "aggregate_stderr": agg.stderr if agg else None,
                           "per_client": per.mean if per else None, "repetitions": len(values)})
        points = [(s["x"], s["aggregate"]) for s in series if s["aggregate"] is not None]
        out.append({**meta[key], "figure": figure, "series": series,
                    "saturation_clients": first_reaching(points, SATURATION),
                    "workers_to_peak": first_reaching(points, PEAK),
                    "peak_clients": max(points, key=lambda p: p[1])[0] if points else None,
                    "rule": f"saturation: fewest {along} reaching {SATURATION:.0%} of the best aggregate; "
                            f"workers to peak: fewest reaching {PEAK:.0%}"})
    return out


def along_settings(cells: list[CellFigures], study: dict[str, Any]) -> list[dict[str, Any]]:
    """The aggregate against every numeric system setting the run's study swept (``servers`` first): seed 002's
    throughput vs the number of storage servers, or vs a stripe count."""
    names: list[str] = []
    for target in (study.get("targets") or {}).values():
        for k, v in ((target.get("system") or {}).get("settings") or {}).items():
            if isinstance(v, list) and k not in names:
                names.append(k)
    names.sort(key=lambda k: k != "servers")
    return [s for name in names for s in scaling(cells, along=name)]
