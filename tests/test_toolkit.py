"""The workload toolkit (issue 31): workloads share code through ``storeval.workloads.toolkit`` and its modules,
never by importing each other, so an outside workload can do all a built-in one does; the watchdog reaches a
workload only through the ``kill_orphans`` hook every workload has."""

from __future__ import annotations

import ast
import os
import secrets
import subprocess
import tomllib
from pathlib import Path

import storeval
from storeval.workloads.base import ClientContext, Figure, Params, Report, Workload
from tests.helpers import InProcessComm, poll

ROOT = Path(storeval.__file__).parent
WORKLOADS_DIR = ROOT / "workloads"
PYPROJECT = ROOT.parent / "pyproject.toml"


def workload_modules() -> set[str]:
    """The workload modules: the modules of the ``storeval.workloads`` entry points (an added workload is covered)."""
    points = tomllib.loads(PYPROJECT.read_text())["project"]["entry-points"]["storeval.workloads"]
    return {value.split(":")[0] for value in points.values()}


def imported(module: str, path: Path) -> set[str]:
    """Every storeval module ``path`` imports, function-level imports included (``from . import x`` as ``pkg.x``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                stem = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found.update(f"{stem}.{a.name}" for a in node.names)  # from .pkg import module
    return {name for name in found if name.startswith("storeval.")}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_no_workload_module_imports_another_and_neither_do_the_toolkit_nor_the_engine():
    workloads = workload_modules()
    assert {f"storeval.workloads.{k}" for k in ("bandwidth", "copy", "skim", "jobs", "metadata", "replay",
                                                 "command")} <= workloads
    bad = []
    for path in [*WORKLOADS_DIR.glob("*.py"), *(ROOT / "engine").glob("*.py")]:
        module = module_name(path)
        bad += [f"{module} imports {other}" for other in sorted(imported(module, path) & (workloads - {module}))]
    assert bad == []


def test_the_checker_sees_an_import_of_another_workload(tmp_path):
    """The rule above is not vacuous: a function-level relative import of a sibling workload is found."""
    path = tmp_path / "mine.py"
    path.write_text("def f():\n    from .bandwidth import run_ops\n    from . import skim\n")
    assert imported("storeval.workloads.mine", path) >= {"storeval.workloads.bandwidth", "storeval.workloads.skim"}


def test_every_toolkit_name_imports_and_is_said_what_it_is_for():
    import storeval.workloads.toolkit as toolkit

    namespace: dict = {}
    exec("from storeval.workloads.toolkit import *", namespace)
    assert set(toolkit.__all__) <= set(namespace) and len(set(toolkit.__all__)) == len(toolkit.__all__)
    assert [n for n in toolkit.__all__ if f"``{n}``" not in toolkit.__doc__] == []
    # the pieces the built-in workloads share are all in it
    assert {"run_ops", "IOFailure", "make_durable", "warn_write_back", "EventParams", "SkimIO", "open_tree",
            "cluster_arrays", "burn_cpu", "SKIM_PROCESS_BYTES", "NO_ARG", "measure"} <= set(toolkit.__all__)


class _StampParams(Params):
    blocks: int = 8
    block: int = 4096


class Stamp(Workload):
    """An outside-style workload: its timed writes and verified reads through the toolkit alone."""

    kind = "stamp"
    Params = _StampParams
    PHASES = ("write", "read")
    report = Report(columns=(Figure("done", "blocks"),), how_measured="blocks each client wrote and read back")

    def run_phase(self, c, phase, rec):
        from storeval.workloads.toolkit import Payload, aligned_buffer, make_durable, run_ops, warn_write_back

        p, path = self.p, f"{c.cell_dir}/stamp-{c.rank}"
        payload, offsets, log = Payload(p.block, c.rank, 7), range(0, p.blocks * p.block, p.block), rec.oplog(16)
        h = c.driver.open(path, "w" if phase == "write" else "r")
        try:
            if phase == "write":
                buf, stamp = payload.write_buffer()
                rec.extra["done"] = run_ops(c.driver.writer(h), [buf], offsets, log, p.block, stamp)
                warn_write_back(c, rec, phase, make_durable(c, h, fsync=True), fsync=True)
            else:
                rec.extra["done"] = run_ops(c.driver.reader(h, into_buffer=True), [aligned_buffer(p.block)], offsets,
                                            log, p.block, check=payload.checker())
        finally:
            c.driver.close(h)
        log.flush()


def test_an_outside_workload_writes_and_verifies_a_real_file_with_the_toolkit(tmp_path):
    from storeval.core.oplog import PhaseRecorder
    from storeval.drivers import make_driver
    from storeval.workloads.toolkit import IOFailure, run_ops

    driver = make_driver(f"file://{tmp_path}", {})
    driver.connect()
    c = ClientContext(rank=0, nclients=1, driver=driver, cell_dir="cell", seed=0, comm=InProcessComm(0, 1))
    driver.mkdir("cell")
    w = Stamp(Stamp.Params(blocks=8, block=4096))
    recs = {}
    for phase in Stamp.PHASES:
        rec = recs[phase] = PhaseRecorder(0, phase)
        rec.begin()
        w.run_phase(c, phase, rec)
        rec.finish()
    assert recs["write"].extra == {"done": 8, "durable": "fsync"}  # fsync'd: no write-back warning
    assert recs["read"].extra == {"done": 8}  # every block read back with the stamps it was written with
    assert [(r.logs[0].ops, r.logs[0].bytes) for r in recs.values()] == [(8, 8 * 4096)] * 2
    assert (tmp_path / "cell" / "stamp-0").stat().st_size == 8 * 4096

    # a read past the file's end: the toolkit's error, with the offset and kind a degraded phase counts
    fd = os.open(tmp_path / "cell" / "stamp-0", os.O_RDONLY)
    try:
        from storeval.core.oplog import OpLog

        try:
            run_ops(lambda bufs, off: os.preadv(fd, bufs, off), [bytearray(4096)], range(28 * 1024, 40 * 1024, 4096),
                    OpLog(0, 4), 4096)
        except IOFailure as e:
            assert (e.offset, e.kind, str(e)) == (32 * 1024, "short-transfer",
                                                  "at offset 32768: ShortTransfer: short transfer: 0 of 4096 bytes")
        else:
            raise AssertionError("a read past the end was not an IOFailure")
    finally:
        os.close(fd)


def test_every_workload_has_the_orphan_hook_and_only_the_command_workload_starts_anything():
    from storeval.workloads import WORKLOADS

    run = f"storeval-none{secrets.token_hex(4)}"
    assert {kind: WORKLOADS[kind].kill_orphans(run) for kind in ("bandwidth", "copy", "skim", "jobs", "metadata",
                                                                  "replay", "command")} == dict.fromkeys(
        ("bandwidth", "copy", "skim", "jobs", "metadata", "replay", "command"), [])
    assert Workload.kill_orphans(run) == []


def test_the_watchdog_kills_a_dead_runs_marked_orphans_through_the_hooks_and_nothing_else():
    """A command's daemon of the dead run is killed; a process of a run whose name merely starts alike is not."""
    from storeval.engine import watchdog
    from storeval.workloads.command import MARK

    run = f"storeval-tk{os.getpid()}{secrets.token_hex(3)}"
    orphan = subprocess.Popen(["sleep", "300"], env={**os.environ, MARK: f"{run}:0:ab12"}, start_new_session=True)
    other = subprocess.Popen(["sleep", "300"], env={**os.environ, MARK: f"{run}x:0:cd34"}, start_new_session=True)
    try:
        poll(lambda: all(Path(f"/proc/{p.pid}/comm").read_text().strip() == "sleep" for p in (orphan, other)),
             "both sleeps to exec")
        watchdog._kill_orphans(run)
        assert orphan.wait(timeout=60) == -9
        assert other.poll() is None
    finally:
        for p in (orphan, other):
            p.kill()
            p.wait()


def test_the_command_path_placeholder_comes_from_the_one_url_parser_and_the_driver_class(tmp_path):
    from storeval.drivers import driver_class, make_driver
    from storeval.workloads.command import tool_path

    for url, path in ((f"file://{tmp_path}", f"{tmp_path}/d/f"), ("root://10.1.2.3:1094//data/x", "/data/x/d/f"),
                      ("hdfs://127.0.0.1:9000/storeval", "/storeval/d/f"),
                      ("nfs://127.0.0.1:2050/export/run", "/export/run/d/f")):
        driver = make_driver(url, {})
        assert tool_path(driver.tool_address("d/f"), driver.caps) == path, url
    # an object store (no directories): the key, without the bucket or a leading slash
    assert tool_path("s3://bucket/prefix/d/f", driver_class("s3://bucket/prefix").caps) == "prefix/d/f"
