"""A real batch system (issue 30): Slurm from Debian on emulated nodes — salloc and sbatch running storeval under
mpiexec across the nodes, what Slurm said recorded with the run, scancel mid-phase stored as interrupted."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import psutil
import pytest
import yaml

from .helpers import load_json, storeval

MiB = 1 << 20
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="emulated nodes are network namespaces: root only")


def _slurm(bed: Path, *args: str, cwd: Path, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "storeval", "testbed", "slurm", "--dir", str(bed), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env={**os.environ, "COLUMNS": "200"}, **kw)


def _study(path: Path, target: Path, workloads: dict) -> Path:
    path.write_text(yaml.safe_dump({"targets": {"here": {"url": f"file://{target}"}}, "workloads": workloads,
                                    "clients": [4]}))
    return path


def _wait_for(what: str, check, proc: subprocess.Popen, limit: float = 600) -> None:
    """Poll ``check`` while ``proc`` runs (a hang is caught by ``limit``, never a busy machine's slowness)."""
    start = time.monotonic()
    while not check():
        assert proc.poll() is None, f"{what}: the job ended first: {proc.communicate()}"
        assert time.monotonic() - start < limit, what
        time.sleep(0.2)


def test_salloc_sbatch_and_scancel_on_the_testbeds_slurm(tmp_path):
    bed = tmp_path / "bed"
    target = tmp_path / "target"
    target.mkdir()
    r = storeval("testbed", "up", "slurm", "--servers", "2", "--dir", str(bed), cwd=tmp_path, timeout=900)
    try:
        assert r.rc == 0, r.err
        assert "slurmd node1 pid" in r.err and "slurmd node2 pid" in r.err, r.err
        assert not (tmp_path / "storeval-testbed.yaml").exists()  # a batch system is not a storage target
        info = _slurm(bed, "sinfo", "-h", "-o", "%D %T %P", cwd=tmp_path)
        assert (info.returncode, info.stdout.split()) == (0, ["2", "idle", "storeval*"]), info

        # salloc, then mpiexec (launching with srun) across both nodes
        study = _study(tmp_path / "s.yaml", target, {
            "bw": {"bandwidth": {"file_size": "8MiB", "phases": ["write", "read"]}},
            "md": {"metadata": {"items": 20}}})
        run = _slurm(bed, "salloc", "-N", "2", "mpiexec", "-n", "4", "storeval", "run", str(study),
                     "--results", str(tmp_path / "res"), "--json", str(tmp_path / "salloc.json"), "--no-html",
                     cwd=tmp_path)
        assert run.returncode in (0, 1), run.stderr[-3000:]  # 1: a figure flagged (a busy host)
        doc = load_json(tmp_path / "salloc.json")
        assert doc["engine"] == "mpi" and [c["status"] for c in doc["cells"]] == ["ok", "ok"]
        for cell in doc["cells"]:
            for p in cell["phases"]:
                assert sorted(s["host"] for s in p["client_stats"]) == ["node1", "node1", "node2", "node2"], p["phase"]
        batch = doc["environment"]["batch"]
        assert batch["system"] == "slurm" and batch["job_id"].isdigit()
        assert (batch["cluster"], batch["partition"], batch["nodes"], batch["node_count"]) == (
            "storeval", "storeval", "node[1-2]", "2")
        assert doc["environment"]["host"] in ("node1", "node2")  # rank 0 ran on a node, not on this machine

        # sbatch: the batch script runs on node1 and mpiexec starts from there
        job = _slurm(bed, "sbatch", "-N", "2", "--wait", "-o", str(tmp_path / "job.out"), "--wrap",
                     f"mpiexec -n 2 storeval run {study} --workload bw --clients 2 --results {tmp_path / 'res'} "
                     f"--json {tmp_path / 'sbatch.json'} --no-html", cwd=tmp_path)
        assert job.returncode == 0, (job.stderr, (tmp_path / "job.out").read_text()[-3000:])
        doc = load_json(tmp_path / "sbatch.json")
        assert doc["environment"]["batch"]["job_id"] == job.stdout.split()[-1]  # "Submitted batch job N"
        assert doc["environment"]["host"] == "node1"

        # scancel mid-phase: every rank hears SIGTERM, the cell is stored as interrupted, its scratch removed
        nap = _study(tmp_path / "nap.yaml", target, {"nap": {"command": {"run": "sleep 600", "files_per_client": 1,
                                                                          "file_size": "1MiB"}}})
        proc = subprocess.Popen([sys.executable, "-m", "storeval", "testbed", "slurm", "--dir", str(bed), "salloc",
                                 "-N", "2", "mpiexec", "-n", "4", "storeval", "run", str(nap), "--results",
                                 str(tmp_path / "res"), "--no-html", "-q"], cwd=tmp_path, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            _wait_for("four sleeps", lambda: len([p for p in psutil.process_iter(["cmdline"])
                                                  if p.info["cmdline"] == ["sleep", "600"]]) >= 4, proc)
            queue = _slurm(bed, "squeue", "-h", "-o", "%i", cwd=tmp_path)
            (job_id,) = queue.stdout.split()
            assert _slurm(bed, "scancel", job_id, cwd=tmp_path).returncode == 0
            out, err = proc.communicate(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode != 0 and "interrupted" in out + err, (proc.returncode, out[-2000:], err[-2000:])
        con = duckdb.connect(str(tmp_path / "res" / "storeval.duckdb"), read_only=True)
        statuses = [row[0] for row in con.execute(
            "SELECT c.status FROM cells c JOIN studies s USING (run_id) WHERE s.command_line LIKE '%nap.yaml%'"
        ).fetchall()]
        con.close()
        assert statuses == ["interrupted"]
        assert os.listdir(target) == []  # every run's scratch is gone, the interrupted one's too
        # salloc returns once the job is cancelled; a rank on the other node may still be stopping its command
        # (SIGTERM, then Slurm's SIGKILL after KillWait, then the guard's death signal): every sleep must end by
        # itself, never be killed here (the bound catches a leak, not a slow host)
        sleeps = [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "600"]]
        _, alive = psutil.wait_procs(sleeps, timeout=300)
        assert alive == [], alive
    finally:
        down = storeval("testbed", "down", "--dir", str(bed), cwd=tmp_path, timeout=600)
    assert down.rc == 0, down.err
    assert not bed.exists()
    left = [p for p in psutil.process_iter(["cmdline"]) if str(bed) in " ".join(p.info["cmdline"] or [])]
    assert left == [], left
