"""System settings as factors (core/system.py, systems.py): a testbed brought up at each size, a real cluster's
setup/teardown commands, the cells of one configuration kept together, and the aggregate against the setting."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from storeval.errors import InputError
from storeval.plan import plan
from storeval.spec import load_study

from .helpers import load_json, storeval


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "study.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def commands_study(tmp_path: Path, setup: str = "echo {stripe} >> {path}/../log", reps: int = 2) -> str:
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    return write(tmp_path, f"""\
        targets:
          lustre:
            url: file://{data}
            settings: {{stripe: [1, 4], layout: raid}}
            setup: "{setup}"
            teardown: "echo down {{stripe}} >> {{path}}/../log"
          plain: {{url: "file://{data}"}}
        workloads:
          bw: {{bandwidth: {{file_size: 1MiB, transfer_size: 256KiB, phases: [write, read]}}}}
        clients: [1]
        repetitions: {reps}
        """)


def test_each_configuration_is_one_block_with_repetitions_inside(tmp_path):
    cells = plan(load_study(commands_study(tmp_path)))
    # plain target: its own block, repetitions outer; then stripe=1 (both reps), then stripe=4 (both reps)
    rows = [(c.target.name, (c.target.system or {}).get("settings", {}).get("stripe"), c.repetition) for c in cells]
    assert rows == [("lustre", 1, 0), ("lustre", 1, 1), ("lustre", 4, 0), ("lustre", 4, 1),
                    ("plain", None, 0), ("plain", None, 1)]
    assert cells[0].factors == {"stripe": 1, "clients": 1}  # a setting with one value is no factor
    assert cells[0].target.system["settings"] == {"stripe": 1, "layout": "raid"}
    assert len({c.config for c in cells}) == 3  # repetitions share a configuration


MALFORMED = [
    ("unknown testbed", "targets: {g: {testbed: lustre}}", "targets.g.testbed: 'lustre' is not a testbed system (one of"),
    ("testbed and url", "targets: {g: {testbed: hdfs, url: 'file:///tmp'}}", "targets.g: give url or testbed, not both"),
    ("setting the system refuses", "targets: {g: {testbed: hdfs, servers: [1, 40]}}",
     "targets.g: testbed hdfs: servers (datanodes) must be a whole number from 1 to 16, not 40"),
    ("setting the system does not take", "targets: {g: {testbed: hdfs, settings: {stripe: 2}}}",
     "targets.g: testbed hdfs: no setting 'stripe' (it takes: servers"),
    ("a target the testbed does not write", "targets: {g: {testbed: hdfs, use: cephfs}}",
     "targets.g.use: 'cephfs' is not a target of the hdfs testbed (one of hdfs)"),
    ("sweep without a setup", "targets: {g: {url: 'file:///tmp', settings: {stripe: [1, 2]}}}",
     "targets.g.settings: sweeping a setting needs a setup command that applies it"),
    ("unknown placeholder", "targets: {g: {url: 'file:///tmp', settings: {stripe: [1, 2]}, setup: 'lfs -c {strip}'}}",
     "targets.g.setup: {strip} is not a setting of the target (settings: stripe; also url, path, target)"),
    ("repeated value", "targets: {g: {testbed: hdfs, servers: [1, 1]}}", "targets.g.servers: [1, 1] repeats a value"),
    ("empty command", "targets: {g: {url: 'file:///tmp', setup: ''}}", "targets.g.setup: '' is not a command"),
]


@pytest.mark.parametrize("text,expected", [m[1:] for m in MALFORMED], ids=[m[0] for m in MALFORMED])
def test_a_mistake_is_one_line(tmp_path, text, expected):
    path = write(tmp_path, text + "\nworkloads: {bw: bandwidth}\n")
    with pytest.raises(InputError) as e:
        load_study(path)
    assert str(e.value).startswith(expected), str(e.value)
    r = storeval("run", path, "--results", str(tmp_path / "res"))
    assert r.rc == 2 and len(r.err_lines) == 1 and r.err_lines[0].startswith("error: " + expected[:30])
    assert not (tmp_path / "res").exists()


def test_setup_and_teardown_run_around_each_configuration_and_are_recorded(tmp_path):
    path = commands_study(tmp_path, reps=1)
    r = storeval("run", path, "--results", str(tmp_path / "res"), "--json", str(tmp_path / "out.json"))
    assert r.rc == 0, r.err
    assert (tmp_path / "log").read_text().split("\n")[:-1] == ["1", "down 1", "4", "down 4"]
    doc = load_json(tmp_path / "out.json")
    events = [e for e in doc["events"] if e["kind"] in ("setup", "teardown", "system-up")]
    assert [e["kind"] for e in events] == ["setup", "system-up", "teardown"] * 2
    setup = events[0]
    detail = setup["detail"] if isinstance(setup["detail"], dict) else json.loads(setup["detail"])
    assert detail["exit"] == 0 and detail["settings"] == {"stripe": 1, "layout": "raid"}
    assert detail["command"] == f"echo 1 >> {tmp_path / 'data'}/../log"
    stripes = {c["factors"].get("stripe") for c in doc["cells"] if c["target"] == "lustre"}
    assert stripes == {1, 4}
    along = [s for s in doc["scaling_settings"] if s["phase"] == "write"]
    assert [(s["along"], [p["x"] for p in s["series"]]) for s in along] == [("stripe", [1, 4])]
    assert "Aggregate vs stripe" in r.out and "stripe=1" in r.out and "stripe=4" in r.out


def test_a_failing_setup_fails_its_cells_in_one_line_and_the_others_run(tmp_path):
    path = commands_study(tmp_path, setup="test {stripe} = 4 || (echo no stripe {stripe} >&2; exit 3)", reps=1)
    r = storeval("run", path, "--results", str(tmp_path / "res"), "--json", str(tmp_path / "out.json"))
    assert r.rc == 1
    doc = load_json(tmp_path / "out.json")
    status = {(c["target"], c["factors"].get("stripe")): c["status"] for c in doc["cells"]}
    assert status == {("lustre", 1): "failed", ("lustre", 4): "ok", ("plain", None): "ok"}
    failed = next(c for c in doc["cells"] if c["status"] == "failed")
    assert failed["error"] == ("target lustre (stripe=1, layout=raid): setup command `test 1 = 4 || (echo no stripe 1 "
                               ">&2; exit 3)` failed (exit 3): no stripe 1")
    # the teardown of a block whose setup failed does not run; the next block's does
    assert (tmp_path / "log").read_text() == "down 4\n"


def test_a_testbed_system_at_two_sizes_gives_the_aggregate_vs_servers_and_leaves_nothing(tmp_path):
    """HDFS at 1 and 2 datanodes (the cheapest testbed system to start): each size is started, measured and
    stopped; the results carry the server count; nothing of the testbed stays."""
    path = write(tmp_path, """\
        targets:
          hd: {testbed: hdfs, servers: [1, 2], timeout: 60s}
        workloads:
          bw: {bandwidth: {file_size: 2MiB, transfer_size: 1MiB, phases: [write, read]}}
        clients: [1]
        """)
    own = tmp_path / "tmp"  # the run makes its own systems directory here (TMPDIR): what stays is this run's
    own.mkdir()
    r = storeval("run", path, "--results", str(tmp_path / "res"), "--json", str(tmp_path / "out.json"),
                 timeout=900, env={"TMPDIR": str(own)})
    assert r.rc == 0, r.err
    doc = load_json(tmp_path / "out.json")
    assert sorted(c["factors"]["servers"] for c in doc["cells"]) == [1, 2]
    urls = {c["factors"]["servers"]: c["target_url"] for c in doc["cells"]}
    assert all(u.startswith("hdfs://127.0.0.1:") for u in urls.values())
    assert all(ph["bytes"] == 2 << 20 for c in doc["cells"] for ph in c["phases"])
    ups = [e for e in doc["events"] if e["kind"] == "system-up"]
    downs = [e for e in doc["events"] if e["kind"] == "system-down"]
    assert len(ups) == 2 and len(downs) == 2
    env = doc["environment"]
    assert "system:hdfs servers=1" in env and "system:hdfs servers=2" in env
    rows = [s for s in doc["scaling_settings"] if s["phase"] == "read"]
    assert [(s["along"], [p["x"] for p in s["series"]]) for s in rows] == [("servers", [1, 2])]
    assert "Aggregate vs servers" in r.out
    html = next((tmp_path / "res").glob("report-*.html")).read_text()
    assert "aggregate MiB/s vs servers" in html
    assert [n for n in os.listdir(own) if n.startswith("storeval-systems-")] == []  # (pymp-*: Python's own)


def test_setting_values_are_quoted_for_the_shell():
    from storeval.core.system import fill

    assert fill("lfs setstripe -c {stripe} {path}", {"stripe": 4, "path": "/mnt/my dir;rm -rf x"}) == \
        "lfs setstripe -c 4 '/mnt/my dir;rm -rf x'"


def test_a_killed_run_has_its_watchdog_run_the_teardown_of_the_block_in_progress(tmp_path):
    """SIGKILL of the coordinator in the middle of a configured block: the block's teardown still runs (the
    watchdog runs it after the cleanup), so a real cluster is not left reconfigured."""
    import signal
    import subprocess
    import sys
    import time

    import psutil

    marker = tmp_path / "configured"
    path = write(tmp_path, f"""\
        targets:
          lustre:
            url: "null://"
            settings: {{stripe: [2]}}
            setup: "echo {{stripe}} > {marker}"
            teardown: "rm {marker}"
        workloads:
          bw: {{bandwidth: {{file_size: 64TiB, transfer_size: 4KiB, phases: [write], deadline: 10m}}}}
        """)
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", path, "--results", str(tmp_path / "res")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        bound = time.monotonic() + 300
        # set up, and its clients forked (the watchdog and the fork server are two more children)
        while not (marker.exists() and len(psutil.Process(proc.pid).children(recursive=True)) >= 3):
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < bound, "the block never started"
            time.sleep(0.05)
        assert marker.read_text() == "2\n"
        run = psutil.Process(proc.pid).children(recursive=True)  # the watchdog, the fork server, its clients
        proc.send_signal(signal.SIGKILL)  # the coordinator alone: its watchdog stays
        proc.wait()
        bound = time.monotonic() + 300
        while marker.exists():
            assert time.monotonic() < bound, "the watchdog did not undo the block"
            time.sleep(0.1)
        # nothing of the run is left running: a client the coordinator had not named yet (killed the moment it
        # was forked) would write to its 10-minute deadline; the watchdog stops what the run's fork server forked
        _, left = psutil.wait_procs(run, timeout=60)
        assert not [p for p in left if p.status() != psutil.STATUS_ZOMBIE], left
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_a_fault_naming_a_node_the_system_lacks_fails_its_cell_in_one_line(tmp_path):
    path = write(tmp_path, """\
        targets:
          hd: {testbed: hdfs, servers: [1], timeout: 60s}
        workloads:
          bw:
            bandwidth: {file_size: 2MiB, transfer_size: 1MiB, phases: [write]}
            faults: [{at: 1s, phase: write, action: kill, server: hdfs.datanode3}]
        """)
    r = storeval("run", path, "--results", str(tmp_path / "res"), "--json", str(tmp_path / "out.json"), timeout=600)
    assert r.rc == 1
    cell = load_json(tmp_path / "out.json")["cells"][0]
    assert cell["status"] == "failed"
    assert cell["error"].startswith("workloads.bw.faults[0].server: 'hdfs.datanode3' is not a server of the testbed in ")
    assert "hdfs.datanode1" in cell["error"]
