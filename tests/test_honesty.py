"""Trustworthy numbers: probes, cache control, physical limits, the environment record, outliers."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest
import yaml

from storeval.analysis.guards import HOST_CODES
from storeval.analysis.figures import CellFigures, PhaseFigures, summarize_run
from storeval.probes.topology import target_path
from storeval.store import CellRow

from .helpers import load_json, storeval

MiB = 1 << 20
ON_A_DEVICE = target_path(f"file://{os.getcwd()}").get("medium") == "device"
needs_device = pytest.mark.skipif(not ON_A_DEVICE, reason="the work tree is not on a block device here")
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="dropping the page cache needs root")


def run(tmp_path: Path, *args: str, rc: int = 0) -> dict:
    out = tmp_path / "out.json"
    r = storeval("run", *args, "--json", str(out), "--quiet", cwd=tmp_path)
    assert r.rc == rc, r.err
    return load_json(out)


def phases(doc: dict) -> dict[str, dict]:
    return {p["phase"]: p for c in doc["cells"] for p in c["phases"]}


@needs_device
def test_bandwidth_phases_carry_device_bytes_and_amplification(tmp_path, target):
    doc = run(tmp_path, "--target", str(target), "--workload", "bandwidth", "--set", "file_size=32MiB",
              "--set", "phases=write,read", "--clients", "1")
    ph = phases(doc)
    for p in ph.values():
        assert set(p["probes"]) >= {"device_read_bytes", "device_write_bytes", "net_rx_bytes", "net_tx_bytes",
                                    "cpu_busy_fraction", "page_cache_delta_bytes"}
        assert p["probes"]["device"] and p["cpu_seconds_per_GB"] > 0
        assert isinstance(p["flags"], list) and isinstance(p["warnings"], list)
    # written with fsync: the device took (at least) the data; read after the cache was cleared: it served it
    assert ph["write"]["write_amplification"] >= 0.9 and ph["write"]["probes"]["device_write_bytes"] >= 0.9 * 32 * MiB
    assert ph["read"]["read_amplification"] is not None and ph["read"]["read_amplification"] >= 0.9
    assert doc["environment"]["targets"][next(iter(doc["environment"]["targets"]))]["path"]["medium"] == "device"
    # where the moved bytes were counted is said with the figure: per phase, per configuration and in the table
    device = ph["read"]["probes"]["device"]
    assert ph["read"]["probes"]["moved_source"] == f"device {device}"
    summary = {s["phase"]: s for s in doc["summary"]}
    assert summary["read"]["moved_sources"] == [f"device {device}"]
    assert summary["read"]["amplification"]["mean"] == pytest.approx(ph["read"]["read_amplification"])
    r = storeval("report", cwd=tmp_path)
    assert r.rc == 0, r.err
    text = r.out
    assert "moved ×" in text and f"counted at: {target} — device {device}" in " ".join(text.split())


def test_a_read_from_the_page_cache_on_purpose_is_warned_and_a_limit_flags_it(tmp_path, target):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"targets": {"t": {"url": f"file://{target}", "limits": {"device_read": "10MB/s"}}},
                                     "workloads": {"bw": {"bandwidth": {"file_size": "8MiB", "phases": ["write", "read"]}}}}))
    doc = run(tmp_path, str(study), "--keep-cache")
    read = phases(doc)["read"]
    codes = [w["code"] for w in read["warnings"]]
    assert "page-cache" in codes
    assert "read may be served from page cache" in read["warnings"][codes.index("page-cache")]["message"]
    (flag,) = [f for f in read["flags"] if "device_read" in f["message"]]
    assert flag["code"] == "not-physical" and "declared device_read limit of 10.0 MB/s" in flag["message"]
    assert [f for f in phases(doc)["write"]["flags"] if f["code"] not in HOST_CODES] == []  # the limit is for reads
    # the same read with the cache cleared (and O_DIRECT) is not warned about
    doc = run(tmp_path, "--target", str(target), "--workload", "bandwidth", "--set", "file_size=8MiB",
              "--set", "direct=true", "--set", "phases=write,read", "--clients", "1")
    assert "page-cache" not in [w["code"] for w in phases(doc)["read"]["warnings"]]


def test_writes_without_fsync_are_warned_about(tmp_path, target):
    doc = run(tmp_path, "--target", str(target), "--workload", "bandwidth", "--set", "file_size=4MiB",
              "--set", "fsync=false", "--set", "phases=write", "--clients", "1")
    assert "write-back" in [w["code"] for w in phases(doc)["write"]["warnings"]]


@pytest.mark.exclusive  # another test's run drops the whole machine's page cache and reads the same device
@needs_root
@needs_device
def test_reread_after_a_drop_comes_from_the_device_and_with_keep_cache_from_memory(tmp_path, target):
    size = 64 * MiB
    args = ["--target", str(target), "--workload", "bandwidth", "--set", "file_size=64MiB", "--set",
            "phases=write,reread", "--clients", "1"]
    dropped = phases(run(tmp_path, *args))["reread"]
    assert 0.9 * size <= dropped["probes"]["device_read_bytes"] <= 1.5 * size
    kept = phases(run(tmp_path, *args, "--keep-cache"))["reread"]
    assert kept["probes"]["device_read_bytes"] < 0.05 * size
    assert "page-cache" in [w["code"] for w in kept["warnings"]] and "cache-served" in [w["code"] for w in kept["warnings"]]


def test_samples_are_stored_and_can_be_turned_off(tmp_path, target):
    run(tmp_path, "--target", str(target), "--workload", "metadata", "--set", "items=3000", "--clients", "2",
        "--probe-interval", "0.2s", "--results", "a")
    con = duckdb.connect(str(tmp_path / "a" / "storeval.duckdb"), read_only=True)
    probes = {r[0] for r in con.execute("SELECT DISTINCT probe FROM samples").fetchall()}
    assert {"disk", "net", "cpu", "mem", "proc"} <= probes
    times = [r[0] for r in con.execute("SELECT DISTINCT t_ns FROM samples ORDER BY 1").fetchall()]
    assert len(times) >= 2
    clients = {r[0] for r in con.execute("SELECT DISTINCT device FROM samples WHERE probe = 'proc'").fetchall()}
    assert clients == {"client0", "client1"}
    con.close()
    run(tmp_path, "--target", str(target), "--workload", "metadata", "--set", "items=10", "--probe-interval", "0",
        "--results", "b")
    con = duckdb.connect(str(tmp_path / "b" / "storeval.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM samples").fetchone() == (0,)


def test_environment_record_is_complete_and_holds_no_secret(tmp_path, target):
    secret = "s3cr3t-Vb7Q-planted-in-the-environment"
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"targets": {"local": {"url": f"file://{target}"}},
                                     "workloads": {"bw": {"bandwidth": {"file_size": "1MiB"}}}}))
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--json", str(out), cwd=tmp_path, env={"AWS_SECRET_ACCESS_KEY": secret,
                                                                           "STOREVAL_PLANTED": secret})
    assert r.rc == 0, r.err
    doc = load_json(out)
    env = doc["environment"]
    for key in ("host", "kernel", "cpu_model", "cpu_count", "ram_bytes", "storeval_version", "libraries",
                "command_line", "start_time", "study_hash", "targets", "target:local"):
        assert env.get(key) not in (None, "", {}), key
    assert env["study_hash"] == doc["study_hash"] and env["targets"]["local"]["mount"]["fstype"]
    assert env["targets"]["local"]["mount"]["options"] and env["target:local"]["driver"] == "file"
    assert doc["study"]["workloads"] and doc["study"]["keep_cache"] is False
    blob = r.out + r.err + out.read_text()
    con = duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True)
    for (table,) in con.execute("SHOW TABLES").fetchall():
        blob += str(con.execute(f"SELECT * FROM {table}").fetchall())
    assert secret not in blob


def test_memory_file_systems_are_named_as_such(tmp_path):
    shm = Path("/dev/shm")
    if not shm.is_dir():
        pytest.skip("no /dev/shm")
    target = shm / f"storeval-test-{os.getpid()}"
    target.mkdir()
    try:
        doc = run(tmp_path, "--target", str(target), "--workload", "bandwidth", "--set", "file_size=2MiB",
                  "--clients", "1")
        assert all("memory-medium" in [w["code"] for w in p["warnings"]] for p in phases(doc).values())
    finally:
        target.rmdir()


def _fig(value: float, phase: str = "read") -> PhaseFigures:
    return PhaseFigures(phase=phase, status="ok", reason=None, clients=1, bytes=100 * MiB, ops=100, seconds=1.0,
                        bandwidth_MiBps=value, ops_per_s=100.0)


def _cell(i: int) -> CellRow:
    return CellRow(cell_id=i, config=0, target="t", target_url="file:///t", workload="bw", kind="bandwidth",
                   params={"file_size": MiB, "transfer_size": MiB}, factors={"clients": 1}, clients=1, repetition=i,
                   status="ok", error=None, phases=[], records=[])


def test_outlier_repetitions_are_flagged_and_can_be_excluded():
    values = [100.0, 102.0, 98.0, 101.0, 30.0]  # one aberrant run
    cells = [CellFigures(cell=_cell(i), phases=[_fig(v)]) for i, v in enumerate(values)]
    (kept,) = summarize_run(cells)
    assert [o["cell"] for o in kept.outliers] == [4] and not kept.outliers_excluded
    assert kept.bandwidth.n == 5 and kept.bandwidth.min == 30.0
    (excluded,) = summarize_run(cells, exclude_outliers=True)
    assert excluded.outliers_excluded and excluded.bandwidth.n == 4 and excluded.bandwidth.min == 98.0
    assert "median absolute deviations" in excluded.as_dict()["outlier_rule"]
    # no outliers with fewer than three repetitions, or when all agree
    assert summarize_run(cells[:2])[0].outliers == []
    same = [CellFigures(cell=_cell(i), phases=[_fig(100.0)]) for i in range(4)]
    assert summarize_run(same)[0].outliers == []


STOP_ONE_REPETITION = """\
import os, pathlib, signal, sys

import psutil

here = pathlib.Path(sys.argv[1])
stopped = here / "stopped"
if sys.argv[2] == "cont":  # the fault's undo: continue what was stopped (nothing in other repetitions)
    for pid in stopped.read_text().split() if stopped.exists() else []:
        os.kill(int(pid), signal.SIGCONT)
    stopped.unlink(missing_ok=True)
    sys.exit(0)
count = here / "count"
n = int(count.read_text()) + 1 if count.exists() else 1
count.write_text(str(n))
if n == 2:  # the second repetition: stop its clients, the processes this run's coordinator started
    study = str(here / "s.yaml")
    (coordinator,) = [p for p in psutil.Process().parents() if study in p.cmdline()]  # this run's, no other
    clients = [p for p in coordinator.children(recursive=True) if p.name() == "storeval-client"]
    assert clients, "no client of this run to stop"
    stopped.write_text(" ".join(str(p.pid) for p in clients))
    for p in clients:
        os.kill(p.pid, signal.SIGSTOP)
"""


def test_terminal_states_when_outliers_are_excluded(tmp_path):
    """Three repetitions on a target of known speed (null, paced to 8 MiB/s); in the second, a fault stops the
    client 0.1 s into its 1 s write for 2 s. That repetition is the outlier: flagged and kept by default, left
    out with --exclude-outliers, and the report says which it did — in the table's caption and in the JSON."""
    import sys

    script = tmp_path / "stop.py"
    script.write_text(STOP_ONE_REPETITION)
    cmd = f"{sys.executable} {script} {tmp_path}"
    study = tmp_path / "s.yaml"
    study.write_text(yaml.safe_dump({
        "targets": {"t": {"url": "null://t", "rate": "8MiB/s"}},
        "workloads": {"bw": {"bandwidth": {"file_size": "8MiB", "transfer_size": "256KiB", "phases": ["write"]},
                             "faults": [{"at": "100ms", "phase": "write", "action": "exec", "run": f"{cmd} stop",
                                         "undo": f"{cmd} cont", "for": "2s"}]}}}))
    doc = run(tmp_path, str(study), "--repetitions", "3", "--clients", "1", "--no-html")
    rates = [c["phases"][0]["bandwidth_MiBps"] for c in doc["cells"]]
    assert [c["repetition"] for c in doc["cells"]] == [0, 1, 2]
    assert rates[1] < 8 / 2 and all(0.8 * 8 <= rates[i] <= 8 for i in (0, 2)), rates  # paced: 8 MiB/s at most
    (kept,) = [x for x in doc["summary"] if x["phase"] == "write"]
    assert [o["cell"] for o in kept["outliers"]] == [doc["cells"][1]["cell"]] and not kept["outliers_excluded"]
    assert kept["bandwidth_MiBps"]["n"] == 3 and kept["bandwidth_MiBps"]["min"] == rates[1]
    r = storeval("report", "--exclude-outliers", "--json", "excluded.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    (excluded,) = [x for x in load_json(tmp_path / "excluded.json")["summary"] if x["phase"] == "write"]
    assert excluded["outliers_excluded"] and excluded["bandwidth_MiBps"]["n"] == 2
    assert excluded["bandwidth_MiBps"]["mean"] == pytest.approx((rates[0] + rates[2]) / 2)
    text = " ".join(r.out.split())
    assert ("Outlier repetitions are EXCLUDED from these figures (--exclude-outliers); a repetition is an "
            "outlier") in text
    r = storeval("report", cwd=tmp_path)
    assert r.rc == 0, r.err
    text = " ".join(r.out.split())
    assert "mean ± stderr over 3 repetitions" in text and "EXCLUDED" not in text
    assert "Outlier repetitions are flagged and still included; a repetition is an outlier" in text
