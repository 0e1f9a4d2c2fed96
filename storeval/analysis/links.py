"""Emulated links (issue 17): what went through each host's link during a phase, whether a rate-limited link
was saturated, the rate limit the clients' links set, and the round-trip time measured against the one asked for.

Inputs, as the runner stores them:

* samples of probe ``link`` (device = emulated host name): cumulative counters (``rx_bytes``, ``tx_bytes``,
  ``rx_packets``, ``tx_packets``, ``drops``, ``tbf_drops``, ``relay_dropped_loss``, ``relay_dropped_queue``) and
  gauges (``tbf_backlog_bytes``, ``relay_held_mean_s`` — any metric with ``backlog`` or ``held`` in its name),
  with perf_counter_ns timestamps on the clock the clients' phase records use;
* one event of kind ``network`` per cell (runner.py): ``{"links": {host: {"rate": bytes/s | None, "rtt", "jitter",
  "loss"}}`` (the hosts with a link), ``"hosts": {host: link name | None}``, ``"groups": {group: host | None}``
  (where each group with clients sits; None: the root namespace, unshaped), ``"server_host"``, ``"rtt": {group:
  {"requested_s", "median_s", "p90_s", ...} or {"requested_s", "error"}}}``; a ``"link_rate"`` there (the limit,
  had the runner computed it) is taken as it is.

Rules, stated so a reader can check them:

* a phase's traffic through a link = the bytes and packets the first client on that host counted at its
  interface between the phase's barriers (exact: no client moves data outside them; ``counted: barriers``),
  else the counters interpolated linearly at the phase's first start and last end (samples are ~1 s apart: a
  phase shorter than that gets the mean rate of the samples around it; ``counted: samples``); drops and queues
  always come from the samples;
* ``link-saturated``: the larger direction's bytes / phase seconds reached SATURATED (90 %) of the link's rate;
* limit ``link_rate``: when every client group sits on a host with a rate-limited link, the sum of the rates
  of those distinct hosts' links; ``not-physical`` when the phase's aggregate exceeds it by more than 5 %;
* ``rtt-off``: the measured median round trip of TCP connects (the kernel's
  TCP_INFO sample) differs from the requested RTT by more than 10 % of it
  (at least RTT_FLOOR_S: a connect on an unshaped path takes some tens of µs, more on a busy host).
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from ..core.network import factor_text
from ..units import format_bitrate, sig

MiB = float(1 << 20)
SATURATED = 0.90
RTT_OFF = 0.10
RTT_FLOOR_S = 0.001
COUNTED = ("rx_bytes", "tx_bytes", "rx_packets", "tx_packets")  # what a client counts between the barriers
DROPS = ("drops", "tbf_drops", "relay_dropped_loss", "relay_dropped_queue")
RULE = (f"link-saturated: a phase's traffic through a rate-limited link (the larger direction) reached "
        f"{SATURATED:.0%} of its rate; rtt-off: measured median differs from the requested RTT by more than "
        f"{RTT_OFF:.0%} (at least {RTT_FLOOR_S * 1e3:g} ms)")


def is_gauge(metric: str) -> bool:
    """A value at a moment (queue length, mean delay), not a counter that only grows."""
    return "backlog" in metric or "held" in metric or metric.endswith("queue_bytes")


def link_text(key: str, value: Any) -> str:
    """A link setting as a study writes it (``12ms``, ``1Gbit/s``, ``0.1%``) from its value (seconds, bytes/s,
    fraction); text and other factors as they are."""
    return factor_text(key, value)


def network_event(events: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The detail of a cell's ``network`` event (the last one, when there are several)."""
    found = [e.get("detail") for e in events or () if e.get("kind") == "network" and isinstance(e.get("detail"), dict)]
    return found[-1] if found else None


def link_limits(network: dict[str, Any] | None, factors: dict[str, Any] | None = None) -> dict[str, Any]:
    """``where`` additions from a cell's network event: ``links`` (host → rate, bytes/s, of every rate-limited
    link) and ``link_rate`` (the sum over the hosts every client group sits behind, when all of them do). A
    group is ``{name: host}`` or ``{name: {"host", "count"}}``; one whose ``clients.<name>`` factor is 0 has
    no clients in the cell."""
    if not network:
        return {}
    rates = {h: float(s["rate"]) for h, s in (network.get("links") or {}).items()
             if isinstance(s, dict) and s.get("rate")}
    if not rates:
        return {}
    out: dict[str, Any] = {"links": rates}
    if network.get("link_rate"):
        out["link_rate"] = float(network["link_rate"])
        return out
    hosts = []
    for name, g in (network.get("groups") or {}).items():
        host, count = (g.get("host"), g.get("count")) if isinstance(g, dict) else (g, None)
        if count is None:
            count = (factors or {}).get(f"clients.{name}", 1)
        if count:
            hosts.append(host)
    server = network.get("server_host")
    if hosts and all(h in rates and h != server for h in hosts):  # clients on the server's host never cross its link
        behind = dict.fromkeys(hosts)
        out["links"] = {h: rates[h] for h in behind}
        out["link_rate"] = sum(rates[h] for h in behind)
    return out


def _at(points: list[tuple[int, float]], t: int) -> float | None:
    """A cumulative counter at time ``t``, linear between the samples around it (clamped at the ends)."""
    if not points:
        return None
    if t <= points[0][0]:
        return points[0][1]
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t <= t1:
            return v0 + (v1 - v0) * (t - t0) / (t1 - t0) if t1 > t0 else v1
    return points[-1][1]


def _window(points: list[tuple[int, float]], start: int, end: int) -> list[tuple[int, float]]:
    """Samples in [start, end], else the last one before start (a gauge's value then)."""
    inside = [p for p in points if start <= p[0] <= end]
    if inside:
        return inside
    before = [p for p in points if p[0] < start]
    return before[-1:]


def link_traffic(series: dict[str, dict[str, list[tuple[int, float]]]], start: int, end: int,
                 rates: dict[str, float], exact: dict[str, dict[str, float]] | None = None) -> dict[str, dict[str, Any]]:
    """Per host: bytes and MiB/s each way, drops, the largest queue, the relay's mean delay, the share of
    the link's rate used (``utilisation``, larger direction), and what ran on it (its control group: CPU seconds
    in user mode and the kernel, ``cpus`` used, ``io_wait`` the share of the time some task waited for I/O, disk
    bytes and IOPS each way) during [start, end] (ns). ``exact``: host → the interface's bytes and packets
    counted by a client on that host between the phase's barriers (records' ``extra["link"]``), used instead of
    the interpolated samples (``counted`` says which)."""
    seconds = max(end - start, 1) / 1e9
    out: dict[str, dict[str, Any]] = {}
    exact = exact or {}
    for host in sorted(set(series) | set(exact)):
        metrics = series.get(host, {})
        fig: dict[str, Any] = {}
        for metric, pts in metrics.items():
            if is_gauge(metric):
                values = [v for _, v in _window(pts, start, end)]
                if values:
                    fig[f"{metric}_max" if "backlog" in metric else metric] = (
                        max(values) if "backlog" in metric else values[-1])
                continue
            a, b = _at(pts, start), _at(pts, end)
            if a is not None and b is not None:  # drops and packets are whole, however they were interpolated
                fig[metric] = float(round(max(b - a, 0.0))) if metric in DROPS or "packets" in metric else max(b - a, 0.0)
        if host in exact:
            fig.update({k: v for k, v in exact[host].items() if k in COUNTED})
        fig["counted"] = "barriers" if host in exact else "samples"
        for d in ("rx", "tx"):
            if f"{d}_bytes" in fig:
                fig[f"{d}_MiBps"] = fig[f"{d}_bytes"] / MiB / seconds
        fig["dropped"] = sum(fig.get(k, 0.0) for k in DROPS)
        if "cpu_seconds" in fig:  # what ran on the host (its control group): CPUs used, and its I/O wait's share
            fig["cpus"] = fig["cpu_seconds"] / seconds
            fig["io_wait"] = min(1.0, fig.get("io_some_seconds", 0.0) / seconds)
        for way in ("read", "write"):  # what they read and wrote on disk (its blkio group)
            if f"disk_{way}_ops" in fig:
                fig[f"disk_{way}_iops"] = fig[f"disk_{way}_ops"] / seconds
        rate = rates.get(host)
        fig["rate_Bps"] = rate
        top = max(fig.get("rx_bytes", 0.0), fig.get("tx_bytes", 0.0))
        fig["utilisation"] = top / seconds / rate if rate else None
        out[host] = fig
    return out


def link_series(samples: list[tuple]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """host → metric → [(t_ns, value)] of the ``link`` samples of one cell ((t, probe, device, metric, value,
    sampling host); the emulated host is the sample's device)."""
    series: dict[str, dict[str, list[tuple[int, float]]]] = defaultdict(lambda: defaultdict(list))
    for t, probe, device, metric, value, *_ in samples:
        if probe == "link" and value is not None:
            series[device][metric].append((int(t), float(value)))
    return {h: {m: sorted(p) for m, p in ms.items()} for h, ms in series.items()}


def saturation_warnings(links: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    out = []
    for host, f in links.items():
        if f.get("utilisation") is not None and f["utilisation"] >= SATURATED:
            top = max(f.get("rx_MiBps", 0.0), f.get("tx_MiBps", 0.0))
            out.append({"code": "link-saturated", "message": (
                f"the link of emulated host {host} carried {sig(top)} MiB/s, {f['utilisation']:.0%} of its rate "
                f"of {sig(f['rate_Bps'] / MiB)} MiB/s ({format_bitrate(f['rate_Bps'])}): the link, not the "
                "storage, set this figure")})
    return out


def rtt_rows(network: dict[str, Any] | None) -> dict[str, dict[str, Any]]:
    """group → requested, measured median and p90 (seconds) and whether they differ by more than the rule."""
    out = {}
    for group, r in ((network or {}).get("rtt") or {}).items():
        if not isinstance(r, dict):
            continue
        req, med = r.get("requested_s"), r.get("median_s")
        off = None
        if req is not None and med is not None:
            off = abs(med - req) > max(RTT_OFF * req, RTT_FLOOR_S)
        out[group] = {"requested_s": req, "median_s": med, "p90_s": r.get("p90_s"), "off": off,
                      **({"error": r["error"]} if r.get("error") else {})}
    return out


def rtt_warnings(rows: dict[str, dict[str, Any]]) -> list[dict[str, str]]:
    return [{"code": "rtt-off", "message": (
        f"group {g}: measured RTT {r['median_s'] * 1e3:.3g} ms (median of TCP connects) differs from the requested "
        f"{r['requested_s'] * 1e3:.3g} ms by more than {RTT_OFF:.0%}: the emulated delay is not what was asked")}
        for g, r in rows.items() if r.get("off")]


def loss_warnings(network: dict[str, Any] | None) -> list[dict[str, str]]:
    """A lossy link under BBR (the hosts' TCP congestion control): the loss costs retransmissions, hardly rate."""
    network = network or {}
    lossy = sorted(h for h, s in (network.get("links") or {}).items() if isinstance(s, dict) and s.get("loss"))
    if not lossy or network.get("tcp_congestion_control") != "bbr":
        return []
    return [{"code": "loss-under-bbr", "message": (
        f"the link of {', '.join(lossy)} loses packets, and TCP on the emulated hosts is BBR (this machine's "
        "default), which barely slows for random loss: the figure shows what BBR makes of it; CUBIC (most clusters' "
        "default) would slow far more")}]


def summarize_rtt(networks: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """The RTT rows of a configuration's repetitions: requested, median of the measured medians and p90s."""
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rows in networks:
        for g, r in rows.items():
            by_group[g].append(r)
    out = {}
    for g, rows in by_group.items():
        meds = [r["median_s"] for r in rows if r.get("median_s") is not None]
        p90s = [r["p90_s"] for r in rows if r.get("p90_s") is not None]
        req = next((r["requested_s"] for r in rows if r.get("requested_s") is not None), None)
        med = statistics.median(meds) if meds else None
        errors = [r["error"] for r in rows if r.get("error")]
        out[g] = {"requested_s": req, "median_s": med, "p90_s": statistics.median(p90s) if p90s else None,
                  "off": (abs(med - req) > max(RTT_OFF * req, RTT_FLOOR_S)) if med is not None and req is not None
                  else None, "cells": len(rows), **({"error": errors[0]} if errors else {})}
    return out


def summarize_links(phases: list[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per host over a configuration's repetitions: mean MiB/s each way and utilisation, total drops, largest
    queue."""
    by_host: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for links in phases:
        for h, f in links.items():
            by_host[h].append(f)
    out = {}
    for h, fs in by_host.items():
        def mean(key: str) -> float | None:
            vs = [f[key] for f in fs if f.get(key) is not None]
            return statistics.fmean(vs) if vs else None

        backlog = [f["tbf_backlog_bytes_max"] for f in fs if f.get("tbf_backlog_bytes_max") is not None]
        out[h] = {"rx_MiBps": mean("rx_MiBps"), "tx_MiBps": mean("tx_MiBps"), "utilisation": mean("utilisation"),
                  "rate_Bps": next((f["rate_Bps"] for f in fs if f.get("rate_Bps")), None),
                  "dropped": sum(f.get("dropped", 0.0) for f in fs),
                  "queue_max_bytes": max(backlog) if backlog else None,
                  "held_mean_s": mean("relay_held_mean_s"), "phases": len(fs)}
    return out
