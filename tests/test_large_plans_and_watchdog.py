"""Signals at any plan size, and a run that outlives its insurance (issue 28, items 10 and 12).

A 100,000-cell plan (the spec's limit) starts promptly and a SIGTERM ends it with 143 within 5 s, the store
saying what ran and that the rest was not run. A watchdog killed by PID is noticed and replaced; a run whose
coordinator and watchdog are both gone is shown as interrupted, not running, and the testbed directories it
started systems in are in the store for ``storeval clean`` to name.

Moments are found by progress (the watchdog's state file names the running cell, a process appears), never
by guessing how long something takes; GUARD is a guard against a hang only.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import psutil

from storeval.spec import MAX_CELLS
from storeval.store import Store

GUARD = 600  # seconds: a guard against a hang only
STOP_WITHIN = 5.0  # seconds from SIGTERM to exit, at any plan size (the requirement)

BIG = """\
targets: {t: {url: 'null://big'}}
workloads: {bw: {bandwidth: {file_size: 4KiB, transfer_size: 4KiB, phases: [write]}}}
clients: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
repetitions: 10000
probe_interval: 0s
"""


def _start(cwd: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "storeval", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _state(results: Path) -> dict | None:
    """The run's watchdog state file (the coordinator rewrites it at each cell and phase)."""
    for path in results.glob(".storeval-*.watch"):
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None
    return None


def _wait(proc: subprocess.Popen, what: str, check) -> None:
    deadline = time.monotonic() + GUARD
    while proc.poll() is None and time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.02)
    proc.kill()
    said = proc.communicate()[1] or ""
    raise AssertionError(f"the run ended or hung before {what}: {said[-2000:]}")


def _cpu(pid: int) -> float:
    """CPU seconds (user + system) the process and the children it reaped have used so far."""
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system + t.children_user + t.children_system


def _watchdogs(pid: int) -> list[psutil.Process]:
    try:
        kids = psutil.Process(pid).children()
    except psutil.Error:
        return []
    out = []
    for p in kids:
        try:
            if "storeval.engine.watchdog" in " ".join(p.cmdline()):
                out.append(p)
        except psutil.Error:
            pass
    return out


def test_sigterm_stops_a_run_of_the_largest_plan_within_seconds_and_stores_the_rest_as_not_run(tmp_path):
    (tmp_path / "big.yaml").write_text(BIG)
    results = tmp_path / "res"
    with open(tmp_path / "err", "w") as errors:
        proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", "big.yaml", "--results", str(results),
                                 "--quiet", "--no-html"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=errors,
                                start_new_session=True)
    # the third cell runs: the plan was expanded, checked and stored, and cells go by
    _wait(proc, "its third cell", lambda: ((_state(results) or {}).get("cell") or {}).get("index", -1) >= 2)
    cpu = _cpu(proc.pid)
    sent = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    deadline = sent + GUARD
    while (waited := os.wait4(proc.pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    wall = time.monotonic() - sent
    pid, code, usage = waited
    err = (tmp_path / "err").read_text()
    assert pid == proc.pid, f"no exit within {GUARD} s of SIGTERM"
    proc.returncode = os.waitstatus_to_exitcode(code)
    assert proc.returncode == 143, err
    assert "Traceback" not in err and "error" not in err, err
    # a machine this busy may give it the CPU late: then the CPU time it spent stopping is what counts
    spent = usage.ru_utime + usage.ru_stime - cpu
    assert wall <= STOP_WITHIN or spent <= STOP_WITHIN, f"SIGTERM took {wall:.1f} s ({spent:.1f} s of CPU)"
    with duckdb.connect(str(results / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status FROM studies").fetchall() == [("interrupted",)]
        counts = dict(con.execute("SELECT status, count(*) FROM cells GROUP BY status").fetchall())
        assert sum(counts.values()) == MAX_CELLS == 100_000
        assert set(counts) <= {"ok", "interrupted", "not-run"} and counts.get("interrupted", 0) <= 1
        ran = counts.get("ok", 0) + counts.get("interrupted", 0)
        assert ran >= 2 and counts["not-run"] == MAX_CELLS - ran
        first, last, why = con.execute("SELECT min(cell_id), max(cell_id), any_value(error) FROM cells "
                                       "WHERE status = 'not-run'").fetchone()
        assert (first, last, why) == (ran, MAX_CELLS - 1, "the run was interrupted before this cell")
        # every cell not run keeps its place in the plan: its clients and repetition, its phase not run
        assert con.execute("SELECT clients, repetition FROM cells WHERE cell_id = 99999").fetchone() == (10, 9999)
        assert con.execute("SELECT count(*) FROM phases WHERE status = 'not-run' AND phase = 'write'"
                           ).fetchone()[0] == counts["not-run"]
    run = Store(str(results), create=False).load_run(Store(str(results), create=False).resolve_run(None),
                                                      ran_only=True)
    assert run.status == "interrupted" and run.not_run == counts["not-run"] and len(run.cells) == ran


def test_a_watchdog_killed_by_pid_is_replaced_and_the_run_says_so(tmp_path):
    (tmp_path / "s.yaml").write_text("targets: {t: {url: 'null://w'}}\n"
                                     "workloads: {bw: {bandwidth: {file_size: 4KiB, transfer_size: 4KiB, "
                                     "phases: [write]}}}\nclients: [1]\nrepetitions: 15\nprobe_interval: 0s\n")
    results = tmp_path / "res"
    proc = _start(tmp_path, "run", "s.yaml", "--results", str(results), "--quiet", "--no-html")
    _wait(proc, "its first cell", lambda: ((_state(results) or {}).get("cell") or {}).get("index", -1) >= 0
          and _watchdogs(proc.pid))
    old = _watchdogs(proc.pid)[0]
    old.kill()  # by PID, as a careless user or an OOM killer would
    _wait(proc, "a new watchdog", lambda: any(p.pid != old.pid for p in _watchdogs(proc.pid)))
    new = next(p for p in _watchdogs(proc.pid) if p.pid != old.pid)
    out, err = proc.communicate(timeout=GUARD)
    assert proc.returncode == 0, err
    with duckdb.connect(str(results / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status FROM studies").fetchall() == [("ok",)]
        assert con.execute("SELECT count(*) FROM cells WHERE status = 'ok'").fetchone()[0] == 15
        messages = [m for (m,) in con.execute("SELECT message FROM events WHERE kind = 'warning'").fetchall()]
        roles = con.execute("SELECT role, pid FROM processes ORDER BY t").fetchall()
    said = [m for m in messages if m.startswith(f"the run's watchdog (pid {old.pid}) ended (signal 9)")]
    assert len(said) == 1 and said[0].endswith(f"a new one (pid {new.pid}) follows the run"), messages
    assert roles == [("coordinator", proc.pid), ("watchdog", old.pid), ("watchdog", new.pid)]
    assert not new.is_running() or new.status() == psutil.STATUS_ZOMBIE or _gone(new)  # it left with the run


def _gone(p: psutil.Process) -> bool:
    try:
        p.wait(timeout=GUARD)
    except psutil.Error:
        pass
    return not p.is_running()


DEAD_RUN = """\
import sys
from storeval.store import Store
store = Store(sys.argv[1])
store.begin_run("20260101-000000-dead", study={}, study_hash="h", version="0", command_line="storeval run s.yaml",
                source=None, engine="local", environment={})
store.add_process("20260101-000000-dead", "watchdog", int(sys.argv[2]))
store.add_testbed("20260101-000000-dead", sys.argv[3], ["minio"], True)
"""


def test_a_run_whose_coordinator_and_watchdog_died_is_interrupted_and_its_testbed_is_named(tmp_path):
    """The coordinator (a real process that stored the run's start and then died without a word) and its watchdog
    (another real process, ended): the store tells a dead run from a running one by PID and start time."""
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    bed = tmp_path / "storeval-systems-x" / "servers"
    bed.mkdir(parents=True)
    subprocess.run([sys.executable, "-c", DEAD_RUN, str(tmp_path / "res"), str(helper.pid), str(bed)], check=True,
                   timeout=GUARD)
    store = Store(str(tmp_path / "res"), create=False)
    live = store.load_run("20260101-000000-dead")
    assert live.status == "running"  # its watchdog still runs: the run may go on
    assert [(t.run_id, t.dirs, t.ended) for t in store.testbeds()] == [
        ("20260101-000000-dead", [(str(bed), ["minio"], True)], False)]
    helper.kill()
    helper.wait()
    dead = store.load_run("20260101-000000-dead")
    assert dead.status == "interrupted"
    died = [e["message"] for e in dead.events if e["kind"] == "died"]
    assert len(died) == 1 and "have all ended" in died[0] and f"watchdog pid {helper.pid}" in died[0]
    assert [(t.run_id, t.dirs, t.status, t.ended) for t in store.testbeds()] == [
        ("20260101-000000-dead", [(str(bed), ["minio"], True)], "interrupted", True)]


def test_clean_names_and_stops_the_testbed_a_killed_run_left_running(tmp_path):
    """issue 28 #12 end to end: a study brings its own MinIO up; its coordinator and watchdog are killed by PID
    mid-run; the MinIO keeps running from a directory only the store remembers. `storeval clean` names it, and
    `clean --yes` stops it and removes what the testbed made."""
    study = tmp_path / "s.yaml"
    study.write_text("targets: {m: {testbed: minio}}\n"
                     "workloads: {bw: {bandwidth: {file_size: 4MiB, transfer_size: 1MiB, phases: [write, read]}}}\n"
                     "repetitions: 200\n")
    results = tmp_path / "res"
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", str(study), "--results", str(results), "--quiet",
                             "--no-html"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def minio_pids() -> list[int]:
            pids = []
            try:
                kids = psutil.Process(proc.pid).children(recursive=True)
            except psutil.Error:
                return []
            for p in kids:
                try:
                    if "minio" in os.path.basename((p.cmdline() or [""])[0]):
                        pids.append(p.pid)
                except psutil.Error:  # a process that ended (or a zombie) while being looked at
                    pass
            return pids

        def cells_done() -> int:
            try:
                with duckdb.connect(str(results / "storeval.duckdb"), read_only=True) as con:
                    return con.execute("SELECT count(*) FROM cells WHERE status = 'ok'").fetchone()[0]
            except duckdb.Error:
                return 0

        _wait(proc, "the first cells on the study's MinIO", lambda: minio_pids() and cells_done() >= 2)
        servers = minio_pids()
        watchdogs = _watchdogs(proc.pid)
        assert servers and watchdogs
        for w in watchdogs:
            w.kill()
        proc.kill()  # the coordinator, by PID: nothing of storeval is left to stop the MinIO
        proc.wait(timeout=GUARD)
        assert all(psutil.pid_exists(p) for p in servers)
    finally:
        if proc.poll() is None:
            proc.kill()
    (bed,) = [t.dirs[0][0] for t in Store(str(results), create=False).testbeds()]
    dry = subprocess.run([sys.executable, "-m", "storeval", "clean", "--results", str(results), "--dry-run",
                          str(study)], cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    line = [ln for ln in dry.stdout.splitlines() if ln.startswith("run ")]
    assert len(line) == 1 and f"left its minio testbed in {bed}: `storeval testbed down --dir {bed}` stops it" in line[0], dry
    assert all(psutil.pid_exists(p) for p in servers)  # a dry run stops nothing
    done = subprocess.run([sys.executable, "-m", "storeval", "clean", "--results", str(results), "--yes", str(study)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    assert done.returncode == 0, done.stderr
    assert f"stopped the testbed in {bed}" in done.stdout, done.stdout
    for pid in servers:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    again = subprocess.run([sys.executable, "-m", "storeval", "clean", "--results", str(results), "--dry-run",
                            str(study)], cwd=tmp_path, capture_output=True, text=True, timeout=GUARD)
    assert not [ln for ln in again.stdout.splitlines() if ln.startswith("run ")], again.stdout
