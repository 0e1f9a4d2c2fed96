"""Results store: one DuckDB file per results directory.

Tables (every reported figure can be recomputed from them with SQL):

``studies``      one row per run: the resolved study, its hash, command line, versions, status
``cells``        one row per cell: target, workload, parameters, factors, clients, repetition, status
``phases``       one row per phase of a cell: ran, skipped (with the reason) or failed
``records``      one row per client and phase: bytes, ops, errors, timestamps, CPU, latency histogram, timeline
``events``       errors, timeouts, interruptions (later: faults)
``environment``  facts about the machine and the targets, one key per row
``samples``      probe samples (network, disk, CPU counters) taken while cells run
``outputs``      files storeval wrote (JSON documents, HTML reports): where, their token and digest

Each cell is written in one transaction, so a crash never leaves half a cell. The file is opened per
transaction, so two runs can share a results directory.

Nothing measured is lost when the store cannot be written (another process holds it open, its file
system is full): every write is a *unit* (the run's start, a cell, events, the run's end) that is *held*
— in memory and in a ``storeval-held-RUN-PID.json`` file beside the store (or in the temporary directory
when that is full) — and stored, in order, at the next write. At the end of a run :meth:`Store.settle`
waits for the store (bounded by ``STOREVAL_STORE_WAIT``, default 5 minutes, saying that it waits) and
raises one line naming the held file if it still cannot. Units are idempotent, and any later storeval
command that opens the store stores the held files of processes that have ended, then removes them.

A damaged file (truncated, bit-flipped), a foreign file, a full disk or a busy store is one line naming
the file (:class:`StoreError`), never a DuckDB traceback.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import duckdb

from . import outputs
from .core.cell import params_json
from .core.process import HOST, alive
from .core.records import PhaseRecord
from .errors import InputError, StorevalError
from .histogram import Histogram
from .units import UnitError, parse_duration
from .redact import redact, redact_text, visible

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
                ("rank", "INTEGER"), ("phase", "VARCHAR"), ("message", "VARCHAR"), ("detail", "JSON")], ""),
    "environment": ([("run_id", "VARCHAR"), ("key", "VARCHAR"), ("value", "JSON")], ""),
    "samples": ([("run_id", "VARCHAR"), ("cell_id", "INTEGER"), ("t_ns", "BIGINT"), ("probe", "VARCHAR"),
                 ("device", "VARCHAR"), ("metric", "VARCHAR"), ("value", "DOUBLE"),
                 # the host whose probes took the sample (under MPI each host's leader samples its own); NULL in
                 # stores older than per-host sampling, whose samples are all the coordinator's host's
                 ("host", "VARCHAR")], ""),
    "outputs": ([("path", "VARCHAR"), ("format", "VARCHAR"), ("kind", "VARCHAR"), ("run_id", "VARCHAR"),
                 ("token", "VARCHAR"), ("sha256", "VARCHAR"), ("size", "BIGINT"), ("written", "TIMESTAMP")], ""),
    # the processes that prove a run live (its coordinator, each watchdog it started): a run whose every one has
    # ended and that never said how it ended is shown as interrupted, not as running forever
    "processes": ([("run_id", "VARCHAR"), ("role", "VARCHAR"), ("host", "VARCHAR"), ("pid", "INTEGER"),
                   ("started", "DOUBLE"), ("t", "TIMESTAMP")], ""),
    # the testbed directories a run started systems in (its own temporary one, or the study's `testbed:`), noted
    # before anything runs there: `storeval clean` names them when the run died without stopping them
    "testbeds": ([("run_id", "VARCHAR"), ("dir", "VARCHAR"), ("kinds", "JSON"), ("owned", "BOOLEAN"),
                  ("t", "TIMESTAMP")], ""),
}

OPEN_WAIT = 30.0  # seconds a command waits for a store another process is writing (transactions are short)
WRITE_WAIT = 2.0  # seconds a write during a run waits before its unit is held and the run goes on
SETTLE_WAIT = "STOREVAL_STORE_WAIT"  # environment: how long a run's end waits for a busy or full store
SETTLE_DEFAULT = 300.0
HELD_GLOB = "storeval-held-*.json"
EXIT_INPUT = 2


class StoreError(StorevalError):
    """The store cannot be opened, read or written; ``kind`` says why (busy, full, denied, damaged, foreign,
    empty, io, unsaved) and ``reason`` is the message without the advice."""

    def __init__(self, reason: str, kind: str, advice: str = "", exit_code: int = 1, file: str | None = None) -> None:
        super().__init__(f"{reason}; {advice}" if advice else reason)
        self.reason, self.kind, self.exit_code, self.file = reason, kind, exit_code, file


def _file_kind(path: str) -> str:
    """duckdb (DuckDB's magic bytes are there), empty (0 bytes), foreign (a directory too), or missing."""
    if os.path.isdir(path):
        return "foreign"
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except FileNotFoundError:
        return "missing"
    except OSError:
        return "duckdb"  # unreadable: the open itself says why
    if not head:
        return "empty"
    return "duckdb" if head[8:12] == b"DUCK" else "foreign"


def _classify(e: BaseException) -> tuple[str, str, str | None]:
    """(kind, first line of the message, the file it names) of an exception from DuckDB or the OS."""
    text = str(e).strip()
    first = re.sub(r"\s*See also https?://\S+", "", text.splitlines()[0] if text else type(e).__name__).strip()
    first = re.sub(r"^[A-Za-z ]*(Error|Exception): ", "", first)
    quoted = re.search(r'"(/[^"\\]+)\\?"', first)
    file = quoted.group(1) if quoted else getattr(e, "filename", None)
    low = first.lower()
    code = e.errno if isinstance(e, OSError) else None
    if code == errno.ENOSPC or "no space left on device" in low:
        return "full", os.strerror(errno.ENOSPC), file
    if code == errno.EDQUOT or "disk quota exceeded" in low:
        return "full", os.strerror(errno.EDQUOT), file
    if "conflicting lock" in low or "could not set lock" in low:
        return "busy", first, file
    if code in (errno.EACCES, errno.EPERM, errno.EROFS) or "permission denied" in low or "read-only file system" in low:
        return "denied", first, file
    if ("corrupt" in low or "checksum" in low or "not a valid duckdb database file" in low
            or "could not read enough bytes" in low or isinstance(e, duckdb.SerializationException)):
        return "damaged", first, file
    if isinstance(e, (duckdb.IOException, duckdb.FatalException, OSError)):
        return "io", first, file
    return "bug", first, file


def _create_or_migrate(con: duckdb.DuckDBPyConnection, path: str) -> None:
    have_tables = table_names(con)
    if have_tables and not have_tables & set(TABLES):  # somebody else's DuckDB file: never add to it
        raise StoreError(f"{path} is not a storeval results store (it holds other tables: "
                         f"{', '.join(sorted(have_tables)[:5])})", "foreign", "choose another results directory",
                         EXIT_INPUT)
    for table, (columns, key) in TABLES.items():
        cols = ", ".join(f"{name} {kind}" for name, kind in columns)
        con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({cols}{f', PRIMARY KEY ({key})' if key else ''})")
        have = {r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ?", [table]).fetchall()}
        for name, kind in columns:
            if name not in have:
                con.execute(f"ALTER TABLE {table} ADD COLUMN {name} {kind}")


HEADER_BYTES = 3 * 4096  # DuckDB's file headers, before the first block


def _check_intact(con: duckdb.DuckDBPyConnection, path: str) -> None:
    """A truncated file is found at once, from metadata alone: every table's blocks must lie inside the file.
    (A flipped bit is found by DuckDB's block checksums when the block is read.)"""
    block = con.execute("SELECT block_size FROM pragma_database_size() WHERE database_name = current_database()"
                        ).fetchone()
    last = -1
    for table in table_names(con):
        top = con.execute(f"SELECT max(block_id) FROM pragma_storage_info('{table}') WHERE persistent").fetchone()[0]
        last = max(last, top if top is not None else -1)
    need = HEADER_BYTES + last * block[0] + 1 if block and last >= 0 else 0
    size = os.path.getsize(path)
    if size < need:
        raise StoreError(f"results store {path} is damaged (truncated: {size} bytes, its tables reach beyond "
                         f"{need - 1})", "damaged", "restore it from a backup or use another --results directory",
                         EXIT_INPUT)


def table_names(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                                      "AND table_catalog = current_database()").fetchall()}


# Columns holding text from outside (URLs, options, error messages, the command line): every value written
# to them passes through storeval.redact, so no credential is ever stored (JSON ones value by value).
REDACTED = {("studies", "command_line"): "text", ("studies", "study"): "json", ("studies", "source"): "text",
            ("cells", "target_url"): "text", ("cells", "error"): "text", ("phases", "reason"): "text",
            ("events", "message"): "text", ("events", "detail"): "json", ("environment", "value"): "json"}


def _redacted(table: str, name: str, value: Any) -> Any:
    kind = REDACTED.get((table, name))
    if kind is None or not isinstance(value, str):
        return value
    return redact_text(value) if kind == "text" else json.dumps(redact(json.loads(value)), default=str)


def _redact_unit(unit: dict[str, Any]) -> dict[str, Any]:
    """Redact a unit's rows when it is made, so a held file never holds a credential either."""
    for table, rows in unit.get("rows", {}).items():
        rows[:] = [{name: _redacted(table, name, value) for name, value in row.items()} for row in rows]
    for table, columns in unit.get("columns", {}).items():
        for name, values in columns.items():
            if (table, name) not in REDACTED:
                continue
            if isinstance(values, list):  # a column repeats few values: each distinct one is redacted once
                seen: dict[Any, Any] = {}
                columns[name] = [seen[v] if v in seen else seen.setdefault(v, _redacted(table, name, v))
                                 for v in values]
            else:
                columns[name] = _redacted(table, name, values)
    return unit


def _column(values: list[Any]) -> Any:
    """A column of a columnar unit: its one value when every row has the same (a constant), else the list."""
    first = values[0]
    return first if all(v == first for v in values) and type(first) in (str, int, float, type(None), datetime) \
        else values


def _insert_columns(con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, Any]) -> None:
    """INSERT many rows at once: list columns are scanned from numpy arrays, constants bound once — a
    100,000-cell plan takes a fraction of a second, where one INSERT per row takes minutes."""
    import numpy as np

    kinds = dict(TABLES[table][0])
    lists = {n: v for n, v in columns.items() if isinstance(v, list)}
    if not lists or not next(iter(lists.values())):
        return
    source = {n: np.array(v, dtype=np.int64 if kinds[n] in ("INTEGER", "BIGINT") else object)
              for n, v in lists.items()}
    name = f"storeval_src_{table}"
    con.register(name, source)
    try:
        picks, params = [], []
        for n, v in columns.items():
            if n in lists:
                picks.append(f"CAST(src.{n} AS {kinds[n]})")
            else:
                picks.append(f"CAST(? AS {kinds[n]})")
                params.append(v)
        con.execute(f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(picks)} FROM {name} src",
                    params).fetchall()
    finally:
        con.unregister(name)


def _insert(con: duckdb.DuckDBPyConnection, table: str, rows: list[dict[str, Any]]) -> None:
    """INSERT naming its columns, so older files with appended columns take the rows as well."""
    if not rows:
        return
    names = list(rows[0])
    con.executemany(f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})",
                    [[_redacted(table, n, row[n]) for n in names] for row in rows])


def _exists(con: duckdb.DuckDBPyConnection, table: str, where: dict[str, Any]) -> bool:
    cond = " AND ".join(f"{k} IS NOT DISTINCT FROM ?" for k in where)
    return con.execute(f"SELECT count(*) FROM {table} WHERE {cond}", list(where.values())).fetchall()[0][0] > 0


def _apply(con: duckdb.DuckDBPyConnection, unit: dict[str, Any]) -> None:
    """Store one unit; a unit already stored (a held file imported twice) is skipped, so this is idempotent."""
    rows, run_id = unit.get("rows", {}), unit["run_id"]
    kind = unit["unit"]
    if kind == "begin" and _exists(con, "studies", {"run_id": run_id}):
        return
    if kind in ("cell", "not-run") and _exists(con, "cells", {"run_id": run_id, "cell_id": unit["cell_id"]}):
        return
    if kind == "not-run":  # one unit, one transaction: all its cells are stored or none
        for table, columns in unit["columns"].items():
            _insert_columns(con, table, columns)
        return
    if kind == "end":
        con.execute("UPDATE studies SET finished = ?, status = ? WHERE run_id = ?",
                    [unit["finished"], unit["status"], run_id])
        return
    if kind == "environment":
        rows = {"environment": [r for r in rows["environment"]
                                if not _exists(con, "environment", {"run_id": r["run_id"], "key": r["key"]})]}
    if kind == "events":
        rows = {"events": [r for r in rows["events"] if not _exists(con, "events", {
            k: r[k] for k in ("run_id", "cell_id", "t", "kind", "message")})]}
    if kind == "process":
        rows = {"processes": [r for r in rows["processes"] if not _exists(con, "processes", {
            k: r[k] for k in ("run_id", "role", "pid", "started")})]}
    if kind == "testbed":
        rows = {"testbeds": [r for r in rows["testbeds"] if not _exists(con, "testbeds", {
            k: r[k] for k in ("run_id", "dir", "kinds")})]}
    for table, table_rows in rows.items():
        _insert(con, table, table_rows)


def _plain(value: Any) -> Any:
    """JSON for held units: numpy values become numbers, times their text (DuckDB reads it back)."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, datetime):
        return value.isoformat(sep=" ")
    return str(value)


def _process_start(pid: int) -> float | None:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def _alive(pid: Any, created: Any) -> bool:
    """Is the process that wrote a held file still running (same PID and start time)?"""
    return isinstance(pid, int) and isinstance(created, (int, float)) and alive(pid, created)


def _process_row(run_id: str, role: str, pid: int) -> dict[str, Any]:
    return {"run_id": run_id, "role": role, "host": HOST, "pid": pid, "started": _process_start(pid), "t": now()}


@dataclass
class Testbeds:
    """The testbed directories one run started systems in, and whether that run is over (it can no longer stop
    them itself)."""

    run_id: str
    dirs: list[tuple[str, list[str], bool]]  # (dir, kinds, owned: the run made it)
    status: str  # the run's status as load_run shows it
    ended: bool  # finished, or its processes are proven gone


def judge_processes(rows: list[tuple[str, str, int, float | None]]) -> tuple[bool | None, str]:
    """(live?, why) of a run from its recorded processes (role, host, pid, start time): True while one still runs
    here, False once every one is proven gone (same host, PID not running or running since another time), None
    when it cannot be told (nothing recorded: an older storeval; or processes on another host)."""
    if not rows:
        return None, "no process of the run is recorded (an older storeval)"
    if any(host != HOST for _, host, _, _ in rows):
        return None, f"its processes ran on another host ({next(h for _, h, _, _ in rows if h != HOST)})"
    for role, _, pid, started in rows:
        if alive(pid, started):
            return True, f"its {role} (pid {pid}) is running"
    named = ", ".join(f"{role} pid {pid}" for role, _, pid, _ in rows)
    return False, f"its processes on {HOST} ({named}) have all ended"


def settle_budget() -> float:
    """Seconds the end of a run waits for a busy or full store (``STOREVAL_STORE_WAIT``: 300, 30s, 5m)."""
    value = os.environ.get(SETTLE_WAIT)
    if value is None or not value.strip():
        return SETTLE_DEFAULT
    try:
        return parse_duration(value)
    except UnitError as e:
        raise InputError(f"{SETTLE_WAIT}={value}: {e} (how long a run waits for a busy or full results store)") from None


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
    not_run: int = 0  # cells never reached that load_run(ran_only=True) left out


class Store:
    """The results directory's store. ``create``: make it (run); else it must exist (report, compare, export)."""

    def __init__(self, results_dir: str, *, create: bool = True) -> None:
        self.dir = os.path.abspath(results_dir)
        self.path = os.path.join(self.dir, DB_NAME)
        self.log: Callable[[str], None] = lambda message: None  # where a run says that it holds or waits
        self.held: list[dict[str, Any]] = []  # units not stored yet, in order
        self._batch: list[dict[str, Any]] | None = None  # inside batch(): the units to store together at its end
        self.held_files: list[str] = []  # this process's files keeping them (the newest first)
        self.hold_reason: StoreError | None = None
        self.spill_error: str | None = None
        self.imported: list[str] = []  # held files of ended processes stored by this open
        self.unimported: list[str] = []  # ... and those that could not be stored (yet)
        self.created = False  # this process created the file (a failed start removes it again)
        self.migrated = False
        self._made_dirs: list[str] = []
        self._wal_existed = True
        if create:
            settle_budget()  # a bad value is an input error now, not at the end of the run
            self._create()
        else:
            if not os.path.exists(self.path):
                raise InputError(f"{results_dir} holds no storeval results ({DB_NAME} is missing; run storeval run first)")
            self._validate()
        self._import_held()

    @classmethod
    def check_location(cls, results_dir: str) -> None:
        """Raise InputError if results cannot be written there (checked before anything runs; the directory
        itself is created by the Store, which removes it again if the start fails)."""
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

    # -- opening ---------------------------------------------------------------------------------------
    def _create(self) -> None:
        missing, probe = [], self.dir
        while not os.path.exists(probe):
            missing.append(probe)
            probe = os.path.dirname(probe)
        try:
            os.makedirs(self.dir, exist_ok=True)
        except OSError as e:
            raise InputError(f"--results {self.dir}: cannot create {self.dir}: {e.strerror} (choose another results "
                             "directory)") from None
        self._made_dirs = missing  # deepest first
        self._wal_existed = os.path.lexists(self.path + ".wal")
        self.created = not os.path.lexists(self.path)
        try:
            with self.transaction(wait=0) as con:
                if not self.created:
                    _check_intact(con, self.path)
        except StoreError as e:
            if e.kind == "busy" and not self.created:
                self._validate()  # a reader holds it: go on; the schema is brought up to date at the first write
                return
            self._discard()
            e.exit_code = EXIT_INPUT  # nothing has run
            raise
        except BaseException:
            self._discard()
            raise

    def _validate(self) -> None:
        """A storeval store (or an empty DuckDB file), readable: else one line saying what it is."""
        kind = _file_kind(self.path)
        if kind in ("empty", "foreign"):
            raise self._error(kind, "", None)
        with self.connect(read_only=True) as con:
            tables = table_names(con)
            _check_intact(con, self.path)
        if tables and not tables & set(TABLES):
            raise StoreError(f"{self.path} is not a storeval results store (it holds other tables: "
                             f"{', '.join(sorted(tables)[:5])})", "foreign", "choose another results directory",
                             EXIT_INPUT)

    def _discard(self) -> None:
        """Remove what a failed start of this process created: the empty store and the directories made for it."""
        if not self.created:
            return
        for path in (self.path, *(() if self._wal_existed else (self.path + ".wal",))):
            try:
                os.unlink(path)
            except OSError:
                pass
        for directory in self._made_dirs:
            try:
                os.rmdir(directory)  # only when empty
            except OSError:
                break
        self.created = False

    def _error(self, kind: str, first: str, file: str | None) -> StoreError:
        if kind == "busy":
            pid = re.search(r"\(PID (\d+)\)", first)
            return StoreError(f"results store {self.path} is in use by another process"
                              f"{f' (PID {pid.group(1)})' if pid else ''}", kind,
                              "wait for it or use another --results directory")
        if kind == "full":
            return StoreError(f"the file system holding {file or self.path} is full ({first})", kind,
                              "free space there or use another --results directory", file=file)
        if kind == "denied":
            return StoreError(f"results store {self.path}: {first}", kind, "use another --results directory",
                              EXIT_INPUT, file)
        if kind == "damaged":
            return StoreError(f"results store {self.path} is damaged ({first})", kind,
                              "restore it from a backup or use another --results directory", EXIT_INPUT, file)
        if kind == "foreign":
            return StoreError(f"{self.path} is not a storeval results store (not a DuckDB file)", kind,
                              "choose another results directory", EXIT_INPUT)
        if kind == "empty":
            return StoreError(f"results store {self.path} is empty (0 bytes: left by a failed start, or damaged)", kind,
                              "remove it or use another --results directory", EXIT_INPUT)
        return StoreError(f"results store {self.path}: {first}", kind, "", file=file)

    def _failure(self, e: BaseException) -> StoreError | None:
        """The StoreError for ``e``, or None when ``e`` is a bug of storeval's (it then propagates as it is)."""
        kind, first, file = _classify(e)
        if kind == "bug":
            return None
        if kind in ("damaged", "io") and file in (None, self.path) and _file_kind(self.path) in ("empty", "foreign"):
            kind = _file_kind(self.path)
        return self._error(kind, first, file)

    @contextmanager
    def connect(self, read_only: bool = False, wait: float = OPEN_WAIT) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection; a busy store is waited for up to ``wait`` seconds. Every failure of the file (busy,
        full, damaged, foreign) is a StoreError, raised from here or from the body."""
        deadline = time.monotonic() + wait
        while True:
            try:
                con = duckdb.connect(self.path, read_only=read_only)
                break
            except duckdb.Error as e:
                err = self._failure(e)
                if err is None:
                    raise
                if err.kind != "busy" or time.monotonic() >= deadline:
                    raise err from None
                time.sleep(0.1)
        try:
            yield con
        except duckdb.Error as e:
            err = self._failure(e)
            if err is None:
                raise
            raise err from None
        finally:
            try:
                con.close()
            except duckdb.Error:
                pass

    @contextmanager
    def transaction(self, wait: float = OPEN_WAIT) -> Iterator[duckdb.DuckDBPyConnection]:
        with self.connect(wait=wait) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                if not self.migrated:
                    _create_or_migrate(con, self.path)
                yield con
                con.execute("COMMIT")
            except BaseException:
                try:
                    con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # a failed COMMIT has rolled back already
                raise
            self.migrated = True

    # -- holding what cannot be stored now ----------------------------------------------------------------
    def _store_units(self, units: list[dict[str, Any]], wait: float) -> StoreError | None:
        """Store ``units`` in order, each in its own transaction, removing each from the list once stored;
        returns why the rest could not be stored (None: all were)."""
        if not units:
            return None
        try:
            with self.connect(wait=wait) as con:
                while units:
                    con.execute("BEGIN TRANSACTION")
                    try:
                        if not self.migrated:
                            _create_or_migrate(con, self.path)
                        _apply(con, units[0])
                        con.execute("COMMIT")
                    except BaseException:
                        try:
                            con.execute("ROLLBACK")
                        except duckdb.Error:
                            pass
                        raise
                    self.migrated = True
                    units.pop(0)
        except StoreError as e:
            if e.kind == "full":
                self._tidy_wal()
            return e
        return None

    def _tidy_wal(self) -> None:
        """A commit that failed on a full disk leaves DuckDB's journal empty beside the store; opening and
        closing the store (under DuckDB's own lock) removes it, so nothing half-made stays behind."""
        wal = self.path + ".wal"
        try:
            if os.path.getsize(wal) == 0:
                duckdb.connect(self.path).close()
        except (OSError, duckdb.Error):
            pass

    @contextmanager
    def batch(self, check: Callable[[duckdb.DuckDBPyConnection], None] | None = None) -> Iterator[None]:
        """Write everything written inside the block in one transaction at its end, after ``check(con)`` (which
        may raise to refuse it all): an import whose second file is bad, or a run already there, stores nothing."""
        self._batch = []
        try:
            yield
            units, self._batch = self._batch, None
            with self.transaction() as con:
                if check is not None:
                    check(con)
                for unit in units:
                    _apply(con, unit)
        finally:
            self._batch = None

    def _write(self, unit: dict[str, Any]) -> None:
        """Store a unit now, or hold it (with everything held before it) and let the run go on."""
        if self._batch is not None:
            self._batch.append(_redact_unit(unit))
            return
        self.held.append(_redact_unit(unit))
        err = self._store_units(self.held, 0 if self.hold_reason else WRITE_WAIT)  # holding: one quick try
        if err is None:
            self._stored()
        else:
            self._hold(err)

    def _what_held(self) -> str:
        cells = sum(1 if u["unit"] == "cell" else len(u["columns"]["cells"]["cell_id"]) if u["unit"] == "not-run"
                    else 0 for u in self.held)
        parts = [f"{cells} cell{'s' if cells != 1 else ''}"] if cells else []
        if any(u["unit"] not in ("cell", "not-run") for u in self.held):
            parts.append("the run's own rows")
        return " and ".join(parts)

    def _hold(self, err: StoreError) -> None:
        changed = self.hold_reason is None or self.hold_reason.kind != err.kind
        self.hold_reason = err
        self._spill()
        if changed:
            where = f"kept in {self.held_files[0]}" if self.held_files else \
                f"kept in memory only: {self.spill_error}"
            self.log(f"{err.reason}: {self._what_held()} held, {where}; they are stored as soon as the store "
                     "can be written")

    def _stored(self) -> None:
        for path in self.held_files:
            outputs.remove_own(path, "held")
        self.held_files = []
        if self.hold_reason is not None:
            self.hold_reason = None
            self.log(f"results store {self.path}: the held results are stored now")

    def _spill(self) -> None:
        """Keep the held units in a file of storeval's own: beside the store, or in the temporary directory
        when that cannot be written (a full disk). The newest copy that could be written is listed first."""
        runs = sorted({u["run_id"] for u in self.held})
        text = json.dumps({"pid": os.getpid(), "created": _process_start(os.getpid()), "units": self.held},
                          default=_plain)
        name = f"storeval-held-{runs[0]}-{os.getpid()}.json"
        errors = []
        for directory in (self.dir, tempfile.gettempdir()):
            path = os.path.join(directory, name)
            try:
                outputs.write_owned(path, "held results", "json", "held", runs, text, replaces=("held",))
            except (OSError, StorevalError) as e:
                errors.append(str(e))
                continue
            for old in self.held_files:
                if old != path:
                    outputs.remove_own(old, "held")
            self.held_files, self.spill_error = [path], None
            return
        self.spill_error = "; ".join(errors)

    def _import_held(self) -> None:
        """Store the held files of processes that have ended (a run that could not store its cells), then
        remove them; files of running processes, and files that are not storeval's intact own, are left."""
        def written(path: str) -> float:
            try:
                return os.stat(path).st_mtime
            except OSError:
                return 0.0

        # oldest first: a dead coordinator's cells before what its watchdog stored about its death
        for path in sorted(glob.glob(os.path.join(self.dir, HELD_GLOB)), key=written):
            mark, text = outputs.read_owned(path, "held")
            if mark is None:
                continue
            try:
                held = json.loads(text)
                units = list(held["units"])
            except (ValueError, KeyError, TypeError):
                continue
            if held.get("pid") == os.getpid() or _alive(held.get("pid"), held.get("created")):
                continue
            if self._store_units(units, WRITE_WAIT) is not None:
                self.unimported.append(path)
                continue
            outputs.remove_own(path, "held")
            self.imported.append(path)

    def settle(self) -> None:
        """At the end of a run: store everything held, waiting for a busy or full store (bounded, saying so);
        if it still cannot, raise one line that says where the held results are kept."""
        err = self._store_units(self.held, WRITE_WAIT)
        if err is None:
            self._stored()
            return
        self._hold(err)
        if err.kind in ("busy", "full", "io"):  # these may pass: wait for them; a damaged store does not heal
            self._wait(err)
        if not self.held:
            return
        self._fail()

    def _wait(self, err: StoreError) -> None:
        budget = settle_budget()
        deadline = time.monotonic() + budget
        self.log(f"waiting up to {budget:g} s for the results store ({SETTLE_WAIT} sets how long): {err.reason}; "
                 f"{self._what_held()} held")
        delay = 0.5
        while (remaining := deadline - time.monotonic()) > 0:
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 10.0)
            err = self._store_units(self.held, min(WRITE_WAIT * 2, max(deadline - time.monotonic(), 0.1)))
            if err is None:
                self._stored()
                return
            if err.kind != self.hold_reason.kind:
                self._hold(err)

    def _fail(self) -> None:
        err = self.hold_reason
        runs = ", ".join(sorted({u["run_id"] for u in self.held}))
        if self.held_files and os.path.dirname(self.held_files[0]) == self.dir:
            then = "restore the store from a backup, then " if err.kind == "damaged" else ""
            kept = f"they are kept in {self.held_files[0]}: {then}storeval report {self.dir} stores them once it can"
        elif self.held_files:
            kept = (f"they are kept in {self.held_files[0]}: move it into {self.dir} once there is room, and storeval "
                    f"report {self.dir} stores them")
        else:
            kept = f"they could not be kept in a file either ({self.spill_error})"
        raise StoreError(f"cannot store {self._what_held()} of run {runs}: {err.reason}; {kept}", "unsaved")

    # -- writing ---------------------------------------------------------------------------------
    def begin_run(self, run_id: str, *, study: dict, study_hash: str, version: str, command_line: str,
                  source: str | None, engine: str, environment: dict[str, Any], started: datetime | None = None) -> None:
        """The run's first row. A busy store holds it like any write; a full or damaged one refuses the run
        before anything runs (and a store this process created for it is removed again). ``started``: when
        another tool ran what is imported (inside :meth:`batch`; no process of this one keeps that run live)."""
        unit = {"unit": "begin", "run_id": run_id, "rows": {
            "studies": [{"run_id": run_id, "started": started or now(), "status": "running",
                         "storeval_version": version, "command_line": command_line,
                         "study": json.dumps(study, default=str), "study_hash": study_hash,
                         "source": source, "engine": engine}],
            "environment": [{"run_id": run_id, "key": k, "value": json.dumps(v, default=str)}
                            for k, v in environment.items()],
            "processes": [] if started else [_process_row(run_id, "coordinator", os.getpid())]}}
        if self._batch is not None:
            self._write(unit)
            return
        self.held.append(_redact_unit(unit))
        err = self._store_units(self.held, WRITE_WAIT)
        if err is None:
            self._stored()
            return
        if err.kind == "busy":
            self._hold(err)
            return
        self.held.remove(unit)
        self._discard()
        err.exit_code = EXIT_INPUT
        raise err

    def add_environment(self, run_id: str, key: str, value: Any) -> None:
        self._write({"unit": "environment", "run_id": run_id, "rows": {
            "environment": [{"run_id": run_id, "key": key, "value": json.dumps(value, default=str)}]}})

    def add_process(self, run_id: str, role: str, pid: int) -> None:
        """Note a process that keeps the run live (a watchdog, each time one is started)."""
        self._write({"unit": "process", "run_id": run_id, "rows": {"processes": [_process_row(run_id, role, pid)]}})

    def add_testbed(self, run_id: str, directory: str, kinds: list[str], owned: bool) -> None:
        """Note a testbed directory the run starts systems in (``owned``: the run made it), before they start."""
        self._write({"unit": "testbed", "run_id": run_id, "rows": {"testbeds": [
            {"run_id": run_id, "dir": directory, "kinds": json.dumps(sorted(kinds)), "owned": owned, "t": now()}]}})

    def end_run(self, run_id: str, status: str, finished: datetime | None = None) -> None:
        self._write({"unit": "end", "run_id": run_id, "finished": finished or now(), "status": status})

    def write_cell(self, run_id: str, cell: Any, *, status: str, error: str | None, started: datetime,
                   phases: list[tuple[str, int, str, str | None]], records: list[PhaseRecord],
                   events: list[dict[str, Any]], samples: list[tuple] | None = None) -> None:
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
        self._write({"unit": "cell", "run_id": run_id, "cell_id": cell.index, "rows": {
            "cells": [{"run_id": run_id, "cell_id": cell.index, "config": cell.config, "target": cell.target.name,
                       "target_url": cell.target.url, "workload": cell.workload, "kind": cell.kind,
                       "params": json.dumps(params_json(cell.params)), "factors": json.dumps(cell.factors), "clients": cell.clients,
                       "repetition": cell.repetition, "status": status, "error": error, "started": started,
                       "finished": now()}],
            "phases": [{"run_id": run_id, "cell_id": cell.index, "seq": seq, "phase": phase, "iteration": iteration,
                        "status": pstatus, "reason": reason}
                       for seq, (phase, iteration, pstatus, reason) in enumerate(phases)],
            "records": rows,
            "events": [self._event(run_id, cell.index, ev) for ev in events],
            "samples": [{"run_id": run_id, "cell_id": cell.index, "t_ns": t, "probe": probe, "device": device,
                         "metric": metric, "value": value, "host": host}
                        for t, probe, device, metric, value, host in samples or []]}})

    def write_not_run(self, run_id: str, cells: list[tuple[Any, list[tuple[str, int]]]], error: str) -> None:
        """Cells the run never reached, each with its planned steps, as ``not-run`` — in one unit (one
        transaction), so stopping a 100,000-cell plan takes a moment, not an INSERT per cell."""
        if not cells:
            return
        when = now()
        params: dict[int, str] = {}  # the plan shares one dict between the cells of a combination: dumped once
        factors: dict[int, str] = {}

        def dumped(memo: dict[int, str], value: Any) -> str:
            key = id(value)
            if key not in memo:
                memo[key] = json.dumps(params_json(value))
            return memo[key]

        plain = [c for c, _ in cells]
        cols: dict[str, list[Any]] = {
            "cell_id": [c.index for c in plain], "config": [c.config for c in plain],
            "target": [c.target.name for c in plain], "target_url": [c.target.url for c in plain],
            "workload": [c.workload for c in plain], "kind": [c.kind for c in plain],
            "params": [dumped(params, c.params) for c in plain], "factors": [dumped(factors, c.factors) for c in plain],
            "clients": [c.clients for c in plain], "repetition": [c.repetition for c in plain]}
        ph: dict[str, list[Any]] = {
            "cell_id": [c.index for c, steps in cells for _ in steps],
            "seq": [seq for _, steps in cells for seq in range(len(steps))],
            "phase": [phase for _, steps in cells for phase, _ in steps],
            "iteration": [iteration for _, steps in cells for _, iteration in steps]}
        # cell_id stays a column (it gives the rows their number); a column of one repeated value is bound once
        columns = {"cells": {"run_id": run_id, **{k: v if k == "cell_id" else _column(v) for k, v in cols.items()},
                             "status": "not-run", "error": error, "started": when, "finished": when}}
        if ph["cell_id"]:
            columns["phases"] = {"run_id": run_id, **{k: v if k == "cell_id" else _column(v) for k, v in ph.items()},
                                 "status": "not-run", "reason": None}
        self._write({"unit": "not-run", "run_id": run_id, "cell_id": cells[0][0].index, "columns": columns})

    @staticmethod
    def _event(run_id: str, cell_id: int | None, ev: dict[str, Any]) -> dict[str, Any]:
        detail = ev.get("detail")
        return {"run_id": run_id, "cell_id": cell_id, "t": ev.get("t", now()), "kind": ev["kind"],
                "rank": ev.get("rank"), "phase": ev.get("phase"), "message": ev["message"],
                "detail": json.dumps(detail) if detail is not None else None}

    def add_events(self, run_id: str, events: list[dict[str, Any]]) -> None:
        self._write({"unit": "events", "run_id": run_id,
                     "rows": {"events": [self._event(run_id, ev.get("cell"), ev) for ev in events]}})

    def record_output(self, path: str, mark: outputs.Mark, size: int) -> bool:
        """Note a file storeval wrote (best effort: the file's own header is the proof of ownership)."""
        try:
            with self.transaction(wait=WRITE_WAIT) as con:
                _insert(con, "outputs", [{"path": os.path.abspath(path), "format": mark.fmt, "kind": mark.kind,
                                          "run_id": mark.runs[0] if mark.runs else None, "token": mark.token,
                                          "sha256": mark.sha256, "size": size, "written": now()}])
        except StoreError:
            return False
        return True

    # -- reading -----------------------------------------------------------------------------------
    def run_ids(self) -> list[str]:
        with self.connect(read_only=True) as con:
            if "studies" not in table_names(con):
                return []
            return [r[0] for r in con.execute("SELECT run_id FROM studies ORDER BY started").fetchall()]

    def resolve_run(self, run_id: str | None) -> str:
        ids = self.run_ids()
        if not ids:
            raise InputError(f"{self.dir} holds no runs yet (run storeval run first)")
        if run_id is None:
            return ids[-1]
        matches = [i for i in ids if i == run_id] or [i for i in ids if i.startswith(run_id)]
        if len(matches) != 1:
            shown = visible(run_id) if len(run_id) <= 80 else visible(run_id[:79]) + "…"  # never a pasted 100 KB back
            raise InputError(f"run '{shown}' is not in {self.dir} ({'ambiguous' if matches else 'known: ' + ', '.join(ids[-5:])})")
        return matches[0]

    def left_behind(self, target: str, url: str) -> list[tuple[str, int, str, dict[str, Any], int]]:
        """(run, cell, kind, params, clients) of the cells of ended runs that left something on ``target`` (at
        ``url``) which no later run has removed: a ``left-behind`` event without a ``cleaned-up`` one."""
        with self.connect(read_only=True) as con:
            rows = con.execute(
                "SELECT DISTINCT c.run_id, c.cell_id, c.kind, c.params, c.clients FROM events e "
                "JOIN studies s ON s.run_id = e.run_id "
                "JOIN cells c ON c.run_id = e.run_id AND c.cell_id = e.cell_id "
                "WHERE e.kind = 'left-behind' AND s.status <> 'running' AND c.target = ? AND c.target_url = ? "
                "AND NOT EXISTS (SELECT 1 FROM events d WHERE d.run_id = e.run_id AND d.cell_id = e.cell_id "
                "AND d.kind = 'cleaned-up') ORDER BY c.run_id, c.cell_id", [target, url]).fetchall()
        return [(run, cell, kind, json.loads(params), clients) for run, cell, kind, params, clients in rows]

    def load_samples(self, run_id: str) -> list[tuple[int, int, str, str, str, float, str | None]]:
        """(cell, t_ns, probe, device, metric, value, host) of a run's probe samples, in time order per cell
        (host None: a store from before per-host sampling, when only the coordinator's host was sampled)."""
        with self.connect(read_only=True) as con:
            return con.execute("SELECT cell_id, t_ns, probe, device, metric, value, host FROM samples "
                               "WHERE run_id = ? ORDER BY cell_id, t_ns", [run_id]).fetchall()

    def load_run(self, run_id: str, *, ran_only: bool = False) -> RunData:
        """A run as stored. ``ran_only``: without the cells the run never reached (``not-run``; counted in
        ``RunData.not_run``) — what a stopped run reports at once, however large its plan. A run still marked
        running whose processes have all ended (coordinator and watchdogs, by PID and start time) is shown as
        ``interrupted``, with a ``died`` event saying so."""
        with self.connect(read_only=True) as con:
            row = con.execute("SELECT run_id, started, finished, status, storeval_version, command_line, study, "
                              "study_hash, engine FROM studies WHERE run_id = ?", [run_id]).fetchall()
            if not row:
                raise InputError(f"run '{run_id}' is not in {self.dir}")
            row = row[0]
            shown = _Memo()  # a plan repeats its URLs, errors and parameters: each distinct text is read once
            skip = "AND status <> 'not-run' " if ran_only else ""
            not_run = con.execute("SELECT count(*) FROM cells WHERE run_id = ? AND status = 'not-run'",
                                  [run_id]).fetchall()[0][0] if ran_only else 0
            cells = {}
            for c in con.execute("SELECT cell_id, config, target, target_url, workload, kind, params, factors, clients, "
                                 f"repetition, status, error FROM cells WHERE run_id = ? {skip}ORDER BY cell_id",
                                 [run_id]).fetchall():
                cells[c[0]] = CellRow(cell_id=c[0], config=c[1], target=c[2], target_url=shown.redact(c[3]),
                                      workload=c[4], kind=c[5], params=shown.json(c[6]), factors=shown.json(c[7]),
                                      clients=c[8], repetition=c[9], status=c[10], error=shown.redact(c[11]),
                                      phases=[], records=[])
            for cell_id, phase, iteration, status, reason in con.execute(
                    "SELECT cell_id, phase, coalesce(iteration, 0), status, reason FROM phases WHERE run_id = ? "
                    "ORDER BY cell_id, seq",
                    [run_id]).fetchall():
                if cell_id in cells:
                    cells[cell_id].phases.append((phase, iteration, status, shown.redact(reason)))
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
            events = [{"cell": e[0], "t": e[1], "kind": e[2], "rank": e[3], "phase": e[4], "message": redact(e[5]),
                       **({"detail": redact(json.loads(e[6]))} if e[6] is not None else {})}
                      for e in con.execute("SELECT cell_id, t, kind, rank, phase, message, detail FROM events "
                                           "WHERE run_id = ? ORDER BY t", [run_id]).fetchall()]
            status = row[3]
            if status == "running":
                live, why = judge_processes(self._processes(con, run_id))
                if live is False:
                    status = "interrupted"
                    events.append({"cell": None, "t": now(), "kind": "died", "rank": None, "phase": None,
                                   "message": f"the run never finished: {why}, and nothing recorded how it ended "
                                              "(shown as interrupted)"})
        return RunData(run_id=row[0], started=row[1], finished=row[2], status=status, storeval_version=row[4],
                       command_line=redact(row[5]), study=redact(json.loads(row[6])), study_hash=row[7], engine=row[8],
                       cells=list(cells.values()), environment=env, events=events, not_run=not_run)

    @staticmethod
    def _processes(con: duckdb.DuckDBPyConnection, run_id: str) -> list[tuple[str, str, int, float | None]]:
        if "processes" not in table_names(con):  # a store no run of this storeval has written yet
            return []
        return [tuple(r) for r in con.execute("SELECT role, host, pid, started FROM processes WHERE run_id = ? "
                                              "ORDER BY t", [run_id]).fetchall()]

    def testbeds(self, run_id: str | None = None) -> list[Testbeds]:
        """The testbed directories runs started systems in (``run_id``: that run's only), oldest run first, each
        with whether its run is over: a dead run's directories may still hold running servers, which
        ``storeval testbed down --dir DIR`` stops (and removes, the run's own directory with its data)."""
        with self.connect(read_only=True) as con:
            if "testbeds" not in table_names(con):
                return []
            rows = con.execute("SELECT t.run_id, t.dir, t.kinds, t.owned, s.status FROM testbeds t JOIN studies s "
                               "ON s.run_id = t.run_id WHERE ? IS NULL OR t.run_id = ? ORDER BY s.started, t.t",
                               [run_id, run_id]).fetchall()
            out: dict[str, Testbeds] = {}
            for run, directory, kinds, owned, status in rows:
                if run not in out:
                    ended = status != "running"
                    if not ended and judge_processes(self._processes(con, run))[0] is False:
                        status, ended = "interrupted", True
                    out[run] = Testbeds(run_id=run, dirs=[], status=status, ended=ended)
                seen = next((d for d in out[run].dirs if d[0] == directory), None)
                if seen is None:
                    out[run].dirs.append((directory, sorted(json.loads(kinds)), bool(owned)))
                else:  # another system started there later in the run: one directory, every kind
                    out[run].dirs[out[run].dirs.index(seen)] = (directory, sorted({*seen[1], *json.loads(kinds)}),
                                                                seen[2])
        return list(out.values())


class _Memo:
    """Redacted text and parsed JSON of repeated values, each distinct value worked out once (the values are
    only read by the reports)."""

    def __init__(self) -> None:
        self.texts: dict[Any, Any] = {}
        self.docs: dict[str, Any] = {}

    def redact(self, value: Any) -> Any:
        if value not in self.texts:
            self.texts[value] = redact(value)
        return self.texts[value]

    def json(self, text: str) -> Any:
        if text not in self.docs:
            self.docs[text] = json.loads(text)
        return self.docs[text]
