"""The local engine under failure: a client that raises, dies, hangs or is killed; Ctrl-C."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import psutil
import pytest

from .helpers import leftovers, load_json, storeval

STUDY = """\
targets:
  broken: {{url: "null://", misbehave: {{client: 1, after_ops: 20, action: {action}}}}}
  fine: {{url: "file://{target}"}}
workloads:
  bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 4KiB, phases: [write, read]}}}}
clients: [2]
phase_timeout: 3s
"""


@pytest.mark.parametrize("action,message", [
    ("raise", "client 1 failed in write: write of storeval-{run}/cell-0000/bw.1 at offset 81920: "
              "null driver: injected failure on client 1"),
    ("exit", "client 1 exited with code 17 during write"),
    ("hang", "client 1 hung in write (no progress for the phase timeout of 3 s); all clients stopped"),
    ("stop", "client 1 stopped during write though nothing asked it to (its workload raised ClientStopped itself); "
             "all clients stopped"),
])
def test_a_failing_client_fails_its_cell_and_the_run_goes_on(tmp_path, target, action, message):
    study = tmp_path / "study.yaml"
    study.write_text(STUDY.format(action=action, target=target))
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--json", str(out), "--quiet", cwd=tmp_path, timeout=900)  # a hang guard only
    assert r.rc == 1, r.err
    assert "Traceback" not in r.err
    doc = load_json(out)
    broken, fine = doc["cells"]
    assert broken["target"] == "broken" and broken["status"] == "failed"
    assert broken["error"] == message.format(run=doc["run_id"])
    assert [(p["phase"], p["status"]) for p in broken["phases"]] == [("write", "failed"), ("read", "not-run")]
    assert fine["status"] == "ok" and all(p["bytes"] == 2 << 20 for p in fine["phases"])
    assert message.format(run=doc["run_id"]) in r.err
    assert os.listdir(target) == []


def _clients_of(pid: int) -> list[psutil.Process]:
    """Client processes of a storeval run: the children of its fork server named storeval-client."""
    out = []
    for child in psutil.Process(pid).children():
        try:
            if "forkserver" in " ".join(child.cmdline()):
                out += [c for c in child.children() if c.name() == "storeval-client"]
        except psutil.NoSuchProcess:
            pass
    return out


def _start_long_run(tmp_path: Path, target: Path) -> subprocess.Popen:
    study = tmp_path / "long.yaml"
    study.write_text(f"targets: {{t: {{url: 'file://{target}'}}}}\n"
                     "workloads: {bw: {bandwidth: {file_size: 256MiB, transfer_size: 4KiB, direct: true, "
                     "phases: [write, read, randread, randwrite]}}}\nclients: [2]\n")
    # a shell's background jobs ignore SIGINT and children inherit that: give the run the terminal's default
    return subprocess.Popen([sys.executable, "-m", "storeval", "run", str(study), "--quiet", "--json",
                             str(tmp_path / "out.json")], cwd=tmp_path, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_clients_and_data(proc: subprocess.Popen, target: Path) -> list[psutil.Process]:
    """Both clients running and data written, waited for as long as the run goes on (a busy machine is slow)."""
    deadline = time.monotonic() + 600  # a hang guard only
    while proc.poll() is None and time.monotonic() < deadline:
        clients = _clients_of(proc.pid)
        if len(clients) == 2 and any(target.rglob("bw.*")):
            return clients
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("the run did not start its clients")


def test_a_killed_client_fails_the_cell_and_its_files_are_removed(tmp_path, target):
    proc = _start_long_run(tmp_path, target)
    clients = _wait_for_clients_and_data(proc, target)
    victim = sorted(clients, key=lambda p: p.pid)[1]
    victim.kill()
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    assert "was killed by signal SIGKILL" in err
    assert leftovers(target) == [] and os.listdir(target) == []
    for c in clients:
        assert not c.is_running() or c.status() == psutil.STATUS_ZOMBIE


def test_ctrl_c_stops_clients_removes_files_and_marks_the_cell_interrupted(tmp_path, target):
    proc = _start_long_run(tmp_path, target)
    clients = _wait_for_clients_and_data(proc, target)
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does on Ctrl-C: the whole process group
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert os.listdir(target) == []
    for c in clients:
        assert not c.is_running() or c.status() == psutil.STATUS_ZOMBIE
    con = duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True)
    assert con.execute("SELECT status FROM cells").fetchall() == [("interrupted",)]
    assert con.execute("SELECT status FROM studies").fetchall() == [("interrupted",)]
    assert not (tmp_path / "out.json").exists() or load_json(tmp_path / "out.json")["status"] == "interrupted"


def test_clients_import_the_installed_storeval_not_a_tree_in_the_working_directory(tmp_path):
    """``pip install . && storeval run`` in a source checkout: the fork server preloads the client code while
    the working directory could be first on its module path; the clients must still run the storeval the
    coordinator runs (here a decoy package in the directory would fail every client)."""
    decoy = tmp_path / "storeval"
    decoy.mkdir()
    (decoy / "__init__.py").write_text('import os, sys\nsys.stderr.write("decoy imported\\n")\nos._exit(3)\n')
    (decoy / "engine").mkdir()
    (decoy / "engine" / "__init__.py").write_text("")
    script = Path(sys.executable).parent / "storeval"  # the console script: its own directory leads its path
    r = subprocess.run([str(script), "run", "--target", "null://", "--workload", "bandwidth", "--clients", "2",
                        "--repetitions", "1", "--set", "file_size=4MiB", "--set", "transfer_size=64KiB",
                        "--json", "o.json", "--no-html", "--quiet"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0 and "decoy" not in r.stderr, r.stderr
    doc = load_json(tmp_path / "o.json")
    assert [c["status"] for c in doc["cells"]] == ["ok"]
    assert all(p["bytes"] == 2 * 4 << 20 for p in doc["cells"][0]["phases"])


def test_a_stop_that_arrives_while_a_client_queues_a_message_is_raised_after_it_is_queued():
    """The race the frozen-server test met: the stop's ``ClientStopped`` raised inside ``Queue.put`` as the
    queue's feeder thread started left that thread half-started (a threading traceback on stderr) and the
    message lost. Here the stop arrives inside ``put`` every time; a second stop is not raised again."""
    from storeval.core.stop import STOP, ClientStopped
    from storeval.engine.local import StopHandler

    stop = StopHandler()

    class Queue:
        def __init__(self):
            self.done = []

        def put(self, msg):
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(0.05)  # a handler that could run here would have run
            self.done.append(msg)

    old = signal.signal(signal.SIGHUP, stop)
    try:
        out = Queue()
        with pytest.raises(ClientStopped, match="^stopped by SIGHUP$"):
            stop.put(out, ("partial", 0))
        assert out.done == [("partial", 0)]
        stop.put(out, ("stopped", 0, "write"))  # the client says so; the second SIGHUP raises nothing
        assert out.done == [("partial", 0), ("stopped", 0, "write")]
    finally:
        signal.signal(signal.SIGHUP, old)
        STOP.clear()


def test_the_fork_server_preloads_what_the_runs_workloads_declare_and_nothing_heavy_otherwise():
    """uproot and awkward cost ~0.6 s of CPU to import: only a run with a workload that reads ROOT files has its
    fork server import them (before any client, so no client imports them inside a timed region)."""
    from storeval.engine.forkserver import PRELOAD, client_context
    from storeval.workloads import preload_of, workload_class

    def cells(*kinds: str, **params: dict) -> list:
        return [(k, workload_class(k).Params.model_validate(params.get(k, {}))) for k in kinds]

    assert preload_of(cells("bandwidth", "metadata", "copy", "command", command={"run": "true"})) == ()
    trace = str(Path(__file__).parent / "data" / "traces" / "xrootd-5.5.3-uproot.log")
    mixed = cells("bandwidth", "skim", "jobs", "skim", "replay", replay={"trace": trace}, jobs={"duration": "10s"})
    assert preload_of(mixed) == ("awkward", "uproot")
    # a concurrent cell's clients run its parts: a skim part's modules are preloaded too, a bandwidth pair's none
    skim_part = {"parts": {"s": {"clients": 1, "skim": {}}, "w": {"clients": 1, "bandwidth": {"phases": ["write"]}}}}
    plain = {"parts": {"r": {"clients": 1, "bandwidth": {}}, "w": {"clients": 1, "bandwidth": {}}}}
    assert preload_of(cells("concurrent", concurrent=skim_part)) == ("awkward", "uproot")
    assert preload_of(cells("concurrent", concurrent=plain)) == ()
    from multiprocessing import forkserver

    client_context(preload_of(cells("skim")))  # the fork server is one per process: what its next start imports
    assert forkserver._forkserver._preload_modules == [*PRELOAD, "awkward", "uproot"]
    client_context(preload_of(cells("bandwidth")))
    assert forkserver._forkserver._preload_modules == list(PRELOAD)
    assert "uproot" not in PRELOAD and "storeval.engine.local" in PRELOAD
