"""Per-host figures of a phase whose clients ran on several hosts (MPI across nodes): each host's aggregate, what
its leader's probes counted there, and the spread between hosts beside the per-client fairness.

A host's aggregate is its clients' bytes (ops) over its own span — its first client's start to its last client's
end — as a client group's is (figures.group_figures). Its interface bytes and CPU are those its host leader
counted between the phase's barriers (engine/clients.py, probes/counters.py): on an emulated node, its own namespace's interfaces.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..core.records import NS, PhaseRecord
from ..stats import summarize

MiB = 1 << 20


def host_figures(records: list[PhaseRecord], host_load: dict[str, float]) -> dict[str, dict[str, Any]] | None:
    """host -> its figures, when the phase's clients ran on more than one host (else None)."""
    by_host: dict[str, list[PhaseRecord]] = defaultdict(list)
    for r in records:
        by_host[r.host].append(r)
    if len(by_host) < 2:
        return None
    out: dict[str, dict[str, Any]] = {}
    for host in sorted(by_host):
        recs = by_host[host]
        seconds = max(max(r.end_ns for r in recs) - min(r.start_ns for r in recs), 1) / NS
        nbytes, ops = sum(r.bytes for r in recs), sum(r.ops for r in recs)
        row: dict[str, Any] = {"clients": len(recs), "ranks": sorted(r.rank for r in recs), "bytes": nbytes,
                               "ops": ops, "seconds": seconds, "MiBps": nbytes / MiB / seconds,
                               "ops_per_s": ops / seconds}
        probes = next((r.extra["probes"] for r in recs if r.extra.get("probes")), None)
        if probes:
            nics = {name: c for name, c in probes.get("net", {}).items() if name != "lo" and isinstance(c, dict)}
            row["net_rx_bytes"] = sum(c.get("rx_bytes", 0) for c in nics.values())
            row["net_tx_bytes"] = sum(c.get("tx_bytes", 0) for c in nics.values())
            cpu = probes.get("cpu", {}).get("all", {})
            if cpu.get("total"):
                row["cpu_busy_fraction"] = cpu["busy"] / cpu["total"]
        if host in host_load:
            row["other_load"] = host_load[host]
        out[host] = row
    return out


def host_spread(hosts: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """Slowest host against the fastest (spread = fastest / slowest − 1) and Jain's index over the hosts' rates
    per client, by bytes when the phase moved any, else by operations."""
    key = "MiBps" if any(h["bytes"] for h in hosts.values()) else "ops_per_s"
    rates = {name: h[key] / h["clients"] for name, h in hosts.items()}
    if not rates or min(rates.values()) <= 0:
        return None
    slowest, fastest = min(rates, key=rates.get), max(rates, key=rates.get)
    xs = list(rates.values())
    return {"by": f"{key} per client", "slowest": slowest, "fastest": fastest,
            "spread": rates[fastest] / rates[slowest] - 1, "jain": sum(xs) ** 2 / (len(xs) * sum(x * x for x in xs))}


def summarize_hosts(phases: list[Any]) -> dict[str, dict[str, Any]]:
    """Each host's figures over a configuration's repetitions (mean ± stderr)."""
    rows = [ph.hosts for ph in phases if ph.hosts]
    out: dict[str, dict[str, Any]] = {}
    for host in sorted({h for r in rows for h in r}):
        mine = [r[host] for r in rows if host in r]
        out[host] = {"clients": mine[0]["clients"], "MiBps": summarize([m["MiBps"] for m in mine]),
                     "ops_per_s": summarize([m["ops_per_s"] for m in mine]),
                     "net_rx_bytes": summarize([m["net_rx_bytes"] for m in mine if "net_rx_bytes" in m]),
                     "net_tx_bytes": summarize([m["net_tx_bytes"] for m in mine if "net_tx_bytes" in m]),
                     "seconds": summarize([m["seconds"] for m in mine]),
                     "other_load": max((m["other_load"] for m in mine if "other_load" in m), default=None)}
    return out


def summarize_spread(phases: list[Any]) -> dict[str, Any] | None:
    """The spread between hosts over a configuration's repetitions: spread and Jain's index, mean ± stderr."""
    spreads = [ph.host_spread for ph in phases if ph.host_spread]
    if not spreads:
        return None
    return {"by": spreads[0]["by"], "spread": summarize([x["spread"] for x in spreads]),
            "jain": summarize([x["jain"] for x in spreads])}
