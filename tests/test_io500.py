"""The io500 workload: IO500's phases in its order on real files, its score computed as IO500 computes it, and the
rules a run breaks said beside it; the ready study on the testbed's GlusterFS and CephFS."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest

from storeval.workloads.io500 import BANDWIDTH, IO500, METADATA, PHASES, IO500Params

from .helpers import leftovers, load_json, storeval

HARD = 47008


def test_a_run_has_io500s_phases_in_its_order_exact_work_and_its_score(tmp_path, target):
    out = tmp_path / "out.json"
    r = storeval("run", "--target", f"file://{target}", "--workload", "io500", "--clients", "2",
                 "--set", "ior_easy_size=8MiB", "--set", "ior_hard_records=64", "--set", "mdtest_easy_files=150",
                 "--set", "mdtest_hard_files=120", "--set", "stonewall=60s", "--set", "rules=scc",
                 "--json", str(out), "--html", "page.html", cwd=tmp_path)
    assert r.rc == 0, r.err
    cell = load_json(out)["cells"][0]
    assert cell["status"] == "ok", cell["error"]
    phases = {p["phase"]: p for p in cell["phases"]}
    assert [p["phase"] for p in cell["phases"]] == list(PHASES)
    assert all(p["status"] == "ok" for p in cell["phases"])
    # the work is IO500's shapes, exactly (nothing reached the 60 s stonewall)
    assert phases["ior-easy-write"]["bytes"] == phases["ior-easy-read"]["bytes"] == 2 * 8 << 20
    assert phases["ior-easy-write"]["ops"] == 2 * 4  # 2 MiB transfers
    assert phases["ior-hard-write"]["bytes"] == phases["ior-hard-read"]["bytes"] == 2 * 64 * HARD
    assert phases["ior-hard-write"]["ops"] == 2 * 64
    assert phases["ior-rnd4K-easy-read"]["ops"] == 2 * (8 << 20) // 4096
    for ph in ("mdtest-easy-write", "mdtest-easy-stat", "mdtest-easy-delete"):
        assert phases[ph]["ops"] == 300 and phases[ph]["bytes"] == 0
    for ph in ("mdtest-hard-write", "mdtest-hard-stat", "mdtest-hard-read", "mdtest-hard-delete"):
        assert phases[ph]["ops"] == 240
    assert phases["mdtest-hard-write"]["bytes"] == phases["mdtest-hard-read"]["bytes"] == 240 * 3901
    # find examined every entry the namespace held then: 300 + 240 files, 2 ior-easy files and the shared one,
    # the part directories and mdtest's trees; and found each hard file whose name has "01"
    wanted = sum("01" in f"f.{k}.{j}" for k in range(2) for j in range(120))
    assert phases["find"]["found"] == phases["find"]["expected"] == wanted > 0
    assert phases["find"]["entries"] >= 300 + 240 + 3 and phases["find"]["ops"] == phases["find"]["entries"]
    # the score, as IO500 computes it from the phases' own figures
    result = cell["result"]
    gib = {n: phases[n]["bandwidth_MiBps"] / 1024 for n in BANDWIDTH}
    kiops = {n: phases[n]["ops_per_s"] / 1000 for n in METADATA}
    bw = math.prod(gib.values()) ** (1 / 4)
    md = math.prod(kiops.values()) ** (1 / 8)
    assert result["bandwidth_GiBps"] == pytest.approx(bw, rel=1e-9)
    assert result["metadata_kIOPS"] == pytest.approx(md, rel=1e-9)
    assert result["score"] == pytest.approx(math.sqrt(bw * md), rel=1e-9)
    # a run this short breaks IO500's rules, and says which
    assert result["valid"] is False and result["label"] == "IO500-shaped, not a valid submission"
    for ph in ("ior-easy-write", "mdtest-easy-write", "ior-hard-write", "mdtest-hard-write"):
        assert any(rule.startswith(f"{ph} ran ") and "not the 30 s IO500's scc rules ask" in rule
                   for rule in result["broken_rules"]), result["broken_rules"]
    assert len(result["submission"]["results"]) == 12 and result["submission"]["score"].startswith("[SCORE ]")
    assert "IO500-shaped, not a valid submission: score" in r.out and "breaks: ior-easy-write ran" in r.out
    # the HTML report says the same under the phase table
    page = (tmp_path / "page.html").read_text()
    assert f"IO500-shaped, not a valid submission: score {result['score']:.4g}" in page
    assert "breaks: ior-easy-write ran" in page
    assert leftovers(target) == []


def _phase(name: str, seconds: float, mib: float = 0.0, ops: float = 0.0, **extra) -> SimpleNamespace:
    return SimpleNamespace(phase=name, status="ok", reason=None, seconds=seconds, bandwidth_MiBps=mib,
                           ops_per_s=ops, warnings=[], flags=[], extra=extra)


def test_a_run_that_keeps_the_rules_is_a_result_and_one_that_leaves_a_phase_out_has_no_score():
    figures = [_phase(n, 301.0, mib=2048.0) if n.startswith("ior-") else _phase(n, 301.0, ops=8000.0)
               for n in PHASES]
    result = IO500.cell_result({}, figures)
    assert result["valid"] is True and result["broken_rules"] == [] and result["label"] == "IO500 result"
    assert result["bandwidth_GiBps"] == pytest.approx(2.0) and result["metadata_kIOPS"] == pytest.approx(8.0)
    assert result["score"] == pytest.approx(4.0)
    assert result["submission"]["score"] == "[SCORE ] Bandwidth 2.000000 GiB/s : IOPS 8.000000 kiops : TOTAL 4.000000"
    figures[0].warnings = [{"code": "page-cache", "message": "…"}]
    lacking = IO500.cell_result({}, [f for f in figures if f.phase != "find"])
    assert lacking["score"] is None and lacking["valid"] is False
    assert "find did not run" in lacking["broken_rules"]
    assert any("page cache" in rule for rule in lacking["broken_rules"])
    assert IO500.result_lines(lacking)[0] == "IO500-shaped, not a valid submission: no score (a scored phase did not run)"


@pytest.mark.parametrize("settings, message", [
    ({"ior_easy_size": 3 << 20}, "ior_easy_size 3 MiB is not a whole number of ior_easy_transfer 2 MiB"),
    ({"stonewall": 0}, "stonewall must be more than 0 seconds"),
    ({"phases": ["find", "find"]}, "phases lists a phase twice"),
])
def test_bad_settings_are_refused_in_one_line(settings, message):
    with pytest.raises(ValueError, match=message):
        IO500Params(**settings)


def test_the_ready_study_scores_glusterfs_and_cephfs(tmp_path):
    """studies/io500-gluster-ceph.yaml at the smallest scale: both systems come up, every phase runs on each,
    each cell has a score and its broken rules, and nothing is left behind."""
    if os.geteuid() != 0:
        pytest.fail("the IO500 study mounts GlusterFS and CephFS with FUSE: run the suite as root")
    study = os.path.join(os.path.dirname(__file__), "..", "studies", "io500-gluster-ceph.yaml")
    out = tmp_path / "out.json"
    r = storeval("run", study, "--clients", "2", "--set", "ior_easy_size=4MiB", "--set", "ior_hard_records=32",
                 "--set", "mdtest_easy_files=60", "--set", "mdtest_hard_files=40", "--json", str(out), "--no-html",
                 cwd=tmp_path, timeout=1200)
    assert r.rc == 0, r.err[-3000:]
    cells = load_json(out)["cells"]
    assert sorted(c["target"] for c in cells) == ["cephfs", "glusterfs"]
    for cell in cells:
        assert cell["status"] == "ok", cell["error"]
        assert [p["phase"] for p in cell["phases"] if p["status"] == "ok"] == list(PHASES), cell["target"]
        assert next(p for p in cell["phases"] if p["phase"] == "ior-hard-write")["bytes"] == 2 * 32 * HARD
        assert cell["result"]["score"] > 0 and cell["result"]["valid"] is False
    assert r.out.count("IO500-shaped, not a valid submission: score") == 2
