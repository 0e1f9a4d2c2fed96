"""Many hosts (issue 30): emulated nodes — network namespaces with host names of their own — launched onto by a
real ``mpiexec`` (MPICH's hydra, through the launcher the testbed writes), against a MinIO on its own node."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import duckdb
import pytest
import yaml

from .helpers import load_json, storeval

MiB = 1 << 20
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="emulated nodes are network namespaces: root only")


def _mpiexec(bed: Path, hosts: str, n: int, *args: str, cwd: Path, timeout: float = 900):
    """``storeval testbed mpiexec`` across ``hosts``, running ``storeval ARGS`` on ``n`` ranks."""
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "storeval", "testbed", "mpiexec", "--dir", str(bed), "-hosts", hosts,
                           "-n", str(n), sys.executable, "-m", "storeval", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout, env=env)


def test_mpiexec_across_emulated_nodes_each_with_its_host_name_and_link(tmp_path):
    bed = tmp_path / "bed"
    r = storeval("testbed", "nodes", "up", "2", "--rate", "200Mbit", "--dir", str(bed), cwd=tmp_path)
    try:
        assert r.rc == 0, r.err
        lines = r.out.splitlines()
        assert lines[0].startswith("node1: 10.") and "rate 200 Mbit/s" in lines[0], r.out
        assert lines[1].startswith("node2: 10.")
        wrapper = lines[-1].rsplit("(or ", 1)[1].split()[0]
        assert lines[-1] == (f"mpiexec across them: storeval testbed mpiexec --dir {bed} -hosts node1,node2 -n 2 "
                             f"storeval run STUDY (or {wrapper} -hosts …)")
        assert os.access(wrapper, os.X_OK)
        # the storage on a node of its own, unshaped: each client node's link is what limits it
        r = storeval("testbed", "up", "minio", "--host", "store", "--dir", str(bed), cwd=tmp_path, timeout=600)
        assert r.rc == 0, r.err
        targets = tmp_path / "storeval-testbed.yaml"
        study = tmp_path / "study.yaml"
        study.write_text(yaml.safe_dump({
            "targets": yaml.safe_load(targets.read_text())["targets"],
            "workloads": {"bw": {"bandwidth": {"file_size": "16MiB", "transfer_size": "4MiB",
                                               "phases": ["write", "read"]}},
                          "md": {"metadata": {"items": 40}}},
            "clients": [4]}))
        r = _mpiexec(bed, "node1,node2", 4, "run", str(study), "--results", str(tmp_path / "res"),
                     "--json", str(tmp_path / "out.json"), "--no-html", cwd=tmp_path)
        assert r.returncode in (0, 1), r.stderr[-3000:]  # 1: a figure flagged (a busy host), never a failed cell
        assert "Per host — clients on several hosts" in r.stdout
        doc = load_json(tmp_path / "out.json")
        assert doc["engine"] == "mpi"
        assert [c["status"] for c in doc["cells"]] == ["ok", "ok"]
        # every host the ranks ran on is in the environment, each as it describes itself
        assert [h["host"] for h in doc["environment"]["hosts"]] == ["node1", "node2"]
        assert all(h["kernel"].startswith("Linux ") and h["cpu_count"] >= 1 for h in doc["environment"]["hosts"])
        phases = [p for cell in doc["cells"] for p in cell["phases"] if p["ops"]]  # an object store has no trees
        assert {p["phase"] for p in phases} >= {"write", "read", "file-create", "file-stat", "file-remove"}
        for p in phases:  # hydra places ranks round robin: every rank's host is its node's name, not this machine's
            assert [(s["rank"], s["host"]) for s in p["client_stats"]] == [
                (0, "node1"), (1, "node2"), (2, "node1"), (3, "node2")], p["phase"]
        bw = next(c for c in doc["cells"] if c["workload"] == "bw")
        for p in bw["phases"]:
            assert p["bytes"] == 4 * 16 * MiB
            per_node = defaultdict(int)
            for s in p["client_stats"]:
                per_node[s["host"]] += s["bytes"]
            # each node's two clients share its 200 Mbit/s link: their bytes took at least that long to cross it
            for node, moved in per_node.items():
                assert moved == 32 * MiB
                assert p["seconds"] >= 0.97 * moved / 25e6, (node, p["seconds"])
            # per host: each node's aggregate over its own span, and what its own interface carried (its leader's
            # probes in its namespace: the 32 MiB out for a write, in for a read, besides HTTP's own bytes)
            assert set(p["hosts"]) == {"node1", "node2"}
            for node, h in p["hosts"].items():
                assert (h["clients"], h["ranks"], h["bytes"]) == (2, [1, 3] if node == "node2" else [0, 2], 32 * MiB)
                assert h["MiBps"] * MiB <= 1.03 * 25e6, (node, h)  # what the node's link carries at most
                carried = h["net_tx_bytes"] if p["phase"] == "write" else h["net_rx_bytes"]
                assert 32 * MiB <= carried <= 1.1 * 32 * MiB, (node, p["phase"], h)
            assert p["host_spread"]["by"] == "MiBps per client" and 0 < p["host_spread"]["jain"] <= 1
        # per-host timelines: each node's leader sampled its own namespace's eth0 (rank 0 node1, rank 1 node2), on
        # rank 0's clock — each node's own interface carried its own clients' 32 MiB out (write) and back (read)
        from storeval.report.charts import timeline_charts
        from storeval.store import Store

        store = Store(str(tmp_path / "res"))
        run = store.load_run(doc["run_id"])
        samples = store.load_samples(doc["run_id"])
        bw_cell = next(c for c in run.cells if c.workload == "bw")
        mine = [s for s in samples if s[0] == bw_cell.cell_id]
        assert {s[6] for s in mine} == {"node1", "node2"}
        for node in ("node1", "node2"):
            for metric in ("tx_bytes", "rx_bytes"):
                values = [s[5] for s in mine if (s[2], s[3], s[4], s[6]) == ("net", "eth0", metric, node)]
                assert len(values) >= 2 and 32 * MiB <= values[-1] - values[0] <= 1.2 * 32 * MiB, (node, metric)
        starts = [r.start_ns for r in bw_cell.records]  # the samples span the cell on the records' clock
        for node in ("node1", "node2"):
            times = [s[1] for s in mine if s[6] == node]
            assert min(times) <= min(starts) and max(times) >= max(r.end_ns for r in bw_cell.records), node
        titles = [t for t, _ in timeline_charts(run.cells, samples, run.events) if f"cell {bw_cell.cell_id}:" in t]
        assert [t.rsplit(" on host ", 1)[1] for t in titles] == ["node1", "node2"], titles
        # a host the launcher does not know is named in one line
        r = _mpiexec(bed, "node9", 1, "--version", cwd=tmp_path, timeout=120)
        assert r.returncode != 0 and "no emulated host 'node9'" in r.stderr + r.stdout
        r = storeval("testbed", "nodes", "show", "--dir", str(bed), cwd=tmp_path)
        assert r.rc == 0 and "store: 10." in r.out and "-hosts node1,node2,store -n 3" in r.out, r.out
    finally:
        down = storeval("testbed", "down", "--dir", str(bed), cwd=tmp_path, timeout=600)
    assert down.rc == 0, down.err
    assert not os.path.exists(os.path.dirname(wrapper))  # the launcher went with the network
    r = storeval("testbed", "nodes", "up", "2", "--prefix", "bad name", "--dir", str(tmp_path / "x"), cwd=tmp_path)
    assert (r.rc, r.err_lines) == (2, ["error: testbed nodes up --prefix: 'bad name' cannot begin a host name (a "
                                       "letter, then letters, digits or '-'; e.g. node)"]) and not (tmp_path / "x").exists()
    r = storeval("testbed", "mpiexec", "--dir", str(bed), "-n", "1", "true", cwd=tmp_path)
    assert (r.rc, r.err.strip()) == (2, f"error: no emulated network in {bed} (`storeval testbed nodes up N --dir "
                                        f"{bed}` makes nodes)"), r


def test_a_node_killed_mid_phase_fails_its_cell_naming_it_and_the_run_goes_on_without_it(tmp_path):
    """A study's fault plan crashes emulated host node2 (its interface down, every process on it SIGKILLed) two
    seconds into a metadata phase of ranks on node1 and node2. Nothing tells mpiexec (the node's proxy died behind a
    dead link), so rank 0 finds the rank silent and fails the cell naming it, its node and the phase; the ranks
    that still answer (node1's and node3's) make a communicator of their own and the next cell runs on node1 and
    node3. The job ends with MPI_Abort once everything is stored, leaving nothing behind; the node comes back with
    `fault host.node2 start`."""
    bed = tmp_path / "bed"
    r = storeval("testbed", "nodes", "up", "3", "--dir", str(bed), cwd=tmp_path)
    try:
        assert r.rc == 0, r.err
        handles = storeval("testbed", "faults", "--dir", str(bed), cwd=tmp_path)
        assert handles.rc == 0 and "host.node2" in handles.out and "every process in its network namespace" in handles.out
        target = tmp_path / "target"
        target.mkdir()
        study = tmp_path / "crash.yaml"
        study.write_text(yaml.safe_dump({
            "testbed": str(bed), "targets": {"local": {"url": f"file://{target}"}},
            "workloads": {
                # empty files, created for up to a minute (mdtest -W): the kill comes 2 s in, whatever the speed
                "md": {"metadata": {"items": 2_000_000, "deadline": "60s", "files_only": True,
                                    "phases": ["file-create", "file-remove"]},
                       "faults": [{"at": "2s", "phase": "file-create", "action": "kill", "server": "host.node2"}]},
                "bw": {"bandwidth": {"file_size": "1MiB", "transfer_size": "64KiB", "phases": ["write", "read"]}}},
            "clients": [2]}, sort_keys=False))  # md runs first: bw is the cell after the loss
        run = _mpiexec(bed, "node1,node2,node3", 3, "run", str(study), "--results", str(tmp_path / "res"),
                       "--no-html", "--json", str(tmp_path / "out.json"), cwd=tmp_path)
        # node2's proxy died with its network: mpiexec hears nothing (no FIN crosses a dead link), so rank 0 finds
        # rank 1 silent past 30 s and names it; rank 2 (node3), waiting for the next cell, answers and goes on
        assert run.returncode == 1, run.stderr[-3000:]
        with duckdb.connect(str(tmp_path / "res" / "storeval.duckdb"), read_only=True) as con:
            cells = con.execute("SELECT workload, status, error FROM cells ORDER BY cell_id").fetchall()
            hosts = con.execute("SELECT DISTINCT c.workload, r.host FROM records r JOIN cells c USING (run_id, "
                                "cell_id) ORDER BY 1, 2").fetchall()
        (md, md_status, md_error), (bw, bw_status, bw_error) = cells
        assert (md, md_status, bw, bw_status, bw_error) == ("md", "failed", "bw", "ok", None), cells
        assert md_error.startswith("client 1 (rank 1 on node2) stopped answering in file-create: no word from it for "
                                   "30 s (a host down, or a rank gone without its launcher knowing); the run goes on "
                                   "without node2 (2 ranks left, the job ends with MPI_Abort after the last cell)"), md_error
        # what node1 measured before the loss is kept; the next cell ran on node1 and node3
        assert ("md", "node1") in hosts and ("md", "node2") not in hosts, hosts
        assert [h for w, h in hosts if w == "bw"] == ["node1", "node3"], hosts
        assert md_error in " ".join(run.stderr.split())  # the cell's line, as the terminal may have wrapped it
        assert os.listdir(target) == []  # the cells' files and the run's scratch removed
        net = _network(bed)
        assert net.host_pids("node2") == [] and net.host_pids("node1") == [] and net.host_pids("node3") == []
        assert not net.host_up("node2")
        r = storeval("testbed", "fault", "host.node2", "start", "--dir", str(bed), cwd=tmp_path)
        assert r.rc == 0 and "interface is up again" in r.out, r.err
        # node2 is back: ranks run there again. Now node3 dies while no cell uses it (its rank waits for the next
        # one): rank 0, waiting for it 30 s at the next cell, asks who still answers and goes on without node3
        idle = tmp_path / "idle.yaml"
        idle.write_text(yaml.safe_dump({
            "testbed": str(bed), "targets": {"local": {"url": f"file://{target}"}},
            "workloads": {
                "first": {"bandwidth": {"file_size": "4MiB", "transfer_size": "64KiB", "phases": ["write"]},
                          "faults": [{"at": "0s", "phase": "write", "action": "kill", "server": "host.node3"}]},
                "second": {"bandwidth": {"file_size": "4MiB", "transfer_size": "64KiB", "phases": ["write"]}}},
            "clients": [2]}, sort_keys=False))
        again = _mpiexec(bed, "node1,node2,node3", 3, "run", str(idle), "--results", str(tmp_path / "res2"),
                         "--no-html", cwd=tmp_path)
        with duckdb.connect(str(tmp_path / "res2" / "storeval.duckdb"), read_only=True) as con:
            cells = con.execute("SELECT workload, status FROM cells ORDER BY cell_id").fetchall()
            said = con.execute("SELECT message FROM events WHERE kind = 'warning'").fetchall()
            hosts = con.execute("SELECT DISTINCT r.host FROM records r").fetchall()
        assert cells == [("first", "ok"), ("second", "ok")], (cells, again.stderr[-3000:])
        assert [m for m, in said if "stopped answering between cells" in m] == [
            "rank 2 on node3 stopped answering between cells: the run goes on without node3 (2 ranks left, the job "
            "ends with MPI_Abort after the last cell)"], said
        assert sorted(h for h, in hosts) == ["node1", "node2"]
        assert os.listdir(target) == []
        assert net.host_pids("node3") == [] and net.host_pids("node1") == [] and net.host_pids("node2") == []
    finally:
        down = storeval("testbed", "down", "--dir", str(bed), cwd=tmp_path, timeout=600)
    assert down.rc == 0, down.err


def _network(bed: Path):
    from storeval.testbed import Testbed

    return Testbed(bed).network()
