"""Third-party copy: files copied between two servers without the data passing through the client — WLCG's
HTTP-TPC and XRootD TPC, as FTS and gfal2 drive them between sites.

The cell's target is the destination; ``source`` names another target of the study, where each client first
lays out its own ``files`` files of ``file_size`` random bytes (untimed, their adler32 computed as they are
written). In the timed phase ``copy`` each client asks for its copies one after the other: ``pull`` sends the
request to the destination (HTTP ``COPY`` with ``Source``; XRootD's rendezvous, the destination's server pulling)
and ``push`` to the source (HTTP ``COPY`` with ``Destination``). A copy is timed from the request to the
server's word that it ended (``success``/``failure`` of HTTP-TPC, the answer to XRootD's second ``sync``);
concurrency is the number of clients. Both ends must speak the same protocol (``davs://``/``https://`` on both
ends, or ``root://`` on both); the other end's bearer token goes with the request as HTTP-TPC's
``TransferHeaderAuthorization``, never through the data path.

Figures: the aggregate (all bytes copied / the phase's span), each copy's own rate, the time to first byte
(the first stat of the destination that shows bytes, every ``poll``: the request's start to that stat's end —
an upper bound by one poll and one stat; a copy that ended before a stat saw anything counts as unseen, not
as a time), the failed copies (the phase goes on; it fails only when every copy of a client failed), and the
bytes the client host's interfaces towards both servers moved during the phase (from the host leader's
counters, as a share of the bytes copied: near zero for a copy that is really third-party; ``lo`` also carries
servers' own traffic, so a server on 127.0.0.1 is said to share it).

After the phase (untimed) every destination file is verified: its adler32 from the destination's server
against the source server's and the one computed when it was written (``verify``); a mismatch or an
unanswered checksum is the phase's ``data-lost`` flag, as a fault's read-back (``written_check``).
"""

from __future__ import annotations

import statistics
import threading
import time
import zlib
from typing import Any, Literal

import numpy as np
from pydantic import model_validator

from ..core.oplog import PhaseRecorder
from ..drivers.base import Capabilities, Driver, join
from ..errors import StorevalError, error_kind, one_line
from ..fields import Duration, Size
from ..probes.topology import interface_for_host
from ..units import format_size
from .base import MB_PER_MIB, Best, ClientContext, Figure, Need, Needs, Params, Report, Scaling, Workload, param

PHASES = ("copy",)
LAYOUT_PIECE = 8 << 20  # bytes written at a time when laying out the source files
THROUGH_CLIENT = 0.5  # a phase whose client interfaces moved this share of the bytes copied is flagged
MB = 1e6


class TpcParams(Params):
    source: str = param(..., "the study's target the files are copied from (the cell's target receives them); both "
                             "speak the same protocol: davs:// (HTTP-TPC) or root://", "target")
    file_size: Size = param(64 << 20, "bytes of each file copied")
    files: int = param(4, "files each client copies, one after the other")
    mode: Literal["pull", "push"] = param(
        "pull", "pull: the destination's server fetches (HTTP COPY with Source; XRootD's TPC); push: the source's "
                "server sends (HTTP COPY with Destination; HTTP only)")
    verify: bool = param(True, "after the phase, each copy's adler32 from the destination's server against the "
                               "source server's and the one computed when it was written")
    poll: Duration = param(0.05, "how often the destination of a running copy is stat'ed for its time to first byte "
                                 "(0: not measured)")
    copy_timeout: Duration = param(600.0, "the longest one copy may take")
    random_seed: int = param(0, "seed of the files' random bytes", "seed")

    @model_validator(mode="after")
    def _consistent(self) -> TpcParams:
        if self.file_size <= 0:
            raise ValueError("file_size must be more than 0 bytes")
        if self.files < 1:
            raise ValueError("files must be at least 1")
        if self.copy_timeout <= 0:
            raise ValueError("copy_timeout must be more than 0 s")
        if self.poll < 0:
            raise ValueError("poll must be 0 (off) or more")
        if self.record:
            raise ValueError("record: true cannot record third-party copies: the servers move the data, not storeval's "
                             "driver, so nothing would be recorded (drop record)")
        return self


def _route_devices(urls: list[str]) -> list[str]:
    """The interfaces this host (its network namespace) reaches the servers of ``urls`` through."""
    from urllib.parse import urlsplit

    devices: list[str] = []
    for url in urls:
        dev = interface_for_host(urlsplit(url).hostname or "")
        if dev and dev not in devices:
            devices.append(dev)
    return devices


def _checksum_again_once(driver: Driver, path: str) -> str:
    """The destination's adler32 of ``path``; a server that did not answer once (a busy host, a connection it
    dropped) is asked once more before the file counts as unreadable, so one slow answer does not make every
    file after it unreadable too (``Driver.check_server``)."""
    try:
        return driver.checksum(path, "adler32")
    except (OSError, StorevalError):
        if driver.down is None:
            raise
        driver.retry_server()
        return driver.checksum(path, "adler32")


class FirstByte:
    """Watches the destination of the running copy for its first bytes: one stat every ``every`` seconds from a
    thread of its own (the client's thread is waiting for the server's answer meanwhile). A stat that fails
    says nothing of the copy: it never leaves the driver marked down (``Driver.check_server``) for the copies
    and the verification that follow."""

    def __init__(self, driver: Driver, every: float) -> None:
        self.driver, self.every = driver, every
        self.cv = threading.Condition()
        self.path: str | None = None
        self.t0 = 0
        self.seen: int | None = None
        self.closed = False
        self.busy = False  # a stat in flight
        self.thread = threading.Thread(target=self._run, name="tpc-first-byte", daemon=True)
        self.thread.start()

    def watch(self, path: str, t0: int) -> None:
        with self.cv:
            self.path, self.t0, self.seen = path, t0, None
            self.cv.notify()

    def stop(self) -> int | None:
        """Stop watching; ns from the copy's start to the stat that first saw bytes (None: none did). Waits for
        a stat in flight, so the driver is never used by the watcher once the copy is over."""
        with self.cv:
            self.path = None
            while self.busy:
                self.cv.wait()
            return self.seen

    def close(self) -> None:
        with self.cv:
            self.closed = True
            self.cv.notify()
        self.thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            with self.cv:
                while (self.path is None or self.seen is not None) and not self.closed:
                    self.cv.wait()
                if self.closed:
                    return
                path, self.busy = self.path, True
            down = self.driver.down
            try:
                size = self.driver.stat(path).size
            except Exception:  # noqa: BLE001 - not there yet, or the server is busy: the next stat tells
                size = 0
                self.driver.down = down
            now = time.perf_counter_ns()
            with self.cv:
                self.busy = False
                self.cv.notify_all()
                if size > 0 and self.path == path and self.seen is None:
                    self.seen = now - self.t0
                    continue
                self.cv.wait(self.every)


class Tpc(Workload):
    kind = "tpc"
    Params = TpcParams
    PHASES = PHASES
    target_params = ("source",)  # parameters naming another target of the study (the runner connects them)
    summary = "third-party copies between two servers, HTTP-TPC or XRootD TPC (WLCG's FTS transfers)"
    report = Report(
        columns=(Figure("MB/s", "MB/s", caption="aggregate: all bytes copied / the phase's span",
                        value=lambda r: r.bandwidth, scale=MB_PER_MIB),
                 Figure("per copy MB/s", "MB/s", caption="each copy's own rate, mean",
                        value=lambda r: r.extras.get("copy_MBps")),
                 Figure("first byte ms", "ms", direction="time", caption="request → a stat sees bytes, median",
                        value=lambda r: r.extras.get("first_byte_ms"), higher_is_better=False),
                 Figure("failed", "copies", direction="cost", higher_is_better=False),
                 Figure("via client", "%", direction="share", share=True, higher_is_better=False,
                        caption="bytes the client host's interfaces moved / bytes copied",
                        value=lambda r: r.extras.get("via_client"))),
        how_measured=("a copy is timed from its request to the server's word that it ended (HTTP-TPC's success or "
                      "failure line, XRootD's second sync); MB/s (10^6 B): aggregate = bytes copied by all clients / "
                      "(last end − first start), per copy = its bytes / its own time; first byte: the first stat of "
                      "the destination (every poll) that shows bytes, an upper bound by one poll and one stat; "
                      "via client: rx + tx of the client host's interfaces towards both servers during the phase / "
                      "bytes copied; bytes are counted as copies the servers said succeeded, each verified by "
                      "adler32 after the phase."),
        write=Best(lambda r: r.bandwidth, ("copy",), unit="MB/s", scale=MB_PER_MIB, caption="copy"),
        rate=Best(lambda r: r.ops_per_s, ("copy",), unit="copies/s"),
        scaling=Scaling(figure="MBps", unit="MB/s", peak=True,
                        aggregate=lambda ph: None if ph.bandwidth_MiBps is None else ph.bandwidth_MiBps * MB_PER_MIB,
                        per_client=lambda ph: None if ph.client_MiBps[0] is None else ph.client_MiBps[0] * MB_PER_MIB))
    p: TpcParams

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        from ..units import format_size_compact

        p = {k: v for k, v in params.items() if k not in exclude}
        parts = [({"mode"}, f"{p.get('mode', 'pull')} from {p.get('source')}"),
                 ({"files", "file_size"}, f"{p.get('files')} × {format_size_compact(p.get('file_size', 0))} per client"),
                 ({"verify"}, "adler32 verified" if p.get("verify", True) else "not verified")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        return "write"  # the bytes land on the destination (its server's writes count them)

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        return nclients * self.p.files * self.p.file_size, nclients * self.p.files

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """One piece of the layout per client; every client's copies on the destination (and as much on the
        source, which the cell's target does not hold)."""
        p = self.p
        piece = min(LAYOUT_PIECE, p.file_size)
        return Needs(memory=(Need(2 * piece, f"2 layout buffers of {format_size(piece)}", "lower file_size"),),
                     scratch=(Need(nclients * p.files * p.file_size,
                                   f"{nclients:,} × {p.files} files × {format_size(p.file_size)}",
                                   "lower files, file_size or --clients"),),
                     entries=nclients * p.files, largest_buffer=piece, extent=p.file_size, threads=2)

    @staticmethod
    def _name(kind: str, rank: int, i: int) -> str:
        return f"tpc{'-src' if kind == 'source' else ''}.{rank}.{i}"

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        """Called for the destination and for the source: the names of both ends, each removed where it is."""
        for k in range(nclients):
            for i in range(self.p.files):
                for kind in ("source", "destination"):
                    driver.remove_quietly(join(cell_dir, self._name(kind, k, i)))

    # -- client side ------------------------------------------------------------------------------------------
    def _check_ends(self, dest: Driver, src: Driver) -> None:
        p = self.p
        for end in (dest, src):
            if end.tpc_family is None:
                raise end.no_tpc()
        if dest.tpc_family != src.tpc_family:
            raise StorevalError(f"{dest.label} ({dest.scheme}://) and source {src.label} ({src.scheme}://) speak "
                                "different protocols; a third-party copy needs davs:// (HTTP-TPC) or root:// on both")
        asked = dest if p.mode == "pull" else src
        if p.mode not in asked.tpc_modes:
            raise StorevalError(f"{asked.label}: {asked.scheme}:// copies by {', '.join(asked.tpc_modes)} only, not "
                                f"{p.mode} (set mode: {asked.tpc_modes[0]})")

    def prepare(self, c: ClientContext) -> None:
        p = self.p
        src = c.peer_driver("source")
        self._check_ends(c.driver, src)
        piece = min(LAYOUT_PIECE, p.file_size)
        buf = np.empty(piece, np.uint8)
        sums = []
        for i in range(p.files):
            rng = np.random.default_rng([p.random_seed, c.seed, c.rank, i])
            path = join(c.cell_dir, self._name("source", c.rank, i))
            h = src.open(path, "w")
            write = src.writer(h)
            adler = 1
            try:
                for off in range(0, p.file_size, piece):
                    n = min(piece, p.file_size - off)
                    view = buf[:n]
                    view[:] = np.frombuffer(rng.bytes(n), np.uint8)
                    adler = zlib.adler32(view, adler)
                    if write([view], off) != n:
                        raise StorevalError(f"laying out {path} on {src.label}: a short write at offset {off}")
            finally:
                src.close(h)
            sums.append(f"{adler:08x}")
        c.state["sums"] = sums
        c.state["devices"] = _route_devices([src.tpc_url(""), c.driver.tpc_url("")])
        c.state["watch"] = FirstByte(c.driver, p.poll) if p.poll > 0 else None

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p = self.p
        src = c.peer_driver("source")
        dest = c.driver
        watch: FirstByte | None = c.state["watch"]
        log = rec.oplog(1)  # a copy takes long: each is folded at once, so progress (and a fault's at: N%) sees it
        clock = time.perf_counter_ns
        done, seconds, first, failures = [], [], [], 0
        kinds: dict[str, int] = {}
        problem = None
        for i in range(p.files):
            s_path = join(c.cell_dir, self._name("source", c.rank, i))
            d_path = join(c.cell_dir, self._name("destination", c.rank, i))
            if failures:  # after a failed copy each server is asked again: it may be back (FTS tries the next)
                dest.retry_server()
                src.retry_server()
            t0 = clock()
            if watch is not None:
                watch.watch(d_path, t0)
            try:
                if p.mode == "pull":
                    dest.third_party_copy(d_path, src.tpc_url(s_path), "pull", p.copy_timeout, src.tpc_headers())
                else:
                    src.third_party_copy(s_path, dest.tpc_url(d_path), "push", p.copy_timeout, dest.tpc_headers())
            except (OSError, StorevalError) as e:
                # counted as failed copies, not as the phase's errors: those say an operation was retried and the
                # figure includes it (sanity.stalls); a failed copy is left out of the figures instead
                if watch is not None:
                    watch.stop()
                failures += 1
                kinds[error_kind(e)] = kinds.get(error_kind(e), 0) + 1
                problem = problem or f"{d_path}: {one_line(e)}"
                continue
            t1 = clock()
            seen = watch.stop() if watch is not None else None
            log.add(t0, t1, p.file_size)
            done.append(i)
            seconds.append((t1 - t0) / 1e9)
            first.append(None if seen is None or seen > t1 - t0 else seen / 1e6)
        log.flush()
        c.state["done"] = done
        rec.extra["tpc"] = {"copies": len(done), "failed": failures, "copy_s": seconds, "first_byte_ms": first,
                            "file_size": p.file_size, "devices": c.state["devices"],
                            **({"failed_by_kind": kinds, "first_problem": problem} if problem else {})}
        if not done:
            raise StorevalError(f"every copy of client {c.rank} failed (first: {problem})")
        if failures:
            shown = ", ".join(f"{k}×{n}" for k, n in sorted(kinds.items()))
            c.warn(rec, "copies-failed", f"{failures} of {p.files} copies of client {c.rank} failed ({shown}; first: "
                                         f"{problem})")

    def check_after(self, c: ClientContext, phase: str) -> dict[str, Any] | None:
        """Each copy's adler32 as the destination's server computes it, against the source server's and the one
        computed when the file was written (untimed, after the phase)."""
        p = self.p
        if not p.verify:
            return None
        src = c.peer_driver("source")
        for driver in (c.driver, src):
            driver.retry_server()  # a server a fault stopped may be back since the phase ended
        out = {"bytes_checked": 0, "bytes_intact": 0, "bytes_corrupted": 0, "bytes_unreadable": 0,
               "files_verified": 0, "source_unanswered": 0}
        first = None
        for i in c.state.get("done", []):
            d_path = join(c.cell_dir, self._name("destination", c.rank, i))
            written = c.state["sums"][i]
            out["bytes_checked"] += p.file_size
            try:
                got = _checksum_again_once(c.driver, d_path)
            except (OSError, StorevalError) as e:
                out["bytes_unreadable"] += p.file_size
                first = first or f"{d_path}: {one_line(e)}"
                continue
            try:  # the source's own word: a second witness, not needed to prove the copy (the sum as written is)
                at_source: str | None = src.checksum(join(c.cell_dir, self._name("source", c.rank, i)), "adler32")
            except (OSError, StorevalError):
                at_source = None
                out["source_unanswered"] += 1
            if got == written and at_source in (None, written):
                out["bytes_intact"] += p.file_size
                out["files_verified"] += 1
            else:
                out["bytes_corrupted"] += p.file_size
                first = first or (f"{d_path}: adler32 {got} at the destination, {at_source or 'no answer'} at the "
                                  f"source, {written} as written")
        return {**out, **({"first_problem": first} if first else {})}

    def cleanup(self, c: ClientContext) -> None:
        watch = c.state.pop("watch", None)
        if watch is not None:
            watch.close()
        try:
            src = c.peer_driver("source")
        except Exception:  # noqa: BLE001 - never connected: nothing of this client is there
            src = None
        for i in range(self.p.files):
            c.driver.remove_quietly(join(c.cell_dir, self._name("destination", c.rank, i)))
            if src is not None:
                src.remove_quietly(join(c.cell_dir, self._name("source", c.rank, i)))

    # -- figures ---------------------------------------------------------------------------------------------
    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        t = extra.get("tpc") or {}
        net = (extra.get("probes") or {}).get("net") or {}
        devices = t.get("devices") or []
        counted = [d for d in devices if d in net]
        out: dict[str, Any] = {"copies": t.get("copies", 0), "failed": t.get("failed", 0),
                               "bytes_copied": t.get("copies", 0) * t.get("file_size", 0),
                               "copy_MBps": [t["file_size"] / s / MB for s in t.get("copy_s", []) if s > 0],
                               "first_byte_ms": [v for v in t.get("first_byte_ms", []) if v is not None],
                               "first_byte_unseen": sum(1 for v in t.get("first_byte_ms", []) if v is None)}
        if counted:  # only the host leader's record carries the host's counters
            out["client_net_bytes"] = sum(net[d].get("rx_bytes", 0) + net[d].get("tx_bytes", 0) for d in counted)
            out["devices"] = counted
        return out

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        rates = [v for c in clients for v in c.get("copy_MBps", [])]
        firsts = [v for c in clients for v in c.get("first_byte_ms", [])]
        copied = sum(c.get("bytes_copied", 0) for c in clients)
        out: dict[str, Any] = {"copies": sum(c.get("copies", 0) for c in clients),
                               "failed": sum(c.get("failed", 0) for c in clients),
                               "copy_MBps": statistics.fmean(rates) if rates else None,
                               "first_byte_ms": statistics.median(firsts) if firsts else None,
                               "first_byte_unseen": sum(c.get("first_byte_unseen", 0) for c in clients)}
        leaders = [c for c in clients if "client_net_bytes" in c]
        if leaders and copied:
            through = sum(c["client_net_bytes"] for c in leaders)
            devices = sorted({d for c in leaders for d in c.get("devices", [])})
            out.update(client_net_bytes=through, via_client=through / copied)
            warnings = []
            if through > THROUGH_CLIENT * copied:
                shared = " (lo also carries the servers' own traffic: servers on 127.0.0.1 copy over it)" \
                    if "lo" in devices else ""
                warnings.append({"code": "through-client", "message": (
                    f"the client host's interfaces towards the servers ({', '.join(devices)}) moved "
                    f"{format_size(through)}, {through / copied:.0%} of the {format_size(copied)} copied: the data may "
                    f"have passed through the client{shared}")})
            if warnings:
                out["warnings"] = warnings
        return out


__all__ = ["Tpc", "TpcParams"]
