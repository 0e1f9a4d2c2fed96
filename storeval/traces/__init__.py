"""Traces of real application I/O: one model (:mod:`.model`) and a parser per format.

``load_trace(path, format="auto")`` reads a trace file into a :class:`~.model.Trace`; ``auto`` tells the format
from the content (a gzip-compressed file is read through gzip whatever its format). Anything malformed is an
:class:`~storeval.errors.InputError` of one line naming the file, the line and the fix. The formats and what
each parser assumes are documented in ``docs/traces.md``.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import stat
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import InputError
from .model import (CLOSE, KINDS, MAX_SPAN, OP_DTYPE, OPEN, READ, READV, WRITE, Stream, Trace,  # noqa: F401
                    TraceBuilder, TraceFile)

FORMATS = ("xrootd", "fio", "csv", "jsonl", "storeval")
_PROBE_LINES = 200
_PROBE_CHARS = 256 << 10  # detection reads at most this much of a trace's head
MAX_LINE = 64 * 1024  # characters in one line of a trace
MAX_INT = 2**63 - 1  # offsets, lengths and sizes are int64, and so is offset + length
MAX_TIME = 1e15  # |t| of any one row (seconds, any origin: Unix times are 1.7e9)
MAX_RATIO = 200  # a gzip trace may decompress to at most this many times its compressed size ...
_RATIO_FROM = 8 << 20  # ... once more than this much has come out of it
MAX_BLANK = 1_000_000  # blank lines in a row
MAX_TEXT = 16 << 30  # characters of any trace, compressed or not
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_XROOTD_LINE = re.compile(r"^\d{6} \d\d:\d\d:\d\d \d+ ")
_XROOTD_PROTOCOL = re.compile(r"\bXrootd_?Protocol:")


def bad(path: str, line: int | None, problem: str, fix: str) -> InputError:
    """The one-line error of a malformed trace: ``trace PATH line N: PROBLEM; FIX``."""
    where = f"trace {path}" + (f" line {line}" if line is not None else "")
    return InputError(f"{where}: {problem}; {fix}")


def check_int(path: str, line: int | None, name: str, value: int) -> int:
    """``value`` (an offset, length or size in bytes) if it fits in int64, else the one-line error."""
    if value > MAX_INT:
        raise bad(path, line, f"{name} beyond 2^63-1 ({str(value)[:30]}{'...' if len(str(value)) > 30 else ''})",
                  f"give {name} in bytes below 2^63")
    return value


def check_extent(path: str, line: int | None, offset: int, length: int) -> None:
    """Offset and length of one operation, each and their sum within int64."""
    check_int(path, line, "offset", offset)
    check_int(path, line, "length", length)
    if offset + length > MAX_INT:
        raise bad(path, line, f"offset {offset} + length {length} is beyond 2^63-1",
                  "give operations that end below 2^63 bytes")


def check_time(path: str, line: int | None, t: float) -> float:
    """A row's time in seconds: finite and within ±MAX_TIME."""
    if not -MAX_TIME <= t <= MAX_TIME:  # also NaN
        raise bad(path, line, f"t {t!r} is not a finite number of seconds within ±1e15",
                  "give t in seconds (any origin)")
    return t


def check_name(path: str, line: int | None, what: str, name: str) -> str:
    """A file (or stream) name: no NUL or other control character."""
    c = _CONTROL.search(name)
    if c is not None:
        raise bad(path, line, f"{what} {name[:60]!r} holds the control character {c[0]!r}",
                  f"give {what} names without control characters")
    return name


class Lines:
    """A trace's text, line by line, bounded: a line longer than :data:`MAX_LINE`, more than :data:`MAX_BLANK`
    blank lines in a row, a gzip stream that inflates beyond :data:`MAX_RATIO` times its size or any text beyond
    :data:`MAX_TEXT` is an error, so no input can take the machine's memory or much of its time. ``line`` is the number of the last line read (blank ones count)."""

    def __init__(self, path: str, text: io.TextIOBase, raw, compressed: bool):
        self.path, self._text, self._raw, self._compressed = path, text, raw, compressed
        self.line = 0
        self.chars = 0
        self._blank = 0

    def __iter__(self) -> Lines:
        return self

    def __next__(self) -> str:
        text = self._text.readline(MAX_LINE + 1)
        if not text:
            raise StopIteration
        self.line += 1
        self.chars += len(text)
        if len(text) > MAX_LINE and not (len(text) == MAX_LINE + 1 and text.endswith("\n")):
            raise bad(self.path, self.line, f"is longer than {MAX_LINE // 1024} KiB",
                      "give a trace of one operation per line (is it a trace at all?)")
        if text.isspace():
            self._blank += 1
            if self._blank > MAX_BLANK:
                raise bad(self.path, self.line, f"more than {MAX_BLANK:,} blank lines in a row",
                          "give a trace of operations (is it a trace at all?)")
        else:
            self._blank = 0
        if self.chars > MAX_TEXT:
            raise bad(self.path, self.line, f"the trace is larger than {MAX_TEXT >> 30} GiB",
                      "split it into smaller traces")
        if self._compressed and self.chars > _RATIO_FROM and self.chars > MAX_RATIO * self._raw.tell():
            raise bad(self.path, self.line, f"decompresses to more than {MAX_RATIO} times its compressed size",
                      "give the trace uncompressed, or one that is not mostly blank or repeated")
        return text


@contextmanager
def open_text(path: str) -> Iterator[Lines]:
    """The trace as bounded text lines (:class:`Lines`), gunzipped if it starts with gzip's magic bytes."""
    if not path or "\x00" in path:
        raise bad(path.replace("\x00", "\\0"), None, "is not a file name", "give the path of a trace file")
    try:
        info = os.stat(path)
    except OSError as exc:
        raise bad(path, None, f"cannot be read ({exc.strerror})", "give the path of an existing trace file") \
            from None
    if not stat.S_ISREG(info.st_mode):
        what = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a device, pipe or socket)"
        raise bad(path, None, f"is {what}", "give the path of a trace file")
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise bad(path, None, f"cannot be read ({exc.strerror})", "give the path of an existing trace file") \
            from None
    with raw:
        try:
            compressed = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            stream = gzip.open(raw, "rb") if compressed else raw
            text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="replace", newline=None)
            yield Lines(path, text, raw, compressed)
        except (OSError, EOFError, zlib.error) as exc:  # a truncated or damaged gzip stream
            raise bad(path, None, f"is damaged ({exc})", "write the trace again") from None


def detect(path: str) -> str:
    """The format of the trace at ``path``, from its first lines."""
    with open_text(path) as f:
        lines = []
        ended = True
        for line in f:
            if line.strip():
                lines.append(line.strip())
            if len(lines) >= _PROBE_LINES or f.chars >= _PROBE_CHARS:
                ended = False
                break
    if not lines:
        if ended:
            raise bad(path, None, "is empty", "give a trace with at least one operation")
        raise bad(path, None, f"has nothing but blank lines in its first {_PROBE_CHARS >> 10} KiB",
                  "give a trace of operations")
    first = lines[0]
    if first.startswith("fio version"):
        return "fio"
    if first.startswith("{"):
        return "storeval" if '"storeval_trace"' in first else "jsonl"
    if any(_XROOTD_PROTOCOL.search(line) for line in lines) or all(_XROOTD_LINE.match(line) for line in lines[:3]):
        return "xrootd"
    header = {c.strip().lower() for c in first.split(",")}
    if {"t", "op"} <= header:
        return "csv"
    raise bad(path, 1, "is in no format storeval knows",
              f"give format: one of {', '.join(FORMATS)} (docs/traces.md shows each)")


def _parser(format: str) -> Callable[[str], Trace]:
    if format in ("csv", "jsonl", "storeval"):
        from . import table
        return {"csv": table.parse_csv, "jsonl": table.parse_jsonl, "storeval": table.parse_storeval}[format]
    if format == "xrootd":
        from .xrootd import parse_xrootd
        return parse_xrootd
    if format == "fio":
        from .fio import parse_fio
        return parse_fio
    raise InputError(f"trace format {format!r} is unknown; use auto or one of {', '.join(FORMATS)}")


def load_trace(path: str | Path, format: str = "auto") -> Trace:
    """Read the trace at ``path`` (``format``: ``auto`` or one of :data:`FORMATS`)."""
    path = str(path)
    if format == "auto":
        format = detect(path)
    trace = _parser(format)(path)
    if not trace.operations():
        raise bad(path, None, f"has no operations storeval reads as {format}",
                  "check the format (docs/traces.md) or give another trace")
    return trace


__all__ = ["CLOSE", "FORMATS", "KINDS", "OPEN", "OP_DTYPE", "READ", "READV", "WRITE", "Stream", "Trace",
           "TraceBuilder", "TraceFile", "detect", "load_trace"]
