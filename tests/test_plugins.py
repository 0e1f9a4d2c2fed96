"""Workloads and drivers as plug-ins (issue 14.2): a throw-away package adds a driver and a workload through
entry points only — no change to storeval's files — and both run and are reported like storeval's own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import duckdb
import pytest

from storeval.plugins import PluginError
from storeval.workloads import register_workload
from storeval.workloads.base import Params, Workload

from .helpers import load_json, storeval

# the driver: posix under a new scheme, dir:///path (docs/architecture.md, "Adding a driver", shows this file)
DRIVER = '''
from storeval.drivers.carrier import Carrier
from storeval.drivers.posix import PosixDriver, url_path


def as_file(url: str) -> str:
    return "file://" + url.split("://", 1)[1]


class DirDriver(PosixDriver):
    """A local directory under its own scheme (dir:///path): posix underneath."""

    scheme = "dir"

    def __init__(self, url, options=None, *, client=-1):
        super().__init__(as_file(url), options, client=client)
        self.url = url

    @classmethod
    def parse(cls, url):
        return PosixDriver.parse(as_file(url))

    @classmethod
    def check_url(cls, url, options):
        PosixDriver.check_url(as_file(url), options)

    @classmethod
    def carrier(cls, url, options=None):
        return Carrier(path=url_path(as_file(url)))
'''

# the workload: each client writes small files; its own figures in every report (docs: "Adding a workload")
WORKLOAD = '''
import time

from storeval.drivers.base import join
from storeval.workloads.base import Best, Figure, Params, Report, Workload


class TouchParams(Params):
    files: int = 20
    size: int = 4096


class Touch(Workload):
    kind = "touch"
    Params = TouchParams
    PHASES = ("touch",)
    summary = "every client writes small files"
    report = Report(
        columns=(Figure("files/s", "files/s", value=lambda r: r.ops_per_s),
                 Figure("touched", "files", direction="write")),  # extras["touched"], from phase_extra
        how_measured="files/s: files written by all clients / (last end − first start).",
        rate=Best(lambda r: r.ops_per_s, ("touch",), unit="files/s"),
        compare=(Figure("touched", "files"),))

    def _name(self, c, i):
        return join(c.cell_dir, f"touch-{c.rank}-{i}")

    def run_phase(self, c, phase, rec):
        log, data = rec.oplog(256), bytes(self.p.size)
        for i in range(self.p.files):
            t0 = time.perf_counter_ns()
            h = c.driver.open(self._name(c, i), "w")
            c.driver.pwrite(h, data, 0)
            c.driver.close(h)
            log.add(t0, time.perf_counter_ns(), self.p.size)
        log.flush()
        rec.extra["touched"] = self.p.files

    @staticmethod
    def client_extra(extra, seconds, cpu_seconds):
        return {"touched": extra.get("touched", 0)}

    @staticmethod
    def phase_extra(clients, seconds, moved):
        return {"touched": sum(c["touched"] for c in clients)}

    def cleanup(self, c):
        for i in range(self.p.files):
            c.driver.remove_quietly(self._name(c, i))
'''

ENTRY_POINTS = '''
[storeval.drivers]
dir = touchplug.driver:DirDriver

[storeval.workloads]
touch = touchplug.workload:Touch
'''


def make_package(root: Path, workload: str = WORKLOAD, entry_points: str = ENTRY_POINTS) -> Path:
    """A package on a PYTHONPATH directory, registered only by its .dist-info/entry_points.txt."""
    pkg = root / "touchplug"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "driver.py").write_text(textwrap.dedent(DRIVER))
    (pkg / "workload.py").write_text(textwrap.dedent(workload))
    info = root / "touchplug-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: touchplug\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))
    return root


@pytest.fixture(scope="module")
def plugin_runs(tmp_path_factory):
    """Two runs of the plug-in workload on the plug-in driver, and their outputs."""
    tmp = tmp_path_factory.mktemp("plugins")
    env = {"PYTHONPATH": str(make_package(tmp / "site"))}
    (tmp / "t").mkdir()
    runs = []
    for name in ("A", "B"):
        r = storeval("run", "--target", f"dir://{tmp / 't'}", "--workload", "touch", "--clients", "1,2",
                     "--repetitions", "2", "--results", name, "--json", f"{name}.json", cwd=tmp, env=env)
        assert r.rc == 0, r.err
        runs.append(r)
    return tmp, env, runs


def test_a_plugin_workload_is_listed(tmp_path):
    env = {"PYTHONPATH": str(make_package(tmp_path / "site"))}
    r = storeval("workloads", cwd=tmp_path, env=env)
    assert r.rc == 0, r.err
    assert "phases: touch" in r.out and "│ size      │ 4096" in r.out and "phases: write, rewrite" in r.out
    # a plug-in's plain field still prints: its unit from its type, no explanation ("—")
    assert re.search(r"│ size +│ 4096 +│ count +│ — +│", r.out) and re.search(r"│ files +│ 20 +│ count +│ — +│", r.out)
    assert r.err == ""


def test_a_plugin_runs_and_is_reported_with_its_own_columns(plugin_runs):
    tmp, env, runs = plugin_runs
    out = runs[0].out
    assert "touch — every client writes small files" in out
    assert "files/s" in out and "touched" in out
    assert "files/s: files written by all clients" in out
    assert "stonewall" not in out  # never another workload's columns
    doc = load_json(tmp / "A.json")
    rows = [s for s in doc["summary"] if s["kind"] == "touch"]
    assert rows and all(s["touched"]["mean"] == 20 * int(s["factors"]["clients"]) for s in rows)
    assert doc["table"][0]["rate_unit"] == "files/s" and "touch" in doc["table"][0]["rates"]
    assert [s["figure"] for s in doc["scaling"]] == ["MiBps"]
    target, = doc["environment"]["targets"].values()
    assert target["mount"] and target["path"]["medium"] != "network"  # its carrier: a local path, so its mount
    html = next((tmp / "A").glob("*.html")).read_text()
    assert "<th>files/s</th>" in html and "<th>touched</th>" in html and "<th>stonewall</th>" not in html


def test_a_plugin_workload_is_compared_on_its_own_figures(plugin_runs):
    tmp, env, _ = plugin_runs
    r = storeval("compare", "A", "B", "--json", "cmp.json", cwd=tmp, env=env)
    assert r.rc == 0, r.err
    # the figure's name and unit, one cell "touched (files)" — folded onto two lines of the same column when a
    # context column (a busy host beside one of the runs) leaves it less room
    rows = [[c.strip() for c in line.split("│")] for line in r.out.splitlines()]
    assert any("touched (files)" in row for row in rows) or any(
        a[k] == "touched" and b[k] == "(files)" for a, b in zip(rows, rows[1:]) if len(a) == len(b)
        for k in range(len(a)))
    figures = {c["figure"] for c in load_json(tmp / "cmp.json")["changes"]}
    assert {"touched", "ops_per_s"} <= figures


def test_a_run_of_a_workload_no_longer_installed_is_not_reported_with_other_columns(plugin_runs):
    tmp, _, _ = plugin_runs
    r = storeval("report", "A", cwd=tmp)  # the package is gone: no PYTHONPATH
    assert r.rc == 2
    assert r.err_lines == ["error: workload kind 'touch' is not installed here (known: bandwidth, command, concurrent, "
                           "copy, io500, jobs, metadata, replay, skim, tpc; install the package that adds it)"]


def test_a_workload_that_declares_no_figures_is_refused_in_one_line(tmp_path):
    class Silent(Workload):
        kind = "silent"
        Params = Params
        PHASES = ("x",)

        def run_phase(self, c, phase, rec):
            pass

    with pytest.raises(PluginError) as e:
        register_workload(Silent, "mine")
    assert str(e.value) == ("workload 'silent' of package mine declares no report figures, so none of its phases "
                            "could be reported; it is left out (declare report = Report(columns=(Figure(...), ...)) "
                            "in its class)")
    # from an entry point: one warning line naming the package, the rest works, and using it says why
    silent = WORKLOAD.replace("    report = Report(", "    unused = dict(")
    env = {"PYTHONPATH": str(make_package(tmp_path / "site", silent))}
    r = storeval("workloads", cwd=tmp_path, env=env)
    assert r.rc == 0 and "bandwidth" in r.out and "touch" not in r.out
    assert r.err_lines == ["warning: workload 'touch' of package touchplug declares no report figures, so none of "
                           "its phases could be reported; it is left out (declare report = Report(columns=(Figure(...), "
                           "...)) in its class)"]
    r = storeval("run", "--target", str(tmp_path), "--workload", "touch", cwd=tmp_path, env=env)
    assert r.rc == 2 and r.err_lines[-1].startswith("error: --workload touch: workload kind 'touch' cannot be used: ")


def test_a_plugin_that_fails_to_import_is_one_warning_and_the_rest_works(tmp_path):
    env = {"PYTHONPATH": str(make_package(tmp_path / "site", "import no_such_module_here\n"))}
    r = storeval("workloads", cwd=tmp_path, env=env)
    assert r.rc == 0 and "bandwidth" in r.out
    assert r.err_lines == ["warning: workload 'touch' of package touchplug cannot load (ModuleNotFoundError: No module "
                           "named 'no_such_module_here'); it is left out"]
    r = storeval("run", "--target", "nosuch:///x", "--workload", "bandwidth", cwd=tmp_path, env=env)
    assert r.rc == 2 and r.err_lines[-1].endswith("unknown scheme 'nosuch://' (known: dav://, davs://, dir://, "
                                                  "file://, hdfs://, http://, https://, nfs://, null://, root://, s3://)")


@pytest.mark.parametrize("module, extra, url", [("obstore", "s3", "s3://bucket/x"), ("hdfs_native", "hdfs",
                                                "hdfs://localhost:9000/x"), ("XRootD", "xrootd", "root://localhost//x")])
def test_a_target_whose_extra_is_missing_fails_in_one_line(tmp_path, module, extra, url):
    study = tmp_path / "study.yaml"
    study.write_text(f"targets:\n  far: {{url: '{url}'}}\nworkloads:\n  bw: bandwidth\n")
    code = (f"import sys; sys.modules[{module!r}] = None\n"
            "from storeval.cli import main\n"
            f"main(['run', {str(study)!r}])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.splitlines() == [f"error: target far ({url}) needs the {extra} extra: pip install 'storeval[{extra}]'"]


def test_the_mpi_engine_without_mpi4py_fails_in_one_line(tmp_path):
    code = ("import sys; sys.modules['mpi4py'] = None\n"
            "from storeval.cli import main\n"
            "main(['run', '--target', 'null://', '--workload', 'bandwidth', '--no-html'])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "PMI_RANK": "0", "PMI_SIZE": "1"})
    assert r.returncode == 2
    assert r.stderr.splitlines() == ["error: running under mpiexec (the MPI engine) needs the mpi extra: "
                                     "pip install 'storeval[mpi]'"]


def test_the_default_study_needs_no_extra(tmp_path):
    """``pip install storeval`` (no extras) runs the default study: no client library of an extra is imported
    (each is made unimportable), and every cell of the default study ran and was stored with its figures."""
    code = ("import sys\n"
            "for m in ('obstore', 'hdfs_native', 'XRootD', 'mpi4py'): sys.modules[m] = None\n"
            "from storeval.cli import main\n"
            "main(['run', '--target', 'null://', '--workload', 'bandwidth', '--workload', 'metadata', '--quiet', "
            "'--no-html', '--json', 'out.json'])\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = load_json(tmp_path / "out.json")
    assert doc["status"] == "ok"
    # the default study: each workload at 1 and 2 clients, with its default parameters
    assert [(c["workload"], c["clients"], c["status"]) for c in doc["cells"]] == [
        ("bandwidth", 1, "ok"), ("bandwidth", 2, "ok"), ("metadata", 1, "ok"), ("metadata", 2, "ok")]
    meta = ["tree-create", "dir-create", "dir-stat", "dir-remove", "file-create", "file-stat", "file-read",
            "file-remove", "tree-remove"]
    for c in doc["cells"]:
        n = c["clients"]
        got = [(p["phase"], p["status"], p["bytes"], p["ops"]) for p in c["phases"]]
        if c["workload"] == "bandwidth":  # 256 MiB per client in 1 MiB transfers, written then read
            assert got == [(ph, "ok", n * 256 << 20, n * 256) for ph in ("write", "read")]
            assert all(p["bandwidth_MiBps"] > 0 and len(p["client_stats"]) == n for p in c["phases"])
        else:  # 100 items per client, one tree directory each
            assert got == [(ph, "ok", 0, n * (1 if ph.startswith("tree-") else 100)) for ph in meta]
            assert all(p["ops_per_s"] > 0 for p in c["phases"])
    # Table 1 has a row per workload, from figures of both client counts
    assert [(row["workload"], row["clients"]) for row in doc["table"]] == [("bandwidth", [1, 2]), ("metadata", [1, 2])]
    assert doc["table"][0]["read"]["mean"] > 0 and doc["table"][0]["write"]["mean"] > 0
    assert doc["table"][1]["rates"]["file-create"]["mean"] > 0
    # and the store holds the run: its four cells and a record per client and phase (3 × 2 + 3 × 9)
    with duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True) as con:
        assert con.execute("SELECT status FROM studies WHERE run_id = ?", [doc["run_id"]]).fetchall() == [("ok",)]
        assert con.execute("SELECT count(*) FROM cells WHERE run_id = ? AND status = 'ok'",
                           [doc["run_id"]]).fetchone() == (4,)
        assert con.execute("SELECT count(*) FROM records WHERE run_id = ?", [doc["run_id"]]).fetchone() == (33,)


def test_a_plugin_whose_clients_take_different_barriers_fails_its_cell_instead_of_waiting_for_ever(tmp_path):
    """Client 0 takes one barrier more than client 1: client 1 finishes the cell, and client 0 waits at a barrier
    nobody will reach. Once a peer has finished, that wait is bounded by 30 s (not the study's hour of phase
    timeout: such a barrier can no longer complete), and the cell fails naming both."""
    uneven = WORKLOAD.replace("        log.flush()\n", "        log.flush()\n        if c.rank == 0:\n"
                                                         "            c.comm.barrier()\n")
    env = {"PYTHONPATH": str(make_package(tmp_path / "site", uneven))}
    (tmp_path / "t").mkdir()
    study = tmp_path / "study.yaml"
    study.write_text(f"targets: {{t: {{url: 'dir://{tmp_path / 't'}'}}}}\nworkloads: {{w: touch}}\nclients: [2]\n"
                     "phase_timeout: 1h\n")
    r = storeval("run", str(study), "--json", "out.json", "--quiet", cwd=tmp_path, env=env, timeout=900)  # a hang guard
    assert r.rc == 1, r.err
    cell, = load_json(tmp_path / "out.json")["cells"]
    assert cell["status"] == "failed"
    assert cell["error"] == ("client 0 waited at a barrier after touch for 30 s after client 1 had "
                             "finished the cell: the clients did not take the same steps (a workload that calls "
                             "comm.barrier() a different number of times on different clients); all clients stopped")
    assert os.listdir(tmp_path / "t") == []
