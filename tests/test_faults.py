"""Fault plans (issue 15): refused before anything runs when wrong; run from the coordinator at their moment,
undone after ``for`` (or at the cell's end), recorded as events with real times, and placed on the phase's
aggregate timeline with the figures of the fault.

The phases run on the null driver paced to a set rate (sleeps), so their length is known on a busy machine;
the actions are ``exec`` commands that leave a file behind, so that they ran is checked from outside.
Testbed server actions (stop/kill a MinIO node, an HDFS datanode) are tested with the testbed's handles."""

from __future__ import annotations

import os

import pytest

from storeval.analysis.timeline import fault_figures, phase_timeline
from storeval.core.records import NS, PhaseRecord

from .helpers import load_json, storeval

MiB = 1 << 20


def study(tmp_path, faults: str, *, phases: str = "[write]", deadline: str = "null", size: str = "32MiB",
          rate: str = "16MiB/s", top: str = "") -> str:
    path = tmp_path / "study.yaml"
    path.write_text(f"""\
targets:
  t: {{url: "null://t", rate: {rate}}}
workloads:
  bw: {{bandwidth: {{file_size: {size}, transfer_size: 1MiB, deadline: {deadline}, phases: {phases}}},
        faults: {faults}}}
{top}""")
    return str(path)


def run(tmp_path, path: str, *extra: str):
    return storeval("run", path, "--results", str(tmp_path / "res"), "--json", str(tmp_path / "out.json"),
                    "--no-html", "--quiet", *extra, cwd=tmp_path)


def refusal(tmp_path, faults: str, **kw) -> str:
    r = run(tmp_path, study(tmp_path, faults, **kw))
    assert r.rc == 2, r.err
    assert len(r.err_lines) == 1, r.err
    assert not (tmp_path / "res").exists()  # refused before anything was created
    return r.err_lines[0]


@pytest.mark.parametrize("faults, message", [
    ("[{at: 1s, action: crash, server: x}]",
     "workloads.bw.faults[0].action: 'crash' is not an action (one of stop, cont, kill, start, restart, exec)"),
    ("[{at: 1s, phase: read, action: exec, run: 'true'}]",
     "workloads.bw.faults[0].phase: 'read' is not a phase the workload runs (one of write)"),
    ("[{at: 100%, action: exec, run: 'true'}]",
     "workloads.bw.faults[0].at: '100%' is not inside the phase (give 0% up to, not including, 100%)"),
    ("[{action: exec, run: 'true'}]",
     "workloads.bw.faults[0].at: is missing (when the action happens: 10s after the phase starts, or 30% of its "
     "work)"),
    ("[{at: soon, action: exec, run: 'true'}]",
     "workloads.bw.faults[0].at: 'soon' is not a duration (e.g. 30s, 100ms, 5m) (e.g. 10s, or 30% of the phase's "
     "work)"),
    ("[{at: 1s, action: exec}]",
     "workloads.bw.faults[0].run: an exec fault needs the command to run (run: \"lctl set_param ...\")"),
    ("[{at: 1s, action: exec, run: 'true', for: 5s}]",
     "workloads.bw.faults[0].for: an exec fault is undone after a while only with an undo command (add undo: "
     "\"...\")"),
    ("[{at: 1s, action: cont, server: minio, for: 5s}]",
     "workloads.bw.faults[0].for: a cont is not undone (for: goes with stop, kill or exec)"),
    ("[{at: 1s, action: stop, server: minio, restart_after: 5s}]",
     "workloads.bw.faults[0].restart_after: only a kill is restarted after a while (use for: with stop)"),
    ("[{at: 1s, action: exec, run: 'true', when: now}]",
     "workloads.bw.faults[0].when: unknown key (known: action, at, expect, for, heal_timeout, phase, restart_after, "
     "run, server, target, timeout, undo, wait_recovery, workload)"),
    ("[{at: 1s, action: kill, server: minio, heal_timeout: 1m, wait_recovery: 1m}]",
     "workloads.bw.faults[0]: give heal_timeout or wait_recovery (its old name), not both"),
    ("[{at: 1s, action: exec, run: 'true', heal_timeout: 1m}]",
     "workloads.bw.faults[0].heal_timeout: only a kill, stop or restart leaves the system something to heal (this "
     "one is exec)"),
    ("[{at: 1s, action: kill, server: minio, heal_timeout: -1s}]",
     "workloads.bw.faults[0].heal_timeout: '-1s' is not a duration (e.g. 30s, 100ms, 5m) (e.g. 5m)"),
    ("[{at: 1s, action: exec, run: 'true', expect: survive}]",
     "workloads.bw.faults[0].expect: 'survive' is not an outcome (one of ok, failed)"),
    ("[{at: 1s, action: exec, run: 'true', target: other}]",
     "workloads.bw.faults[0].target: 'other' is not a target of the study (one of t)"),
])
def test_a_wrong_plan_is_refused_in_one_line_before_anything_runs(tmp_path, faults, message):
    assert refusal(tmp_path, faults) == f"error: {message}"


def test_an_at_beyond_the_phase_deadline_is_refused(tmp_path):
    line = refusal(tmp_path, "[{at: 5s, action: exec, run: 'true'}]", deadline="2s", size="1GiB")
    assert line == ("error: workloads.bw.faults[0].at: 5s is beyond the phase write of bw, whose deadline ends it "
                    "at 2s (give an earlier at, or a share such as 30%)")


def test_a_server_of_no_testbed_is_refused(tmp_path):
    line = refusal(tmp_path, "[{at: 1s, action: stop, server: hdfs.datanode1, for: 2s}]",
                   top=f"testbed: {tmp_path / 'nobed'}\n")
    assert line.startswith("error: workloads.bw.faults[0].server: hdfs.datanode1: ")
    assert line.endswith(f"(the plan's servers are the testbed's in {tmp_path / 'nobed'}; set testbed: DIR in the "
                         "study if it is elsewhere)")


def test_a_top_level_plan_names_the_phase_when_the_workload_runs_several(tmp_path):
    path = study(tmp_path, "[]", phases="[write, read]", top="faults: [{at: 1s, action: exec, run: 'true'}]\n")
    r = run(tmp_path, path)
    assert r.rc == 2 and r.err_lines == [
        "error: faults[0].phase: is missing (the phase whose start 'at' counts from: one of read, write)"]


def events_of(doc: dict) -> list[dict]:
    return [e for e in doc["events"] if e["kind"].startswith("fault")]


def test_an_exec_fault_acts_at_its_moment_and_is_undone_after_for(tmp_path):
    # 32 MiB at 16 MiB/s: a write of about 2 s; the command stamps its own moment into a file
    faults = ("[{at: 0.5s, action: exec, run: 'date +%s.%N > fired', undo: 'date +%s.%N > undone', for: 0.7s}]")
    r = run(tmp_path, study(tmp_path, faults))
    assert r.rc == 0, r.err
    doc = load_json(tmp_path / "out.json")
    (ev,) = events_of(doc)
    d = ev["detail"]
    assert ev["kind"] == "fault" and ev["phase"] == "write" and ev["cell"] == 0
    assert ev["message"].startswith("exec date +%s.%N > fired at 0.5s into write for 0.7s: ran 'date +%s.%N > "
                                    "fired'; undo after ")
    assert d["t_start_s"] >= 0.5 and d["t_end_s"] - d["t_start_s"] >= 0.7
    fired, undone = float((tmp_path / "fired").read_text()), float((tmp_path / "undone").read_text())
    # the plan's timing is asserted above on the coordinator's own clock; each `date` stamps after its own fork
    # and exec, which a busy machine delays by different amounts, so the stamps only show the order and the gap
    assert undone - fired > 0.35
    (phase,) = doc["cells"][0]["phases"]
    timeline = phase["timeline"]
    assert sum(timeline["bytes"]) == phase["bytes"] == 32 * MiB and sum(timeline["ops"]) == 32
    (f,) = timeline["faults"]
    assert (f["kind"], f["action"], f["planned"]) == ("fault", "exec", "0.5s")
    assert f["start_s"] == d["t_start_s"] and f["end_s"] == d["t_end_s"]
    assert f["baseline_MiBps"] is not None and f["during_MiBps"] is not None


def test_a_share_of_the_work_fires_when_that_much_is_done(tmp_path):
    r = run(tmp_path, study(tmp_path, "[{at: 50%, action: exec, run: 'true'}]"))
    assert r.rc == 0, r.err
    doc = load_json(tmp_path / "out.json")
    (ev,) = events_of(doc)
    (phase,) = doc["cells"][0]["phases"]
    # the coordinator looks at the clients' progress ten times a second: at 16 MiB/s, half of 32 MiB is done
    # after about 1 s; the fault cannot have come before that
    assert ev["kind"] == "fault" and ev["detail"]["planned"] == "50%"
    assert 0.9 <= ev["detail"]["t_start_s"] <= phase["seconds"]


def test_a_moment_after_the_phase_ended_is_reported_as_missed(tmp_path):
    r = run(tmp_path, study(tmp_path, "[{at: 30s, action: exec, run: 'touch ran'}]", size="4MiB"))
    assert r.rc == 1, r.err  # a study that asked for a fault and did not get it is a failed experiment
    assert any(line.startswith("fault-missed: exec touch ran at 30s into write did not happen") for line in r.err_lines), r.err
    (ev,) = events_of(load_json(tmp_path / "out.json"))
    assert ev["kind"] == "fault-missed"
    assert ev["message"].startswith("exec touch ran at 30s into write did not happen: the phase write ended after ")
    assert not (tmp_path / "ran").exists()


def test_what_is_still_in_force_at_the_cells_end_is_undone_then(tmp_path):
    r = run(tmp_path, study(tmp_path, "[{at: 0.2s, action: exec, run: 'touch on', undo: 'touch off', for: 1h}]",
                            size="8MiB"))
    assert r.rc == 0, r.err
    (ev,) = events_of(load_json(tmp_path / "out.json"))
    assert ev["kind"] == "fault" and (tmp_path / "on").exists() and (tmp_path / "off").exists()
    assert "(at the cell's end, " in ev["message"] and ev["detail"]["undone_early_s"] > 3000


def test_a_failing_command_is_recorded_and_the_cell_goes_on(tmp_path):
    r = run(tmp_path, study(tmp_path, "[{at: 0.2s, action: exec, run: 'echo no such switch port >&2; exit 3'}]",
                            size="8MiB"))
    assert r.rc == 1, r.err  # the fault did not happen: the cell's measurements stand, the experiment failed
    doc = load_json(tmp_path / "out.json")
    (ev,) = events_of(doc)
    assert ev["kind"] == "fault-failed"
    assert ev["message"].endswith(": the command exited with 3: no such switch port")
    assert doc["cells"][0]["status"] == "ok"


def test_a_secret_in_a_command_reaches_no_output(tmp_path):
    secret = "s3cr3tValue9876"
    r = run(tmp_path, study(tmp_path, f"[{{at: 0.2s, action: exec, run: 'echo password={secret}'}}]", size="8MiB"))
    assert r.rc == 0, r.err
    text = (tmp_path / "out.json").read_text()
    assert secret not in text and "password=***" in text
    assert secret not in storeval("report", str(tmp_path / "res"), "--json", "-", cwd=tmp_path).out


def record(rank: int, start_s: float, per_second: list[int]) -> PhaseRecord:
    start = int(start_s * NS)
    return PhaseRecord(rank=rank, host="h", phase="write", iteration=0, bytes=sum(per_second), ops=len(per_second),
                       errors={}, start_ns=start, end_ns=start + len(per_second) * NS, barrier_ns=0, cpu_user=0.0,
                       cpu_sys=0.0, tl_bytes=per_second, tl_ops=[1] * len(per_second))


def test_the_timeline_adds_the_clients_up_second_by_second():
    tl = phase_timeline([record(0, 0.0, [MiB, 2 * MiB, 3 * MiB]), record(1, 0.001, [MiB, MiB, MiB])], [])
    # the phase lasted 3.001 s (first start to last end): four seconds, the last with nothing ended in it
    assert tl["seconds"] == pytest.approx(3.001) and "faults" not in tl
    assert tl["bytes"] == [2 * MiB, 3 * MiB, 4 * MiB, 0] and tl["ops"] == [2, 2, 2, 0]


def test_the_figures_of_a_fault_from_its_timeline():
    ev = {"kind": "fault", "message": "m", "detail": {"action": "stop", "t_start_s": 2.5, "t_end_s": 5.0}}
    # 100 MiB/s, the fault at 2.5 s, nothing for two seconds, back to >= 90 % one second after the undo
    per_second = [100 * MiB, 100 * MiB, 50 * MiB, 0, 0, 10 * MiB, 95 * MiB, 100 * MiB, 60 * MiB]
    f = fault_figures(ev, per_second, 8.6)
    assert f["baseline_MiBps"] == pytest.approx(90.0)  # (100 + 100 + 25) / 2.5 s
    assert f["during_MiBps"] == pytest.approx(10.0)  # (25 + 0 + 0) / 2.5 s
    assert f["after_MiBps"] == pytest.approx((10 + 95 + 100 + 60) / 3.6)
    assert f["stall_s"] == 2.0 and f["recovered"] is True and f["recovered_after_s"] == 1.0
    never = fault_figures(ev, per_second[:5] + [0, 0, 0, 0], 8.6)
    assert never["recovered"] is False and never["recovered_after_s"] is None


def test_the_terminal_shows_each_fault_with_what_the_clients_saw(tmp_path):
    path = study(tmp_path, "[{at: 0.5s, action: exec, run: 'true', undo: 'true', for: 0.5s}]")
    r = storeval("run", path, "--results", str(tmp_path / "res"), "--html", str(tmp_path / "r.html"), cwd=tmp_path)
    assert r.rc == 0, r.err
    assert "Faults — what the clients saw" in r.out
    (row,) = [line for line in r.out.splitlines() if "exec @ 0.5s" in line]
    assert "│ write │" in row and "│ ok " in row
    # the report: a Faults section with the table and a chart of the phase, the fault's interval shaded
    html = (tmp_path / "r.html").read_text()
    assert '<section id="faults"><h2>Faults</h2>' in html and "<td>exec @ 0.5s</td>" in html
    assert "cell 0: t · bw · 1 client · write — throughput and failures per second" in html
    assert '"fillcolor": "#d62728"' in html or '"fillcolor":"#d62728"' in html


def test_a_fault_in_force_when_storeval_is_killed_is_undone_by_its_watchdog(tmp_path):
    """SIGKILL to the coordinator while a fault is in force (a server it stopped, say): the run's watchdog
    runs the undo, so nothing storeval did to a server outlives it."""
    import subprocess
    import sys
    import time

    path = study(tmp_path, "[{at: 0.2s, action: exec, run: 'touch on', undo: 'touch off', for: 1h}]", size="256MiB")
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", path, "--results", "res", "--no-html"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300  # the fault acts 0.2 s into a 16 s write; start-up may be slow here
    while not (tmp_path / "on").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "on").exists(), proc.communicate()
    time.sleep(0.5)  # the runner has told its watchdog what to undo (it does so as the fault acts)
    proc.kill()
    _, err = proc.communicate(timeout=600)
    assert (tmp_path / "off").exists()
    assert "undid undo after exec touch on at 0.2s into write for 1h" in err


def test_targets_from_another_file_and_targets_like_another(tmp_path):
    """A fault study takes its targets from storeval-testbed.yaml; its own targets can be like one of them
    under other settings (seed 003's replications), and then only its own are measured."""
    from storeval.spec import load_study

    (tmp_path / "storeval-testbed.yaml").write_text("targets:\n  t: {url: 'null://t', rate: 64MiB/s}\n"
                                                    "  u: 'null://u'\n")
    alone = tmp_path / "alone.yaml"
    alone.write_text("targets_from: storeval-testbed.yaml\nworkloads: {bw: bandwidth}\n")
    own = tmp_path / "own.yaml"
    own.write_text("targets_from: storeval-testbed.yaml\ntargets:\n  slow: {like: t, rate: 1MiB/s}\n"
                   "workloads: {bw: bandwidth}\n")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert sorted(load_study(str(alone)).targets) == ["t", "u"]
        (slow,) = load_study(str(own)).targets.values()
        assert slow.name == "slow" and slow.url == "null://t" and slow.options["rate"] == 1 << 20
    finally:
        os.chdir(cwd)
    for text, message in (
            ("targets_from: nothere.yaml\n", "targets_from: nothere.yaml does not exist (start the servers with "
             "`storeval testbed up` in this directory, or give the path of a file with targets:)"),
            ("targets_from: storeval-testbed.yaml\ntargets: {x: {like: v}}\n",
             "targets.x.like: 'v' is not another target (one of t, u)")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(text + "workloads: {bw: bandwidth}\n")
        r = storeval("run", str(bad), "--results", str(tmp_path / "res"), cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [f"error: {message}"]


def test_the_targets_redundancy_is_watched_after_a_kill_until_it_is_whole_again():
    """What the target says of its redundancy (HDFS: the namenode's blocks short of replicas) is read once a
    second after a kill: when it first fell short and when it was whole again (re-replication, seed 003)."""
    import time as clock

    from storeval.core.faultplan import Fault
    from storeval.faults import FaultRunner

    said = iter([{"under": 0, "missing": 0}, {"under": 0, "missing": 0}, {"under": 5, "missing": 0},
                 {"under": 2, "missing": 1}, {"under": 0, "missing": 0}])
    runner = FaultRunner([Fault(where="faults[0]", action="kill", phase="write", at_s=0.0, server="x",
                                heal_timeout_s=30.0)], lambda phase: (0, 0), None,
                         redundancy=lambda: next(said, {"under": 0, "missing": 0}))
    runner._act = lambda fault, action: "killed x"  # the testbed is not needed to follow the target's word
    runner.phase_started("write", 0, clock.perf_counter_ns())
    deadline = clock.monotonic() + 60
    while not runner.watchers and clock.monotonic() < deadline:
        clock.sleep(0.01)
    (event,) = runner.finish()
    h = event["detail"]["healing"]
    assert (h["unit"], h["max_pending"], h["back_after_s"], h["bytes_moved"]) == ("blocks", 5, None, None)
    assert 0.9 < h["detected_after_s"] < h["healed_after_s"] and h["heal_s"] == h["healed_after_s"] - h["detected_after_s"]
    assert [s[1] for s in h["samples"]] == [0, 5, 3, 0]  # under + missing, once a second
    assert "5 blocks to heal" in event["message"] and "after the system first said so" in event["message"]
