"""Terminal tables of a run (rich), with a note under each on how its figures were measured.

Names, URLs, paths and error texts are data, never markup: every cell and line printed goes through
:func:`storeval.report.console.safe`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..analysis.figures import ConfigSummary
from ..analysis.links import SATURATED
from ..analysis.scaling import factors_text, held_label
from ..stats import Summary
from ..analysis.table import rep_notes
from ..core.faultplan import heal_count
from ..units import convert_rate, format_duration_ns, format_size, is_byte_rate, plural, sig
from ..workloads import WORKLOADS, workload_class
from ..workloads.base import Report, summary_text
from ..workloads.kernel import io_uring_spin_ns
from ..redact import redact_text, visible
from .console import safe

IO_URING_SPIN_US = io_uring_spin_ns() / 1e3

# How each engine of the measured-operation kernel (workloads/kernel.py) keeps its operations in flight.
ENGINE_WORDS = {"python": "the Python loop (one operation at a time per thread)",
                "psync": "native pread/pwrite, one operation at a time",
                "threads": "native pread/pwrite, iodepth threads",
                "io_uring": "native io_uring, iodepth operations in flight; a wait for completions spins up to "
                            f"{IO_URING_SPIN_US:g} µs before it sleeps, and that CPU is in the clients' cpu_seconds "
                            "(--json)",
                "null": "native loop without system calls (null target)"}

# ------------------------------------------------------------------------------------ tables that fit the console
# Every table is laid out for the console's width (report/console.py: COLUMNS, else the terminal's): each header
# on one line, no figure ever cut or folded inside a number. A table too wide for it is split into parts, one
# under the other, with the same rows: its leading key columns (which configuration a row is) repeated in each part
# (or, when they would take over half the width, shown in the first part and every part's rows numbered), its other
# columns in their declared order (primary figures first, notes last), the caption once under the last part.

KEYS = frozenset({"target", "workload", "clients", "group", "phase", "configuration", "host", "cell", "where", "fault",
                  "figure", "held fixed"})  # leading columns of these names say which row is which
TEXT = frozenset({"notes", "context", "written", "held fixed"})  # free text: folds where it must
SPAN = {"key": 16, "figure": 20, "text": 30}  # the width a column is packed at when its cells are wider
KEY_SHARE = 0.5  # keys wider than this share of the width are not repeated in every part of a split table


@dataclass
class _Column:
    name: str
    index: int
    role: str  # key, figure or text
    least: int  # narrower, the header would wrap or a figure would fold inside a number
    want: int  # the widest cell (or the header)
    width: int = 0
    empty: bool = False  # no row has anything in it


def _columns(columns: list[str], plain: list[list[str]], whole: frozenset[str]) -> list[_Column]:
    """Each column's role and widths: keys and free text may fold long words (names, URLs, paths) down to a
    few columns; a figure column never goes below its longest word, nor below its widest cell when that is
    short or the column is in ``whole``."""
    out = []
    keys = True
    for i, name in enumerate(columns):
        keys = keys and name in KEYS
        role = "key" if keys else "text" if name in TEXT else "figure"
        lines = [line for row in plain for line in row[i].split("\n")]
        header = cell_len(name)
        want = max([header, *map(cell_len, lines)])
        token = max([0, *(cell_len(word) for line in lines for word in line.split())])
        if role == "figure":
            least = want if name in whole or want <= SPAN["figure"] else max(header, token)
        else:
            least = max(header, min(token, 12))
        out.append(_Column(name, i, role, least, want, empty=not any(line.strip() for line in lines)))
    return out


def _packed(c: _Column) -> int:
    return min(c.want, max(c.least, SPAN[c.role]))


def _room(n: int, width: int) -> int:
    """Columns left for cells in a table of ``n`` columns: each has a space either side and a rule after it."""
    return width - 3 * n - 1


def _fit_part(cols: list[_Column], width: int) -> bool:
    """Set each column's width so the part fits ``width``: start packed, narrow the widest foldable columns
    (never below their least), then give what is left back to figures first, then keys, then text."""
    room = _room(len(cols), width)
    for c in cols:
        c.width = _packed(c)
    excess = sum(c.width for c in cols) - room
    for roles in (("text", "key"), ("figure",)):
        while excess > 0:
            narrowable = [c for c in cols if c.role in roles and c.width > c.least]
            if not narrowable:
                break
            widest = max(narrowable, key=lambda c: c.width)
            cut = min(excess, widest.width - widest.least,
                      max(1, widest.width - max([0, *(c.width for c in narrowable if c is not widest)])))
            widest.width -= cut
            excess -= cut
    if excess > 0:
        return False
    spare = -excess
    for role in ("figure", "key", "text"):
        for c in cols:
            if c.role == role and spare > 0:
                more = min(spare, c.want - c.width)
                c.width += more
                spare -= more
    return True


def _take(base: list[_Column], rest: list[_Column], width: int) -> list[_Column]:
    """The most of ``rest``, in order, that fits beside ``base`` at their packed widths (one at least)."""
    n = 1
    while n < len(rest) and sum(map(_packed, base + rest[:n + 1])) <= _room(len(base) + n + 1, width):
        n += 1
    return rest[:n]


def _parts(cols: list[_Column], width: int, rows: int) -> list[list[_Column]] | None:
    """The table as parts that each fit ``width`` (one part when it all does), or None when even one column beside
    the keys cannot (rich then folds the table as best it can). Split, a column of free text no row fills is
    left out, and keys wider than KEY_SHARE of the width are shown in the first part only, every part then
    numbering its rows (``#``) so a row is found again."""
    if sum(c.want for c in cols) <= _room(len(cols), width):
        for c in cols:
            c.width = c.want
        return [cols]
    keys = [c for c in cols if c.role == "key"]
    shown = [c for c in cols if c.role != "key" and not (c.role == "text" and c.empty)]
    number = _Column("#", -1, "figure", len(str(rows)), len(str(rows)))
    for repeat in (True, False) if sum(map(_packed, keys)) + 3 * len(keys) <= KEY_SHARE * width else (False,):
        parts: list[list[_Column]] = []
        rest = shown
        while rest or not parts:
            base = ([] if repeat else [replace(number)]) + ([replace(k) for k in keys] if repeat or not parts else [])
            group = _take(base, rest, width) if rest else []
            rest = rest[len(group):]
            part = base + group
            if not _fit_part(part, width):
                break
            parts.append(part)
        else:
            return parts
    return None


def print_fitted(console: Console, title: str, columns: list[str], rows: list[list[str]], caption: str = "",
                 left: tuple[str, ...] | frozenset[str] = (), styles: list[str | None] | None = None,
                 whole: frozenset[str] = frozenset()) -> None:
    """Print a table of text cells (each passed through :func:`safe`) laid out for the console's width, split into
    parts when it is too wide (see above); ``caption`` (markup, its user text already safe) under the last part,
    as wide as the widest; ``left``: the columns justified left; ``styles``: one per row; ``whole``: columns
    never wrapped at all (a wrapped interval would read as two figures)."""
    markup = [[safe(cell) for cell in row] for row in rows]
    plain = [[Text.from_markup(cell, emoji=False).plain if "[" in cell or "\\" in cell else cell for cell in row]
             for row in markup]
    parts = _parts(_columns(columns, plain, whole), console.width, len(rows))
    if parts is None:  # narrower than any layout: rich folds it
        parts = [[_Column(name, i, "text", 0, 0) for i, name in enumerate(columns)]]
    shown = 0
    for n, part in enumerate(parts, 1):
        name = title if len(parts) == 1 else (
            f"{title} (part 1 of {len(parts)})" if n == 1 else f"{title.split(' — ')[0]} (part {n} of {len(parts)})")
        table = Table(title=safe(name))
        for c in part:
            table.add_column(Text(c.name), justify="left" if c.name in left else "right", overflow="fold",
                             width=c.width or None)
        for j, row in enumerate(markup):
            table.add_row(*(row[c.index] if c.index >= 0 else str(j + 1) for c in part),
                          style=styles[j] if styles else None)
        console.print(table, soft_wrap=False)
        shown = max(shown, sum(c.width for c in part) + 3 * len(part) + 1 if part[0].width else console.width)
    if caption:
        console.print(caption, style="table.caption", width=min(shown, console.width), highlight=False,
                      soft_wrap=False)


def fmt_summary(s: Summary | None, scale: float = 1.0) -> str:
    return summary_text(s, scale)


def fmt_latency(s: Summary | None) -> str:
    return format_duration_ns(s.mean * 1e3) if s else "–"


def fmt_factors(kind: str, factors: dict[str, Any]) -> str:
    """A configuration's factors as a study writes them (``transfer_size=64KiB rtt=12ms``), clients left out."""
    return factors_text(kind, factors)


def report_of(kind: str) -> Report:
    """What workload ``kind`` declares about its report (InputError naming the kind when it is not installed)."""
    return workload_class(kind).report


def describe_settings(kind: str, params: dict[str, Any], exclude: set[str]) -> str:
    """How the data moved, in words: the settings a reader must know to trust a figure (the workload says)."""
    return workload_class(kind).describe_settings(params, exclude)


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


def fmt_table_figure(f: dict[str, Any] | None, with_clients: bool = True, unit: str = "") -> str:
    """A Table-1 figure: mean ± stderr (over repetitions), its ``unit`` when the column does not name it, and the
    client count where the best mean was reached."""
    if not f:
        return "–"
    text = sig(f["mean"]) + (f" ± {sig(f['stderr'], 2)}" if f.get("stderr") is not None and f.get("n", 1) > 1 else "")
    text += f" {unit}" if unit else ""
    return f"{text} @{f['clients']}" if with_clients else text


def fmt_table_rates(row: dict[str, Any], unit: str = "") -> str:
    """The rate cell: one figure, or one per phase (``dir-create 17,933 @1; file-stat …``), with ``unit``."""
    rates = row["rates"]
    if not rates:
        return "–"
    rate = report_of(row["kind"]).rate
    if len(rates) == 1 and not (rate is not None and rate.each_phase):
        return fmt_table_figure(next(iter(rates.values())), unit=unit)
    return "; ".join(f"{phase} {fmt_table_figure(f)}" for phase, f in rates.items()) + (f" {unit}" if unit else "")


def _figure_of(row: dict[str, Any], column: str) -> dict[str, Any] | None:
    """A row's read or write figure, in its workload's unit (rows of older JSON documents: MiB/s)."""
    if column in row:
        return row[column]
    old = row.get(f"{column}_MiBps")
    return None if old is None else {**old, "unit": "MiB/s"}


def _column_units(table: list[dict[str, Any]]) -> dict[str, str]:
    """The unit each figure column of Table 1 names in its header: the one unit of all its figures, or "" when
    they differ (each cell then says its own: MiB/s and MB/s are never mixed unnamed)."""
    units = {}
    for column in ("read", "write"):
        found = {f["unit"] for row in table if (f := _figure_of(row, column))}
        units[column] = found.pop() if len(found) == 1 else ("" if found else "MiB/s")
    found = {row["rate_unit"] for row in table if row["rates"]}
    units["rate"] = found.pop() if len(found) == 1 else ""
    return units


def table_columns(table: list[dict[str, Any]]) -> list[str]:
    """The Table-1 columns: a ``group`` column after the clients when the study has client groups; each figure
    column named with its unit when all its figures share one (``read MiB/s``), else bare (``read``)."""
    units = _column_units(table)
    columns = ["target", "workload", "clients", *(["group"] if any(row.get("group") for row in table) else []),
               f"read {units['read']}".strip(), f"write {units['write']}".strip(), units["rate"] or "rate", "notes"]
    return columns


def table_rows(table: list[dict[str, Any]]) -> list[list[str]]:
    """The Table-1 rows as text (the terminal and the HTML report print exactly these)."""
    out = []
    grouped = any(row.get("group") for row in table)
    units = _column_units(table)
    for row in table:
        factors = fmt_factors(row["kind"], row["factors"])
        clients = row["clients"]
        read, write = _figure_of(row, "read"), _figure_of(row, "write")
        out.append([row["target"], row["workload"] + (f" {factors}" if factors else ""),
                    f"{clients[0]}–{clients[-1]}" if len(clients) > 1 else str(clients[0]),
                    *([row.get("group") or "all"] if grouped else []),
                    fmt_table_figure(read, unit="" if units["read"] or not read else read["unit"]),
                    fmt_table_figure(write, unit="" if units["write"] or not write else write["unit"]),
                    fmt_table_rates(row, "" if units["rate"] else row["rate_unit"]),
                    "; ".join(row["notes"])])
    return out


UNIT_WORDS = {"MiB/s": "MiB/s = 2^20 bytes per second (as IOR)", "MB/s": "MB/s = 10^6 bytes per second (as the seeds "
                                                                              "quote it)"}


def table_caption(table: list[dict[str, Any]]) -> str:
    """The note under Table 1, for the workloads it holds: how each figure was taken, what each workload's
    read, write and rate are (its report's ``Best`` captions) and in which unit."""
    spread = any((f or {}).get("n", 1) > 1 for row in table for f in (row.get("read"), row.get("write"),
                                                                        *row["rates"].values()))
    text = [("Each figure is the best mean over the client counts measured" + (", ± its stderr over repetitions"
                                                                                if spread else "")
             + ", @ the client count that reached it.")]
    units: list[str] = []
    for kind in dict.fromkeys(row["kind"] for row in table):
        report = report_of(kind)
        parts = [f"{name}: {best.caption or name}, in {best.unit}" for name, best in
                 (("read", report.read), ("write", report.write), ("rate", report.rate)) if best is not None
                 and best.phases != ()]
        units += [best.unit for best in (report.read, report.write, report.rate) if best is not None]
        if parts:
            text.append(f"{kind} — {'; '.join(parts)}.")
    legend = [UNIT_WORDS[u] for u in dict.fromkeys(units) if u in UNIT_WORDS]
    if legend:
        text.append("; ".join(legend) + ".")
    if any(r.get("group") for r in table):
        text.append("group: all = every client; a client group's row takes its own aggregate (over its own span) at "
                    "its own client count.")
    return " ".join(text)


def print_table(table: list[dict[str, Any]], console: Console) -> None:
    """Seed 000's Table 1: one row per target × workload, read, write, rate, notes."""
    if not table:
        return
    print_fitted(console, "Summary — storage × workload", table_columns(table), table_rows(table),
                 safe(table_caption(table)), left=("target", "workload", "notes", "group"))


LINE_WORDS = {"events_per_s": ("events/s", "events/s"), "cpu_efficiency": ("CPU eff.", "CPU s / wall s")}


def held_fixed(s: dict[str, Any]) -> str:
    """The factors a scaling line holds fixed (sizes as sizes), and the client group whose own aggregate it
    follows: the line's ``label`` (analysis/scaling.py)."""
    return s["label"] if "label" in s else held_label(s)


def scaling_rows(rows: list[dict[str, Any]], along: str) -> tuple[list[str], list[list[str]]]:
    """Columns and text rows of the table of one swept setting: the aggregate at each of its values, and for
    workloads that have them the events/s and CPU efficiency (seed 003's skim vs RTT) on rows of their own."""
    labels = {p["x"]: p.get(along, p["x"]) for s in rows for p in s["series"]}
    xs = sorted(labels)
    columns = ["target", "workload", "phase", "held fixed", "figure", *(f"{along}={labels[x]}" for x in xs), "unit"]
    out = []
    for s in rows:
        points = {p["x"]: p for p in s["series"]}
        figures = [("aggregate", "aggregate", report_of(s["kind"]).scaling.unit)] + [
            (key, *LINE_WORDS[key]) for key in LINE_WORDS if any(key in p for p in s["series"])]
        for key, name, unit in figures:
            out.append([s["target"], s["workload"], s["phase"], held_fixed(s), name,
                        *(sig(points[x][key]) if x in points and points[x].get(key) is not None else "–" for x in xs),
                        unit])
    return columns, out


def print_scaling(scaling: list[dict[str, Any]], console: Console) -> None:
    """One line per swept configuration: where the aggregate saturates (and, for copies, peaks); then a table per
    swept system setting (seed 002's throughput vs servers), client group count or link setting (issue 17: rtt)."""
    by_setting: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in scaling:
        if s.get("along", "clients") != "clients":
            by_setting[s["along"]].append(s)
    for along, rows in by_setting.items():
        columns, text_rows = scaling_rows(rows, along)
        states = along == "degraded"
        print_fitted(console, "Healthy, degraded and healing — the aggregate in each state of the system" if states
                     else f"Aggregate vs {along}", columns, text_rows, "mean over repetitions; each row holds "
                     "every other factor fixed (clients, parameters)" + (
                         "; degraded=N: its last N parts killed through the cell; healing: the system repairing "
                         "what a part missed (each cell's event says how much of it the repair lasted)"
                         if states else ""),
                     left=("target", "workload", "phase", "held fixed", "figure", "unit"))
    for s in scaling:
        console.print(safe(scaling_line(s)), highlight=False)


def scaling_line(s: dict[str, Any]) -> str:
    """One scaling line: what it holds fixed, the aggregate at each point with its unit, where it saturates
    (``scaling scratch · bw (transfer_size=64KiB) · write: clients 1→505, 2→1,028 MiB/s; saturation at 2 clients``)."""
    declared = report_of(s["kind"]).scaling
    unit = s.get("unit") or declared.unit
    along = s.get("along", "clients")
    points = ", ".join(f"{p.get(along, p['x'])}→{sig(p['aggregate'])}" for p in s["series"])
    shown = held_fixed(s)
    if s.get("states"):
        return f"states {s['target']} · {s['workload']}{f' ({shown})' if shown else ''} · {s['phase']}: {points} {unit}"
    extra = ""
    if declared.peak and along == "clients" and s.get("workers_to_peak") is not None:
        extra = f"; workers to peak {s['workers_to_peak']}"
    if along == "clients":
        at = plural(s["saturation_clients"], "client") if s["saturation_clients"] is not None else "–"
    else:
        at = f"{along}={next((p.get(along) for p in s['series'] if p['x'] == s['saturation_clients']), s['saturation_clients'])}"
    return (f"scaling {s['target']} · {s['workload']}{f' ({shown})' if shown else ''} · {s['phase']}: {along} {points} "
            f"{unit}; saturation at {at}{extra}")


def shown_groups(r: ConfigSummary) -> list[ConfigSummary]:
    """The client groups of a configuration worth a row of their own: none when one group holds every client."""
    groups = list(r.groups.values())
    return [] if len(groups) == 1 and groups[0].clients == r.clients else groups


def phase_tables(summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    """One table per workload kind, one row per configuration and phase (text cells; terminal and HTML)."""
    by_kind: dict[str, list[ConfigSummary]] = defaultdict(list)
    for s in summary:
        by_kind[s.kind].append(s)
    tables = []
    for kind, rows in by_kind.items():
        report = report_of(kind)
        reps = max(r.repetitions for r in rows)
        settings: dict[str, str] = {}
        for r in rows:
            text = describe_settings(kind, r.params, set(r.factors))
            if text and r.workload not in settings:
                settings[r.workload] = text
        caption = [f"{name}: {text}." for name, text in settings.items()]
        caption.append(report.how_measured)
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
            caption.append(("moved × = bytes the target moved / bytes the phase asked for; " if report.amplification else "")
                           + "bytes moved counted at: " + "; ".join(
                               f"{', '.join(targets)} — {src}" for src, targets in sources.items()) + ".")
        cached = [r for r in rows if not r.group and any(r.cache.get(k) and r.cache[k].mean
                                                         for k in ("cache_hit_bytes", "cache_miss_bytes"))]
        if cached:  # a cache's own account of each phase: what it served from its disk, what it fetched
            caption.append("cache: " + "; ".join(
                f"{' '.join(x for x in (r.target, r.phase, factors_text(r.kind, r.factors)) if x)} — hits "
                f"{_bytes(r.cache, 'cache_hit_bytes')}, misses {_bytes(r.cache, 'cache_miss_bytes')}, origin moved "
                f"{_bytes(r.cache, 'origin_read_bytes')}" for r in cached)
                + " (hits and misses: the cache's access records; origin moved: its processes' reads).")
        engines: dict[str, list[str]] = {}  # what ran the timed loop → the targets it ran on
        for r in rows:
            for engine in r.io_engines:
                if r.target not in engines.setdefault(engine, []):
                    engines[engine].append(r.target)
        if engines:
            caption.append("timed loop run by: " + "; ".join(
                f"{', '.join(targets)} — {ENGINE_WORDS.get(e, e)}" for e, targets in engines.items()) + ".")
        requests: dict[str, list[str]] = {}  # the requests some phases' latencies are of → those phases
        for r in rows:
            for what in r.latency_of:
                if (where := f"{r.target} {r.phase}") not in requests.setdefault(what, []):
                    requests[what].append(where)
        if requests:
            caption.append("p50/p99 of " + "; ".join(
                f"{', '.join(where)}: each {what}, timed from its first byte sent to its response (the writes only "
                "copied into the part buffers it sent)" for what, where in requests.items()) + ".")
        rate_columns = [(f.name, f.cell) for f in report.columns]
        if report.amplification and any(r.amplification is not None for r in rows):
            # what the server moved is the whole phase's: a group's share of it is not known
            rate_columns = [*rate_columns, ("moved ×", lambda r: "–" if r.group else fmt_summary(r.amplification))]
        grouped = any(r.groups for r in rows)
        if grouped and not any("per " in name for name, _ in rate_columns):  # each group's per-client mean
            unit = report.scaling.unit if is_byte_rate(report.scaling.unit) else "MiB/s"  # the workload's own unit
            scale = convert_rate(1.0, "MiB/s", unit)
            rate_columns = [*rate_columns, (f"{unit} per client", lambda r: fmt_summary(r.per_client_MiBps, scale))]
        if grouped:
            caption.append("group: all = every client of the cell; each client group's row gives its aggregate over "
                           "its own span (its first start → its last end) and its clients' mean, at its own client "
                           "count; its flags are the whole phase's.")
        columns = ["target", "workload", "clients", *(["group"] if grouped else []), "phase",
                   *[name for name, _ in rate_columns], "p50", "p99", "notes"]
        text_rows = []
        for r in rows:
            factors = fmt_factors(r.kind, r.factors)
            for g in [r, *shown_groups(r)] if grouped else [r]:
                text_rows.append([r.target, r.workload + (f" {factors}" if factors else ""), str(g.clients),
                                  *([g.group or "all"] if grouped else []), r.phase,
                                  *[cell(g) for _, cell in rate_columns],
                                  fmt_latency(g.latency_p50_us), fmt_latency(g.latency_p99_us),
                                  notes_for(g) if g is r else ""])
        tables.append({"kind": kind, "title": f"{kind} — {WORKLOADS[kind].summary}",
                       "columns": columns, "rows": text_rows, "caption": [c for c in caption if c], "summary": rows})
    return tables


LEFT = ("target", "workload", "phase", "notes", "group", "host", "configuration")


def _print_spec(spec: dict[str, Any], console: Console) -> None:
    print_fitted(console, spec["title"], spec["columns"], spec["rows"], "\n".join(map(safe, spec["caption"])),
                 left=LEFT)


def print_summary(summary: list[ConfigSummary], console: Console | None = None) -> None:
    console = console or Console()
    for spec in phase_tables(summary):
        _print_spec(spec, console)
        print_messages(spec["summary"], console)
    for spec in network_tables(summary):
        _print_spec(spec, console)


def _ms(seconds: float | None) -> str:
    return "–" if seconds is None else f"{seconds * 1e3:.3g} ms"


def _where(r: ConfigSummary) -> str:
    factors = fmt_factors(r.kind, r.factors)
    return f"{r.target} · {r.workload}" + (f" {factors}" if factors else "")


MAX_HOST_ROWS = 8  # hosts listed one per row for a phase; beyond that its ends and the distribution between
HOST_ENDS = 3


def _few_hosts(rows: list[tuple[float, float, str, list[str]]]) -> list[list[str]]:
    """One phase's per-host rows ((rate per client, aggregate, unit, row)): all of them up to MAX_HOST_ROWS,
    else the HOST_ENDS slowest and fastest (per client) and one row saying how the hosts between spread."""
    if len(rows) <= MAX_HOST_ROWS:
        return [row for *_, row in rows]
    rows = sorted(rows, key=lambda x: x[0])
    middle = sorted(x[1] for x in rows[HOST_ENDS:-HOST_ENDS])
    unit = rows[0][2]

    def pct(q: float) -> str:
        return sig(middle[min(len(middle) - 1, round(q * (len(middle) - 1)))])

    between = [*rows[0][3][:3], f"… {len(middle)} hosts between", "–",
               f"p10 {pct(0.1)} · p50 {pct(0.5)} · p90 {pct(0.9)} {unit}", "–", "–", "–", *rows[0][3][9:]]
    return [row for *_, row in rows[:HOST_ENDS]] + [between] + [row for *_, row in rows[-HOST_ENDS:]]


def network_tables(summary: list[ConfigSummary]) -> list[dict[str, Any]]:
    """Issue 17's tables (terminal and HTML): fairness per client group, each emulated link's traffic per phase
    (saturation, drops, queue), and the RTT each group measured beside the one requested."""
    from ..analysis.fairness import RULE as FAIRNESS_RULE
    from ..analysis.links import RULE as LINK_RULE

    tables = []
    fair = []
    for r in summary:
        if not r.groups or r.jain is None:
            continue
        for g in [r, *shown_groups(r)]:
            fair.append([_where(r), str(r.clients), r.phase, g.group or "all", str(g.clients),
                         fmt_summary(g.jain), fmt_summary(g.cov), fmt_summary(g.spread, 100.0) + (" %" if g.spread else "")])
    if fair:
        tables.append({"id": "fairness-table", "title": "Fairness per client group",
                       "columns": ["configuration", "clients", "phase", "group", "group clients", "Jain", "CoV",
                                   "spread"], "rows": fair,
                       "caption": ["Jain = (Σx)² / (n·Σx²) of the clients' rates (1: all equal); CoV = stdev / mean; "
                                   "spread = slowest / fastest − 1 in time; each group among its own clients, all "
                                   "among every client; mean ± stderr over repetitions. " + FAIRNESS_RULE + "."]})
    links = []
    for r in summary:
        for host, f in r.links.items():
            used = f.get("utilisation")
            links.append([_where(r), str(r.clients), r.phase, host,
                          sig(f["rate_Bps"] / (1 << 20)) if f.get("rate_Bps") else "unlimited",
                          sig(f.get("rx_MiBps")), sig(f.get("tx_MiBps")),
                          "–" if used is None else f"{used:.0%}" + (" ✗" if used >= SATURATED else ""),
                          "–" if f.get("dropped") is None else f"{round(f['dropped']):,}", "–" if f.get("queue_max_bytes") is None
                          else format_size(f["queue_max_bytes"]), _ms(f.get("held_mean_s"))])
    if links:
        tables.append({"id": "links-table", "title": "Emulated links — traffic per phase",
                       "columns": ["configuration", "clients", "phase", "host", "rate MiB/s", "rx MiB/s", "tx MiB/s",
                                   "used", "dropped", "queue max", "delay added"], "rows": links,
                       "caption": ["rx/tx: what the host's interface counted in the phase — between the phase's "
                                   "barriers by the first client on that host, else its sampled counters interpolated "
                                   "at the phase's first start and last end (a host with no client: approximate for "
                                   "phases of a few seconds) — mean over repetitions; used: the larger direction / "
                                   "the link's rate; dropped: tbf + relay drops (loss and full queue), all "
                                   "repetitions; delay added: the relay's mean hold time each way (half the rtt "
                                   "asked). " + LINK_RULE + "."]})
    per_host = []
    for r in summary:
        spread = r.host_spread or {}
        rows = []
        for host, h in r.hosts.items():
            rate = h["MiBps"] if r.kind != "metadata" and h["MiBps"] and h["MiBps"].mean else h["ops_per_s"]
            unit = "MiB/s" if rate is h["MiBps"] else "ops/s"
            seconds = h["seconds"].mean if h.get("seconds") else None
            rx = h["net_rx_bytes"].mean / (1 << 20) / seconds if h.get("net_rx_bytes") and seconds else None
            tx = h["net_tx_bytes"].mean / (1 << 20) / seconds if h.get("net_tx_bytes") and seconds else None
            load = h.get("other_load")
            per_client = (rate.mean or 0.0) / max(h["clients"], 1)
            rows.append((per_client, rate.mean or 0.0, unit, [
                _where(r), str(r.clients), r.phase, host, str(h["clients"]), f"{fmt_summary(rate)} {unit}",
                sig(rx), sig(tx), "–" if load is None else f"{load:.0%}",
                fmt_summary(spread.get("spread"), 100.0) + " %" if spread.get("spread") else "–",
                fmt_summary(spread.get("jain"))]))
        per_host += _few_hosts(rows)
    if per_host:
        tables.append({"id": "hosts-table", "title": "Per host — clients on several hosts",
                       "columns": ["configuration", "clients", "phase", "host", "host clients", "aggregate",
                                   "rx MiB/s", "tx MiB/s", "other load", "host spread", "host Jain"], "rows": per_host,
                       "caption": ["aggregate: the host's clients' bytes (metadata: operations) over its own span, its "
                                   "first client's start to its last client's end; rx/tx: the host's interfaces (not "
                                   "lo) as its host leader counted them between the phase's barriers, over that span; "
                                   "other load: the share of the host's CPU other processes used; host spread = "
                                   "fastest / slowest host per client − 1, host Jain over the hosts' per-client "
                                   "rates (the same on every row of a configuration); mean ± stderr over "
                                   f"repetitions. Beyond {MAX_HOST_ROWS} hosts a phase shows its {HOST_ENDS} slowest "
                                   f"and {HOST_ENDS} fastest hosts (per client) and one row for the hosts between: "
                                   "their aggregates' 10th, 50th and 90th percentiles."]})
    rtt: dict[tuple, list[str]] = {}
    for r in summary:
        for group, x in r.rtt.items():
            key = (r.target, r.workload, tuple(sorted((k, str(v)) for k, v in r.factors.items())), group)
            measured = f"not measured: {x['error']}" if x.get("error") and x.get("median_s") is None else (
                _ms(x.get("median_s")) + (" ✗" if x.get("off") else ""))
            rtt.setdefault(key, [_where(r), group, _ms(x.get("requested_s")), measured, _ms(x.get("p90_s"))])
    if rtt:
        tables.append({"id": "rtt-table", "title": "Network — requested vs measured RTT per client group",
                       "columns": ["configuration", "group", "requested", "measured median", "measured p90"],
                       "rows": list(rtt.values()),
                       "caption": ["measured: the kernel's round trip (TCP_INFO) of TCP connects from the group's host to the target's server, "
                                   "median over the cell's repetitions; ✗ = " + LINK_RULE.split("; ")[1] + "."]})
    return tables


def where_of(r: ConfigSummary) -> str:
    """Which configuration a message concerns: ``[scratch · bw transfer_size=64KiB · 1 client · write]``."""
    factors = fmt_factors(r.kind, r.factors)
    return (f"[{r.target} · {r.workload}{f' {factors}' if factors else ''} · {plural(r.clients, 'client')} · "
            f"{r.phase}]")


def print_messages(rows: list[ConfigSummary], console: Console, limit: int = 12) -> None:
    """Each flag and warning once per configuration, with how many of its repetitions met it (their messages
    differ only in their numbers): the notes' meaning. The JSON document keeps every one."""
    seen: dict[tuple[str, str, str], list] = {}
    for r in rows:
        where = where_of(r)
        for mark, items in (("✗", r.flags), ("⚠", r.warnings)):
            for item in items:
                key = (mark, item["code"], where)
                if key in seen:
                    seen[key][1] += 1
                else:
                    seen[key] = [item["message"], 1, r.repetitions]
    lines = []
    for (mark, code, where), (message, times, reps) in seen.items():
        count = "" if times == 1 else (f" (in {times} of {reps} reps; the first said)" if times <= reps
                                       else f" ({times} times over {reps} rep{'s' if reps > 1 else ''}; the first said)")
        lines.append(f"{mark} {code}{count}: {message} {where}")
    for line in lines[:limit]:
        console.print(safe(line), highlight=False, soft_wrap=True)
    if len(lines) > limit:
        console.print(f"… and {len(lines) - limit} more in the JSON document", highlight=False)


def _fmt(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else sig(value, digits)


def fault_rows(cells: list[Any]) -> list[list[str]]:
    """One row per fault of a fault plan, with what the clients' throughput did around it and what the write
    check read back (analysis/timeline.py, analysis/guards.py)."""
    rows = []
    for cf in cells:
        for ph in cf.phases:
            faults = (ph.timeline or {}).get("faults") or []
            check = ph.written_check
            checked = "–"
            if check:
                bad = check.get("bytes_lost", 0) + check.get("bytes_corrupted", 0) + check.get("bytes_unreadable", 0)
                checked = (f"{format_size(check.get('bytes_intact', 0))} intact, "
                           f"{format_size(bad)} lost" + (" ✗" if bad else ""))
            for f in faults:
                what = f"{f.get('action')} {f.get('server') or ''}".strip() + f" @ {f.get('planned')}"
                if f["kind"] != "fault":
                    rows.append([str(cf.cell.cell_id), f"{cf.cell.target} · {cf.cell.workload}", ph.phase, what,
                                 f["kind"].removeprefix("fault-"), *["–"] * 6, checked])
                    continue
                recovered = ("no" if f.get("recovered") is False else _fmt(f.get("recovered_after_s")))
                if f.get("inside_phase") is False:
                    recovered = "after the phase ended"
                rows.append([str(cf.cell.cell_id), f"{cf.cell.target} · {cf.cell.workload}", ph.phase, what,
                             f"{f['start_s']:.2f}" + (f"–{f['end_s']:.2f}" if f.get("end_s") is not None
                                                     else "") + " s", _fmt(f.get("baseline_MiBps")),
                             _fmt(f.get("during_MiBps")), _fmt(f.get("after_MiBps")), _fmt(f.get("stall_s")),
                             recovered, f"{ph.status}" + (f" (expected {f['expect']})" if f.get("expect") else "")
                             + (" ✗" if f.get("expect") and f["expect"] != ph.status else ""), checked])
    return rows


FAULT_COLUMNS = ("cell", "where", "phase", "fault", "struck–undone", "before", "during", "after", "stall s",
                 "recovered s", "phase", "written")
HEAL_COLUMNS = ("cell", "where", "fault", "said short after s", "back after s", "healed after s", "heal s",
                "most pending", "moved to heal", "healthy MiB/s", "while healing MiB/s", "source")
HEAL_CAPTION = (
    "What each system said of its own repair after a kill or stop, read from the system once a second (its source "
    "column: GlusterFS's heal info, HDFS's namenode, Ceph's placement groups): seconds from the fault until it said "
    "it was short, until the struck part was back, until it was whole again — no more pending than when the phase "
    "began, nothing down; heal: from the part's return (or, with nothing brought back, from its first word) to "
    "whole; most pending: the largest count it said; moved to heal: what its servers moved from the fault until "
    "whole as the source column counts it (GlusterFS: the self-heal daemon's sends; HDFS: the datanodes' "
    "BytesWritten, the clients' writes meanwhile included; Ceph: its placement groups' bytes recovered). Healthy: "
    "the clients' MiB/s before the fault; while healing: from the part's return until whole, within the phase "
    "(1 s resolution; \"first N s\" when the heal outlasted the phase).")


def heal_rows(cells: list[Any]) -> list[list[str]]:
    """One row per fault whose system said it had something to heal (storeval/faults.py's heal watch)."""
    rows = []
    for cf in cells:
        for ph in cf.phases:
            for f in (ph.timeline or {}).get("faults") or []:
                h = f.get("healing")
                if not h or (h.get("detected_after_s") is None and not h.get("errors")):
                    continue
                what = f"{f.get('action')} {f.get('server') or ''}".strip() + f" @ {f.get('planned')} {ph.phase}"
                healed = _fmt(h.get("healed_after_s"))
                if h.get("healed_after_s") is None:
                    healed = (f"not within {h.get('heal_timeout_s') or 0:g} s after the phases "
                              f"({h.get('pending_at_end') or 0:,} pending)")
                moved = "–" if h.get("bytes_moved") is None else format_size(h["bytes_moved"])
                while_ = _fmt(f.get("healing_MiBps"))
                if f.get("healing_MiBps") is not None and not f.get("healed_in_phase"):
                    while_ += f" (first {f.get('healing_in_phase_s') or 0:.1f} s)"
                unit = h.get("unit") or ""
                rows.append([str(cf.cell.cell_id), f"{cf.cell.target} · {cf.cell.workload}", what,
                             _fmt(h.get("detected_after_s")), _fmt(h.get("back_after_s")), healed, _fmt(h.get("heal_s")),
                             heal_count(h.get("max_pending", 0), unit), moved, _fmt(f.get("baseline_MiBps")),
                             while_, str(h.get("source") or h.get("last_error") or "–")])
    return rows


def print_faults(cells: list[Any], console: Console) -> None:
    """The faults of the run's fault plans and what each did, when there were any."""
    rows = fault_rows(cells)
    if not rows:
        return
    print_fitted(console, "Faults — what the clients saw", list(FAULT_COLUMNS), rows, (
        "struck/undone: seconds after the phase's start (the coordinator's clock); MiB/s before, during and after "
        "the fault from the clients' per-second timeline (1 s resolution); stall: longest run of seconds without a "
        "completed operation; recovered: seconds after the undo until a whole second at ≥ 90 % of before; written: "
        "what was read back after the phase against its stamps."), left=("where", "phase", "fault", "written"))
    healing = heal_rows(cells)
    if healing:
        print_fitted(console, "Healing — what each system repaired after its fault", list(HEAL_COLUMNS), healing,
                     HEAL_CAPTION, left=("where", "fault", "source"))


def cell_results(cells: list[Any]) -> list[dict[str, Any]]:
    """Each cell's figure of the whole cell as its workload words it (Workload.cell_result and result_lines:
    IO500's score and the rules it broke): {kind, where, lines}, for the terminal and the HTML report."""
    from ..workloads import WORKLOADS

    out = []
    for cf in cells:
        workload = WORKLOADS.get(cf.cell.kind)
        if not cf.result or workload is None:
            continue
        lines = workload.result_lines(cf.result)
        if lines:
            out.append({"kind": cf.cell.kind, "lines": lines,
                        "where": f"cell {cf.cell.cell_id} · {cf.cell.target} · {cf.cell.workload}"})
    return out


def print_results(cells: list[Any], console: Console) -> None:
    """Each cell's figure of the whole cell, under the run's tables."""
    for r in cell_results(cells):
        console.print(safe(f"[{r['where']}] {r['lines'][0]}"), highlight=False, soft_wrap=True)
        for line in r["lines"][1:]:
            console.print(safe(line), highlight=False, soft_wrap=True)


# ------------------------------------------------------------------------------------------------ whole screens


def print_run(summary: list, cells: list, console: Console, study: dict) -> None:
    """The phase tables per workload, the faults, the scaling lines, and the one-glance summary table last."""
    from ..analysis.scaling import along_settings, scaling
    from ..analysis.table import summary_table

    print_summary(summary, console)
    print_results(cells, console)
    print_faults(cells, console)
    print_scaling(scaling(cells) + along_settings(cells, study), console)
    print_table(summary_table(summary), console)


def print_run_state(data: Any, console: Console) -> None:
    """How the run ended, its failed cells and what went wrong: a stored run says so as its live run did."""
    statuses = [c.status for c in data.cells]
    counts = ", ".join(f"{statuses.count(st)} {st}" for st in dict.fromkeys(statuses) if st != "ok")
    console.print(f"run {safe(data.run_id)} ({data.started:%Y-%m-%d %H:%M}): {safe(data.status)}; "
                  f"{plural(len(statuses), 'cell')}" + (f", {safe(counts)}" if counts else ""), highlight=False)
    said = set()
    for c in data.cells:
        if c.status not in ("ok", "skipped") and c.error:
            said.add(c.error)
            console.print(f"cell {c.cell_id} ({safe(c.target)} · {safe(c.workload)} · {plural(c.clients, 'client')}) "
                          f"{safe(c.status)}: {safe(c.error)}", highlight=False)
    for e in data.events:
        if e.get("kind") in ("died", "timeout") and e.get("message") and e["message"] not in said:
            console.print(f"{safe(e['kind'])}: {safe(e['message'])}", highlight=False)
        elif e.get("kind") in ("left-behind", "cleaned-up"):  # what storeval could not remove, and when it later did
            console.print(safe(e["message"]) if e["kind"] == "left-behind"
                          else f"cell {e.get('cell')}: {safe(e['message'])}", highlight=False)
    if data.status == "running":
        console.print("the run is still going, or its coordinator died without a watchdog: figures are partial",
                      highlight=False)


def print_runs_side_by_side(across: Any, console: Console) -> None:
    """Which run is which, and what differed between them, before anyone compares their figures."""
    for r in across.runs:
        console.print(f"run {r['label']} = {safe(r['run_id'])}: {safe(', '.join(r['targets']))}"
                      + (f" (cells {r['cells'][0]}–{r['cells'][1]})" if r["cells"] else ""), highlight=False)
    print_differences(across.differences, console, "the runs' environments and studies do not differ")


def print_hanging(console: Console, line: str, first: str = "  ", rest: str = "    ") -> None:
    """One fact on its own line, folded at the console's width with its continuation indented deeper, so a long
    one (a path, a command) still reads as one item of the list."""
    text = Text(visible(redact_text(line)))
    lines = text.wrap(console, max(20, console.width - len(rest)), overflow="fold")
    for n, part in enumerate(lines):
        console.print(Text(first if n == 0 else rest) + part, highlight=False, soft_wrap=True)


def print_differences(lines: list[str], console: Console, none: str | None = None) -> None:
    """What differed between runs, one fact per line (report --runs and compare say it alike)."""
    if lines:
        console.print(f"what differed between the runs ({len(lines)}; a figure's change may be theirs, not the "
                      "storage's):", highlight=False)
        for line in lines:
            print_hanging(console, line)
    elif none:
        console.print(none, highlight=False)


def print_comparison(c: Any, console: Console) -> None:
    """``storeval compare``: what differed between the runs, then B's change from A per figure, coloured by
    verdict, then what was not compared (``c``: app.compare.Comparison)."""
    from .compare import COLUMNS, NUMERIC, change_rows

    if not c.same_study:
        console.print("A and B ran different studies: only configurations with the same parameters are compared",
                      highlight=False)
    print_differences(c.environment, console)
    colour = {"better": "green", "worse": "red"}
    print_fitted(console, f"B = {c.id_b} against A = {c.id_a}", COLUMNS, change_rows(c.changes), safe(c.rule),
                 left=tuple(col for col in COLUMNS if col not in NUMERIC),
                 styles=[colour.get(change.verdict) for change in c.changes],
                 whole=frozenset(NUMERIC))  # numbers never fold: a wrapped interval would read as two
    for label, items in (("only in A", c.only_a), ("only in B", c.only_b),
                         ("not compared, parameters differ", c.differ)):
        if items:
            console.print(f"{label}: " + safe("; ".join(items)), highlight=False)


def _bytes(figures: dict[str, Any], key: str) -> str:
    """A byte figure of a summary (its mean), or – where it is missing."""
    value = figures.get(key)
    return format_size(value.mean) if value is not None else "–"
