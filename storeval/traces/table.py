"""storeval's own documented trace formats: CSV (a header row), JSONL (one object a line) and ``storeval`` (what
``record: true`` writes: gzip-compressed JSONL after a header line ``{"storeval_trace": 1, ...}``).

Every row is one operation: ``t`` (seconds, any origin), ``stream`` (a connection, handle or client: any name),
``op`` (open, close, read, write, readv), ``file`` (a name), ``offset`` and ``length`` (bytes; needed for read,
write and readv), ``request`` (readv only: the consecutive readv rows of one stream with the same request value
are one vector read), ``size`` (optional: the file's size, stated once is enough). A JSONL line may give a whole
vector read as ``"ranges": [[offset, length], ...]`` instead. Rows of a stream may come in any time order (they
are sorted stably), but the elements of one vector read must share their time.
"""

from __future__ import annotations

import csv
import json
import math

from . import bad, check_extent, check_int, check_name, check_time, open_text
from .model import KIND_CODES, READV, Trace, TraceBuilder

COLUMNS = ("t", "stream", "op", "file", "offset", "length", "request", "size")
REQUIRED = ("t", "stream", "op", "file")
STOREVAL_VERSION = 1


class _Rows:
    """Checks and adds one row at a time; keeps per stream the open vector read (its request value and id)."""

    def __init__(self, b: TraceBuilder, path: str):
        self.b, self.path = b, path
        self._readv: dict[int, tuple[str, int, float, int]] = {}  # stream -> (request value, id, t, file)

    def _int(self, line: int, name: str, value, need: bool) -> int:
        if value is None or value == "":
            if need:
                raise bad(self.path, line, f"no {name}", f"give {name} (bytes, an integer >= 0)")
            return 0
        try:
            if isinstance(value, bool) or isinstance(value, float):
                raise ValueError
            number = int(value)
        except (TypeError, ValueError):
            raise bad(self.path, line, f"{name} {value!r} is not a whole number", f"give {name} in bytes") from None
        if number < 0:
            raise bad(self.path, line, f"{name} {number} is negative", f"give {name} >= 0")
        return check_int(self.path, line, name, number)

    def _data(self, line: int, offset, length) -> tuple[int, int]:
        offset, length = self._int(line, "offset", offset, True), self._int(line, "length", length, True)
        check_extent(self.path, line, offset, length)
        return offset, length

    def add(self, line: int, t, stream, op, file, offset=None, length=None, request=None, size=None,
            ranges=None) -> None:
        path, b = self.path, self.b
        try:
            if isinstance(t, bool):
                raise ValueError
            t = float(t)
        except (TypeError, ValueError, OverflowError):
            raise bad(path, line, f"t {t!r} is not a number", "give t in seconds") from None
        if not math.isfinite(t):
            raise bad(path, line, f"t {t!r} is not a finite number", "give t in seconds")
        check_time(path, line, t)
        kind = KIND_CODES.get(str(op).strip().lower()) if op is not None else None
        if kind is None:
            raise bad(path, line, f"op {op!r} is unknown", "give one of open, close, read, write, readv")
        if stream is None or str(stream) == "":
            raise bad(path, line, "no stream", "name the connection, handle or client the operation came from")
        if isinstance(stream, (bool, dict, list)) or not isinstance(stream, (str, int, float)):
            raise bad(path, line, f"stream {json.dumps(stream)[:60]} is not a name",
                      "give stream as a string (or a number)")
        if file is None or str(file) == "":
            raise bad(path, line, "no file", "name the file the operation is on")
        if not isinstance(file, str):
            raise bad(path, line, f"file {json.dumps(file)[:60]} is not a name", "give file as a string")
        check_name(path, line, "file", file)
        check_name(path, line, "stream", str(stream))
        s, f = b.stream(str(stream)), b.file(str(file), self._int(line, "size", size, False) if size not in
                                                 (None, "") else None)
        if kind != READV:
            if ranges is not None:
                raise bad(path, line, f"ranges on a {op} row", "give ranges only with op readv")
            self._readv.pop(s, None)
            b.add(s, t, kind, f, *(self._data(line, offset, length) if kind >= 2 else (0, 0)))
            return
        if ranges is not None:  # one JSONL line = one whole vector read
            if not isinstance(ranges, list) or not ranges:
                raise bad(path, line, "ranges is not a non-empty list", "give ranges as [[offset, length], ...]")
            self._readv.pop(s, None)
            rid = b.new_request()
            for r in ranges:
                if not isinstance(r, list) or len(r) != 2:
                    raise bad(path, line, f"range {r!r} is not [offset, length]",
                              "give ranges as [[offset, length], ...]")
                b.add(s, t, READV, f, *self._data(line, r[0], r[1]), rid)
            return
        if request is None or str(request) == "":
            raise bad(path, line, "a readv row without request",
                      "give the elements of one vector read the same request value (or one JSONL line with ranges)")
        if isinstance(request, (bool, dict, list)):
            raise bad(path, line, f"request {json.dumps(request)[:60]} is not a name",
                      "give request as a string or a number")
        token = str(request)
        open_ = self._readv.get(s)
        if open_ is not None and open_[0] == token:
            rid = open_[1]
            if open_[2] != t:
                raise bad(path, line, f"an element of readv request {token} at t={t} after one at t={open_[2]}",
                          "give every element of one vector read the same t")
            if open_[3] != f:
                raise bad(path, line, f"readv request {token} goes on to another file ({file!r})",
                          "a vector read is on one file: give each file's elements a request of their own")
        else:
            rid = b.new_request()
            self._readv[s] = (token, rid, t, f)
        b.add(s, t, READV, f, *self._data(line, offset, length), rid)


def parse_csv(path: str) -> Trace:
    b = TraceBuilder("csv", path, None)
    rows = _Rows(b, path)
    with open_text(path) as f:
        reader = csv.reader(f)
        header = None
        while True:
            try:
                row = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:  # a quoted field that never ends, a NUL
                raise bad(path, f.line, f"is not CSV ({exc})", "give one operation per line, fields by commas") \
                    from None
            line = reader.line_num
            if not row or not "".join(row).strip() or row[0].lstrip().startswith("#"):
                continue
            if header is None:
                header = [c.strip().lower() for c in row]
                unknown = [c for c in header if c not in COLUMNS]
                if unknown:
                    raise bad(path, line, f"unknown column {unknown[0]!r}", f"use the columns {', '.join(COLUMNS)}")
                missing = [c for c in REQUIRED if c not in header]
                if missing:
                    raise bad(path, line, f"no column {missing[0]!r} in the header",
                              f"start with a header row naming at least {', '.join(REQUIRED)}")
                continue
            if len(row) != len(header):
                raise bad(path, line, f"{len(row)} fields for {len(header)} columns",
                          "give one value per header column (empty where none)")
            rows.add(line, **{name: value.strip() for name, value in zip(header, row)})
    b.resolution = _resolution(b)
    return b.build()


def _parse_lines(b: TraceBuilder, path: str, skip_header: bool) -> None:
    rows = _Rows(b, path)
    with open_text(path) as f:
        for line, text in enumerate(f, 1):
            text = text.strip()
            if not text:
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as exc:
                raise bad(path, line, f"is not JSON ({exc.msg})", "give one JSON object per line") from None
            except RecursionError:
                raise bad(path, line, "is JSON nested too deep", "give one flat JSON object per line") from None
            except ValueError as exc:  # an integer of more digits than Python converts
                raise bad(path, line, f"is not JSON storeval reads ({str(exc)[:80]})",
                          "give numbers below 2^63") from None
            if not isinstance(obj, dict):
                raise bad(path, line, "is not a JSON object", "give one JSON object per line")
            if skip_header:
                skip_header = False
                if obj.get("storeval_trace") != STOREVAL_VERSION:
                    raise bad(path, line, f"storeval_trace {obj.get('storeval_trace')!r} is not a version this "
                              f"storeval reads", f"give a trace written by record: true (version {STOREVAL_VERSION})")
                b.header = {k: v for k, v in obj.items() if k != "storeval_trace"}
                continue
            unknown = [k for k in obj if k not in COLUMNS and k != "ranges"]
            if unknown:
                raise bad(path, line, f"unknown key {unknown[0]!r}", f"use the keys {', '.join(COLUMNS)}, ranges")
            missing = [k for k in REQUIRED if k not in obj]
            if missing:
                raise bad(path, line, f"no {missing[0]!r}", f"give at least {', '.join(REQUIRED)}")
            rows.add(line, **obj)


def parse_jsonl(path: str) -> Trace:
    b = TraceBuilder("jsonl", path, None)
    _parse_lines(b, path, skip_header=False)
    b.resolution = _resolution(b)
    return b.build()


def parse_storeval(path: str) -> Trace:
    """What ``record: true`` wrote: times in nanoseconds' resolution, one stream per client and handle."""
    b = TraceBuilder("storeval", path, 1e-9)
    _parse_lines(b, path, skip_header=True)
    dropped = b.header.get("dropped") or {}
    if any(dropped.values()) if isinstance(dropped, dict) else dropped:
        b.note(f"the recording stopped at its bound: operations not recorded per client: {dropped}")
    return b.build()


def _resolution(b: TraceBuilder) -> float:
    """CSV/JSONL times are whatever the writer gave: the resolution is taken as 1 µs (say so)."""
    b.note("CSV/JSONL times taken at 1 µs resolution")
    return 1e-6


__all__ = ["COLUMNS", "REQUIRED", "STOREVAL_VERSION", "parse_csv", "parse_jsonl", "parse_storeval"]
