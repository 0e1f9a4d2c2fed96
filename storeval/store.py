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

DB_NAME = "storeval.duckdb"

SCHEMA = [
    """CREATE TABLE IF NOT EXISTS studies (
        run_id VARCHAR PRIMARY KEY, started TIMESTAMP, finished TIMESTAMP, status VARCHAR,
        storeval_version VARCHAR, command_line VARCHAR, study JSON, study_hash VARCHAR, source VARCHAR,
        engine VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS cells (
        run_id VARCHAR, cell_id INTEGER, config INTEGER, target VARCHAR, target_url VARCHAR, workload VARCHAR,
        kind VARCHAR, params JSON, factors JSON, clients INTEGER, repetition INTEGER, status VARCHAR,
        error VARCHAR, started TIMESTAMP, finished TIMESTAMP, PRIMARY KEY (run_id, cell_id))""",
    """CREATE TABLE IF NOT EXISTS phases (
        run_id VARCHAR, cell_id INTEGER, seq INTEGER, phase VARCHAR, iteration INTEGER, status VARCHAR,
        reason VARCHAR, PRIMARY KEY (run_id, cell_id, seq))""",
    """CREATE TABLE IF NOT EXISTS records (
        run_id VARCHAR, cell_id INTEGER, phase VARCHAR, iteration INTEGER, rank INTEGER, host VARCHAR, bytes BIGINT,
        ops BIGINT,
        errors JSON, start_ns BIGINT, end_ns BIGINT, barrier_ns BIGINT, cpu_user DOUBLE, cpu_sys DOUBLE,
        lat_index INTEGER[], lat_count BIGINT[], lat_sum BIGINT, lat_min BIGINT, lat_max BIGINT,
        tl_bytes BIGINT[], tl_ops BIGINT[], extra JSON, complete BOOLEAN)""",
    """CREATE TABLE IF NOT EXISTS events (
        run_id VARCHAR, cell_id INTEGER, t TIMESTAMP, kind VARCHAR, rank INTEGER, phase VARCHAR, message VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS environment (run_id VARCHAR, key VARCHAR, value JSON)""",
    """CREATE TABLE IF NOT EXISTS samples (
        run_id VARCHAR, cell_id INTEGER, t_ns BIGINT, probe VARCHAR, device VARCHAR, metric VARCHAR, value DOUBLE)""",
]


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
        with self.connect() as con:
            for stmt in SCHEMA:
                con.execute(stmt)

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
                if "lock" not in str(e).lower() or time.monotonic() > deadline:
                    raise StorevalError(f"cannot open results store {self.path}: {str(e).splitlines()[0]} "
                                        "(another storeval may be using it; try --results DIR)") from None
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
            con.execute("INSERT INTO studies VALUES (?, ?, NULL, 'running', ?, ?, ?, ?, ?, ?)",
                        [run_id, now(), version, command_line, json.dumps(study), study_hash, source, engine])
            for key, value in environment.items():
                con.execute("INSERT INTO environment VALUES (?, ?, ?)", [run_id, key, json.dumps(value, default=str)])

    def end_run(self, run_id: str, status: str) -> None:
        with self.transaction() as con:
            con.execute("UPDATE studies SET finished = ?, status = ? WHERE run_id = ?", [now(), status, run_id])

    def write_cell(self, run_id: str, cell: Any, *, status: str, error: str | None, started: datetime,
                   phases: list[tuple[str, int, str, str | None]], records: list[PhaseRecord],
                   events: list[dict[str, Any]]) -> None:
        with self.transaction() as con:
            con.execute("INSERT INTO cells VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        [run_id, cell.index, cell.config, cell.target.name, cell.target.url, cell.workload, cell.kind,
                         json.dumps(cell.params), json.dumps(cell.factors), cell.clients, cell.repetition, status,
                         error, started, now()])
            for seq, (phase, iteration, pstatus, reason) in enumerate(phases):
                con.execute("INSERT INTO phases VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [run_id, cell.index, seq, phase, iteration, pstatus, reason])
            rows = []
            for r in records:
                idx, cnt = r.hist.to_sparse()
                rows.append([run_id, cell.index, r.phase, r.iteration, r.rank, r.host, r.bytes, r.ops, json.dumps(r.errors),
                             r.start_ns, r.end_ns, r.barrier_ns, r.cpu_user, r.cpu_sys, idx, cnt, r.hist.sum,
                             r.hist.min, r.hist.max, r.tl_bytes, r.tl_ops, json.dumps(r.extra, default=str),
                             not r.extra.get("partial", False)])
            if rows:
                con.executemany("INSERT INTO records VALUES (" + ", ".join("?" * 23) + ")", rows)
            for ev in events:
                con.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [run_id, cell.index, ev.get("t", now()), ev["kind"], ev.get("rank"), ev.get("phase"), ev["message"]])

    def add_events(self, run_id: str, events: list[dict[str, Any]]) -> None:
        with self.transaction() as con:
            for ev in events:
                con.execute("INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?)",
                            [run_id, ev.get("cell"), ev.get("t", now()), ev["kind"], ev.get("rank"), ev.get("phase"), ev["message"]])

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

    def load_run(self, run_id: str) -> RunData:
        with self.connect(read_only=True) as con:
            row = con.execute("SELECT run_id, started, finished, status, storeval_version, command_line, study, "
                              "study_hash, engine FROM studies WHERE run_id = ?", [run_id]).fetchone()
            if row is None:
                raise InputError(f"run '{run_id}' is not in {self.dir}")
            cells = {}
            for c in con.execute("SELECT cell_id, config, target, target_url, workload, kind, params, factors, clients, "
                                 "repetition, status, error FROM cells WHERE run_id = ? ORDER BY cell_id", [run_id]).fetchall():
                cells[c[0]] = CellRow(cell_id=c[0], config=c[1], target=c[2], target_url=c[3], workload=c[4], kind=c[5],
                                      params=json.loads(c[6]), factors=json.loads(c[7]), clients=c[8], repetition=c[9],
                                      status=c[10], error=c[11], phases=[], records=[])
            for cell_id, phase, iteration, status, reason in con.execute(
                    "SELECT cell_id, phase, iteration, status, reason FROM phases WHERE run_id = ? ORDER BY cell_id, seq",
                    [run_id]).fetchall():
                cells[cell_id].phases.append((phase, iteration, status, reason))
            for r in con.execute(
                    "SELECT cell_id, phase, iteration, rank, host, bytes, ops, errors, start_ns, end_ns, barrier_ns, "
                    "cpu_user, cpu_sys, lat_index, lat_count, lat_sum, lat_min, lat_max, tl_bytes, tl_ops, extra "
                    "FROM records WHERE run_id = ? ORDER BY cell_id, phase, iteration, rank", [run_id]).fetchall():
                hist = Histogram.from_sparse(r[13] or [], r[14] or [], total_sum=r[15] or 0, vmin=r[16], vmax=r[17])
                cells[r[0]].records.append(PhaseRecord(
                    rank=r[3], host=r[4], phase=r[1], iteration=r[2], bytes=r[5], ops=r[6], errors=json.loads(r[7]),
                    start_ns=r[8], end_ns=r[9], barrier_ns=r[10], cpu_user=r[11], cpu_sys=r[12], hist=hist,
                    tl_bytes=list(r[18] or []), tl_ops=list(r[19] or []), extra=json.loads(r[20])))
            env = {k: json.loads(v) for k, v in con.execute(
                "SELECT key, value FROM environment WHERE run_id = ?", [run_id]).fetchall()}
            events = [{"cell": e[0], "t": e[1], "kind": e[2], "rank": e[3], "phase": e[4], "message": e[5]}
                      for e in con.execute("SELECT cell_id, t, kind, rank, phase, message FROM events WHERE run_id = ? "
                                           "ORDER BY t", [run_id]).fetchall()]
        return RunData(run_id=row[0], started=row[1], finished=row[2], status=row[3], storeval_version=row[4],
                       command_line=row[5], study=json.loads(row[6]), study_hash=row[7], engine=row[8],
                       cells=list(cells.values()), environment=env, events=events)
