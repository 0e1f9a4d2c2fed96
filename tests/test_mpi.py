"""Many clients: the MPI engine under a real ``mpiexec`` (MPICH from PyPI), placement, failures, fairness,
scaling and the stonewall deadline."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import duckdb
import pytest

from storeval.analysis.fairness import fairness, jain
from storeval.analysis.scaling import first_reaching
from storeval.engine.mpi import placement_order

from .helpers import leftovers, load_json, storeval

MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec (pip package mpich) is not installed")
HOST = os.uname().nodename


def mpirun(n: int, *args: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    """``mpiexec -n N storeval ARGS``; ``timeout`` only guards against a hang (a busy machine is slow)."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, "-m", "storeval", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def _shape(doc: dict) -> list:
    """What must not depend on the engine: cells, phases, and every client's byte and op counts."""
    return [(c["clients"], c["status"], [(p["phase"], p["status"], p["bytes"], p["ops"],
                                           sorted((s["rank"], s["bytes"], s["ops"]) for s in p["client_stats"]))
                                          for p in c["phases"]]) for c in doc["cells"]]


@needs_mpiexec
def test_mpiexec_runs_the_same_study_as_the_local_engine(tmp_path):
    target = tmp_path / "dir"
    target.mkdir()
    args = ["run", "--target", f"file://{target}", "--workload", "bandwidth", "--clients", "1,2,4",
            "--set", "file_size=16MiB", "--quiet"]
    r = mpirun(4, *args, "--json", "mpi.json", "--results", "res-mpi", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    local = storeval(*args, "--json", "local.json", "--results", "res-local", cwd=tmp_path)
    assert local.rc == 0, local.err
    mpi, loc = load_json(tmp_path / "mpi.json"), load_json(tmp_path / "local.json")
    assert (mpi["engine"], loc["engine"]) == ("mpi", "local")
    assert _shape(mpi) == _shape(loc)
    assert [c["clients"] for c in mpi["cells"]] == [1, 2, 4]
    for cell in mpi["cells"]:
        for p in cell["phases"]:
            assert p["bytes"] == cell["clients"] * (16 << 20)
            assert [s["bytes"] for s in p["client_stats"]] == [16 << 20] * cell["clients"]
            assert {s["host"] for s in p["client_stats"]} == {HOST}
            if cell["clients"] > 1:
                f = p["fairness"]
                assert f["spread"] >= 0 and 0 < f["jain"] <= 1 and f["cov"] >= 0
                assert min(f["relative_time"].values()) == 1.0 and len(f["relative_time"]) == cell["clients"]
                assert len(f["sorted"]) == cell["clients"] and "median absolute deviations" in f["rule"]
                rates = [row["MiBps"] for row in f["sorted"]]
                assert rates == sorted(rates, reverse=True)
            else:
                assert p["fairness"] is None
            # one host, one kernel clock: nothing shifted, and the measured offset lies within its own error
            clock = p["clock"]
            assert clock["skew_ns"] == 0 and sorted(clock["ranks"]) == [str(r) for r in range(cell["clients"])]
            for rank, c in clock["ranks"].items():
                assert (c["host"], c["same_clock"], c["offset_ns"], c["residual_ns"]) == (HOST, True, 0, 0)
                if rank != "0":
                    assert c["drift_ns"] == 0 and abs(c["measured_offset_ns"]) <= c["measured_error_ns"]
            assert "clock-skew" not in {f["code"] for f in p["flags"]}
    assert all("clock" not in p for c in loc["cells"] for p in c["phases"])
    phases = {(s["phase"]) for s in mpi["scaling"]}
    assert phases == {"write", "read"}
    for s in mpi["scaling"]:
        assert [x["clients"] for x in s["series"]] == [1, 2, 4] and s["saturation_clients"] in (1, 2, 4)
    assert leftovers(target) == []


@needs_mpiexec
def test_too_few_ranks_is_bad_input_said_once(tmp_path):
    r = mpirun(2, "run", "--target", f"file://{tmp_path}", "--workload", "bandwidth", "--clients", "1,4",
               "--set", "file_size=1MiB", "--quiet", cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.strip() == ("error: clients 4: mpiexec started 2 ranks, room for 2 clients "
                                "(start more ranks or lower --clients)")
    assert not (tmp_path / "storeval-results").exists()


FAULTY = """\
targets:
  broken: {{url: "null://", misbehave: {{client: 2, after_ops: 20, action: {action}}}}}
  fine: {{url: "file://{target}"}}
workloads:
  bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 4KiB, phases: [write, read]}}}}
clients: [4]
phase_timeout: 3s
"""


@needs_mpiexec
def test_a_rank_that_raises_fails_its_cell_and_the_others_go_on(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "s.yaml").write_text(FAULTY.format(action="raise", target=tmp_path / "t"))
    r = mpirun(4, "run", "s.yaml", "--quiet", "--json", "o.json", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "BAD TERMINATION" not in r.stdout and "Traceback" not in r.stderr
    doc = load_json(tmp_path / "o.json")
    broken, fine = doc["cells"]
    assert broken["status"] == "failed"
    assert broken["error"] == (f"client 2 failed in write: write of storeval-{doc['run_id']}/cell-0000/bw.2 at "
                               "offset 81920: null driver: injected failure on client 2")
    assert [(p["phase"], p["status"]) for p in broken["phases"]] == [("write", "failed"), ("read", "not-run")]
    assert fine["status"] == "ok" and all(p["bytes"] == 4 << 20 for p in fine["phases"])
    assert os.listdir(tmp_path / "t") == []


@needs_mpiexec
def test_a_hung_rank_is_named_and_the_job_aborted(tmp_path):
    (tmp_path / "t").mkdir()
    (tmp_path / "s.yaml").write_text(FAULTY.format(action="hang", target=tmp_path / "t"))
    r = mpirun(4, "run", "s.yaml", "--quiet", "--json", "o.json", cwd=tmp_path)
    assert r.returncode != 0
    message = f"client 2 (rank 2 on {HOST}) hung in write (no progress for the phase timeout of 3 s)"
    assert f"error: {message}; the job is aborted" in r.stderr
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status, error FROM cells ORDER BY cell_id").fetchall() == [
            ("failed", message), ("not-run", "the job was aborted before this cell")]
        assert con.execute("SELECT status FROM studies").fetchall() == [("failed",)]
    r = storeval("report", "storeval-results", cwd=tmp_path)  # the stored run tells the same story
    assert r.rc == 0
    assert re.search(r"run \S+ \(.*\): failed; 2 cells, 1 failed, 1 not-run", r.out)
    assert f"cell 0 (broken · bw · 4 clients) failed: {message}" in r.out.replace("\n", "")


@needs_mpiexec
def test_a_rank_stranded_at_a_barrier_its_peers_never_reach_is_named_and_the_job_aborted(tmp_path):
    """A plug-in whose client 0 takes one barrier more than the others: they finish the cell, rank 0 waits at
    a barrier nobody will reach, and the wait is timed like work from then on."""
    from .test_plugins import WORKLOAD, make_package

    uneven = WORKLOAD.replace("        log.flush()\n", "        log.flush()\n        if c.rank == 0:\n"
                                                         "            c.comm.barrier()\n")
    site = make_package(tmp_path / "site", uneven)
    (tmp_path / "t").mkdir()
    (tmp_path / "s.yaml").write_text(f"targets: {{t: {{url: 'dir://{tmp_path / 't'}'}}}}\nworkloads: {{w: touch}}\n"
                                     "clients: [2]\nphase_timeout: 3s\n")
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(site)}
    r = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "storeval", "run", "s.yaml", "--quiet"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=900, env=env)  # a hang guard only
    assert r.returncode != 0
    message = (f"client 0 (rank 0 on {HOST}) waited at a barrier after touch for the phase timeout of 3 s after "
               "client 1 had finished the cell: the clients did not take the same steps (a workload that calls "
               "comm.barrier() a different number of times on different clients)")
    assert f"error: {message}; the job is aborted" in r.stderr, r.stderr
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status, error FROM cells").fetchall() == [("failed", message)]
    assert os.listdir(tmp_path / "t") == []


def _watch_file(proc: subprocess.Popen, results: Path, phase: str, target: Path) -> dict:
    """The coordinator's watchdog state once the cell is in ``phase`` (the clients' PIDs are there) and its
    clients have written data — waited for as long as the run goes on (a busy machine is slow)."""
    deadline = time.monotonic() + 600  # a hang guard only
    while proc.poll() is None and time.monotonic() < deadline:
        for f in results.glob(".storeval-*.watch"):
            try:
                state = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if (state.get("phase") or "").startswith(phase) and state["cell"] and state["cell"]["clients"] \
                    and any(target.rglob("bw.*")):
                return state
        time.sleep(0.05)
    proc.kill()
    raise AssertionError(f"the run never reached {phase}: {proc.communicate()[1]}")


SLOW = ["--workload", "bandwidth", "--clients", "4", "--set", "file_size=64MiB", "--set", "transfer_size=4KiB",
        "--set", "direct=true", "--set", "phases=write", "--quiet", "--probe-interval", "0"]


@needs_mpiexec
@pytest.mark.parametrize("victim", [2, 0])
def test_killing_a_rank_mid_phase_ends_the_job_names_the_rank_and_leaves_nothing(tmp_path, victim):
    target = tmp_path / "dir"
    target.mkdir()
    proc = subprocess.Popen([str(MPIEXEC), "-n", "4", sys.executable, "-m", "storeval", "run", "--target",
                             f"file://{target}", *SLOW, "--results", "res"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        state = _watch_file(proc, tmp_path / "res", "write", target)
        pid = next(c["pid"] for c in state["cell"]["clients"] if c["rank"] == victim)
        os.kill(pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=600)  # the watchdog holds mpiexec's stderr until it has said its word
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    # the launcher kills the other ranks within a millisecond; on a loaded machine the watchdog may wake
    # only after several have ended, and then it names all of those it cannot order
    who = f"rank {victim} (pid {pid} on {HOST})" if victim else "rank 0 (the coordinator)"
    line = next(line for line in err.splitlines() if line.startswith("error: "))
    assert re.fullmatch(rf"error: (.* and )?{re.escape(who)}( and .*)? (died|was killed)( at the same moment)? "
                        rf"during write of cell 0 \({re.escape(str(target))} · bandwidth · 4 clients\); mpiexec ended "
                        r"the job; storeval removed its files", line), line
    assert os.listdir(target) == []
    with duckdb.connect(str(tmp_path / "res" / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status, error FROM cells").fetchall() == [
            ("failed", line.removeprefix("error: ").removesuffix("; storeval removed its files"))]
        assert con.execute("SELECT status FROM studies").fetchall() == [("failed",)]
    assert list((tmp_path / "res").glob(".storeval-*")) == []


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


@needs_mpiexec
def test_ranks_outside_the_running_cell_wait_without_spinning(tmp_path):
    """A rank that is not in the running cell waits for the next one by looking at an MPI barrier now and
    then, not inside MPICH's blocking broadcast, which polls without sleeping: with more ranks than CPUs
    (emulated nodes; 128 ranks on 2 CPUs) the waiting ranks took the CPUs the working ones needed. Measured:
    the CPU time each idle rank uses over two seconds of a 1-client cell under 4 ranks."""
    target = tmp_path / "dir"
    target.mkdir()
    args = ["--workload", "bandwidth", "--clients", "1", "--set", "file_size=1GiB", "--set", "transfer_size=4KiB",
            "--set", "direct=true", "--set", "phases=write", "--set", "deadline=8s", "--quiet",
            "--probe-interval", "0"]
    proc = subprocess.Popen([str(MPIEXEC), "-n", "4", sys.executable, "-m", "storeval", "run", "--target",
                             f"file://{target}", *args, "--results", "res"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        state = _watch_file(proc, tmp_path / "res", "write", target)
        working = {c["rank"] for c in state["cell"]["clients"]}
        idle = [c["pid"] for c in state["job"] if c["rank"] not in working]
        assert working == {0} and len(idle) == 3
        before, t0 = [_cpu_seconds(p) for p in idle], time.monotonic()
        time.sleep(2)
        used = [_cpu_seconds(p) - b for p, b in zip(idle, before)]
        waited = time.monotonic() - t0
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    # a spinning rank takes what the scheduler gives it (a share of a CPU, even beside other work); one that
    # sleeps between looks takes almost nothing
    assert all(u < 0.1 * waited for u in used), (used, waited)


def test_a_killed_coordinator_is_cleaned_up_after_by_its_watchdog(tmp_path):
    """Without MPI too: SIGKILL on storeval itself leaves no clients running and no files behind."""
    target = tmp_path / "dir"
    target.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", "--target", f"file://{target}", *SLOW,
                             "--results", "res"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    state = _watch_file(proc, tmp_path / "res", "write", target)
    clients = [c["pid"] for c in state["cell"]["clients"]]
    proc.kill()
    out, err = proc.communicate(timeout=600)
    assert "error: the storeval coordinator was killed during write of cell 0" in err
    assert "storeval removed its files" in err
    deadline = time.monotonic() + 120  # SIGKILLed by the watchdog: gone as soon as the kernel reaps them
    while any(_running(p) for p in clients) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_running(p) for p in clients)
    assert os.listdir(target) == []


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


# -- placement, fairness, scaling: the arithmetic -----------------------------------------------------------

def test_placement_spreads_round_robin_or_packs_host_by_host():
    hosts = ["a", "a", "a", "b", "b", "b", "c"]
    assert placement_order(hosts, "spread", None) == [0, 3, 6, 1, 4, 2, 5]
    assert placement_order(hosts, "pack", None) == [0, 1, 2, 3, 4, 5, 6]
    assert placement_order(hosts, "spread", 1) == [0, 3, 6]  # the seeds' one process per VM
    assert placement_order(hosts, "pack", 2) == [0, 1, 3, 4, 6]


def _clients(rates_and_seconds: list[tuple[float, float]]) -> list[SimpleNamespace]:
    return [SimpleNamespace(rank=i, host=f"h{i % 2}", seconds=s, bytes=int(r * s * 2**20), MiBps=r, ops_per_s=r)
            for i, (r, s) in enumerate(rates_and_seconds)]


def test_fairness_figures_follow_their_definitions():
    f = fairness(_clients([(100, 1.0), (100, 1.0), (50, 2.0), (100, 1.0)]))
    assert f["spread"] == pytest.approx(1.0)  # the slowest took twice as long as the fastest
    assert f["relative_time"] == {"0": 1.0, "1": 1.0, "2": 2.0, "3": 1.0}
    assert f["jain"] == pytest.approx(350**2 / (4 * (3 * 100**2 + 50**2)))
    assert [row["rank"] for row in f["sorted"]][-1] == 2
    assert f["outliers"] == []  # MAD is 0 when most clients agree: nobody is flagged by a zero yardstick
    assert fairness(_clients([(100, 1.0)])) is None
    assert jain([1, 1, 1, 1]) == 1 and jain([4, 0, 0, 0]) == pytest.approx(0.25)


def test_outlier_clients_are_flagged_not_dropped_and_figures_given_without_them():
    rows = [(100, 1.0), (98, 1.02), (102, 0.98), (99, 1.01), (101, 0.99), (20, 5.0)]
    f = fairness(_clients(rows))
    assert f["outliers"] == [5]
    assert len(f["sorted"]) == 6  # shown, never silently dropped
    assert f["without_outliers"]["spread"] == pytest.approx(1.02 / 0.98 - 1)
    assert f["without_outliers"]["jain"] > f["jain"]


def test_saturation_is_the_fewest_clients_reaching_90_percent_of_the_best():
    assert first_reaching([(1, 100), (2, 190), (4, 370), (8, 400), (16, 395)], 0.9) == 4
    assert first_reaching([(1, 100), (2, 100)], 0.9) == 1


# -- the stonewall deadline (IOR -D with wear-out, mdtest -W) ---------------------------------------------------

def test_bandwidth_deadline_stonewalls_and_every_client_finishes_to_the_most_done(tmp_path):
    """A deadline already past when each client's first transfer ends (1 ns): on any machine, however fast, each
    client stops after exactly one 4 KiB transfer of its 64 MiB, and the read stonewalls within what was written."""
    r = storeval("run", "--target", f"file://{tmp_path}", "--workload", "bandwidth", "--clients", "2",
                 "--set", "file_size=64MiB", "--set", "transfer_size=4KiB", "--set", "deadline=1ns",
                 "--set", "phases=write,read", "--quiet", "--json", "o.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    write, read = load_json(tmp_path / "o.json")["cells"][0]["phases"]
    assert [s["bytes"] for s in write["client_stats"]] == [4096, 4096] and write["bytes"] == 8192
    assert write["stonewall_rule"] == "deadline" and write["stonewall_MiBps"] > 0 and write["bandwidth_MiBps"] > 0
    assert [s["bytes"] for s in read["client_stats"]] == [4096, 4096] and read["stonewall_rule"] == "deadline"
    assert leftovers(tmp_path) == []


def test_a_client_late_at_the_deadline_wears_out_to_the_most_any_client_did(tmp_path):
    """Client 1 pauses 0.5 s in its first transfer, past the 0.1 s deadline; client 0 works until it. Both then
    finish to client 0's count: the same bytes each, whatever the machine's speed (64 TiB is never done)."""
    study = tmp_path / "s.yaml"
    study.write_text("targets:\n  t: {url: 'null://t', misbehave: {client: 1, after_ops: 0, action: pause, "
                     "seconds: 0.5}}\nworkloads:\n  bw: {bandwidth: {file_size: 64TiB, transfer_size: 4KiB, "
                     "deadline: 0.1s, phases: [write], engine: python}}\n")
    r = storeval("run", str(study), "--clients", "2", "--quiet", "--no-html", "--json", "o.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    (write,) = load_json(tmp_path / "o.json")["cells"][0]["phases"]
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        extra = dict(con.execute("SELECT rank, extra FROM records").fetchall())
    done = {rank: json.loads(e)["stonewall"]["ops"] for rank, e in extra.items()}
    assert done[1] == 1 and done[0] > 1  # at the deadline: client 1 had done its one transfer, client 0 more
    assert [s["bytes"] for s in write["client_stats"]] == [done[0] * 4096] * 2  # then both finished to client 0's
    assert write["stonewall_rule"] == "deadline"


def test_metadata_deadline_creates_as_many_as_the_busiest_client_and_removes_them_all(tmp_path):
    r = storeval("run", "--target", f"file://{tmp_path}", "--workload", "metadata", "--clients", "2",
                 "--set", "items=20000", "--set", "deadline=1ns", "--set", "files_only=true",
                 "--quiet", "--json", "o.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    phases = {p["phase"]: p for p in load_json(tmp_path / "o.json")["cells"][0]["phases"]}
    made = [s["ops"] for s in phases["file-create"]["client_stats"]]
    assert made == [1, 1]  # past the deadline when the first create ends, on any machine
    assert phases["file-create"]["stonewall_rule"] == "deadline" and phases["file-create"]["stonewall_ops_per_s"] > 0
    assert [s["ops"] for s in phases["file-stat"]["client_stats"]] == made
    assert [s["ops"] for s in phases["file-remove"]["client_stats"]] == made
    assert leftovers(tmp_path) == []


@needs_mpiexec
def test_the_live_view_follows_every_rank_under_mpiexec(tmp_path):
    """The ranks' beats carry their phase's counters to rank 0: --live-json shows each rank's operations
    growing while a paced cell runs (2 ranks × 600 operations at 400/s: 1.5 s a phase)."""
    live = tmp_path / "live.jsonl"
    r = mpirun(2, "run", "--target", "null://mpi", "--workload", "bandwidth", "--clients", "2", "--set",
               "file_size=2400KiB", "--set", "transfer_size=4KiB", "--set", "phases=write,read", "--set", "iops=400",
               "--live-json", str(live), "--quiet", "--no-html", "--results", str(tmp_path / "res"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    lines = [json.loads(line) for line in live.read_text().splitlines()]
    assert lines and all([c["rank"] for c in s["clients"]] == [0, 1] for s in lines)
    assert all(c["ops"] <= 600 and c["bytes"] == 4096 * c["ops"] for s in lines for c in s["clients"])
    assert {c["rank"] for s in lines for c in s["clients"] if c["ops"] > 0} == {0, 1}  # both ranks were seen working
