"""Faults that say what really happened (issue 28, items 6–9 and 15).

* An exec fault's command runs in a process group of its own: at its timeout the whole group is killed, and
  what it left running when it ended is killed then and named; it is judged by its exit status, never by its
  pipes (``sleep 20 & echo started`` succeeds at once). The watchdog's undos go through the same runner.
* Two faults that would hold one server (or a server and its node) at once are refused before anything runs
  when their moments are known, and the later one is ``fault-missed`` at run time when they are not.
* A fault that did not strike flags its phase (``fault-missed``).
* A starting MinIO is ready only once every port it was given answers; the wait follows progress.

Exec faults need no server (null:// paced to a known rate); server faults use the session's testbed."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from storeval.core.faultplan import Fault
from storeval.core.process import group_members, run_bounded

from .helpers import load_json, storeval

MiB = 1 << 20


def gone(pid: int) -> bool:
    """The process ``pid`` has ended (a zombie waiting for its new parent to reap it has ended too)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rpartition(b")")[2].split()[0] == b"Z"
    except OSError:
        return True


def study(tmp_path, faults: str, *, size: str = "32MiB", rate: str = "16MiB/s", top: str = "") -> str:
    path = tmp_path / "study.yaml"
    path.write_text(f"""\
targets:
  t: {{url: "null://t", rate: {rate}}}
workloads:
  bw: {{bandwidth: {{file_size: {size}, transfer_size: 1MiB, phases: [write]}},
        faults: {faults}}}
{top}""")
    return str(path)


def run(tmp_path, path: str):
    return storeval("run", path, "--results", str(tmp_path / "res"), "--json", str(tmp_path / "out.json"),
                    "--no-html", "--quiet", cwd=tmp_path)


def fault_events(tmp_path) -> list[dict]:
    return [e for e in load_json(tmp_path / "out.json")["events"] if e["kind"].startswith("fault")]


# -- the bounded runner (core/process.py) ----------------------------------------------------------------------
def test_a_background_child_does_not_make_a_command_look_hung_and_is_killed_as_it_ends(tmp_path):
    done = run_bounded(["/bin/sh", "-c", f"sleep 20 & echo $! > {tmp_path}/child; echo started"], 600)
    child = int((tmp_path / "child").read_text())
    assert (done.code, done.timed_out, done.output) == (0, False, b"started\n")
    assert done.left and {pid for pid, _ in done.left} == {child} and gone(child)


def test_at_its_timeout_the_whole_group_is_killed(tmp_path):
    # the undo `sleep 300; …`: the shell and what it runs die together, nothing is left to act later
    script = f"(sleep 300; touch late) & echo $! > {tmp_path}/child; sleep 300; touch late"
    done = run_bounded(["/bin/sh", "-c", script], 0.5)
    pid_file = tmp_path / "child"
    assert done.timed_out and done.code == -9
    child = int(pid_file.read_text()) if pid_file.exists() else None  # the shell may be killed before it wrote it
    assert child is None or gone(child)
    assert all(gone(pid) for pid, _ in done.left)


def test_a_failure_says_its_status_and_its_last_line_and_output_is_bounded():
    done = run_bounded(["/bin/sh", "-c", "echo first; echo no such switch port >&2; exit 3"], 600)
    assert (done.code, done.timed_out, done.left, done.last_line()) == (3, False, [], "no such switch port")
    big = run_bounded(["/bin/sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end"], 600, tail=1000)
    assert big.code == 0 and len(big.output) <= 2000 and big.last_line() == "end"


def test_the_group_of_a_command_is_found_and_its_zombie_leader_not_counted():
    proc = subprocess.Popen(["/bin/sh", "-c", "sleep 30 & sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while len(group_members(proc.pid, exclude=proc.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        members = group_members(proc.pid, exclude=proc.pid)
        assert len(members) == 2 and {name for _, name in members} <= {"sleep", "sh"}
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_the_watchdog_kills_the_group_of_an_undo_it_runs(tmp_path):
    """A killed run's watchdog runs the undos in force through the same runner: at their timeout nothing of
    them is left running."""
    from storeval.engine.watchdog import _undo

    child = tmp_path / "child"
    said = _undo({"undo": [{"argv": ["/bin/sh", "-c", f"sleep 300 & echo $! > {child}; wait"], "timeout": 1.0,
                            "what": "cont after stop minio"},
                           {"argv": ["/bin/sh", "-c", "sleep 20 & true"], "timeout": 600, "what": "undo x"}]},
                 "undo")
    assert said == "undid undo x; could not undo cont after stop minio"
    assert gone(int(child.read_text()))


# -- exec faults in a run --------------------------------------------------------------------------------------
def test_an_exec_that_leaves_a_process_running_succeeds_and_says_what_was_killed(tmp_path):
    r = run(tmp_path, study(tmp_path, "[{at: 0.2s, action: exec, run: 'sleep 20 & echo started', timeout: 3s}]",
                            size="8MiB"))
    assert r.rc == 0, r.err
    (ev,) = fault_events(tmp_path)
    assert ev["kind"] == "fault"
    (left,) = ev["detail"]["left_running"]  # `sleep (pid N)`; `sh` if it had not yet become sleep
    name, pid = left.split(" (pid ")[0], int(left.split(" (pid ")[1].rstrip(")"))
    assert name in ("sleep", "sh")
    assert ev["message"] == (f"exec sleep 20 & echo started at 0.2s into write: ran 'sleep 20 & echo started' "
                             f"(started); storeval killed 1 process of its group ({name} pid {pid}) it left running")
    assert gone(pid)


def test_an_undo_that_outlives_its_timeout_is_killed_whole_and_said_so(tmp_path):
    faults = ("[{at: 0.2s, action: exec, run: 'true', undo: 'echo $$ > shell; sleep 300 & echo $! > child; wait', "
              "for: 0.3s, timeout: 1s}]")
    r = run(tmp_path, study(tmp_path, faults, size="16MiB"))
    assert r.rc in (0, 1), r.err  # 1 once a failed undo fails the run (item 9)
    fired, failed = fault_events(tmp_path)
    assert fired["kind"] == "fault" and failed["kind"] == "fault-failed"
    assert failed["detail"]["stage"] == "undo"
    assert failed["message"].startswith("undo after exec true at 0.2s into write for 0.3s failed: the command did "
                                        "not end within 1s: storeval killed it and 1 process of its group (sleep "
                                        "pid ")
    assert gone(int((tmp_path / "shell").read_text())) and gone(int((tmp_path / "child").read_text()))


# -- overlapping faults ----------------------------------------------------------------------------------------
def test_overlapping_faults_on_one_server_are_refused_before_anything_runs(tmp_path):
    faults = "[{at: 0.1s, action: stop, server: minio, for: 4s}, {at: 0.5s, action: kill, server: minio, for: 1s}]"
    r = run(tmp_path, study(tmp_path, faults))
    w = "workloads.bw.faults"
    assert r.rc == 2 and r.err_lines == [
        f"error: {w}[1]: kill minio at 0.5s into write for 1s overlaps {w}[0] (stop minio at 0.1s into write for 4s) "
        f"on the same server: {w}[0] holds it until 4.1s into write; one fault at a time per server (move "
        f"{w}[1].at past 4.1s into write, or shorten {w}[0].for)"]
    assert not (tmp_path / "res").exists()


def test_a_server_and_its_node_overlap_across_the_plans_of_a_study(tmp_path):
    top = "faults: [{at: 1s, phase: write, action: stop, server: minio-ec, for: 2s}]\n"
    r = run(tmp_path, study(tmp_path, "[{at: 3s, action: kill, server: minio-ec.node2}]", top=top))
    assert r.rc == 2 and r.err_lines == [
        "error: workloads.bw.faults[0]: kill minio-ec.node2 at 3s into write overlaps faults[0] (stop minio-ec at 1s "
        "into write for 2s) on minio-ec and its part minio-ec.node2: faults[0] holds it until 3s into write; one "
        "fault at a time per server (move workloads.bw.faults[0].at past 3s into write, or shorten faults[0].for)"]


def test_faults_that_follow_each_other_on_one_server_are_not_overlaps():
    from storeval.core.faultplan import check_overlaps

    def f(i, action, at, server, for_s=None, phase="write", target=None):
        return Fault(where=f"faults[{i}]", action=action, phase=phase, at_s=at, server=server, for_s=for_s,
                     target=target)

    check_overlaps([f(0, "kill", 1, "minio"), f(1, "start", 5, "minio")])  # a kill and its start, by hand
    check_overlaps([f(0, "stop", 1, "minio", 2), f(1, "kill", 3.5, "minio")])  # after the undo
    check_overlaps([f(0, "stop", 1, "minio-ec.node1", 5), f(1, "stop", 2, "minio-ec.node2", 5)])  # two nodes
    check_overlaps([f(0, "stop", 1, "minio", 5, target="a"), f(1, "stop", 2, "minio", 5, target="b")])  # two cells
    check_overlaps([f(0, "stop", 1, "minio", 5), f(1, "stop", 2, "minio", 5, phase="read")])  # left to run time
    from storeval.errors import InputError

    with pytest.raises(InputError, match=r"^faults\[1\]: restart minio at 1s into write overlaps faults\[0\] \(kill "
                                         r"minio at 1s into write\) on the same server: both act at 1s into write;"):
        check_overlaps([f(0, "kill", 1, "minio"), f(1, "restart", 1, "minio")])


def _runner(faults, testbed_dir):
    from storeval.faults import FaultRunner

    return FaultRunner(faults, lambda phase: (100 * MiB, 100), str(testbed_dir))


def _wait(predicate, what: str) -> None:
    deadline = time.monotonic() + 120  # the actions are signals to a local process: this only bounds a hang
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def test_faults_at_a_share_of_the_work_that_meet_on_one_server_are_missed_truthfully(testbed):
    """Overlaps that cannot be known in advance (``at: 50%``, or a fault of an earlier phase still in force)
    are found as they come: the later fault does not act and says which fault held its server."""
    runner = _runner([Fault(where="faults[0]", action="stop", phase="write", at_share=0.5, server="minio", for_s=30.0),
                      Fault(where="faults[1]", action="kill", phase="write", at_share=0.5, server="minio",
                            for_s=1.0),
                      Fault(where="faults[2]", action="stop", phase="read", at_s=0.0, server="minio")],
                     testbed.dir)
    runner.phase_started("write", 0, time.perf_counter_ns())
    runner.progress("write", 0, 50 * MiB, 50)
    _wait(lambda: len(runner.events) >= 2, "the two faults at 50% acted")
    runner.phase_ended("write", 0, time.perf_counter_ns())
    runner.phase_started("read", 0, time.perf_counter_ns())  # the stop of the write phase is still in force
    _wait(lambda: len(runner.events) >= 3, "the read phase's fault was judged")
    events = runner.finish()
    stop, kill, read = sorted(events, key=lambda e: e["detail"]["where"])
    assert stop["kind"] == "fault" and stop["message"].startswith("stop minio at 50% of write for 30s: ")
    assert "cont after " in stop["message"] and "(at the cell's end, " in stop["message"]
    assert kill["kind"] == read["kind"] == "fault-missed"
    assert kill["message"].startswith("kill minio at 50% of write for 1s did not happen: faults[0] (stop minio at "
                                      "50% of write for 30s) held minio at its moment, ")
    assert read["message"].startswith("stop minio at 0s into read did not happen: faults[0] (stop minio at 50% of "
                                      "write for 30s) held minio at its moment, ")
    assert kill["detail"]["held_by"] == read["detail"]["held_by"] == "faults[0]"
    assert testbed.load()["minio"].health()[0] == "running"  # undone at the cell's end: nothing left stopped


# -- a fault that did not strike -------------------------------------------------------------------------------
def test_each_fault_that_did_not_strike_flags_its_phase():
    from storeval.analysis.timeline import FAILING_FLAGS, fault_flags

    events = [{"kind": "fault", "message": "stop minio at 1s into write: stopped minio", "detail": {}},
              {"kind": "fault-missed", "message": "exec true at 30s into write did not happen: the phase write ended "
                                                  "after 0.50 s, before the fault's moment", "detail": {}},
              {"kind": "fault-failed", "message": "kill x at 1s into write: no such handle",
               "detail": {"stage": "act"}},
              {"kind": "fault-failed", "message": "cont after stop minio at 1s into write failed: gone (the server "
                                                  "may still be stopped)", "detail": {"stage": "undo"}}]
    assert fault_flags(events) == [
        {"code": "fault-missed", "message": "exec true at 30s into write did not happen: the phase write ended after "
                                            "0.50 s, before the fault's moment: the phase ran without the fault the "
                                            "study asked for"},
        {"code": "fault-missed", "message": "kill x at 1s into write: no such handle: the phase ran without the fault "
                                            "the study asked for"},
        {"code": "fault-not-undone", "message": "cont after stop minio at 1s into write failed: gone (the server may "
                                                "still be stopped)"}]
    assert FAILING_FLAGS == ("fault-missed", "fault-not-undone")


def test_a_missed_fault_fails_the_run_and_shows_in_the_notes(tmp_path):
    r = storeval("run", study(tmp_path, "[{at: 30s, action: exec, run: 'touch ran'}]", size="4MiB"), "--results",
                 str(tmp_path / "res"), "--json", str(tmp_path / "out.json"), "--no-html", cwd=tmp_path)
    assert r.rc == 1, r.err
    assert "fault-missed" in r.out  # Table 1's notes
    doc = load_json(tmp_path / "out.json")
    (phase,) = doc["cells"][0]["phases"]
    (flag,) = [f for f in phase["flags"] if f["code"].startswith("fault")]  # beside short-phase
    assert flag["code"] == "fault-missed" and flag["message"].startswith("exec touch ran at 30s into write did not "
                                                                         "happen: the phase write ended after ")
    assert not (tmp_path / "ran").exists()


# -- readiness that follows progress (testbed/base.py, minio.py) --------------------------------------------------
def _proc(tmp_path, script: str):
    from storeval.testbed.base import Proc

    log = tmp_path / "server.log"
    p = subprocess.Popen([sys.executable, "-c", script, str(log), str(tmp_path / "ready")])
    return p, Proc.adopt(p.pid, "server", log)


def test_a_slow_start_that_keeps_progressing_is_waited_for(tmp_path):
    from storeval.testbed.base import wait_progressing

    # it logs a line every 0.1 s and is ready after 40 lines: longer than `quiet` in all, never quiet that long
    script = ("import sys, time\nlog, ready = sys.argv[1:]\nfor i in range(40):\n"
              "    open(log, 'a').write(f'step {i}\\n'); time.sleep(0.1)\nopen(ready, 'w').close()\ntime.sleep(60)")
    popen, proc = _proc(tmp_path, script)
    try:
        wait_progressing(lambda: (tmp_path / "ready").exists(), "server", [proc], quiet=2.0, interval=0.05)
        assert len((tmp_path / "server.log").read_text().splitlines()) == 40
    finally:
        popen.kill()
        popen.wait()


def test_a_start_that_makes_no_progress_fails_in_one_line(tmp_path):
    from storeval.testbed.base import TestbedError, wait_progressing

    popen, proc = _proc(tmp_path, "import time\ntime.sleep(60)")
    try:
        with pytest.raises(TestbedError) as e:
            wait_progressing(lambda: False, "minio", [proc], quiet=0.5, log=tmp_path / "server.log",
                             why=lambda: "port console 9001 accepts no connection")
        text = str(e.value)
        assert "\n" not in text and text.startswith("minio did not become ready (no progress for ")
        assert text.endswith(f" s): port console 9001 accepts no connection; see {tmp_path / 'server.log'}")
    finally:
        popen.kill()
        popen.wait()


def test_a_minio_that_is_up_answers_on_every_port(testbed):
    """`testbed up` returns once every port MinIO was given accepts connections (the console opens after the
    API): `status` right after it finds it running."""
    minio = testbed.load()["minio"]
    assert set(minio.state.ports) == {"api", "console"}
    assert minio.closed_ports() == [] and minio.health() == ("running", "")
