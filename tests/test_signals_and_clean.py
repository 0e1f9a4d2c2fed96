"""Stop signals at any moment (Ctrl-C, a second Ctrl-C, SIGTERM from a batch scheduler, under mpiexec too),
hang detection a busy machine does not fool, and the scratch directories of dead runs (``storeval clean``).

Moments are found by progress (a handler installed, a file or a process appearing), never by guessing how
long something takes; the only wall-clock figures here are guards against a hang, far beyond any real need.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import duckdb
import psutil
import pytest

from storeval.clean import OWNER
from storeval.engine.forkserver import client_context, start_fork_server
from storeval.engine.watch import HangClock
from storeval.probes.sampler import Sampler

from .helpers import dead_process, load_json, storeval, tree_checksums

MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec (pip package mpich) is not installed")
HOST = os.uname().nodename
GUARD = 600  # seconds: a guard against a hang only

LONG = """\
targets: {{t: {{url: 'file://{target}'}}}}
workloads: {{bw: {{bandwidth: {{file_size: 256MiB, transfer_size: 4KiB, direct: true, phases: [write, read]}}}}}}
clients: [2]
repetitions: 2
probe_interval: 0.2s
"""


class Run:
    """A storeval run started as from a terminal (its own session, Ctrl-C at its default), whose processes the
    test follows while it waits for moments."""

    def __init__(self, cwd: Path, *args: str, ranks: int = 0) -> None:
        cmd = [sys.executable, "-m", "storeval", *args]
        if ranks:
            cmd = [str(MPIEXEC), "-n", str(ranks), *cmd]
        self.proc = subprocess.Popen(cmd, cwd=cwd, start_new_session=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        self.seen: dict[int, float] = {}  # every process of the run: pid -> start time
        self.rc: int | None = None
        self.out = self.err = ""

    def follow(self) -> list[psutil.Process]:
        try:
            top = psutil.Process(self.proc.pid)
            procs = [top, *top.children(recursive=True)]
        except psutil.Error:
            return []
        for p in procs:
            try:
                self.seen.setdefault(p.pid, p.create_time())
            except psutil.Error:
                pass
        return procs

    def wait_for(self, what: str, check: Callable[[], bool]) -> None:
        deadline = time.monotonic() + GUARD
        while self.proc.poll() is None:
            self.follow()
            if check():
                return
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        self.proc.kill()
        raise AssertionError(f"the run ended or hung before {what}: {self.proc.communicate()[1]}")

    def signal(self, sig: int, group: bool = True) -> None:
        self.follow()
        try:
            if group:
                os.killpg(self.proc.pid, sig)  # what a terminal does on Ctrl-C: the whole foreground process group
            else:
                os.kill(self.proc.pid, sig)
        except ProcessLookupError:  # it has already ended
            pass

    def finish(self) -> None:
        self.out, self.err = self.proc.communicate(timeout=GUARD)
        self.rc = self.proc.returncode

    def left_running(self) -> list[str]:
        """Processes of the run still running, once each had its chance to end (they end by themselves)."""
        deadline = time.monotonic() + GUARD
        while True:
            alive = []
            for pid, created in self.seen.items():
                try:
                    p = psutil.Process(pid)
                    if abs(p.create_time() - created) < 0.01 and p.status() != psutil.STATUS_ZOMBIE:
                        alive.append(f"{pid} {p.name()}")
                except psutil.Error:
                    pass
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.05)

    # -- moments ---------------------------------------------------------------------------------------------
    def handlers_installed(self) -> bool:
        """storeval's own stop-signal handling is in place (SIGTERM is caught: Python alone catches only SIGINT)."""
        try:
            with open(f"/proc/{self.proc.pid}/status") as f:
                caught = next(int(line.split()[1], 16) for line in f if line.startswith("SigCgt:"))
        except (OSError, StopIteration):
            return False
        return bool(caught >> (signal.SIGTERM - 1) & 1)

    def named(self, name: str) -> list[psutil.Process]:
        out = []
        for p in self.follow():
            try:
                if p.name() == name:
                    out.append(p)
            except psutil.Error:
                pass
        return out

    def fork_server(self) -> bool:
        for p in self.follow():
            try:
                if "forkserver" in " ".join(p.cmdline()):
                    return True
            except psutil.Error:
                pass
        return False


def _long_study(tmp_path: Path, target: Path) -> Path:
    path = tmp_path / "long.yaml"
    path.write_text(LONG.format(target=target))
    return path


def _has_data(target: Path, files: int = 1, size: int = 0) -> Callable[[], bool]:
    def check() -> bool:
        found = [p for p in target.rglob("bw.*") if _size(p) >= size]
        return len(found) >= files
    return check


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _stored(results: Path) -> tuple[list, list]:
    """(run statuses, [(cell status, error)]) of a results store; empty when no run was begun."""
    db = results / "storeval.duckdb"
    if not db.exists():
        return [], []
    with duckdb.connect(str(db), read_only=True) as con:
        tables = {t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "studies" not in tables:
            return [], []
        return (con.execute("SELECT status FROM studies").fetchall(),
                con.execute("SELECT status, error FROM cells ORDER BY cell_id").fetchall())


def _assert_nothing_left(run: Run, target: Path, results: Path) -> None:
    assert os.listdir(target) == []
    if results.exists():
        assert [n for n in os.listdir(results) if n.startswith(".storeval-")] == []  # no .watch, no .tmp
    assert run.left_running() == []


# -- Ctrl-C at any moment ------------------------------------------------------------------------------------

MOMENTS: dict[str, Callable[[Run, Path, Path], bool]] = {
    "handlers-installed": lambda run, tmp, target: run.handlers_installed(),
    "results-directory": lambda run, tmp, target: (tmp / "storeval-results").exists(),
    "results-store": lambda run, tmp, target: (tmp / "storeval-results" / "storeval.duckdb").exists(),
    "watchdog-starting": lambda run, tmp, target: any((tmp / "storeval-results").glob(".storeval-*.watch")),
    "watchdog-running": lambda run, tmp, target: bool(run.named("storeval-watch")),
    "fork-server-starting": lambda run, tmp, target: run.fork_server(),
    "clients-starting": lambda run, tmp, target: bool(run.named("storeval-client")),
    "clients-writing": lambda run, tmp, target: any(target.rglob("bw.*")),
}


@pytest.mark.parametrize("moment,after", [*[(m, 0.0) for m in MOMENTS],
                                          ("handlers-installed", 0.05), ("handlers-installed", 0.2),
                                          ("fork-server-starting", 0.05), ("fork-server-starting", 0.2)])
def test_ctrl_c_at_any_moment_exits_130_without_a_trace_and_leaves_nothing(tmp_path, target, moment, after):
    run = Run(tmp_path, "run", str(_long_study(tmp_path, target)), "--quiet", "--json", "out.json")
    run.wait_for(moment, lambda: MOMENTS[moment](run, tmp_path, target))
    if after:  # between two observable moments: a little later than the first
        time.sleep(after)
    run.signal(signal.SIGINT)
    run.finish()
    assert run.rc == 130, run.err
    assert "Traceback" not in run.err and "KeyboardInterrupt" not in run.err, run.err
    _assert_nothing_left(run, target, tmp_path / "storeval-results")
    runs, cells = _stored(tmp_path / "storeval-results")
    assert runs in ([], [("interrupted",)])
    # cells stored before the signal was seen are ok (on a busy machine the moment may be seen late), the one
    # it stopped is interrupted, the rest not run
    statuses = [status for status, _ in cells]
    rest = statuses[next((i for i, st in enumerate(statuses) if st != "ok"), len(statuses)):]
    assert rest == [] or (rest[0] in ("interrupted", "not-run") and rest[1:] == ["not-run"] * (len(rest) - 1)), cells
    if (tmp_path / "out.json").exists():
        assert load_json(tmp_path / "out.json")["status"] == "interrupted"


def test_a_second_ctrl_c_while_the_cell_stops_still_stores_it_as_interrupted(tmp_path, target):
    run = Run(tmp_path, "run", str(_long_study(tmp_path, target)), "--quiet")
    run.wait_for("the clients write", _has_data(target))
    clients = run.named("storeval-client")
    run.signal(signal.SIGINT)
    run.wait_for("a client stops", lambda: any(not c.is_running() or c.status() == psutil.STATUS_ZOMBIE
                                               for c in clients))
    run.signal(signal.SIGINT)  # the coordinator is winding the cell down
    run.finish()
    assert run.rc == 130, run.err
    assert "Traceback" not in run.err
    assert _stored(tmp_path / "storeval-results") == (
        [("interrupted",)], [("interrupted", "interrupted by the user (Ctrl-C)"),
                             ("not-run", "the run was interrupted before this cell")])
    _assert_nothing_left(run, target, tmp_path / "storeval-results")


# -- SIGTERM ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", ["coordinator", "every-process"])
def test_sigterm_stops_the_run_like_ctrl_c_keeps_partial_records_and_exits_143(tmp_path, target, to):
    run = Run(tmp_path, "run", str(_long_study(tmp_path, target)), "--quiet", "--json", "out.json")
    run.wait_for("the clients wrote 32 MiB each", _has_data(target, 2, 32 << 20))  # progress is counted per 16 MiB
    run.signal(signal.SIGTERM, group=to == "every-process")  # a batch scheduler signals every process of the job
    run.finish()
    assert run.rc == 143, run.err
    assert "Traceback" not in run.err
    runs, cells = _stored(tmp_path / "storeval-results")
    assert runs == [("interrupted",)]
    assert cells[1] == ("not-run", "the run was interrupted before this cell")
    if to == "coordinator":
        assert cells[0] == ("interrupted", "terminated by SIGTERM (a batch scheduler or kill)")
    else:  # whoever noticed first: the coordinator, or a client that got it too
        assert cells[0] in [("interrupted", "terminated by SIGTERM (a batch scheduler or kill)"),
                            *[("interrupted", f"client {r} was stopped by SIGTERM during write") for r in (0, 1)]]
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        written = con.execute("SELECT sum(bytes) FROM records WHERE cell_id = 0 AND phase = 'write'").fetchone()[0]
    assert written and written > 0  # what the clients did before they were stopped is kept
    assert load_json(tmp_path / "out.json")["status"] == "interrupted"
    _assert_nothing_left(run, target, tmp_path / "storeval-results")


def test_a_client_stopped_from_outside_interrupts_its_cell_and_says_which(tmp_path, target):
    run = Run(tmp_path, "run", str(_long_study(tmp_path, target)), "--quiet")
    run.wait_for("the clients write", _has_data(target))
    client = sorted(run.named("storeval-client"), key=lambda p: p.pid)[0]
    client.send_signal(signal.SIGTERM)
    run.finish()
    assert run.rc == 143, run.err
    runs, cells = _stored(tmp_path / "storeval-results")
    assert runs == [("interrupted",)]
    assert cells[0][0] == "interrupted"
    assert cells[0][1] in (f"client {r} was stopped by SIGTERM during write" for r in (0, 1))
    _assert_nothing_left(run, target, tmp_path / "storeval-results")


@needs_mpiexec
@pytest.mark.parametrize("sig,rc", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_stop_signal_to_mpiexec_stops_every_rank_and_stores_the_cell_interrupted(tmp_path, target, sig, rc):
    run = Run(tmp_path, "run", "--target", f"file://{target}", "--workload", "bandwidth", "--clients", "3",
              "--set", "file_size=256MiB", "--set", "transfer_size=4KiB", "--set", "direct=true",
              "--set", "phases=write,read", "--repetitions", "2", "--quiet", ranks=3)
    run.wait_for("the ranks write", _has_data(target))
    run.signal(sig, group=False)  # mpiexec forwards it to every rank
    run.finish()
    assert run.rc == rc, run.err
    assert "Traceback" not in run.err
    runs, cells = _stored(tmp_path / "storeval-results")
    assert runs == [("interrupted",)]
    from storeval.interrupts import reason, signal_name

    # rank 0 noticed first, or another rank that got it too (mpiexec signals them all) and told it
    assert cells[0] in [("interrupted", reason(sig)),
                        *[("interrupted", f"client {r} was stopped by {signal_name(sig)} during write")
                          for r in (1, 2)]]
    assert cells[1] == ("not-run", "the run was interrupted before this cell")
    _assert_nothing_left(run, target, tmp_path / "storeval-results")


# -- every wait on the way out is bounded ---------------------------------------------------------------------

def _sampler_with_samples() -> Sampler:
    start_fork_server()
    sampler = Sampler(client_context(), {"self": os.getpid()}, 0.05)
    deadline = time.monotonic() + GUARD
    while len({row[0] for row in sampler.rows}) < 2 and time.monotonic() < deadline:
        sampler.drain()
        time.sleep(0.01)
    assert len({row[0] for row in sampler.rows}) >= 2
    return sampler


def test_stopping_a_dead_sampler_does_not_wait_and_keeps_its_samples():
    sampler = _sampler_with_samples()
    os.kill(sampler.pid, signal.SIGKILL)
    got: list = []
    t = threading.Thread(target=lambda: got.append(sampler.stop(grace=3600)), daemon=True)
    t.start()
    t.join(GUARD)  # it would wait the hour if it waited on a dead process
    assert not t.is_alive()
    assert len({row[0] for row in got[0]}) >= 2  # the samples sent before it died


def test_the_probe_sampler_ends_with_its_coordinator(tmp_path):
    """A killed coordinator's sampler ends by itself (its parent, the fork server, outlives the coordinator)."""
    script = tmp_path / "coordinator.py"
    script.write_text("import time\n"
                      "from storeval.engine.forkserver import client_context, start_fork_server\n"
                      "from storeval.probes.sampler import Sampler\n"
                      "if __name__ == '__main__':\n"
                      "    start_fork_server()\n"
                      "    s = Sampler(client_context(), {}, 0.05)\n"
                      "    print(s.pid, flush=True)\n"
                      "    time.sleep(3600)\n")
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    sampler = psutil.Process(int(proc.stdout.readline()))
    proc.kill()
    proc.wait()
    sampler.wait(GUARD)  # psutil.TimeoutExpired if it stays


def test_the_watchdog_acts_even_when_it_starts_after_its_coordinator_died(tmp_path, target):
    """However late a busy machine schedules it, the watchdog cleans up, records and says what happened."""
    from storeval.store import Store

    results = tmp_path / "res"
    store = Store(str(results))
    store.begin_run("20990101-000000-abcd", study={}, study_hash="x", version="0", command_line="storeval run",
                    source=None, engine="local", environment={})
    scratch = "storeval-20990101-000000-abcd"
    (target / scratch / "cell-0000").mkdir(parents=True)
    (target / scratch / "cell-0000" / "bw.0").write_bytes(b"x" * 4096)
    (target / scratch / OWNER).write_text("{}")
    gone = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    created = psutil.Process(gone.pid).create_time()
    gone.kill()
    gone.wait()
    state = results / ".storeval-20990101-000000-abcd.watch"
    cell = {"index": 0, "config": 0, "target": "t", "url": f"file://{target}", "options": {}, "workload": "bw",
            "kind": "bandwidth", "params": {"file_size": 4096, "transfer_size": 4096}, "factors": {}, "nclients": 1,
            "repetition": 0, "cell_dir": f"{scratch}/cell-0000", "clients": []}
    state.write_text(json.dumps({"run_id": "20990101-000000-abcd", "results_dir": str(results), "scratch": scratch,
                                 "targets": [{"name": "t", "url": f"file://{target}", "options": {}}],
                                 "cell": cell, "phase": "write", "done": False, "job": []}))
    r = subprocess.run([sys.executable, "-m", "storeval.engine.watchdog", str(state), str(gone.pid), repr(created)],
                       capture_output=True, text=True, timeout=GUARD)
    assert r.returncode == 1
    assert r.stderr == ("error: the storeval coordinator was killed during write of cell 0 (t · bw · 1 client); "
                        "storeval removed its files\n")
    assert os.listdir(target) == [] and not state.exists()
    with duckdb.connect(str(results / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status FROM studies").fetchall() == [("failed",)]


# -- hangs count from progress, less the time a busy machine did not run the client ----------------------------

class _Clock:
    def __init__(self) -> None:
        self.t = 0
        self.waited: dict[str, int] = {}

    def advance(self, seconds: float, starved: bool = False) -> None:
        self.t += int(seconds * 1e9)
        if starved:  # runnable all along, but no CPU was free
            self.waited["1"] = self.waited.get("1", 0) + int(seconds * 1e9)


def _hang_clock(clock: _Clock, timeout: float = 3.0) -> HangClock:
    return HangClock(timeout, {0: 1}, now=lambda: clock.t, waits=lambda pid: dict(clock.waited))


def test_a_slowly_progressing_client_is_never_hung_however_long_its_phase():
    clock = _Clock()
    hc = _hang_clock(clock)
    for beat in range(100):  # 200 s of phase, a sign of progress every 2 s
        assert not hc.hung(0, beat)
        for _ in range(20):
            clock.advance(0.1)
            assert not hc.hung(0, beat)


def test_a_client_without_progress_is_hung_only_after_the_timeout():
    clock = _Clock()
    hc = _hang_clock(clock)
    hung_at = None
    for step in range(100):
        if hc.hung(0, 7):
            hung_at = step * 0.1
            break
        clock.advance(0.1)
    assert hung_at is not None and 3.0 < hung_at <= 3.3


def test_a_client_the_machine_does_not_schedule_is_not_hung():
    clock = _Clock()
    hc = _hang_clock(clock)
    assert not hc.hung(0, 7)
    clock.advance(1.0)
    assert not hc.hung(0, 7)  # the first reading of its CPU waits
    for _ in range(300):  # 30 s runnable without a CPU
        clock.advance(0.1, starved=True)
        assert not hc.hung(0, 7)
    clock.advance(3.5)  # now it sleeps: a hang
    assert hc.hung(0, 7)


def test_a_coordinator_that_looks_late_does_not_take_a_starved_client_for_a_hung_one():
    clock = _Clock()
    hc = _hang_clock(clock)
    assert not hc.hung(0, 7)
    clock.advance(10.0, starved=True)  # neither ran for 10 s: the coordinator did not look, the client waited
    assert not hc.hung(0, 7)
    for _ in range(100):
        clock.advance(0.1, starved=True)
        assert not hc.hung(0, 7)
    hung_after = 0.0
    while not hc.hung(0, 7):  # now it sleeps: what was not seen counts for at most the reading delay
        clock.advance(0.1)
        hung_after += 0.1
    assert 3.0 - 0.75 < hung_after <= 3.0 - 0.75 + 0.2


# -- the scratch directories of dead runs ------------------------------------------------------------------------





def _run_dir(target: Path, name: str, owner: dict | None, files: dict[str, bytes]) -> Path:
    d = target / name
    d.mkdir()
    if owner is not None:
        (d / OWNER).write_text(json.dumps(owner))
    for rel, data in files.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_bytes(data)
    return d


def _killed_run(tmp_path: Path, target: Path) -> str:
    """A run killed with its watchdog (SIGKILL to every process, as when a node's jobs are killed): its scratch
    directory stays. Returns its name."""
    run = Run(tmp_path, "run", str(_long_study(tmp_path, target)), "--quiet", "--results", "killed")
    run.wait_for("both clients write", _has_data(target, 2))
    procs = run.follow()
    names = {p.pid: p.name() for p in procs}
    for p in sorted(procs, key=lambda p: names[p.pid] != "storeval-watch"):  # the watchdog first
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    run.finish()
    assert run.left_running() == []
    (name,) = [n for n in os.listdir(target) if n.startswith("storeval-")]
    return name


def test_storeval_run_warns_about_and_storeval_clean_removes_only_dead_runs_directories(tmp_path, target):
    dead = _killed_run(tmp_path, target)
    assert json.loads((target / dead / OWNER).read_text())["host"] == HOST
    leftover = sum(p.stat().st_size for p in (target / dead).rglob("bw.*"))
    assert leftover > 0

    # what is not a dead run's stays, whatever its name or content
    outside = tmp_path / "user-data"
    outside.mkdir()
    (outside / "precious.txt").write_text("mine")
    (target / "notes.txt").write_text("a user's notes about storeval-20990101-000000-abcd")
    (target / "storeval-notes").mkdir()
    (target / "storeval-notes" / "x").write_text("not a run directory")
    me = psutil.Process()
    _run_dir(target, "storeval-20990101-000001-abcd", {"host": HOST, "pid": me.pid, "started": me.create_time()},
             {"cell-0000/bw.0": b"live" * 1024})
    _run_dir(target, "storeval-20990101-000002-abcd", {"host": "elsewhere", "pid": 1, "started": 0.0},
             {"cell-0000/bw.0": b"far" * 1024})
    _run_dir(target, "storeval-20990101-000003-abcd", None, {"cell-0000/bw.0": b"old" * 1024})
    (target / "storeval-20990101-000004-abcd").symlink_to(outside, target_is_directory=True)
    (outside / OWNER).write_text(json.dumps({"host": HOST, **dead_process()}))
    (target / dead / "cell-0000" / "link").symlink_to(outside, target_is_directory=True)
    keep = {**tree_checksums(target), **tree_checksums(outside)}

    # a later run on the target notices, in one line, and leaves the directory alone
    r = storeval("run", "--target", f"file://{target}", "--workload", "bandwidth", "--clients", "1",
                 "--set", "file_size=1MiB", "--quiet", "--results", "later", cwd=tmp_path, timeout=GUARD)
    assert r.rc == 0, r.err
    assert r.err_lines == [f"warning: target {target} (file://{target}) holds 1 scratch directory of dead storeval "
                           f"runs ({dead}); remove them with: storeval clean file://{target}"]
    assert (target / dead).is_dir()

    r = storeval("clean", str(target), "--dry-run", cwd=tmp_path)
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].startswith(f"file://{target}: {dead}  ") and " in 3 files  dead: its process " in lines[0]
    assert lines[0].endswith(f" on {HOST} has ended")
    assert f"file://{target}: storeval-20990101-000001-abcd  kept, live: its process {me.pid} on {HOST} is running" \
        in lines
    assert (f"file://{target}: storeval-20990101-000002-abcd  kept, unknown: a run on host elsewhere: whether it is "
            "live cannot be checked from here (--force removes it)") in lines
    assert (f"file://{target}: storeval-20990101-000003-abcd  kept, unknown: no owner record (a run of an older "
            "storeval, or one just starting) (--force removes it)") in lines
    assert (f"file://{target}: storeval-20990101-000004-abcd  kept, foreign: a symbolic link, not a directory "
            "storeval made") in lines
    assert lines[-1].startswith("dry run: 1 directory (") and lines[-1].endswith(") would be removed")
    assert (target / dead).is_dir()

    r = subprocess.run([sys.executable, "-m", "storeval", "clean", str(target)], cwd=tmp_path, capture_output=True,
                       text=True, stdin=subprocess.DEVNULL, timeout=GUARD)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].startswith("error: clean: 1 directory (")
    assert r.stderr.splitlines()[-1].endswith(") to remove; confirm with --yes (there is no terminal to ask on)")
    assert (target / dead).is_dir()

    r = storeval("clean", f"file://{target}", "--yes", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[-1].startswith(f"removed file://{target}: {dead} (")
    assert not (target / dead).exists()
    assert {**tree_checksums(target), **tree_checksums(outside)} == {k: v for k, v in keep.items() if f"/{dead}" not in k}

    r = storeval("clean", str(target), "--yes", "--force", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert sorted(n for n in os.listdir(target)) == ["notes.txt", "storeval-20990101-000001-abcd",
                                                     "storeval-20990101-000004-abcd", "storeval-notes"]
    assert (outside / "precious.txt").read_text() == "mine"
    assert (target / "storeval-20990101-000001-abcd" / "cell-0000" / "bw.0").read_bytes() == b"live" * 1024


def test_clean_takes_a_study_files_targets_by_name_and_says_one_line_for_bad_input(tmp_path, target):
    _run_dir(target, "storeval-20990101-000000-abcd", {"host": HOST, **dead_process()}, {"cell-0000/x": b"1"})
    other = tmp_path / "other"
    other.mkdir()
    study = tmp_path / "s.yaml"
    study.write_text(f"targets:\n  scratch: {{url: 'file://{target}'}}\n  other: {{url: 'file://{other}'}}\n")
    r = storeval("clean", "--study", str(study), "scratch", "--yes", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert os.listdir(target) == []
    r = storeval("clean", str(study), cwd=tmp_path)  # a study file: all its targets
    assert r.rc == 0, r.err
    assert r.out.splitlines() == [f"file://{target}: no storeval scratch directories",
                                  f"file://{other}: no storeval scratch directories", "nothing to remove"]
    r = storeval("clean", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert (r.rc, r.err_lines) == (2, [f"error: clean {tmp_path / 'nowhere'}: no such directory (give a target URL "
                                       "or path)"])
    r = storeval("clean", cwd=tmp_path)
    assert (r.rc, r.err_lines) == (2, ["error: clean: name a target (a URL, a path, a study file, or --study FILE)"])


def test_clean_reads_a_studys_targets_as_run_does_like_and_targets_from_included(tmp_path, target):
    """A study whose targets are ``like:`` another or come from ``targets_from:`` (what `storeval testbed up`
    writes) is cleaned target by target as `storeval run` reads it; a place two targets share is surveyed once."""
    _run_dir(target, "storeval-20990101-000000-abcd", {"host": HOST, **dead_process()}, {"cell-0000/x": b"1"})
    other = tmp_path / "other"
    other.mkdir()
    (tmp_path / "bed.yaml").write_text(f"targets:\n  imported: {{url: 'file://{other}'}}\n")
    study = tmp_path / "s.yaml"
    study.write_text("targets_from: bed.yaml\n"
                     f"targets:\n  scratch: {{url: 'file://{target}'}}\n  again: {{like: scratch}}\n"
                     "  mine: {like: imported}\n")
    r = storeval("clean", str(study), "--dry-run", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0].startswith(f"file://{target}: ") and f"file://{other}: no storeval scratch" in r.out
    assert sum(line.startswith(f"file://{target}") for line in r.out.splitlines()) == 1
    r = storeval("clean", str(study), "--yes", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert os.listdir(target) == []


@pytest.mark.parametrize("server", ["minio", "xrootd", "hdfs"])
def test_clean_removes_a_dead_runs_objects_on_network_targets_and_nothing_else(tmp_path, testbed_targets, server):
    from storeval.drivers import make_driver

    entry = dict(testbed_targets[server])
    url = entry.pop("url")
    driver = make_driver(url, entry)
    driver.connect()
    stale, other = "storeval-20990101-000000-abcd", "storeval-notes-" + tmp_path.name
    owner = json.dumps({"host": HOST, **dead_process()}).encode()
    for d in (stale, other):
        driver.ensure_dir(d)
        driver.ensure_dir(f"{d}/cell-0000")
    driver.put(f"{stale}/{OWNER}", owner)
    driver.put(f"{stale}/cell-0000/bw.0", b"s" * (65536 - len(owner)))  # 64 KiB in all
    driver.put(f"{other}/keep", b"k")
    study = tmp_path / "s.yaml"
    study.write_text(json.dumps({"targets": {server: testbed_targets[server]}}))
    r = storeval("clean", "--study", str(study), server, "--yes", cwd=tmp_path, timeout=GUARD)
    assert r.rc == 0, r.err
    assert f"{stale}  64 KiB in 2 files  dead: " in r.out
    assert not driver.exists(f"{stale}/cell-0000/bw.0") and not driver.exists(f"{stale}/{OWNER}")
    assert stale not in driver.listdir("")
    assert driver.stat(f"{other}/keep").size == 1
    driver.remove(f"{other}/keep")
    driver.rmdir_quietly(f"{other}/cell-0000")
    driver.rmdir_quietly(other)
    driver.shutdown()
