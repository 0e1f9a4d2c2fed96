"""The live view of a running cell: each client's rate and errors once a second, read from the counters the clients
already keep for the progress bars (their folds' bytes and operations, their errors) — never a per-operation
callback, so watching costs the clients nothing.

Three sinks, any of them: a table under the progress bars (a client per row, or a row per group or host beyond a
screenful, like elbencho's live table), JSON lines (``--live-json FILE|-``: one object per second), and a
Prometheus endpoint (``--metrics [HOST]:PORT``: gauges a Grafana can scrape while the run goes on)."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import IO, Any

from ..errors import InputError, one_line
from ..redact import redact_text, visible

MiB = float(1 << 20)
EVERY_S = 1.0  # the refresh: one sample a second
MAX_ROWS = 16  # beyond this many clients the table shows a row per group (or host)


@dataclass
class Sample:
    """One second of one cell: each client's counters of the phase now, and its rates since the last sample."""

    t: float
    cell: int
    label: str
    phase: str
    interval_s: float
    clients: list[dict[str, Any]] = field(default_factory=list)

    def total(self) -> dict[str, Any]:
        keys = ("bytes", "ops", "errors", "MiBps", "ops_per_s")
        return {k: sum(c[k] for c in self.clients) for k in keys}

    def as_json(self) -> dict[str, Any]:
        return {"t": self.t, "cell": self.cell, "label": self.label, "phase": self.phase,
                "interval_s": self.interval_s, "clients": self.clients, "total": self.total()}


class LiveCell:
    """What one cell's watch loop feeds: :meth:`sample` with every client's (bytes, operations, errors) of the
    phase running, as often as it polls; once a second it turns them into rates and hands them to the sinks."""

    def __init__(self, view: LiveView, cell: int, label: str, hosts: list[str], groups: list[str]) -> None:
        self.view, self.cell, self.label = view, cell, visible(redact_text(label))
        self.hosts, self.groups = hosts, groups
        self.phase: str | None = None
        self.last: list[tuple[int, int, int]] = []
        self.last_t = 0.0

    def sample(self, phase: str, counters: list[tuple[int, int, int]]) -> None:
        now = time.monotonic()
        if phase != self.phase:  # counters start again at every phase
            self.phase, self.last, self.last_t = phase, [(0, 0, 0)] * len(counters), now
            return
        dt = now - self.last_t
        if dt < EVERY_S:
            return
        rows = []
        for rank, ((b, o, e), (b0, o0, _)) in enumerate(zip(counters, self.last)):
            db, do = max(b - b0, 0), max(o - o0, 0)  # a client that began the phase later starts from 0
            rows.append({"rank": rank, "host": self.hosts[rank] if rank < len(self.hosts) else "",
                         "group": self.groups[rank] if rank < len(self.groups) else "",
                         "bytes": b, "ops": o, "errors": e, "MiBps": db / MiB / dt, "ops_per_s": do / dt})
        self.last, self.last_t = list(counters), now
        self.view.emit(Sample(time.time(), self.cell, self.label, visible(phase), dt, rows))

    def close(self) -> None:
        self.view.cell_ended(self.cell)


class LiveView:
    """The run's live view and its sinks (``table``: draw under the progress bars; ``json``: a stream of JSON
    lines; ``metrics``: a Prometheus endpoint). :meth:`cell` makes the feed of each cell."""

    def __init__(self, ui: Any = None, json_to: str | None = None, metrics: str | None = None) -> None:
        self.ui = ui if ui is not None and hasattr(ui, "show_live") else None
        self.stream: IO[str] | None = None
        self.server: Any = None
        self.gauges: dict[str, Any] = {}
        if json_to is not None:
            self.stream = sys.stdout if json_to == "-" else _open_stream(json_to)
        if metrics is not None:
            self._serve(metrics)

    @property
    def active(self) -> bool:
        return self.ui is not None or self.stream is not None or self.server is not None

    def cell(self, cell: int, label: str, hosts: list[str], groups: list[str]) -> LiveCell:
        return LiveCell(self, cell, label, hosts, groups)

    def emit(self, s: Sample) -> None:
        if self.stream is not None:
            try:
                self.stream.write(json.dumps(s.as_json()) + "\n")
                self.stream.flush()
            except (OSError, ValueError):  # a closed pipe (| head) ends the stream, not the run
                self.stream = None
        if self.ui is not None:
            self.ui.show_live(table(s))
        if self.server is not None:
            self._publish(s)

    def cell_ended(self, cell: int) -> None:
        if self.ui is not None:
            self.ui.show_live(None)
        for g in self.gauges.values():
            g.clear()

    def close(self) -> None:
        if self.stream is not None and self.stream is not sys.stdout:
            self.stream.close()
        self.stream = None
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None

    # -- Prometheus ---------------------------------------------------------------------------------------
    def _serve(self, where: str) -> None:
        try:
            from prometheus_client import CollectorRegistry, Gauge, start_http_server
        except ImportError:
            raise InputError("--metrics needs the prometheus-client package: pip install 'storeval[metrics]'") from None
        host, _, port = where.rpartition(":")
        try:
            number = int(port)
            if not 0 < number < 65536:
                raise ValueError
        except ValueError:
            raise InputError(f"--metrics {where}: not [HOST]:PORT (e.g. :9464 or 127.0.0.1:9464)") from None
        registry = CollectorRegistry()
        labels = ("cell", "phase", "client", "group", "host")
        for name, what in (("bytes", "bytes the client moved in the phase so far"),
                           ("ops", "operations the client completed in the phase so far"),
                           ("errors", "errors the client counted in the phase so far"),
                           ("bytes_per_second", "the client's bytes per second over the last second"),
                           ("ops_per_second", "the client's operations per second over the last second")):
            self.gauges[name] = Gauge(f"storeval_client_{name}", what, labels, registry=registry)
        try:
            self.server, _ = start_http_server(number, addr=host or "0.0.0.0", registry=registry)
        except OSError as e:
            raise InputError(f"--metrics {where}: cannot listen there ({one_line(e)}); choose another port") from None

    def _publish(self, s: Sample) -> None:
        for c in s.clients:
            key = (str(s.cell), s.phase, str(c["rank"]), c["group"], c["host"])
            self.gauges["bytes"].labels(*key).set(c["bytes"])
            self.gauges["ops"].labels(*key).set(c["ops"])
            self.gauges["errors"].labels(*key).set(c["errors"])
            self.gauges["bytes_per_second"].labels(*key).set(c["MiBps"] * MiB)
            self.gauges["ops_per_second"].labels(*key).set(c["ops_per_s"])


def _open_stream(path: str) -> IO[str]:
    try:
        return open(path, "w", encoding="utf-8", buffering=1)
    except OSError as e:
        raise InputError(f"--live-json {path}: cannot write it ({e.strerror or one_line(e)}); give a writable "
                         "file or - for stdout") from None


def rows_of(s: Sample) -> tuple[str, list[list[str]]]:
    """The table's first column and rows: a client per row, or beyond ``MAX_ROWS`` clients a row per group (the
    cell has groups) or per host, with its clients' sums."""
    if len(s.clients) <= MAX_ROWS:
        return "client", [[str(c["rank"]), c["group"] or c["host"], f"{c['MiBps']:,.1f}", f"{c['ops_per_s']:,.0f}",
                           f"{c['bytes'] / MiB:,.1f}", str(c["errors"])] for c in s.clients]
    key = "group" if any(c["group"] for c in s.clients) else "host"
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0, 0])
    for c in s.clients:
        row = sums[c[key]]
        row[0] += 1
        row[1] += c["MiBps"]
        row[2] += c["ops_per_s"]
        row[3] += c["bytes"]
        row[4] += c["errors"]
    return key, [[name, f"{int(n)} clients", f"{mb:,.1f}", f"{ops:,.0f}", f"{b / MiB:,.1f}", str(int(e))]
                 for name, (n, mb, ops, b, e) in sorted(sums.items())]


def table(s: Sample) -> Any:
    from rich.table import Table

    first, rows = rows_of(s)
    total = s.total()
    t = Table(title=f"live · cell {s.cell} · {s.phase} · last {s.interval_s:.1f} s", title_justify="left",
              show_edge=False, pad_edge=False)
    for name in (first, "group/host" if first == "client" else "clients", "MiB/s", "ops/s", "MiB so far", "errors"):
        t.add_column(name, justify="left" if name in (first, "group/host", "clients") else "right")
    for row in rows:
        t.add_row(*row)
    t.add_row("all", "", f"{total['MiBps']:,.1f}", f"{total['ops_per_s']:,.0f}", f"{total['bytes'] / MiB:,.1f}",
              str(total["errors"]), style="bold")
    return t


def wants_table(flag: bool | None) -> bool:
    """Whether the terminal shows the live table: as asked, else only on a terminal (a captured run's final frame
    would be a stale table)."""
    if flag is not None:
        return flag
    try:
        return os.isatty(sys.stderr.fileno())
    except (AttributeError, OSError, ValueError):  # a captured stderr has no descriptor
        return False
