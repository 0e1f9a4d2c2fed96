"""Reading ROOT event files through a driver, the way a physics job does: the event loop's pieces that the
skim and the jobs workload share, and any outside workload that reads event files may use.

``EventParams`` are the parameters of the files and of how a job reads them; ``SkimIO`` sits between uproot
and the driver (it does what the strategy says, counts requests like a CMSSW job report, times the I/O wait
and serves TTreeCache's cache); ``open_tree`` opens a file's event tree through it, ``cluster_arrays`` yields
its clusters' arrays fetched the strategy's way; ``baskets``, ``select_branches``, ``tree_clusters`` describe a
tree; ``touch`` uses the data as an analysis would, ``burn_cpu`` stands in for analysis code.
"""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from ..core.oplog import OpLog
from ..drivers.base import Driver
from ..fields import Duration, Size
from ..units import format_size
from .base import Params, param
from .rootfiles import TREE, GenParams, uproot

MiB = float(1 << 20)
SKIM_PROCESS_BYTES = 64 << 20  # a client that imported uproot and awkward and skims (measured: 55 MiB USS, 66 MiB PSS)


class EventParams(Params):
    """What the event files are and how a job reads them: shared by the skim and the jobs workload."""

    file_size: Size = param(64 << 20, "bytes of each ROOT event file (about: whole clusters; 1.5GiB in the seed "
                                      "studies)")
    cluster_size: Size = param(1 << 20, "uncompressed bytes per cluster of the files, one basket per branch each")
    compression: Literal["zlib", "lz4", "zstd", "none"] = param("zlib", "compression of the files' baskets")
    compression_level: Annotated[int, Field(ge=1, le=9)] = param(4, "compression level, 1 (fast) to 9 (small)",
                                                                 "level")
    fraction: Annotated[float, Field(gt=0, le=1)] = param(
        0.5, "share of each file's basket bytes read: the branches that make it up, for every event", "fraction")
    strategy: Literal["uproot", "ttreecache", "basket"] = param(
        "ttreecache", "how the bytes are fetched: uproot's own requests, ROOT's TTreeCache (one vector read per "
                      "cluster after learning), or one read per basket (CMSSW 3)")
    learn_entries: Annotated[int, Field(ge=1)] = param(
        100, "with ttreecache: entries read basket by basket while the cache learns the branches used", "count")
    cpu_per_event: Duration = param(0.0, "CPU time burnt per event, standing in for analysis code")
    random_seed: int = param(0, "seed of the files' contents, of the branches chosen and of each client's "
                                "order of reading", "seed")

    @model_validator(mode="after")
    def _event_files(self) -> EventParams:
        if self.file_size < 256 << 10:
            raise ValueError(f"file_size {format_size(self.file_size)} is too small for a ROOT event file (at least 256KiB)")
        if self.cluster_size < 16 << 10:
            raise ValueError("cluster_size must be at least 16KiB")
        return self

    def dataset(self, files: int, layout: dict[str, Any] | None = None) -> GenParams:
        """The dataset of ``files`` event files on a target with this ``Driver.layout()``."""
        return GenParams(files=files, file_size=self.file_size, cluster_size=self.cluster_size,
                         compression=self.compression, compression_level=self.compression_level, seed=self.random_seed,
                         layout=GenParams.pairs(layout or {}))


COUNTERS = ("read-numOperations", "read-totalMegabytes", "readv-numOperations", "readv-numChunks",
            "readv-totalMegabytes", "open-numOperations", "open-totalMegabytes")


class SkimIO:
    """Between uproot and the driver: does what the strategy says, counts it, and serves the cache."""

    def __init__(self, driver: Driver, log: OpLog, strategy: str) -> None:
        self.driver, self.log, self.strategy = driver, log, strategy
        self.mode = "open"  # "open" while uproot reads headers and metadata; "data" for baskets
        self.cache: dict[tuple[int, int], bytes] = {}
        self.use_cache = False
        self.ops = {"read": 0, "readv": 0, "chunks": 0, "open": 0}
        self.bytes = {"read": 0, "readv": 0, "open": 0}
        self.handle = None
        self.io_ns = 0  # time spent inside the driver's reads: what the storage, not the client, costs

    def read(self, start: int, stop: int) -> bytes:
        start, stop = int(start), int(stop)
        n = stop - start
        buf = bytearray(n)
        t0 = time.perf_counter_ns()
        got = self.driver.pread(self.handle, buf, start)
        t1 = time.perf_counter_ns()
        self.log.add(t0, t1, n)
        self.io_ns += t1 - t0
        kind = "open" if self.mode == "open" else "read"
        self.ops[kind] += 1
        self.bytes[kind] += n
        return bytes(buf[:got])

    def readv(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        ranges = [(int(start), int(stop)) for start, stop in ranges]
        total = sum(stop - start for start, stop in ranges)
        spans = [(s, e - s) for s, e in ranges]
        t0 = time.perf_counter_ns()
        data = self.driver.preadv(self.handle, spans)
        t1 = time.perf_counter_ns()
        self.log.add(t0, t1, total)
        self.io_ns += t1 - t0
        kind = "open" if self.mode == "open" else "readv"
        self.ops[kind] += 1
        self.bytes[kind] += total
        if kind == "readv":
            self.ops["chunks"] += len(ranges)
        return [bytes(d) for d in data]

    def fetch(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        """What uproot asked for, fetched the strategy's way."""
        if self.mode == "open":
            return [self.read(s, e) for s, e in ranges] if len(ranges) == 1 else self.readv(ranges)
        if self.use_cache:
            missing = [r for r in ranges if r not in self.cache]
            for r in missing:  # cache misses are read one by one, as ROOT does outside its cache
                self.cache[r] = self.read(*r)
            return [self.cache[r] for r in ranges]
        if self.strategy == "uproot":
            return self.readv(ranges) if len(ranges) > 1 else [self.read(*ranges[0])]
        out = [self.read(s, e) for s, e in ranges]  # basket, and ttreecache while it learns
        if self.strategy == "ttreecache":
            self.cache.update(zip(ranges, out))
        return out

    def prefetch(self, ranges: list[tuple[int, int]]) -> None:
        """TTreeCache: one vector read of the cluster's baskets, sorted by offset."""
        wanted = sorted(r for r in set(ranges) if r not in self.cache)
        if wanted:
            self.cache.update(zip(wanted, self.readv(wanted)))

    def requests(self) -> int:
        """Requests made of the storage (reads, vector reads, and those of opening the files)."""
        return self.ops["read"] + self.ops["readv"] + self.ops["open"]

    def counters(self) -> dict[str, float]:
        return {"read-numOperations": self.ops["read"], "read-totalMegabytes": self.bytes["read"] / MiB,
                "readv-numOperations": self.ops["readv"], "readv-numChunks": self.ops["chunks"],
                "readv-totalMegabytes": self.bytes["readv"] / MiB, "open-numOperations": self.ops["open"],
                "open-totalMegabytes": self.bytes["open"] / MiB}


def driver_source(io: SkimIO, size: int) -> type:
    """An uproot Source class reading through ``io`` (uproot builds it from a path and its options)."""

    class DriverSource(uproot.source.chunk.Source):
        def __init__(self, file_path: str, **options: Any) -> None:
            super().__init__()
            self._file_path = file_path
            self._num_bytes = size

        def chunk(self, start: int, stop: int) -> uproot.source.chunk.Chunk:
            self._num_requests += 1
            self._num_requested_chunks += 1
            self._num_requested_bytes += stop - start
            (data,) = io.fetch([(start, stop)])
            return uproot.source.chunk.Chunk.wrap(self, data, start)

        def chunks(self, ranges, notifications):
            self._num_requests += 1
            self._num_requested_chunks += len(ranges)
            self._num_requested_bytes += sum(stop - start for start, stop in ranges)
            chunks = [uproot.source.chunk.Chunk.wrap(self, d, start) for (start, _), d in zip(ranges, io.fetch(list(ranges)))]
            for c in chunks:
                notifications.put(c)
            return chunks

        @property
        def num_bytes(self) -> int:
            return self._num_bytes

        def close(self) -> None:
            """The driver handle is the skim's: it closes it after the file, not uproot."""

        @property
        def closed(self) -> bool:
            return False

    return DriverSource


def baskets(branch: Any) -> list[tuple[int, int, int, int]]:
    """(entry start, entry stop, seek, bytes) of every basket of a branch."""
    n = branch.num_baskets
    seek, size, entry = branch.member("fBasketSeek"), branch.member("fBasketBytes"), branch.member("fBasketEntry")
    return [(int(entry[i]), int(entry[i + 1]), int(seek[i]), int(size[i])) for i in range(n)]


def select_branches(tree: Any, fraction: float, seed: int) -> list[str]:
    """Branches whose baskets make up ``fraction`` of the tree's basket bytes (fixed pseudo-random choice)."""
    names = list(tree.keys())
    sizes = {n: sum(b[3] for b in baskets(tree[n])) for n in names}
    total = sum(sizes.values())
    order = [names[i] for i in np.random.default_rng([seed & 0xFFFFFFFF, 0xB2A]).permutation(len(names))]
    chosen, acc = [], 0
    for name in order:
        if acc >= fraction * total:
            break
        if abs(acc + sizes[name] - fraction * total) <= abs(acc - fraction * total) or not chosen:
            chosen.append(name)
            acc += sizes[name]
    return chosen


def open_tree(io: SkimIO, path: str, size: int) -> Any:
    """The event tree of the file open on ``io.handle``, its headers read through ``io`` (counted as opening)
    and ``io`` switched to reading baskets with an empty cache."""
    io.mode, io.use_cache = "open", False
    io.cache = {}
    f = uproot.open(path, handler=driver_source(io, size), object_cache=None, array_cache=None)
    tree = f[TREE]
    io.mode = "data"
    return tree


def tree_clusters(tree: Any) -> list[tuple[int, int]]:
    """(first entry, entry after the last) of every cluster of the tree."""
    offsets = tree.common_entry_offsets()
    return list(zip(offsets[:-1], offsets[1:]))


def cluster_arrays(tree: Any, io: SkimIO, branches: list[str], catalogue: dict, wanted: list,
                   learn_entries: int, library: str = "np") -> Any:
    """Yield (start, stop, arrays of ``branches``) for each ``wanted`` cluster of one file, fetched the way
    ``io.strategy`` says (ttreecache: baskets one by one for the first ``learn_entries`` entries while the cache
    learns, then one sorted vector read per cluster; basket: one read per basket; uproot: one vector read of
    each cluster's baskets). The skim and the jobs workload share it, cluster by cluster."""
    learned = io.strategy != "ttreecache"
    for start, stop in wanted:
        if not learned:  # TTreeCache's learning phase: baskets one by one, remembered in the cache
            first = min(stop, start + learn_entries)
            touch(tree.arrays(branches, entry_start=start, entry_stop=first, library="np"))
            learned, io.use_cache = True, True
        if io.strategy == "ttreecache":
            io.prefetch([(seek, seek + sz) for name in branches for (a, b, seek, sz) in catalogue[name]
                         if a < stop and b > start])
        yield start, stop, tree.arrays(branches, entry_start=start, entry_stop=stop, library=library)


def burn_cpu(seconds: float) -> None:
    """Busy work standing in for analysis code, so CPU efficiency means something."""
    if seconds <= 0:
        return
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        for i in range(2000):
            x += i * i


def touch(arrays: dict[str, Any]) -> None:
    """Use the data, as an analysis would: sum every array (jagged ones through their content)."""
    for value in arrays.values():
        if value.dtype == object:
            for item in value[:: max(1, len(value) // 64)]:
                np.asarray(item).sum()
        else:
            np.asarray(value).sum()


__all__ = ["MiB", "SKIM_PROCESS_BYTES", "EventParams", "COUNTERS", "SkimIO", "driver_source", "baskets", "select_branches",
           "open_tree", "tree_clusters", "cluster_arrays", "touch", "burn_cpu"]
