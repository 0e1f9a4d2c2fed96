"""Metadata workload (mdtest): exact op counts in every mode, tree arithmetic, stride, iterations, cleanup."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from storeval.drivers import make_driver
from storeval.core.oplog import PhaseRecorder
from storeval.errors import StorevalError
from storeval.workloads.base import ClientContext
from storeval.workloads.metadata import Metadata, MetadataParams, tree_size

from .helpers import InProcessComm, load_json, storeval


def run_json(tmp_path: Path, *args: str, rc: int = 0) -> dict:
    out = tmp_path / "out.json"
    r = storeval("run", *args, "--json", str(out), "--quiet", cwd=tmp_path)
    assert r.rc == rc, r.err
    return load_json(out)


def expected_ops(phase: str, clients: int, items: int, tree_dirs: int, mode: str) -> int:
    if phase.startswith("tree-"):
        return tree_dirs * (clients if mode == "unique" else 1)
    return clients * items


@pytest.mark.parametrize("mode", ["unique", "single", "shared"])
def test_issue_check_op_counts_in_every_mode(tmp_path, target, mode):
    t0 = time.perf_counter_ns()  # CLOCK_MONOTONIC, the clock of storeval's records too
    doc = run_json(tmp_path, "--target", f"file://{target}", "--workload", "metadata", "--clients", "2",
                   "--set", "items=200", "--set", f"mode={mode}")
    t1 = time.perf_counter_ns()
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        spans = dict(((phase, (first, last)) for phase, first, last in con.execute(
            "SELECT phase, min(start_ns), max(barrier_ns) FROM records GROUP BY phase").fetchall()))
    (cell,) = doc["cells"]
    assert cell["status"] == "ok", cell["error"]
    phases = [p["phase"] for p in cell["phases"]]
    assert phases == ["tree-create", "dir-create", "dir-stat", "dir-remove", "file-create", "file-stat", "file-read",
                      "file-remove", "tree-remove"]
    for ph in cell["phases"]:
        assert ph["ops"] == expected_ops(ph["phase"], 2, 200, 1, mode), ph["phase"]
        assert ph["ops_per_s"] > 0 and ph["io_engines"] == ["psync"]  # a local file system: native system calls
        lat = ph["latency_us"]
        assert 0 < lat["p50"] <= lat["p90"] <= lat["p99"] <= lat["max"]
        # mdtest's rate: the operations counted by hand over the span from the first client's start to the
        # last exit from the closing barrier, as the clients' clocks read them — inside this test's own bracket
        first, last = spans[ph["phase"]]
        assert t0 < first < last < t1
        assert ph["seconds"] == pytest.approx((last - first) / 1e9, rel=1e-9)
        assert ph["ops_per_s"] == pytest.approx(expected_ops(ph["phase"], 2, 200, 1, mode) / ((last - first) / 1e9),
                                                rel=1e-9)
    creates = {p["phase"]: p for p in cell["phases"]}["file-create"]["client_stats"]
    if mode == "shared":  # client 0 creates every client's items
        assert [c["ops"] for c in creates] == [400, 0]
    else:
        assert [c["ops"] for c in creates] == [200, 200]
    assert os.listdir(target) == []


@pytest.mark.parametrize("mode", ["unique", "single", "shared"])
def test_tree_arithmetic_with_leaf_only(tmp_path, target, mode):
    assert tree_size(2, 3) == 13
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=200",
                   "--set", f"mode={mode}", "--set", "depth=2", "--set", "branching=3", "--set", "leaf_only=true")
    for ph in doc["cells"][0]["phases"]:
        assert ph["ops"] == expected_ops(ph["phase"], 2, 200, 13, mode), ph["phase"]
    assert os.listdir(target) == []


def test_items_per_dir_follows_mdtest_I(tmp_path, target):
    # mdtest -I 10 -z 2 -b 3: 10 items in each of the 13 directories of the tree, per client
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2",
                   "--set", "items_per_dir=10", "--set", "depth=2", "--set", "branching=3", "--set", "files_only=true")
    cell = doc["cells"][0]
    assert [p["phase"] for p in cell["phases"]] == ["tree-create", "file-create", "file-stat", "file-read",
                                                    "file-remove", "tree-remove"]
    assert {p["phase"]: p["ops"] for p in cell["phases"]}["file-create"] == 2 * 130


def _clients(target: Path, params: MetadataParams, n: int = 2) -> list[tuple[Metadata, ClientContext]]:
    driver = make_driver(f"file://{target}")
    (target / "cell").mkdir()
    out = []
    for rank in range(n):
        c = ClientContext(rank=rank, nclients=n, driver=driver, cell_dir="cell", seed=0, comm=InProcessComm(rank, n))
        wl = Metadata(params)
        wl.prepare(c)
        out.append((wl, c))
    return out


def _run(wl: Metadata, c: ClientContext, phase: str) -> PhaseRecorder:
    rec = PhaseRecorder(c.rank, phase)
    rec.begin()
    wl.run_phase(c, phase, rec)
    rec.finish()
    return rec


def test_stat_stride_makes_a_client_touch_the_next_clients_items(target):
    """Only client 1's files exist; client 0 can stat and read them only when it works on rank+1's items."""
    params = MetadataParams(items=50, files_only=True, stat_stride=1, mode="unique", file_size=100)
    (wl0, c0), (wl1, c1) = _clients(target, params)
    for wl, c in ((wl0, c0), (wl1, c1)):
        _run(wl, c, "tree-create")
    _run(wl1, c1, "file-create")
    assert sorted(os.listdir(target / "cell" / "t.1.0"))[:2] == ["f.1.0", "f.1.1"]
    assert os.listdir(target / "cell" / "t.0.0") == []
    rec = _run(wl0, c0, "file-stat")
    assert rec.record(0).ops == 50
    rec = _run(wl0, c0, "file-read")
    assert rec.record(0).bytes == 50 * 100
    # without the stride client 0 looks for its own items, which do not exist
    no_stride = Metadata(MetadataParams(items=50, files_only=True, mode="unique"))
    no_stride.prepare(c0)
    with pytest.raises(StorevalError, match=r"file-stat of .*/t\.0\.0/f\.0\.0: No such file"):
        _run(no_stride, c0, "file-stat")
    # client 0 removes client 1's files with the stride
    _run(wl0, c0, "file-remove")
    assert os.listdir(target / "cell" / "t.1.0") == []


def test_the_names_a_phase_works_on_are_made_before_its_timed_region(target):
    """mdtest times a loop over names it already made; making 20,000 paths and their native job inside the timed
    region cost as much as stat-ing them (storeval at 0.5x mdtest): before_phase makes them, untimed."""
    params = MetadataParams(items=30, files_only=True, mode="unique")
    ((wl, c),) = _clients(target, params, n=1)
    made: list[int] = []
    paths = wl._paths
    wl._paths = lambda c, phase: (made.append(time.perf_counter_ns()), paths(c, phase))[1]
    for phase in ("tree-create", "file-create", "file-stat", "file-read", "file-remove", "tree-remove"):
        made.clear()
        wl.before_phase(c, phase)  # what the engine calls before the phase's barriers
        rec = _run(wl, c, phase)
        assert made and max(made) < rec.start_ns, phase  # every name was made before the phase began
        assert rec.record(0).ops == (1 if phase.startswith("tree-") else 30), phase
    assert os.listdir(target / "cell") == []


def test_iterations_repeat_every_phase_and_summarise_like_mdtest(tmp_path, target):
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=100",
                   "--set", "iterations=3", "--set", "files_only=true")
    cell = doc["cells"][0]
    steps = [(p["phase"], p["iteration"]) for p in cell["phases"]]
    per = ["tree-create", "file-create", "file-stat", "file-read", "file-remove", "tree-remove"]
    assert steps == [(ph, it) for it in range(3) for ph in per]
    assert all(p["ops"] == expected_ops(p["phase"], 2, 100, 1, "unique") for p in cell["phases"])
    summary = {s["phase"]: s for s in doc["summary"]}
    stats = summary["file-create"]["ops_per_s"]
    assert stats["n"] == 3 and stats["min"] <= stats["mean"] <= stats["max"] and stats["stddev"] is not None
    r = storeval("report", cwd=tmp_path)
    assert all(col in r.out for col in ("max ops/s", "min ops/s", "mean ops/s", "std dev"))


def test_repeat_for_repeats_whole_passes_of_the_phases_that_leave_the_items_alone(tmp_path, target):
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=40",
                   "--set", "repeat_for=0.6s", "--set", "files_only=true")
    (cell,) = doc["cells"]
    by = {p["phase"]: p for p in cell["phases"]}
    for phase in ("file-stat", "file-read"):
        p = by[phase]
        passes = [s["passes"] for s in p["client_stats"]]
        assert p["seconds"] >= 0.6 and min(passes) >= 2, p
        assert [s["ops"] for s in p["client_stats"]] == [40 * n for n in passes]  # whole passes only
        assert p["ops"] == 40 * sum(passes) and "short-phase" not in {f["code"] for f in p["flags"]}
    for phase in ("file-create", "file-remove"):  # a create or remove cannot be repeated
        assert by[phase]["ops"] == 80 and all("passes" not in s for s in by[phase]["client_stats"])
    assert os.listdir(target) == []


def test_create_and_stat_only_like_mdtest_C_T_still_cleans_up(tmp_path, target):
    """The seed's `mdtest -C -T ... -L -u -F`: create and stat, no removal phases — storeval removes untimed."""
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2",
                   "--set", "items_per_dir=20", "--set", "depth=2", "--set", "branching=4", "--set", "leaf_only=true",
                   "--set", "files_only=true", "--set", "phases=tree-create,file-create,file-stat", "--set", "iterations=2")
    cell = doc["cells"][0]
    assert [p["ops"] for p in cell["phases"] if p["phase"] == "file-create"] == [2 * 20 * 16] * 2
    assert os.listdir(target) == []


def test_stat_only_creates_its_items_untimed(tmp_path, target):
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=300",
                   "--set", "phases=dir-stat,file-stat", "--set", "mode=single")
    assert [(p["phase"], p["ops"]) for p in doc["cells"][0]["phases"]] == [("dir-stat", 600), ("file-stat", 600)]
    assert os.listdir(target) == []


def test_file_size_is_written_and_read(tmp_path, target):
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=50",
                   "--set", "file_size=4KiB", "--set", "files_only=true")
    by = {p["phase"]: p for p in doc["cells"][0]["phases"]}
    assert by["file-create"]["bytes"] == by["file-read"]["bytes"] == 2 * 50 * 4096
    assert by["file-stat"]["bytes"] == 0


def test_dir_list_lists_the_directories_holding_items(tmp_path, target):
    doc = run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=40",
                   "--set", "depth=1", "--set", "branching=4", "--set", "leaf_only=true", "--set", "mode=single",
                   "--set", "dirs_only=true", "--set", "phases=dir-create,dir-list,dir-remove")
    by = {p["phase"]: p for p in doc["cells"][0]["phases"]}
    assert by["dir-list"]["ops"] == 2 * 4  # each client lists the 4 leaves
    assert by["dir-create"]["ops"] == by["dir-remove"]["ops"] == 80


def test_out_of_inodes_fails_the_cell_with_the_reason_and_cleans_up(tmp_path):
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,nr_inodes=200", "tmpfs", str(mnt)],
                                           capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")
    try:
        doc = run_json(tmp_path, "--target", str(mnt), "--workload", "metadata", "--clients", "2",  # --force: past
                       "--set", "items=500", "--set", "files_only=true", "--force", rc=1)  # the inode preflight
        cell = doc["cells"][0]
        assert cell["status"] == "failed"
        assert "No space left on device" in cell["error"] and "file-create" in cell["error"]
        failed = [p for p in cell["phases"] if p["status"] == "failed"]
        assert [p["phase"] for p in failed] == ["file-create"] and failed[0]["errors"].get("ENOSPC", 0) >= 1
        assert os.listdir(mnt) == []
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_cell_cleanup_removes_storevals_names_and_nothing_else(target):
    params = MetadataParams(items=30, depth=1, branching=2)
    (wl0, c0), (wl1, c1) = _clients(target, params)
    for wl, c in ((wl0, c0), (wl1, c1)):
        _run(wl, c, "tree-create")
        _run(wl, c, "dir-create")
        _run(wl, c, "file-create")
    (target / "cell" / "t.0.0" / "user-notes.txt").write_text("not storeval's")
    wl0.cell_cleanup(c0.driver, "cell", 2)
    assert sorted(os.listdir(target / "cell")) == ["t.0.0"]
    assert os.listdir(target / "cell" / "t.0.0") == ["user-notes.txt"]


def test_metadata_on_the_null_target_counts_exactly(tmp_path):
    doc = run_json(tmp_path, "--target", "null://", "--workload", "metadata", "--clients", "2", "--set", "items=1000",
                   "--set", "mode=single")
    for ph in doc["cells"][0]["phases"]:
        assert ph["ops"] == expected_ops(ph["phase"], 2, 1000, 1, "single")


@pytest.mark.parametrize("settings,message", [
    (["items=10", "items_per_dir=2"], "give items or items_per_dir, not both"),
    (["files_only=true", "dirs_only=true"], "files_only and dirs_only exclude each other"),
    (["depth=20", "branching=10"], "directories (at most 1,000,000"),
    (["mode=shared-ish"], "'shared-ish' is not one of unique, single, shared"),
    (["phases=file-create,file-sta"], "is not one of tree-create"),
    (["repeat_for=0s"], "repeat_for must be more than 0 seconds (e.g. 1s)"),
])
def test_bad_metadata_parameters(tmp_path, target, settings, message):
    args = [x for s in settings for x in ("--set", s)]
    r = storeval("run", "--target", str(target), "--workload", "metadata", *args, cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and message in r.err, r.err


def test_the_leaders_counter_snapshots_fall_outside_every_clients_timed_window(tmp_path, target):
    """The host leader's ~1 ms counter snapshots are taken while every client is held between two barriers,
    so the rate mdtest would report is what storeval reports (issue 14.4)."""
    run_json(tmp_path, "--target", str(target), "--workload", "metadata", "--clients", "2", "--set", "items=50",
             "--set", "files_only=true", "--repetitions", "1", "--results", "res")
    con = duckdb.connect(str(tmp_path / "res" / "storeval.duckdb"), read_only=True)
    rows = con.execute("SELECT phase, rank, start_ns, end_ns, extra FROM records ORDER BY phase, rank").fetchall()
    assert rows
    by_phase: dict[str, list] = {}
    for phase, rank, start, end, extra in rows:
        by_phase.setdefault(phase, []).append((rank, start, end, json.loads(extra)))
    for phase, recs in by_phase.items():
        (leader,) = [r for r in recs if r[0] == 0]
        window = leader[3]["probe_window"]
        assert window["before_start_ns"] >= 0 and window["after_end_ns"] >= 0, phase
        first_start, last_end = min(r[1] for r in recs), max(r[2] for r in recs)
        snapped, snap = leader[1] - window["before_start_ns"], leader[2] + window["after_end_ns"]
        assert snapped <= first_start and snap >= last_end, phase  # outside every client's window
        assert all("probe_window" not in r[3] for r in recs if r[0] != 0)


def test_a_file_mix_does_its_ratio_of_creates_stats_reads_and_removes_and_puts_the_files_back(tmp_path, target):
    """file-mix on each client's own 1,000 files: 1,000 operations a client in the mix's ratio, each kind counted
    apart (the bytes are exactly the creates' and reads' 4 KiB), a stat/read/remove always of a file that exists
    then (no error); after it the files are as before, so file-remove removes every one, and nothing is left."""
    doc = run_json(tmp_path, "--target", f"file://{target}", "--workload", "metadata", "--clients", "2",
                   "--set", "items=1000", "--set", "file_size=4KiB", "--set", "phases=file-create,file-mix,file-remove",
                   "--set", "mix={create: 10, stat: 60, read: 20, remove: 10}")
    cell = doc["cells"][0]
    assert cell["status"] == "ok", cell["error"]
    create, mix, remove = cell["phases"]
    assert mix["phase"] == "file-mix" and mix["errors"] == {} and mix["io_engines"] == ["python"]
    kinds = {k: mix[f"{k}_ops"] for k in ("create", "stat", "read", "remove")}
    assert sum(kinds.values()) == mix["ops"] == 2000
    assert mix["bytes"] == (kinds["create"] + kinds["read"]) * 4096
    for k, share in (("create", 0.10), ("stat", 0.60), ("read", 0.20), ("remove", 0.10)):
        assert abs(mix[f"{k}_share"] - share) < 0.04, (k, mix[f"{k}_share"])  # 2,000 draws
    assert remove["ops"] == 2000 and remove["errors"] == {}
    assert os.listdir(target) == []


def test_a_file_mix_must_add_up_to_100():
    with pytest.raises(ValueError, match="mix: create, stat, read and remove add up to 90, not 100"):
        MetadataParams(mix={"create": 10, "stat": 60, "read": 10, "remove": 10})
