"""Results store: one DuckDB file per results directory.

Tables (every reported figure can be recomputed from them with SQL):

``studies``      one row per run: the resolved study, its hash, command line, versions, status
``cells``        one row per cell: target, workload, parameters, factors, clients, repetition, status
``phases``       one row per phase of a cell: ran, skipped (with the reason) or failed
``records``      one row per client and phase: bytes, ops, errors, timestamps, CPU, latency histogram, timeline
``events``       errors, timeouts, interruptions (later: faults)
``environment``  facts about the machine and the targets, one key per row
``samples``      probe samples (network, disk, CPU counters) taken while cells run

Each cell is written in one transaction, so a crash never leaves half a cell.
The file is opened per transaction, so two runs can share a results directory.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import duckdb

from .engine.records import PhaseRecord
from .errors import InputError, StorevalError
from .histogram import Histogram
from .redact import redact, redact_text

DB_NAME = "storeval.duckdb"

# Tables and their columns. Columns are only ever added (never renamed or dropped), so an older results
# directory is brought up to date with ALTER TABLE ... ADD COLUMN, and every INSERT names its columns.
TABLES: dict[str, tuple[list[tuple[str, str]], str]] = {
    "studies": ([("run_id", "VARCHAR"), ("started", "TIMESTAMP"), ("finished", "TIMESTAMP"), ("status", "VARCHAR"),
                 ("storeval_version", "VARCHAR"), ("command_line", "VARCHAR"), ("study", "JSON"),
                 ("study_hash", "VARCHAR"), ("source", "VARCHAR"), ("engine", "VARCHAR")], "run_id"),
    "cells": ([("run_id", "VARCHAR"), ("cell_id", "INTEGER"), ("config", "INTEGER"), ("target", "VARCHAR"),
               ("target_url", "VARCHAR"), ("workload", "VARCHAR"), ("kind", "VARCHAR"), ("params", "JSON"),
               ("factors", "JSON"), ("clients", "INTEGER"), ("repetition", "INTEGER"), ("status", "VARCHAR"),
               ("error", "VARCHAR"), ("started", "TIMESTAMP"), ("finished", "TIMESTAMP")], "run_id, cell_id"),
    "phases": ([("run_id", "VARCHAR"), ("cell_id", "INTEGER"), ("seq", "INTEGER"), ("phase", "VARCHAR"),
                ("status", "VARCHAR"), ("reason", "VARCHAR"), ("iteration", "INTEGER")], "run_id, cell_id, seq"),
    "records": ([("run_id", "VARCHAR"), ("cell_id", "INTEGER"), ("phase", "VARCHAR"), ("rank", "INTEGER"),
                 ("host", "VARCHAR"), ("bytes", "BIGINT"), ("ops", "BIGINT"), ("errors", "JSON"), ("start_ns", "BIGINT"),
                 ("end_ns", "BIGINT"), ("barrier_ns", "BIGINT"), ("cpu_user", "DOUBLE"), ("cpu_sys", "DOUBLE"),
                 ("lat_index", "INTEGER[]"), ("lat_count", "BIGINT[]"), ("lat_sum", "BIGINT"), ("lat_min", "BIGINT"),
                 ("lat_max", "BIGINT"), ("tl_bytes", "BIGINT[]"), ("tl_ops", "BIGINT[]"), ("extra", "JSON"),
                 ("complete", "BOOLEAN"), ("iteration", "INTEGER")], ""),
    "events": ([("run_id", "VARCHAR"), ("cell_id", "INTEGER"), ("t", "TIMESTAMP"), ("kind", "VARCHAR"),
                ("rank", "INTEGER"), ("phase", "VARCHAR"), ("message", "VARCHAR")], ""),
    "environment": ([("run_id", "VARCHAR"), ("key", "VARCHAR"), ("value", "JSON")], ""),
    "samples": ([("run_id", "VARCHAR"), ("cell_id", "INTEGER"), ("t_ns", "BIGINT"), ("probe", "VARCHAR"),
                 ("device", "VARCHAR"), ("metric", "VARCHAR"), ("value", "DOUBLE")], ""),
}


def _create_or_migrate(con: duckdb.DuckDBPyConnection) -> None:
    for table, (columns, key) in TABLES.items():
        cols = ", ".join(f"{name} {kind}" for name, kind in columns)
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols}{f', PRIMARY KEY ({key})' if key else ''})")
        have = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]).fetchall()}
        for name, kind in columns:
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


# Columns holding text from outside (URLs, options, error messages, the command line): every value written
# to them passes through storeval.redact, so no credential is ever stored (JSON ones value by value).
REDACTED = {("studies", "command_line"): "text", ("studies", "study"): "json", ("studies", "source"): "text",
            ("cells", "target_url"): "text", ("cells", "error"): "text", ("phases", "reason"): "text",
            ("events", "message"): "text", ("environment", "value"): "json"}


def _redacted(table: str, name: str, value: Any) -> Any:
    kind = REDACTED.get((table, name))
    if kind is None or not isinstance(value, str):
        return value
    return redact_text(value) if kind == "text" else json.dumps(redact(json.loads(value)), default=str)


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    """INSERT naming its columns, so older files with appended columns take the rows as well."""
    if not rows:
        return
    names = list(rows[0])
    con.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                    [[_redacted(table, n, row[n]) for n in names] for row in rows])


def _json_default(value: Any) -> Any:
    """numpy scalars become numbers, not strings; anything else unknown becomes its text."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def now() -> datetime:
    """Naive UTC (DuckDB TIMESTAMP columns hold UTC)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


@dataclass
class CellRow:
    cell_id: int
    config: int
    target: str
    target_url: str
    workload: str
    kind: str
    params: dict[str, Any]
    factors: dict[str, Any]
    clients: int
    repetition: int
    status: str
    error: str | None
    phases: list[tuple[str, int, str, str | None]]  # (phase, iteration, status, reason)
    records: list[PhaseRecord]


@dataclass
class RunData:
    run_id: str
    started: datetime
    finished: datetime | None
    status: str
    storeval_version: str
    command_line: str
    study: dict[str, Any]
    study_hash: str
    engine: str
    cells: list[CellRow]
    environment: dict[str, Any]
    events: list[dict[str, Any]]


class Store:
    def __init__(self, results_dir: str, *, create: bool = True) -> None:
        self.dir = os.path.abspath(results_dir)
        self.path = os.path.join(self.dir, DB_NAME)
        if not create:
            if not os.path.exists(self.path):
                raise InputError(f"{results_dir} holds no storeval results ({DB_NAME} is missing; run storeval run first)")
            return
        os.makedirs(self.dir, exist_ok=True)
        with self.transaction() as con:
            _create_or_migrate(con)

    @classmethod
    def check_location(cls, results_dir: str) -> None:
        """Raise InputError if results cannot be written there (checked before anything runs)."""
        path = os.path.abspath(results_dir)
        probe = path
        while not os.path.exists(probe):
            probe = os.path.dirname(probe)
        if not os.path.isdir(probe):
            raise InputError(f"--results {results_dir}: {probe} is not a directory (choose another results directory)")
        if not os.access(probe, os.W_OK | os.X_OK):
            raise InputError(f"--results {results_dir}: {probe} is not writable (choose another results directory)")
        try:  # the last check before running: create it now, so a place that refuses says so up front
            os.makedirs(path, exist_ok=True)
        except OSError as e:
            raise InputError(f"--results {results_dir}: cannot create {path}: {e.strerror} "
                             "(choose another results directory)") from e
        db = os.path.join(path, DB_NAME)
        if os.path.exists(db) and not os.access(db, os.W_OK):
            raise InputError(f"--results {results_dir}: {db} is not writable (choose another results directory)")

    @contextmanager
    def connect(self, read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
        deadline = time.monotonic() + 30
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only)
                break
            except duckdb.IOException as e:
                first = str(e).splitlines()[0]
                if "lock" not in first.lower():
                    raise InputError(f"{self.path} is not a storeval results store ({first}); choose another "
                                     "results directory") from None
                if time.monotonic() > deadline:
                    raise StorevalError(f"cannot open results store {self.path}: {first} "
                                        "(another storeval is using it; wait for it or use --results DIR)") from None
                time.sleep(0.2)
        try:
            yield con
        finally:
            con.close()

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

    # -- writing ---------------------------------------------------------------------------------
    def begin_run(self, run_id: str, *, study: dict, study_hash: str, version: str, command_line: str,
                  source: str | None, engine: str, environment: dict[str, Any]) -> None:
        with self.transaction() as con:
            _insert(con, "studies", [{"run_id": run_id, "started": now(), "status": "running", "storeval_version": version,
                                      "command_line": command_line, "study": json.dumps(study), "study_hash": study_hash,
                                      "source": source, "engine": engine}])
            _insert(con, "environment", [{"run_id": run_id, "key": k, "value": json.dumps(v, default=str)}
                                         for k, v in environment.items()])

    def add_environment(self, run_id: str, key: str, value: Any) -> None:
        with self.transaction() as con:
            _insert(con, "environment", [{"run_id": run_id, "key": key, "value": json.dumps(value, default=str)}])

    def end_run(self, run_id: str, status: str) -> None:
        with self.transaction() as con:
            con.execute("UPDATE studies SET finished = ?, status = ? WHERE run_id = ?", [now(), status, run_id])

    def write_cell(self, run_id: str, cell: Any, *, status: str, error: str | None, started: datetime,
                   phases: list[tuple[str, int, str, str | None]], records: list[PhaseRecord],
                   events: list[dict[str, Any]], samples: list[tuple] | None = None) -> None:
        with self.transaction() as con:
            _insert(con, "cells", [{
                "run_id": run_id, "cell_id": cell.index, "config": cell.config, "target": cell.target.name,
                "target_url": cell.target.url, "workload": cell.workload, "kind": cell.kind,
                "params": json.dumps(cell.params), "factors": json.dumps(cell.factors), "clients": cell.clients,
                "repetition": cell.repetition, "status": status, "error": error, "started": started, "finished": now()}])
            _insert(con, "phases", [{"run_id": run_id, "cell_id": cell.index, "seq": seq, "phase": phase,
                                     "iteration": iteration, "status": pstatus, "reason": reason}
                                    for seq, (phase, iteration, pstatus, reason) in enumerate(phases)])
            rows = []
            for r in records:
                idx, cnt = r.hist.to_sparse()
                rows.append({"run_id": run_id, "cell_id": cell.index, "phase": r.phase, "iteration": r.iteration,
                             "rank": r.rank, "host": r.host, "bytes": r.bytes, "ops": r.ops,
                             "errors": json.dumps(r.errors), "start_ns": r.start_ns, "end_ns": r.end_ns,
                             "barrier_ns": r.barrier_ns, "cpu_user": r.cpu_user, "cpu_sys": r.cpu_sys,
                             "lat_index": idx, "lat_count": cnt, "lat_sum": r.hist.sum, "lat_min": r.hist.min,
                             "lat_max": r.hist.max, "tl_bytes": r.tl_bytes, "tl_ops": r.tl_ops,
                             "extra": json.dumps(r.extra, default=_json_default), "complete": not r.extra.get("partial", False)})
            _insert(con, "records", rows)
            _insert(con, "events", [self._event(run_id, cell.index, ev) for ev in events])
            _insert(con, "samples", [{"run_id": run_id, "cell_id": cell.index, "t_ns": t, "probe": probe, "device": device,
                                      "metric": metric, "value": value} for t, probe, device, metric, value in samples or []])

    @staticmethod
    def _event(run_id: str, cell_id: int | None, ev: dict[str, Any]) -> dict[str, Any]:
        return {"run_id": run_id, "cell_id": cell_id, "t": ev.get("t", now()), "kind": ev["kind"],
                "rank": ev.get("rank"), "phase": ev.get("phase"), "message": ev["message"]}

    def add_events(self, run_id: str, events: list[dict[str, Any]]) -> None:
        with self.transaction() as con:
            _insert(con, "events", [self._event(run_id, ev.get("cell"), ev) for ev in events])

    # -- reading -----------------------------------------------------------------------------------
    def run_ids(self) -> list[str]:
        with self.connect(read_only=True) as con:
            return [r[0] for r in con.execute("SELECT run_id FROM studies ORDER BY started").fetchall()]

    def resolve_run(self, run_id: str | None) -> str:
        ids = self.run_ids()
        if not ids:
            raise InputError(f"{self.dir} holds no runs yet (run storeval run first)")
        if run_id is None:
            return ids[-1]
        matches = [i for i in ids if i == run_id] or [i for i in ids if i.startswith(run_id)]
        if len(matches) != 1:
            raise InputError(f"run '{run_id}' is not in {self.dir} ({'ambiguous' if matches else 'known: ' + ', '.join(ids[-5:])})")
        return matches[0]

    def load_samples(self, run_id: str) -> list[tuple[int, int, str, str, str, float]]:
        """(cell, t_ns, probe, device, metric, value) of a run's probe samples, in time order per cell."""
        with self.connect(read_only=True) as con:
            return con.execute("SELECT cell_id, t_ns, probe, device, metric, value FROM samples WHERE run_id = ? "
                               "ORDER BY cell_id, t_ns", [run_id]).fetchall()

    def load_run(self, run_id: str) -> RunData:
        with self.connect(read_only=True) as con:
            row = con.execute("SELECT run_id, started, finished, status, storeval_version, command_line, study, "
                              "study_hash, engine FROM studies WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise InputError(f"run '{run_id}' is not in {self.dir}")
            cells = {}
            for c in con.execute("SELECT cell_id, config, target, target_url, workload, kind, params, factors, clients, "
                                 "repetition, status, error FROM cells WHERE run_id = ? ORDER BY cell_id", [run_id]).fetchall():
                cells[c[0]] = CellRow(cell_id=c[0], config=c[1], target=c[2], target_url=redact(c[3]), workload=c[4],
                                      kind=c[5], params=json.loads(c[6]), factors=json.loads(c[7]), clients=c[8],
                                      repetition=c[9], status=c[10], error=redact(c[11]), phases=[], records=[])
            for cell_id, phase, iteration, status, reason in con.execute(
                    "SELECT cell_id, phase, coalesce(iteration, 0), status, reason FROM phases WHERE run_id = ? "
                    "ORDER BY cell_id, seq",
                    [run_id]).fetchall():
                cells[cell_id].phases.append((phase, iteration, status, redact(reason)))
            for r in con.execute(
                    "SELECT cell_id, phase, coalesce(iteration, 0), rank, host, bytes, ops, errors, start_ns, end_ns, barrier_ns, "
                    "cpu_user, cpu_sys, lat_index, lat_count, lat_sum, lat_min, lat_max, tl_bytes, tl_ops, extra "
                    "FROM records WHERE run_id = ? ORDER BY cell_id, phase, iteration, rank", [run_id]).fetchall():
                hist = Histogram.from_sparse(r[13] or [], r[14] or [], total_sum=r[15] or 0, vmin=r[16], vmax=r[17])
                cells[r[0]].records.append(PhaseRecord(
                    rank=r[3], host=r[4], phase=r[1], iteration=r[2], bytes=r[5], ops=r[6], errors=json.loads(r[7]),
                    start_ns=r[8], end_ns=r[9], barrier_ns=r[10], cpu_user=r[11], cpu_sys=r[12], hist=hist,
                    tl_bytes=list(r[18] or []), tl_ops=list(r[19] or []), extra=json.loads(r[20])))
            env = {k: redact(json.loads(v)) for k, v in con.execute(
                "SELECT key, value FROM environment WHERE run_id = ?", [run_id]).fetchall()}
            events = [{"cell": e[0], "t": e[1], "kind": e[2], "rank": e[3], "phase": e[4], "message": redact(e[5])}
                      for e in con.execute("SELECT cell_id, t, kind, rank, phase, message FROM events WHERE run_id = ? "
                                           "ORDER BY t", [run_id]).fetchall()]
        return RunData(run_id=row[0], started=row[1], finished=row[2], status=row[3], storeval_version=row[4],
                       command_line=redact(row[5]), study=redact(json.loads(row[6])), study_hash=row[7], engine=row[8],
                       cells=list(cells.values()), environment=env, events=events)
