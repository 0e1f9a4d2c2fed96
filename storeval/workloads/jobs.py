"""HEPiX fixed-time jobs: N jobs run a physics event loop for a fixed time and write selected events back.

The HEPiX storage group's benchmark (seed 000 §6): 20–80 jobs, each with its own event files, are started
together, run for a fixed time, and are judged by the events per second they process once running smoothly —
per job and in aggregate, and against the number of jobs — while each writes the few events it selects back
to the storage. Here a job is a client of the cell (``clients: [1, 2, 4]`` sweeps the job count).

Each job reads its own ``files_per_job`` event files (the skim's dataset, laid out once per target and kept)
with the skim's machinery (``events.SkimIO``, the same strategies, cluster by cluster), again and again, a new
random order each pass, until ``duration`` from the phase's start; it stops at the first cluster boundary past
it. Every cluster's events are counted into a per-second timeline (from the job's start, taken just after the
opening barrier) the moment the cluster is done, and the bytes requested and written are counted per second
by the OpLogs, so the steady window's figures are exact: the events (bytes) completed in
[``steady_after``, ``duration``) ÷ its length, per job, summed over jobs. ``duration`` and ``steady_after`` are
whole seconds for that reason. CPU efficiency is the process's CPU ÷ wall time between the first cluster
boundary at or past ``steady_after`` and the job's end.

Write-back: of every cluster a job reads, a fixed pseudo-random choice of events (a permutation per file and
cluster, the first k of it, k keeping the job's running total at round(``write_back`` × events read)) is kept
— the selected branches of those events — and written as a ROOT file through uproot: one output file per
pass over one input file, as a real skim writes one output per input, which bounds the memory a job holds (a
share of one input file) and makes output files appear all through the phase. uproot builds the file in
memory (object stores cannot seek back to rewrite a ROOT header) and the job then writes it to the cell's
directory on the target through the driver — durably: fsync on file systems, the PUT's acknowledgment on
object stores — inside the timed phase, so its time and bytes are the job's. The files stay on the target
until the cell ends (``cleanup``; ``cell_cleanup`` after a failed cell). Their size is checked against what the
selected events occupied in the input (the selected baskets' bytes × the share of their cluster's events).

Page cache: the first pass starts cold (``ClientContext.clear_cache``, as the skim). Later passes re-read the
same files: before each later pass a job drops its files' pages from this host's page cache
(``posix_fadvise``, ``Driver.invalidate``), which it can do alone; the host-wide drop and a server's cache on
this host cannot be cleared mid-phase without disturbing the other jobs, so when those may serve a later pass
(the files fit in RAM) the ``page-cache`` warning says so.
"""

from __future__ import annotations

import io
import math
import re
import time
from typing import Annotated, Any

import numpy as np
from pydantic import Field, model_validator

from ..core.oplog import OpLog, PhaseRecorder
from ..drivers.base import Capabilities, Driver, Handle, join
from ..fields import Duration
from ..probes.cache import fits_in_ram
from ..units import format_size, plural
from .base import Best, Chart, ClientContext, Figure, Need, Needs, Report, Scaling, Workload, param, summary_text
from .durability import make_durable, warn_write_back
from .events import (SKIM_PROCESS_BYTES, EventParams, SkimIO, baskets, burn_cpu, cluster_arrays, open_tree,
                     select_branches, tree_clusters)
from .rootfiles import COMPRESSIONS, TREE, ensure_dataset, read_manifest, uproot

NS = 1_000_000_000
OUTPUT = re.compile(r"^jobs-\d{4}-\d{5}\.root$")  # the written-back files, by the names jobs give them
MAX_LISTED = 1000  # output files a job's record lists by name (all are counted)
WRITE_CHUNK = 16 << 20
MAX_DURATION = 7 * 86400  # a week: far beyond any job's run, and its per-second timelines stay small


class JobsParams(EventParams):
    duration: Duration = param(..., "how long every job runs from the common start (whole seconds); required")
    steady_after: Duration | None = param(
        None, "the warm-up left out of the figures: they cover [steady_after, duration); none: a third of duration")
    write_back: Annotated[float, Field(ge=0, le=1)] = param(
        0.1, "share of the events read that each job writes back to the target as ROOT files (0: none)", "fraction")
    files_per_job: Annotated[int, Field(ge=1, le=10_000)] = param(2, "event files of each job's own, read over and "
                                                                     "over until duration", "count")

    @model_validator(mode="after")
    def _window(self) -> JobsParams:
        # checked first: int() of inf/nan fails, and a huge duration is a huge per-second timeline per client
        for name, value in (("duration", self.duration), ("steady_after", self.steady_after)):
            if value is not None and not (math.isfinite(value) and value <= MAX_DURATION):
                raise ValueError(f"{name} {value:g}s must be at most a week ({MAX_DURATION:,}s), the longest a job "
                                 f"runs (give whole seconds, e.g. {name}: 60s)")
        if self.duration < 2 or self.duration != int(self.duration):
            raise ValueError(f"duration {self.duration:g}s must be a whole number of seconds, at least 2 (the "
                             "events are counted per second, so the steady window falls on whole seconds)")
        if self.steady_after is None:
            object.__setattr__(self, "steady_after", float(int(self.duration) // 3))
        if self.steady_after != int(self.steady_after) or not 0 <= self.steady_after < self.duration:
            raise ValueError(f"steady_after {self.steady_after:g}s must be whole seconds and less than duration "
                             f"{self.duration:g}s (the steady window is [steady_after, duration))")
        return self

    def dataset_for(self, nclients: int, layout: dict[str, Any] | None = None):
        """The skim dataset the cell's jobs read: ``files_per_job`` files for each job."""
        return self.dataset(self.files_per_job * nclients, layout)


class OutputSink(io.BytesIO):
    """uproot writes the output file here; its bytes are kept when uproot closes it."""

    data = b""

    def close(self) -> None:
        self.data = self.getvalue()
        super().close()


def output_tree(selected: Any) -> dict[str, Any]:
    """The branches to write for selected events (an awkward record array): a collection's jagged fields zipped
    into one (``Muon_pt``, ``Muon_eta`` → ``Muon``) so uproot writes them with one counter ``nMuon``, as the
    input has them; the input's own counter is then not written twice."""
    import awkward as ak

    flat: dict[str, Any] = {}
    collections: dict[str, dict[str, Any]] = {}
    for name in selected.fields:
        column = selected[name]
        prefix, _, rest = name.partition("_")
        if rest and column.ndim > 1 and "var" in str(column.type):
            collections.setdefault(prefix, {})[rest] = column
        else:
            flat[name] = column
    for prefix, fields in collections.items():
        flat.pop(f"n{prefix}", None)
        flat[prefix] = ak.zip(fields)
    return flat


class Jobs(Workload):
    kind = "jobs"
    preload = ("awkward", "uproot")  # the ROOT files' reader
    Params = JobsParams
    PHASES = ("jobs",)
    summary = "HEPiX fixed-time jobs: events/s per job and in aggregate in the steady window, write-back (seed 000 §6)"
    report = Report(
        columns=(Figure("events/s", "events/s", direction="events", caption="steady window, all jobs",
                        value=lambda r: r.extras.get("events_per_s")),
                 Figure("events/s per job", "events/s", direction="events", text=lambda r: _per_job_text(r)),
                 Figure("MB/s read", "MB/s", value=lambda r: r.extras.get("MBps_read")),
                 Figure("MB/s written", "MB/s", value=lambda r: r.extras.get("MBps_written")),
                 Figure("CPU eff.", direction="share", value=lambda r: r.extras.get("cpu_efficiency")),
                 Figure("written back", direction="share", value=lambda r: r.extras.get("written_fraction"),
                        share=True),
                 Figure("out/in size", "×", direction="ratio", value=lambda r: r.extras.get("size_ratio"))),
        how_measured=("Each job runs until duration from its start (just after the common barrier) and stops at the "
                      "first cluster boundary past it. events/s = events of the clusters completed in the steady "
                      "window [steady_after, duration) ÷ its length (per-second timeline from the job's start), summed "
                      "over jobs; per job: mean ± stderr over jobs. MB/s read: bytes requested of the storage "
                      "(headers included) completed in the window ÷ its length, 10^6 B; MB/s written: bytes of the "
                      "written-back ROOT files whose write (open, write, fsync or PUT, close) completed in the window. "
                      "CPU eff. = process CPU ÷ wall from the first cluster boundary at or past steady_after to the "
                      "job's end. written back = events written ÷ events read (all of the run); out/in size = bytes "
                      "written ÷ bytes the selected events occupied in the input (their branches' baskets × their "
                      "share of each cluster): about 1 when the output is the selected data. Page cache: cleared before "
                      "the first pass (as the skim); before each later pass a job drops its own files' pages from this "
                      "host's cache (posix_fadvise); page-cache warns where a cache it cannot drop (the host's, a "
                      "server's) may have served a later pass."),
        read=Best(lambda r: r.extras.get("MBps_read"), ("jobs",), unit="MB/s",
                  caption="bytes requested in the steady window"),
        write=Best(lambda r: r.extras.get("MBps_written"), ("jobs",), unit="MB/s",
                   caption="bytes written back in the steady window"),
        rate=Best(lambda r: r.extras.get("events_per_s"), ("jobs",), unit="events/s",
                  caption="events of all jobs in the steady window"),
        scaling=Scaling(figure="events_per_s", unit="events/s", aggregate=lambda ph: ph.extra.get("events_per_s"),
                        per_client=lambda ph: (ph.extra.get("events_per_s_per_job") or {}).get("mean")),
        compare=(Figure("events_per_s", "events/s", direction="events"), Figure("MBps_read", "MB/s"),
                 Figure("MBps_written", "MB/s"), Figure("cpu_efficiency", "", direction="share")),
        charts=(Chart("events/s per job (steady window)",
                      Figure("events/s per job", value=lambda r: r.extras.get("events_per_s_per_job.mean")),
                      y="events/s per job"),
                Chart("events/s, all jobs (steady window)", Figure("events_per_s"), y="events/s")),
        section="HEPiX jobs", section_table=True, amplification=False)
    p: JobsParams

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        from ..units import format_size_compact

        p = {k: v for k, v in params.items() if k not in exclude}
        parts = [({"files_per_job", "file_size"}, f"{plural(p.get('files_per_job', 2), 'file')} of "
                                                  f"{format_size_compact(p.get('file_size', 0))} per job"),
                 ({"duration", "steady_after"}, f"{p.get('duration', 0):g} s, steady after {p.get('steady_after', 0):g} s"),
                 ({"write_back"}, f"{p.get('write_back', 0):.0%} of the events written back" if p.get("write_back")
                  else "no write-back"),
                 ({"compression", "compression_level"}, f"{p.get('compression')} {p.get('compression_level')}"),
                 ({"fraction"}, f"{p.get('fraction', 0.5):.0%} of each file's basket bytes"),
                 ({"strategy"}, f"strategy {p.get('strategy')}"),
                 ({"cpu_per_event"}, f"{p['cpu_per_event'] * 1e6:.0f} µs CPU per event" if p.get("cpu_per_event") else "")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)

    # -- coordinator side --------------------------------------------------------------------------------
    def prepare_target(self, driver: Driver, *, regenerate: bool = False, log=lambda message: None,
                       clients: int = 1) -> None:
        """The event files of a cell of ``clients`` jobs (the skim's dataset: files are shared with it)."""
        ensure_dataset(driver, self.p.dataset_for(clients, driver.layout()), regenerate=regenerate, log=log)

    def target_data_key(self) -> str | None:
        return self.p.dataset_for(1).key()

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        return "read"

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """A job holds a cluster several times over (as the skim) and one output file in memory (at most
        write_back of one input file); the written-back files stay on the target until the cell ends — their
        total is write_back × what the jobs read, unknown before the run, estimated here as four passes."""
        p = self.p
        out = int(p.write_back * p.file_size * 1.5)
        memory = [Need(4 * p.cluster_size, f"a cluster of cluster_size {format_size(p.cluster_size)}, several times",
                       "lower cluster_size")]
        if out:
            memory.append(Need(out, f"an output file of write_back {p.write_back:g} × file_size", "lower write_back"))
        g = p.dataset_for(nclients)
        scratch = int(4 * p.write_back * p.files_per_job * p.file_size) * nclients
        return Needs(memory=tuple(memory), process_bytes=SKIM_PROCESS_BYTES, largest_buffer=max(p.cluster_size, out),
                     scratch=(Need(scratch, "written-back files, about four passes over each job's files",
                                   "lower write_back or duration"),) if scratch else (),
                     kept=Need(g.files * p.file_size, f"{g.files} event files of file_size {format_size(p.file_size)}",
                               "lower files_per_job or file_size"),
                     kept_dir=g.directory(), entries=g.files + 1, extent=p.file_size)

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        """The written-back files of every job, by the names jobs give them (the cell's directory is ours)."""
        try:
            names = driver.listdir(cell_dir)
        except FileNotFoundError:
            return
        for name in names:
            if OUTPUT.match(name):
                driver.remove_quietly(join(cell_dir, name))

    # -- client side -------------------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        p = self.p
        g = p.dataset_for(c.nclients, c.driver.layout())
        manifest = read_manifest(c.driver, g.directory())
        if manifest is None or len(manifest.get("files", [])) < g.files:
            raise FileNotFoundError(2, "the jobs' event files are missing (the coordinator writes them)", g.directory())
        c.state.update({"files": manifest["files"][:g.files], "dir": g.directory(),
                        "mine": list(range(c.rank * p.files_per_job, (c.rank + 1) * p.files_per_job)),
                        "outputs": [], "branches": {}})

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """The first pass starts cold, as the skim: the page cache cleared (unless --keep-cache)."""
        st = c.state
        st["cache"] = c.clear_cache([self._input(c, i) for i in st["mine"]])
        st["data_bytes"] = sum(f["bytes"] for f in st["files"])

    def _input(self, c: ClientContext, index: int) -> str:
        return join(c.state["dir"], c.state["files"][index]["name"])

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p, st = self.p, c.state
        duration, steady = int(p.duration), int(p.steady_after)
        reads, writes = rec.oplog(256), rec.oplog(16)
        io_ = SkimIO(c.driver, reads, p.strategy)
        job = _JobState(rec.start_ns, duration, steady, len(st["outputs"]), p.write_back)
        rng = np.random.default_rng([p.random_seed & 0xFFFFFFFF, c.rank, 0x10B5])
        passes = 0
        invalidated = True
        while not job.done:
            if passes and c.driver.caps.client_page_cache and not c.keep_cache:
                # a later pass: this job's own files out of this host's page cache (posix_fadvise), so it reads
                # the storage again; what the host or a server on it cached cannot be dropped without the others
                try:
                    invalidated = all(c.driver.invalidate(self._input(c, i)) for i in st["mine"]) and invalidated
                except OSError:
                    invalidated = False
            for k in rng.permutation(len(st["mine"])):
                self._pass(c, io_, writes, job, st["mine"][int(k)])
                if job.done:
                    break
            passes += 1
        reads.flush()
        writes.flush()
        cpu_eff_wall = (time.perf_counter_ns() - job.cpu0[1]) / NS if job.cpu0 else None
        cpu_eff_cpu = time.process_time() - job.cpu0[0] if job.cpu0 else None
        durable = job.durable or ("fsync" if c.driver.caps.fsync else "close" if c.driver.caps.close_commits else "none")
        rec.extra.update({
            "duration_s": duration, "steady_after_s": steady,
            "events_tl": job.events_tl.tolist(), "read_tl": _bins(reads, duration), "write_tl": _bins(writes, duration),
            "events": job.events, "events_written": job.written, "bytes_written": job.bytes_written,
            "bytes_selected_input": job.selected_input, "bytes_requested": reads.bytes,
            "steady_cpu_seconds": cpu_eff_cpu, "steady_wall_seconds": cpu_eff_wall,
            "passes": passes, "files_read": job.files_read, "outputs": job.listed, "outputs_count": job.outputs,
            "write_back": p.write_back, "counters": io_.counters(), "requests": io_.requests(),
            "io_wait_ns": io_.io_ns, "cache": st["cache"]})
        if p.write_back and job.outputs:
            warn_write_back(c, rec, phase, durable, True)
        self._warn_cache(c, rec, passes, invalidated)

    def _warn_cache(self, c: ClientContext, rec: PhaseRecorder, passes: int, invalidated: bool) -> None:
        """``page-cache``: reads that memory may have served — the first pass when the cache was not cleared
        before it, a later pass when this host's or a server's cache on this host could keep the files."""
        st = c.state
        fits = fits_in_ram(st["data_bytes"])
        size = format_size(st["data_bytes"])
        if st["cache"] in ("not-cleared", "kept"):
            why = "kept (--keep-cache)" if st["cache"] == "kept" else "not cleared"
            c.warn(rec, "page-cache", f"the page cache was {why} before the jobs and the {size} of files "
                                      f"{'fit' if fits else 'do not fit'} in RAM: reads may be served from memory")
        elif passes > 1 and fits:
            where = []
            if c.driver.caps.client_page_cache and not invalidated:
                where.append("this host's page cache (the files' pages could not be dropped between passes)")
            if c.server_pids:
                where.append("the page cache of the target's server on this host (not dropped mid-phase: that "
                             "would disturb the other jobs)")
            elif not c.driver.caps.client_page_cache:
                where.append("the target's server, whose cache storeval cannot clear")
            if where:
                c.warn(rec, "page-cache", f"the jobs read their files more than once and the {size} of files fit in "
                                          f"RAM: later passes may be served from {' and '.join(where)}")

    def _pass(self, c: ClientContext, io_: SkimIO, writes: OpLog, job: _JobState, index: int) -> None:
        """One pass over one input file (stopping at the first cluster boundary past the deadline), its
        selected events written back as one ROOT file."""
        p, st = self.p, c.state
        entry = st["files"][index]
        path = join(st["dir"], entry["name"])
        io_.handle = c.driver.open(path, "r")
        sink = out = None
        pending: list[Any] = []
        pending_events = written_here = 0
        try:
            tree = open_tree(io_, path, entry["bytes"])
            branches = st["branches"].get(index)
            if branches is None:
                branches = st["branches"][index] = select_branches(tree, p.fraction, p.random_seed)
            catalogue = {name: baskets(tree[name]) for name in branches}
            if p.write_back:
                sink = OutputSink()
                out = uproot.recreate(sink, compression=COMPRESSIONS[p.compression](p.compression_level))
            flush_at = entry.get("events_per_cluster", 1)
            for start, stop, arrays in cluster_arrays(tree, io_, branches, catalogue, tree_clusters(tree),
                                                      p.learn_entries, library="ak"):
                n = stop - start
                _touch(arrays)
                burn_cpu(n * p.cpu_per_event)
                if out is not None:
                    k = job.select(n)
                    if k:
                        rng = np.random.default_rng([p.random_seed & 0xFFFFFFFF, index, start, 0x3B])
                        pending.append(arrays[np.sort(rng.permutation(n)[:k])])
                        pending_events += k
                        written_here += k
                        job.selected_input += k / n * sum(sz for name in branches for (a, b, _, sz) in catalogue[name]
                                                          if a < stop and b > start)
                        if pending_events >= flush_at:  # baskets about as large as the input's
                            _extend(out, pending)
                            pending, pending_events = [], 0
                now = time.perf_counter_ns()
                io_.log.worked(now)  # analysis time is work, not a stall of the storage
                job.completed(n, now)
                if job.done:  # the first cluster boundary past the deadline
                    break
            job.files_read += 1
        finally:
            c.driver.close(io_.handle)
        if out is not None:
            if pending:
                _extend(out, pending)
            out.close()
            if written_here:
                self._write_back(c, writes, job, sink.data, written_here)

    def _write_back(self, c: ClientContext, writes: OpLog, job: _JobState, data: bytes, events: int) -> None:
        """One output file to the cell's directory, durably, timed as the job's."""
        name = f"jobs-{c.rank:04d}-{job.outputs:05d}.root"
        path = join(c.cell_dir, name)
        c.state["outputs"].append(path)  # before the write: cleanup removes it even if the write fails part-way
        view = memoryview(data)
        t0 = time.perf_counter_ns()
        h: Handle = c.driver.open(path, "w")
        try:
            write = c.driver.writer(h)
            for offset in range(0, len(view), WRITE_CHUNK):
                write([view[offset:offset + WRITE_CHUNK]], offset)
            job.durable = make_durable(c, h, True)
        finally:
            c.driver.close(h)
        t1 = time.perf_counter_ns()
        writes.add(t0, t1, len(data))
        job.outputs += 1
        job.written += events
        job.bytes_written += len(data)
        if len(job.listed) < MAX_LISTED:
            job.listed.append([name, events, len(data)])

    def cleanup(self, c: ClientContext) -> None:
        """The written-back files exist until the cell ends; each job removes its own."""
        for path in c.state.get("outputs", []):
            c.driver.remove_quietly(path)
        c.state["outputs"] = []

    # -- figures -------------------------------------------------------------------------------------------
    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        """One job's steady-window figures, from its per-second timelines."""
        if "events_tl" not in extra:
            return {}
        lo, hi = extra["steady_after_s"], extra["duration_s"]
        window = hi - lo
        steady = int(sum(extra["events_tl"][lo:hi]))
        read, written = sum(extra["read_tl"][lo:hi]), sum(extra["write_tl"][lo:hi])
        cpu, wall = extra.get("steady_cpu_seconds"), extra.get("steady_wall_seconds")
        return {"events": extra["events"], "events_tl": extra["events_tl"], "steady_events": steady, "window_s": window,
                "events_per_s": steady / window, "MBps_read": read / 1e6 / window,
                "MBps_written": written / 1e6 / window, "steady_bytes_read": read, "steady_bytes_written": written,
                "cpu_efficiency": cpu / wall if cpu is not None and wall else None,
                "events_written": extra["events_written"], "bytes_written": extra["bytes_written"],
                "bytes_selected_input": extra["bytes_selected_input"], "bytes_requested": extra["bytes_requested"],
                "written_fraction": extra["events_written"] / extra["events"] if extra["events"] else None,
                "passes": extra["passes"], "files_read": extra["files_read"], "outputs": extra["outputs_count"],
                "requests": extra.get("requests"), "counters": extra.get("counters", {}), "cache": extra.get("cache")}

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        """Aggregate = the jobs' steady figures summed (every job's window has the same length); per job: mean ±
        stderr over jobs."""
        from ..stats import mean_stderr

        jobs = [c for c in clients if "steady_events" in c]
        if not jobs:
            return {}
        window = jobs[0]["window_s"]

        def total(key: str) -> float:
            return sum(c.get(key) or 0 for c in jobs)

        per_job = mean_stderr([c["events_per_s"] for c in jobs])
        effs = [c["cpu_efficiency"] for c in jobs if c["cpu_efficiency"] is not None]
        eff = mean_stderr(effs) if effs else (None, None)
        events, written = total("events"), total("events_written")
        selected = total("bytes_selected_input")
        counters: dict[str, float] = {}
        for c in jobs:
            for k, v in c["counters"].items():
                counters[k] = counters.get(k, 0) + v
        return {"jobs": len(jobs), "window_s": window, "steady_events": int(total("steady_events")),
                "counters": counters, "requests": int(total("requests")),
                "events_per_s": total("steady_events") / window,
                "events_per_s_per_job": {"mean": per_job[0], "stderr": per_job[1]},
                "MBps_read": total("steady_bytes_read") / 1e6 / window,
                "MBps_written": total("steady_bytes_written") / 1e6 / window,
                "cpu_efficiency": eff[0], "cpu_efficiency_stderr": eff[1],
                "events": int(events), "events_written": int(written),
                "written_fraction": written / events if events else None,
                "bytes_written": int(total("bytes_written")), "bytes_selected_input": selected,
                "size_ratio": total("bytes_written") / selected if selected else None,
                "bytes_requested": int(total("bytes_requested")), "outputs": int(total("outputs")),
                "passes_per_job": total("passes") / len(jobs)}


class _JobState:
    """What one job counts while it runs: the events timeline, the deadline, the write-back's running total."""

    def __init__(self, start_ns: int, duration: int, steady: int, outputs: int, write_back: float) -> None:
        self.write_back = write_back
        self.start_ns, self.deadline, self.steady_ns = start_ns, start_ns + duration * NS, start_ns + steady * NS
        self.events_tl = np.zeros(duration + 1, np.int64)  # whole seconds; the last bin: past the deadline
        self.done = False
        self.cpu0: tuple[float, int] | None = None
        self.events = self.written = self.selected = self.bytes_written = self.files_read = 0
        self.selected_input = 0.0
        self.outputs = outputs
        self.listed: list[list[Any]] = []
        self.durable: str | None = None

    def select(self, n: int) -> int:
        """Events to keep of the next cluster of ``n`` (before :meth:`completed` counts it): the job's running
        total stays round(write_back × events read), half up."""
        keep = math.floor(self.write_back * (self.events + n) + 0.5) - self.selected
        self.selected += keep
        return keep

    def completed(self, n: int, now: int) -> None:
        """A cluster of ``n`` events is done at ``now``."""
        second = min((now - self.start_ns) // NS, len(self.events_tl) - 1)
        self.events_tl[second] += n
        self.events += n
        if self.cpu0 is None and now >= self.steady_ns:
            self.cpu0 = (time.process_time(), now)
        if now >= self.deadline:
            self.done = True


def _bins(log: OpLog, duration: int) -> list[int]:
    """A log's bytes per whole second from the job's start; the last bin holds everything past the deadline."""
    tl = np.zeros(duration + 1, np.int64)
    n = min(len(log.tl_bytes), duration)
    tl[:n] = log.tl_bytes[:n]
    tl[duration] = int(log.tl_bytes[duration:].sum())
    return tl.tolist()


def _extend(out: Any, pending: list[Any]) -> None:
    """Append selected events to the output tree (created with the first ones)."""
    import awkward as ak

    data = output_tree(ak.concatenate(pending) if len(pending) > 1 else pending[0])
    if TREE in out:
        out[TREE].extend(data)
    else:
        out[TREE] = data


def _touch(arrays: Any) -> None:
    """Use the data, as an analysis would: sum every branch."""
    import awkward as ak

    for name in arrays.fields:
        ak.sum(arrays[name])


def _per_job_text(r: Any) -> str:
    """Seed 000's figure: the jobs' mean events/s ± the standard error over jobs (averaged over repetitions)."""
    mean, err = r.extras.get("events_per_s_per_job.mean"), r.extras.get("events_per_s_per_job.stderr")
    if mean is None:
        return "–"
    from ..units import sig

    return f"{sig(mean.mean)} ± {sig(err.mean, 2)}" if err is not None else summary_text(mean)


__all__ = ["Jobs", "JobsParams", "output_tree"]
