"""Terminal tables of a run (rich), with a note under each on how its figures were measured.

Names, URLs, paths and error texts are data, never markup: every cell and line printed goes through
:func:`storeval.report.console.safe`.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from rich.console import Console
from rich.table import Table

from ..analysis.figures import ConfigSummary
from ..stats import Summary
from ..analysis.table import rep_notes
from ..spec import is_size_param
from ..units import format_duration_ns, format_size_compact, sig
from ..workloads import WORKLOADS
from .console import safe

HOW_MEASURED = {
    "bandwidth": ("MiB/s: aggregate = bytes of all clients / (last client end − first client start), open to close "
                  "inside the barriers (IOR's definition). Stonewall: bytes moved until the first client finished, or with a "
                  "deadline, until the deadline (then stonewall_rule is 'deadline' in the JSON). "
                  "Latency: per operation, from a merged log-linear histogram (±0.4 %)."),
    "skim": ("events/s and MB/s (bytes requested / wall, 10^6 B) over all clients; per client: mean ± stderr of the "
             "clients' MB/s, as the seed studies report it; CPU eff. = client CPU seconds / wall seconds; amplification"
             " = bytes requested (req.) or moved by the client's storage stack (moved) / bytes the selected baskets need."
             " client-bound: the clients were busy on CPU (share of their wall time) and may have set events/s. "
             "Storage-side figures, whatever the client: requests made, I/O wait = the clients' time inside driver "
             "reads / their wall time, MB/s I/O-bound = bytes requested / the clients' mean I/O wait."),
    "copy": ("MiB/s: aggregate = bytes of all workers / (last end − first start), staggered starts included; per "
             "worker: each worker's bytes over its own copy time, mean over workers; CPU: client CPU seconds per GB moved."),
    "metadata": ("ops/s: operations of all clients / (exit of the closing barrier − first client start), mdtest's rate; "
                 "max/min/mean/std dev over iterations and repetitions, as mdtest's SUMMARY. Latency: per operation."),
}


def fmt_summary(s: Summary | None, scale: float = 1.0) -> str:
    if s is None:
        return "–"
    if s.n > 1 and s.stderr is not None:
        return f"{sig(s.mean * scale)} ± {sig(s.stderr * scale, 2)}"
    return sig(s.mean * scale)


def fmt_latency(s: Summary | None) -> str:
    return format_duration_ns(s.mean * 1e3) if s else "–"


def fmt_factors(kind: str, factors: dict[str, Any]) -> str:
    model = WORKLOADS[kind].Params if kind in WORKLOADS else None
    parts = []
    for k, v in factors.items():
        if k == "clients":
            continue
        if model is not None and k in model.model_fields and is_size_param(model, k) and isinstance(v, int):
            v = format_size_compact(v)
        elif isinstance(v, list):
            v = "+".join(map(str, v))
        parts.append(f"{k}={v}")
    return " ".join(parts)


def describe_settings(kind: str, params: dict[str, Any], exclude: set[str]) -> str:
    """How the data moved, in words: the settings a reader must know to trust a figure."""
    p = {k: v for k, v in params.items() if k not in exclude}
    if kind == "metadata":
        from ..workloads.metadata import MetadataParams

        mp = MetadataParams.model_validate(params)
        parts = [({"items", "items_per_dir", "depth", "branching", "leaf_only"}, f"{mp.items_per_client:,} items per client"),
                 ({"mode"}, f"{mp.mode} mode"),
                 ({"depth", "branching", "leaf_only"}, f"tree of depth {mp.depth} × branching {mp.branching} "
                  f"({mp.tree_dirs:,} dirs{', items in the leaves' if mp.leaf_only else ''})"),
                 ({"file_size"}, f"{format_size_compact(mp.file_size)} written and read per file" if mp.file_size else ""),
                 ({"stat_stride"}, f"stat/list/read/remove the items of rank+{mp.stat_stride}" if mp.stat_stride else ""),
                 ({"iterations"}, f"{mp.iterations} iterations" if mp.iterations > 1 else ""),
                 ({"deadline"}, f"create phases stonewalled at {mp.deadline:g} s (then every client makes as many as "
                                f"the busiest made by then; the item count is an upper bound)" if mp.deadline else ""),
                 ({"repeat_for"}, f"stat/list/read passes repeated for {mp.repeat_for:g} s (warm after the first)"
                                  if mp.repeat_for else "")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)
    if kind == "skim":
        files = (f"{p['files_per_client']} file(s) per client, its own" if p.get("files_per_client")
                 else f"{p.get('files') or 3} file(s) read by every client")
        parts = [({"files", "files_per_client", "file_size"}, f"{files}, of {format_size_compact(p.get('file_size', 0))}"),
                 ({"compression", "compression_level"}, f"{p.get('compression')} {p.get('compression_level')}"),
                 ({"cluster_size"}, f"clusters of {format_size_compact(p.get('cluster_size', 0))}"),
                 ({"fraction", "event_fraction"}, f"{p['event_fraction']:.0%} of the events" if p.get("event_fraction")
                  else f"{p.get('fraction', 0.5):.0%} of each file's basket bytes"),
                 ({"strategy"}, f"strategy {p.get('strategy')}"),
                 ({"cpu_per_event"}, f"{p['cpu_per_event'] * 1e6:.0f} µs CPU per event" if p.get("cpu_per_event") else "")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)
    if kind == "copy":
        parts = [({"chunk_size"}, f"{format_size_compact(p.get('chunk_size', 0))} per worker"),
                 ({"transfer_size"}, f"in {format_size_compact(p.get('transfer_size', 0))} pieces"),
                 ({"stagger"}, f"worker k starts k × {p.get('stagger', 0):g} s late")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)
    if kind != "bandwidth":
        return ""
    words = []
    if "transfer_size" in p:
        words.append(f"{format_size_compact(p['transfer_size'])} transfers")
    if "file_size" in p:
        words.append(f"{format_size_compact(p['file_size'])} per client")
    if "direct" in p:
        words.append("O_DIRECT" if p["direct"] else "buffered I/O (page cache)")
    if "fsync" in p:
        words.append("fsync before close" if p["fsync"] else "no fsync")
    if "layout" in p:
        words.append(p["layout"].replace("-", " "))
    if p.get("reorder"):
        words.append("reads of rank+1's data")
    if p.get("iodepth", 1) > 1:
        words.append(f"{p['iodepth']} I/Os in flight per client")
    if p.get("deadline"):
        words.append(f"stonewall deadline {p['deadline']:g} s (then every client finishes up to the most any client "
                     "did; the file size is an upper bound)")
    return ", ".join(words)


def notes_for(s: ConfigSummary) -> str:
    """One configuration's notes in the phase tables: each flag, warning and the outliers once, counted over
    its repetitions (``✗ short-phase in 3 of 3 reps``); failures, skips and error counts."""
    notes = [n for n in rep_notes([s]) if not n.startswith("⚠")]
    failed = [st for st in s.statuses if st not in ("ok", "skipped")]
    if s.reason and "skipped" in s.statuses:  # a failure's reason is the cell's error, printed under the table
        notes.append(f"skipped: {s.reason}")
    if failed:
        notes.append(f"{len(failed)}/{len(s.statuses)} {'/'.join(sorted(set(failed)))}")
    if s.errors:
        notes.append("errors " + ", ".join(f"{k}×{v}" for k, v in s.errors.items()))
    notes += [n for n in rep_notes([s]) if n.startswith("⚠")]
    return "; ".join(notes)


def fmt_table_figure(f: dict[str, Any] | None, with_clients: bool = True) -> str:
    """A Table-1 figure: mean ± stderr (over repetitions) and the client count where the best mean was reached."""
    if not f:
        return "–"
    text = sig(f["mean"]) + (f" ± {sig(f['stderr'], 2)}" if f.get("stderr") is not None and f.get("n", 1) > 1 else "")
    return f"{text} @{f['clients']}" if with_clients else text


def fmt_table_rates(row: dict[str, Any]) -> str:
    rates = row["rates"]
    if not rates:
        return "–"
    if len(rates) == 1 and row["kind"] != "metadata":
        return fmt_table_figure(next(iter(rates.values())))
    return "; ".join(f"{phase} {fmt_table_figure(f)}" for phase, f in rates.items())


def table_rows(table: list[dict[str, Any]]) -> list[list[str]]:
    """The Table-1 rows as text (the terminal and the HTML report print exactly these)."""
    out = []
    for row in table:
        factors = fmt_factors(row["kind"], row["factors"])
        clients = row["clients"]
        out.append([row["target"], row["workload"] + (f" {factors}" if factors else ""),
                    f"{clients[0]}–{clients[-1]}" if len(clients) > 1 else str(clients[0]),
                    fmt_table_figure(row["read_MiBps"]), fmt_table_figure(row["write_MiBps"]),
                    f"{fmt_table_rates(row)}" + (f" {row['rate_unit']}" if row["rates"] else ""),
                    "; ".join(row["notes"])])
    return out


TABLE_COLUMNS = ["target", "workload", "clients", "read MiB/s", "write MiB/s", "ops/s · events/s", "notes"]
TABLE_CAPTION = ("Each figure is the best mean over the client counts measured, ± its stderr over repetitions, @ the "
                 "client count that reached it. read/write: bandwidth read/write phases (else reread/rewrite, "
                 "randread/randwrite), copy download/upload, skim bytes requested per second; MiB = 2^20 bytes.")


def print_table(table: list[dict[str, Any]], console: Console) -> None:
    """Seed 000's Table 1: one row per target × workload, read, write, rate, notes."""
    if not table:
        return
    t = Table(title="Summary — storage × workload", caption=TABLE_CAPTION, caption_justify="left")
    for col in TABLE_COLUMNS:
        t.add_column(col, justify="left" if col in ("target", "workload", "notes") else "right", overflow="fold")
    for row in table_rows(table):
        t.add_row(*map(safe, row))
    console.print(t)


def print_scaling(scaling: list[dict[str, Any]], console: Console) -> None:
    """One line per swept configuration: where the aggregate saturates (and, for copies, peaks)."""
    for s in scaling:
        unit = "ops/s" if s["figure"] == "ops_per_s" else "MiB/s"
        points = ", ".join(f"{p['clients']}→{sig(p['aggregate'])}" for p in s["series"])
        extra = f"; workers to peak {s['workers_to_peak']}" if s["kind"] == "copy" else ""
        console.print(f"scaling {safe(s['target'])} · {safe(s['workload'])} · {s['phase']}: {points} {unit}; saturation "
                      f"at {s['saturation_clients']} client{'s' if s['saturation_clients'] != 1 else ''}{extra}",
                      highlight=False)


def phase_tables(summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    """One table per workload kind, one row per configuration and phase (text cells; terminal and HTML)."""
    by_kind: dict[str, list[ConfigSummary]] = defaultdict(list)
    for s in summary:
        by_kind[s.kind].append(s)
    tables = []
    for kind, rows in by_kind.items():
        reps = max(r.repetitions for r in rows)
        settings: dict[str, str] = {}
        for r in rows:
            text = describe_settings(kind, r.params, set(r.factors))
            if text and r.workload not in settings:
                settings[r.workload] = text
        caption = [f"{name}: {text}." for name, text in settings.items()]
        caption.append(HOW_MEASURED.get(kind, ""))
        if reps > 1:
            caption.append(f"a ± b = mean ± stderr over {reps} repetitions.")
        if any(r.outliers for r in rows):
            from ..analysis.figures import OUTLIER_RULE

            excluded = any(r.outliers_excluded for r in rows)
            caption.append(("Outlier repetitions are EXCLUDED from these figures (--exclude-outliers); " if excluded
                            else "Outlier repetitions are flagged and still included; ") + OUTLIER_RULE + ".")
        sources: dict[str, list[str]] = {}  # where moved bytes were counted → the targets counted there
        for r in rows:
            for src in r.moved_sources:
                if r.target not in sources.setdefault(src, []):
                    sources[src].append(r.target)
        if sources:
            caption.append(("moved × = bytes the target moved / bytes the phase asked for; " if kind != "skim" else "")
                           + "bytes moved counted at: " + "; ".join(
                               f"{', '.join(targets)} — {src}" for src, targets in sources.items()) + ".")
        rate_columns = RATE_COLUMNS.get(kind, RATE_COLUMNS["bandwidth"])
        if kind != "skim" and any(r.amplification is not None for r in rows):
            rate_columns = [*rate_columns, ("moved ×", lambda r: fmt_summary(r.amplification))]
        columns = ["target", "workload", "clients", "phase", *[name for name, _ in rate_columns], "p50", "p99", "notes"]
        text_rows = []
        for r in rows:
            factors = fmt_factors(r.kind, r.factors)
            text_rows.append([r.target, r.workload + (f" {factors}" if factors else ""), str(r.clients), r.phase,
                              *[cell(r) for _, cell in rate_columns],
                              fmt_latency(r.latency_p50_us), fmt_latency(r.latency_p99_us), notes_for(r)])
        tables.append({"kind": kind, "title": f"{kind} — {WORKLOADS[kind].summary}" if kind in WORKLOADS else kind,
                       "columns": columns, "rows": text_rows, "caption": [c for c in caption if c], "summary": rows})
    return tables


def print_summary(summary: list[ConfigSummary], console: Console | None = None) -> None:
    console = console or Console()
    for spec in phase_tables(summary):
        table = Table(title=safe(spec["title"]), caption="\n".join(map(safe, spec["caption"])), caption_justify="left")
        for col in spec["columns"]:
            table.add_column(col, justify="left" if col in ("target", "workload", "phase", "notes") else "right",
                             overflow="fold")
        for row in spec["rows"]:
            table.add_row(*map(safe, row))
        console.print(table)
        print_messages(spec["summary"], console)


def print_messages(rows: list[ConfigSummary], console: Console, limit: int = 12) -> None:
    """Each distinct flag and warning once, with the first configuration it concerns: the notes' meaning."""
    seen: dict[str, str] = {}
    for r in rows:
        for mark, items in (("✗", r.flags), ("⚠", r.warnings)):
            for item in items:
                key = f"{item['code']}|{item['message'][:40]}|{r.target}|{r.workload}|{r.clients}|{r.phase}"
                if key not in seen:
                    seen[key] = (f"{mark} {item['code']}: {item['message']} "
                                 f"[{r.target} · {r.workload} · {r.clients} client(s) · {r.phase}]")
    lines = list(seen.values())
    for line in lines[:limit]:
        console.print(safe(line), highlight=False, soft_wrap=True)
    if len(lines) > limit:
        console.print(f"… and {len(lines) - limit} more in the JSON document", highlight=False)


def fmt_per_client(r: ConfigSummary) -> str:
    """The seed's figure: the clients' mean MB/s ± the standard error over clients (averaged over repetitions)."""
    mean, err = r.extras.get("MBps_per_client.mean"), r.extras.get("MBps_per_client.stderr")
    if mean is None:
        return "–"
    return f"{sig(mean.mean)} ± {sig(err.mean, 2)}" if err is not None else sig(mean.mean)


def fmt_share(s: Summary | None) -> str:
    """A fraction as a percentage, mean over repetitions."""
    return f"{s.mean:.0%}" if s is not None else "–"


def fmt_events(r: ConfigSummary) -> str:
    """The skim's events/s, and beside it whether the client's CPU set it: events/s of a client-bound skim
    measure the client (how it is written, the host's CPUs) as much as the storage."""
    text = fmt_summary(r.extras.get("events_per_s"))
    if any(w["code"] == "client-bound" for w in r.warnings):
        share = r.extras.get("client_cpu_share")
        text += f" (client-bound, CPU {share.mean:.0%})" if share is not None else " (client-bound)"
    return text


def _stat(attr: str, which: str):
    def cell(r: ConfigSummary) -> str:
        s = getattr(r, attr)
        value = getattr(s, which) if s is not None else None
        return sig(value) if value is not None else "–"
    return cell


RATE_COLUMNS = {
    "bandwidth": [("MiB/s", lambda r: fmt_summary(r.bandwidth)), ("stonewall", lambda r: fmt_summary(r.stonewall)),
                  ("ops/s", lambda r: fmt_summary(r.ops_per_s))],
    "copy": [("MiB/s", lambda r: fmt_summary(r.bandwidth)), ("per worker MiB/s", lambda r: fmt_summary(r.per_client_MiBps)),
             ("CPU s/GB", lambda r: fmt_summary(r.cpu_seconds_per_GB))],
    "skim": [("events/s", lambda r: fmt_events(r)),
             ("MB/s", lambda r: fmt_summary(r.extras.get("MBps"))),
             ("MB/s per client", lambda r: fmt_per_client(r)),
             ("CPU eff.", lambda r: fmt_summary(r.extras.get("cpu_efficiency"))),
             ("needed MB", lambda r: fmt_summary(r.extras.get("bytes_needed"), 1e-6)),
             ("ampl. req./moved", lambda r: f"{fmt_summary(r.extras.get('request_amplification'))} / "
                                            f"{fmt_summary(r.extras.get('read_amplification'))}"),
             ("requests", lambda r: fmt_summary(r.extras.get("requests"))),
             ("I/O wait", lambda r: fmt_share(r.extras.get("io_wait_fraction"))),
             ("MB/s I/O-bound", lambda r: fmt_summary(r.extras.get("io_bound_MBps")))],
    # mdtest's SUMMARY: max, min, mean and standard deviation of the rate
    "metadata": [("max ops/s", _stat("ops_per_s", "max")), ("min ops/s", _stat("ops_per_s", "min")),
                 ("mean ops/s", _stat("ops_per_s", "mean")), ("std dev", _stat("ops_per_s", "stddev"))],
}
