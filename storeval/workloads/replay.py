"""Replay workload: a recorded application's reads and writes issued again against any target (seed 003).

Input is a trace (``storeval.traces``: the XRootD server's fsio log, fio's iolog, storeval's CSV/JSONL, what
``record: true`` wrote). Each traced stream (a connection, a file handle, a job) is a thread of one client:
``streams: per-client`` gives every stream its own client, ``streams: N`` spreads them round-robin over N
clients: the replay fixes its cells' client count (``Workload.fixed_clients``), whatever client counts the
study sweeps for its other workloads.

* **open-loop** (``mode: open``): each operation is issued at its recorded time ÷ ``speed`` after the phase's
  start (the barrier every client leaves together); the start lag (actual − scheduled start) goes into a
  histogram per operation kind. A stream never issues an operation before its previous one has finished —
  the dependencies of the recording are kept, so a late operation delays the next ones and the lag says so.
  Traces with coarse timestamps (XRootD logs: one second) spread the operations of one stream that share a
  timestamp evenly over that interval.
* **closed-loop** (``mode: closed``): each stream's operations in order, as fast as the target answers.

The rows of one vector read (one request id) are one ``driver.preadv(handle, ranges)`` where the target has a
vector read (``caps.vector_read``) and ``vector: native``; otherwise element by element (``split``). What each
target did is in the output: XRootD sends kXR_readv, S3 fetches exactly the trace's ranges with obstore's
``get_ranges`` (``coalesce=0``: one ranged GET per range, so the server reads the trace's bytes; ``vector:
coalesced`` merges ranges closer than the target's ``vector_coalesce`` into one GET, reading the gaps too — the
``moved ×`` column and the ``replay-moved`` flag say so), POSIX reads element by element.

Files: ``files: create`` lays out every file the trace reads at its traced size under a kept key directory
(``storeval-data/replay-<key>/``, the key covers the files' names and sizes and the target's layout; untimed,
by the coordinator, reused by later cells and runs) written with storeval's stamped random payload;
``files: map`` rewrites the traced names by ``map`` prefixes onto data already on the target, each checked to
be there and large enough before the timed phase. Files the trace writes are written under the cell's own
directory (never over input data) and removed after the cell; one it also reads was there when it was recorded,
so client 0 lays it out there first (untimed) at the size the reads need. Across streams only the recorded
times order operations (open-loop): a write one stream made before another stream's read is not waited for.

Where the checks sit: the trace is parsed when the study is validated (a missing or malformed trace is one line
with its YAML path, exit 2); the plan runs every cell at the client count the trace fixes (``needs``, which
preflight asks for every cell before anything runs, still refuses a cell whose count does not fit); mapped files are checked on the target by the
coordinator before the cell (``prepare_target``) and again by each client before the timed phase.

A trace without open lines opens a file at its stream's first use of it and closes it at the stream's end (the
output counts these opens and closes that the trace did not have). The hot loop runs over per-stream lists
prepared before the timed region, into buffers sized for the largest operation; the only per-operation
allocation is what a driver's vector read returns.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import time
from array import array
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from pydantic import ValidationInfo, field_validator, model_validator

from ..core.oplog import P_BEAT, PhaseRecorder
from ..core.records import GAP_NS
from ..drivers.base import Capabilities, Driver, join
from ..errors import InputError
from ..histogram import Histogram
from ..traces import load_trace
from ..traces.model import CLOSE, KINDS, OPEN, READ, READV, WRITE, Trace
from ..units import format_size, plural
from .base import MB_PER_MIB, Best, Chart, ClientContext, Figure, Need, Needs, Params, Report, Scaling, Workload, param, summary_text
from .kernel import run_parallel
from .payload import SECTOR, Payload, aligned_buffer
from .rootfiles import read_manifest

SCHEMA_VERSION = 1
DATA_DIR = "storeval-data"
LAYOUT_CHUNK = 8 << 20  # files are laid out in pieces of this size
PER_OP_BYTES = 64  # what one prepared operation costs a client (its entries in the per-stream lists)
WRITTEN_PREFIX = "replay-w-"  # files the trace writes, under the cell's directory
MIN_SPEED, MAX_SPEED = 1e-3, 1e6  # speed factors a schedule may take
MAX_REPLAY_SECONDS = 7 * 86400  # an open-loop replay (trace duration ÷ speed) longer than this is refused
MAX_STREAMS = 100_000
MOVED_TOLERANCE = 0.05  # a target that moved more than the trace's bytes by this much is flagged (replay-moved)
IDLE_NS = GAP_NS // 2  # a scheduled wait this long is the trace's idle time, never a pause of the target
BEAT_NS = 1_000_000_000  # a stream waiting for its scheduled start sleeps in slices of this, beating between


# -- the trace, loaded once per process ---------------------------------------------------------------------
@dataclass
class Facts:
    """What the coordinator and every client need to know of a trace, computed once per process."""

    trace: Trace
    read_files: np.ndarray  # bool per file: some stream reads it
    written_files: np.ndarray  # bool per file: some stream writes it
    extent: np.ndarray  # int64 per file: the end of the furthest read (what must be there to read)
    written_extent: np.ndarray  # int64 per file: the end of the furthest write
    bytes_read: int  # read + readv bytes of the whole trace
    bytes_written: int
    largest: list[int]  # per stream: the largest read or write length (a readv element counts alone)
    ops: list[int]  # per stream: rows
    front_to_back: bool  # every written file is written by one stream, front to back without holes
    unknown: int  # data rows on no known file (file -1)
    key: str  # of the read files' names and sizes


_LOADED: dict[tuple, Facts] = {}


def facts_of(path: str, fmt: str) -> Facts:
    """The trace at ``path`` and its facts (parsed once per process while the file is unchanged)."""
    try:
        st = os.stat(path)
    except OSError as e:
        raise InputError(f"trace {path}: cannot be read ({e.strerror}); give the path of an existing trace file") \
            from None
    key = (path, fmt, st.st_mtime_ns, st.st_size)
    facts = _LOADED.get(key)
    if facts is None:
        facts = _facts(load_trace(path, fmt))
        if len(_LOADED) >= 4:
            _LOADED.clear()
        _LOADED[key] = facts
    return facts


def _facts(trace: Trace) -> Facts:
    n = len(trace.files)
    read_files, written_files = np.zeros(n, bool), np.zeros(n, bool)
    extent, wextent = np.zeros(n, np.int64), np.zeros(n, np.int64)
    bytes_read = bytes_written = unknown = 0
    largest, ops = [], []
    writers: dict[int, set[int]] = {}
    front_to_back = True
    for si, s in enumerate(trace.streams):
        o = s.ops
        ops.append(len(o))
        kind, file = o["kind"], o["file"]
        data = kind >= READ
        unknown += int(np.count_nonzero(data & (file < 0)))
        reads = ((kind == READ) | (kind == READV)) & (file >= 0)
        writes = (kind == WRITE) & (file >= 0)
        read_files[file[reads]] = True
        written_files[file[writes]] = True
        np.maximum.at(extent, file[reads], o["offset"][reads] + o["length"][reads])
        np.maximum.at(wextent, file[writes], o["offset"][writes] + o["length"][writes])
        bytes_read += int(o["length"][(kind == READ) | (kind == READV)].sum())
        bytes_written += int(o["length"][kind == WRITE].sum())
        largest.append(int(o["length"][data].max()) if data.any() else 0)
        for f in np.unique(file[writes]).tolist():
            writers.setdefault(f, set()).add(si)
            w = o[writes & (file == f)]
            ends = np.concatenate([[0], (w["offset"] + w["length"])[:-1]])
            if not np.array_equal(w["offset"], ends):
                front_to_back = False
    if any(len(v) > 1 for v in writers.values()):
        front_to_back = False
    blob = [(trace.files[i].name, int(max(extent[i], trace.files[i].size if trace.files[i].size_known else 0)))
            for i in np.flatnonzero(read_files & ~written_files).tolist()]
    key = hashlib.sha256(json.dumps(blob).encode()).hexdigest()
    return Facts(trace, read_files, written_files, extent, wextent, bytes_read, bytes_written, largest, ops,
                 front_to_back, unknown, key)


class ReplayParams(Params):
    trace: str = param(..., "the trace file (relative: from the study file's directory, else the current one); "
                            "required", "path")
    format: Literal["auto", "xrootd", "fio", "csv", "jsonl", "storeval"] = param(
        "auto", "the trace's format; auto detects it from the content")
    mode: Literal["open", "closed"] = param(
        "open", "open: each operation at its recorded time ÷ speed (the start lag is measured); closed: each "
                "stream's operations in order, as fast as the target answers")
    speed: float = param(1.0, f"open-loop: how much faster than recorded the trace is replayed ({MIN_SPEED:g} to "
                              f"{MAX_SPEED:g})", "factor")
    files: Literal["create", "map"] = param(
        "create", "create: lay out the files the trace reads, at their traced sizes (untimed, kept); map: read data "
                  "already on the target, through map")
    map: dict[str, str] = param({}, "with files: map, trace path prefix → target path prefix", "mapping")
    streams: str | int = param("per-client", f"per-client: a client per traced stream; N: the streams spread over "
                                             f"N clients (1 to {MAX_STREAMS:,})", "per-client or count")
    # native: the target's vector read of exactly the trace's ranges (an object store: one ranged GET per range,
    # nothing merged across gaps); coalesced: as the target's driver does by default (S3: ranges closer than
    # vector_coalesce merged into one GET, which reads the gaps too); split: element by element
    vector: Literal["native", "coalesced", "split"] = param(
        "native", "a vector read as the target's own vector read of exactly the trace's ranges (native), with "
                  "ranges closer than the target's vector_coalesce merged (coalesced), or element by element (split)")
    random_seed: int = param(0, "seed of the payload of the files laid out and written", "seed")

    @field_validator("speed", mode="before")
    @classmethod
    def _speed(cls, v: Any) -> float:
        """A number in MIN_SPEED … MAX_SPEED: beyond them the schedule is meaningless (or overflows)."""
        try:
            speed = float(v)
        except (TypeError, ValueError):
            raise ValueError(f"is not a number; give speed: a factor between {MIN_SPEED:g} and "
                             f"{MAX_SPEED:g} (1 = the recorded pace)") from None
        if not MIN_SPEED <= speed <= MAX_SPEED:  # NaN fails this too
            raise ValueError(f"is outside {MIN_SPEED:g} … {MAX_SPEED:g}; give speed: a factor in that range "
                             "(1 = the recorded pace, 2 = twice as fast)")
        return speed

    @field_validator("streams", mode="before")
    @classmethod
    def _streams(cls, v: Any) -> str | int:
        if v == "per-client":
            return v
        if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_STREAMS:
            return v
        raise ValueError(f"is not a client count; give streams: per-client (one client per traced stream) "
                         f"or streams: N with N from 1 to {MAX_STREAMS:,}")

    @field_validator("trace")
    @classmethod
    def _absolute(cls, v: str, info: ValidationInfo) -> str:
        """An absolute path, so every client finds the same file: a relative one is taken from the study file's
        directory when the study passes it (validation context ``study_dir``), else from the current one."""
        if not v.strip():
            raise ValueError("is empty (give the path of a trace file)")
        base = (info.context or {}).get("study_dir") if isinstance(info.context, dict) else None
        return os.path.abspath(os.path.join(base, v) if base else v)

    @model_validator(mode="after")
    def _consistent(self) -> ReplayParams:
        if self.files == "create" and self.map:
            raise ValueError("map is for files: map (files: create lays the trace's files out itself)")
        try:
            facts = self.facts()
        except InputError as e:
            raise ValueError(str(e)) from None
        trace = facts.trace
        if self.mode == "open" and not trace.timed:
            raise ValueError(f"trace {self.trace} has no times ({trace.format}); replay it with mode: closed")
        if facts.unknown:
            raise ValueError(f"trace {self.trace}: {plural(facts.unknown, 'operation')} name no file (handles the log cannot "
                             "map to files); record the trace with the files named (xrootd: xrootd.trace fs fsio)")
        if isinstance(self.streams, int) and self.streams > len(trace.streams):
            raise ValueError(f"streams: {self.streams} clients for a trace of {plural(len(trace.streams), 'stream')}; give "
                             f"streams: N with N at most {len(trace.streams)}, or streams: per-client")
        if self.mode == "open":
            seconds = trace_seconds(trace) / self.speed
            if not seconds <= MAX_REPLAY_SECONDS:
                raise ValueError(f"trace {self.trace} lasts {_duration(trace_seconds(trace))}: at speed "
                                 f"{self.speed:g} the open-loop replay would take {_duration(seconds)}, more than "
                                 f"the {_duration(MAX_REPLAY_SECONDS)} storeval schedules; raise speed, or replay it "
                                 "with mode: closed")
        if self.files == "map":
            for prefix, to in self.map.items():
                if _unsafe(prefix) or _unsafe(to):
                    raise ValueError(f"map {prefix!r}: {to!r} has a '..' segment or a NUL; map onto paths inside "
                                     "the target (no '..')")
            for i in np.flatnonzero(facts.read_files & ~facts.written_files).tolist():
                name = trace.files[i].name
                path = self.mapped(name)
                if path is None:
                    raise ValueError(f"trace file {name} matches no map prefix (add one, e.g. "
                                     f"map: {{\"{os.path.dirname(name)}/\": \"data/\"}})")
                if _unsafe(path):
                    raise ValueError(f"trace file {name!r} maps to {path!r}, which has a '..' segment or a NUL and "
                                     "could read outside the target; replay this trace with files: create, or map "
                                     "a prefix that covers the '..'")
        return self

    def facts(self) -> Facts:
        return facts_of(self.trace, self.format)

    def mapped(self, name: str) -> str | None:
        """The target path of trace file ``name`` with files: map (None when no prefix matches)."""
        if not self.map:
            return name.lstrip("/")
        best = max((p for p in self.map if name.startswith(p)), key=len, default=None)
        if best is None:
            return None
        return (self.map[best] + name[len(best):]).lstrip("/") or None

    def clients_for(self) -> int:
        """The client count a cell of this replay must have."""
        return len(self.facts().trace.streams) if self.streams == "per-client" else int(self.streams)

    def check_clients(self, nclients: int) -> None:
        """One line when the cell's clients do not fit the trace's streams."""
        want = self.clients_for()
        if nclients == want:
            return
        count = len(self.facts().trace.streams)
        if self.streams == "per-client":
            raise InputError(f"replay of {self.trace}: the trace has {plural(count, 'stream')} and streams: per-client "
                             f"gives each its own client, but the cell has {plural(nclients, 'client')}; set clients: [{count}] "
                             f"(or --clients {count}), or streams: N to spread the streams over N clients")
        raise InputError(f"replay of {self.trace}: streams: {want} spreads the trace's {plural(count, 'stream')} over "
                         f"{plural(want, 'client')}, but the cell has {plural(nclients, 'client')}; set clients: [{want}] (or --clients "
                         f"{want}) or streams: {nclients}")

    def my_streams(self, rank: int, nclients: int) -> list[int]:
        count = len(self.facts().trace.streams)
        return list(range(rank, count, nclients))

    def data_dir(self, layout: dict[str, Any]) -> str:
        """The kept key directory of files: create on a target with this ``Driver.layout()``."""
        blob = {"files": self.facts().key, "schema": SCHEMA_VERSION, **({"layout": layout} if layout else {})}
        return join(DATA_DIR, "replay-" + hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:12])


def _unsafe(path: str) -> bool:
    """A path that could leave the target's root: a '..' segment, or a NUL."""
    return "\0" in path or ".." in path.replace("\\", "/").split("/")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.3g} h"
    return f"{seconds / 86400:.3g} days"


# -- per-stream operations, prepared before the timed region ------------------------------------------------
@dataclass
class StreamPlan:
    """One stream's operations as plain lists (one entry per operation: a vector read is one), ready for the
    hot loop. ``due`` is each operation's scheduled start in ns after the phase's start (open-loop)."""

    index: int
    kinds: list[int]
    files: list[int]
    offsets: list[int]
    lengths: list[int]
    due: list[int]
    ranges: list[Any]  # readv: its [(offset, length), ...]; else None
    modes: dict[int, str]  # file -> open mode in this stream
    implicit_opens: int = 0
    implicit_closes: int = 0
    unmatched_closes: int = 0
    largest: int = 0
    trace_read: int = 0
    trace_written: int = 0
    requests: int = 0
    elements: int = 0
    coalesced: int = 0  # vector reads' ranged GETs after merging close ranges (object stores)
    counts: dict[int, int] = field(default_factory=dict)


def plan_stream(trace: Trace, index: int, speed: float, coalesce: int | None) -> StreamPlan:
    """The operations of stream ``index``: the rows of one vector read joined, a file opened at its first use when
    the trace has no open for it (and closed at the stream's end), times spread over coarse resolutions."""
    o = trace.streams[index].ops
    kind = o["kind"]
    n = len(o)
    cont = np.zeros(n, bool)
    if n > 1:
        cont[1:] = (kind[1:] == READV) & (kind[:-1] == READV) & (o["request"][1:] == o["request"][:-1]) \
            & (o["request"][1:] >= 0) & (o["file"][1:] == o["file"][:-1])
    starts = np.flatnonzero(~cont)
    bounds = np.append(starts, n)
    t = o["t"][starts].astype(np.float64)
    res = trace.resolution or 0.0
    if res > 0 and len(t):  # operations sharing a timestamp spread evenly over its interval
        same = np.concatenate([[True], t[1:] != t[:-1]])
        group = np.cumsum(same) - 1
        first = np.flatnonzero(same)
        size = np.diff(np.append(first, len(t)))
        pos = np.arange(len(t)) - first[group]
        t = t + pos * (res / size[group])
    with np.errstate(over="ignore"):  # closed-loop ignores the schedule; open-loop's is bounded at validation
        due = np.minimum(t / speed * 1e9, float(1 << 62)).astype(np.int64).tolist()
    k_s, f_s = kind[starts].tolist(), o["file"][starts].tolist()
    off_s, len_s = o["offset"][starts].tolist(), o["length"][starts].tolist()
    writes = {int(f) for f in np.unique(o["file"][kind == WRITE]).tolist()}
    reads = {int(f) for f in np.unique(o["file"][(kind == READ) | (kind == READV)]).tolist()}
    modes = {f: ("rw" if f in reads else "w") if f in writes else "r" for f in writes | reads}
    plan = StreamPlan(index, [], [], [], [], [], [], modes)
    depth: dict[int, int] = {}
    offs_all, lens_all = o["offset"], o["length"]

    def add(k: int, f: int, off: int, ln: int, d: int, r: Any = None) -> None:
        plan.kinds.append(k)
        plan.files.append(f)
        plan.offsets.append(off)
        plan.lengths.append(ln)
        plan.due.append(d)
        plan.ranges.append(r)
        plan.counts[k] = plan.counts.get(k, 0) + 1

    for j, (k, f) in enumerate(zip(k_s, f_s)):
        d = due[j]
        if k == OPEN:
            if f not in modes:  # opened and never used: opened for reading
                modes[f] = "r"
            depth[f] = depth.get(f, 0) + 1
            add(OPEN, f, 0, 0, d)
            continue
        if k == CLOSE:
            if depth.get(f, 0) > 0:
                depth[f] -= 1
                add(CLOSE, f, 0, 0, d)
            else:
                plan.unmatched_closes += 1
            continue
        if depth.get(f, 0) == 0:
            depth[f] = 1
            plan.implicit_opens += 1
            add(OPEN, f, 0, 0, d)
        if k == READV:
            a, b = int(bounds[j]), int(bounds[j + 1])
            ranges = list(zip(offs_all[a:b].tolist(), lens_all[a:b].tolist()))
            total = sum(ln for _, ln in ranges)
            add(READV, f, 0, total, d, ranges)
            plan.requests += 1
            plan.elements += len(ranges)
            plan.trace_read += total
            plan.largest = max(plan.largest, max(ln for _, ln in ranges))
            if coalesce is not None:
                plan.coalesced += _coalesced(ranges, coalesce)
        else:
            add(k, f, off_s[j], len_s[j], d)
            plan.largest = max(plan.largest, len_s[j])
            if k == READ:
                plan.trace_read += len_s[j]
            else:
                plan.trace_written += len_s[j]
    end = due[-1] if due else 0
    for f, d in depth.items():
        for _ in range(d):
            plan.implicit_closes += 1
            add(CLOSE, f, 0, 0, end)
    return plan


def vector_read(driver: Driver, vector: str) -> tuple[bool, int | None, Any]:
    """How a stream's vector reads go to ``driver``: (as one request?, the gap below which an object store merges
    ranges into one GET — None where it merges none —, the call). ``native`` on an object store fetches exactly
    the trace's ranges (``preadv(..., coalesce=0)``: one ranged GET each, nothing read between them);
    ``coalesced`` lets it merge as its ``vector_coalesce`` says; a driver whose ``preadv`` cannot be told not to
    merge replays ``native`` element by element (the trace's bytes, one request per element)."""
    if vector == "split" or not driver.caps.vector_read:
        return False, None, None
    gap = getattr(driver.options, "vector_coalesce", None)
    if gap is None:  # XRootD's readv, POSIX preadv: the ranges as given
        return True, None, driver.preadv
    if vector == "coalesced":
        return True, int(gap), driver.preadv
    try:
        takes = "coalesce" in inspect.signature(driver.preadv).parameters
    except (TypeError, ValueError):
        takes = False
    if not takes:
        return False, None, None
    return True, 0, functools.partial(driver.preadv, coalesce=0)


def _coalesced(ranges: list[tuple[int, int]], gap: int) -> int:
    """Ranged GETs after ranges closer than ``gap`` bytes are merged (what obstore's get_ranges sends)."""
    count, end = 0, None
    for off, ln in sorted(ranges):
        if end is None or off - end > gap:
            count += 1
            end = off + ln
        else:
            end = max(end, off + ln)
    return count


# -- the report ---------------------------------------------------------------------------------------------
def _pair(r: Any, *keys: Any) -> str:
    """Two or three figures of the extras as ``a / b [/ c]`` (``scale`` the number among the keys)."""
    scale = next((k for k in keys if not isinstance(k, str)), 1.0)
    values = [r.extras.get(k) for k in keys if isinstance(k, str)]
    if all(v is None for v in values):
        return "–"
    return " / ".join(summary_text(v, scale) for v in values)


def _readv_text(r: Any) -> str:
    """Vector reads / their elements, and how the target did them: one request each (native; an object store's
    ranged GETs after coalescing) or element by element (split)."""
    if r.extras.get("readv_requests") is None or not r.extras["readv_requests"].mean:
        return "–"
    native = r.extras.get("vector_native")
    how = "native" if native is not None and native.mean == 1 else "split"
    gets = r.extras.get("coalesced_requests")
    if gets is not None and how == "native":
        gap = r.extras.get("vector_coalesce")
        merged = f" (coalesced {format_size(gap.mean)})" if gap is not None and gap.mean else ""
        how += f", {summary_text(gets)} GETs{merged}"
    return f"{_pair(r, 'readv_requests', 'readv_elements')} ({how})"


def _kinds_text(r: Any) -> str:
    """Latency p50/p99 of each data kind the phase had: ``read 0.1/0.3 · readv 2/5``."""
    parts = [f"{name} {_pair(r, f'{name}_p50_ms', f'{name}_p99_ms').replace(' / ', '/')}"
             for name in ("read", "readv", "write") if r.extras.get(f"{name}_p50_ms") is not None]
    return " · ".join(parts) or "–"


def _bytes_text(r: Any) -> str:
    equal = r.extras.get("bytes_equal")
    if equal is None:
        return "–"
    text = "equal" if equal.mean == 1 else "DIFFERENT"
    moved = r.extras.get("moved_vs_trace")
    if moved is not None and moved.mean > 1 + MOVED_TOLERANCE:  # what the client got is not what the server did
        text += f"; target moved {moved.mean:.2f}×"
    return text


class Replay(Workload):
    kind = "replay"
    preload = ("awkward", "uproot")  # the ROOT files' reader
    Params = ReplayParams
    PHASES = ("replay",)
    summary = "a recorded application's reads and writes replayed open- or closed-loop (seed 003)"
    report = Report(
        columns=(Figure("MB/s", "MB/s", value=lambda r: r.extras.get("MBps")),
                 Figure("read / written MB", "MB", direction="read",
                        text=lambda r: _pair(r, "bytes_read", "bytes_written", 1e-6)),
                 Figure("vs trace", text=_bytes_text),
                 Figure("lag p50/p99/max ms", direction="time",
                        text=lambda r: _pair(r, "lag_p50_ms", "lag_p99_ms", 1.0, "lag_max_ms")),
                 Figure("fidelity", "×", direction="ratio", value=lambda r: r.extras.get("fidelity"),
                        higher_is_better=False),
                 Figure("p50/p99 ms", direction="time", text=_kinds_text),
                 Figure("readv req/elem", direction="cost", text=_readv_text)),
        how_measured=("MB/s: bytes read and written (10^6 B, as the driver returned them) / (last end − first start) "
                      "of all clients. read/written MB vs the trace's: 'equal' when every client moved exactly the "
                      "trace's bytes of its streams (flag replay-bytes otherwise). Latency per kind (read, readv = one "
                      "vector read, write, open, close): inside the driver call, p50/p99 of a histogram over all "
                      "clients. Open-loop lag: each operation's actual start − its scheduled start (recorded time ÷ "
                      "speed after the phase's start); a stream never starts an operation before its previous one "
                      "ended, so lateness carries over and shows here; operations of one stream sharing a coarse "
                      "timestamp (XRootD logs: 1 s) are scheduled evenly over that interval. fidelity = replay wall "
                      "time / (trace duration ÷ speed), the trace's duration being first to last recorded start (plus "
                      "one resolution interval for coarse timestamps). readv req/elem: vector reads and their elements "
                      "replayed ('vector' says whether as one request — XRootD kXR_readv, S3 get_ranges with one "
                      "ranged GET per range (vector: native; vector: coalesced merges ranges closer than the target's "
                      "vector_coalesce, and the GETs column counts the merged GETs) — or split element by element, "
                      "as POSIX does). moved ×: bytes the target moved (server counters where the target has them, "
                      "else the device or interface: 'bytes moved counted at') / the phase's bytes; flag "
                      "replay-moved when the target moved more than 5% beyond the trace's bytes."),
        read=Best(lambda r: r.extras.get("read_MBps"), ("replay",), unit="MB/s", caption="bytes read"),
        write=Best(lambda r: r.extras.get("write_MBps"), ("replay",), unit="MB/s", caption="bytes written"),
        # the phase table's MB/s (bytes read and written / wall, 10^6 B) against clients
        scaling=Scaling(figure="MBps", unit="MB/s", aggregate=lambda ph: ph.extra.get("MBps"),
                        per_client=lambda ph: None if ph.client_MiBps[0] is None else ph.client_MiBps[0] * MB_PER_MIB),
        rate=Best(lambda r: r.ops_per_s, ("replay",), unit="ops/s"),
        compare=(Figure("MBps", "MB/s"), Figure("lag_p99_ms", "ms", direction="time", higher_is_better=False),
                 Figure("fidelity", "×", direction="ratio", higher_is_better=False),
                 Figure("read_p99_ms", "ms", direction="time", higher_is_better=False),
                 Figure("readv_p99_ms", "ms", direction="time", higher_is_better=False)),
        charts=tuple(Chart(label, Figure(key), y=label) for key, label in (
            ("MBps", "MB/s"), ("lag_p99_ms", "open-loop start lag p99 (ms)"),
            ("fidelity", "fidelity (replay time / recorded time)"), ("readv_p99_ms", "vector read p99 (ms)"))),
        section="Replay", section_table=True, amplification=True)
    p: ReplayParams

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        p = {k: v for k, v in params.items() if k not in exclude}
        parts = [({"trace"}, f"trace {os.path.basename(p.get('trace', ''))}"),
                 ({"mode", "speed"}, f"open-loop at ×{p.get('speed', 1):g} speed" if p.get("mode") == "open"
                  else "closed-loop"),
                 ({"streams"}, "one client per stream" if p.get("streams") == "per-client"
                  else f"streams over {p.get('streams')} clients"),
                 ({"files", "map"}, "files laid out" if p.get("files") == "create" else "files mapped onto data"),
                 ({"vector"}, "vector reads split" if p.get("vector") == "split" else "")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)

    # -- coordinator side --------------------------------------------------------------------------------
    def fixed_clients(self) -> int | None:
        """One client per traced stream, or the N of ``streams: N``."""
        return self.p.clients_for()

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        f = self.p.facts()
        return f.bytes_read + f.bytes_written, f.trace.operations()

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        try:
            f = facts_of(params["trace"], params.get("format", "auto"))
        except (InputError, KeyError):
            return None
        return "read" if not f.bytes_written else "write" if not f.bytes_read else None

    def skipped(self, caps: Capabilities) -> dict[str, str]:
        f = self.p.facts()
        if f.bytes_written and not caps.random_write and not f.front_to_back:
            return {"replay": "the trace writes files at random offsets (or from several streams) and this target "
                              "writes each file front to back, once"}
        return {}

    def target_data_key(self) -> str | None:
        return f"replay-{self.p.files}-{self.p.facts().key[:16]}-{self.p.trace}"

    def prepare_target(self, driver: Driver, *, regenerate: bool = False, log=lambda message: None,
                       clients: int = 1) -> None:
        """files: create — every file the trace reads laid out at its size in the kept key directory (those there
        at the right size are kept); files: map — each mapped file checked to be there and large enough."""
        p = self.p
        p.check_clients(clients)
        f = p.facts()
        trace = f.trace
        wanted = np.flatnonzero(f.read_files & ~f.written_files).tolist()
        if p.files == "map":
            for i in wanted:
                _check_size(driver, p.mapped(trace.files[i].name), int(f.extent[i]), trace.files[i].name)
            return
        directory = p.data_dir(driver.layout())
        sizes = {i: _layout_size(trace, f, i) for i in wanted}
        manifest = None if regenerate else read_manifest(driver, directory)
        present: dict[str, int] = {}
        if manifest is not None and manifest.get("schema") == SCHEMA_VERSION:
            present = {e["name"]: e["bytes"] for e in manifest.get("files", [])}
        missing = []
        for i in wanted:
            name = _data_name(i)
            ok = present.get(name) == sizes[i]
            if ok:
                try:
                    ok = driver.stat(join(directory, name)).size == sizes[i]
                except FileNotFoundError:
                    ok = False
            if not ok:
                missing.append(i)
        if not missing:
            return
        log(f"writing {plural(len(missing), 'file')} of the trace ({format_size(sum(sizes[i] for i in missing))}) to "
            f"{driver.url}/{directory}")
        for d in (DATA_DIR, directory):
            driver.ensure_dir(d)
        entries = {name: size for name, size in present.items()}
        for i in missing:
            name = _data_name(i)
            entries.pop(name, None)
            driver.remove_quietly(join(directory, name))
            _write_file(driver, join(directory, name), sizes[i], i, p.random_seed)
            entries[name] = sizes[i]
            _put_json(driver, join(directory, "manifest.json"), {
                "schema": SCHEMA_VERSION, "files": [{"name": k, "bytes": v, "trace_name": _trace_name(trace, k)}
                                                    for k, v in sorted(entries.items())]})

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """Per client: a buffer of the largest operation per stream (thread) and the prepared operations; the
        read files laid out once per target and kept (files: create); the written files under the cell."""
        p = self.p
        p.check_clients(nclients)
        f = p.facts()
        per_client = -(-len(f.trace.streams) // nclients)
        biggest = max(f.largest, default=0)
        rows = max(sum(f.ops[i] for i in p.my_streams(r, nclients)) for r in range(min(nclients, len(f.ops)))) \
            if f.ops else 0
        memory = (Need(2 * per_client * biggest, f"{plural(per_client, 'stream')} × 2 buffers of the largest operation "
                                                 f"{format_size(biggest)}", "replay a trace with smaller operations"),
                  Need(rows * PER_OP_BYTES, f"{rows:,} prepared operations", "replay a shorter trace"))
        wanted = np.flatnonzero(f.read_files & ~f.written_files).tolist()
        written = np.flatnonzero(f.written_files).tolist()
        scratch = (Need(int(np.maximum(f.written_extent, f.extent)[written].sum()) if written else 0,
                        f"{plural(len(written), 'file')} the trace writes", "replay a trace that writes less"),)
        kept = kept_dir = None
        if p.files == "create":
            total = sum(_layout_size(f.trace, f, i) for i in wanted)
            kept = Need(total, f"{plural(len(wanted), 'file')} the trace reads", "replay a trace that reads less, or files: map")
            kept_dir = p.data_dir({})
        # the trace fixes the client count: too many clients is lowered by streams: N, not --clients
        fewer = (f"set streams: N below {nclients:,} — the trace's {len(f.trace.streams):,} streams spread over N "
                 "clients as threads; --clients does not change a replay's client count")
        return Needs(memory=memory, scratch=scratch, entries=len(written) + 1, kept=kept, kept_dir=kept_dir,
                     largest_buffer=biggest, extent=int(max(f.extent.max(initial=0), f.written_extent.max(initial=0))),
                     threads=per_client, clients_fix=fewer)

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        for i in np.flatnonzero(self.p.facts().written_files).tolist():
            driver.remove_quietly(join(cell_dir, _written_name(i)))

    # -- client side -------------------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        p = self.p
        p.check_clients(c.nclients)
        f = p.facts()
        trace = f.trace
        native, coalesce, preadv = vector_read(c.driver, p.vector)
        plans = [plan_stream(trace, i, p.speed, coalesce) for i in p.my_streams(c.rank, c.nclients)]
        directory = p.data_dir(c.driver.layout()) if p.files == "create" else None
        paths: dict[int, str] = {}
        for plan in plans:
            for fi in plan.modes:
                if fi in paths:
                    continue
                if f.written_files[fi]:
                    paths[fi] = join(c.cell_dir, _written_name(fi))
                elif directory is not None:
                    paths[fi] = join(directory, _data_name(fi))
                else:
                    paths[fi] = p.mapped(trace.files[fi].name)
        for fi, path in paths.items():  # every file this client reads is there and large enough, before timing
            if not f.written_files[fi] and f.read_files[fi]:
                _check_size(c.driver, path, int(f.extent[fi]), trace.files[fi].name)
        # a file the trace both writes and reads was there when it was recorded: client 0 lays it out in the cell's
        # directory at the size its reads need (untimed; the barrier after prepare makes it there for everyone)
        both = np.flatnonzero(f.written_files & f.read_files).tolist()
        if c.rank == 0:
            for fi in both:
                _write_file(c.driver, join(c.cell_dir, _written_name(fi)), int(f.extent[fi]), fi, p.random_seed)
        c.state.update(plans=plans, paths=paths, native=native, coalesce=coalesce, preadv=preadv,
                       buffers=[_Buffers(plan, c.rank * 100_003 + plan.index, p.random_seed) for plan in plans])

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """Start cold, as the recorded job did: the page cache of the files read cleared (unless --keep-cache)."""
        f = self.p.facts()
        read = [path for fi, path in c.state["paths"].items() if f.read_files[fi] and not f.written_files[fi]]
        # collective: a client whose streams read nothing takes part too (skipping it once stranded its peer at
        # a barrier for the whole phase timeout)
        cache = c.clear_cache(read)
        c.state["cache"] = cache if read else "none"

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p, st = self.p, c.state
        plans: list[StreamPlan] = st["plans"]
        logs = [[rec.oplog(256) for _ in KINDS] for _ in plans]
        lags = [array("q", bytes(8 * len(plan.kinds))) for plan in plans]
        done = [0] * len(plans)
        got = [[0, 0] for _ in plans]  # bytes read, written
        t0 = rec.start_ns
        open_loop = p.mode == "open"
        calls = [(lambda i=i: self._stream(c, plans[i], st["buffers"][i], logs[i], lags[i], got[i], done, i, t0,
                                           open_loop)) for i in range(len(plans))]
        run_parallel(calls)  # a failure leaves the logs unfolded: the record of a failed phase is partial anyway
        for row in logs:
            for log in row:
                log.flush()
        rec.extra["cache"] = st["cache"]
        kinds: dict[str, Any] = {}
        for k, name in enumerate(KINDS):
            hist = Histogram.merged(row[k].hist for row in logs)
            count = sum(row[k].ops for row in logs)
            if not count:
                continue
            entry: dict[str, Any] = {"count": count, "bytes": sum(row[k].bytes for row in logs), "hist": hist.to_dict()}
            if open_loop:
                lag = Histogram()
                for plan, arr, n in zip(plans, lags, done):
                    if n:
                        a = np.frombuffer(arr, dtype=np.int64, count=n)
                        mask = np.fromiter(plan.kinds[:n], dtype=np.uint8, count=n) == k
                        lag.record_many(np.maximum(a[mask], 0))
                entry["lag"] = lag.to_dict()
            kinds[name] = entry
        rec.extra["replay"] = {
            "kinds": kinds, "bytes_read": sum(g[0] for g in got), "bytes_written": sum(g[1] for g in got),
            "trace_bytes_read": sum(pl.trace_read for pl in plans),
            "trace_bytes_written": sum(pl.trace_written for pl in plans),
            "readv_requests": sum(pl.requests for pl in plans), "readv_elements": sum(pl.elements for pl in plans),
            "coalesced": sum(pl.coalesced for pl in plans) if st["coalesce"] is not None else None,
            "coalesce": st["coalesce"],
            "vector": "native" if st["native"] else "split", "streams": len(plans),
            "implicit_opens": sum(pl.implicit_opens for pl in plans),
            "implicit_closes": sum(pl.implicit_closes for pl in plans),
            "unmatched_closes": sum(pl.unmatched_closes for pl in plans),
            "mode": p.mode, "speed": p.speed, "trace_seconds": trace_seconds(p.facts().trace),
            "notes": list(p.facts().trace.notes)}
        if st["cache"] in ("not-cleared", "kept"):
            why = "kept (--keep-cache)" if st["cache"] == "kept" else "not cleared"
            c.warn(rec, "page-cache", f"the page cache was {why} before the replay: reads may be served from memory")

    def _stream(self, c: ClientContext, plan: StreamPlan, bufs: _Buffers, logs: list, lag: array, got: list,
                done: list, slot: int, t0: int, open_loop: bool) -> None:
        """The hot loop of one stream: wait for the scheduled start (open-loop), do the operation, time it."""
        driver, paths = c.driver, c.state["paths"]
        native, preadv = c.state["native"], c.state["preadv"]
        pc, sleep = time.perf_counter_ns, time.sleep
        kinds, files, offsets, lengths, dues, ranges = (plan.kinds, plan.files, plan.offsets, plan.lengths,
                                                        plan.due, plan.ranges)
        views, wviews = bufs.views, bufs.wviews
        add, tags, tag_view = bufs.stamp
        stacks: dict[int, list] = {fi: [] for fi in plan.modes}
        readers: dict[int, Any] = {}
        writers: dict[int, Any] = {}
        handles: dict[int, Any] = {}
        nread = nwritten = 0
        progress, beat = logs[0].progress, logs[0].slot + P_BEAT
        i = 0
        try:
            for i in range(len(kinds)):
                k, fi = kinds[i], files[i]
                if k == WRITE:
                    add(tags, offsets[i], out=tag_view)  # outside the timing: no two blocks alike
                if open_loop:
                    due = t0 + dues[i]
                    now = pc()
                    if now < due:
                        if due - now <= BEAT_NS:
                            sleep((due - now) * 1e-9)
                        else:  # an idle gap of the trace: waiting for it is not a hang
                            _wait_beating(due, progress, beat)
                        if due - now >= IDLE_NS:  # nor a stall of the target: the pause counts from the due time
                            for row in logs:
                                row.worked(due)
                    start = pc()
                    lag[i] = start - due
                else:
                    start = pc()
                n = 0
                if k == READ:
                    if lengths[i]:
                        n = readers[fi](views[lengths[i]], offsets[i])
                        nread += n
                elif k == READV:
                    if native:
                        n = sum(map(len, preadv(handles[fi], ranges[i])))
                    else:
                        read = readers[fi]
                        for off, ln in ranges[i]:
                            if ln:
                                n += read(views[ln], off)
                    nread += n
                elif k == WRITE:
                    n = writers[fi](wviews[lengths[i]], offsets[i])
                    nwritten += n
                elif k == OPEN:
                    h = driver.open(paths[fi], plan.modes[fi])
                    stacks[fi].append(h)
                    handles[fi] = h
                    if h.mode != "w":
                        readers[fi] = driver.reader(h, into_buffer=False)
                    if h.mode != "r":
                        writers[fi] = driver.writer(h)
                else:  # CLOSE
                    stack = stacks[fi]
                    driver.close(stack.pop())
                    if stack:
                        h = handles[fi] = stack[-1]
                        if h.mode != "w":
                            readers[fi] = driver.reader(h, into_buffer=False)
                        if h.mode != "r":
                            writers[fi] = driver.writer(h)
                logs[k].add(start, pc(), n)
            i = len(kinds)
        finally:
            done[slot] = i
            got[0], got[1] = nread, nwritten
            for stack in stacks.values():  # after a failure: nothing left open
                while stack:
                    try:
                        driver.close(stack.pop())
                    except Exception:  # noqa: BLE001 - the failure that stopped the stream is what is reported
                        pass

    def cleanup(self, c: ClientContext) -> None:
        f = self.p.facts()
        for fi, path in c.state.get("paths", {}).items():
            if f.written_files[fi]:
                c.driver.remove_quietly(path)
        if c.rank == 0:  # and those it laid out for the others
            for fi in np.flatnonzero(f.written_files & f.read_files).tolist():
                c.driver.remove_quietly(join(c.cell_dir, _written_name(fi)))

    # -- figures -------------------------------------------------------------------------------------------
    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        r = dict(extra.get("replay") or {})
        if r:
            r["seconds"] = seconds
            r["equal"] = (r.get("bytes_read") == r.get("trace_bytes_read")
                          and r.get("bytes_written") == r.get("trace_bytes_written"))
        return r

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """Sums over clients, per-kind latency and lag percentiles from the merged histograms, fidelity, and the
        ``replay-bytes`` flag when a client moved other bytes than its streams' trace says."""
        clients = [c for c in clients if c]
        if not clients:
            return {}

        def total(key: str) -> int:
            return int(sum(c.get(key) or 0 for c in clients))

        out: dict[str, Any] = {}
        read, written = total("bytes_read"), total("bytes_written")
        out.update(bytes_read=read, bytes_written=written, trace_bytes_read=total("trace_bytes_read"),
                   trace_bytes_written=total("trace_bytes_written"),
                   bytes_equal=int(all(c.get("equal") for c in clients)),
                   readv_requests=total("readv_requests"), readv_elements=total("readv_elements"),
                   implicit_opens=total("implicit_opens"), implicit_closes=total("implicit_closes"),
                   MBps=(read + written) / 1e6 / seconds if seconds else None,
                   read_MBps=read / 1e6 / seconds if seconds and read else None,
                   write_MBps=written / 1e6 / seconds if seconds and written else None)
        vector = sorted({c.get("vector") for c in clients if c.get("vector")})
        out["vector"] = "/".join(vector)
        out["vector_native"] = int(vector == ["native"])
        if any(c.get("coalesced") is not None for c in clients):
            out["coalesced_requests"] = total("coalesced")
        gaps = [c["coalesce"] for c in clients if c.get("coalesce") is not None]
        if gaps:
            out["vector_coalesce"] = max(gaps)
        lag_all = Histogram()
        open_loop = any(c.get("mode") == "open" for c in clients)
        for name in KINDS:
            entries = [c["kinds"][name] for c in clients if name in (c.get("kinds") or {})]
            if not entries:
                continue
            hist = Histogram.merged(Histogram.from_dict(e["hist"]) for e in entries)
            p50, p99 = hist.percentiles([50, 99])
            out[f"{name}_count"] = sum(e["count"] for e in entries)
            out[f"{name}_bytes"] = sum(e["bytes"] for e in entries)
            out[f"{name}_p50_ms"] = p50 / 1e6 if p50 is not None else None
            out[f"{name}_p99_ms"] = p99 / 1e6 if p99 is not None else None
            if open_loop:
                lag = Histogram.merged(Histogram.from_dict(e["lag"]) for e in entries if "lag" in e)
                lag_all.merge(lag)
                q = lag.percentiles([99])[0]
                out.setdefault("lag_by_kind", {})[f"{name}_p99_ms"] = q / 1e6 if q is not None else None
        if open_loop and lag_all.total:
            p50, p99 = lag_all.percentiles([50, 99])
            out.update(lag_p50_ms=p50 / 1e6, lag_p99_ms=p99 / 1e6, lag_max_ms=lag_all.max / 1e6)
        speed = clients[0].get("speed") or 1.0
        recorded = clients[0].get("trace_seconds") or 0.0
        out["trace_seconds"] = recorded
        out["expected_seconds"] = recorded / speed
        out["fidelity"] = seconds / (recorded / speed) if recorded and seconds else None
        notes = []
        for c in clients:
            notes += [n for n in c.get("notes") or () if n not in notes]
        if out["implicit_opens"]:
            notes.append(f"{plural(out['implicit_opens'], 'open')} and {plural(out['implicit_closes'], 'close')} the "
                         "trace did not "
                         "have: files opened at their first use in a stream and closed at its end")
        if notes:
            out["notes"] = notes
        flags = out.setdefault("flags", [])
        asked = out["trace_bytes_read"] or out["trace_bytes_written"]  # moved is known for read- or write-only
        if moved is not None and asked:
            out["moved_bytes"] = moved
            out["moved_vs_trace"] = moved / asked
            if moved > asked * (1 + MOVED_TOLERANCE):
                flags.append({"code": "replay-moved", "message": _moved_text(out, moved, asked)})
        if not out["bytes_equal"]:
            flags.append({"code": "replay-bytes", "message": (
                f"the replay read {read:,} and wrote {written:,} bytes; the trace's streams read "
                f"{out['trace_bytes_read']:,} and wrote {out['trace_bytes_written']:,} (short reads: a file smaller "
                "than the trace's reads, or an operation that failed)")})
        if not flags:
            del out["flags"]
        return out


def _wait_beating(due: int, progress: Any, beat: int) -> None:
    """Sleep until ``due`` (perf_counter ns) in slices of at most BEAT_NS, keeping the client's heartbeat (the
    progress slot the engine's hang detection reads) between them: a scheduled wait is not a hung client."""
    pc = time.perf_counter_ns
    while (left := due - pc()) > 0:
        time.sleep(min(left, BEAT_NS) * 1e-9)
        if progress is not None:
            progress[beat] = time.monotonic_ns()


def _moved_text(out: dict[str, Any], moved: float, asked: int) -> str:
    """Why the target moved more than the trace's bytes, and what to do about it."""
    head = (f"the target moved {moved:,.0f} bytes for the trace's {asked:,} ({moved / asked:.2f}×): the replay did "
            "not make the server do what the original did")
    gap, gets = out.get("vector_coalesce"), out.get("coalesced_requests")
    if gap and gets is not None and gets < out["readv_elements"]:
        return (f"{head} — its {out['readv_elements']:,} vector-read ranges went as {gets:,} coalesced ranged GETs "
                f"(vector: coalesced, the target's vector_coalesce {format_size(gap)}), which read the gaps between "
                "them too; replay with vector: native (one GET per range) or vector: split")
    return (f"{head} — read-ahead or a block larger than the trace's reads on the target, or other traffic in the "
            "counted source (see 'bytes moved counted at')")


def trace_seconds(trace: Trace) -> float:
    """The recorded duration: first to last start, plus one interval of a coarse resolution (the last second of
    an XRootD log is a whole second of operations)."""
    res = trace.resolution or 0.0
    return trace.duration() + (res if res >= 1e-3 else 0.0)


class _Buffers:
    """A stream's preallocated buffers: one read buffer and one stamped write buffer of its largest operation,
    and a view of each length it uses (one list per length, the form ``reader``/``writer`` take), made once."""

    def __init__(self, plan: StreamPlan, writer: int, seed: int) -> None:
        size = max(plan.largest, 1)
        self.rbuf = aligned_buffer(size)
        wsize = max((ln for k, ln in zip(plan.kinds, plan.lengths) if k == WRITE), default=0)
        wsize = -(-max(wsize, 8) // SECTOR) * SECTOR
        self.payload = Payload(wsize, writer, seed)
        self.wbuf, self.stamp = self.payload.write_buffer()
        lengths = {ln for k, ln in zip(plan.kinds, plan.lengths) if k == READ}
        lengths.update(ln for r in plan.ranges if r is not None for _, ln in r)
        self.views = {ln: [self.rbuf[:ln]] for ln in lengths}
        self.wviews = {ln: [self.wbuf[:ln]] for k, ln in zip(plan.kinds, plan.lengths) if k == WRITE}


# -- laying out and checking files ----------------------------------------------------------------------------
def _data_name(index: int) -> str:
    return f"file-{index:06d}"


def _written_name(index: int) -> str:
    return f"{WRITTEN_PREFIX}{index:06d}"


def _trace_name(trace: Trace, data_name: str) -> str:
    return trace.files[int(data_name.split("-")[1])].name


def _layout_size(trace: Trace, facts: Facts, index: int) -> int:
    """What a laid-out file holds: the size the trace states, or the end of its furthest read."""
    tf = trace.files[index]
    return int(max(facts.extent[index], tf.size if tf.size_known else 0))


def _check_size(driver: Driver, path: str | None, need: int, name: str) -> None:
    if path is None:
        raise InputError(f"trace file {name} matches no map prefix (add one to map:)")
    if not driver.caps.keeps_data:  # null://: nothing is kept, and every read returns what it asked for
        return
    try:
        size = driver.stat(path).size
    except FileNotFoundError:
        raise InputError(f"trace file {name}: {driver.url}/{path} does not exist (map it onto a file that does, or "
                         "use files: create)") from None
    if size < need:
        raise InputError(f"trace file {name}: {driver.url}/{path} holds {size:,} bytes but the trace reads up to "
                         f"byte {need:,} (map it onto a larger file, or use files: create)")


def _write_file(driver: Driver, path: str, size: int, index: int, seed: int) -> None:
    """A file of ``size`` bytes of storeval's stamped random payload, front to back, made durable."""
    payload = Payload(LAYOUT_CHUNK, index, seed)
    buf, (add, tags, view) = payload.write_buffer()
    h = driver.open(path, "w")
    try:
        write = driver.writer(h)
        for offset in range(0, size, LAYOUT_CHUNK):
            add(tags, offset, out=view)
            n = min(LAYOUT_CHUNK, size - offset)
            write([buf[:n]], offset)
        driver.fsync(h)
    finally:
        driver.close(h)


def _put_json(driver: Driver, path: str, data: dict[str, Any]) -> None:
    driver.put(path, json.dumps(data, indent=1).encode())


__all__ = ["Replay", "ReplayParams", "plan_stream", "facts_of", "trace_seconds"]
