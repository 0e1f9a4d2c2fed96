"""Metadata workload: what mdtest measures, on every kind of target.

Every client works on ``items`` directories and files spread over a directory tree of ``depth`` levels
and ``branching`` children per directory (mdtest -z/-b), in the leaves only with ``leaf_only`` (-L).
Modes are the seed studies' modalities:

* ``unique``: each client has a tree of its own (mdtest -u);
* ``single``: one tree, every client's items side by side in the same directories (mdtest default);
* ``shared``: one tree, and client 0 creates and removes every client's items, so the others work on
  items they did not create (mdtest -c).

``stat_stride`` makes client k stat, list, read and remove the items of client k+stride (mdtest -N), so no
client profits from its own cache. ``repeat_for`` makes the phases that leave the items as they are (stat,
list, read) repeat whole passes over them until each client's phase has lasted that long (fio's time_based):
a stat of 10,000 items takes ~30 ms on a local file system, too short to time (``short-phase``); repeated
passes see what the first left in the server's and client's caches, as a second mdtest run would. Rates include the closing barrier, as mdtest's do. Whatever a phase
needs that an earlier selected phase did not create (the tree for file phases, the files for a stat-only
run) is created untimed before it, and whatever is left at the end is removed untimed.
"""

from __future__ import annotations

import functools
import time
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..drivers.base import Capabilities, Driver, join
from ..core.oplog import OpLog, PhaseRecorder
from ..core.remove import SKIP, describe, local_root, remove_tree
from ..errors import StorevalError, error_kind, one_line
from ..units import format_size
from .base import Best, Chart, ClientContext, Duration, Figure, Need, Needs, Report, Scaling, Size, Workload, param
from .degraded import Degraded, DegradedParams, PhaseErrors
from .kernel import (NO_ARG, Engine, NEVER, MetaJob, ShortTransfer, choose_engine, measure, measure_mixed, pace_figures,
                     rate_held)

PHASES = ("tree-create", "dir-create", "dir-stat", "dir-list", "dir-remove",
          "file-create", "file-stat", "file-read", "file-mix", "file-remove", "tree-remove")
DEFAULT_PHASES = [p for p in PHASES if p not in ("dir-list", "file-mix")]  # mdtest's set
Phase = Literal["tree-create", "dir-create", "dir-stat", "dir-list", "dir-remove",
                "file-create", "file-stat", "file-read", "file-mix", "file-remove", "tree-remove"]
DIR_PHASES = frozenset({"dir-create", "dir-stat", "dir-list", "dir-remove"})
FILE_PHASES = frozenset({"file-create", "file-stat", "file-read", "file-mix", "file-remove"})
MIX_KINDS = ("create", "stat", "read", "remove")  # file-mix's operations, in the order of its logs
REPEATABLE = frozenset({"dir-stat", "dir-list", "file-stat", "file-read"})  # they leave the items as they are
# The operation of each phase (a FastOps field; the native engine's names are the same, unlink for remove).
OPERATION = {"tree-create": "mkdir", "dir-create": "mkdir", "dir-stat": "stat", "dir-list": "listdir",
             "dir-remove": "rmdir", "file-create": "create", "file-stat": "stat", "file-read": "read",
             "file-mix": "mix", "file-remove": "remove", "tree-remove": "rmdir"}
MAX_TREE_DIRS = 1_000_000
MAX_ITERATIONS = 10_000  # mdtest -i: each is a step of every phase, planned up front
NAME_BYTES = 160  # memory of one item's name in a list (a Python str of a cell-relative path, and its slot)
BLOCK_BYTES = 4096  # a file system's allocation unit: a directory takes one, a file's data whole ones
DEFAULT_ITEMS = 100  # per client, as in the Fermilab study's `mdtest -n 100`


def tree_size(depth: int, branching: int) -> int:
    """Directories in a tree of ``depth`` levels below its root, ``branching`` children each (root included)."""
    return sum(branching**k for k in range(depth + 1))


class MetaMix(BaseModel):
    """file-mix's shares of operations in percent: creates of new files, stats, whole-file reads and removes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    create: Annotated[int, Field(ge=0, le=100)] = 20
    stat: Annotated[int, Field(ge=0, le=100)] = 50
    read: Annotated[int, Field(ge=0, le=100)] = 20
    remove: Annotated[int, Field(ge=0, le=100)] = 10

    @model_validator(mode="after")
    def _whole(self) -> MetaMix:
        total = self.create + self.stat + self.read + self.remove
        if total != 100:
            raise ValueError(f"mix: create, stat, read and remove add up to {total}, not 100 (e.g. {{create: 20, "
                             "stat: 50, read: 20, remove: 10}})")
        return self


class MetadataParams(DegradedParams):
    items: Annotated[int, Field(ge=0)] | None = param(
        None, f"directories and files each client creates (mdtest -n); none: {DEFAULT_ITEMS}, unless items_per_dir "
              "is given", "count")
    items_per_dir: Annotated[int, Field(ge=0)] | None = param(
        None, "items in each directory that holds items (mdtest -I), instead of items", "count")
    depth: Annotated[int, Field(ge=0, le=64)] = param(0, "levels of the directory tree below its root (mdtest -z)",
                                                      "count")
    branching: Annotated[int, Field(ge=1)] = param(1, "subdirectories of each directory of the tree (mdtest -b)",
                                                   "count")
    leaf_only: bool = param(False, "items only in the tree's leaves (mdtest -L)")
    file_size: Size = param(0, "bytes written into each file as it is created and read back by file-read "
                               "(mdtest -w/-e); 0: empty files")
    iterations: Annotated[int, Field(ge=1, le=MAX_ITERATIONS)] = param(
        1, "times every phase runs (mdtest -i); the table gives max/min/mean over them", "count")
    stat_stride: Annotated[int, Field(ge=0)] = param(
        0, "client k stats, lists, reads and removes the items of client k + stride (mdtest -N), so no client is "
           "served by its own cache", "count")
    files_only: bool = param(False, "only the file phases (mdtest -F)")
    dirs_only: bool = param(False, "only the directory phases (mdtest -D)")
    mode: Literal["unique", "single", "shared"] = param(
        "unique", "unique: a tree per client (mdtest -u); single: one tree, every client's items side by side; "
                  "shared: client 0 creates and removes every client's items (mdtest -c)")
    random_order: bool = param(False, "stat, list and read the items in a random order (mdtest -R)")
    random_seed: int = param(0, "seed of random_order", "seed")
    deadline: Duration | None = param(
        None, "stonewall of the create phases (mdtest -W): at this time the clients agree on the most items any "
              "created and all finish up to it; none: no deadline")
    repeat_for: Duration | None = param(
        None, "the stat, list and read phases repeat whole passes over the items until they have lasted this long "
              "(fio's time_based); none: one pass")
    phases: list[Phase] = param(DEFAULT_PHASES, "the phases to run, always in the order listed here; dir-list is not "
                                                "in mdtest's default set")
    engine: Engine = param("auto", "what runs the timed loop: auto picks the native loop on local files and "
                                   "null:// (docs/kernel.md), python the Python loop; psync and io_uring force one")
    mix: MetaMix = param(MetaMix(), "file-mix's shares of creates (new files), stats, reads and removes of its "
                                    "client's files, in percent, e.g. {create: 20, stat: 50, read: 20, remove: 10}",
                         "percent by kind")
    iops: Annotated[float, Field(gt=0)] | None = param(None, "operations per second each client may do in file-mix, "
                                                             "paced open-loop (fio's rate_iops); none: as fast as "
                                                             "it can", "ops/s")

    @model_validator(mode="after")
    def _consistent(self) -> MetadataParams:
        if self.items is not None and self.items_per_dir is not None:
            raise ValueError("give items or items_per_dir, not both (mdtest -n or -I)")
        if self.files_only and self.dirs_only:
            raise ValueError("files_only and dirs_only exclude each other (choose one, or neither for both)")
        dirs = tree_size(self.depth, self.branching)
        if dirs > MAX_TREE_DIRS:
            raise ValueError(f"a tree of depth {self.depth} and branching {self.branching} has {dirs:,} directories "
                             f"(at most {MAX_TREE_DIRS:,}; lower depth or branching)")
        if not self.phases:
            raise ValueError(f"phases is empty (choose from {', '.join(PHASES)})")
        if len(set(self.phases)) != len(self.phases):
            raise ValueError("phases lists a phase twice (each runs once per iteration, in the order "
                             + ", ".join(PHASES) + ")")
        if self.deadline is not None and self.mode == "shared":
            raise ValueError("deadline needs every client to create its own items (mode unique or single, not shared)")
        if self.deadline is not None and self.deadline <= 0:
            raise ValueError("deadline must be more than 0 seconds (e.g. 30s)")
        if self.repeat_for is not None and self.repeat_for <= 0:
            raise ValueError("repeat_for must be more than 0 seconds (e.g. 1s)")
        return self

    @property
    def tree_dirs(self) -> int:
        return tree_size(self.depth, self.branching)

    @property
    def item_dirs(self) -> int:
        """Directories that hold items: the leaves with ``leaf_only``, else every directory of the tree."""
        return self.branching**self.depth if self.leaf_only else self.tree_dirs

    @property
    def items_per_client(self) -> int:
        if self.items_per_dir is not None:
            return self.items_per_dir * self.item_dirs
        return DEFAULT_ITEMS if self.items is None else self.items


class Tree:
    """Directory names of one tree, breadth first: node i's children are i*b+1 … i*b+b."""

    def __init__(self, root: str, owner: str, depth: int, branching: int, leaf_only: bool) -> None:
        n = tree_size(depth, branching)
        self.paths: list[str] = [join(root, f"t.{owner}.0")]
        for i in range(1, n):
            self.paths.append(f"{self.paths[(i - 1) // branching]}/t.{owner}.{i}")
        first_leaf = n - branching**depth
        self.item_dirs = self.paths[first_leaf:] if leaf_only else self.paths


def _fail(phase: str, path: str, exc: BaseException, rec: PhaseRecorder) -> StorevalError:
    if isinstance(exc, ShortTransfer):
        exc = OSError(f"short read: {exc.got} of {exc.wanted} bytes")
    rec.error(error_kind(exc))
    return StorevalError(f"{phase} of {path}: {one_line(exc)}")


def timed_loop(fn, args, log: OpLog, nbytes: int, phase: str, rec: PhaseRecorder, deadline_ns: int = NEVER, *,
               lo: int = 0, hi: int | None = None, arg=NO_ARG, expect: int | None = None, native=None,
               recover=None) -> int:
    """One ``fn(path)`` (``fn(path, arg)``) per path of ``args[lo:hi]``, timed into ``log`` by the kernel (see
    :func:`storeval.workloads.kernel.measure`) or its native ``job``; with ``deadline_ns``, stop after the
    first operation that ends past it. Returns the count."""
    return measure(log, nbytes, args, fn, lo=lo, hi=hi, arg=arg, expect=expect, deadline_ns=deadline_ns,
                   native=native, fail=lambda path, exc: _fail(phase, str(path), exc, rec), recover=recover)


class _Lister:
    """``listdir`` that counts the entries it saw (one object per phase, nothing made per listing)."""

    __slots__ = ("listdir", "entries")

    def __init__(self, listdir) -> None:
        self.listdir, self.entries = listdir, 0

    def __call__(self, path) -> None:
        self.entries += len(self.listdir(path))


class Metadata(Workload):
    kind = "metadata"
    Params = MetadataParams
    PHASES = PHASES
    # -- what the reports show (workloads/base.py: Report): mdtest's SUMMARY, max/min/mean/std dev of the rate --
    report = Report(
        columns=(Figure("max ops/s", "ops/s", value=lambda r: r.ops_per_s, stat="max"),
                 Figure("min ops/s", "ops/s", value=lambda r: r.ops_per_s, stat="min"),
                 Figure("mean ops/s", "ops/s", value=lambda r: r.ops_per_s, stat="mean"),
                 Figure("std dev", "ops/s", value=lambda r: r.ops_per_s, stat="stddev")),
        how_measured=("ops/s: operations of all clients / (exit of the closing barrier − first client start), mdtest's "
                      "rate; max/min/mean/std dev over iterations and repetitions, as mdtest's SUMMARY. Latency: per "
                      "operation."),
        rate=Best(lambda r: r.ops_per_s, ("dir-create", "file-create", "file-stat", "file-remove"), unit="ops/s",
                  each_phase=True, caption="mdtest's rate of each main phase"),  # the others: the phase table
        scaling=Scaling("ops_per_s", "ops/s", lambda ph: ph.ops_per_s, lambda ph: ph.client_ops_per_s[0]),
        charts=(Chart("ops/s per phase, by target, mode and clients", Figure("ops/s", "ops/s", value=lambda r: r.ops_per_s),
                      by="phase", y="ops/s", group=("mode",)),),  # seed 000 fig. 7
        section="Metadata")
    summary = "create, stat, list, read and remove directories and files in a tree (mdtest)"
    rate_includes_barrier = True  # mdtest's rate: ops / (last barrier exit - first start)
    p: MetadataParams

    # -- what runs ------------------------------------------------------------------------------
    @classmethod
    def phases_of(cls, params: MetadataParams) -> list[str]:
        chosen = set(params.phases)
        if params.files_only:
            chosen -= DIR_PHASES
        if params.dirs_only:
            chosen -= FILE_PHASES
        return [ph for ph in PHASES if ph in chosen]

    def skipped(self, caps: Capabilities) -> dict[str, str]:
        if caps.directories:
            return {}
        reason = "target has no directories (object store): nothing to create, stat or remove"
        return {ph: reason for ph in self.phases() if ph.startswith(("tree-", "dir-")) and ph != "dir-list"}

    def _ops(self, phase: str, nclients: int) -> int:
        p = self.p
        if phase.startswith("tree-"):
            return p.tree_dirs * (nclients if p.mode == "unique" else 1)
        if phase == "file-mix":
            return nclients * max(p.items_per_client, 1)
        if phase == "dir-list":
            return nclients * min(p.items_per_client, p.item_dirs)
        return nclients * p.items_per_client

    @staticmethod
    def client_extra(extra: dict, seconds: float, cpu_seconds: float) -> dict:
        """Passes over the items a repeated phase made, what a listing saw, file-mix's operations of each kind
        and, paced, the share of its pace it held."""
        return {**{k: extra[k] for k in ("passes", "entries_listed") if k in extra}, **(extra.get("mix") or {}),
                **pace_figures(seconds, extra)}

    @staticmethod
    def phase_extra(clients: list[dict], seconds: float, moved: float | None) -> dict:
        """Passes of the repeated phases; file-mix's operations of each kind, their share and rate over the
        phase's span, and its pace held."""
        passes = [c["passes"] for c in clients if "passes" in c]
        out: dict = {"passes": sum(passes)} if passes else {}
        mixed = [c for c in clients if "create_ops" in c]
        if mixed:
            total = sum(c[f"{k}_ops"] for c in mixed for k in MIX_KINDS)
            for k in MIX_KINDS:
                ops = sum(c[f"{k}_ops"] for c in mixed)
                out[f"{k}_ops"], out[f"{k}_share"] = ops, ops / max(total, 1)
                out[f"{k}_ops_per_s"] = ops / seconds
            out.update(rate_held(mixed))
        return out

    @staticmethod
    def direction(phase: str, params: dict) -> str | None:
        if not params.get("file_size"):
            return None
        return {"file-create": "write", "file-read": "read"}.get(phase)

    def expected(self, phase: str, nclients: int) -> tuple[int, int]:
        if self.p.repeat_for is not None and phase in REPEATABLE:
            return 0, 0  # as many passes as fit in repeat_for
        return 0, self._ops(phase, nclients)

    def needs(self, nclients: int, caps: Capabilities) -> Needs:
        """A phase holds the names of the items a client handles (relative and native, built before the timed
        loop; client 0 handles everyone's in shared mode), each client its trees' names and two file buffers;
        on the target every item and tree directory, and the files' data."""
        p = self.p
        chosen = set(self.phases())
        dirs = bool(chosen & DIR_PHASES) and caps.directories
        files = bool(chosen & FILE_PHASES)
        items = p.items_per_client
        name = 2 * (NAME_BYTES + 8 * p.depth)  # a name and its native form
        memory = [Need(items * name, f"the names of {items:,} items", "lower items or items_per_dir"),
                  Need(2 * p.tree_dirs * name, f"the names of {p.tree_dirs:,} tree directories",
                       "lower depth or branching")]
        leader = []
        if p.mode == "shared" and nclients > 1:  # client 0 creates and removes everyone's items
            leader.append(Need((nclients - 1) * items * name, f"the names of all {nclients * items:,} items",
                               "lower items or items_per_dir, or use mode unique or single"))
        if p.file_size:
            memory.append(Need(2 * p.file_size, f"2 buffers of file_size {format_size(p.file_size)}", "lower file_size"))
        trees = p.tree_dirs * (nclients if p.mode == "unique" else 1) if caps.directories else 0
        made_files = nclients * items if files else 0
        if "file-mix" in chosen:  # its creates add files until the phase after it puts the set back
            made_files += nclients * -(-max(items, 1) * p.mix.create // 100)
        made_dirs = nclients * items if dirs else 0
        block = BLOCK_BYTES
        scratch = [Need((trees + made_dirs) * block, f"{trees + made_dirs:,} directories",
                        "lower items, depth or branching, or --clients")]
        if made_files and p.file_size:
            scratch.append(Need(made_files * -(-p.file_size // block) * block,
                                f"{made_files:,} files of file_size {format_size(p.file_size)}",
                                "lower file_size, items or --clients"))
        return Needs(memory=tuple(memory), leader=tuple(leader), scratch=tuple(scratch),
                     entries=trees + made_dirs + made_files,
                     largest_buffer=p.file_size, extent=p.file_size)

    # -- names -------------------------------------------------------------------------------------
    def _tree(self, c: ClientContext, owner: int) -> Tree:
        p = self.p
        key = "s" if p.mode != "unique" else str(owner)
        cache = c.state.setdefault("trees", {})
        if key not in cache:
            cache[key] = Tree(c.cell_dir, key, p.depth, p.branching, p.leaf_only)
        return cache[key]

    def _items(self, c: ClientContext, owner: int, kind: str) -> list[str]:
        """Paths of client ``owner``'s directory (``d``) or file (``f``) items, round-robin over the item dirs."""
        dirs = self._tree(c, owner).item_dirs
        count = c.state.get("count", {}).get(kind, self.p.items_per_client)  # fewer after a stonewalled create
        return [f"{dirs[j % len(dirs)]}/{kind}.{owner}.{j}" for j in range(count)]

    def _target(self, c: ClientContext) -> int:
        """Whose items this client stats, lists, reads and removes (mdtest -N)."""
        return (c.rank + self.p.stat_stride) % c.nclients

    def _creators(self, c: ClientContext) -> list[int]:
        """Whose items this client creates: its own, or everyone's for client 0 in shared mode."""
        if self.p.mode == "shared":
            return list(range(c.nclients)) if c.rank == 0 else []
        return [c.rank]

    def _removes(self, c: ClientContext) -> list[int]:
        if self.p.mode == "shared":
            return list(range(c.nclients)) if c.rank == 0 else []
        return [self._target(c)]

    def _tree_owner(self, c: ClientContext) -> bool:
        return self.p.mode == "unique" or c.rank == 0

    def _native(self, c: ClientContext, paths: list[str]) -> list:
        return [c.driver.native(path) for path in paths]

    # -- client side -----------------------------------------------------------------------------
    def prepare(self, c: ClientContext) -> None:
        st = c.state
        st["ops"] = c.driver.fast_ops()
        st["data"] = np.random.default_rng([self.p.random_seed & 0xFFFFFFFF, c.rank]).bytes(self.p.file_size)
        st["buf"] = bytearray(self.p.file_size)
        st["has"] = {"tree": False, "dir": False, "file": False}
        st["dirs_ok"] = c.driver.caps.directories
        engine, note = choose_engine(self.p.engine, c.driver.native_io(), 1)
        if engine == "io_uring":  # not reached with depth 1 but by asking for it: one call at a time here
            engine, note = "psync", "metadata operations run one system call at a time: ran psync, not io_uring"
        st["engine"], st["engine_note"] = engine, note

    def _ensure(self, c: ClientContext, tree: bool, dirs: bool | None, files: bool | None) -> None:
        """Bring the namespace to the state the next phase expects, untimed (all clients decide alike)."""
        st, has = c.state, c.state["has"]
        if tree and not has["tree"]:
            if self._tree_owner(c) and st["dirs_ok"]:
                for path in self._tree(c, c.rank).paths:
                    st["ops"].mkdir(c.driver.native(path))
            has["tree"] = True
            c.comm.barrier()
        for kind, want in (("dir", dirs), ("file", files)):
            if want is None or want == has[kind] or (kind == "dir" and not st["dirs_ok"]):
                continue
            ops = st["ops"]
            if want:
                for owner in self._creators(c):
                    for path in self._items(c, owner, kind[0]):
                        (ops.mkdir(c.driver.native(path)) if kind == "dir"
                         else ops.create(c.driver.native(path), st["data"]))
            else:
                for owner in self._removes(c):
                    for path in self._items(c, owner, kind[0]):
                        (ops.rmdir if kind == "dir" else ops.remove)(c.driver.native(path))
            has[kind] = want
            c.comm.barrier()

    def before_phase(self, c: ClientContext, phase: str) -> None:
        """Bring the namespace to what ``phase`` expects, then make its operation's arguments — the paths
        and the native job over them — all untimed: mdtest's timed loop starts with its names made, and
        making 20,000 of them costs as much as stat-ing them."""
        self._undo_mix(c)
        if phase == "file-mix":
            self._ensure(c, True, None, True)
            c.state["mix_plan"] = self._mix_plan(c)
            return
        kind = phase.split("-")[0]
        if phase in ("dir-create", "file-create"):
            c.state.setdefault("count", {}).pop(kind[0], None)  # a create makes the full set again (or stonewalls anew)
        if phase == "tree-create":
            self._ensure(c, False, False, False)
            if c.state["has"]["tree"]:
                self._remove_tree(c)
        elif phase == "tree-remove":
            self._ensure(c, True, False, False)
        elif phase in ("dir-create", "file-create"):
            self._ensure(c, True, False if kind == "dir" else None, False if kind == "file" else None)
        else:
            self._ensure(c, True, True if kind == "dir" else None, True if kind == "file" else None)
        c.state["prepared"] = (phase, self._operation(c, phase))

    def _operation(self, c: ClientContext, phase: str) -> tuple:
        """(paths, call, native job or None, engine, argument, expected bytes) of one phase."""
        st = c.state
        paths = self._paths(c, phase)
        name = OPERATION[phase]
        arg = st["data"] if name == "create" else st["buf"] if name == "read" else NO_ARG
        expect = self.p.file_size if name == "read" else None
        fn = _Lister(st["ops"].listdir) if name == "listdir" else getattr(st["ops"], name)
        engine = "python" if name == "listdir" else st["engine"]  # listings stay in the driver's own call
        job = None
        if engine != "python":
            job = MetaJob(engine, "unlink" if name == "remove" else name, paths,
                          data=st["data"] if name == "create" else None,
                          buf=st["buf"] if name == "read" else None, expect=-1 if expect is None else expect)
        return paths, fn, job, engine, arg, expect

    def _remove_tree(self, c: ClientContext) -> None:
        if self._tree_owner(c) and c.state["dirs_ok"]:
            for path in reversed(self._tree(c, c.rank).paths):
                c.state["ops"].rmdir(c.driver.native(path))
        c.state["has"]["tree"] = False
        c.comm.barrier()

    def _paths(self, c: ClientContext, phase: str) -> list:
        """The native paths a phase works on, in the order it takes them."""
        p = self.p
        if phase in ("tree-create", "tree-remove"):
            paths = self._tree(c, c.rank).paths if self._tree_owner(c) else []
            return self._native(c, paths if phase == "tree-create" else list(reversed(paths)))
        kind = phase[0]
        if phase in ("dir-create", "file-create"):
            return self._native(c, [x for owner in self._creators(c) for x in self._items(c, owner, kind)])
        if phase in ("dir-remove", "file-remove"):
            return self._native(c, [x for owner in self._removes(c) for x in self._items(c, owner, kind)])
        if phase == "dir-list":
            dirs = self._tree(c, self._target(c)).item_dirs[: min(p.items_per_client, p.item_dirs)]
            return self._ordered(self._native(c, dirs), c)
        return self._ordered(self._native(c, self._items(c, self._target(c), kind)), c)

    # -- file-mix ------------------------------------------------------------------------------------
    def _mix_plan(self, c: ClientContext) -> tuple[list, bytearray]:
        """file-mix's operations, drawn and followed through before the phase (untimed): ``items`` operations on
        this client's files, each a create (a new name), stat, read or remove in the ``mix`` ratio; a stat, read
        or remove takes a file drawn from those that exist at that point (a create when none does). Returns
        the native paths and kinds (``MIX_KINDS`` indexes), and keeps the plan in the state for :meth:`_undo_mix`."""
        p = self.p
        mix = p.mix
        cuts = np.cumsum([mix.create, mix.stat, mix.read, mix.remove])
        n = max(p.items_per_client, 1)
        rng = np.random.default_rng([p.random_seed & 0xFFFFFFFF, c.rank, 0x313])
        draws, picks = rng.random(n) * 100, rng.random(n)
        pool = self._items(c, c.rank, "f")
        original = set(pool)
        dirs = self._tree(c, c.rank).item_dirs
        fresh = len(pool)
        paths, kinds = [], bytearray(n)
        for j in range(n):
            kind = int(np.searchsorted(cuts, draws[j], side="right")) if pool else 0
            if kind == 0:
                path = f"{dirs[fresh % len(dirs)]}/f.{c.rank}.{fresh}"
                fresh += 1
                pool.append(path)
            else:
                at = int(picks[j] * len(pool))
                path = pool[at]
                if kind == 3:
                    pool[at] = pool[-1]
                    pool.pop()
            kinds[j] = kind
            paths.append(path)
        c.state["mix_undo"] = (original, paths, kinds)
        c.state["mix_done"] = 0  # operations that ran (or were tried): _run_mix says how many
        return self._native(c, paths), kinds

    def _undo_mix(self, c: ClientContext) -> None:
        """Put the files back as they were before file-mix (untimed, before the next phase and at cleanup), from
        the operations that ran — all of them, or those before a failure or before a background part's end
        (workloads/concurrent.py): the original files they removed are created again (a create of a file that
        is there is no error), every other file they touched removed quietly. A create that fails fails the
        next phase."""
        undo = c.state.pop("mix_undo", None)
        if undo is None:
            return
        original, paths, kinds = undo
        ran = c.state.pop("mix_done", len(paths))
        ops, data = c.state["ops"], c.state["data"]
        for path in sorted({paths[j] for j in range(ran) if kinds[j] == 3} & original):
            ops.create(c.driver.native(path), data)
        for path in sorted(set(paths[:ran]) - original):
            c.driver.remove_quietly(path)

    def _run_mix(self, c: ClientContext, rec: PhaseRecorder) -> None:
        """file-mix on the kernel's :func:`measure_mixed` (Python loop): each kind of operation timed into a
        log of its own; ``mix`` in the record counts them, ``pace`` says what ``iops`` asked."""
        p, st = self.p, c.state
        paths, kinds = st.pop("mix_plan", None) or self._mix_plan(c)
        ops, data, buf = st["ops"], st["data"], st["buf"]

        def create(path):
            return ops.create(path, data)

        def read(path):
            return ops.read(path, buf)

        logs = tuple(rec.oplog(1024) for _ in MIX_KINDS)
        interval = int(round(1e9 / p.iops)) if p.iops else 0
        late = [0, 0]  # operations started late; when the paced loop ended
        rec.extra["io_engine"] = "python"
        fs = p.file_size
        try:
            st["mix_done"] = measure_mixed(logs, (fs, 0, fs, 0), paths, kinds, (create, ops.stat, read, ops.remove),
                                           expect=(None, None, fs, None), interval_ns=interval, late=late,
                                           fail=lambda path, exc: _fail("file-mix", str(path), exc, rec))
        except BaseException:
            st["mix_done"] = min(len(paths), sum(log.ops for log in logs) + 1)  # the one that failed may have acted
            raise
        mix: dict = {}
        for log, k in zip(logs, MIX_KINDS):
            mix[f"{k}_ops"] = log.ops
            mix[f"{k}_mean_us"] = log.hist.mean / 1e3 if log.ops and log.hist.mean is not None else None
        rec.extra["mix"] = mix
        if interval:
            rec.extra["pace"] = {"ops_per_s": p.iops, "late": late[0],
                                 "seconds": (late[1] - rec.start_ns) / 1e9 if late[1] else None}

    def run_phase(self, c: ClientContext, phase: str, rec: PhaseRecorder) -> None:
        p, st = self.p, c.state
        if phase == "file-mix":
            self._run_mix(c, rec)
            return
        has = st["has"]
        log = rec.oplog(1024)
        kind = phase.split("-")[0]
        prepared, operation = st.pop("prepared", (None, None))
        paths, fn, job, engine, arg, expect = operation if prepared == phase else self._operation(c, phase)
        name = OPERATION[phase]
        nbytes = p.file_size if phase in ("file-create", "file-read") else 0
        rec.extra["io_engine"] = engine
        if st["engine_note"]:
            c.warn(rec, "engine-fallback", st["engine_note"])
        recover = Degraded(p.on_error, p.retry_for, PhaseErrors(rec), c.driver) if p.on_error != "fail" else None
        run = functools.partial(timed_loop, fn, paths, log, nbytes, phase, rec, arg=arg, expect=expect, native=job,
                                recover=recover)
        if phase in ("dir-create", "file-create") and p.deadline is not None:
            self._stonewall(c, phase, rec, log, run, len(paths), nbytes, kind[0])
        elif phase in REPEATABLE:
            self._passes(rec, run)
        else:
            run()
        if phase.startswith("tree-"):
            has["tree"] = phase == "tree-create"
        elif phase.endswith(("-create", "-remove")):
            has[kind] = phase.endswith("-create")
        if name == "listdir":
            rec.extra["entries_listed"] = fn.entries

    def _passes(self, rec: PhaseRecorder, one_pass) -> None:
        """One pass over the items, or with ``repeat_for`` whole passes until the phase has lasted that long."""
        one_pass()
        if self.p.repeat_for is None:
            return
        until, passes = rec.start_ns + int(self.p.repeat_for * 1e9), 1
        while time.perf_counter_ns() < until:
            one_pass()
            passes += 1
        rec.extra["passes"] = passes

    def _stonewall(self, c: ClientContext, phase: str, rec: PhaseRecorder, log: OpLog, run, count: int, nbytes: int,
                   kind: str) -> None:
        """mdtest's stonewall with wear-out: create until the deadline, agree on the most any client made,
        everyone finishes to that many; later phases use that count."""
        run(rec.start_ns + int(self.p.deadline * 1e9))
        done = log.ops
        rec.extra["stonewall"] = {"bytes": done * nbytes, "ops": done, "t_ns": time.perf_counter_ns()}
        target = c.comm.allreduce_max(done)
        run(lo=done, hi=min(target, count))
        c.state.setdefault("count", {})[kind] = target

    def _ordered(self, items: list, c: ClientContext) -> list:
        if not self.p.random_order:
            return items
        order = np.random.default_rng([self.p.random_seed & 0xFFFFFFFF, c.rank, 0x57A7]).permutation(len(items))
        return [items[i] for i in order]

    def cleanup(self, c: ClientContext) -> None:
        """Remove what is left (a run without remove phases, like mdtest -C -T): items, then the tree."""
        if "has" not in c.state:
            return
        self._undo_mix(c)
        self._ensure(c, False, False, False)
        if c.state["has"]["tree"]:
            self._remove_tree(c)

    def cell_cleanup(self, driver: Driver, cell_dir: str, nclients: int) -> None:
        """After a failure: remove every name of storeval's metadata patterns under the cell directory."""
        remove_tree_of_patterns(driver, cell_dir, ("t.", "d.", "f."))

    @classmethod
    def describe_settings(cls, params: dict, exclude: set[str]) -> str:
        from ..units import format_size_compact

        mp = MetadataParams.model_validate(params)
        parts = [({"items", "items_per_dir", "depth", "branching", "leaf_only"}, f"{mp.items_per_client:,} items per client"),
                 ({"mode"}, f"{mp.mode} mode"),
                 ({"depth", "branching", "leaf_only"}, f"tree of depth {mp.depth} × branching {mp.branching} "
                  f"({mp.tree_dirs:,} dirs{', items in the leaves' if mp.leaf_only else ''})"),
                 ({"file_size"}, f"{format_size_compact(mp.file_size)} written and read per file" if mp.file_size else ""),
                 ({"stat_stride"}, f"stat/list/read/remove the items of rank+{mp.stat_stride}" if mp.stat_stride else ""),
                 ({"iterations"}, f"{mp.iterations} iterations" if mp.iterations > 1 else ""),
                 ({"deadline"}, f"create phases stonewalled at {mp.deadline:g} s (then every client makes as many as "
                                f"the busiest made by then; the item count is an upper bound)" if mp.deadline else ""),
                 ({"repeat_for"}, f"stat/list/read passes repeated for {mp.repeat_for:g} s (warm after the first)"
                                  if mp.repeat_for else "")]
        return ", ".join(text for keys, text in parts if text and not keys & exclude)


def remove_tree_of_patterns(driver: Driver, top: str, prefixes: tuple[str, ...]) -> None:
    """Removal of the entries under ``top`` whose names start with one of ``prefixes`` (storeval's own names),
    children first. On a file system through the shared remover (no link followed, not even ``top`` swapped for
    one; no mount crossed: what stays for such a reason is raised in one line); elsewhere through the driver,
    over an explicit stack (any depth)."""
    root = local_root(driver)
    if root is not None:
        r = remove_tree(root, top, keep_top=True,
                        judge=lambda rel, name, st, dir_fd: None if name.startswith(prefixes) else SKIP)
        if r.left:
            raise StorevalError(f"left alone: {describe(r.left)}")
        return
    stack: list[tuple[str, list[str]]] = []
    try:
        stack.append((top, list(driver.listdir(top))))
    except (FileNotFoundError, NotADirectoryError):
        return
    while stack:
        here, names = stack[-1]
        if not names:
            stack.pop()
            if stack:
                driver.rmdir_quietly(here)
            continue
        name = names.pop()
        if not name.startswith(prefixes):
            continue
        path = join(here, name)
        try:
            is_dir = driver.stat(path).is_dir
        except FileNotFoundError:
            continue
        if is_dir:
            try:
                stack.append((path, list(driver.listdir(path))))
            except (FileNotFoundError, NotADirectoryError):
                continue
        else:
            driver.remove_quietly(path)
