"""Skim workload: a ROOT-based physics skim, the application benchmark of seeds 000 and 003.

Every client opens ``files`` event files in its own random order — or, with ``files_per_client``, its own
files that no other client reads (the seeds' "one file per job") — and reads, through uproot and storeval's
driver layer (so on every kind of target), either the branches that make up ``fraction`` of each file's
basket bytes for every event, or — with ``event_fraction`` — every branch of a random sparse subset of the
events. How the bytes are fetched is the ``strategy``:

* ``uproot``: uproot's own iteration; each of its requests for baskets becomes one vector read;
* ``ttreecache``: like ROOT's TTreeCache, the first ``learn_entries`` entries are read basket by basket while
  the cache learns the used branches, then each cluster's baskets of those branches are fetched in one
  vector read sorted by offset and served from the cache;
* ``basket``: one read per basket, the unoptimised CMSSW 3 pattern.

Counters are named as in a CMSSW job report (``read-numOperations``, ``readv-numChunks`` …). Bytes
*needed* are those of the selected baskets; bytes *requested* all bytes asked of the storage (file opening
included); bytes *moved* those the client's storage stack fetched (``/proc/self/io`` for local files). Beside events/s, which
the client's CPU may set, stand the figures the client does not change: bytes, requests, and the seconds each
client spent waiting inside the driver's reads (``io_wait``), with the rate the storage delivered while waited
on (bytes ÷ I/O wait). Clients that read the same files warm each other's caches: ``shared-files`` says so.
"""

from __future__ import annotations

import time
from typing import Annotated, Any

import numpy as np
from pydantic import Field, model_validator

from ..drivers.base import Capabilities, Driver, join
from ..core.oplog import PhaseRecorder
from ..probes.cache import fits_in_ram, process_read_bytes
from ..units import format_size, plural, sig
from .base import Best, Chart, ClientContext, Figure, Need, Needs, Report, Scaling, Workload, param, summary_text
from .events import (SKIM_PROCESS_BYTES, EventParams, SkimIO, baskets, burn_cpu, cluster_arrays, open_tree,
                     select_branches, touch, tree_clusters)
from .rootfiles import GenParams, ensure_dataset, read_manifest

DEFAULT_FILES = 3  # files every client reads when neither files nor files_per_client is set
UPROOT_STEP = 100 * 1000**2  # uproot's default step_size of TTree.iterate


class SkimParams(EventParams):
    files: Annotated[int, Field(ge=1, le=10_000)] | None = param(
        None, f"event files every client reads, each in its own order; none: {DEFAULT_FILES}, unless "
              "files_per_client is given", "count")
    files_per_client: Annotated[int, Field(ge=1, le=10_000)] | None = param(
        None, "event files of each client's own, that no other client reads (the seeds' one file per job), "
              "instead of files", "count")
    event_fraction: Annotated[float, Field(gt=0, le=1)] | None = param(
        None, "read every branch of a random sparse subset of this share of the events, instead of fraction",
        "fraction")

    @model_validator(mode="after")
    def _consistent(self) -> SkimParams:
        if self.files_per_client is not None and self.files is not None:
            raise ValueError("set files (every client reads all of them) or files_per_client (each client its own "
                             "files), not both")
        return self

    def file_count(self, nclients: int) -> int:
        """Files a cell of ``nclients`` clients reads: ``files``, or ``files_per_client`` for each client."""
        if self.files_per_client is not None:
            return self.files_per_client * nclients
        return self.files if self.files is not None else DEFAULT_FILES

    def client_files(self, rank: int, nclients: int) -> range:
        """Indices of the files client ``rank`` reads (in the dataset's order)."""
        if self.files_per_client is None:
            return range(self.file_count(nclients))
        return range(rank * self.files_per_client, (rank + 1) * self.files_per_client)

    def generation(self, nclients: int = 1, layout: dict[str, Any] | None = None) -> GenParams:
        """The dataset a cell of ``nclients`` clients reads on a target with this ``Driver.layout()``."""
        return self.dataset(self.file_count(nclients), layout)


class Skim(Workload):
    kind = "skim"
    preload = ("awkward", "uproot")  # the ROOT files' reader
    Params = SkimParams
    PHASES = ("skim",)
    summary = "a ROOT physics skim through uproot: events/s, CPU efficiency, read amplification (seeds 000, 003)"
    report = Report(
        columns=(Figure("events/s", "events/s", direction="events", text=lambda r: _events_text(r)),
                 Figure("MB/s", "MB/s", value=lambda r: r.extras.get("MBps")),
                 Figure("MB/s per client", "MB/s", text=lambda r: _per_client_text(r)),
                 Figure("CPU eff.", direction="share", value=lambda r: r.extras.get("cpu_efficiency")),
                 Figure("needed MB", "MB", direction="read", value=lambda r: r.extras.get("bytes_needed"), scale=1e-6),
                 Figure("ampl. req./moved", "×", direction="ratio",
                        text=lambda r: f"{summary_text(r.extras.get('request_amplification'))} / "
                                       f"{summary_text(r.extras.get('read_amplification'))}"),
                 Figure("requests", direction="cost", value=lambda r: r.extras.get("requests")),
                 Figure("I/O wait", direction="share", value=lambda r: r.extras.get("io_wait_fraction"), share=True),
                 Figure("MB/s I/O-bound", "MB/s", value=lambda r: r.extras.get("io_bound_MBps"))),
        how_measured=("events/s and MB/s (bytes requested / wall, 10^6 B) over all clients; per client: mean ± stderr "
                      "of the clients' MB/s, as the seed studies report it; CPU eff. = client CPU seconds / wall "
                      "seconds; amplification = bytes requested (req.) or moved by the client's storage stack (moved) / "
                      "bytes the selected baskets need. client-bound: the clients were busy on CPU (share of their "
                      "wall time) and may have set events/s. Storage-side figures, whatever the client: requests made, "
                      "I/O wait = the clients' time inside driver reads / their wall time, MB/s I/O-bound = bytes "
                      "requested / the clients' mean I/O wait."),
        read=Best(lambda r: r.extras.get("MBps"), ("skim",), unit="MB/s", caption="bytes requested"),
        rate=Best(lambda r: r.extras.get("events_per_s"), ("skim",), unit="events/s", caption="events of all clients"),
        # the phase table's MB/s (bytes requested / wall, 10^6 B) and its per-client mean, against clients
        scaling=Scaling(figure="MBps", unit="MB/s", aggregate=lambda ph: ph.extra.get("MBps"),
                        per_client=lambda ph: (ph.extra.get("MBps_per_client") or {}).get("mean")),
        compare=(Figure("events_per_s", "events/s", direction="events"), Figure("MBps", "MB/s"),
                 Figure("cpu_efficiency", "", direction="share"),
                 Figure("read_amplification", "×", direction="ratio", higher_is_better=False),
                 Figure("request_amplification", "×", direction="ratio", higher_is_better=False)),
        charts=tuple(Chart(label, Figure(key), y=label) for key, label in (
            ("events_per_s", "events/s"), ("MBps", "MB/s (requested)"), ("cpu_efficiency", "CPU efficiency (CPU s / wall s)"),
            ("read_amplification", "read amplification (moved / needed)"),
            ("request_amplification", "request amplification (requested / needed)"))),
        section="Skim", section_table=True, amplification=False)
    p: SkimParams

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        from ..units import format_size_compact

        p = {k: v for k, v in params.items() if k not in exclude}
        files = (f"{plural(p['files_per_client'], 'file')} per client, its own" if p.get("files_per_client")
                 else f"{plural(p.get('files') or DEFAULT_FILES, 'file')} read by every client")
        parts = [({"files", "files_per_client", "file_size"}, f"{files}, of {format_size_compact(p.get('file_size', 0))}"),
                 ({"compression", "compression_level"}, f"{p.get('compression')} {p.get('compression_level')}"),
                 ({"cluster_size"}, f"clusters of {format_size_compact(p.get('cluster_size', 0))}"),
                 ({"fraction", "event_fraction"}, f"{p['event_fraction']:.0%} of the events" if p.get("event_fraction")
                  else f"{p.get('fraction', 0.5):.0%} of each file's basket bytes"),
                 ({"strategy"}, f"strategy {p.get('strategy')}"),
                 ({"cpu_per_event"}, f"{p['cpu_per_event'] * 1e6:.0f} µs CPU per event" if p.get("cpu_per_event") else "")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)

    # -- coordinator side --------------------------------------------------------------------------------
    def prepare_target(self, driver: Driver, *, regenerate: bool = False, log=lambda message: None,
                       clients: int = 1) -> None:
        """The event files a cell of ``clients`` clients reads, laid out the way this target lays out data."""
        ensure_dataset(driver, self.p.generation(clients, driver.layout()), regenerate=regenerate, log=log)

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        return "read"

    def target_data_key(self) -> str | None:
        return self.p.generation().key()

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """A client holds a cluster's baskets, compressed and decoded, several times over (uproot's chunks, the
        cache, the arrays) — and uproot's own iteration a step of 100 MB; the event files are laid out once
        per target and kept."""
        p = self.p
        memory = [Need(4 * p.cluster_size, f"a cluster of cluster_size {format_size(p.cluster_size)}, several times",
                       "lower cluster_size")]
        if p.strategy == "uproot" and p.event_fraction is None:
            memory.append(Need(UPROOT_STEP, "uproot's iteration step of 100 MB", "choose strategy ttreecache"))
        g = p.generation(nclients)  # kept_dir is checked on local file systems, whose layout is {}
        fix = "lower files_per_client or file_size" if p.files_per_client is not None else "lower files or file_size"
        return Needs(memory=tuple(memory), process_bytes=SKIM_PROCESS_BYTES, largest_buffer=p.cluster_size,
                     kept=Need(g.files * p.file_size, f"{g.files} event files of file_size {format_size(p.file_size)}",
                               fix),
                     kept_dir=g.directory(), entries=g.files + 1, extent=p.file_size)

    # -- client side -------------------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        g = self.p.generation(c.nclients, c.driver.layout())
        manifest = read_manifest(c.driver, g.directory())
        if manifest is None or len(manifest.get("files", [])) < g.files:
            raise FileNotFoundError(2, "the skim's event files are missing (the coordinator writes them)", g.directory())
        mine = list(self.p.client_files(c.rank, c.nclients))
        order = np.random.default_rng([self.p.random_seed & 0xFFFFFFFF, c.rank, 0x5C1]).permutation(len(mine))
        c.state["files"] = manifest["files"][:g.files]  # what the cell reads, all clients together
        c.state["dir"] = g.directory()
        c.state["order"] = [mine[i] for i in order]

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """Start cold, as the seed studies did: the page cache cleared before the skim (unless --keep-cache)."""
        files = c.state["files"]
        c.state["cache"] = c.clear_cache([join(c.state["dir"], files[i]["name"]) for i in c.state["order"]])
        c.state["data_bytes"] = sum(f["bytes"] for f in files)

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p, st = self.p, c.state
        log = rec.oplog(256)
        io = SkimIO(c.driver, log, p.strategy)
        # /proc/self/io counts what the kernel read for this process: the storage's bytes when reads go through
        # this host's page cache (a file system), not a network library's
        moved0 = process_read_bytes() if c.driver.caps.client_page_cache else None
        events = needed = 0
        order_names = []
        for index in st["order"]:
            entry = st["files"][index]
            order_names.append(entry["name"])
            e, n = self._skim_file(c, io, join(st["dir"], entry["name"]), entry["bytes"], index)
            events += e
            needed += n
        log.flush()
        moved1 = process_read_bytes() if moved0 is not None else None
        rec.extra.update({
            "events": events, "bytes_needed": needed,
            "bytes_requested": io.bytes["read"] + io.bytes["readv"] + io.bytes["open"],
            "bytes_moved": (moved1 - moved0) if moved0 is not None and moved1 is not None else None,
            "counters": io.counters(), "requests": io.requests(), "io_wait_ns": io.io_ns,
            "files_order": order_names, "cache": st["cache"]})
        if st["cache"] in ("not-cleared", "kept"):
            why = "kept (--keep-cache)" if st["cache"] == "kept" else "not cleared"
            fit = "fit" if fits_in_ram(st["data_bytes"]) else "do not fit"
            c.warn(rec, "page-cache", f"the page cache was {why} before the skim and the "
                                      f"{format_size(st['data_bytes'])} of files {fit} in RAM: reads may be served "
                                      "from memory")

    def _skim_file(self, c: ClientContext, io: SkimIO, path: str, size: int, index: int) -> tuple[int, int]:
        """Skim one file; return (events processed, bytes the selected baskets need)."""
        p = self.p
        io.handle = c.driver.open(path, "r")
        try:
            tree = open_tree(io, path, size)
            n_entries = tree.num_entries
            clusters = tree_clusters(tree)
            if p.event_fraction is None:
                branches = select_branches(tree, p.fraction, p.random_seed)
                wanted = [(a, b) for a, b in clusters]
                picks = None
            else:
                branches = list(tree.keys())
                k = max(1, round(p.event_fraction * n_entries))
                rng = np.random.default_rng([p.random_seed & 0xFFFFFFFF, c.rank, index, 0xE7])
                picks = np.sort(rng.choice(n_entries, size=k, replace=False))
                wanted = [(a, b) for a, b in clusters if np.any((picks >= a) & (picks < b))]
            catalogue = {name: baskets(tree[name]) for name in branches}
            needed = sum(sz for name in branches for (a, b, _, sz) in catalogue[name]
                         if any(a < we and ws < b for ws, we in wanted))
            events = self._read(tree, io, branches, catalogue, wanted, picks)
            burn_cpu(events * p.cpu_per_event)
            io.log.worked(time.perf_counter_ns())  # analysis time is work, not a stall of the storage
            return events, needed
        finally:
            c.driver.close(io.handle)

    def _read(self, tree: Any, io: SkimIO, branches: list[str], catalogue: dict, wanted: list,
              picks: np.ndarray | None) -> int:
        p = self.p
        events = 0
        if p.strategy == "uproot" and picks is None:
            for arrays in tree.iterate(branches, library="np"):
                events += len(next(iter(arrays.values())))
                touch(arrays)
            return events
        if p.strategy == "uproot":  # uproot's sparse access: one request per selected event
            for e in picks:
                touch(tree.arrays(branches, entry_start=int(e), entry_stop=int(e) + 1, library="np"))
            return len(picks)
        for start, stop, arrays in cluster_arrays(tree, io, branches, catalogue, wanted, p.learn_entries):
            if picks is None:
                events += stop - start
                touch(arrays)
            else:
                local = picks[(picks >= start) & (picks < stop)] - start
                events += len(local)
                touch({k: v[local] for k, v in arrays.items()})
        return events

    def cleanup(self, c: ClientContext) -> None:
        pass  # the event files are kept on the target for later cells and runs (see rootfiles.py)

    # -- figures -------------------------------------------------------------------------------------------
    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        events, requested = extra.get("events", 0), extra.get("bytes_requested", 0)
        needed, moved = extra.get("bytes_needed", 0), extra.get("bytes_moved")
        wait = extra["io_wait_ns"] / 1e9 if "io_wait_ns" in extra else None
        return {"events": events, "events_per_s": events / seconds if seconds else None,
                "MBps": requested / 1e6 / seconds if seconds else None,
                "cpu_efficiency": cpu_seconds / seconds if seconds else None, "cpu_seconds": cpu_seconds,
                "bytes_needed": needed, "bytes_requested": requested, "bytes_moved": moved,
                "read_amplification": moved / needed if moved is not None and needed else None,
                "request_amplification": requested / needed if needed else None,
                "requests": extra.get("requests"), "io_wait_seconds": wait,
                "io_wait_fraction": wait / seconds if wait is not None and seconds else None,
                "io_bound_MBps": requested / 1e6 / wait if wait else None,
                "counters": extra.get("counters", {}), "files_order": extra.get("files_order", []),
                "cache": extra.get("cache")}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """The skim figures of a phase: sums and rates over all clients, per-client mean ± stderr. Bytes moved
        come from the clients' own storage counters (local files) or else from the probes (network).

        Beside events/s, which the client's CPU may set (``client_cpu_share``: CPU seconds of all clients /
        their wall seconds, as the ``client-bound`` warning counts it), the storage-side figures: requests, the
        clients' seconds waiting inside driver reads (``io_wait_seconds``, its share of their time), and the
        rate while waiting (``io_bound_MBps``: bytes requested / the clients' mean I/O wait — what they would
        reach together if only the storage set the pace). A warning ``shared-files`` when clients read the
        same files (one's reads warm the caches another reads from)."""
        from ..stats import mean_stderr

        def total(key: str) -> float:
            return sum(c.get(key) or 0 for c in clients)

        measured = bool(clients) and not any(c["bytes_moved"] is None for c in clients)
        if measured:
            moved = total("bytes_moved")
        needed, requested = total("bytes_needed"), total("bytes_requested")
        counters: dict[str, float] = {}
        for c in clients:
            for k, v in c["counters"].items():
                counters[k] = counters.get(k, 0) + v
        mbps = mean_stderr([c["MBps"] for c in clients if c["MBps"] is not None])
        eps = mean_stderr([c["events_per_s"] for c in clients if c["events_per_s"] is not None])
        eff = mean_stderr([c["cpu_efficiency"] for c in clients if c["cpu_efficiency"] is not None])
        span = seconds * len(clients)
        waited = [c["io_wait_seconds"] for c in clients if c.get("io_wait_seconds") is not None]
        wait = sum(waited) if clients and len(waited) == len(clients) else None
        out = {"events": int(total("events")), "events_per_s": total("events") / seconds if seconds else None,
               "MBps": requested / 1e6 / seconds if seconds else None,
               "MBps_per_client": {"mean": mbps[0], "stderr": mbps[1]},
               "events_per_s_per_client": {"mean": eps[0], "stderr": eps[1]},
               "cpu_efficiency": eff[0], "cpu_efficiency_stderr": eff[1],
               "client_cpu_share": total("cpu_seconds") / span if span else None,
               "bytes_needed": int(needed), "bytes_requested": int(requested), "bytes_moved": moved,
               "read_amplification": moved / needed if moved is not None and needed else None,
               "request_amplification": requested / needed if needed else None,
               "requests": int(total("requests")), "io_wait_seconds": wait,
               "io_wait_fraction": wait / span if wait is not None and span else None,
               "io_bound_MBps": requested / 1e6 / (wait / len(clients)) if wait else None,
               "counters": counters}
        warning = shared_files(clients, needed, moved if measured else None)
        if warning:
            out["warnings"] = [warning]
        return out


def shared_files(clients: list[dict[str, Any]], needed: float, from_storage: float | None) -> dict[str, str] | None:
    """The ``shared-files`` warning when clients of a phase read the same files, with how many clients read each
    and, where the clients' own counters tell it, how much of the data came from the storage at all."""
    readers: dict[str, int] = {}
    for c in clients:
        for name in set(c.get("files_order") or ()):
            readers[name] = readers.get(name, 0) + 1
    if not readers or max(readers.values()) < 2:
        return None
    lo, hi = min(readers.values()), max(readers.values())
    each = f"{hi}" if lo == hi else f"{lo} to {hi}"
    text = (f"{len(clients)} clients read {len(readers)} file{'s' if len(readers) != 1 else ''}: each file was read "
            f"by {each} clients")
    if from_storage is not None and needed:
        text += f"; {sig(from_storage / 1e6)} MB of the {sig(needed / 1e6)} MB needed came from disk"  # the table's MB
    return {"code": "shared-files", "message": (
        f"{text}. One client's reads warm the caches another reads from, so these figures are partly those of "
        "data in memory; set files_per_client to give each client its own files (the seeds' one file per job)")}


__all__ = ["Skim", "SkimParams", "shared_files"]


def _per_client_text(r: Any) -> str:
    """The seed's figure: the clients' mean MB/s ± the standard error over clients (averaged over repetitions)."""
    mean, err = r.extras.get("MBps_per_client.mean"), r.extras.get("MBps_per_client.stderr")
    if mean is None:
        return "–"
    from ..units import sig

    return f"{sig(mean.mean)} ± {sig(err.mean, 2)}" if err is not None else sig(mean.mean)


def _events_text(r: Any) -> str:
    """The skim's events/s, and beside it whether the client's CPU set it: events/s of a client-bound skim
    measure the client (how it is written, the host's CPUs) as much as the storage."""
    text = summary_text(r.extras.get("events_per_s"))
    if any(w["code"] == "client-bound" for w in r.warnings):
        share = r.extras.get("client_cpu_share")
        text += f" (client-bound, CPU {share.mean:.0%})" if share is not None else " (client-bound)"
    return text
