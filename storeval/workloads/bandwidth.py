"""Bandwidth workload: what IOZone and IOR measure.

Each client writes and reads ``file_size`` bytes in ``transfer_size`` pieces,
either in a file of its own or in one shared file (IOR without ``-F``), where
it owns a contiguous segment or, with ``block_size``, every n-th block of the
file, blocks of all clients side by side in each segment (IOR's -b and -s; a
block of one transfer interleaves the clients' records, as IO500's ior-hard). Phases run in the order of :data:`PHASES`. Open,
every transfer, the optional fsync and close are inside the timed region, as
in IOR. Random phases touch every block exactly once, in an order drawn before
the phase starts — or, with a ``distribution`` other than uniform (zipf, pareto, a hot
set), draw as many blocks as the file holds, with replacement, as fio's
random_distribution does. ``rw`` and ``randrw`` mix reads and writes of one file in
the ``mix`` ratio (fio's rwmix), each operation's direction drawn before the phase.
``rate`` or ``iops`` paces each client open-loop (fio's rate), so a background load
can be held fixed. ``iodepth`` threads per client keep that many operations in
flight (the GIL is released during ``preadv``/``pwritev``).
"""

from __future__ import annotations

import functools
import time
from array import array
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..drivers.base import Capabilities, Driver, join
from ..core.oplog import OpLog, PhaseRecorder, fold_cap
from ..core.stop import ClientStopped
from ..errors import DirectIOUnsupported, StorevalError, one_line
from ..fields import Rate
from ..units import format_size
from .base import Best, ClientContext, Duration, Figure, Need, Needs, Report, Size, Workload, param
from .degraded import Degraded, DegradedParams, PhaseErrors
from .kernel import (Engine, NEVER, PAST_END, DataJob, choose_engine, measure_mixed, pace_figures, rate_held,
                     run_parallel)
from .durability import make_durable, warn_write_back
from .ops import IOFailure, run_ops
from .payload import Payload, aligned_buffer

PHASES = ("write", "rewrite", "read", "reread", "randread", "randwrite", "rw", "randrw")
WRITES = frozenset({"write", "rewrite", "randwrite"})
READS = frozenset({"read", "reread", "randread"})
MIXED = frozenset({"rw", "randrw"})  # reads and writes of one file in the mix's ratio (fio's rw, randrw)
RANDOM = frozenset({"randread", "randwrite", "randrw"})
Phase = Literal["write", "rewrite", "read", "reread", "randread", "randwrite", "rw", "randrw"]
DISTRIBUTIONS = ("uniform", "zipf:THETA", "pareto:H", "hotset:PERCENT_OF_BLOCKS/PERCENT_OF_OPERATIONS")


class Mix(BaseModel):
    """The shares of reads and writes of a mixed phase, in percent (fio's rwmixread/rwmixwrite)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    read: Annotated[int, Field(ge=0, le=100)] = 50
    write: Annotated[int, Field(ge=0, le=100)] = 50

    @model_validator(mode="after")
    def _whole(self) -> Mix:
        if self.read + self.write != 100:
            raise ValueError(f"mix: read {self.read} and write {self.write} add up to {self.read + self.write}, not "
                             "100 (e.g. {read: 70, write: 30})")
        return self


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("nan")


def parse_distribution(text: str) -> tuple[str, float, float]:
    """``uniform``, ``zipf:THETA``, ``pareto:H`` or ``hotset:B/O`` as (kind, first, second); ValueError naming
    the forms otherwise."""
    kind, _, arg = text.partition(":")
    first, _, second = arg.partition("/")
    a, b = _number(first), _number(second)  # NaN where not a number: every range check below fails on it
    if kind == "uniform" and not arg:
        return "uniform", 0.0, 0.0
    if kind == "zipf" and a > 0 and not second:
        return "zipf", a, 0.0
    if kind == "pareto" and 0 < a < 1 and not second:
        return "pareto", a, 0.0
    if kind == "hotset" and 0 < a < 100 and 0 < b < 100:
        return "hotset", a, b
    raise ValueError(f"distribution {text!r} is not one of {', '.join(DISTRIBUTIONS)} (e.g. zipf:1.2 with theta > "
                     "0, pareto:0.9 with 0 < h < 1, hotset:10/90: 90 % of operations on 10 % of the blocks)")


def draw_blocks(rng: np.random.Generator, blocks: int, distribution: str) -> np.ndarray:
    """The block numbers a random phase visits, in order: a permutation (each block once) for ``uniform``;
    otherwise ``blocks`` draws with replacement from the distribution's ranks, the ranks scattered over the
    file by a permutation (hot blocks are not neighbours). zipf: P(rank k) ∝ 1/k^θ; pareto: fio's, rank =
    (blocks − 1) × u^(log h / log(1 − h)); hotset B/O: O % of the draws fall in B % of the blocks."""
    kind, a, b = parse_distribution(distribution)
    if kind == "uniform":
        return rng.permutation(blocks).astype(np.int64)
    place = rng.permutation(blocks).astype(np.int64)
    if kind == "zipf":
        weights = 1.0 / np.arange(1, blocks + 1, dtype=np.float64) ** a
        cdf = np.cumsum(weights)
        ranks = np.searchsorted(cdf, rng.random(blocks) * cdf[-1], side="right")
    elif kind == "pareto":
        ranks = ((blocks - 1) * rng.random(blocks) ** (np.log(a) / np.log(1 - a))).astype(np.int64)
        ranks = blocks - 1 - ranks  # the likeliest rank first, as zipf's
    else:
        hot = max(1, int(round(blocks * a / 100)))
        in_hot = rng.random(blocks) < b / 100
        ranks = np.where(in_hot, rng.integers(0, hot, blocks), rng.integers(min(hot, blocks - 1), blocks, blocks))
    return place[np.minimum(ranks, blocks - 1)]


class _Same:
    """The direction of every operation of a phase that does one kind (a paced read or write phase)."""

    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        self.kind = kind

    def __getitem__(self, j: int) -> int:
        return self.kind


class MixedLogs:
    """A stream's two logs in a mixed or paced phase (reads, writes); ``ops`` is what the stonewall counts."""

    __slots__ = ("read", "write")

    def __init__(self, read: OpLog, write: OpLog) -> None:
        self.read, self.write = read, write

    @property
    def ops(self) -> int:
        return self.read.ops + self.write.ops


def _run_mixed(logs: MixedLogs, size: int, seq: Any, dirs: Any, ops: tuple, stamp: Any, check: Any, interval: int,
               late: list[int], lo: int, hi: int, deadline_ns: int = NEVER) -> int:
    """One stream of a mixed or paced phase (the kernel's :func:`measure_mixed`)."""
    return measure_mixed((logs.read, logs.write), (size, size), seq, dirs, ops, lo=lo, hi=hi, expect=(size, size),
                         stamp=stamp, stamp_kind=1, check=check, check_kind=0, deadline_ns=deadline_ns,
                         interval_ns=interval, fail=IOFailure, late=late)


class BandwidthParams(DegradedParams):
    file_size: Size = param(256 << 20, "bytes each client writes and reads (its own file, or its segment of the "
                                       "shared file); a multiple of transfer_size")
    transfer_size: Size = param(1 << 20, "bytes of one read or write (IOR -t, IOZone -r)")
    phases: list[Phase] = param(["write", "read"], "the phases to run, always in the order listed here")
    layout: Literal["file-per-client", "shared-file"] = param(
        "file-per-client", "a file per client (IOR -F), or one shared file in which each client owns a contiguous "
                           "segment (or, with block_size, one block of each segment)")
    block_size: Size | None = param(
        None, "shared-file only: the bytes a client writes in one piece before the next client's piece (IOR -b); "
              "the file is file_size / block_size segments (IOR -s), each holding one block of every client in "
              "rank order; block_size = transfer_size interleaves the clients' records (IO500's ior-hard); none: "
              "file_size (a contiguous segment per client)")
    direct: bool = param(False, "O_DIRECT: bypass the client's page cache (falls back to buffered I/O, and says "
                                "so, where the file system refuses it)")
    fsync: bool = param(True, "fsync before close, inside the timed region, so writes are measured to the storage")
    reorder: bool = param(False, "read the data of the next client (rank + 1) instead of one's own (IOR -C), so "
                                 "no client reads what its own cache holds")
    iodepth: Annotated[int, Field(ge=1, le=1024)] = param(1, "operations in flight per client (threads, or io_uring "
                                                             "on local files)", "count")
    deadline: Duration | None = param(None, "stonewall (IOR -D): at this time after the start the clients agree on "
                                            "the most work any did and all finish up to it; none: no deadline")
    random_seed: int = param(0, "seed of the random phases' orders and of the payload", "seed")
    verify: bool = param(False, "check every block read back against the stamps it was written with")
    engine: Engine = param("auto", "what runs the timed loop: auto picks the native loop on local files and "
                                   "null:// (docs/kernel.md), python the Python loop; psync and io_uring force one")
    mix: Mix = param(Mix(), "the rw and randrw phases' shares of reads and writes in percent, e.g. {read: 70, "
                            "write: 30} (fio's rwmixread); each operation's direction is drawn before the phase",
                   "percent by kind")
    distribution: str = param("uniform", "which blocks the random phases visit: uniform (each block once, in a "
                                         "shuffled order), zipf:THETA, pareto:H or hotset:B/O (O % of the operations "
                                         "on B % of the blocks) — as many draws as the file has blocks, with "
                                         "replacement (fio's random_distribution)")
    rate: Rate | None = param(None, "bytes per second each client may move, paced open-loop (fio's rate): "
                                    "operation k starts no sooner than k intervals after the first; none: as fast "
                                    "as it can", "bytes/s (rate)")
    iops: Annotated[float, Field(gt=0)] | None = param(None, "operations per second each client may do, paced as "
                                                             "rate is; none: as fast as it can", "ops/s")

    @field_validator("distribution")
    @classmethod
    def _known_distribution(cls, v: str) -> str:
        parse_distribution(v)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> BandwidthParams:
        ts, fs = self.transfer_size, self.file_size
        if self.rate is not None and self.iops is not None:
            raise ValueError("give rate or iops, not both (each paces every client)")
        if self.rate is not None and self.rate <= 0:
            raise ValueError("rate must be more than 0 (e.g. 50MiB/s)")
        paced = self.rate is not None or self.iops is not None
        if (paced or MIXED & set(self.phases)) and self.engine in ("psync", "io_uring"):
            raise ValueError(f"engine {self.engine}: mixed (rw, randrw) and paced (rate, iops) phases run on the "
                             "python loop (leave engine auto or python)")
        if (paced or MIXED & set(self.phases)) and self.on_error != "fail":
            raise ValueError("on_error retry or continue does not work with mixed (rw, randrw) or paced (rate, iops) "
                             "phases (leave on_error fail)")
        if ts <= 0:
            raise ValueError("transfer_size must be at least 1 byte")
        if fs < ts or fs % ts:
            raise ValueError(f"file_size {format_size(fs)} is not a whole number of transfers of "
                             f"{format_size(ts)} (make file_size a multiple of transfer_size)")
        if self.block_size is not None:
            bs = self.block_size
            if bs < ts or bs % ts or fs % bs:
                raise ValueError(f"block_size {format_size(bs)} must be a whole number of transfers of "
                                 f"{format_size(ts)} and divide file_size {format_size(fs)} (IOR: -s = file_size / "
                                 "block_size segments)")
            if self.layout != "shared-file":
                raise ValueError("block_size shapes the shared file (layout: shared-file); a file per client is "
                                 "written front to back whatever it is (leave block_size out)")
        if self.direct and ts % 512:
            raise ValueError(f"direct I/O needs transfer_size to be a multiple of 512 bytes, not {ts} (try 4KiB)")
        if not self.phases:
            raise ValueError(f"phases is empty (choose from {', '.join(PHASES)})")
        if len(set(self.phases)) != len(self.phases):
            raise ValueError("phases lists a phase twice (each runs once, in the order write, rewrite, read, "
                             "reread, randread, randwrite)")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError("deadline must be more than 0 seconds (e.g. 30s)")
        return self


def _prefill_chunk(ts: int, file_size: int) -> int:
    """Bytes per write when files are laid out untimed: about 4 MiB (whole transfers), or one transfer."""
    count = max(1, (4 << 20) // ts) if ts % 512 == 0 else 1
    while file_size % (ts * count):
        count -= 1
    return ts * count


def _run_stream(io, bufs, offsets, log: OpLog, size: int, stamp, check, job, recover, lo: int, hi: int,
                deadline_ns: int = NEVER) -> int:
    """One stream of a phase: offsets ``lo`` … ``hi`` (a thread's share, or io_uring's whole queue)."""
    return run_ops(io, bufs, offsets, log, size, stamp, check, deadline_ns, lo=lo, hi=hi, native=job,
                   recover=recover)


class Bandwidth(Workload):
    kind = "bandwidth"
    Params = BandwidthParams
    PHASES = PHASES
    # -- what the reports show (workloads/base.py: Report); the terminal, HTML, Table 1 and compare read it --
    report = Report(
        columns=(Figure("MiB/s", "MiB/s", caption="aggregate: bytes of all clients / (last end − first start)",
                        value=lambda r: r.bandwidth),
                 Figure("stonewall", "MiB/s", caption="bytes moved until the first client finished (or the deadline)",
                        value=lambda r: r.stonewall),
                 Figure("ops/s", "ops/s", caption="transfers of all clients per second", value=lambda r: r.ops_per_s)),
        how_measured=("MiB/s: aggregate = bytes of all clients / (last client end − first client start), open to close "
                      "inside the barriers (IOR's definition). Stonewall: bytes moved until the first client finished "
                      "(its fsync and close included; another client's write counts once its call returned, fsync or "
                      "not — read from each client's progress marks, at most 16 MiB apart; one client: the aggregate), "
                      "or with a deadline, until the deadline (then stonewall_rule is 'deadline' in the JSON). "
                      "Latency: per operation, from a merged log-linear histogram (±0.4 %)."),
        read=Best(lambda r: r.bandwidth, ("read", "reread", "randread"), caption="the read phase (else reread, randread)"),
        write=Best(lambda r: r.bandwidth, ("write", "rewrite", "randwrite"),
                   caption="the write phase (else rewrite, randwrite)"),
        rate=Best(lambda r: r.ops_per_s, None, unit="ops/s", caption="transfers of the read (else write) phase"))
    summary = "sequential and random reads and writes of large files (IOZone, IOR)"
    p: BandwidthParams

    # -- coordinator side -----------------------------------------------------------------------
    def skipped(self, caps: Capabilities) -> dict[str, str]:
        out: dict[str, str] = {}
        for ph in self.phases():
            if self.p.layout == "shared-file" and not caps.shared_write:
                out[ph] = "target cannot let several clients write one shared file"
            elif ph in ("randwrite", "rw", "randrw") and not caps.random_write:
                out[ph] = ("target cannot write at random offsets (objects and HDFS files are written front to back)"
                           if ph == "randwrite" else "target cannot write into a file it reads (objects and HDFS "
                                                     "files are written front to back)")
        return out

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        return nclients * self.p.file_size, nclients * (self.p.file_size // self.p.transfer_size)

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """Buffers as ``prepare`` allocates them (a payload block, ``iodepth`` write and read buffers, checkers
        with ``verify``, the prefill chunk), the offset tables of random phases, and every client's file."""
        p = self.p
        ts, depth, fs = p.transfer_size, p.iodepth, p.file_size
        chosen = self.phases()
        reads = [ph for ph in chosen if ph in READS]
        buffers = (2 * depth + 1) + (2 * depth * (2 if p.reorder else 1) if p.verify and reads else 0)
        chunk = _prefill_chunk(ts, fs) if self._needs_prefill(chosen) else 0
        memory = [Need(buffers * ts + chunk, f"{buffers} buffers of transfer_size {format_size(ts)}"
                                             + (f" (iodepth {depth})" if depth > 1 else ""),
                       "lower transfer_size" + (" or iodepth" if depth > 1 else ""))]
        randoms = sum(ph in RANDOM for ph in chosen)
        if randoms:  # each random phase keeps its shuffled offsets (8 bytes, twice); drawing one needs 16 more
            blocks = fs // ts
            memory.append(Need(16 * blocks * (randoms + 1), f"the shuffled offsets of {blocks:,} transfers per random "
                                                            "phase", "raise transfer_size or lower file_size"))
        scratch = Need(nclients * fs, f"{nclients:,} × file_size {format_size(fs)}", "lower file_size or --clients")
        return Needs(memory=tuple(memory), scratch=(scratch,), entries=1 if p.layout == "shared-file" else nclients,
                     largest_buffer=max(ts, chunk), threads=depth,
                     extent=nclients * fs if p.layout == "shared-file" else fs)

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        return None if phase in MIXED else "write" if phase in WRITES else "read"

    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        """A mixed phase's reads and writes apart; a paced one's rate asked for and the share of it held."""
        return {**(extra.get("mix") or {}), **pace_figures(seconds, extra)}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """read/write MiB/s and ops of a mixed phase over the phase's span (as fio reports each direction of a
        rwmix job), the read share of its operations; for paced clients the lowest share of the rate held, and
        ``rate-not-held`` when a client fell 2 % or more behind it."""
        mixed = [c for c in clients if "read_ops" in c]
        if not mixed:
            return {}
        out: dict[str, Any] = {}
        reads, writes = sum(c["read_ops"] for c in mixed), sum(c["write_ops"] for c in mixed)
        if reads and writes or any(c.get("mixed") for c in mixed):
            out.update(read_ops=reads, write_ops=writes, read_share=reads / max(reads + writes, 1),
                       read_MiBps=sum(c["read_bytes"] for c in mixed) / (1 << 20) / seconds,
                       write_MiBps=sum(c["write_bytes"] for c in mixed) / (1 << 20) / seconds)
        return {**out, **rate_held(mixed)}

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        for name in [f"bw.{k}" for k in range(nclients)] + ["bw.shared"]:
            driver.remove_quietly(join(cell_dir, name))

    # -- where data lives -----------------------------------------------------------------------
    def _path(self, c: ClientContext, owner: int) -> str:
        name = "bw.shared" if self.p.layout == "shared-file" else f"bw.{owner}"
        return join(c.cell_dir, name)

    def _block(self) -> int:
        """The bytes a client owns in one piece of its file: block_size in a shared file, else all of them."""
        p = self.p
        return p.block_size if p.layout == "shared-file" and p.block_size else p.file_size

    def _sequential(self, owner: int, nclients: int, j: int, streams: int, blocks: int) -> Any:
        """Stream ``j`` of ``streams`` over the first ``blocks`` transfers of ``owner``'s data, in order: a
        ``range`` whenever the offsets are evenly spaced (a file of its own, a contiguous segment, one transfer
        per block), so no table is made however large the file; else the placed offsets."""
        p = self.p
        ts, block = p.transfer_size, self._block()
        if p.layout != "shared-file":
            return range(j * ts, blocks * ts, ts * streams)
        if block == p.file_size:
            base = owner * p.file_size
            return range(base + j * ts, base + blocks * ts, ts * streams)
        if block == ts:
            stride = nclients * ts
            return range(owner * ts + j * stride, owner * ts + blocks * stride, stride * streams)
        return self._place(owner, nclients, np.arange(j, blocks, streams, dtype=np.int64) * ts)

    def _place(self, owner: int, nclients: int, positions: np.ndarray) -> Any:
        """File offsets of the bytes at ``positions`` of ``owner``'s data (0 … file_size): in its own file they
        are the same; in a shared file its data is a block in each segment, after the blocks of the ranks before
        it (IOR: segment × clients × block + rank × block + position in the block). An ``array('q')`` (a
        ``range`` where the offsets are evenly spaced) the native loop and :func:`run_ops` take as they are."""
        p = self.p
        if p.layout != "shared-file":
            out = positions
        else:
            block = self._block()
            out = positions // block * (nclients * block) + owner * block + positions % block
        if len(out) > 1 and (np.diff(out) == out[1] - out[0]).all() and out[1] > out[0]:
            return range(int(out[0]), int(out[-1]) + 1, int(out[1] - out[0]))
        return array("q", out.astype(np.int64).tobytes())

    def _owner(self, c: ClientContext, phase: str) -> int:
        """Whose file or segment this client touches: its own, or rank+1's for reads with ``reorder``."""
        if phase in WRITES or phase in MIXED or not self.p.reorder:
            return c.rank
        return (c.rank + 1) % c.nclients

    def _offsets(self, c: ClientContext, phase: str, owner: int, blocks: int | None = None) -> list:
        """Per-stream offset sequences over the first ``blocks`` transfers (all by default): one per thread,
        or one for io_uring, which keeps ``iodepth`` of its operations in flight. Random orders are drawn
        here, before the timed region."""
        p = self.p
        ts = p.transfer_size
        streams = 1 if c.state.get("engine") == "io_uring" else p.iodepth
        blocks = p.file_size // ts if blocks is None else blocks
        if phase not in RANDOM:
            return [self._sequential(owner, c.nclients, j, streams, blocks) for j in range(streams)]
        rng = np.random.default_rng([p.random_seed & 0xFFFFFFFF, c.rank, PHASES.index(phase)])
        order = draw_blocks(rng, blocks, p.distribution) * ts
        flat = array("q", np.asarray(self._place(owner, c.nclients, order), dtype=np.int64).tobytes())
        return [flat] if streams == 1 else [flat[j::streams] for j in range(streams)]

    # -- client side ------------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        p, st = self.p, c.state
        depth, ts = p.iodepth, p.transfer_size
        mine = Payload(ts, c.rank, p.random_seed)
        st["write_bufs"] = [mine.write_buffer() for _ in range(depth)]
        st["read_bufs"] = [aligned_buffer(ts) for _ in range(depth)]
        st["direct"] = p.direct
        chosen = self.phases()
        paced = p.rate is not None or p.iops is not None
        python_loop = [ph for ph in chosen if paced or ph in MIXED]  # they run on the kernel's measure_mixed
        # no io_uring beside them: their streams are threads, and the offsets are dealt to the same streams
        st["engine"], st["engine_note"] = choose_engine(p.engine, c.driver.native_io(), depth,
                                                        degraded=p.on_error != "fail" or bool(python_loop))
        st["offsets"] = {ph: self._offsets(c, ph, self._owner(c, ph)) for ph in chosen}
        if p.verify:
            reader_of = {ph: self._owner(c, ph) for ph in chosen if ph not in WRITES}
            st["checkers"] = {owner: [Payload(ts, owner, p.random_seed).checker() for _ in range(depth)]
                              for owner in set(reader_of.values())}
        if python_loop:
            st["dirs"] = {ph: self._directions(c, ph, depth) for ph in python_loop}
        if self._needs_prefill(chosen):  # the first phase needs data that is already there
            self._prefill(c)

    def _needs_prefill(self, chosen: list[str]) -> bool:
        """Whether the file must be laid out before the first phase: it reads or rewrites it, or writes only
        some of its blocks (a random write drawn from a distribution other than uniform)."""
        first = chosen[0]
        return first not in ("write", "randwrite") or (first == "randwrite" and self.p.distribution != "uniform")

    def _directions(self, c: ClientContext, phase: str, streams: int) -> list:
        """Per stream, whether each operation writes (1) or reads (0): drawn in the mix's ratio for rw and randrw
        (seeded by rank and phase, as the offsets are), else all the phase's own direction."""
        p = self.p
        n = p.file_size // p.transfer_size
        if phase not in MIXED:  # every operation the phase's own: no table
            return [_Same(1 if phase in WRITES else 0)] * streams
        rng = np.random.default_rng([p.random_seed & 0xFFFFFFFF, c.rank, PHASES.index(phase), 1])
        flat = (rng.random(n) * 100 >= p.mix.read).astype(np.uint8).tobytes()
        return [flat[j::streams] for j in range(streams)]

    def _interval_ns(self, streams: int) -> int:
        """Nanoseconds between one stream's operation starts under rate or iops (the client's pace shared by its
        streams); 0 when unpaced."""
        p = self.p
        if p.rate is not None:
            return int(round(streams * p.transfer_size / p.rate * 1e9))
        if p.iops is not None:
            return int(round(streams / p.iops * 1e9))
        return 0

    def _open(self, c: ClientContext, path: str, mode: str, rec: PhaseRecorder | None):
        st = c.state
        if st["direct"]:
            try:
                return c.driver.open(path, mode, direct=True)
            except DirectIOUnsupported as e:
                st["direct"] = False
                st["direct_refused"] = str(e)
        if rec is not None and "direct_refused" in st:
            c.warn(rec, "direct-refused", f"{st['direct_refused']}; this phase ran with buffered I/O")
        return c.driver.open(path, mode)

    def _prefill(self, c: ClientContext) -> None:
        """Lay out this client's data, untimed, when the first phase reads or rewrites it.

        The bytes are exactly those the write phase would produce; with transfers that are a multiple of 512
        bytes they go out in chunks of about 4 MiB, so small-transfer studies do not spend minutes (and disturb
        the device) laying out their files.
        """
        p = self.p
        ts = p.transfer_size
        block = self._block()
        count = _prefill_chunk(ts, block) // ts
        payload = Payload(ts, c.rank, p.random_seed)
        buf, stamp = payload.chunk_buffer(count) if count > 1 else payload.write_buffer()
        h = self._open(c, self._path(c, c.rank), "w", None)
        try:
            chunk = ts * count
            starts = self._place(c.rank, c.nclients, np.arange(p.file_size // chunk, dtype=np.int64) * chunk)
            run_ops(c.driver.writer(h), [buf], starts, OpLog(time.perf_counter_ns(), fold_cap(chunk)), chunk, stamp)
            make_durable(c, h, True)
        finally:
            c.driver.close(h)

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """Reads start from the storage, not from memory: the page cache is cleared before every read phase
        but ``reread`` (which measures re-reading what ``read`` pulled in, as in IOZone) — and before a
        reread too when data was written since the last clearing. --keep-cache leaves it alone."""
        st = c.state
        if "extent" in st and phase != "write":  # a stonewalled write left this much: later phases use it
            st["offsets"][phase] = self._offsets(c, phase, self._owner(c, phase), st["extent"])
        if phase in WRITES:
            st["dirty"] = True
            return
        if phase in MIXED:  # it reads what is on the storage, and leaves written data behind
            st["cache"] = "direct" if st["direct"] else c.clear_cache([self._path(c, self._owner(c, phase))])
            st["dirty"] = True
            return
        if phase != "reread" or st.get("dirty", True):
            st["cache"] = "direct" if st["direct"] else c.clear_cache([self._path(c, self._owner(c, phase))])
            st["dirty"] = False
        else:
            st["cache"] = "warm"  # reread after read: whatever read left in memory

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p, st = self.p, c.state
        if phase in st.get("dirs", ()):
            self._run_mixed(c, phase, rec)
            return
        write = phase in WRITES
        owner = self._owner(c, phase)
        path = self._path(c, owner)
        engine = st["engine"]
        cap = fold_cap(p.transfer_size)
        if engine == "io_uring":  # its in-flight operations drain at each fold: let a fold hold many queues' worth
            cap = max(cap, min(16 * p.iodepth, 1 << 16))
        offsets = st["offsets"][phase]
        logs = [rec.oplog(cap) for _ in offsets]
        rec.extra["io_engine"] = engine
        if st["engine_note"]:
            c.warn(rec, "engine-fallback", st["engine_note"])
        if not write:
            rec.extra["cache"] = st.setdefault("cache", "not-cleared")  # before_phase sets it in a real run
        if write:
            c.driver.take_requests()  # what the untimed set-up sent is not the phase's
        held = [self._open(c, path, "w" if write else "r", rec)]  # a read's handle may be reopened (degraded mode)
        recovers: list[Degraded | None] = []
        closed = False
        try:
            streams = self._streams(c, held, write, owner, offsets, logs, rec, path, recovers)
            self._drive(c, phase, rec, streams, offsets, logs, path)
            durable = None
            if write:
                try:
                    durable = self._finish_write(c, held, streams, offsets, recovers)
                except IOFailure as e:
                    rec.error(e.kind)
                    raise StorevalError(f"{phase} of {path} {e}") from e
                closed = True
        finally:
            if write:  # what each stream had acknowledged, in its order, for check_after
                st["written"] = (path, [(seq, log.ops + (len(r.lost) if r else 0), set(r.lost) if r else set())
                                        for seq, log, r in zip(offsets, logs, recovers or [None] * len(logs))])
            if not closed:
                c.driver.close(held[0])
        if write:
            requests = c.driver.take_requests()
            if requests is not None:  # an object store's parts: the writes only filled them
                rec.latency_of_requests(requests)
            warn_write_back(c, rec, phase, durable, p.fsync, st["direct"])
        self._warn_about_memory(c, phase, rec)

    def _drive(self, c: ClientContext, phase: str, rec: PhaseRecorder, runs: list, offsets: list, logs: list,
               path: str) -> None:
        """Run a phase's streams to their end — or, with a deadline, IOR's stonewall — each in a thread of its
        own; a failed operation is counted and ends the phase in one line."""
        try:
            if self.p.deadline is None:
                run_parallel([functools.partial(run, 0, len(o)) for run, o in zip(runs, offsets)])
            else:
                self._stonewall(c, phase, rec, runs, offsets, logs)
        except IOFailure as e:
            rec.error(e.kind)
            raise StorevalError(f"{phase} of {path} {e}") from e

    def _run_mixed(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        """A mixed (rw, randrw) or paced (rate, iops) phase on the kernel's :func:`measure_mixed`, in the Python
        loop: each operation's direction drawn before the phase, reads and writes timed into logs of their own
        (``mix`` in the record: each direction's operations, bytes and mean latency), writes stamped as the
        write phases' are and reads verified with ``verify``; under a pace, when it was asked and how many
        operations started late (``pace``)."""
        p, st = self.p, c.state
        ts = p.transfer_size
        owner = self._owner(c, phase)
        path = self._path(c, owner)
        offsets, dirs = st["offsets"][phase], st["dirs"][phase]
        cap = fold_cap(ts)
        logs = [MixedLogs(rec.oplog(cap), rec.oplog(cap)) for _ in offsets]
        writes = phase in WRITES or phase in MIXED
        rec.extra["io_engine"] = "python"
        if phase not in WRITES:
            rec.extra["cache"] = st.setdefault("cache", "not-cleared")
        if writes:
            c.driver.take_requests()
        h = self._open(c, path, "rw" if phase in MIXED else "w" if phase in WRITES else "r", rec)
        interval = self._interval_ns(len(offsets))
        late = [0, 0]  # operations started late; when the last paced loop ended
        closed = False
        try:
            read = c.driver.reader(h, into_buffer=p.verify) if phase not in WRITES else None
            write = c.driver.writer(h) if writes else None
            runs = []
            for j, seq in enumerate(offsets):
                rbuf, (wbuf, stamp) = st["read_bufs"][j], st["write_bufs"][j]
                check = (functools.partial(st["checkers"][owner][j].verify, rbuf)
                         if p.verify and phase not in WRITES else None)
                ops = (functools.partial(read, [rbuf]) if read else None,
                       functools.partial(write, [wbuf]) if write else None)
                runs.append(functools.partial(_run_mixed, logs[j], ts, seq, dirs[j], ops, stamp, check, interval,
                                              late))
            self._drive(c, phase, rec, runs, offsets, logs, path)
            durable = None
            if writes:
                durable = make_durable(c, h, p.fsync)
                c.driver.close(h)
                closed = True
        finally:
            if phase in WRITES:
                st["written"] = (path, [(seq, lg.ops, set()) for seq, lg in zip(offsets, logs)])
            if not closed:
                c.driver.close(h)
        reads_, writes_ = [lg.read for lg in logs], [lg.write for lg in logs]
        mix: dict[str, Any] = {"mixed": phase in MIXED}
        for name, group in (("read", reads_), ("write", writes_)):
            ops = sum(lg.ops for lg in group)
            mix[f"{name}_ops"] = ops
            mix[f"{name}_bytes"] = sum(lg.bytes for lg in group)
            means = [lg.hist.mean * lg.ops for lg in group if lg.ops and lg.hist.mean is not None]
            mix[f"{name}_mean_us"] = sum(means) / ops / 1e3 if ops and means else None
        rec.extra["mix"] = mix
        if interval:
            rec.extra["pace"] = {"ops_per_s": len(offsets) * 1e9 / interval, "late": late[0],
                                 "seconds": (late[1] - rec.start_ns) / 1e9 if late[1] else None}
        if writes:
            requests = c.driver.take_requests()
            if requests is not None:
                rec.latency_of_requests(requests)
            warn_write_back(c, rec, phase, durable, p.fsync, st["direct"])
        self._warn_about_memory(c, phase, rec)

    def _streams(self, c: ClientContext, held: list, write: bool, owner: int, offsets: list, logs: list[OpLog],
                 rec: PhaseRecorder, path: str, recovers: list) -> list:
        """One ``run(lo, hi, deadline_ns=NEVER)`` per stream of offsets, on the phase's engine: the kernel's
        Python loop over the driver's reader/writer, or a native job on the driver's file descriptor. Under
        ``on_error`` retry or continue each stream has its :class:`Degraded`; with one stream, a read reopens
        its handle before a retry and a write resumes its file (:meth:`Driver.resume_write`)."""
        p, st = self.p, c.state
        engine, ts = st["engine"], p.transfer_size
        h = held[0]
        errors = PhaseErrors(rec) if p.on_error != "fail" else None
        native = c.driver.native_io(h) if engine != "python" else None
        io = None if native else (c.driver.writer(h) if write else c.driver.reader(h, into_buffer=p.verify))
        runs = []
        for j, seq in enumerate(offsets):
            if write:
                bufs, stamp, checker = [st["write_bufs"][j][0]], st["write_bufs"][j][1], None
            else:
                bufs, stamp, checker = [st["read_bufs"][j]], None, (st["checkers"][owner][j] if p.verify else None)
            job = None
            if native:
                if engine == "io_uring":  # one stream: every buffer is a slot of the queue
                    bufs = [b for b, _ in st["write_bufs"]] if write else list(st["read_bufs"])
                job = DataJob(engine, native.fd, write, bufs, ts, seq, stamp, checker)
            recover = None
            if errors is not None:
                reopen = rewound = None
                if native is None and len(offsets) == 1:
                    if not write:
                        reopen = functools.partial(self._reopen, c, held, path, bufs, p.verify)
                    else:  # the handle again; an append-only file goes on from what the storage kept
                        reopen = functools.partial(self._resume, c, held, bufs, stamp, seq, logs[j])
                        rewound = functools.partial(self._rewound, errors, ts)
                recover = Degraded(p.on_error, p.retry_for, errors, c.driver, reopen, rewound)
            recovers.append(recover)
            runs.append(functools.partial(_run_stream, io, bufs, seq, logs[j], ts, stamp, checker, job, recover))
        return runs

    def check_after(self, c: ClientContext, phase: str) -> dict[str, Any] | None:
        """After a write phase that a fault struck (or that ran in degraded mode): read back every block the
        client had acknowledged — its write returned — and compare it with its stamp (writer and offset per
        sector). Untimed; O_DIRECT where the target allows it, so a local page cache cannot answer for the
        disk. Blocks the phase already knew were lost (``on_error: continue``) are counted apart."""
        p, st = self.p, c.state
        written = st.pop("written", None)
        if (phase not in WRITES or written is None or not c.driver.caps.keeps_data
                or (phase not in c.faulted and p.on_error == "fail")):
            return None
        path, streams = written
        ts = p.transfer_size
        checker = Payload(ts, c.rank, p.random_seed).checker()
        buf = aligned_buffer(ts)
        out = {"bytes_checked": 0, "bytes_intact": 0, "bytes_lost": 0, "bytes_corrupted": 0,
               "bytes_unreadable": 0, "bytes_not_acknowledged": 0}
        first: str | None = None
        c.driver.retry_server()  # the server may be back since the phase ended
        try:
            h = self._open(c, path, "r", None) if st["direct"] else c.driver.open(path, "r")
        except Exception as e:  # noqa: BLE001 - nothing acknowledged can be read back: all of it is unreadable
            acked = sum((n - len(lost)) for _, n, lost in streams) * ts
            return {**out, "bytes_checked": acked, "bytes_unreadable": acked, "first_problem": one_line(e)}
        try:
            read = c.driver.reader(h, into_buffer=True)
            for seq, attempted, lost in streams:
                for i in range(min(attempted, len(seq))):  # a rewound stream counted some writes twice
                    off = seq[i]
                    if off in lost:
                        out["bytes_not_acknowledged"] += ts
                        continue
                    out["bytes_checked"] += ts
                    try:
                        n = read([buf], off)
                    except Exception as e:  # noqa: BLE001 - counted; a server that stays down fails the rest at once
                        out["bytes_unreadable"] += ts
                        first = first or f"offset {off}: {one_line(e)}"
                        continue
                    if n != ts:
                        out["bytes_lost"] += ts - max(n, 0)
                        first = first or f"offset {off}: {n} of {ts} bytes came back"
                    elif (bad := checker(buf, off)) >= 0:
                        out["bytes_corrupted"] += ts
                        first = first or f"byte {off + bad} differs from what was written"
                    else:
                        out["bytes_intact"] += ts
        finally:
            try:
                c.driver.close(h)
            except Exception:  # noqa: BLE001
                pass
        return {**out, **({"first_problem": first} if first else {})}

    def _finish_write(self, c: ClientContext, held: list, streams: list, offsets: list, recovers: list) -> str:
        """Make the written file durable and close it (for an object store: complete the upload). Under
        ``on_error: retry`` with one stream, a completion that fails resumes the file where the storage kept
        it (:meth:`Driver.resume_write`), writes the rest again and tries again, within one retry window;
        anything else fails as before."""
        p = self.p
        while True:
            try:
                durable = make_durable(c, held[0], p.fsync)
                c.driver.close(held[0])
                return durable
            except ClientStopped:
                raise
            except Exception as e:
                recover = recovers[0] if len(recovers) == 1 else None
                if recover is None or p.on_error != "retry" or not len(offsets[0]):
                    raise
                seq = offsets[0]
                end = seq[-1] + self.p.transfer_size  # every write was acknowledged: the file's end failed
                decision = recover(end, e)
                if decision is None:
                    raise IOFailure(end, e) from e
                restart = decision[2]
                if restart is not None and restart is not PAST_END:
                    streams[0](seq.index(restart), len(seq))

    def _resume(self, c: ClientContext, held: list, bufs: list, stamp: tuple, seq: Any, log: OpLog):
        """A write stream's handle again after a failure (degraded mode, :meth:`Driver.resume_write`): the
        operation to go on with, and the offset to go on from when the storage kept less than acknowledged.

        An append-only file may keep part of a transfer (HDFS keeps what its pipeline acknowledged, packet by
        packet): the rest of that transfer is written first, with the stamps it had, so the file holds whole
        transfers again and goes on after it (nothing is left when it was the last). That transfer is now
        written whole and counts as one of the stream's (its failed first part was never counted; timed by its
        completion), so the phase's bytes and the read-back check after it cover it."""
        restart = c.driver.resume_write(held[0])
        write = c.driver.writer(held[0])
        ts = self.p.transfer_size
        if restart is not None and restart % ts:
            base = restart - restart % ts
            add, tags, view = stamp
            add(tags, base, out=view)  # the transfer's own stamps, as its first, partial write had them
            tail = memoryview(bufs[0])[restart - base:]
            t0 = time.perf_counter_ns()
            n = write([tail], restart)
            if n != len(tail):
                raise StorevalError(f"the reopened file kept {restart:,} bytes, part of a transfer of {ts:,}; "
                                    f"completing it wrote {n:,} of {len(tail):,} bytes")
            log.add(t0, time.perf_counter_ns(), ts)
            log.flush()  # folded at once: the kernel's own buffer index starts again at 0 after a failure
            restart = base + ts
            if restart > seq[-1]:
                restart = PAST_END
        return functools.partial(write, bufs), restart

    @staticmethod
    def _rewound(errors: PhaseErrors, ts: int, failed: int, restart: Any) -> None:
        """Count the acknowledged writes that a reopened file did not keep: they are written again."""
        if restart is not PAST_END:
            errors.note("rewritten_bytes", max(0, failed - restart))

    def _reopen(self, c: ClientContext, held: list, path: str, bufs: list, into_buffer: bool):
        """A read stream's handle again, after a failure (the old one is closed as far as it still can be);
        the operation to go on with."""
        try:
            c.driver.close(held[0])
        except Exception:  # noqa: BLE001 - a handle on a server that went away may not close
            pass
        held[0] = self._open(c, path, "r", None)
        return functools.partial(c.driver.reader(held[0], into_buffer=into_buffer), bufs), None

    def _stonewall(self, c: ClientContext, phase: str, rec: PhaseRecorder, streams: list, offsets: list,
                   logs: list[OpLog]) -> None:
        """IOR's stonewall with wear-out: work until the deadline, agree on the most work any client did,
        and every client finishes up to it, so all clients move the same amount."""
        p, st = self.p, c.state
        deadline_ns = rec.start_ns + int(p.deadline * 1e9)
        run_parallel([functools.partial(run, 0, len(o), deadline_ns) for run, o in zip(streams, offsets)])
        done = [log.ops for log in logs]
        rec.extra["stonewall"] = {"bytes": sum(done) * p.transfer_size, "ops": sum(done), "t_ns": time.perf_counter_ns()}
        target = c.comm.allreduce_max(sum(done))
        remaining = target - sum(done)
        left = [len(o) - d for o, d in zip(offsets, done)]
        quota = [0] * len(streams)
        while remaining > 0:  # deal the rest round-robin to the streams that still have work
            for j in range(len(streams)):
                if remaining and quota[j] < left[j]:
                    quota[j] += 1
                    remaining -= 1
        run_parallel([functools.partial(run, done[j], done[j] + quota[j]) for j, run in enumerate(streams)
                      if quota[j]])
        if phase == "write":  # later phases work on what was written
            st["extent"] = target

    def _warn_about_memory(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        """Say when a figure may be the page cache's rather than the storage's."""
        from ..probes.cache import fits_in_ram

        p, st = self.p, c.state
        if not c.driver.caps.client_page_cache or st["direct"]:
            return
        if phase in WRITES:  # warn_write_back has said what a write phase left unflushed
            return
        data = p.file_size * c.nclients  # what the clients of this host read
        if st["cache"] in ("dropped", "invalidated") or not fits_in_ram(data):
            return
        why = {"kept": "the page cache was kept (--keep-cache)", "warm": "it re-reads what the read phase cached",
               "not-cleared": "the page cache could not be cleared"}[st["cache"]]
        if p.reorder:
            why += "; reading rank+1's data does not help when the clients share one host's page cache"
        c.warn(rec, "page-cache", f"read may be served from page cache: {why}, and the "
                                  f"{format_size(data)} read fit in RAM")

    def cleanup(self, c: ClientContext) -> None:
        if self.p.layout == "file-per-client":
            c.driver.remove_quietly(self._path(c, c.rank))
        elif c.rank == 0:
            c.driver.remove_quietly(self._path(c, 0))

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        p = {k: v for k, v in params.items() if k not in exclude}
        from ..units import format_size_compact

        words = []
        if "transfer_size" in p:
            words.append(f"{format_size_compact(p['transfer_size'])} transfers")
        if "file_size" in p:
            words.append(f"{format_size_compact(p['file_size'])} per client")
        if "direct" in p:
            words.append("O_DIRECT" if p["direct"] else "buffered I/O (page cache)")
        if "fsync" in p:
            words.append("fsync before close" if p["fsync"] else "no fsync")
        if "layout" in p:
            words.append(p["layout"].replace("-", " "))
        if p.get("block_size"):
            words.append(f"{format_size_compact(p['block_size'])} blocks of each client interleaved")
        if p.get("reorder"):
            words.append("reads of rank+1's data")
        if p.get("iodepth", 1) > 1:
            words.append(f"{p['iodepth']} I/Os in flight per client")
        if p.get("distribution", "uniform") != "uniform":
            words.append(f"random blocks drawn {p['distribution']}")
        if any(ph in MIXED for ph in p.get("phases") or ()) and "mix" in p:
            mix = p["mix"] if isinstance(p["mix"], dict) else {"read": 50, "write": 50}
            words.append(f"mixed {mix.get('read', 50)} % reads / {mix.get('write', 50)} % writes")
        if p.get("rate"):
            words.append(f"each client paced to {format_size(p['rate'])}/s")
        if p.get("iops"):
            words.append(f"each client paced to {p['iops']:,.0f} operations/s")
        if p.get("deadline"):
            words.append(f"stonewall deadline {p['deadline']:g} s (then every client finishes up to the most any "
                         "client did; the file size is an upper bound)")
        return ", ".join(words)
