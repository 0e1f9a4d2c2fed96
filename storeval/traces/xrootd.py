"""The XRootD server's trace log (``xrootd.trace fs fsio request``, or ``fsio`` alone) as a trace.

What the server writes (5.5.3, measured on the testbed; ``request`` inserts the client's 4-hex-digit stream id
after ``Xrootd_Protocol:``; servers before 5.4 spell it ``XrootdProtocol:``)::

    261126 09:00:20 1525 XrootdXeq: root.2789:22@10.14.226.105 pvt IP46 login
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 req=open dlen=23
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 open rt /storeval/texp/ev0.root
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 0 fh=0 read 403@0
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 req=readv dlen=48
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 fh=0 readV 10@0
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100 0 pgread 1049576@0 fn=/storeval/f1
    261126 09:00:20 1525 root.2789:22@10.14.226.105 Xrootd_Protocol: 0100  fh=0 close rc=0
    261126 09:00:20 1525 ofs_open: root.2789:22@10.14.226.105 Unable to open /storeval/nope; no such file ...

* Streams: one per connection id (``user.pid:fd@host``); an id that logs in again after ``disc`` is a new
  stream (``id#2``). Lines of ``anon.*`` (before login) carry no I/O.
* Files: an ``open MODE /path[?cgi]`` line is answered with the lowest free handle of its connection (XRootD's
  file table), so a handle maps to the file opened on it last; ``close`` frees it; an ``ofs_open ... Unable to
  open`` line takes a failed open back. ``?oss.asize=N`` (xrdcp's uploads) states the file's size.
  ``pgread``/``pgwrite`` lines name their file (``fn=``) and carry no handle. An operation on a handle opened
  before the log began has file -1 (said in the notes).
* Vector reads: with ``request`` traced, ``req=readv dlen=N`` starts a request of N/16 elements on that
  stream id; the ``readV`` element lines that follow on it belong to it. Without ``request``, consecutive readV
  lines of one connection and handle with one timestamp are taken as one request (said in the notes).
* Lengths are what the client asked for (logged before the I/O); ``pgwrite`` lengths include one 4-byte CRC32C
  per page, which :func:`pgwrite_payload` takes off. ``pgread`` rows are reads, ``pgwrite``/``writeV`` rows
  writes. Timestamps have one-second resolution (``YYMMDD HH:MM:SS``, the server's local time).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from datetime import datetime

from . import bad, check_extent, check_int, check_name, open_text
from .model import CLOSE, OPEN, READ, READV, WRITE, Trace, TraceBuilder

PAGE = 4096  # pgread/pgwrite page size
CRC = 4  # a CRC32C per page travels with pgwrite data, and the traced length includes them
READV_ELEMENT = 16  # bytes per element in a kXR_readv request body (dlen / 16 = elements)

_LINE = re.compile(r"^(?P<date>\d{6}) (?P<time>\d\d:\d\d:\d\d) \d+ (?P<rest>.*)$")
_PROTO = re.compile(r"^(?P<conn>\S+) Xrootd_?Protocol:\s(?:(?P<sid>[0-9a-f]{4})\s)?\s*(?P<body>.*)$")
_ANY_PROTO = re.compile(r"\bXrootd_?Protocol:\s(?:[0-9a-f]{4}\s)?\s*(?P<body>.*)$")
_DATA = re.compile(r"^(?:-?\d+\s+)?(?:fh=(?P<fh>\d+)\s+)?(?P<op>readV|read|pgread|writeV|write|pgwrite)\s+"
                   r"(?:retry\s+)?(?P<len>\d+)@(?P<off>\d+)(?:\s+fn=(?P<fn>\S+))?")
_REQ = re.compile(r"^req=(?P<req>\w+) dlen=(?P<dlen>\d+)")
_OPEN = re.compile(r"^open (?P<mode>\S+) (?P<path>[^\s?]+)(?:\?(?P<cgi>\S*))?")
_CLOSE = re.compile(r"^fh=(?P<fh>\d+) close\b")
_XEQ = re.compile(r"^XrootdXeq: (?P<conn>\S+) .*\b(?P<what>login|disc)\b")
_OPEN_FAILED = re.compile(r"^ofs_open: (?P<conn>\S+) Unable to open (?P<path>[^\s;?]+)")
_ASIZE = re.compile(r"(?:^|&)oss\.asize=(?P<size>\d+)")
_KINDS = {"read": READ, "pgread": READ, "readV": READV, "write": WRITE, "pgwrite": WRITE, "writeV": WRITE}


def pgwrite_payload(offset: int, traced: int) -> int:
    """Data bytes of a pgwrite whose traced length (data plus one 4-byte CRC per page) is ``traced``.

    Pages are aligned to 4 KiB file offsets, so the first one may be short.
    """
    first = PAGE - offset % PAGE
    if traced <= first + CRC:
        return max(traced - CRC, 0)
    full, rest = divmod(traced - first - CRC, PAGE + CRC)
    return first + full * PAGE + max(rest - CRC, 0)


def data_ops(lines: Iterable[str]) -> Iterator[tuple[str, int, int]]:
    """``(op, offset, length)`` of every read, readV element, pgread, write, writeV element and pgwrite line,
    as the server names them (pgwrite lengths without their CRCs): the byte count of a log, nothing else."""
    for line in lines:
        p = _ANY_PROTO.search(line)
        d = _DATA.match(p["body"]) if p else None
        if d:
            offset, length = int(d["off"]), int(d["len"])
            yield d["op"], offset, pgwrite_payload(offset, length) if d["op"] == "pgwrite" else length


class _Conn:
    """One connection's state while the log is read: its stream, handle table, open vector reads."""

    __slots__ = ("stream", "handles", "readv", "last_readv")

    def __init__(self, stream: int):
        self.stream = stream
        self.handles: dict[int, int] = {}  # fh -> file index
        self.readv: dict[str, list[int]] = {}  # stream id -> [request id, elements left]
        self.last_readv: tuple[tuple, int] | None = None  # ((fh, time), request) of a readV line with no req=


def parse_xrootd(path: str) -> Trace:
    b = TraceBuilder("xrootd", path, 1.0)
    conns: dict[str, _Conn] = {}
    logins: dict[str, int] = {}  # connection id -> how many times it logged in
    times: dict[str, float] = {}
    unknown_handles = 0
    saw_request = saw_readv = saw_open = False

    def conn_of(name: str) -> _Conn:
        c = conns.get(name)
        if c is None:
            n = logins.get(name, 1)
            c = conns[name] = _Conn(b.stream(name if n == 1 else f"{name}#{n}"))
        return c

    with open_text(path) as f:
        for lineno, line in enumerate(f, 1):
            m = _LINE.match(line)
            if not m:
                continue
            stamp = m["date"] + m["time"]
            t = times.get(stamp)
            if t is None:
                try:
                    t = times[stamp] = datetime.strptime(stamp, "%y%m%d%H:%M:%S").timestamp()
                except ValueError:
                    raise bad(path, lineno, f"time {m['date']} {m['time']} is not a date",
                              "give the server's log as it wrote it (YYMMDD HH:MM:SS)") from None
            rest = m["rest"]
            p = _PROTO.match(rest)
            if p is None:
                x = _XEQ.match(rest)
                if x is not None:
                    name = x["conn"]
                    if x["what"] == "login":
                        if name in conns or name in logins:
                            logins[name] = logins.get(name, 1) + 1
                        conns.pop(name, None)
                        conn_of(name)
                    else:
                        conns.pop(name, None)
                    continue
                o = _OPEN_FAILED.match(rest)
                if o is not None and o["conn"] in conns:
                    c = conns[o["conn"]]
                    failed = b.file(o["path"])
                    for fh in sorted(c.handles, reverse=True):  # the open just logged got the highest new slot
                        if c.handles[fh] == failed:
                            del c.handles[fh]
                            break
                    b.drop_last(c.stream, OPEN, failed)
                continue
            name, sid, body = p["conn"], p["sid"] or "", p["body"]
            if name.startswith("anon."):
                continue
            c = conn_of(name)
            d = _DATA.match(body)
            if d is not None:
                op, offset, length = d["op"], int(d["off"]), int(d["len"])
                check_extent(path, lineno, offset, length)
                kind = _KINDS[op]
                if d["fn"]:
                    fidx = b.file(check_name(path, lineno, "file", d["fn"]))
                elif d["fh"] is not None:
                    fidx = c.handles.get(int(d["fh"]), -1)
                    unknown_handles += fidx < 0
                else:
                    fidx = -1
                    unknown_handles += 1
                if op == "pgwrite":
                    length = pgwrite_payload(offset, length)
                request = -1
                if kind == READV:
                    saw_readv = True
                    open_ = c.readv.get(sid) if sid else None
                    if open_ is not None and open_[1] > 0:
                        request = open_[0]
                        open_[1] -= 1
                    else:
                        key = (d["fh"], stamp)
                        if c.last_readv is not None and c.last_readv[0] == key:
                            request = c.last_readv[1]
                        else:
                            request = b.new_request()
                        c.last_readv = (key, request)
                        if sid:
                            b.note("a readV element line without its req=readv line: grouped with the readV "
                                   "lines of its connection, handle and second")
                else:
                    c.last_readv = None
                b.add(c.stream, t, kind, fidx, offset, length, request)
                continue
            r = _REQ.match(body)
            if r is not None:
                saw_request = True
                if r["req"] == "readv":
                    c.readv[sid] = [b.new_request(), int(r["dlen"]) // READV_ELEMENT]
                continue
            o = _OPEN.match(body)
            if o is not None:
                saw_open = True
                size = _ASIZE.search(o["cgi"] or "")
                fidx = b.file(check_name(path, lineno, "file", o["path"]),
                              check_int(path, lineno, "oss.asize", int(size["size"])) if size else None)
                fh = 0
                while fh in c.handles:
                    fh += 1
                c.handles[fh] = fidx
                c.last_readv = None
                b.add(c.stream, t, OPEN, fidx)
                continue
            cl = _CLOSE.match(body.strip())
            if cl is not None:
                fidx = c.handles.pop(int(cl["fh"]), -1)
                b.add(c.stream, t, CLOSE, fidx)
                c.last_readv = None
    if saw_readv and not saw_request:
        b.note("readV requests taken as consecutive readV lines of one connection, handle and second "
               "(trace 'request' as well to log where each vector read ends)")
    if not saw_open:
        b.note("no open lines (trace 'fs' as well): the files of handles are unknown")
    if unknown_handles:
        b.note(f"{unknown_handles} operations on handles opened before the log began: their file is unknown")
    b.note("times have one-second resolution: operations within one second keep their order, not their spacing")
    return b.build()


__all__ = ["CRC", "PAGE", "data_ops", "parse_xrootd", "pgwrite_payload"]
