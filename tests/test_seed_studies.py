"""The ready studies of issue 16 (studies/seed002-servers.yaml, studies/seed000-systems.yaml), run at the scale
of this machine against real systems the studies bring up themselves: each gives its Table 1 and its scaling
figures, and leaves no mount, process or file behind."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from .helpers import load_json, storeval

STUDIES = Path(__file__).resolve().parent.parent / "studies"


@pytest.fixture
def own_tmp():
    """A temporary directory of the test's own for the run (TMPDIR), where storeval makes the run-owned testbed
    directories of the systems a study brings up: what is left there is this run's, whatever else runs beside."""
    path = tempfile.mkdtemp(prefix="svt-", dir="/tmp")  # short: daemons put sockets under it
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _left_in(tmp: str) -> tuple[set[str], set[str]]:
    """Mount points under ``tmp`` and the run-owned systems directories left there."""
    with open("/proc/self/mountinfo", encoding="utf-8") as f:
        mounts = {line.split()[4] for line in f if line.split()[4].startswith(tmp + "/")}
    return mounts, {n for n in os.listdir(tmp) if n.startswith("storeval-systems-")}


def test_seed002_glusterfs_at_1_2_and_4_servers_gives_throughput_vs_servers(tmp_path, own_tmp):
    r = storeval("run", str(STUDIES / "seed002-servers.yaml"), "--target", "glusterfs", "--clients", "1,2",
                 "--set", "ior.file_size=8MiB", "--set", "iops.file_size=4MiB", "--set", "deadline=0.5s",
                 "--set", "items=40", "--results", str(tmp_path / "r"), "--json", str(tmp_path / "out.json"),
                 cwd=tmp_path, timeout=1200, env={"TMPDIR": own_tmp})
    assert r.rc == 0, r.err[-3000:]
    doc = load_json(tmp_path / "out.json")
    assert {c["factors"]["servers"] for c in doc["cells"]} == {1, 2, 4}
    assert all(c["status"] == "ok" for c in doc["cells"])
    ior = {(s["phase"], s["factors"]["clients"]): [p["x"] for p in s["series"]]
           for s in doc["scaling_settings"] if s["workload"] == "ior"}
    assert ior == {(ph, n): [1, 2, 4] for ph in ("write", "read") for n in (1, 2)}
    mdtest = {s["phase"] for s in doc["scaling_settings"] if s["workload"] == "mdtest"}
    assert {"file-create", "file-stat", "file-remove"} <= mdtest
    # the terminal's throughput-vs-servers table, and the report's chart
    assert "Aggregate vs servers" in r.out and "servers=4" in r.out
    html = next((tmp_path / "r").glob("report-*.html")).read_text()
    assert "ior · write: aggregate MiB/s vs servers" in html
    # each size was brought up and taken down; nothing of it stays
    ups = [e for e in doc["events"] if e["kind"] == "system-up"]
    assert len(ups) == 3 and len([e for e in doc["events"] if e["kind"] == "system-down"]) == 3
    assert _left_in(own_tmp) == (set(), set())


def test_seed000_compares_glusterfs_hdfs_nfs_and_an_xrootd_cluster(tmp_path, own_tmp):
    r = storeval("run", str(STUDIES / "seed000-systems.yaml"), "--clients", "1,2", "--set", "file_size=4MiB",
                 "--set", "transfer_size=1MiB", "--set", "items=30", "--results", str(tmp_path / "r"),
                 "--json", str(tmp_path / "out.json"), cwd=tmp_path, timeout=1500,
                 env={"TMPDIR": own_tmp})
    assert r.rc == 0, r.err[-3000:]
    doc = load_json(tmp_path / "out.json")
    targets = {c["target"] for c in doc["cells"]}
    assert targets == {"glusterfs", "hdfs", "nfs", "xrootd"}
    assert all(c["status"] == "ok" for c in doc["cells"])
    urls = {c["target"]: c["target_url"].split(":")[0] for c in doc["cells"]}
    assert urls == {"glusterfs": "file", "hdfs": "hdfs", "nfs": "nfs", "xrootd": "root"}
    # every system wrote and read every byte the phases asked for (HDFS cannot rewrite in place: skipped, said so)
    for c in doc["cells"]:
        if c["kind"] != "bandwidth":
            continue
        for ph in c["phases"]:
            if ph["status"] == "ok":
                assert ph["bytes"] == c["clients"] * (4 << 20), (c["target"], ph["phase"])
            else:
                assert (c["target"], ph["phase"], ph["status"]) == ("hdfs", "rewrite", "skipped")
    # Table 1: one row per system and workload; the scaling lines of each system
    rows = {(row["target"], row["workload"]) for row in doc["table"]}
    assert {(t, w) for t in targets for w in ("iozone", "mdtest")} <= rows
    assert {s["target"] for s in doc["scaling"]} == targets
    ups = [e for e in doc["events"] if e["kind"] == "system-up"]
    assert len(ups) == 4
    assert _left_in(own_tmp) == (set(), set())
