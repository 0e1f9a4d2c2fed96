"""Phase figures, computed the way IOR and mdtest define them.

* Aggregate bandwidth = sum of bytes of all clients / (latest end - earliest
  start), start and end taken just inside the barriers (IOR). Workloads whose
  rate includes the closing barrier (mdtest) use the barrier exit instead of
  the end.
* Stonewall bandwidth = bytes moved by all clients until the first client
  finished / (that moment - earliest start); each client's bytes at that
  moment are interpolated within its per-second timeline.
* Per-client rates are reported as mean ± stderr beside the aggregate, never
  instead of it.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..core.records import NS, PhaseRecord
from ..histogram import Histogram
from ..store import CellRow, RunData
from .fairness import fairness
from .hosts import host_figures, host_spread, summarize_hosts, summarize_spread
from .links import (link_limits, loss_warnings, link_series, link_traffic, network_event, rtt_rows, rtt_warnings, saturation_warnings,
                    summarize_links, summarize_rtt)
from .sanity import check, moved
from .timeline import fault_flags, phase_timeline
from ..stats import Summary, mean_stderr, summarize

MiB = float(1 << 20)
PERCENTILES = (("p50", 50.0), ("p90", 90.0), ("p99", 99.0))


@dataclass
class ClientStat:
    rank: int
    host: str
    bytes: int
    ops: int
    seconds: float
    cpu_seconds: float
    MiBps: float | None
    ops_per_s: float | None
    extra: dict[str, Any] = field(default_factory=dict)  # the workload's own figures (skim: events, counters …)
    group: str | None = None  # the client group it belonged to (issue 17), None without groups

    def as_dict(self) -> dict[str, Any]:
        return {"rank": self.rank, "host": self.host, **({"group": self.group} if self.group else {}),
                "bytes": self.bytes, "ops": self.ops, "seconds": self.seconds,
                "cpu_seconds": self.cpu_seconds, "MiBps": self.MiBps, "ops_per_s": self.ops_per_s,
                "cpu_seconds_per_MB": self.cpu_seconds / (self.bytes / 1e6) if self.bytes else None, **self.extra}


@dataclass
class PhaseFigures:
    phase: str
    status: str  # ok | skipped | failed | not-run
    reason: str | None
    clients: int
    iteration: int = 0
    bytes: int = 0
    ops: int = 0
    seconds: float | None = None
    bandwidth_MiBps: float | None = None
    stonewall_MiBps: float | None = None
    ops_per_s: float | None = None
    latency_us: dict[str, float | None] = field(default_factory=dict)
    client_stats: list[ClientStat] = field(default_factory=list)
    client_MiBps: tuple[float | None, float | None] = (None, None)
    client_ops_per_s: tuple[float | None, float | None] = (None, None)
    cpu_seconds: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    warnings: list[dict[str, str]] = field(default_factory=list)
    hist: Histogram | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # the workload's own figures of the phase
    probes: dict[str, Any] | None = None  # what the host counters say moved (analysis/sanity.py)
    read_amplification: float | None = None
    write_amplification: float | None = None
    flags: list[dict[str, str]] = field(default_factory=list)  # not-physical figures, stalls
    stalls: list[dict[str, float]] = field(default_factory=list)  # spans without progress: start_s, seconds
    fairness: dict[str, Any] | None = None  # multi-client phases (analysis/fairness.py)
    stonewall_ops_per_s: float | None = None
    stonewall_rule: str | None = None  # "first-finisher" or "deadline"
    host_load: dict[str, float] = field(default_factory=dict)  # host → share of its CPU other processes used
    clock: dict[str, Any] | None = None  # MPI: each rank's clock offset from rank 0's and the worst skew (clocks.py)
    io_engines: list[str] = field(default_factory=list)  # what ran the timed loop (workloads/kernel.py), when said
    # when the latencies are not of the workload's calls but of the requests the driver made for them (an object
    # store's part uploads): what those requests are, how many and how many bytes they carried
    latency_of: dict[str, Any] | None = None
    timeline: dict[str, Any] | None = None  # all clients' work per second, with the faults (analysis/timeline.py)
    written_check: dict[str, Any] | None = None  # what was read back after a faulted write (analysis/guards.py)
    groups: dict[str, "PhaseFigures"] = field(default_factory=dict)  # each client group's own figures (issue 17)
    links: dict[str, dict[str, Any]] | None = None  # emulated host → its link's traffic in the phase (links.py)
    hosts: dict[str, dict[str, Any]] | None = None  # clients on several hosts: each host's figures (hosts.py)
    host_spread: dict[str, Any] | None = None  # the slowest host against the fastest, Jain's index over hosts

    def as_dict(self) -> dict[str, Any]:
        return {
            "phase": self.phase, "iteration": self.iteration, "status": self.status,
            **({"reason": self.reason} if self.reason else {}),
            "clients": self.clients, "bytes": self.bytes, "ops": self.ops, "seconds": self.seconds,
            "bandwidth_MiBps": self.bandwidth_MiBps, "stonewall_MiBps": self.stonewall_MiBps,
            "stonewall_ops_per_s": self.stonewall_ops_per_s, "stonewall_rule": self.stonewall_rule,
            "fairness": self.fairness,
            "ops_per_s": self.ops_per_s, "latency_us": self.latency_us,
            "client_MiBps": {"mean": self.client_MiBps[0], "stderr": self.client_MiBps[1]},
            "client_ops_per_s": {"mean": self.client_ops_per_s[0], "stderr": self.client_ops_per_s[1]},
            "cpu_seconds": self.cpu_seconds,
            "cpu_seconds_per_GB": self.cpu_seconds / (self.bytes / 1e9) if self.bytes else None,
            "probes": self.probes, "read_amplification": self.read_amplification,
            "write_amplification": self.write_amplification, "flags": self.flags, "stalls": self.stalls,
            "errors": self.errors, "warnings": self.warnings, "host_load": self.host_load,
            **({"clock": self.clock} if self.clock else {}),
            **({"io_engines": self.io_engines} if self.io_engines else {}),
            **({"latency_of": self.latency_of} if self.latency_of else {}),
            "timeline": self.timeline,
            **({"written_check": self.written_check} if self.written_check else {}),
            "client_stats": [c.as_dict() for c in self.client_stats],
            **({"groups": {name: g.group_dict() for name, g in self.groups.items()}} if self.groups else {}),
            **({"links": self.links} if self.links else {}),
            **({"hosts": self.hosts, "host_spread": self.host_spread} if self.hosts else {}),
            **self.extra,
        }

    def group_dict(self) -> dict[str, Any]:
        """A client group's figures in the JSON: its aggregate over its own span, per-client rates, fairness."""
        return {"clients": self.clients, "ranks": [c.rank for c in self.client_stats], "bytes": self.bytes,
                "ops": self.ops, "seconds": self.seconds, "bandwidth_MiBps": self.bandwidth_MiBps,
                "ops_per_s": self.ops_per_s,
                "client_MiBps": {"mean": self.client_MiBps[0], "stderr": self.client_MiBps[1]},
                "client_ops_per_s": {"mean": self.client_ops_per_s[0], "stderr": self.client_ops_per_s[1]},
                "fairness": self.fairness, **self.extra}


def bytes_until(rec: PhaseRecord, t_ns: int) -> float:
    """Bytes ``rec``'s client had moved at time ``t_ns``: from its progress marks (bytes done at the end of each
    fold, at most 16 MiB or 4,096 operations apart), interpolated only between the two marks around ``t_ns``;
    a record stored before marks existed interpolates within its 1-second timeline bins."""
    if t_ns >= rec.end_ns:
        return float(rec.bytes)
    if t_ns <= rec.start_ns:
        return 0.0
    marks = rec.extra.get("marks")
    if marks:
        at = t_ns - rec.start_ns
        before = (0, 0)
        for t, b in marks:
            if t > at:
                return before[1] + (b - before[1]) * (at - before[0]) / max(t - before[0], 1)
            before = (t, b)
        last_t = rec.end_ns - rec.start_ns  # after the last mark: what remained, spread to the phase's end
        return before[1] + (rec.bytes - before[1]) * (at - before[0]) / max(last_t - before[0], 1)
    done = 0.0
    for s, nbytes in enumerate(rec.tl_bytes):
        lo = rec.start_ns + s * NS
        hi = min(lo + NS, rec.end_ns)
        if t_ns >= hi:
            done += nbytes
            continue
        if hi > lo:
            done += nbytes * (t_ns - lo) / (hi - lo)
        break
    return done


def phase_figures(phase: str, status: str, reason: str | None, records: list[PhaseRecord], nclients: int,
                  include_barrier: bool = False, iteration: int = 0, workload: Any = None,
                  where: dict[str, Any] | None = None, limits: dict[str, float] | None = None,
                  params: dict[str, Any] | None = None, per_group: bool = True) -> PhaseFigures:
    fig = PhaseFigures(phase=phase, status=status, reason=reason, clients=nclients, iteration=iteration)
    if per_group:
        fig.groups = group_figures(phase, status, reason, records, include_barrier, iteration, workload, params)
    for r in records:
        for kind, count in r.errors.items():
            fig.errors[kind] = fig.errors.get(kind, 0) + count
        for w in r.extra.get("warnings", []):
            if w not in fig.warnings:
                fig.warnings.append(w)
    fig.io_engines = sorted({e for r in records if (e := r.extra.get("io_engine"))})
    requests = [r.extra["latency_of"] for r in records if r.extra.get("latency_of")]
    if requests:
        fig.latency_of = {"what": requests[0]["what"], "requests": sum(q["requests"] for q in requests),
                          "bytes": sum(q["bytes"] for q in requests)}
    if status != "ok" or not records:
        fig.bytes = sum(r.bytes for r in records)
        fig.ops = sum(r.ops for r in records)
        return fig
    start = min(r.start_ns for r in records)
    end = max((r.barrier_ns if include_barrier and r.barrier_ns else r.end_ns) for r in records)
    seconds = max(end - start, 1) / NS
    fig.bytes = sum(r.bytes for r in records)
    fig.ops = sum(r.ops for r in records)
    fig.seconds = seconds
    fig.cpu_seconds = sum(r.cpu_seconds for r in records)
    fig.bandwidth_MiBps = fig.bytes / MiB / seconds
    fig.ops_per_s = fig.ops / seconds
    walls = [r.extra.get("stonewall") for r in records]
    if all(walls):  # a deadline: the work done by all clients until it (IOR -D), beside the full figure
        t_wall = max(w["t_ns"] for w in walls)
        span = max(t_wall - start, 1) / NS
        fig.stonewall_MiBps = sum(w["bytes"] for w in walls) / MiB / span
        fig.stonewall_ops_per_s = sum(w["ops"] for w in walls) / span
        fig.stonewall_rule = "deadline"
    elif len(records) == 1:  # one client: the first finisher is the whole phase, over the aggregate's own span
        fig.stonewall_MiBps, fig.stonewall_ops_per_s = fig.bandwidth_MiBps, fig.ops_per_s
        fig.stonewall_rule = "first-finisher"
    else:
        first_end = min(r.end_ns for r in records)
        if first_end > start:
            fig.stonewall_MiBps = sum(bytes_until(r, first_end) for r in records) / MiB / ((first_end - start) / NS)
            fig.stonewall_rule = "first-finisher" if all(r.extra.get("marks") for r in records) else \
                "first-finisher, interpolated in 1 s bins"
    hist = Histogram.merged(r.hist for r in records)
    fig.hist = hist
    values = hist.percentiles([q for _, q in PERCENTILES])
    fig.latency_us = {name: (v / 1e3 if v is not None else None) for (name, _), v in zip(PERCENTILES, values)}
    fig.latency_us["max"] = hist.max / 1e3 if hist.max is not None else None
    fig.latency_us["mean"] = hist.mean / 1e3 if hist.mean is not None else None
    for r in sorted(records, key=lambda r: r.rank):
        secs = max(r.end_ns - r.start_ns, 1) / NS
        extra = workload.client_extra(r.extra, secs, r.cpu_seconds) if workload is not None else {}
        fig.client_stats.append(ClientStat(rank=r.rank, host=r.host, bytes=r.bytes, ops=r.ops, seconds=secs,
                                           cpu_seconds=r.cpu_seconds, MiBps=r.bytes / MiB / secs, ops_per_s=r.ops / secs,
                                           extra=extra, group=r.extra.get("group")))
    fig.fairness = fairness(fig.client_stats, {n: g.fairness for n, g in fig.groups.items()})
    direction = workload.direction(phase, params or {}) if workload is not None else None
    check(fig, records, where or {}, limits or {}, direction, len({r.host for r in records}))
    fig.hosts = host_figures(records, fig.host_load)
    fig.host_spread = host_spread(fig.hosts) if fig.hosts else None
    if workload is not None:
        moved_bytes = moved(fig.probes, where or {}, direction) if direction else None
        fig.extra = workload.phase_extra([c.extra for c in fig.client_stats], seconds, moved_bytes)
        for key, into in (("warnings", fig.warnings), ("flags", fig.flags)):  # the workload's own, e.g. shared-files
            into += [w for w in fig.extra.pop(key, []) if w not in into]
        if fig.extra.get("client_cpu_share") is not None:  # beside the rate the client's CPU may have set
            fig.extra["client_bound"] = any(w["code"] == "client-bound" for w in fig.warnings)
    fig.client_MiBps = mean_stderr([c.MiBps for c in fig.client_stats])
    fig.client_ops_per_s = mean_stderr([c.ops_per_s for c in fig.client_stats])
    return fig


def group_figures(phase: str, status: str, reason: str | None, records: list[PhaseRecord], include_barrier: bool,
                  iteration: int, workload: Any, params: dict[str, Any] | None) -> dict[str, PhaseFigures]:
    """Each client group's figures, computed as for a phase of its clients alone: the aggregate is the sum of the
    group's bytes over the group's own span (its first start → its last end), per-client rates and fairness
    among its clients. Its flags and warnings stay with the whole phase's figures (the phase tables say them)."""
    by_group: dict[str, list[PhaseRecord]] = defaultdict(list)
    for r in sorted(records, key=lambda r: r.rank):
        if r.extra.get("group"):
            by_group[r.extra["group"]].append(r)
    out = {}
    for name, recs in by_group.items():
        g = phase_figures(phase, status, reason, recs, len(recs), include_barrier, iteration, workload, None, None,
                          params, per_group=False)
        g.flags, g.warnings = [], []
        out[name] = g
    return out


@dataclass
class CellFigures:
    cell: CellRow
    phases: list[PhaseFigures]
    rtt: dict[str, dict[str, Any]] = field(default_factory=dict)  # group → requested / measured RTT (links.py)
    network: dict[str, Any] | None = None  # the cell's network event: its links' settings
    result: dict[str, Any] | None = None  # the workload's figure of the whole cell (Workload.cell_result: IO500's score)


def cell_figures(cell: CellRow, where: dict[str, Any] | None = None, limits: dict[str, float] | None = None,
                 events: list[dict[str, Any]] | None = None, samples: list[tuple] | None = None) -> CellFigures:
    """The figures of each phase of ``cell``; ``events`` are the cell's (its faults go on the timelines, its
    ``network`` event gives the links' rates and the measured RTT); ``samples`` its probe samples ((t, probe,
    device, metric, value): the ``link`` ones give each emulated link's traffic per phase)."""
    from ..workloads import WORKLOADS

    workload = WORKLOADS.get(cell.kind)
    include_barrier = getattr(workload, "rate_includes_barrier", False)
    by_step: dict[tuple[str, int], list[PhaseRecord]] = defaultdict(list)
    for r in cell.records:
        by_step[r.step].append(r)
    phases = [phase_figures(ph, status, reason, by_step.get((ph, it), []), cell.clients, include_barrier, it, workload,
                            where, limits, cell.params)
              for ph, it, status, reason in cell.phases]
    for fig in phases:
        struck = [e for e in events or () if e.get("phase") == fig.phase
                  and (e.get("detail") or {}).get("iteration", 0) == fig.iteration]
        fig.timeline = phase_timeline(by_step.get((fig.phase, fig.iteration), []), struck)
        fig.flags += [f for f in fault_flags(struck) if f not in fig.flags]
    network = network_event(events)
    rtt = rtt_rows(network)
    series = link_series(samples or [])
    rates = {h: float(s["rate"]) for h, s in ((network or {}).get("links") or {}).items()
             if isinstance(s, dict) and s.get("rate")}
    for fig in phases:
        recs = by_step.get((fig.phase, fig.iteration), [])
        exact = {r.extra["link"]["host"]: r.extra["link"] for r in recs if isinstance(r.extra.get("link"), dict)}
        if (series or exact) and recs and fig.status == "ok":
            fig.links = link_traffic(series, min(r.start_ns for r in recs), max(r.end_ns for r in recs), rates,
                                     exact)
            fig.warnings += [w for w in saturation_warnings(fig.links) if w not in fig.warnings]
        if fig.status == "ok":
            fig.warnings += [w for w in rtt_warnings(rtt) + loss_warnings(network) if w not in fig.warnings]
    result = workload.cell_result(cell.params, phases) if workload is not None and cell.status == "ok" else None
    return CellFigures(cell=cell, phases=phases, rtt=rtt, network=network, result=result)


@dataclass
class ConfigSummary:
    """One configuration (target x workload x factors) summarised across its repetitions."""

    target: str
    workload: str
    kind: str
    factors: dict[str, Any]
    params: dict[str, Any]
    clients: int
    phase: str
    repetitions: int  # cells of this configuration; the summaries also span iterations inside a cell
    statuses: list[str]
    bandwidth: Summary | None
    ops_per_s: Summary | None
    stonewall: Summary | None
    latency_p50_us: Summary | None
    latency_p99_us: Summary | None
    per_client_MiBps: Summary | None  # the mean per-client rate of each cell, summarised over repetitions
    cpu_seconds_per_GB: Summary | None
    extras: dict[str, Summary]  # the workload's own numeric phase figures, summarised over repetitions
    reason: str | None
    warnings: list[dict[str, str]]
    errors: dict[str, int]
    outliers: list[dict[str, Any]] = field(default_factory=list)
    outliers_excluded: bool = False
    flags: list[dict[str, str]] = field(default_factory=list)
    seen: dict[str, int] = field(default_factory=dict)  # flag or warning code → how many runs of the phase had it
    amplification: Summary | None = None  # bytes the target moved / bytes asked for (read or write phases)
    moved_sources: list[str] = field(default_factory=list)  # where those moved bytes were counted (sanity.py)
    io_engines: list[str] = field(default_factory=list)  # what ran the timed loops of its phases (kernel.py)
    latency_of: list[str] = field(default_factory=list)  # the requests its latencies are of, when not its calls
    jain: Summary | None = None  # fairness among the clients (fairness.py), over repetitions
    cov: Summary | None = None
    spread: Summary | None = None
    group: str | None = None  # set on a client group's own summary (issue 17)
    groups: dict[str, "ConfigSummary"] = field(default_factory=dict)  # each client group's summary
    rtt: dict[str, dict[str, Any]] = field(default_factory=dict)  # group → requested / measured RTT (links.py)
    links: dict[str, dict[str, Any]] = field(default_factory=dict)  # emulated host → its link's traffic
    hosts: dict[str, dict[str, Any]] = field(default_factory=dict)  # clients on several hosts: each host's (hosts.py)
    host_spread: dict[str, Any] | None = None  # the spread between those hosts
    cache: dict[str, Summary] = field(default_factory=dict)  # a cache's hit, miss and origin bytes (sanity.py)

    def as_dict(self) -> dict[str, Any]:
        def s(x: Summary | None) -> dict | None:
            return x.as_dict() if x else None

        return {"target": self.target, "workload": self.workload, "kind": self.kind, "factors": self.factors,
                "phase": self.phase, "repetitions": self.repetitions, "statuses": self.statuses,
                "bandwidth_MiBps": s(self.bandwidth), "stonewall_MiBps": s(self.stonewall),
                "ops_per_s": s(self.ops_per_s), "latency_p50_us": s(self.latency_p50_us),
                "latency_p99_us": s(self.latency_p99_us), "per_client_MiBps": s(self.per_client_MiBps),
                "cpu_seconds_per_GB": s(self.cpu_seconds_per_GB), **{k: s(v) for k, v in self.extras.items()},
                **({"reason": self.reason} if self.reason else {}),
                "warnings": self.warnings, "flags": self.flags, "errors": self.errors, "outliers": self.outliers,
                "outlier_rule": OUTLIER_RULE, "outliers_excluded": self.outliers_excluded,
                "amplification": s(self.amplification), "moved_sources": self.moved_sources,
                **({"io_engines": self.io_engines} if self.io_engines else {}),
                **({"cache": {k: s(v) for k, v in self.cache.items()}} if self.cache else {}),
                **({"latency_of": self.latency_of} if self.latency_of else {}),
                **({"jain": s(self.jain), "cov": s(self.cov), "spread": s(self.spread)} if self.jain else {}),
                **({"group": self.group, "clients": self.clients} if self.group else {}),
                **({"groups": {name: g.as_dict() for name, g in self.groups.items()}} if self.groups else {}),
                **({"rtt": self.rtt} if self.rtt else {}), **({"links": self.links} if self.links else {}),
                **({"hosts": {h: {k: (s(v) if isinstance(v, Summary) else v) for k, v in row.items()}
                              for h, row in self.hosts.items()},
                    "host_spread": {k: (s(v) if isinstance(v, Summary) else v)
                                    for k, v in (self.host_spread or {}).items()}} if self.hosts else {})}


OUTLIER_MADS = 3.0
OUTLIER_RULE = (f"a repetition is an outlier when its figure lies more than {OUTLIER_MADS:g} scaled median absolute "
                "deviations (1.4826 × MAD) from the median of its configuration (at least 3 repetitions)")


def key_figure(ph: PhaseFigures) -> float | None:
    """The figure a phase is judged by: its bandwidth when it moves data, else its rate of operations."""
    return ph.bandwidth_MiBps if ph.bytes else ph.ops_per_s


def outliers(phases: list[tuple[CellRow, PhaseFigures]]) -> list[tuple[CellRow, PhaseFigures]]:
    """The repetitions beyond OUTLIER_RULE."""
    values = [(c, ph, key_figure(ph)) for c, ph in phases if key_figure(ph) is not None]
    if len(values) < 3:
        return []
    xs = sorted(v for _, _, v in values)
    med = statistics.median(xs)
    mad = statistics.median(abs(x - med) for x in xs) * 1.4826
    if mad == 0:
        return []
    return [(c, ph) for c, ph, v in values if abs(v - med) > OUTLIER_MADS * mad]


def summarize_run(cells: list[CellFigures], exclude_outliers: bool = False) -> list[ConfigSummary]:
    groups: dict[tuple[int, str], list[tuple[CellRow, PhaseFigures]]] = defaultdict(list)
    order: list[tuple[int, str]] = []
    for cf in cells:
        for ph in cf.phases:
            key = (cf.cell.config, ph.phase)
            if key not in groups:
                order.append(key)
            groups[key].append((cf.cell, ph))
    by_cell = {cf.cell.cell_id: cf for cf in cells}
    out = []
    for key in order:
        items = groups[key]
        summary = _config_summary(items, key[1], exclude_outliers)
        names = list(dict.fromkeys(name for _, ph in items for name in ph.groups))
        for name in names:  # each client group summarised as its own configuration (issue 17)
            mine = [(c, ph.groups[name]) for c, ph in items if name in ph.groups]
            g = _config_summary(mine, key[1], exclude_outliers)
            g.group, g.clients = name, mine[0][1].clients
            g.flags, g.warnings, g.seen = [], [], {}
            summary.groups[name] = g
        summary.rtt = summarize_rtt([by_cell[i].rtt for i in dict.fromkeys(c.cell_id for c, _ in items)
                                     if by_cell[i].rtt])
        summary.links = summarize_links([ph.links for _, ph in items if ph.links])
        out.append(summary)
    return out


def _config_summary(items: list[tuple[CellRow, PhaseFigures]], phase: str, exclude_outliers: bool) -> ConfigSummary:
    """One configuration's phase summarised over its repetitions (and iterations)."""
    cell0 = items[0][0]
    flagged = outliers([(c, ph) for c, ph in items if ph.status == "ok"])
    flagged_ids = {id(ph) for _, ph in flagged}
    ok = [ph for _, ph in items if ph.status == "ok" and not (exclude_outliers and id(ph) in flagged_ids)]
    warnings: list[dict[str, str]] = []
    flags: list[dict[str, str]] = []
    errors: dict[str, int] = {}
    seen: dict[str, int] = {}
    for _, ph in items:
        warnings += [w for w in ph.warnings if w not in warnings]
        flags += [f for f in ph.flags if f not in flags]
        for code in {x["code"] for x in (*ph.flags, *ph.warnings)}:
            seen[code] = seen.get(code, 0) + 1
        for k, v in ph.errors.items():
            errors[k] = errors.get(k, 0) + v
    fair = [ph.fairness for ph in ok if ph.fairness]
    return ConfigSummary(
        target=cell0.target, workload=cell0.workload, kind=cell0.kind, factors=cell0.factors,
        params=cell0.params, clients=cell0.clients, phase=phase, repetitions=len({c.cell_id for c, _ in items}),
        statuses=[ph.status for _, ph in items],
        bandwidth=summarize([ph.bandwidth_MiBps for ph in ok]),
        ops_per_s=summarize([ph.ops_per_s for ph in ok]),
        stonewall=summarize([ph.stonewall_MiBps for ph in ok if ph.stonewall_MiBps is not None]),
        latency_p50_us=summarize([ph.latency_us.get("p50") for ph in ok if ph.latency_us.get("p50") is not None]),
        latency_p99_us=summarize([ph.latency_us.get("p99") for ph in ok if ph.latency_us.get("p99") is not None]),
        per_client_MiBps=summarize([ph.client_MiBps[0] for ph in ok if ph.client_MiBps[0] is not None]),
        cpu_seconds_per_GB=summarize([ph.cpu_seconds / (ph.bytes / 1e9) for ph in ok if ph.bytes]),
        extras=_extra_summaries(ok),
        reason=next((ph.reason for _, ph in items if ph.reason), None), warnings=warnings, errors=errors,
        outliers=[{"cell": c.cell_id, "repetition": c.repetition, "iteration": ph.iteration,
                   "value": key_figure(ph)} for c, ph in flagged],
        outliers_excluded=exclude_outliers and bool(flagged), flags=flags, seen=seen,
        amplification=summarize([a for ph in ok if (a := _amplification(ph)) is not None]),
        moved_sources=list(dict.fromkeys(src for ph in ok if (src := (ph.probes or {}).get("moved_source")))),
        io_engines=sorted({e for _, ph in items for e in ph.io_engines}),
        latency_of=sorted({ph.latency_of["what"] for _, ph in items if ph.latency_of}),
        jain=summarize([f["jain"] for f in fair if f.get("jain") is not None]),
        cov=summarize([f["cov"] for f in fair if f.get("cov") is not None]),
        spread=summarize([f["spread"] for f in fair if f.get("spread") is not None]),
        hosts=summarize_hosts(ok), host_spread=summarize_spread(ok), cache=_cache_summaries(ok))


CACHE_FIGURES = ("cache_hit_bytes", "cache_miss_bytes", "origin_read_bytes")


def _cache_summaries(ok: list[PhaseFigures]) -> dict[str, Summary]:
    """A cache's own figures of the phase (hits, misses, what its origin moved), over repetitions; none elsewhere."""
    out = {}
    for key in CACHE_FIGURES:
        values = [v for ph in ok if (v := (ph.probes or {}).get(key)) is not None]
        if values:
            out[key] = summarize(values)
    return out


def _amplification(ph: PhaseFigures) -> float | None:
    return ph.read_amplification if ph.read_amplification is not None else ph.write_amplification


def _numbers(extra: dict[str, Any]) -> dict[str, float]:
    """The numeric figures of a phase's extra dict, nested ones as ``outer.inner``."""
    out: dict[str, float] = {}
    for k, v in extra.items():
        if isinstance(v, dict) and k != "counters":
            out.update({f"{k}.{kk}": vv for kk, vv in v.items() if isinstance(vv, (int, float)) and not isinstance(vv, bool)})
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[k] = v
    return out


def _extra_summaries(phases: list[PhaseFigures]) -> dict[str, Summary]:
    values: dict[str, list[float]] = defaultdict(list)
    for ph in phases:
        for k, v in _numbers(ph.extra).items():
            values[k].append(v)
    return {k: s for k, vs in sorted(values.items()) if (s := summarize(vs)) is not None}


def analyze(run: RunData, exclude_outliers: bool = False,
            samples: list[tuple] | None = None) -> tuple[list[CellFigures], list[ConfigSummary]]:
    """Every cell's figures and the configurations' summaries. ``samples``: the run's probe samples
    (``Store.load_samples``), for the emulated links' traffic per phase; without them links are not judged."""
    where = run.environment.get("targets", {})
    limits = {name: t.get("limits", {}) for name, t in run.study.get("targets", {}).items()}
    events: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for e in run.events:
        events[e.get("cell")].append(e)
    per_cell: dict[int, list[tuple]] = defaultdict(list)
    for row in samples or ():
        if row[2] == "link":
            per_cell[row[0]].append(row[1:])
    cells = [cell_figures(c, {**where.get(c.target, {}).get("path", {}), **link_limits(network_event(events[c.cell_id]), c.factors)},
                          limits.get(c.target, {}), events[c.cell_id], per_cell.get(c.cell_id))
             for c in run.cells]
    return cells, summarize_run(cells, exclude_outliers)
