"""`storeval testbed up/status/down` through the real command, with the issue's run in between."""

from __future__ import annotations

import json
import time

import psutil

from storeval.testbed.base import port_open

from .helpers import load_json, storeval

MiB = 1 << 20


def test_testbed_up_run_down_leaves_nothing_behind(tmp_path, testbed):
    # `testbed` (the session's servers) only makes sure the software is installed and built already
    r = storeval("testbed", "up", "minio", "xrootd", "hdfs", cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    state = json.loads((tmp_path / "storeval-testbed" / "state.json").read_text())
    procs = [p for s in state["servers"].values() for p in s["procs"]]
    ports = [port for s in state["servers"].values() for port in s["ports"].values()]
    assert len(procs) == 3 and all(psutil.pid_exists(p["pid"]) for p in procs)
    assert (tmp_path / "storeval-testbed.yaml").exists()

    status = storeval("testbed", "status", cwd=tmp_path)
    assert status.rc == 0 and all(k in status.out for k in ("minio", "xrootd", "hdfs")) and "DOWN" not in status.out

    # the check, verbatim: every target succeeds with identical byte and op counts
    run = storeval("run", "storeval-testbed.yaml", "--workload", "bandwidth", "--workload", "metadata", "--clients", "2",
                   "--set", "file_size=16MiB", "--json", "out.json", cwd=tmp_path, timeout=1800)
    assert run.rc == 0, run.err
    doc = load_json(tmp_path / "out.json")
    counts: dict[str, dict] = {}
    for cell in doc["cells"]:
        assert cell["status"] == "ok", cell["error"]
        counts.setdefault(cell["target"], {}).update(
            {(cell["workload"], p["phase"]): (p["bytes"], p["ops"]) for p in cell["phases"] if p["status"] == "ok"})
    assert set(counts) == {"minio", "xrootd", "hdfs"}
    assert counts["minio"][("bandwidth", "write")] == (2 * 16 * MiB, 32)
    assert counts["minio"][("metadata", "file-create")] == (2 * 100 * 16 * MiB, 200)  # mdtest -n 100, -w 16MiB
    for name in ("xrootd", "hdfs"):
        assert {k: v for k, v in counts[name].items() if k in counts["minio"]} == counts["minio"], name

    down = storeval("testbed", "down", cwd=tmp_path, timeout=300)
    assert down.rc == 0, down.err
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(psutil.pid_exists(p["pid"]) and
                                               psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE
                                               for p in procs) or any(port_open(port) for port in ports)):
        time.sleep(0.2)
    assert not any(psutil.pid_exists(p["pid"]) and psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE
                   for p in procs)
    assert not any(port_open(port) for port in ports)
    assert not (tmp_path / "storeval-testbed").exists() and not (tmp_path / "storeval-testbed.yaml").exists()
    assert storeval("testbed", "status", cwd=tmp_path).out.strip() == "no testbed servers running here"


def test_testbed_rejects_unknown_servers(tmp_path):
    r = storeval("testbed", "up", "ceph", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: testbed up ceph: unknown server (choose from minio, minio-ec, xrootd, hdfs)"]
