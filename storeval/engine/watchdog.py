"""The watchdog: when the coordinator itself is killed, someone must still clean up and say what happened.

``mpiexec`` ends a whole job when one rank dies (rank 0, the coordinator, included: MPICH's and Open MPI's
launchers send SIGKILL to every other rank within a millisecond), and a coordinator can be killed by the
OOM killer or a scheduler. The watchdog is a small process in a session of its own, so it outlives them.
The coordinator keeps a state file up to date (the running cell, its clients' PIDs and hosts, the phase);
the watchdog watches the coordinator and this host's clients through pidfds, so the kernel wakes it at
the first death and it can tell which rank died *first* (the one the user or the OOM killer hit; the
others were killed by the launcher after it). When the run ends the state file says so and it leaves.
When the coordinator disappears first, the watchdog:

1. stops any client of the cell still running on this host (by PID *and* start time, never by name);
2. removes the cell's files and the run's scratch directories through the targets' drivers — storeval's
   own names only, as the coordinator would have;
3. stores the cell and the run as failed in the results store, and
4. prints one line saying which client died during which phase — on the launcher's stderr, which it
   opened at start, because the coordinator's own stderr (a pipe to ``mpiexec``) is gone by then.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil

POLL = 0.2
LAUNCHERS = ("mpiexec", "mpirun", "orterun", "prterun", "srun")


def save_state(path: str | Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (the watchdog may read it at any moment)."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def _launcher(pid: int) -> int:
    """The PID whose stderr the user sees: the MPI launcher above the coordinator, else the coordinator."""
    try:
        for parent in psutil.Process(pid).parents():
            if parent.name().startswith(LAUNCHERS):
                return parent.pid
    except psutil.Error:
        pass
    return pid


def start(state_path: str | Path) -> subprocess.Popen | None:
    """Start the watchdog of this (coordinator) process; it reads ``state_path``."""
    me = psutil.Process()
    try:
        return subprocess.Popen([sys.executable, "-m", "storeval.engine.watchdog", str(state_path), str(me.pid),
                                 repr(me.create_time()), str(_launcher(me.pid))], start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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


def _pidfd(pid: int, created: float | None) -> int | None:
    """A descriptor that becomes readable when ``pid`` ends (None when it is already gone or not ours)."""
    try:
        fd = os.pidfd_open(pid)
    except OSError:
        return None
    if not _alive(pid, created):  # the PID was reused: not the process the state file means
        os.close(fd)
        return None
    return fd


class _Deaths:
    """pidfds of this host's clients of the running cell, and the order in which they ended."""

    def __init__(self) -> None:
        self.fds: dict[int, str] = {}  # fd -> rank
        self.key: Any = None
        self.first: list[str] = []  # the rank(s) seen ending in the first wake-up of this cell

    def follow(self, cell: dict[str, Any] | None) -> None:
        key = (cell or {}).get("index"), tuple((c["rank"], c.get("pid")) for c in (cell or {}).get("clients", []))
        if key == self.key:
            return
        for fd in self.fds:
            os.close(fd)
        self.fds, self.key, self.first = {}, key, []
        host = os.uname().nodename
        for c in (cell or {}).get("clients", []):
            if c.get("pid") and c.get("host") == host and not c.get("coordinator"):
                fd = _pidfd(c["pid"], c.get("created"))
                if fd is not None:
                    self.fds[fd] = str(c["rank"])

    def ended(self, ready: list[int]) -> None:
        ranks = sorted((self.fds.pop(fd) for fd in ready if fd in self.fds), key=int)
        for fd in ready:
            if fd in self.fds:
                os.close(fd)
        if ranks and not self.first:
            self.first = ranks


def main(path: str, pid: int, created: float, launcher: int) -> int:
    from .records import set_process_name

    set_process_name("storeval-watch")
    try:  # our own handle on the terminal or file the user reads, taken while the launcher is alive
        report = os.open(f"/proc/{launcher}/fd/2", os.O_WRONLY | os.O_APPEND)
        os.dup2(report, 2)  # and anything going wrong in here lands there too
    except OSError:
        report = 2
    coordinator = _pidfd(pid, created)
    if coordinator is None:
        return 0
    deaths = _Deaths()
    state: dict[str, Any] | None = None
    coordinator_first = False
    while True:
        fresh = _read(path)
        if fresh is None and state is None:
            return 0
        state = fresh or state
        if state.get("done"):
            return 0
        deaths.follow(state.get("cell"))
        ready, _, _ = select.select([coordinator, *deaths.fds], [], [], POLL)
        if ready:
            deaths.ended([fd for fd in ready if fd != coordinator])
            if coordinator in ready:
                coordinator_first = not deaths.first
                break
    latest = _read(path)  # the coordinator may have finished just before it died
    if latest is not None:
        state = latest
    if state.get("done"):
        return 0
    time.sleep(0.5)  # let the launcher finish stopping the others
    cell = state.get("cell")
    clients = (cell or {}).get("clients", [])
    for c in clients:  # clients of a killed coordinator may keep running: stop them (this host's, ours only)
        if c.get("host") == os.uname().nodename and c.get("pid") and c["pid"] != pid \
                and _alive(c["pid"], c.get("created")):
            try:
                psutil.Process(c["pid"]).kill()
            except psutil.NoSuchProcess:
                pass
    message = _message(state, deaths.first, coordinator_first, launcher != pid)
    removed = _clean(state)
    _record(state, message)
    tail = "storeval removed its files" if removed else "some of storeval's files could not be removed"
    os.write(report, f"error: {message}; {tail}\n".encode())
    try:
        os.unlink(path)
    except OSError:
        pass
    return 1


def _message(state: dict[str, Any], first: list[str], coordinator_first: bool, under_launcher: bool) -> str:
    cell = state.get("cell")
    clients = {str(c["rank"]): c for c in (cell or {}).get("clients", [])}
    unit = "rank" if under_launcher else "client"
    if first:
        who = " and ".join(f"{unit} {r} (pid {clients[r]['pid']} on {clients[r]['host']})" for r in first)
        what = f"{who} died" + (" at the same moment" if len(first) > 1 else "")
    elif coordinator_first and under_launcher:
        what = "rank 0 (the coordinator) was killed"
    elif coordinator_first:
        what = "the storeval coordinator was killed"
    else:
        what = "a rank on another host died"
    where = f" during {state.get('phase') or 'the start'} of cell {cell['index']} ({cell['target']} · " \
            f"{cell['workload']} · {cell['nclients']} clients)" if cell else ""
    ended = "; mpiexec ended the job" if under_launcher else ""
    return f"{what}{where}{ended}"


def _clean(state: dict[str, Any]) -> bool:
    from ..drivers import make_driver
    from ..workloads import make_workload

    ok = True
    cell = state.get("cell")
    for t in state.get("targets", []):
        try:
            driver = make_driver(t["url"], t["options"])
            driver.connect()
            if cell and t["name"] == cell["target"]:
                make_workload(cell["kind"], cell["params"]).cell_cleanup(driver, cell["cell_dir"], cell["nclients"])
                ok = driver.rmdir_quietly(cell["cell_dir"]) and ok
            ok = driver.rmdir_quietly(state["scratch"]) and ok
            driver.shutdown()
        except Exception:  # noqa: BLE001 - best effort: the message says so instead
            ok = False
    return ok


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
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])))
