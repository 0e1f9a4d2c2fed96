"""Issue 35.2: a testbed system's state as a swept setting — healthy, N parts down, healing — side by side.

The real runs bring up GlusterFS replica-3 volumes (a FUSE mount: root) through a study's testbed target; the
checks of the settings themselves need no server."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from storeval.analysis.scaling import _healing_x
from storeval.core.system import check_state_setting, system_options

from .helpers import load_json, storeval

MiB = 1 << 20



def _study(tmp_path: Path, targets: dict, name: str = "study.yaml", **more) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump({
        "targets": targets, "clients": [2],
        "workloads": {"rw": {"bandwidth": {"file_size": "32MiB", "transfer_size": "1MiB",
                                           "phases": ["write", "read"]}}}, **more}))
    return path


@pytest.mark.parametrize("entry, line", [
    ({"degraded": -1}, "gluster.degraded: -1 must be a number of parts down (0 for healthy) or healing"),
    ({"degraded": ["sick"]}, "gluster.degraded: 'sick' must be a number of parts down (0 for healthy) or healing"),
    ({"degraded": True}, "gluster.degraded: true must be a number of parts down (0 for healthy) or healing"),
    ({"degraded": "healing", "heal_fill": 0}, "gluster.heal_fill: 0 must be a size above 0, such as 256MiB"),
    ({"degraded": "healing", "heal_fill": "lots"}, "gluster.heal_fill: 'lots' must be a size such as 256MiB"),
])
def test_a_bad_state_is_refused_in_one_line_before_anything_starts(tmp_path, entry, line):
    study = _study(tmp_path, {"gluster": {"testbed": "glusterfs", "type": "replicate", "servers": 3, **entry}})
    r = storeval("run", str(study), "--results", str(tmp_path / "res"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and line in r.err_lines[0], r.err
    assert not (tmp_path / "res").exists()


def test_the_state_settings_never_reach_the_system_and_healing_sits_after_the_most_parts_down():
    assert system_options({"servers": 3, "degraded": 1, "heal_fill": "64MiB"}) == {"servers": 3}
    assert check_state_setting("heal_fill", "64MiB") == 64 * MiB and check_state_setting("degraded", "healing") == "healing"

    class _Cell:
        def __init__(self, degraded):
            self.cell = type("C", (), {"factors": {"degraded": degraded}})()

    assert _healing_x([_Cell(0), _Cell(2), _Cell("healing")]) == 3 and _healing_x([_Cell("healing")]) == 1


def _events(doc: dict, cell: int, kind: str) -> list[dict]:
    return [e for e in doc["events"] if e.get("cell") == cell and e["kind"] == kind]


@pytest.mark.skipif(os.geteuid() != 0, reason="GlusterFS needs root (a FUSE mount, a network namespace)")
def test_healthy_one_brick_down_and_healing_side_by_side_on_one_volume(tmp_path):
    fill = 96 * MiB
    study = _study(tmp_path, {"gluster": {"testbed": "glusterfs", "type": "replicate", "servers": 3,
                                          "degraded": [0, 1, "healing"], "heal_fill": "96MiB"}})
    # the run makes its own systems directory here (TMPDIR; short: daemons put sockets under it): what stays is
    # this run's, whatever else runs beside
    own = tempfile.mkdtemp(prefix="svt-", dir="/tmp")
    try:
        out = tmp_path / "out.json"
        r = storeval("run", str(study), "--json", str(out), "--results", str(tmp_path / "res"), cwd=tmp_path,
                     timeout=1200, env={"TMPDIR": own})
        left = [n for n in os.listdir(own) if n.startswith("storeval-systems-")]  # (pymp-*: Python's own)
    finally:
        shutil.rmtree(own, ignore_errors=True)
    assert r.rc == 0, r.err
    doc = load_json(out)
    cells = {c["factors"]["degraded"]: c for c in doc["cells"]}
    assert set(cells) == {0, 1, "healing"} and all(c["status"] == "ok" for c in cells.values()), r.err
    for c in cells.values():
        assert [p["status"] for p in c["phases"]] == ["ok", "ok"]
        assert [p["bytes"] for p in c["phases"]] == [2 * 32 * MiB] * 2

    # healthy: nothing set, nothing read
    assert _events(doc, cells[0]["cell"], "system-state") == []
    # one brick down through the cell: the volume itself says brick3 is not connected, at the start and the end
    (down,) = [e for e in doc["events"] if e["kind"] == "system-degraded" and e["detail"]["degraded"] == 1]
    assert down["detail"]["down"] == ["glusterfs.brick3"] and len(down["detail"]["system_says"]["down"]) == 1
    assert down["detail"]["system_says"]["down"][0].endswith("/bricks/brick3")
    (state,) = _events(doc, cells[1]["cell"], "system-state")
    assert state["detail"]["down"] == ["glusterfs.brick3"] and len(state["detail"]["down_at_end"]) == 1
    assert state["detail"]["samples"] and all(s[2] == 1 for s in state["detail"]["samples"])
    # healing: brick3 killed, the fill written without it, brick3 back; the cell begins once the volume says so
    (made,) = _events(doc, cells["healing"]["cell"], "system-degraded")
    assert made["detail"]["part"] == "glusterfs.brick3" and made["detail"]["fill_bytes"] == fill
    (state,) = _events(doc, cells["healing"]["cell"], "system-state")
    h = state["detail"]
    assert h["unit"] == "entries" and h["pending_at_start"] > 0 and h["down"] == []
    assert len(h["samples"]) >= 2 and h["samples"][-1][0] >= h["cell_s"] and h["bytes_moved"] >= 0
    if h["pending_at_end"] < h["pending_at_start"]:
        assert h["bytes_moved"] > 0  # the self-heal daemon's own sends while the cell ran
    assert 0 < h["healing_share"] <= 1 and h["healing_s"] == pytest.approx(h["healing_share"] * h["cell_s"], abs=0.01)
    warned = [e for e in doc["events"] if e["kind"] == "warning" and "degraded=healing" in e["message"]]
    assert bool(warned) == (h["whole_after_s"] is not None)
    # one table: the aggregate in each state, per phase
    table = r.out[r.out.index("Healthy, degraded and healing"):]
    assert "degraded=0" in table and "degraded=1" in table and "degraded=healing" in table
    for phase in ("write", "read"):
        agg = {k: next(p for p in c["phases"] if p["phase"] == phase)["bandwidth_MiBps"] for k, c in cells.items()}
        line = next(x for x in r.out.splitlines() if x.startswith(f"states gluster · rw (clients=2) · {phase}:"))
        assert all(f"{k}→" in line for k in ("0", "1", "healing")), line
        assert all(v > 0 for v in agg.values())
    # every system it started is down, its directory gone, the fill with the scratch
    assert left == []


@pytest.mark.skipif(os.geteuid() != 0, reason="GlusterFS needs root (a FUSE mount, a network namespace)")
def test_a_state_the_system_cannot_reach_fails_its_cells_in_one_line(tmp_path):
    study = _study(tmp_path, {"all-down": {"testbed": "glusterfs", "type": "replicate", "servers": 3, "degraded": 3},
                              "one-copy": {"testbed": "glusterfs", "type": "distribute", "servers": 2,
                                           "degraded": "healing"}})
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--json", str(out), "--results", str(tmp_path / "res"), cwd=tmp_path, timeout=1200)
    doc = load_json(out)
    errors = {c["target"]: c["error"] for c in doc["cells"]}
    assert all(c["status"] == "failed" for c in doc["cells"]), errors
    assert "degraded: 3 needs more than 3 parts of the glusterfs testbed (it has 3: glusterfs.brick1, glusterfs.brick2, " \
           "glusterfs.brick3); lower degraded or raise its servers" in errors["all-down"]
    assert "degraded: healing: the glusterfs testbed reports no repair to follow" in errors["one-copy"]
    assert r.rc != 0
