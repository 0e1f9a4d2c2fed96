"""The workload toolkit: what storeval's own workloads share, public for any workload to import.

A workload imports the protocol from :mod:`storeval.workloads.base` (``Workload``, ``Params``, ``param``, the
report types) and its helpers from here — never from another workload's module, so no workload depends on
how another is written (``tests/test_toolkit.py`` checks storeval's own and every registered one).

Timed operations (``ops.py``, ``kernel.py``):

* ``run_ops`` — one ``io(bufs, offset)`` per offset, timed into an ``OpLog`` by the kernel, with stamps,
  verification, the stonewall and degraded-mode recovery as parameters; ``IOFailure`` is what it raises
  (the offset and the error's kind);
* ``measure`` — the kernel's loop itself, for items that are not offsets (paths, requests); ``NO_ARG`` is
  its ``arg`` when an operation takes the item alone; ``NEVER``, the deadline that never comes;
  ``ShortTransfer``, a transfer that moved fewer bytes than asked;
* ``choose_engine`` and ``Engine`` — which loop runs (python, psync, io_uring …) for an ``engine``
  parameter; ``DataJob``/``MetaJob`` — the native engine's jobs; ``run_parallel`` — one thread per call
  (``iodepth`` streams), the first error re-raised.

Writes made durable (``durability.py``): ``make_durable`` ends a file's writes inside the timed region
(fsync, or an object store's committing close); ``warn_write_back`` warns when a figure may include data
the storage does not hold yet.

Payload (``payload.py``): ``Payload`` — incompressible, per-sector-stamped data and its checker;
``aligned_buffer`` — a buffer O_DIRECT accepts; ``SECTOR``, the stamp's unit.

Failures as data (``degraded.py``): ``DegradedParams`` (``on_error``, ``retry_for``), ``Degraded`` — the
kernel's ``recover`` for retry/continue —, ``PhaseErrors`` — every error counted by kind and second.

Event files (``events.py``, ``rootfiles.py``): ``EventParams`` — what the ROOT event files are and how a job
reads them; ``ensure_dataset``/``read_manifest``/``GenParams`` — a pool of event files laid out once per
target and kept; ``SkimIO`` — between uproot and the driver (strategies, counters, I/O wait);
``open_tree``, ``cluster_arrays``, ``tree_clusters``, ``baskets``, ``select_branches`` — the event loop;
``touch`` — use the data as an analysis would; ``burn_cpu`` — busy work standing in for analysis code;
``SKIM_PROCESS_BYTES`` — what a client reading event files costs in memory (for ``needs``).
"""

from __future__ import annotations

from .degraded import Degraded, DegradedParams, PhaseErrors
from .durability import make_durable, warn_write_back
from .events import (SKIM_PROCESS_BYTES, EventParams, SkimIO, baskets, burn_cpu, cluster_arrays, open_tree,
                     select_branches, touch, tree_clusters)
from .kernel import NEVER, NO_ARG, DataJob, Engine, MetaJob, ShortTransfer, choose_engine, measure, run_parallel
from .ops import IOFailure, run_ops
from .payload import SECTOR, Payload, aligned_buffer
from .rootfiles import GenParams, ensure_dataset, read_manifest

__all__ = [
    # timed operations
    "run_ops", "IOFailure", "measure", "NO_ARG", "NEVER", "ShortTransfer", "choose_engine", "Engine", "DataJob",
    "MetaJob", "run_parallel",
    # durable writes
    "make_durable", "warn_write_back",
    # payload
    "Payload", "aligned_buffer", "SECTOR",
    # failures as data
    "Degraded", "DegradedParams", "PhaseErrors",
    # event files
    "EventParams", "SkimIO", "open_tree", "cluster_arrays", "tree_clusters", "baskets", "select_branches", "touch",
    "burn_cpu", "SKIM_PROCESS_BYTES", "ensure_dataset", "read_manifest", "GenParams",
]
