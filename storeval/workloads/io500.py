"""IO500-shaped runs: the list's phases, in its order, on any target, and its score.

The cell runs IO500's twelve scored phases and its extra ``ior-rnd4K-easy-read``, in the order the IO500 program
runs them (writes, the find, reads and stats, deletes; the hard read after the others):

* ``ior-easy``: a file per client, large transfers (IOR -F -t 2m), stonewalled writes with wear-out;
* ``ior-hard``: one shared file of 47,008-byte records interleaved across the clients (IOR -t 47008 -b 47008
  -s N, the bandwidth workload's ``block_size``), read back by the next client (-C);
* ``mdtest-easy``: empty files, a directory per client (mdtest -F -u), stat and delete by the next client (-N 1);
* ``mdtest-hard``: 3,901-byte files in one shared directory (mdtest -F -w 3901 -e 3901), stat, read and delete;
* ``find``: a walk of the whole namespace matching IO500's find (names containing ``01``, 3,901 bytes, newer than
  the timestamp taken before ior-hard-write), each entry one operation;
* ``ior-rnd4K-easy-read``: 4 KiB random reads of ior-easy's files (not scored, as in IO500).

Each part is storeval's own workload (bandwidth, metadata, made through the registry as any plug-in's would be)
with IO500's settings, in a directory of its own under the cell's. The score is IO500's: the geometric mean of the ior phases' GiB/s, the geometric mean of the mdtest
phases' and find's kIOPS, and the geometric mean of those two. A run that breaks one of IO500's rules (writes
stonewalled shorter than 300 s, a phase left out, a read served from memory) is labelled "IO500-shaped, not a
valid submission" with each rule it breaks.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ..drivers.base import Capabilities, Driver, join
from ..core.oplog import PhaseRecorder
from ..errors import StorevalError, one_line
from ..units import format_size
from . import make_workload
from .base import Best, ClientContext, Duration, Figure, Needs, Params, Report, Size, Workload, param

PHASES = ("ior-easy-write", "mdtest-easy-write", "ior-hard-write", "mdtest-hard-write", "find",
          "ior-easy-read", "mdtest-easy-stat", "ior-hard-read", "mdtest-hard-stat",
          "mdtest-easy-delete", "mdtest-hard-read", "mdtest-hard-delete", "ior-rnd4K-easy-read")
Phase = Literal["ior-easy-write", "mdtest-easy-write", "ior-hard-write", "mdtest-hard-write", "find",
                "ior-easy-read", "mdtest-easy-stat", "ior-hard-read", "mdtest-hard-stat",
                "mdtest-easy-delete", "mdtest-hard-read", "mdtest-hard-delete", "ior-rnd4K-easy-read"]
BANDWIDTH = ("ior-easy-write", "ior-easy-read", "ior-hard-write", "ior-hard-read")  # scored in GiB/s
METADATA = ("mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete", "mdtest-hard-write",
            "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete", "find")  # scored in kIOPS
WRITES = ("ior-easy-write", "mdtest-easy-write", "ior-hard-write", "mdtest-hard-write")  # stonewalled
# each phase: (the part that runs it, the part's own phase); find is this workload's own
PART = {"ior-easy-write": ("ior-easy", "write"), "ior-easy-read": ("ior-easy", "read"),
        "ior-hard-write": ("ior-hard", "write"), "ior-hard-read": ("ior-hard", "read"),
        "ior-rnd4K-easy-read": ("ior-rnd4K", "randread"),
        "mdtest-easy-write": ("mdtest-easy", "file-create"), "mdtest-easy-stat": ("mdtest-easy", "file-stat"),
        "mdtest-easy-delete": ("mdtest-easy", "file-remove"),
        "mdtest-hard-write": ("mdtest-hard", "file-create"), "mdtest-hard-stat": ("mdtest-hard", "file-stat"),
        "mdtest-hard-read": ("mdtest-hard", "file-read"), "mdtest-hard-delete": ("mdtest-hard", "file-remove")}
DIRS = {"ior-easy": "ior-easy", "ior-rnd4K": "ior-easy", "ior-hard": "ior-hard", "mdtest-easy": "mdtest-easy",
        "mdtest-hard": "mdtest-hard"}  # ior-rnd4K reads ior-easy's files
HARD_RECORD = 47008  # IO500's ior-hard transfer and block
HARD_FILE = 3901  # IO500's mdtest-hard file size
RND_TRANSFER = 4096
MIN_WRITE_SECONDS = {"regular": 300.0, "scc": 30.0}  # IO500's rules: the stonewall of the write phases
GiB = float(1 << 30)


class IO500Params(Params):
    ior_easy_size: Size = param(256 << 20, "bytes each client writes at most in ior-easy (IOR -b; the stonewall "
                                           "ends it sooner)")
    ior_easy_transfer: Size = param(2 << 20, "ior-easy's transfer size (IO500's default: -t 2m)")
    ior_hard_records: Annotated[int, Field(ge=1)] = param(
        4096, "47,008-byte records each client writes at most in ior-hard (IOR -s)", "count")
    mdtest_easy_files: Annotated[int, Field(ge=1)] = param(
        10000, "empty files each client creates at most in mdtest-easy (mdtest -n)", "count")
    mdtest_hard_files: Annotated[int, Field(ge=1)] = param(
        5000, "3,901-byte files each client creates at most in mdtest-hard (mdtest -n)", "count")
    stonewall: Duration = param(300.0, "write phases stop here and every client finishes up to the most any client "
                                       "did (IO500's stonewall with wear-out; its rules ask for 300 s)")
    rules: Literal["regular", "scc"] = param("regular", "the IO500 rules the run is checked against: regular (writes "
                                                        "of at least 300 s) or scc (30 s)")
    phases: list[Phase] = param(list(PHASES), "the phases to run, always in IO500's order; leaving a scored one "
                                              "out makes the run not a valid submission")
    random_seed: int = param(0, "seed of the payload and of ior-rnd4K's offsets", "seed")

    @model_validator(mode="after")
    def _consistent(self) -> IO500Params:
        if self.ior_easy_size % self.ior_easy_transfer:
            raise ValueError(f"ior_easy_size {format_size(self.ior_easy_size)} is not a whole number of "
                             f"ior_easy_transfer {format_size(self.ior_easy_transfer)}")
        if self.ior_easy_size % RND_TRANSFER:
            raise ValueError("ior_easy_size must be a multiple of 4 KiB (ior-rnd4K-easy-read reads it in 4 KiB pieces)")
        if self.stonewall <= 0:
            raise ValueError("stonewall must be more than 0 seconds (IO500: 300s)")
        if not self.phases:
            raise ValueError(f"phases is empty (choose from {', '.join(PHASES)})")
        if len(set(self.phases)) != len(self.phases):
            raise ValueError("phases lists a phase twice (each runs once, in IO500's order)")
        return self


def _is_bandwidth(phase: str) -> bool:
    return phase.startswith("ior-")


class IO500(Workload):
    kind = "io500"
    Params = IO500Params
    PHASES = PHASES
    report = Report(
        columns=(Figure("GiB/s", "GiB/s", caption="ior phases: aggregate bytes / (last end − first start), IOR's bw",
                        value=lambda r: r.bandwidth if _is_bandwidth(r.phase) else None, scale=1 / 1024),
                 Figure("kIOPS", "kIOPS", caption="mdtest phases and find: operations / (closing barrier − first "
                                                  "start), mdtest's rate; find: entries examined",
                        value=lambda r: r.ops_per_s if not _is_bandwidth(r.phase) else None, scale=1 / 1000),
                 Figure("MiB/s", "MiB/s", caption="bytes of all clients over the phase's span",
                        value=lambda r: r.bandwidth)),
        how_measured=("Each phase as IOR and mdtest time it, with IO500's settings (ior-easy: file per client; "
                      "ior-hard: 47,008-byte records interleaved in one shared file; mdtest-easy: empty files, a "
                      "directory per client; mdtest-hard: 3,901-byte files in one directory; find: entries examined "
                      "per second). Writes are stonewalled with wear-out. Score: IO500's — geometric mean of the ior "
                      "phases' GiB/s (GiB = 2^30 bytes), geometric mean of the mdtest phases' and find's kIOPS, and "
                      "the geometric mean of both; computed per cell, labelled with the IO500 rules the run broke."),
        read=Best(lambda r: r.bandwidth, ("ior-easy-read",), caption="ior-easy-read"),
        write=Best(lambda r: r.bandwidth, ("ior-easy-write",), caption="ior-easy-write"),
        rate=Best(lambda r: r.ops_per_s, ("mdtest-easy-write",), unit="ops/s", caption="mdtest-easy-write"),
        section="IO500")
    summary = "IO500's phases in its order (ior-easy/hard, mdtest-easy/hard, find) and its score"
    rate_includes_barrier = True  # mdtest's rates; for the ior phases the closing barrier adds what IOR's close does
    p: IO500Params

    def __init__(self, params: IO500Params) -> None:
        super().__init__(params)
        p = params
        wall = p.stonewall
        easy = dict(file_size=p.ior_easy_size, transfer_size=p.ior_easy_transfer, phases=["write", "read"],
                    reorder=True, fsync=True, deadline=wall, random_seed=p.random_seed)
        hard = dict(file_size=p.ior_hard_records * HARD_RECORD, transfer_size=HARD_RECORD, layout="shared-file",
                    block_size=HARD_RECORD, phases=["write", "read"], reorder=True, fsync=True, deadline=wall,
                    random_seed=p.random_seed)
        # ior-rnd4K reads the files ior-easy wrote: its "write" is declared (so nothing is laid out for it) and
        # never run
        rnd = dict(file_size=p.ior_easy_size, transfer_size=RND_TRANSFER, phases=["write", "randread"],
                   reorder=True, deadline=wall, random_seed=p.random_seed)
        md_easy = dict(items=p.mdtest_easy_files, files_only=True, mode="unique", stat_stride=1, deadline=wall,
                       phases=["file-create", "file-stat", "file-remove"], random_seed=p.random_seed)
        md_hard = dict(items=p.mdtest_hard_files, files_only=True, mode="single", stat_stride=1, file_size=HARD_FILE,
                       deadline=wall, phases=["file-create", "file-stat", "file-read", "file-remove"],
                       random_seed=p.random_seed)
        self.parts: dict[str, Workload] = {
            "ior-easy": make_workload("bandwidth", easy), "ior-hard": make_workload("bandwidth", hard),
            "ior-rnd4K": make_workload("bandwidth", rnd), "mdtest-easy": make_workload("metadata", md_easy),
            "mdtest-hard": make_workload("metadata", md_hard)}
        chosen = set(self.phases())
        self.used = [name for name in self.parts if any(PART.get(ph, ("",))[0] == name for ph in chosen)]

    # -- coordinator side -----------------------------------------------------------------------
    def skipped(self, caps: Capabilities) -> dict[str, str]:
        out = {}
        for ph in self.phases():
            if ph == "find":
                continue
            name, sub = PART[ph]
            why = self.parts[name].skipped(caps).get(sub)
            if why:
                out[ph] = why
        return out

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        if phase == "find":
            return 0, 0
        name, sub = PART[phase]
        return self.parts[name].expected(sub, nclients)

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """Every part's needs at once: a client holds all parts' buffers and names from the start, and the
        target holds every part's files until the deletes (ior's files until the end)."""
        parts = [self.parts[n].needs(nclients, caps) for n in self.used if n != "ior-rnd4K"]
        if not parts:
            return Needs()
        return Needs(memory=tuple(m for n in parts for m in n.memory), leader=tuple(m for n in parts for m in n.leader),
                     scratch=tuple(m for n in parts for m in n.scratch), entries=sum(n.entries for n in parts) + 4,
                     largest_buffer=max(n.largest_buffer for n in parts), extent=max(n.extent for n in parts),
                     threads=max(n.threads for n in parts))

    @staticmethod
    def direction(phase: str, params: dict[str, Any]) -> str | None:
        if phase in ("ior-easy-write", "ior-hard-write", "mdtest-hard-write"):
            return "write"
        if phase in ("ior-easy-read", "ior-hard-read", "mdtest-hard-read", "ior-rnd4K-easy-read"):
            return "read"
        return None

    @staticmethod
    def phase_extra(clients: list[dict[str, Any]], seconds: float, moved: float | None) -> dict[str, Any]:
        walker = next((c for c in clients if "found" in c), None)
        return {k: walker[k] for k in ("found", "entries", "expected") if k in walker} if walker else {}

    @staticmethod
    def client_extra(extra: dict[str, Any], seconds: float, cpu_seconds: float) -> dict[str, Any]:
        return {k: extra[k] for k in ("found", "entries", "expected", "passes") if k in extra}

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        for name, part in self.parts.items():
            part.cell_cleanup(driver, join(cell_dir, DIRS[name]), nclients)
        for d in dict.fromkeys(DIRS.values()):
            driver.rmdir_quietly(join(cell_dir, d))

    # -- the score --------------------------------------------------------------------------------
    @classmethod
    def cell_result(cls, params: dict[str, Any], phases: list[Any]) -> dict[str, Any] | None:
        """IO500's score of the cell from its phases' figures, and the rules the run broke (none: a result a
        submission can carry)."""
        p = cls.Params.model_validate(params)
        by = {ph.phase: ph for ph in phases}
        values: dict[str, float] = {}
        broken: list[str] = []
        minimum = MIN_WRITE_SECONDS[p.rules]
        for name in BANDWIDTH + METADATA:
            ph = by.get(name)
            if ph is None or ph.status != "ok" or not ph.seconds:
                broken.append(f"{name} did not run" + (f" ({ph.status}: {ph.reason})" if ph is not None and ph.reason
                                                       else ""))
                continue
            values[name] = ph.bandwidth_MiBps / 1024 if _is_bandwidth(name) else ph.ops_per_s / 1000
        if p.stonewall < minimum:
            broken.append(f"stonewall {p.stonewall:g} s is shorter than the {minimum:g} s IO500's {p.rules} rules "
                          "ask of every write phase")
        for name in WRITES:
            ph = by.get(name)
            if ph is not None and ph.status == "ok" and ph.seconds and ph.seconds < minimum:
                broken.append(f"{name} ran {ph.seconds:.3g} s, not the {minimum:g} s IO500's {p.rules} rules ask "
                              "(raise its size or file count so the stonewall ends it)")
        for ph in phases:
            codes = {w["code"] for w in ph.warnings + ph.flags}
            if "page-cache" in codes:
                broken.append(f"{ph.phase} may have been served from the page cache (IO500 reads must come from "
                              "the storage)")
        find = by.get("find")
        if find is not None and find.status == "ok" and find.extra.get("found") is not None:
            expected = find.extra.get("expected")
            if expected is not None and find.extra["found"] != expected:
                broken.append(f"find found {find.extra['found']:,} files, not the {expected:,} that match")
        bw = _geomean([values[n] for n in BANDWIDTH if n in values]) if all(n in values for n in BANDWIDTH) else None
        md = _geomean([values[n] for n in METADATA if n in values]) if all(n in values for n in METADATA) else None
        score = math.sqrt(bw * md) if bw is not None and md is not None else None
        lines = [f"[RESULT] {n:>20} {values[n]:14.6f} {'GiB/s' if _is_bandwidth(n) else 'kIOPS'} : time "
                 f"{by[n].seconds:.3f} seconds" for n in PHASES if n in values]
        return {"score": score, "bandwidth_GiBps": bw, "metadata_kIOPS": md, "phases": values,
                "valid": not broken, "rules": p.rules, "broken_rules": broken,
                "label": "IO500 result" if not broken else "IO500-shaped, not a valid submission",
                "submission": {"results": lines, "score": (f"[SCORE ] Bandwidth {bw:.6f} GiB/s : IOPS {md:.6f} kiops "
                                                            f": TOTAL {score:.6f}") if score is not None else None,
                               "settings": p.model_dump(mode="json")}}

    @staticmethod
    def result_lines(result: dict[str, Any]) -> list[str]:
        """The score as the terminal prints it under the cell's phases."""
        if result.get("score") is None:
            head = f"{result['label']}: no score (a scored phase did not run)"
        else:
            head = (f"{result['label']}: score {result['score']:.4g} (bandwidth {result['bandwidth_GiBps']:.4g} GiB/s, "
                    f"metadata {result['metadata_kIOPS']:.4g} kIOPS)")
        return [head] + [f"  breaks: {rule}" for rule in result["broken_rules"]]

    # -- client side ------------------------------------------------------------------------------
    def _ctx(self, c: ClientContext, name: str) -> ClientContext:
        return c.state["ctx"][name]

    def prepare(self, c: ClientContext) -> None:
        """A directory per part (client 0 makes them), then each part's own set-up in a context of its own: its
        directory, its state, the faults that strike its phases under its own phase names."""
        if c.rank == 0:
            for d in dict.fromkeys(DIRS[n] for n in self.used):
                c.driver.ensure_dir(join(c.cell_dir, d))
        c.comm.barrier()
        ctx = c.state["ctx"] = {}
        for name in self.used:
            faulted = frozenset(PART[ph][1] for ph in c.faulted if ph in PART and PART[ph][0] == name)
            ctx[name] = dataclasses.replace(c, cell_dir=join(c.cell_dir, DIRS[name]), state={}, faulted=faulted)
            self.parts[name].prepare(ctx[name])

    def before_phase(self, c: ClientContext, phase: str) -> None:
        if phase == "ior-hard-write" or ("stamp" not in c.state and phase == "find"):
            c.state["stamp"] = time.time()  # IO500's timestamp phase: find looks for files newer than this
        if phase == "find":
            c.server_cache = None
            return
        name, sub = PART[phase]
        ctx = self._ctx(c, name)
        if name == "ior-rnd4K":
            easy = c.state["ctx"].get("ior-easy")
            extent = easy.state.get("extent") if easy is not None else None
            if extent is not None:  # ior-easy's stonewall wrote this many transfers: read only those
                ctx.state["extent"] = extent * self.p.ior_easy_transfer // RND_TRANSFER
        self.parts[name].before_phase(ctx, sub)
        c.server_cache = ctx.server_cache

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        if phase == "find":
            self._find(c, rec)
            return
        name, sub = PART[phase]
        self.parts[name].run_phase(self._ctx(c, name), sub, rec)

    def check_after(self, c: ClientContext, phase: str) -> dict[str, Any] | None:
        if phase == "find":
            return None
        name, sub = PART[phase]
        return self.parts[name].check_after(self._ctx(c, name), sub)

    def cleanup(self, c: ClientContext) -> None:
        """Each part removes its own; then each client tries to remove the parts' directories — the last one
        to finish finds them empty."""
        for name, ctx in (c.state.get("ctx") or {}).items():
            self.parts[name].cleanup(ctx)
        for d in dict.fromkeys(DIRS[n] for n in self.used):
            c.driver.rmdir_quietly(join(c.cell_dir, d))

    # -- find --------------------------------------------------------------------------------------
    def _find(self, c: ClientContext, rec: PhaseRecorder) -> None:
        """IO500's find over the whole namespace the cell made: names containing ``01``, of 3,901 bytes, newer
        than the timestamp. Client 0 walks it alone, as GNU find does (IO500's pfind splits the walk across its
        ranks; a walk by one client is a lower bound of a parallel one): each entry examined (a stat: size,
        time, kind) is one operation; listing a directory is part of the time, not an operation."""
        if c.rank != 0:
            return
        log = rec.oplog(1024)
        stamp = c.state.get("stamp", 0.0)
        drv = c.driver
        found = entries = 0
        stack = [c.cell_dir]
        try:
            while stack:
                d = stack.pop()
                for n in sorted(drv.listdir(d)):
                    path = join(d, n)
                    t0 = time.perf_counter_ns()
                    st = drv.stat(path)
                    log.add(t0, time.perf_counter_ns(), 0)
                    entries += 1
                    if st.is_dir:
                        stack.append(path)
                    elif "01" in n and st.size == HARD_FILE and st.mtime > stamp:
                        found += 1
        except Exception as e:  # noqa: BLE001 - a namespace that cannot be walked fails the phase in one line
            rec.error(type(e).__name__)
            raise StorevalError(f"find under {c.cell_dir}: {one_line(e)}") from e
        finally:
            log.flush()
        rec.extra["found"], rec.extra["entries"] = found, entries
        if "mdtest-hard" in self.used and "mdtest-hard-write" in self.phases():
            made = self._ctx(c, "mdtest-hard").state.get("count", {}).get("f", self.parts["mdtest-hard"].p.items_per_client)
            rec.extra["expected"] = sum(1 for k in range(c.nclients) for j in range(made) if "01" in f"f.{k}.{j}")


def _geomean(values: list[float]) -> float | None:
    if not values or any(v <= 0 for v in values):
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))
