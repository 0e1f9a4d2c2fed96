"""Fairness: did every client get its share of a phase? (Seed 000's figures 10, 12 and 13.)

For a phase with several clients: each client's time relative to the fastest, the clients' rates sorted,
the spread (slowest / fastest − 1, in time), Jain's fairness index ((Σx)² / (n·Σx²): 1 when all equal,
1/n when one client got everything) and the coefficient of variation of the rates. Outlier clients — a
rate more than 3 scaled median absolute deviations from the median — are flagged, never dropped; the
same figures without them are given beside.

With client groups (issue 17: on-board vs external clients) every client row carries its group, and
``groups`` holds each group's own block, computed among that group's clients alone (time relative to the
group's fastest, its Jain and CoV) — a group that is slower as a whole is visible in the overall block, a
group that is unfair inside itself in its own.
"""

from __future__ import annotations

import statistics
from typing import Any

OUTLIER_MADS = 3.0
RULE = (f"a client is an outlier when its rate lies more than {OUTLIER_MADS:g} scaled median absolute deviations "
        "(1.4826 × MAD) from the median of the clients' rates")


def jain(values: list[float]) -> float | None:
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else None


def cov(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean else None


def _figures(rates: dict[int, float], times: dict[int, float]) -> dict[str, Any]:
    fastest = min(times.values())
    return {"spread": max(times.values()) / fastest - 1 if fastest else None,
            "jain": jain(list(rates.values())), "cov": cov(list(rates.values()))}


def fairness(client_stats: list[Any], groups: dict[str, dict[str, Any] | None] | None = None) -> dict[str, Any] | None:
    """The fairness block of a phase from its ClientStats; None for a single client. ``groups``: each client
    group's own block (None for a group of one client), kept under ``groups``."""
    stats = [c for c in client_stats if c.seconds > 0]
    if len(stats) < 2:
        return None
    use_bytes = any(c.bytes for c in stats)
    unit = "MiBps" if use_bytes else "ops_per_s"
    rates = {c.rank: (c.MiBps if use_bytes else c.ops_per_s) or 0.0 for c in stats}
    times = {c.rank: c.seconds for c in stats}
    fastest = min(times.values())
    by_rank = {c.rank: c for c in stats}
    med = statistics.median(rates.values())
    mad = statistics.median(abs(v - med) for v in rates.values()) * 1.4826
    outliers = sorted(r for r, v in rates.items() if mad > 0 and abs(v - med) > OUTLIER_MADS * mad)
    out = {**_figures(rates, times), "unit": unit,
           "relative_time": {str(r): t / fastest for r, t in sorted(times.items())},
           "sorted": [{"rank": r, "host": by_rank[r].host, **({"group": g} if (g := getattr(by_rank[r], "group", None)) else {}),
                       unit: v} for r, v in sorted(rates.items(), key=lambda kv: -kv[1])],
           "outliers": outliers, "rule": RULE}
    kept = [r for r in rates if r not in outliers]
    out["without_outliers"] = _figures({r: rates[r] for r in kept}, {r: times[r] for r in kept}) \
        if outliers and len(kept) >= 2 else None
    if groups:
        out["groups"] = {name: ({"clients": len(block["relative_time"]), "jain": block["jain"], "cov": block["cov"],
                                 "spread": block["spread"], "relative_time": block["relative_time"],
                                 "outliers": block["outliers"]} if block else None) for name, block in groups.items()}
    return out
