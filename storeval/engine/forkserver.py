"""The fork server clients are born from: preloaded with the client code, started with the stop signals blocked."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
from typing import Any

from .. import interrupts


# What every process the fork server forks would otherwise import for itself, once per client and cell (measured
# with -X importtime: ~90 ms of CPU per client, half a small run's CPU): the client's code, the engine module that
# holds its entry point, the sampler's, the multiprocessing parts its queue, barrier and arrays unpickle into,
# numpy.random, and what reading the plug-ins' entry points imports. A name that cannot be imported is skipped by
# the fork server.
PRELOAD = ("storeval.engine.clients", "storeval.engine.local", "storeval.probes.sampler", "multiprocessing.queues",
           "multiprocessing.synchronize", "multiprocessing.sharedctypes", "multiprocessing.heap", "numpy.random",
           "importlib_metadata._adapters")


def client_context(preload: tuple[str, ...] = ()) -> Any:
    """The multiprocessing context clients are born from; ``preload``: the heavy modules the run's workloads
    declare (``Workload.preload``), imported by the fork server before the first client."""
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*PRELOAD, *(m for m in preload if m not in PRELOAD)])
    return ctx


def start_fork_server() -> None:
    """Start the fork server (once) with the stop signals blocked: it and every process it forks inherit
    that mask, so a terminal's Ctrl-C reaches only the coordinator. Signals that arrive meanwhile wait in
    this process and are delivered, not lost, when the mask is restored.

    The server runs ``python -c …`` in this directory, which puts the directory first on its module path
    while it preloads the client code: run from a source checkout (``pip install . && storeval run``),
    the clients would import that tree instead of the installed storeval — without its native module, or
    another version altogether. ``PYTHONSAFEPATH`` keeps the directory off the path (the clients then get
    this process's path)."""
    from multiprocessing import forkserver, resource_tracker

    _short_temp_dir()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SHIELD)
    safe = os.environ.get("PYTHONSAFEPATH")
    os.environ["PYTHONSAFEPATH"] = "1"
    try:
        resource_tracker.ensure_running()  # it ignores SIGINT and SIGTERM, not SIGHUP; it unblocks those two here
        signal.pthread_sigmask(signal.SIG_BLOCK, interrupts.SHIELD)
        forkserver.ensure_running()
    finally:
        if safe is None:
            os.environ.pop("PYTHONSAFEPATH", None)
        else:
            os.environ["PYTHONSAFEPATH"] = safe
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def fork_server_process() -> dict[str, Any] | None:
    """The running fork server's PID and start time (``psutil``'s), or None: every process it forks is one of
    this run's clients or samplers, which the watchdog stops should the coordinator be killed before it could
    name them."""
    from multiprocessing import forkserver

    import psutil

    pid = getattr(forkserver._forkserver, "_forkserver_pid", None)  # noqa: SLF001 - the one place it is kept
    if not pid:
        return None
    try:
        return {"pid": int(pid), "created": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None


SUN_PATH = 107  # bytes of a UNIX socket's path (sun_path: 108 with the NUL)
LISTENER = len("/pymp-xxxxxxxx/listener-xxxxxxxx")  # what multiprocessing adds to the temporary directory


def _short_temp_dir() -> None:
    """multiprocessing puts the fork server's socket in a directory of its own under $TMPDIR: under a TMPDIR
    deeper than about 75 bytes that path passes 108 bytes and every cell failed with "AF_UNIX path too long".
    Then make that directory under /tmp (or /dev/shm) instead — before multiprocessing makes one — and leave
    $TMPDIR, which the clients use for their own files, as it is."""
    import tempfile
    from multiprocessing import util

    if len(os.fsencode(tempfile.gettempdir())) + LISTENER <= SUN_PATH:
        return
    for base in ("/tmp", "/dev/shm", "/var/tmp"):
        if os.access(base, os.W_OK | os.X_OK):
            saved = tempfile.tempdir
            tempfile.tempdir = base
            try:
                util.get_temp_dir()  # made (and removed at exit) by multiprocessing itself, now under base
            finally:
                tempfile.tempdir = saved
            return
