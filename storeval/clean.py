"""Scratch directories: who owns one, whether its run is still live, and removing those of dead runs.

A run writes an owner record, ``storeval-<run>/.storeval-run.json`` (host, PID and start time of the
coordinator and of its watchdog), right after it creates its scratch directory and removes it last, when
the directory is otherwise empty. So a run is *live* while one of those processes still exists on that
host with that start time; *dead* when none does; and *unknown* when that cannot be proven from here (no
owner record, or a run on another host). Only the directories of dead runs are removed — everything in
them is storeval's by construction (``storeval-<run>/`` is where storeval writes, and nowhere else) — and
only those whose name is exactly a run directory's. On a file system the shared remover
(:mod:`storeval.core.remove`) does it: no symbolic link followed, no mount crossed (a file system mounted
inside, say a FUSE mount a killed client left, is named and left whole, in a dry run too), any depth; on S3,
XRootD, HDFS and NFS the target's driver, over an explicit stack (any depth there too).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .core.process import alive
from .core.remove import MOUNTED, SKIP, Left, describe, local_root, remove_tree
from .drivers import Driver, StatResult, join
from .errors import StorevalError

OWNER = ".storeval-run.json"
RUN_DIR = re.compile(r"^storeval-\d{8}-\d{6}-[0-9a-f]{4}$")  # storeval-<run id>, see runner.new_run_id


def owner_record(run_id: str, watchdog_pid: int | None = None) -> dict[str, Any]:
    """What proves this run live: this process (the coordinator) and its watchdog, by PID and start time."""
    import psutil

    from . import __version__

    def who(pid: int) -> dict[str, Any] | None:
        try:
            return {"pid": pid, "started": psutil.Process(pid).create_time()}
        except psutil.Error:
            return None

    me = who(os.getpid()) or {"pid": os.getpid(), "started": None}
    return {"run_id": run_id, "host": os.uname().nodename, **me,
            "watchdog": who(watchdog_pid) if watchdog_pid else None, "storeval_version": __version__}


def claim_scratch(driver: Driver, scratch: str, owner: dict[str, Any]) -> None:
    """Create the run's scratch directory and its owner record (before anything else is written there)."""
    driver.ensure_dir(scratch)
    driver.put(join(scratch, OWNER), json.dumps(owner).encode())


def release_scratch(driver: Driver, scratch: str) -> bool:
    """Remove the run's scratch directory once only the owner record is left in it; True when it is gone.
    With anything else left the record stays, so the leftovers remain provably a dead run's. Never raises:
    a target that cannot be reached keeps the directory, and the caller says so."""
    try:
        names = driver.listdir(scratch)
    except FileNotFoundError:
        return True
    except Exception:  # noqa: BLE001
        return False
    if any(name != OWNER for name in names):
        return False
    try:
        if names:
            driver.remove_quietly(join(scratch, OWNER))
        return driver.rmdir_quietly(scratch)
    except Exception:  # noqa: BLE001
        return False


@dataclass
class RunDir:
    """One ``storeval-<run>/`` directory of a target and what is known of its run."""

    name: str
    state: str  # live | dead | unknown | foreign (never removed)
    why: str
    owner: dict[str, Any] | None = None
    bytes: int | None = None
    files: int | None = None
    uploads: int = 0  # incomplete multipart uploads aborted with it (object stores)
    left: list[Left] | None = None  # what removing it would leave (a mount inside it), from measure


def stays(left: list[Left]) -> str:
    """One line saying what a removal leaves and what to do: ``left alone: PATH (another file system is mounted
    there: unmount it, then clean again)``."""
    text = describe(left)
    if any(x.why == MOUNTED for x in left):
        text = text.replace(f"({MOUNTED})", f"({MOUNTED}: unmount it, then clean again)")
    return f"left alone: {text}"


def read_owner(driver: Driver, run_dir: str) -> dict[str, Any] | None:
    path = join(run_dir, OWNER)
    try:
        size = driver.stat(path).size
        if size > 64 << 10:
            return None
        buf = bytearray(size)
        n = driver.get_into(path, buf)
        owner = json.loads(bytes(buf[:n]))
    except (OSError, ValueError):
        return None
    return owner if isinstance(owner, dict) else None


def judge(owner: dict[str, Any] | None) -> tuple[str, str]:
    """(live | dead | unknown, why) for an owner record."""
    if owner is None:
        return "unknown", "no owner record (a run of an older storeval, or one just starting)"
    host = owner.get("host")
    if host != os.uname().nodename:
        return "unknown", f"a run on host {host}: whether it is live cannot be checked from here"
    procs = [p for p in (owner, owner.get("watchdog")) if isinstance(p, dict) and isinstance(p.get("pid"), int)]
    if not procs:
        return "unknown", "the owner record names no process"
    for p in procs:
        if alive(p["pid"], p.get("started")):
            return "live", f"its process {p['pid']} on {host} is running"
    return "dead", f"its process {procs[0]['pid']} on {host} has ended"


def _is_link(driver: Driver, path: str) -> bool:
    """A symbolic link (file systems only): removed as a link, never followed."""
    native = driver.native(path)
    return driver.scheme == "file" and isinstance(native, str) and os.path.islink(native)


def scan(driver: Driver, exclude: str | None = None) -> list[RunDir]:
    """The ``storeval-<run>/`` directories at the root of a target (but ``exclude``), each judged."""
    out = []
    for name in sorted(driver.listdir("")):
        if not RUN_DIR.match(name) or name == exclude:
            continue
        if _is_link(driver, name):
            out.append(RunDir(name, "foreign", "a symbolic link, not a directory storeval made"))
            continue
        owner = read_owner(driver, name)
        state, why = judge(owner)
        out.append(RunDir(name, state, why, owner))
    return out


def _walk(driver: Driver, path: str) -> Iterator[tuple[str, StatResult | None]]:
    """Everything under ``path`` through the driver, children before their directory (None: a link or a
    directory); an explicit stack, so a deep tree costs memory, not recursion."""
    stack: list[tuple[str, list[str], StatResult | None]] = [(path, list(driver.listdir(path)), None)]
    while stack:
        top, names, own = stack[-1]
        if not names:
            stack.pop()
            if len(stack) > 0:
                yield top, own
            continue
        p = join(top, names.pop())
        if _is_link(driver, p):
            yield p, None
            continue
        try:
            st = driver.stat(p)
        except FileNotFoundError:
            if driver.caps.directories:  # gone meanwhile
                continue
            st = StatResult(size=0, is_dir=True)  # an object store lists a prefix that no object is named after
        if st.is_dir:
            try:
                children = list(driver.listdir(p))
            except FileNotFoundError:
                continue
            stack.append((p, children, None if driver.caps.directories else st))
        else:
            yield p, st


def measure(driver: Driver, d: RunDir) -> RunDir:
    """Fill in the bytes and files a run directory holds, and what removing it would leave (a mount: its
    ``why`` then says so, in one line)."""
    root = local_root(driver)
    if root is not None:
        r = remove_tree(root, d.name, dry_run=True)
        d.bytes, d.files, d.left = r.bytes, r.files, r.left
        if r.left:
            d.why = f"{d.why}; {stays(r.left)}"
        return d
    total = files = 0
    for _, st in _walk(driver, d.name):
        if st is not None and not st.is_dir:
            total += st.size
            files += 1
    d.bytes, d.files = total, files
    return d


def remove_run_dir(driver: Driver, d: RunDir) -> bool:
    """Remove a dead run's directory and everything in it (directories only once empty); True when gone. What
    must stay (a file system mounted inside it) is raised as one line naming it, after the rest is removed."""
    root = local_root(driver)
    if root is not None:  # the owner record last, so what has to stay stays provably a dead run's
        r = remove_tree(root, d.name, keep_top=True, judge=lambda rel, name, st, fd: SKIP if rel == OWNER else None)
        if r.left:
            raise StorevalError(stays(r.left))
        r = remove_tree(root, d.name)
        if r.left:
            raise StorevalError(stays(r.left))
        return r.gone
    for path, st in _walk(driver, d.name):
        if st is None and not _is_link(driver, path):
            driver.rmdir_quietly(path)
        elif st is None or not st.is_dir:
            driver.remove_quietly(path)
    if hasattr(driver, "abort_stale_uploads"):  # S3: incomplete multipart uploads are invisible to listings
        aborted = driver.abort_stale_uploads(f"{d.name}/")
        d.uploads = len(aborted) if isinstance(aborted, list) else 0
    return driver.rmdir_quietly(d.name) and not driver.exists(d.name)
