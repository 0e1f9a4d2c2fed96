"""The report's first screen: which system, for what — the numbers behind its Table 1, its efficiency and its cost.

The figures here are derived, never measured again:

* ``table1`` — the rows of ``table.summary_table`` (the terminal's Table 1, the JSON's ``table``), each with the
  parameters its configuration ran with, so the page can print the conditions (transfer size, files …) beside it;
* ``metadata_rates`` — every metadata operation's best ops/s over the client counts (seed 000 fig. 7, seed 002):
  the table keeps four of them, the figure shows all;
* ``efficiency`` — each data phase's best aggregate rate ÷ the limit it must respect: a declared ``limits:`` rate,
  the link speed of the interface towards a network target, or the emulated links every client sits behind
  (issue 17) — the same limits, in the same order, that ``sanity.py`` flags ``not-physical`` against;
* ``costs`` — when the study declares ``prices:``, what the best measured aggregate of each system costs
  (its price per GB/s × that rate) beside its price per TB.

Rates are bytes per second here; the charts turn them into MiB/s or GB/s and say which.
"""

from __future__ import annotations

from typing import Any

from .figures import CellFigures, ConfigSummary
from .links import link_limits
from .sanity import rate_limits
from .table import summary_table
from ..workloads import workload_class

MiB = 2**20
GB = 1e9


def _key(target: str, workload: str, factors: dict[str, Any]) -> tuple:
    return target, workload, tuple(sorted((k, str(v)) for k, v in factors.items()
                                          if k != "clients" and not k.startswith("clients.")))


def table1(summary: list[ConfigSummary]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``summary_table``'s rows, each with the parameters of its configuration (for the conditions column)."""
    params = {}
    for s in summary:
        params.setdefault(_key(s.target, s.workload, s.factors), s.params)
    return [(row, params.get(_key(row["target"], row["workload"], row["factors"]), {}))
            for row in summary_table(summary)]


def metadata_rates(summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    """Per target × workload (× other factors): each phase's best mean ops/s over the client counts, ± stderr,
    with the count that reached it; phases in the order they ran."""
    out: dict[tuple, dict[str, Any]] = {}
    for s in summary:
        if s.kind != "metadata" or s.ops_per_s is None:
            continue
        key = _key(s.target, s.workload, s.factors)
        entry = out.setdefault(key, {"target": s.target, "workload": s.workload, "kind": s.kind,
                                     "factors": {k: v for k, v in s.factors.items() if k != "clients"
                                                 and not k.startswith("clients.")}, "phases": {}})
        best = entry["phases"].get(s.phase)
        if best is None or s.ops_per_s.mean > best["mean"]:
            entry["phases"][s.phase] = {"mean": s.ops_per_s.mean, "stderr": s.ops_per_s.stderr, "clients": s.clients}
    return list(out.values())


def efficiency(run: Any, cells: list[CellFigures]) -> list[dict[str, Any]]:
    """Per configuration and data phase: the best mean aggregate rate over the client counts ÷ the tightest limit
    that applies to it (bytes/s), with where the limit comes from. Phases with no known limit are left out."""
    where_of = run.environment.get("targets", {})
    limits_of = {name: t.get("limits", {}) for name, t in (run.study.get("targets") or {}).items()}
    rates: dict[tuple, dict[str, Any]] = {}
    for cf in cells:
        c = cf.cell
        workload = workload_class(c.kind)
        where = {**(where_of.get(c.target, {}) or {}).get("path", {}), **link_limits(cf.network, c.factors)}
        limits = limits_of.get(c.target, {}) or {}
        for ph in cf.phases:
            if ph.status != "ok" or not ph.bytes or not ph.seconds:
                continue
            direction = workload.direction(ph.phase, c.params or {})
            found = rate_limits(limits, where, direction, len({s.host for s in ph.client_stats}) or 1)
            if not found:
                continue
            name, limit, source = min(found, key=lambda f: f[1])
            if name == "link_rate":  # the flag's tolerance is not the link's rate
                limit, source = where["link_rate"], "emulated links " + " + ".join(where.get("links") or {})
            key = (c.target, c.workload, ph.phase, c.clients,
                   tuple(sorted((k, str(v)) for k, v in c.factors.items() if k != "clients")))
            entry = rates.setdefault(key, {"target": c.target, "workload": c.workload, "kind": c.kind,
                                           "phase": ph.phase,
                                           "clients": c.clients, "factors": {k: v for k, v in c.factors.items()
                                                                             if k != "clients"},
                                           "limit_Bps": limit, "limit": name, "source": source, "rates": []})
            entry["rates"].append(ph.bytes / ph.seconds)
    best: dict[tuple, dict[str, Any]] = {}
    for (target, workload, phase, _, factors), e in rates.items():
        values = e.pop("rates")
        e = {**e, "achieved_Bps": sum(values) / len(values)}
        e["ratio"] = e["achieved_Bps"] / e["limit_Bps"]
        key = (target, workload, phase, tuple((k, v) for k, v in factors if not k.startswith("clients.")))
        if key not in best or e["achieved_Bps"] > best[key]["achieved_Bps"]:
            best[key] = e
    return list(best.values())


def costs(study: dict[str, Any], summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    """For each target with declared ``prices``: its best measured aggregate (the best read or write mean of its
    Table-1 rows, all clients), and what that rate costs at its price per GB/s, beside its price per TB."""
    prices = study.get("prices") or {}
    if not prices:
        return []
    best: dict[str, dict[str, Any]] = {}
    for row in summary_table(summary):
        if row.get("group"):
            continue
        for key, direction in (("read_MiBps", "read"), ("write_MiBps", "write")):
            fig = row.get(key)
            if fig and fig["mean"] and (row["target"] not in best or fig["mean"] > best[row["target"]]["MiBps"]):
                best[row["target"]] = {"MiBps": fig["mean"], "workload": row["workload"], "phase": fig["phase"],
                                       "clients": fig["clients"], "direction": direction}
    out = []
    for target, price in prices.items():
        b = best.get(target)
        gbps = b["MiBps"] * MiB / GB if b else None
        out.append({"target": target, "currency": price.get("currency", "USD"), "per_tb": price.get("per_tb"),
                    "per_gbps": price.get("per_gbps"), "best_GBps": gbps, "best": b,
                    "bandwidth_cost": price["per_gbps"] * gbps if gbps is not None and price.get("per_gbps")
                    is not None else None})
    return out


def systems(summary: list[ConfigSummary], study: dict[str, Any]) -> list[str]:
    """The systems (targets) in the study's order: the one order every figure gives its colours in."""
    named = list((study.get("targets") or {}).keys())
    seen = list(dict.fromkeys(s.target for s in summary))
    return [t for t in named if t in seen] + [t for t in seen if t not in named]


def fairness_rows(cells: list[CellFigures], limit: int) -> list[dict[str, Any]]:
    """Each multi-client phase's per-client rates and times relative to the fastest client (first repetition of
    each configuration, at most ``limit``), with each client's group: the compact fairness figure's data."""
    out = []
    seen: set[tuple] = set()
    for cf in cells:
        for ph in cf.phases:
            f = ph.fairness
            key = (cf.cell.config, ph.phase, ph.iteration)
            if not f or key in seen:
                continue
            seen.add(key)
            if len(out) >= limit:
                return out
            unit, scale = "ops/s", 1.0
            if f["unit"] == "MiBps":  # the workload's own unit (MB/s for copy/skim/…; units.py), from MiB/s
                unit = "MB/s" if workload_class(cf.cell.kind).report.scaling.unit == "MB/s" else "MiB/s"
                scale = 2**20 / 1e6 if unit == "MB/s" else 1.0
            clients = [{"rank": row["rank"], "group": row.get("group"), "rate": row[f["unit"]] * scale,
                        "relative_time": f["relative_time"].get(str(row["rank"]), f["relative_time"].get(row["rank"])),
                        "outlier": row["rank"] in set(f["outliers"])} for row in f["sorted"]]
            out.append({"target": cf.cell.target, "workload": cf.cell.workload, "kind": cf.cell.kind, "phase": ph.phase,
                        "clients": cf.cell.clients, "factors": {k: v for k, v in cf.cell.factors.items()
                                                                if k != "clients"},
                        "unit": unit, "jain": f["jain"],
                        "per_client": clients})
    return out

