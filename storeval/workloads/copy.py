"""Copy workload: N workers each copy a whole chunk of random data to the target or back (seed 004).

Every worker uploads ``chunk_size`` bytes (``transfer_size`` at a time: the part size of an object
upload, the write size of a file copy) to an object or file of its own, and/or downloads it again.
Worker k starts ``k * stagger`` seconds after the phase starts, as the MIT study launched its copies, so the
aggregate covers the whole staggered run while each worker's own rate covers only its own copy. The study
summary adds, per target, the number of workers at which the aggregate stops growing ("workers to peak").

Every upload ends durably inside its timed region, the same way for every worker and transfer size: fsync
before close for files (``fsync``, on by default), the PUT or multipart-complete acknowledgment for objects
(close waits for it). Where the figure may include data not yet on the storage (``fsync: false``, a driver
that can neither fsync nor commit on close) the upload is warned about (``write-back``), as bandwidth's writes.
"""

from __future__ import annotations

import time
from typing import Literal

from pydantic import model_validator

from ..drivers.base import Capabilities, Driver, join
from ..core.oplog import OpLog, PhaseRecorder, fold_cap
from ..errors import StorevalError
from ..fields import Duration, Size
from ..units import format_size
from .base import MB_PER_MIB, Best, ClientContext, Figure, Need, Needs, Params, Report, Scaling, Workload, param
from .durability import make_durable, warn_write_back
from .ops import IOFailure, run_ops
from .payload import Payload, aligned_buffer

PHASES = ("upload", "download")


class CopyParams(Params):
    chunk_size: Size = param(256 << 20, "bytes each worker copies, as one file or object (10GiB in the seed "
                                        "study); a multiple of transfer_size")
    transfer_size: Size = param(16 << 20, "bytes of one read or write: the part size of an object upload, the "
                                          "write size of a file copy")
    direction: Literal["upload", "download", "both"] = param(
        "both", "upload: to the target; download: back from it (laid out first, untimed); both: the two phases")
    stagger: Duration = param(0.1, "worker k starts k × stagger after the phase's start, as the seed study "
                                   "launched its copies")
    fsync: bool = param(True, "each upload ends with fsync before close, inside the timed region (files; an "
                              "object is durable once its upload is acknowledged)")
    random_seed: int = param(0, "seed of the payload", "seed")

    @model_validator(mode="after")
    def _consistent(self) -> CopyParams:
        if self.transfer_size <= 0 or self.chunk_size <= 0:
            raise ValueError("chunk_size and transfer_size must be more than 0 bytes")
        if self.chunk_size % self.transfer_size:
            raise ValueError(f"chunk_size {format_size(self.chunk_size)} is not a whole number of transfers of "
                             f"{format_size(self.transfer_size)} (make chunk_size a multiple of transfer_size)")
        return self


class Copy(Workload):
    kind = "copy"
    Params = CopyParams
    PHASES = PHASES
    summary = "whole-chunk uploads and downloads by staggered workers (the MIT Lustre vs S3 study)"
    report = Report(
        columns=(Figure("MB/s", "MB/s", caption="aggregate, staggered starts included", value=lambda r: r.bandwidth,
                        scale=MB_PER_MIB),
                 Figure("per worker MB/s", "MB/s", value=lambda r: r.per_client_MiBps, scale=MB_PER_MIB),
                 Figure("CPU s/GB", "CPU s/GB", direction="cost", value=lambda r: r.cpu_seconds_per_GB,
                        higher_is_better=False)),
        how_measured=("MB/s (10^6 B, as the seed study and the command workload's copy clients quote it): aggregate = "
                      "bytes of all workers / (last end − first start), staggered starts included; per worker: each "
                      "worker's bytes over its own copy time, mean over workers; CPU: client CPU seconds per GB "
                      "(10^9 B) moved."),
        read=Best(lambda r: r.bandwidth, ("download",), unit="MB/s", scale=MB_PER_MIB, caption="download"),
        write=Best(lambda r: r.bandwidth, ("upload",), unit="MB/s", scale=MB_PER_MIB, caption="upload"),
        rate=Best(lambda r: r.ops_per_s, (), unit="ops/s"),
        # workers to peak: where adding workers stops paying (the copy study's figure)
        scaling=Scaling(figure="MBps", unit="MB/s", peak=True,
                        aggregate=lambda ph: None if ph.bandwidth_MiBps is None else ph.bandwidth_MiBps * MB_PER_MIB,
                        per_client=lambda ph: None if ph.client_MiBps[0] is None else ph.client_MiBps[0] * MB_PER_MIB))
    p: CopyParams

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        from ..units import format_duration, format_size_compact

        p = {k: v for k, v in params.items() if k not in exclude}
        parts = [({"chunk_size"}, f"{format_size_compact(p.get('chunk_size', 0))} per worker"),
                 ({"transfer_size"}, f"in {format_size_compact(p.get('transfer_size', 0))} pieces"),
                 ({"stagger"}, f"worker k starts k × {format_duration(p['stagger'])} late" if p.get("stagger")
                  else "all workers start together")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)

    @classmethod
    def phases_of(cls, params: Params) -> list[str]:
        return list(PHASES) if params.direction == "both" else [params.direction]

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        return "write" if phase == "upload" else "read"

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        return nclients * self.p.chunk_size, nclients * (self.p.chunk_size // self.p.transfer_size)

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """A payload block, its write buffer and a read buffer of transfer_size per worker; every worker's chunk
        on the target."""
        p = self.p
        ts = p.transfer_size
        return Needs(memory=(Need(3 * ts, f"3 buffers of transfer_size {format_size(ts)}", "lower transfer_size"),),
                     scratch=(Need(nclients * p.chunk_size, f"{nclients:,} × chunk_size {format_size(p.chunk_size)}",
                                   "lower chunk_size or --clients"),),
                     entries=nclients, largest_buffer=ts, extent=p.chunk_size)

    def _path(self, c: ClientContext) -> str:
        return join(c.cell_dir, f"copy.{c.rank}")

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        for k in range(nclients):
            driver.remove_quietly(join(cell_dir, f"copy.{k}"))

    def prepare(self, c: ClientContext) -> None:
        p = self.p
        c.state["payload"] = Payload(p.transfer_size, c.rank, p.random_seed).write_buffer()
        c.state["read_buf"] = aligned_buffer(p.transfer_size)
        if self.phases()[0] == "download":  # the chunk must be there before it is downloaded
            self._copy(c, "upload", OpLog(time.perf_counter_ns(), fold_cap(p.transfer_size)))

    def _copy(self, c: ClientContext, phase: str, log: OpLog) -> str | None:
        """One whole copy; an upload's data made durable before it returns (how: see ``make_durable``)."""
        p = self.p
        up = phase == "upload"
        path = self._path(c)
        durable = None
        h = c.driver.open(path, "w" if up else "r")
        try:
            if up:
                buf, stamp = c.state["payload"]
                run_ops(c.driver.writer(h), [buf], range(0, p.chunk_size, p.transfer_size), log, p.transfer_size, stamp)
                durable = make_durable(c, h, p.fsync)
            else:
                run_ops(c.driver.reader(h, into_buffer=False), [c.state["read_buf"]],
                        range(0, p.chunk_size, p.transfer_size), log, p.transfer_size)
        finally:
            c.driver.close(h)
        return durable

    def before_phase(self, c: ClientContext, phase: str) -> None:
        if phase == "download":  # a download reads the storage, not what the upload left in memory
            c.state["cache"] = c.clear_cache([self._path(c)])

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        if phase == "download":
            rec.extra["cache"] = c.state["cache"]
        delay = c.rank * self.p.stagger
        if delay:
            time.sleep(delay)
            rec.start_ns = time.perf_counter_ns()  # this worker's own copy starts now
        rec.extra["stagger_s"] = delay
        log = rec.oplog(fold_cap(self.p.transfer_size))
        try:
            durable = self._copy(c, phase, log)
        except IOFailure as e:
            rec.error(e.kind)
            raise StorevalError(f"{phase} of {self._path(c)} {e}") from e
        if phase == "upload":
            warn_write_back(c, rec, phase, durable, self.p.fsync)

    def cleanup(self, c: ClientContext) -> None:
        c.driver.remove_quietly(self._path(c))
