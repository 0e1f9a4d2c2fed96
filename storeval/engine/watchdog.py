"""The watchdog: when the coordinator itself is killed, someone must still clean up and say what happened.

``mpiexec`` ends a whole job when one rank dies (rank 0, the coordinator, included), and a coordinator can
be killed by the OOM killer or a scheduler. The watchdog is a small process in a session of its own, so it
outlives both. The coordinator keeps a state file up to date (the running cell, its clients' PIDs and
hosts, the phase); the watchdog polls it. When the run ends the file says so and the watchdog leaves.
When the coordinator disappears first, the watchdog:

1. notes which client process died first (that is the one to name);
2. stops any client of the cell still running on this host (by PID *and* start time);
3. removes the cell's files and the run's scratch directory through the target's driver — storeval's own
   names only, as the coordinator would have;
4. stores the cell as failed and the run as failed in the results store, and
5. prints one line saying which client died during which phase.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil

POLL = 0.2


def save_state(path: str | Path, state: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def start(state_path: str | Path) -> subprocess.Popen | None:
    """Start the watchdog of this (coordinator) process; it reads ``state_path``."""
    me = psutil.Process()
    try:
        return subprocess.Popen([sys.executable, "-m", "storeval.engine.watchdog", str(state_path), str(me.pid),
                                 repr(me.create_time())], start_new_session=True, stdin=subprocess.DEVNULL)
    except OSError:
        return None


def _alive(pid: int, created: float | None) -> bool:
    try:
        p = psutil.Process(pid)
        return (created is None or abs(p.create_time() - created) < 0.5) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _read(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main(path: str, pid: int, created: float) -> int:
    from .records import set_process_name

    set_process_name("storeval-watch")
    died: dict[str, float] = {}
    state: dict[str, Any] | None = None
    while True:
        fresh = _read(path)
        if fresh is None and state is None:
            return 0
        state = fresh or state
        if state.get("done"):
            return 0
        if not _alive(pid, created):
            break
        for c in (state.get("cell") or {}).get("clients", []):
            key = str(c["rank"])
            if key not in died and c.get("pid") and not _alive(c["pid"], c.get("created")):
                died[key] = time.time()
        time.sleep(POLL)
    latest = _read(path)  # the coordinator may have finished the cell just before it died
    if latest is not None:
        state = latest
    if state.get("done"):
        return 0
    time.sleep(1.0)  # let the launcher finish stopping the others
    cell = state.get("cell")
    clients = (cell or {}).get("clients", [])
    for c in clients:  # clients of a killed coordinator keep running: stop them (this host's, ours only)
        if c.get("host") == os.uname().nodename and c.get("pid") and _alive(c["pid"], c.get("created")):
            try:
                psutil.Process(c["pid"]).kill()
            except psutil.NoSuchProcess:
                pass
    first = min(died.items(), key=lambda kv: kv[1])[0] if died else None
    who = next((c for c in clients if str(c["rank"]) == first), None)
    if who is not None:
        what = f"client {who['rank']} (pid {who['pid']} on {who['host']}) died"
    else:
        what = "the coordinator was killed"
    where = f" during {state.get('phase') or 'the cell'} of cell {cell['index']} ({cell['target']} · {cell['workload']})" \
        if cell else ""
    message = f"{what}{where}; the run ended with it"
    removed = _clean(state) if cell else True
    _record(state, message)
    tail = "; storeval removed the cell's files" if removed else "; some of the cell's files could not be removed"
    print(f"error: {message}{tail}", file=sys.stderr, flush=True)
    try:
        os.unlink(path)
    except OSError:
        pass
    return 1


def _clean(state: dict[str, Any]) -> bool:
    from ..drivers import make_driver
    from ..workloads import make_workload

    cell = state["cell"]
    try:
        driver = make_driver(cell["url"], cell["options"])
        driver.connect()
        make_workload(cell["kind"], cell["params"]).cell_cleanup(driver, cell["cell_dir"], cell["nclients"])
        ok = driver.rmdir_quietly(cell["cell_dir"])
        driver.rmdir_quietly(state["scratch"])
        driver.shutdown()
        return ok
    except Exception:  # noqa: BLE001 - best effort: say so instead
        return False


def _record(state: dict[str, Any], message: str) -> None:
    from ..store import Store, now

    try:
        store = Store(state["results_dir"], create=False)
        cell = state.get("cell")
        if cell:
            c = SimpleNamespace(index=cell["index"], config=cell["config"], workload=cell["workload"],
                                kind=cell["kind"], params=cell["params"], factors=cell["factors"],
                                clients=cell["nclients"], repetition=cell["repetition"],
                                target=SimpleNamespace(name=cell["target"], url=cell["url"]))
            store.write_cell(state["run_id"], c, status="failed", error=message, started=now(), phases=[],
                             records=[], events=[{"kind": "died", "message": message}])
        store.end_run(state["run_id"], "failed")
    except Exception:  # noqa: BLE001 - the results store may itself be gone
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
