"""``storeval compare A B``: figure by figure, how B differs from A, and whether the change is real.

Configurations are matched on target, workload, swept factors, clients and phase (and, for studies with
client groups, each group both runs had is compared on its own as ``PHASE · group NAME``). For every figure both
runs have, the change is (B − A) / A in percent, with the confidence interval of B − A (Welch's t, at
``confidence``) in percent of A. A change is called ``better`` or ``worse`` only when it is significant —
Welch's p-value, Holm-adjusted over every figure of the comparison, below 1 − confidence — *and* at least
``min_effect`` percent; otherwise it is ``within noise``. With a single repetition on either side there is
no spread to test against, and the verdict says so instead of guessing. Differences between the two runs'
environments (host, kernel, CPU, RAM, versions, targets, host load) are listed beside the verdicts, and a row
whose configuration carried a flag (e.g. ``busy-host``) in one run only says so.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..analysis.figures import ConfigSummary
from ..stats import Difference, Summary, holm, welch
from ..units import plural

FIGURES: tuple[tuple[str, str, bool], ...] = (  # (name, unit, higher is better)
    ("bandwidth", "MiB/s", True), ("stonewall", "MiB/s", True), ("ops_per_s", "ops/s", True),
    ("per_client_MiBps", "MiB/s", True), ("latency_p50_us", "µs", False), ("latency_p99_us", "µs", False),
    ("cpu_seconds_per_GB", "CPU s/GB", False),
)
# beside these, each workload's own figures (``Workload.report.compare``: the skim's events/s, MB/s …)
DEFAULT_CONFIDENCE = 0.95
DEFAULT_MIN_EFFECT = 5.0  # percent: smaller changes are not worth a verdict even when they are real
NO_SPREAD = "no spread (one repetition)"


def rule(confidence: float, min_effect: float, tests: int) -> str:
    """The verdict rule, in words, as the terminal, JSON and HTML state it."""
    return (f"change = (B − A) / A, with its {confidence:.0%} confidence interval (Welch's t on the repetitions, "
            f"in percent of A); better/worse only when Welch's p, Holm-adjusted over the {plural(tests, 'figure')} tested, is below "
            f"{1 - confidence:.2g} and |change| ≥ {min_effect:g}%; otherwise within noise; "
            f"{NO_SPREAD} where either run has a single value")


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
    test: Difference | None = None
    p_adjusted: float | None = None  # Holm over the comparison's tests; set by ``compare``
    confidence: float = DEFAULT_CONFIDENCE
    min_effect: float = DEFAULT_MIN_EFFECT
    kind: str | None = None  # the workload's kind: its factors printed as its study writes them
    context: list[str] = field(default_factory=list)  # what differed for this configuration (flags in one run only)

    @property
    def percent(self) -> float | None:
        return (self.b.mean - self.a.mean) / abs(self.a.mean) * 100 if self.a.mean else None

    @property
    def interval(self) -> tuple[float, float] | None:
        """The confidence interval of B − A in percent of A's mean."""
        if self.test is None or not self.a.mean:
            return None
        base = abs(self.a.mean)
        return self.test.low / base * 100, self.test.high / base * 100

    @property
    def significant(self) -> bool:
        return self.p_adjusted is not None and self.p_adjusted < 1 - self.confidence

    @property
    def verdict(self) -> str:
        if self.test is None:
            return NO_SPREAD
        pct = self.percent
        if pct is None:
            return "A is 0: no change in %"
        if not self.significant or abs(pct) < self.min_effect:
            return "within noise"
        better = (self.b.mean > self.a.mean) == self.higher_is_better
        return "better" if better else "worse"

    def as_dict(self) -> dict[str, Any]:
        iv = self.interval
        return {"target": self.target, "workload": self.workload, "factors": self.factors, "clients": self.clients,
                "phase": self.phase, "figure": self.figure, "unit": self.unit, "a": self.a.as_dict(),
                "b": self.b.as_dict(), "percent": self.percent,
                "interval_percent": list(iv) if iv else None, "confidence": self.confidence,
                "p": self.test.p if self.test else None, "p_adjusted": self.p_adjusted,
                "min_effect_percent": self.min_effect, "significant": self.significant,
                "verdict": self.verdict, "context": self.context}


def _key(r: ConfigSummary) -> tuple:
    return (r.target, r.workload, tuple(sorted((k, str(v)) for k, v in r.factors.items() if k != "clients")),
            r.clients, r.phase)


def _in_mb(s: Summary) -> Summary:
    """A MiB/s summary in MB/s (10^6 bytes/s): the same sample, the unit the workload's tables use."""
    k = 2**20 / 1e6
    return dataclasses.replace(s, mean=s.mean * k, stderr=None if s.stderr is None else s.stderr * k,
                               stddev=None if s.stddev is None else s.stddev * k, min=s.min * k,
                               median=s.median * k, max=s.max * k)


def _figures(r: ConfigSummary) -> dict[str, tuple[Summary, str, bool]]:
    """The common figures — in the workload's own unit (MB/s for copy, skim …; units.py), the aggregate left out
    where the workload compares its own MB/s — then the workload's declared ones."""
    from ..workloads import workload_class

    declared = workload_class(r.kind).report
    in_mb = declared.scaling.unit == "MB/s"
    own = {f.name for f in declared.compare}
    out = {}
    for name, unit, higher in FIGURES:
        s = getattr(r, name)
        if s is None or (in_mb and name == "bandwidth" and "MBps" in own):
            continue
        if in_mb and unit == "MiB/s":  # per_client_MiBps of a copy is its per_client_MBps
            out[name.replace("_MiBps", "_MBps")] = (_in_mb(s), "MB/s", higher)
        else:
            out[name] = (s, unit, higher)
    for f in declared.compare:
        s = f.of(r)
        if s is not None:
            out[f.name] = (s, f.unit, f.higher_is_better)
    return out


def _differences(pa: dict[str, Any], pb: dict[str, Any]) -> str:
    keys = [k for k in dict.fromkeys([*pa, *pb]) if pa.get(k) != pb.get(k)]
    return ", ".join(f"{k} {pa.get(k, '–')} → {pb.get(k, '–')}" for k in keys)


def _flag_context(ra: ConfigSummary, rb: ConfigSummary) -> list[str]:
    """Flags this configuration carried in one run and not the other (``busy-host`` in B only: B's figure
    may be the other work's doing, not the storage's)."""
    fa, fb = {f["code"] for f in ra.flags}, {f["code"] for f in rb.flags}
    return [f"{code} in A only" for code in sorted(fa - fb)] + [f"{code} in B only" for code in sorted(fb - fa)]


def compare(a: list[ConfigSummary], b: list[ConfigSummary], *, confidence: float = DEFAULT_CONFIDENCE,
            min_effect: float = DEFAULT_MIN_EFFECT) -> tuple[list[Change], list[str], list[str], list[str]]:
    """Changes for every figure both runs have, tested together (Holm); the configurations found only in A,
    only in B; and those with the same names whose parameters differ (not compared: the change would not be
    the storage's)."""
    a_rows, b_rows = {_key(r): r for r in a}, {_key(r): r for r in b}
    changes, differ = [], []
    for key, ra in a_rows.items():
        rb = b_rows.get(key)
        if rb is None:
            continue
        if ra.params != rb.params:
            differ.append(f"{label(ra)}: {_differences(ra.params, rb.params)}")
            continue
        context = _flag_context(ra, rb)
        # the whole phase, then each client group both runs had (issue 17: on-board and external compared apart)
        pairs = [(ra, rb, ra.phase)] + [(ra.groups[g], rb.groups[g], f"{ra.phase} · group {g}")
                                         for g in ra.groups if g in rb.groups]
        for ga, gb, phase in pairs:
            fa, fb = _figures(ga), _figures(gb)
            for name, (sa, unit, higher) in fa.items():
                if name in fb:
                    sb = fb[name][0]
                    changes.append(Change(ra.target, ra.workload,
                                          {k: v for k, v in ra.factors.items() if k != "clients"},
                                          ga.clients, phase, name, unit, sa, sb, higher, welch(sa, sb, confidence),
                                          confidence=confidence, min_effect=min_effect, context=context,
                                          kind=ra.kind))
    tested = [c for c in changes if c.test is not None]
    for c, p in zip(tested, holm([c.test.p for c in tested])):
        c.p_adjusted = p
    return (changes, [label(r) for k, r in a_rows.items() if k not in b_rows],
            [label(r) for k, r in b_rows.items() if k not in a_rows],
            list(dict.fromkeys(differ)))


def environment_differences(run_a: Any, run_b: Any) -> list[str]:
    """What differed between A's and B's environments and targets, one line per fact, in the words of a report
    across runs (``across.environment_differences``): ``kernel: Linux 6.1 (A) vs Linux 6.5 (B)``. The studies
    are compared configuration by configuration instead (``compare``)."""
    from .across import environment_differences as differences

    return differences([run_a, run_b], ["A", "B"])


def label(r: ConfigSummary) -> str:
    """A configuration in words: its factors as a study writes them (sizes as sizes), the clients counted."""
    from ..analysis.scaling import factors_text
    from ..units import plural

    factors = factors_text(r.kind, r.factors)
    return f"{r.target} · {r.workload}{(' ' + factors) if factors else ''} · {plural(r.clients, 'client')} · {r.phase}"


COLUMNS = ["target", "workload", "clients", "phase", "figure", "A", "B", "change", "interval", "verdict", "context"]
NUMERIC = ("clients", "A", "B", "change", "interval")


def _value(s: Summary) -> str:
    from ..units import sig

    return sig(s.mean) + (f" ± {sig(s.stderr, 2)}" if s.stderr is not None and s.n > 1 else "")


def _interval(c: Change) -> str:
    iv = c.interval
    return "–" if iv is None else f"{iv[0]:+.1f} … {iv[1]:+.1f} %"


def change_rows(changes: list[Change]) -> list[list[str]]:
    """The comparison as text cells (terminal and HTML print exactly these)."""
    from ..analysis.scaling import factors_text

    out = []
    for c in changes:
        factors = factors_text(c.kind, c.factors)
        pct = "–" if c.percent is None else f"{c.percent:+.1f} %"
        out.append([c.target, c.workload + (f" {factors}" if factors else ""), str(c.clients), c.phase,
                    f"{c.figure}{(' (' + c.unit + ')') if c.unit else ''}", _value(c.a), _value(c.b), pct,
                    _interval(c), c.verdict, "; ".join(c.context)])
    return out


COLOURS = {"better": "#1a7f37", "worse": "#b00020"}  # the report's .better/.worse; anything else grey
NEUTRAL = "#999"


def compare_figures(changes: list[Change]) -> list[tuple[str, dict]]:
    """One chart per figure (bandwidth, ops/s …): each configuration's change from A to B in percent, its
    confidence interval as the error bar, coloured by verdict; drawn with the report's chart helpers."""
    from .charts import _layout

    by_figure: dict[str, list[Change]] = {}
    for c in changes:
        if c.percent is not None:
            by_figure.setdefault(c.figure, []).append(c)
    out = []
    for figure, items in by_figure.items():
        names = [f"{c.target} · {c.workload} · {c.clients} cl. · {c.phase}" for c in items]
        ivs = [c.interval for c in items]
        error = {"type": "data", "symmetric": False, "visible": True,
                 "array": [iv[1] - c.percent if iv else 0 for c, iv in zip(items, ivs)],
                 "arrayminus": [c.percent - iv[0] if iv else 0 for c, iv in zip(items, ivs)]}
        unit = f" ({items[0].unit})" if items[0].unit else ""
        title = f"{figure}{unit}: change from A to B (%)"
        data = [{"type": "bar", "orientation": "h", "x": [c.percent for c in items], "y": names, "error_x": error,
                 "marker": {"color": [COLOURS.get(c.verdict, NEUTRAL) for c in items]}, "name": figure}]
        layout = _layout(title, "change from A to B (%), bar: confidence interval", "",
                         height=120 + 28 * len(items), showlegend=False,
                         margin={"t": 50, "r": 20, "b": 50, "l": 20},
                         yaxis={"automargin": True, "autorange": "reversed"})
        out.append((title, {"data": data, "layout": layout}))
    return out


def render_compare_html(run_a: Any, run_b: Any, changes: list[Change], only_a: list[str], only_b: list[str],
                        differ: list[str], rule_text: str, environment: list[str]) -> str:
    """The comparison as a page in the report's style: the same base template, tables, colours and charts, and
    what differed between the runs listed as a report across runs lists it."""
    from .html import _env, _figures_json, plotly_js

    rows = change_rows(changes)
    classes = [c.verdict if c.verdict in ("better", "worse") else "" for c in changes]
    ids, figures_json = _figures_json({"compare": compare_figures(changes)})
    sections = [("changes", "Changes"), *([("charts", "Charts")] if ids["compare"] else []),
                ("differences", "What differed"),
                *([("not-compared", "Not compared")] if differ or only_a or only_b else [])]
    return _env().get_template("compare.html.j2").render(
        title=f"storeval comparison {run_a.run_id} → {run_b.run_id}", a=run_a, b=run_b, rule=rule_text,
        sections=sections, environment=environment, numeric=[COLUMNS.index(c) for c in NUMERIC],
        columns=COLUMNS, rows=list(zip(rows, classes)), only_a=only_a, only_b=only_b, differ=differ,
        charts=ids["compare"], figures_json=figures_json, plotly_js=plotly_js())
