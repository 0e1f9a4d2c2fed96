"""Scaling: an aggregate figure against the number of clients, and where it stops growing.

Rules, stated so a reader can check them:
* saturation point = the smallest client count whose mean aggregate reaches 90 % of the largest one;
* workers to peak (the copy study's figure) = the smallest client count whose mean aggregate reaches
  95 % of the largest one — where adding workers stops paying.

Which figure a workload's lines follow (MiB/s, ops/s …) it declares itself (``Workload.report.scaling``).

Beside the number of clients and swept system settings (issue 16), the x may be a client group's count
(``clients.<group>``, issue 17: one series per group of the whole phase's aggregate, and one of the group's
own aggregate) or a swept link setting (``rtt``, ``rate``, ``jitter``, ``loss``: seed 003's skim over a WAN).
Link settings are charted by their value (seconds, bytes/s, fraction; text such as ``12ms`` is read) and
labelled as a study writes them (``12ms``). Each point also carries the mean of the workload figures LINE_FIGURES
(the skim's events/s and CPU efficiency) when the phase has them.

Every line names what it holds fixed, so two lines of one phase are never told apart by their position alone:
``label`` is the other factors' values as a study writes them (``transfer_size=64KiB``, sizes as sizes,
:func:`factors_text`), with the client group it follows; ``legend`` is the target and that label, ``unit`` the
figure's unit. The terminal, the JSON and the HTML report print these.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .figures import CellFigures
from .links import link_text
from ..core.system import DEGRADED, HEALING
from ..stats import summarize
from ..workloads import WORKLOADS, workload_class
from ..workloads.base import param_text

SATURATION = 0.90
PEAK = 0.95
LINK_FACTORS = ("rtt", "rate", "jitter", "loss")
LINE_FIGURES = ("events_per_s", "cpu_efficiency")


def factor_text(kind: str | None, key: str, value: Any) -> str:
    """One factor's value as a study writes it: a workload parameter of ``kind`` as its type says (sizes as
    ``64KiB``, durations as ``100ms``, lists joined by ``+``), a link setting as ``12ms``/``1Gbit/s``/``0.1%``,
    anything else (client counts, system settings) as it is."""
    if key in LINK_FACTORS:
        return link_text(key, value)
    model = WORKLOADS[kind].Params if kind is not None and kind in WORKLOADS else None
    if model is not None and key in model.model_fields:
        return param_text(model, key, value)
    if isinstance(value, (list, tuple)):
        return "+".join(map(str, value))
    return str(value)


def factors_text(kind: str | None, factors: dict[str, Any], sep: str = " ", skip: tuple[str, ...] = ("clients",)) -> str:
    """``transfer_size=64KiB rtt=12ms``: each factor (less ``skip``) named with its value (:func:`factor_text`)."""
    return sep.join(f"{k}={factor_text(kind, k, v)}" for k, v in factors.items() if k not in skip)


def held_label(s: dict[str, Any]) -> str:
    """What a scaling line holds fixed, in words: the other factors' values and the client group whose own
    aggregate it follows (``group external (its own aggregate); rtt=12ms``)."""
    text = factors_text(s.get("kind"), s["factors"], ", ", skip=())
    if s.get("group"):
        return f"group {s['group']} (its own aggregate)" + (f"; {text}" if text else "")
    return text


def numeric(along: str, value: Any) -> float | None:
    """The x of a factor value: numbers as they are, link settings written as text by their value."""
    from ..units import UnitError, parse_duration, parse_rate

    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if not isinstance(value, str) or along not in LINK_FACTORS:
        return None
    try:
        if along == "loss":
            text = value.strip()
            return float(text[:-1]) / 100 if text.endswith("%") else float(text)
        return parse_rate(value) if along == "rate" else parse_duration(value)
    except (ValueError, UnitError):
        return None


def _healing_x(cells: list[CellFigures]) -> int:
    """Where ``degraded=healing`` sits on the states' axis: after the most parts down (0 healthy, 1, 2 …)."""
    counts = [v for cf in cells for v in [cf.cell.factors.get(DEGRADED)] if isinstance(v, int) and not isinstance(v, bool)]
    return max(counts, default=0) + 1


def first_reaching(series: list[tuple[int, float]], fraction: float) -> int | None:
    """Smallest x whose y reaches ``fraction`` of the largest y."""
    if not series:
        return None
    top = max(y for _, y in series)
    return min(x for x, y in series if y >= fraction * top)


def scaling(cells: list[CellFigures], along: str = "clients", group: str | None = None,
            min_points: int = 2) -> list[dict[str, Any]]:
    """Per target, workload, phase and other factor values: the aggregate figure against ``along`` — the number of
    clients, a numeric system setting such as ``servers`` (seed 002's throughput vs storage servers), a client
    group's count ``clients.<group>`` or a link setting such as ``rtt``. ``group``: follow that client group's
    own aggregate instead of the whole phase's. ``min_points``: a line needs that many x values (the report's
    overview shows one client count too, so that the systems stand side by side even then)."""
    groups: dict[tuple, dict[Any, list[tuple]]] = defaultdict(lambda: defaultdict(list))
    meta: dict[tuple, dict[str, Any]] = {}
    labels: dict[Any, Any] = {}
    healing_x = _healing_x(cells) if along == DEGRADED else None
    for cf in cells:
        raw = cf.cell.clients if along == "clients" else cf.cell.factors.get(along)
        x = healing_x if healing_x is not None and raw == HEALING else numeric(along, raw)
        if x is None:
            continue
        labels[x] = link_text(along, raw) if along in LINK_FACTORS else raw
        other = {k: v for k, v in cf.cell.factors.items() if k not in ("clients", along)}
        if along != "clients" and not along.startswith("clients."):
            other["clients"] = cf.cell.clients
        for ph in cf.phases:
            if ph.status != "ok":
                continue
            if group is not None:
                if group not in ph.groups:
                    continue
                ph = ph.groups[group]
            key = (cf.cell.target, cf.cell.workload, ph.phase, tuple(sorted((k, str(v)) for k, v in other.items())))
            meta[key] = {"target": cf.cell.target, "workload": cf.cell.workload, "kind": cf.cell.kind, "phase": ph.phase,
                         "factors": other, "along": along, **({"group": group} if group is not None else {})}
            declared = workload_class(cf.cell.kind).report.scaling
            groups[key][x].append((declared.aggregate(ph), declared.per_client(ph),
                                   {k: ph.extra[k] for k in LINE_FIGURES if isinstance(ph.extra.get(k), (int, float))}))
    out = []
    for key, by_x in groups.items():
        if len(by_x) < min_points:
            continue
        declared = workload_class(meta[key]["kind"]).report.scaling
        figure = declared.figure
        series = []
        for n in sorted(by_x):
            values = by_x[n]
            agg = summarize([v[0] for v in values])
            per = summarize([v[1] for v in values if v[1] is not None])
            lines = {k: summarize([v[2][k] for v in values if k in v[2]]) for k in LINE_FIGURES}
            series.append({along: labels.get(n, n), "x": n, "aggregate": agg.mean if agg else None,
                           "aggregate_stderr": agg.stderr if agg else None,
                           "per_client": per.mean if per else None, "repetitions": len(values),
                           **{k: s.mean for k, s in lines.items() if s is not None}})
        points = [(s["x"], s["aggregate"]) for s in series if s["aggregate"] is not None]
        label = held_label(meta[key])
        if along == DEGRADED:  # states side by side: no saturation along them
            points = []
        out.append({**meta[key], "figure": figure, "unit": declared.unit, "label": label,
                    **({"states": True} if along == DEGRADED else {}),
                    "legend": meta[key]["target"] + (f" ({label})" if label else ""), "series": series,
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
    swept = {k for cf in cells for k in cf.cell.factors}
    names += [k for k in LINK_FACTORS if k in swept and k not in names]  # issue 17: a link setting swept
    out = [s for name in names for s in scaling(cells, along=name)]
    for name in sorted(k for k in swept if k.startswith("clients.")):  # a client group's count (issue 17)
        out += scaling(cells, along=name) + scaling(cells, along=name, group=name.removeprefix("clients."))
    return out
