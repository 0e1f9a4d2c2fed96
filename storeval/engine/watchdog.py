"""The watchdog: when the coordinator itself is killed, someone must still clean up and say what happened.

``mpiexec`` ends a whole job when one rank dies (rank 0, the coordinator, included: MPICH's and Open MPI's
launchers send SIGKILL to every other rank within a millisecond), and a coordinator can be killed by the
OOM killer or a scheduler. The watchdog is a small process in a session of its own, so it outlives them.
The coordinator keeps a state file up to date (the running cell, its clients' PIDs and hosts, the phase);
the watchdog watches the coordinator and this host's clients through pidfds, so the kernel wakes it at
the first death and it can tell which rank died *first* (the one the user or the OOM killer hit; the
others were killed by the launcher after it). When the run ends the state file says so and it leaves.
When the coordinator disappears first, the watchdog:

1. stops any client of the cell still running on this host (by PID *and* start time, never by name) — and what
   the run's fork server forked, a client started before the coordinator could name it included —, and
   what the clients started and left running, through each workload kind's ``kill_orphans`` hook (only
   processes it can prove the run started);
2. removes the cell's files and the run's scratch directories through the targets' drivers — storeval's
   own names only, as the coordinator would have;
3. stores the cell and the run as failed in the results store, and
4. prints one line saying which client died during which phase, on the coordinator's stderr, which it
   shares: ``mpiexec`` forwards it and waits for it before it returns.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from ..core.cell import Cell
from ..core.process import alive, process_view, run_bounded
from ..redact import redact_text, visible
from ..units import plural

POLL = 0.2
LEAVING = b"!"  # the coordinator's last word on the wake pipe when it exits on its own (not killed)


def save_state(path: str | Path, state: dict[str, Any]) -> None:
    """Replace the state file atomically (the watchdog may read it at any moment)."""
    tmp = f"{path}.tmp"
    # only this user may read it: it holds the targets' options and the fault plan's undo commands
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        json.dump(state, f)
    os.replace(tmp, path)


def start(state_path: str | Path) -> subprocess.Popen | None:
    """Start the watchdog of this (coordinator) process; it reads ``state_path``.

    Its stdin is a pipe: the coordinator writes a byte after every change of the state file, so the watchdog
    follows at once (and sees EOF when the coordinator is gone). Its stdout is a pipe too, on which it says
    ``ready`` once it follows the coordinator (see :func:`wait_ready`). Its stderr is the coordinator's: under
    ``mpiexec`` that is a pipe the launcher keeps reading until every holder has closed it, so the
    watchdog's last line still reaches the user before ``mpiexec`` returns. It is born with the stop
    signals blocked and keeps them so: a Ctrl-C, or a batch scheduler's SIGTERM to every process of the
    job, must not take away the one process that cleans up if the coordinator is then killed."""
    import signal

    from ..interrupts import SHIELD

    me = psutil.Process()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, SHIELD)
    try:
        # -P: the working directory stays off its module path (a source checkout there is not the storeval running)
        proc = subprocess.Popen([sys.executable, "-P", "-m", "storeval.engine.watchdog", str(state_path), str(me.pid),
                                 repr(me.create_time())], start_new_session=True, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE)
    except OSError:
        return None
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    atexit.register(_leaving, proc, me.pid)
    return proc


def _leaving(proc: subprocess.Popen, pid: int) -> None:
    """At the coordinator's exit (atexit: not when a signal kills it) tell the watchdog it leaves on its own, so
    a run it did not finish (an error it could not handle) is not reported as the coordinator being killed."""
    if os.getpid() != pid or proc.stdin is None or proc.stdin.closed:
        return
    try:
        os.write(proc.stdin.fileno(), LEAVING)
    except (OSError, ValueError):
        pass


def wait_ready(proc: subprocess.Popen, stop: Any = lambda: False, limit: float = 60.0) -> bool:
    """Wait until the watchdog follows the coordinator (it may start late on a busy machine, and a death
    before that would go unnoticed) — as long as it lives and ``stop()`` is false, at most ``limit`` seconds."""
    deadline = time.monotonic() + limit
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline and not stop():
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            return os.read(fd, 64).startswith(b"ready")
        if proc.poll() is not None:
            return False
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
    if not alive(pid, created):  # the PID was reused: not the process the state file means
        os.close(fd)
        return None
    return fd


def _hup(pid: int, fd: int, created: float | None) -> int | None:
    """Our own read end of a rank's death pipe (its write end closes when the rank's files are released)."""
    try:
        mine = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None
    if not alive(pid, created):
        os.close(mine)
        return None
    return mine


class _Deaths:
    """Death signals of this host's clients and, under MPI, of every rank this process can see (this host's,
    and those of emulated nodes on this kernel: core.process.process_view), and who ended first.

    An MPI rank is followed through its death pipe: EOF comes as the dying rank's files are released, which
    is also when its MPI peers and the launcher can first notice — so the first EOF is the first death.
    Other processes are followed through pidfds (readable once the process has exited)."""

    def __init__(self) -> None:
        self.watching: dict[tuple[str, int], int] = {}  # (rank, pid) -> fd
        self.cell: Any = None
        self.first: list[str] = []  # the rank(s) seen ending in the first wake-up of this cell

    def follow(self, state: dict[str, Any]) -> None:
        cell = state.get("cell") or {}
        if cell.get("index") != self.cell:  # a client that died in an earlier cell is that cell's story
            self.cell, self.first = cell.get("index"), []
        host, view = os.uname().nodename, process_view()
        wanted: dict[tuple[str, int], dict[str, Any]] = {}
        for c in [*state.get("job", []), *cell.get("clients", [])]:
            seen = c.get("host") == host or c.get("view") == view
            if c.get("pid") and seen and (c.get("hup") is not None or not c.get("coordinator")):
                key = ("coordinator" if c.get("coordinator") else str(c["rank"]), c["pid"])
                wanted[key] = {**wanted.get(key, {}), **c}
        for key in [k for k in self.watching if k not in wanted]:
            os.close(self.watching.pop(key))
        for key, c in wanted.items():
            if key not in self.watching:
                fd = _hup(c["pid"], c["hup"], c.get("created")) if c.get("hup") is not None else None
                fd = fd if fd is not None else _pidfd(c["pid"], c.get("created"))
                if fd is not None:
                    self.watching[key] = fd

    @property
    def fds(self) -> list[int]:
        return list(self.watching.values())

    def ended(self, ready: list[int], coordinator: bool = False) -> None:
        """Note the processes whose descriptors woke us (and the coordinator, when its pidfd is among them:
        the order inside one wake-up is unknown, so all of them are named)."""
        gone = [key for key, fd in self.watching.items() if fd in ready]
        for key in gone:
            os.close(self.watching.pop(key))
        names = [r for r, _ in gone]
        if coordinator and gone and "coordinator" not in names:
            names.append("coordinator")
        if names and not self.first:
            self.first = sorted(names, key=lambda r: -1 if r == "coordinator" else int(r))


def main(path: str, pid: int, created: float) -> int:
    import signal

    from ..interrupts import SHIELD
    from ..core.process import set_process_name

    signal.pthread_sigmask(signal.SIG_BLOCK, SHIELD)  # inherited already; kept, whatever started it
    set_process_name("storeval-watch")
    try:  # wake up first when processes die (only root may ask; nobody else needs to)
        os.setpriority(os.PRIO_PROCESS, 0, -10)
    except OSError:
        pass
    state = _read(path)
    if state is None or state.get("done"):
        return 0
    coordinator = _pidfd(pid, created)
    deaths = _Deaths()
    coordinator_first = coordinator is None  # gone before this process could follow it: it died first
    exited = False  # the coordinator said it leaves on its own (atexit): it was not killed
    if coordinator is not None:
        deaths.follow(state)
        _say_ready()
        ended = _follow(path, coordinator, deaths, state)
        if ended is None:
            return 0
        coordinator_first, exited = ended
    else:  # its last word may be waiting on the pipe
        exited = _last_word(0)
    latest = _read(path)  # the coordinator may have finished just before it died
    if latest is not None:
        state = latest
    if state.get("done") or (latest is None and coordinator is None):
        return 0
    time.sleep(0.5)  # let the launcher finish stopping the others
    cell = state.get("cell")
    clients = (cell or {}).get("clients", [])
    for c in clients:  # clients of a killed coordinator may keep running: stop them (this host's, ours only)
        if c.get("host") == os.uname().nodename and c.get("pid") and c["pid"] != pid \
                and alive(c["pid"], c.get("created")):
            try:
                psutil.Process(c["pid"]).kill()
            except psutil.NoSuchProcess:
                pass
    _stop_forked(state.get("fork_server"))  # a client started before the coordinator could name it
    if state.get("scratch"):  # without the run's name nothing can be proven the run's
        _kill_orphans(state["scratch"])
    message = _message(state, deaths.first, coordinator_first, bool(state.get("job")), exited)
    undone = _undo(state, "undo")  # the faults in force first: a stopped server answers the cleanup
    removed = _clean(state)
    torn = _undo(state, "teardown")  # then the systems the run configured, once nothing needs them
    said = "; ".join(w for w in (undone, torn) if w)
    if said:
        message += f"; {said}"
    _record(state, message)
    tail = "storeval removed its files" if removed else "some of storeval's files could not be removed"
    try:
        os.write(2, f"error: {visible(redact_text(message))}; {tail}\n".encode())  # names are data
    except OSError:
        pass
    try:
        os.unlink(path)
    except OSError:
        pass
    return 1


def _stop_forked(server: dict[str, Any] | None) -> None:
    """Stop what the run's fork server forked and the server itself (by PID and start time: the run's own; every
    process it forks is one of the run's clients or samplers). Their own children are left to what each client
    set up to follow it (the command workload's guard kills its commands and removes their local files once its
    client is gone) and to the workloads' ``kill_orphans``: killed here, a guard could not do its work."""
    if not server or not isinstance(server.get("pid"), int) or not alive(server["pid"], server.get("created")):
        return
    try:
        fork = psutil.Process(server["pid"])
        victims = [*fork.children(), fork]
    except psutil.Error:
        return
    for p in victims:
        try:
            p.kill()
        except psutil.Error:
            pass


def _kill_orphans(run: str) -> None:
    """What the clients started and left (the command workload's programs and their daemons) must not write after
    the cleanup: each workload kind kills its own, those it can prove the run ``run`` started
    (``Workload.kill_orphans``). One kind's failure stops neither the others nor the cleanup."""
    from ..workloads import WORKLOADS

    try:
        kinds = list(WORKLOADS)
    except Exception:  # noqa: BLE001 - the registry failed to load: the cleanup goes on without it
        return
    for kind in kinds:
        try:
            WORKLOADS[kind].kill_orphans(run)
        except Exception:  # noqa: BLE001 - best effort, as the cleanup
            pass


def _say_ready() -> None:
    try:
        os.write(1, b"ready\n")
        devnull = os.open(os.devnull, os.O_WRONLY)  # nothing more to say there
        os.dup2(devnull, 1)
        os.close(devnull)
    except OSError:
        pass


def _last_word(wake: int) -> bool:
    """Whether the coordinator's last word, already on the wake pipe, says it left on its own."""
    try:
        return select.select([wake], [], [], 0)[0] != [] and LEAVING in os.read(wake, 65536)
    except OSError:
        return False


def _follow(path: str, coordinator: int, deaths: _Deaths, state: dict[str, Any]) -> tuple[bool, bool] | None:
    """Follow the run until it ends: None when the coordinator finished it, else (whether the coordinator was
    the first to die, whether it said it leaves on its own)."""
    wake: int | None = 0  # stdin: a byte per state change, EOF when the coordinator is gone
    exited = False
    while True:
        ready, _, _ = select.select([coordinator, *deaths.fds, *([wake] if wake is not None else [])], [], [], POLL)
        data = os.read(wake, 65536) if wake is not None and wake in ready else None
        exited = exited or (data is not None and LEAVING in data)
        if coordinator in ready:
            first = not deaths.first
            deaths.ended(ready, coordinator=True)
            return first, exited or (wake is not None and data is None and _last_word(wake))
        deaths.ended(ready)
        if data == b"":
            wake = None  # EOF: the coordinator closed it (done: the state says so, or is already removed) or died
            fresh = _read(path)
            if fresh is None or fresh.get("done"):
                return None
        fresh = _read(path)
        if fresh is not None:
            if fresh.get("done"):
                return None
            state.clear()
            state.update(fresh)
        deaths.follow(state)


def _message(state: dict[str, Any], first: list[str], coordinator_first: bool, under_mpi: bool,
             exited: bool = False) -> str:
    """Who ended first and where. A coordinator that exited on its own (``exited``) is never said to be killed."""
    cell = state.get("cell")
    gone = "exited before finishing its run" if exited else "was killed"
    known = {str(c["rank"]): c for c in [*state.get("job", []), *(cell or {}).get("clients", [])]}
    unit = "rank" if under_mpi else "client"

    def name(r: str) -> str:
        if r == "coordinator":
            return "rank 0 (the coordinator)" if under_mpi else "the storeval coordinator"
        return f"{unit} {r} (pid {known[r]['pid']} on {known[r]['host']})"

    if first == ["coordinator"]:
        what = f"{name('coordinator')} {gone}"
    elif first:
        who = " and ".join(name(r) for r in first)
        what = f"{who} died" + (" at the same moment" if len(first) > 1 else "")
    elif coordinator_first and under_mpi:
        what = f"rank 0 (the coordinator) {gone}"
    elif coordinator_first:
        what = f"the storeval coordinator {gone}"
    else:
        what = "a rank on another host died"
    where = f" during {state.get('phase') or 'the start'} of cell {cell['index']} ({cell['target']} · " \
            f"{cell['workload']} · {plural(cell['nclients'], 'client')})" if cell else " between cells"
    ended = "; mpiexec ended the job" if under_mpi else ""
    return f"{what}{where}{ended}"


def _undo(state: dict[str, Any], key: str) -> str:
    """Run the commands the dead run left under ``key``: ``undo``, the faults it had in force (a server it
    stopped, a node it killed; storeval/faults.py), or ``teardown``, the systems it configured and had not
    undone (storeval/systems.py). What it said, in a few words."""
    done, failed = [], []
    for item in state.get(key) or []:
        try:  # in a process group of its own, killed whole at its timeout and when it ends (core/process.py)
            r = run_bounded(list(item["argv"]), float(item.get("timeout") or 60))
            (done if r.code == 0 and not r.timed_out else failed).append(item.get("what", "undo"))
        except (OSError, KeyError, TypeError, ValueError):
            failed.append(item.get("what", "undo") if isinstance(item, dict) else "undo")
    words = []
    if done:
        words.append("undid " + ", ".join(done))
    if failed:
        words.append("could not undo " + ", ".join(failed))
    return "; ".join(words)


def _clean(state: dict[str, Any]) -> bool:
    from ..clean import release_scratch
    from ..drivers import make_driver
    from ..workloads import make_workload

    ok = True
    cell = state.get("cell")
    wl, ends = None, set()
    if cell:
        try:  # the cell's target, and the other targets its workload names (tpc's source holds its files too)
            wl = make_workload(cell["kind"], cell["params"])
            ends = {cell["target"], *(getattr(wl.p, param) for param in type(wl).target_params)}
        except Exception:  # noqa: BLE001 - best effort: the scratch directories are still released below
            ok = False
    for t in state.get("targets", []):
        try:
            driver = make_driver(t["url"], t["options"])
            driver.connect()
            if wl is not None and t["name"] in ends:
                wl.cell_cleanup(driver, cell["cell_dir"], cell["nclients"])
                ok = driver.rmdir_quietly(cell["cell_dir"]) and ok
            ok = release_scratch(driver, state["scratch"]) and ok
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
            store.write_cell(state["run_id"], Cell.from_state(cell), status="failed", error=message, started=now(), phases=[],
                             records=[], events=[{"kind": "died", "message": message}])
        store.end_run(state["run_id"], "failed")
    except Exception:  # noqa: BLE001 - the results store may itself be gone
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), float(sys.argv[3])))
