"""``storeval compare A B``: figure by figure, how B differs from A, and whether the change is real.

Configurations are matched on target, workload, swept factors, clients and phase. For every figure both
runs have, the change is (B − A) / A in percent; it is called significant when |B − A| exceeds the
combined standard error √(se_A² + se_B²) of the two means. With a single repetition on either side there
is no stderr, and the verdict says so instead of guessing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..analysis.figures import ConfigSummary
from ..analysis.stats import Summary

FIGURES: tuple[tuple[str, str, bool], ...] = (  # (name, unit, higher is better)
    ("bandwidth", "MiB/s", True), ("stonewall", "MiB/s", True), ("ops_per_s", "ops/s", True),
    ("per_client_MiBps", "MiB/s", True), ("latency_p50_us", "µs", False), ("latency_p99_us", "µs", False),
    ("cpu_seconds_per_GB", "CPU s/GB", False),
)
EXTRA_FIGURES: dict[str, tuple[str, bool]] = {
    "events_per_s": ("events/s", True), "MBps": ("MB/s", True), "cpu_efficiency": ("", True),
    "read_amplification": ("×", False), "request_amplification": ("×", False),
}
RULE = ("change = (B − A) / A; significant when |B − A| > √(stderr_A² + stderr_B²), the combined standard error "
        "of the two means over repetitions")


@dataclass
class Change:
    target: str
    workload: str
    factors: dict[str, Any]
    clients: int
    phase: str
    figure: str
    unit: str
    a: Summary
    b: Summary
    higher_is_better: bool

    @property
    def percent(self) -> float | None:
        return (self.b.mean - self.a.mean) / abs(self.a.mean) * 100 if self.a.mean else None

    @property
    def combined_stderr(self) -> float | None:
        if self.a.stderr is None or self.b.stderr is None:
            return None
        return math.hypot(self.a.stderr, self.b.stderr)

    @property
    def verdict(self) -> str:
        se = self.combined_stderr
        if se is None:
            return "no stderr (one repetition)"
        if abs(self.b.mean - self.a.mean) <= se:
            return "within noise"
        better = (self.b.mean > self.a.mean) == self.higher_is_better
        return "better" if better else "worse"

    def as_dict(self) -> dict[str, Any]:
        return {"target": self.target, "workload": self.workload, "factors": self.factors, "clients": self.clients,
                "phase": self.phase, "figure": self.figure, "unit": self.unit, "a": self.a.as_dict(),
                "b": self.b.as_dict(), "percent": self.percent, "combined_stderr": self.combined_stderr,
                "significant": self.verdict in ("better", "worse"), "verdict": self.verdict}


def _key(r: ConfigSummary) -> tuple:
    return (r.target, r.workload, tuple(sorted((k, str(v)) for k, v in r.factors.items() if k != "clients")),
            r.clients, r.phase)


def _figures(r: ConfigSummary) -> dict[str, tuple[Summary, str, bool]]:
    out = {}
    for name, unit, higher in FIGURES:
        s = getattr(r, name)
        if s is not None:
            out[name] = (s, unit, higher)
    for name, (unit, higher) in EXTRA_FIGURES.items():
        s = r.extras.get(name)
        if s is not None:
            out[name] = (s, unit, higher)
    return out


def _differences(pa: dict[str, Any], pb: dict[str, Any]) -> str:
    keys = [k for k in dict.fromkeys([*pa, *pb]) if pa.get(k) != pb.get(k)]
    return ", ".join(f"{k} {pa.get(k, '–')} → {pb.get(k, '–')}" for k in keys)


def compare(a: list[ConfigSummary], b: list[ConfigSummary]) -> tuple[list[Change], list[str], list[str], list[str]]:
    """Changes for every figure both runs have; the configurations found only in A, only in B; and those
    with the same names whose parameters differ (not compared: the change would not be the storage's)."""
    a_rows, b_rows = {_key(r): r for r in a}, {_key(r): r for r in b}
    changes, differ = [], []
    for key, ra in a_rows.items():
        rb = b_rows.get(key)
        if rb is None:
            continue
        if ra.params != rb.params:
            differ.append(f"{label(key)}: {_differences(ra.params, rb.params)}")
            continue
        fa, fb = _figures(ra), _figures(rb)
        for name, (sa, unit, higher) in fa.items():
            if name in fb:
                changes.append(Change(ra.target, ra.workload, {k: v for k, v in ra.factors.items() if k != "clients"},
                                      ra.clients, ra.phase, name, unit, sa, fb[name][0], higher))

    return (changes, [label(k) for k in a_rows if k not in b_rows], [label(k) for k in b_rows if k not in a_rows],
            list(dict.fromkeys(differ)))


def label(k: tuple) -> str:
    factors = " ".join(f"{f}={v}" for f, v in k[2])
    return f"{k[0]} · {k[1]}{(' ' + factors) if factors else ''} · {k[3]} clients · {k[4]}"


COLUMNS = ["target", "workload", "clients", "phase", "figure", "A", "B", "change", "verdict"]


def _value(s: Summary) -> str:
    from ..units import sig

    return sig(s.mean) + (f" ± {sig(s.stderr, 2)}" if s.stderr is not None and s.n > 1 else "")


def change_rows(changes: list[Change]) -> list[list[str]]:
    """The comparison as text cells (terminal and HTML print exactly these)."""
    out = []
    for c in changes:
        factors = " ".join(f"{k}={v}" for k, v in c.factors.items())
        pct = "–" if c.percent is None else f"{c.percent:+.1f} %"
        out.append([c.target, c.workload + (f" {factors}" if factors else ""), str(c.clients), c.phase,
                    f"{c.figure}{(' (' + c.unit + ')') if c.unit else ''}", _value(c.a), _value(c.b), pct, c.verdict])
    return out


def render_compare_html(run_a: Any, run_b: Any, changes: list[Change], only_a: list[str], only_b: list[str],
                        differ: list[str]) -> str:
    import json

    from .html import _env, plotly_js

    rows = change_rows(changes)
    classes = [c.verdict if c.verdict in ("better", "worse") else "" for c in changes]
    figures, charts = {}, []
    by_figure: dict[str, list[Change]] = {}
    for c in changes:
        if c.percent is not None:
            by_figure.setdefault(c.figure, []).append(c)
    for i, (figure, items) in enumerate(by_figure.items()):
        names = [f"{c.target} · {c.workload} · {c.clients} cl. · {c.phase}" for c in items]
        colors = ["#1a7f37" if c.verdict == "better" else "#b00020" if c.verdict == "worse" else "#999"
                  for c in items]
        chart_id = f"compare-{i}"
        title = f"{figure}: change from A to B (%)"
        figures[chart_id] = {"data": [{"type": "bar", "x": names, "y": [c.percent for c in items],
                                       "marker": {"color": colors}, "name": figure}],
                             "layout": {"title": {"text": title}, "yaxis": {"title": {"text": "%"}}, "height": 380,
                                        "margin": {"t": 50, "r": 20, "b": 120, "l": 60}}}
        charts.append((chart_id, title))
    return _env().get_template("compare.html.j2").render(
        title=f"storeval comparison {run_a.run_id} → {run_b.run_id}", a=run_a, b=run_b, rule=RULE,
        columns=COLUMNS, rows=list(zip(rows, classes)), only_a=only_a, only_b=only_b, differ=differ, charts=charts,
        figures_json=json.dumps(figures).replace("</", "<\\/"), plotly_js=plotly_js())
