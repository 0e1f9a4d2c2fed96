"""The results store holds everything needed to recompute figures; the CLI's main job works with no arguments."""

from __future__ import annotations

import os

import duckdb
import pytest

from storeval import __version__

from .helpers import load_json, storeval

MiB = 1 << 20


def test_figures_recompute_from_the_tables_with_sql(tmp_path, target):
    out = tmp_path / "out.json"
    r = storeval("run", "--target", str(target), "--workload", "bandwidth", "--clients", "2", "--repetitions", "2",
                 "--set", "file_size=4MiB", "--results", str(tmp_path / "res"), "--json", str(out), "--quiet", cwd=tmp_path)
    assert r.rc == 0, r.err
    doc = load_json(out)
    con = duckdb.connect(str(tmp_path / "res" / "storeval.duckdb"), read_only=True)
    tables = {t[0] for t in con.execute("SHOW TABLES").fetchall()}
    assert {"studies", "cells", "phases", "records", "events", "environment", "samples"} <= tables
    rows = con.execute("""
        SELECT cell_id, phase, sum(bytes), sum(ops), sum(bytes) / 1048576.0 / ((max(end_ns) - min(start_ns)) / 1e9)
        FROM records GROUP BY cell_id, phase ORDER BY cell_id, phase""").fetchall()
    by_key = {(c["cell"], p["phase"]): p for c in doc["cells"] for p in c["phases"]}
    assert len(rows) == len(by_key) == 4
    for cell_id, phase, nbytes, ops, bw in rows:
        ph = by_key[(cell_id, phase)]
        assert (nbytes, ops) == (ph["bytes"], ph["ops"]) == (2 * 4 * MiB, 2 * 4)
        assert bw == pytest.approx(ph["bandwidth_MiBps"], rel=1e-9)
    # the study, its hash and the environment are stored with the run
    study, study_hash = con.execute("SELECT study, study_hash FROM studies").fetchone()
    assert study_hash == doc["study_hash"] and len(study_hash) == 16
    env = dict(con.execute("SELECT key, value FROM environment").fetchall())
    assert {"host", "kernel", "cpu_model", "ram_bytes", "storeval_version", "command_line"} <= set(env)
    # repetitions summarised: mean, stderr, min/median/max
    summary = [s for s in doc["summary"] if s["phase"] == "write"][0]
    assert summary["repetitions"] == 2 and summary["bandwidth_MiBps"]["n"] == 2
    assert summary["bandwidth_MiBps"]["min"] <= summary["bandwidth_MiBps"]["median"] <= summary["bandwidth_MiBps"]["max"]


def test_two_runs_share_a_results_directory_and_report_reads_them(tmp_path, target):
    for _ in range(2):
        r = storeval("run", "--target", str(target), "--workload", "bandwidth", "--set", "file_size=1MiB", "--quiet",
                     cwd=tmp_path)
        assert r.rc == 0, r.err
    con = duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True)
    assert con.execute("SELECT count(*) FROM studies").fetchone() == (2,)
    con.close()
    r = storeval("report", "storeval-results", cwd=tmp_path)
    assert r.rc == 0 and "write" in r.out and "read" in r.out
    r = storeval("report", str(tmp_path / "nothing-here"), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: {tmp_path / 'nothing-here'} is not a results directory (run storeval run first, or pass the directory)"]


def test_null_driver_counts_exactly_and_measures_storevals_ceiling(tmp_path):
    out = tmp_path / "out.json"
    r = storeval("run", "--target", "null://", "--workload", "bandwidth", "--set", "file_size=64MiB",
                 "--set", "transfer_size=4KiB", "--set", "phases=write,randread", "--json", str(out), "--quiet",
                 cwd=tmp_path)
    assert r.rc == 0, r.err
    for ph in load_json(out)["cells"][0]["phases"]:
        assert ph["ops"] == 16384 and ph["bytes"] == 64 * MiB
        assert ph["ops_per_s"] > 50_000  # no I/O at all: this is storeval's own per-operation cost


def test_version_and_help():
    assert storeval("--version").out.strip() == f"storeval {__version__}"
    r = storeval("run", "--help")
    assert r.rc == 0
    for option in ("--target", "--workload", "--clients", "--set", "--repetitions", "--results", "--json", "--quiet"):
        assert option in r.out


def test_run_with_no_arguments_evaluates_the_current_directory(default_study_run):
    tmp_path, r, _ = default_study_run
    assert r.rc == 0, r.err
    assert "bandwidth" in r.out and "MiB/s" in r.out and "metadata" in r.out and "mean ops/s" in r.out
    assert "skim" in r.out and "events/s" in r.out
    assert sorted(os.listdir(tmp_path)) == ["storeval-data", "storeval-results"]  # the skim's files stay for reuse
    con = duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True)
    assert con.execute("SELECT DISTINCT clients FROM cells ORDER BY 1").fetchall() == [(1,), (2,)]
    assert con.execute("SELECT DISTINCT kind FROM cells ORDER BY 1").fetchall() == [("bandwidth",), ("metadata",), ("skim",)]
    assert con.execute("SELECT count(*) FROM cells WHERE status <> 'ok'").fetchone() == (0,)


def test_results_of_an_older_storeval_are_migrated_and_still_readable(tmp_path, target):
    """A store written before `iteration` existed: columns are added, old runs load, new runs are stored."""
    res = tmp_path / "res"
    res.mkdir()
    con = duckdb.connect(str(res / "storeval.duckdb"))
    con.execute("CREATE TABLE phases (run_id VARCHAR, cell_id INTEGER, seq INTEGER, phase VARCHAR, status VARCHAR, "
                "reason VARCHAR, PRIMARY KEY (run_id, cell_id, seq))")
    con.execute("INSERT INTO phases VALUES ('old', 0, 0, 'write', 'ok', NULL)")
    con.close()
    r = storeval("run", "--target", str(target), "--workload", "bandwidth", "--set", "file_size=1MiB",
                 "--results", str(res), "--quiet", cwd=tmp_path)
    assert r.rc == 0, r.err
    con = duckdb.connect(str(res / "storeval.duckdb"), read_only=True)
    assert con.execute("SELECT phase, iteration FROM phases WHERE run_id = 'old'").fetchall() == [("write", None)]
    assert con.execute("SELECT count(*) FROM phases WHERE run_id <> 'old' AND iteration = 0").fetchone() == (4,)  # 2 cells x 2 phases
