"""An XCache's own record of what it served, for ``root://`` targets that name its disk cache (``cache_dir``,
``XrootdDriver.counter_sources``).

XrdPfc keeps, beside every cached file, a ``.cinfo`` with one access record per open of the file: the bytes it
served from its disk (``B_hit``), the bytes a client waited for from the origin (``B_miss``) and the bytes passed
through uncached (``B_bypass``). ``xrdpfc_print -j`` (xrootd-server) prints each file's records as one JSON line.
A record is written when the cache lets the file go, a moment after its last client closed it (on a busy host,
seconds after), so a snapshot waits until the cache's processes (``server_pids``) hold no file under the cache
open and the sums have stood still for a second. XrdPfc keeps only a file's latest records: those seen once
are remembered here (by file and record number), so a sum never goes down when old ones are dropped.

XrdPfc counts a request's bytes as hits when their block was already on its way (another request asked for
it): a cold read by a client with several requests in flight shows hits beside its misses, and xrdcp's shows
more hit and miss bytes than the file holds. What the origin moved is therefore counted on its own too, from
its processes (``origin_pids``: ``/proc/PID/io``, the smaller of what they read and wrote, as for any server's
read): a warm read is one where the origin moved nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from typing import Any

from ..core.reported import CounterSource, Counters

FIELDS = {"B_hit": "hit_bytes", "B_miss": "miss_bytes", "B_bypass": "bypass_bytes"}
BATCH = 256  # .cinfo files per xrdpfc_print run


def cinfo_files(root: str) -> list[str]:
    """Every ``.cinfo`` under ``root`` (the cache's ``oss.localroot``)."""
    out = []
    for top, _dirs, files in os.walk(root):
        out.extend(os.path.join(top, f) for f in files if f.endswith(".cinfo"))
    return sorted(out)


def parse_records(text: str) -> dict[tuple[str, int], dict[str, float]]:
    """(file, record number) -> its hit, miss and bypass bytes, from ``xrdpfc_print -j`` output."""
    out: dict[tuple[str, int], dict[str, float]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        doc = json.loads(line)
        for rec in doc.get("accesses") or []:
            key = (doc.get("file", ""), int(rec["record"]))
            out[key] = {name: float(rec.get(field, 0)) for field, name in FIELDS.items()}
    return out


class XcacheRecords(CounterSource):
    """The sums of an XCache's access records: hit, miss and bypass bytes."""

    option, probe, name = "cache_dir", "server_xcache", "xcache records"

    @classmethod
    def spec(cls, options: dict[str, Any]) -> dict[str, Any] | None:
        value = options.get(cls.option)
        return {"where": [str(value)], "origin_pids": [int(p) for p in options.get("origin_pids") or []],
                "cache_pids": [int(p) for p in options.get("server_pids") or []]} if value else None

    def __init__(self, spec: dict[str, Any], timeout: float) -> None:
        super().__init__(spec, timeout)
        self.seen: dict[tuple[str, int], dict[str, float]] = {}
        self.origin_pids: list[int] = list(spec.get("origin_pids") or [])
        self.cache_pids: list[int] = list(spec.get("cache_pids") or [])

    @property
    def still(self) -> float:
        return 1.0

    def pending(self) -> bool:
        """A file under the cache still open in one of its processes: its access record is not written yet."""
        roots = tuple(os.path.realpath(r).rstrip("/") + "/" for r in self.where)
        for pid in self.cache_pids:
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:  # gone, or not ours to read: nothing known to wait for
                continue
            for fd in fds:
                try:
                    if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(roots):
                        return True
                except OSError:  # closed meanwhile
                    continue
        return False

    def fetch(self) -> Counters:
        tool = shutil.which("xrdpfc_print")
        if tool is None:
            raise OSError("xrdpfc_print is not on PATH (apt-get install xrootd-server)")
        for root in self.where:
            if not os.path.isdir(root):
                raise OSError(f"{root} is not a directory (the cache's oss.localroot)")
            files = cinfo_files(root)
            for i in range(0, len(files), BATCH):
                proc = subprocess.run([tool, "-j", *files[i:i + BATCH]], capture_output=True, text=True,
                                      timeout=self.timeout)
                self.seen.update(parse_records(proc.stdout))  # a file removed meanwhile is simply not printed
        total = dict.fromkeys(FIELDS.values(), 0.0)
        for rec in self.seen.values():
            for name, value in rec.items():
                total[name] += value
        out: Counters = {"cache": total}
        if self.origin_pids:
            out["origin"] = {"read_bytes": sum(min(io["rchar"], io["wchar"]) for io in map(_proc_io, self.origin_pids))}
        return out


def _proc_io(pid: int) -> dict[str, float]:
    """``rchar`` and ``wchar`` of a process (OSError once it is gone: its counts are lost with it)."""
    with open(f"/proc/{pid}/io", encoding="ascii") as f:
        io = dict(line.split(":", 1) for line in f)
    return {"rchar": float(io["rchar"]), "wchar": float(io["wchar"])}


__all__ = ["XcacheRecords", "cinfo_files", "parse_records"]
