"""A server killed or frozen in the middle of a run fails one cell, cleanly and within the target's timeout.

Each test starts small servers of its own (MinIO, XRootD, HDFS from storeval.testbed), so it can kill or stop
them without hurting the session's testbed. Moments are chosen by progress (an upload in the server's data
directory, the phase in the coordinator's watch file), never by sleeping; time bounds derive from the target's
``timeout`` with a generous factor, because the machine may be busy.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import pytest
import yaml

from storeval.drivers import make_driver
from storeval.drivers.base import Deadline, TargetUnreachable, network_failure
from storeval.engine import watchdog
from storeval.testbed.base import cache_dir, free_port
from storeval.testbed.minio import MINIO_VERSION, MinioServer
from storeval.workloads import make_workload

from .helpers import leftovers, load_json

MiB = 1 << 20
TIMEOUT = 3  # the targets' timeout in these tests, in seconds
# Time from a server's freeze to the end of its cell: a client's operation (one timeout), obstore aborting its
# upload (one more), the coordinator's cleanup (one more), stopping the other clients and storing the cell —
# with room for a machine loaded many times over.
FREEZE_BOUND = 10 * TIMEOUT + 30
SAFETY = 600  # a run that is still going after this has blocked: the failure these tests exist to catch

have_minio = shutil.which("go") is not None or (cache_dir() / "bin" / f"minio-{MINIO_VERSION}").exists()
needs_minio = pytest.mark.skipif(not have_minio, reason="Go is not installed and no MinIO binary is cached")
needs_xrootd = pytest.mark.skipif(shutil.which("xrootd") is None and os.geteuid() != 0,
                                  reason="xrootd is not installed and cannot be (not root)")
needs_hdfs = pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")), reason="HDFS needs java and mvn")


# ------------------------------------------------------------------------------------------------ helpers
def start(cls, root: Path, options: dict | None = None):
    server = cls(root, options or {})
    server.install()
    try:
        server.start()
        server.wait_ready(timeout=300)
    except BaseException:
        server.stop()
        raise
    return server


def signal_server(server, sig: int) -> None:
    for p in server.state.procs:
        if p.alive():
            os.kill(p.pid, sig)


def stop(server) -> None:
    signal_server(server, signal.SIGCONT)  # a stopped process cannot act on SIGTERM
    server.stop()


def restart_minio(server: MinioServer) -> None:
    """Start a killed MinIO again: same ports, same data, same credentials."""
    server._spawn(server._commands(server.state.ports)[0], name="minio", log=server._logs()[0],
                  env=server._proc_env(0), slot=0)
    server.wait_ready(timeout=120)


def write_study(tmp_path: Path, targets: dict) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"targets": targets}))
    return path


def start_run(tmp_path: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.Popen([sys.executable, "-m", "storeval", "run", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def watch_state(tmp_path: Path) -> dict | None:
    """The coordinator's watch file (the running cell, its clients, the phase), or None."""
    for path in glob.glob(str(tmp_path / "storeval-results" / ".storeval-*.watch")):
        try:
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except (OSError, ValueError):
            return None
    return None


def wait_for(proc: subprocess.Popen, what: str, check) -> None:
    """Poll ``check()`` until it holds; the run ending first (or blocking past SAFETY) fails the test."""
    t0 = time.monotonic()
    while not check():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the run ended (rc {proc.returncode}) before {what}:\n{err[-3000:]}")
        if time.monotonic() - t0 > SAFETY:
            proc.kill()
            pytest.fail(f"no {what} after {SAFETY} s")
        time.sleep(0.02)


def data_arriving(server) -> bool:
    """Whether a client's bytes are reaching the server: its own files on disk (an upload's parts, a file being
    written, an HDFS block) — the moment to freeze it mid-write."""
    if isinstance(server, MinioServer):
        return uploads_in_progress(server)
    if server.kind == "xrootd":
        pattern = f"{server.state.info['data']}/**/bw.*"
    else:
        pattern = f"{server.root}/data/data/**/blk_[0-9]*"
    # HDFS blocks carry no names: a block larger than the run's owner record (well under 64 KiB) is a client's
    return any(_size(p) > (0 if server.kind == "xrootd" else 64 << 10)
               for p in glob.glob(pattern, recursive=True) if not p.endswith(".meta"))


def _size(path: str) -> int:
    """A file's size, 0 once it is gone (a datanode moves a block from rbw/ to finalized/ between glob and stat)."""
    try:
        return os.path.getsize(path)
    except FileNotFoundError:
        return 0


def cell_over(tmp_path: Path, target: str) -> bool:
    state = watch_state(tmp_path)
    return state is None or (state.get("cell") or {}).get("target") != target


def finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=SAFETY)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the run blocked: still going {SAFETY} s later\n{err[-3000:]}")
    return proc.returncode, out, err


def stored(tmp_path: Path, sql: str, *params) -> list[tuple]:
    con = duckdb.connect(str(tmp_path / "storeval-results" / "storeval.duckdb"), read_only=True)
    try:
        return con.execute(sql, list(params)).fetchall()
    finally:
        con.close()


def uploads_in_progress(server: MinioServer) -> bool:
    """Whether MinIO holds an incomplete multipart upload (its own bookkeeping, one directory per object)."""
    root = server.root / "data" / ".minio.sys" / "multipart"
    return root.is_dir() and any(p.is_dir() and any(p.iterdir()) for p in root.iterdir())


def s3_target(server: MinioServer) -> dict:
    return {**server.targets()["minio"], "timeout": f"{TIMEOUT}s", "part_size": "5MiB"}


def driver_of(entry: dict, name: str):
    entry = dict(entry)
    driver = make_driver(entry.pop("url"), entry)
    driver.name = name
    driver.connect()
    return driver


def assert_one_failed_cell(doc: dict, target: str, pattern: str) -> str:
    by_target = {c["target"]: c for c in doc["cells"]}
    for name, cell in by_target.items():
        if name != target:
            assert cell["status"] == "ok", (name, cell["error"])
    bad = by_target[target]
    assert bad["status"] == "failed"
    assert "\n" not in bad["error"]
    assert re.search(pattern, bad["error"]), bad["error"]
    return bad["error"]


# ------------------------------------------------------------------------------------- case 5 and case 6
@needs_minio
def test_a_killed_s3_server_fails_its_cell_the_run_reports_and_the_next_run_cleans_up(tmp_path, target):
    """kill -9 MinIO while a client uploads: that cell fails with one line naming the target and the operation,
    the local cell runs, JSON, HTML and summary are written, exit 1; what the cleanup could not reach is
    recorded as left behind, never raised. The next run against the restarted server aborts the incomplete
    upload the dead one kept (case 6)."""
    minio = start(MinioServer, tmp_path / "minio")
    try:
        port = minio.state.ports["api"]
        study = write_study(tmp_path, {"local": {"url": f"file://{target}"}, "minio": s3_target(minio)})
        out = tmp_path / "out.json"
        # two clients, two write phases: uploads are in progress long enough to be seen on a loaded machine
        proc = start_run(tmp_path, str(study), "--workload", "bandwidth", "--clients", "2", "--set", "file_size=48MiB",
                         "--set", "phases=write,rewrite,read", "--json", str(out))
        wait_for(proc, "an upload to MinIO", lambda: uploads_in_progress(minio))
        signal_server(minio, signal.SIGKILL)
        rc, stdout, stderr = finish(proc)

        assert rc == 1, stderr
        doc = load_json(out)
        run = doc["run_id"]
        error = assert_one_failed_cell(
            doc, "minio", rf"^client [01] failed in (write|rewrite): (.* )?target minio: write of "
                          rf"storeval-{run}/cell-\d{{4}}/bw\.[01] failed: (connection refused by|the connection to|"
                          rf"cannot talk to) 127\.0\.0\.1:{port} ")
        assert "uploadId" not in stderr + stdout + out.read_text() and "Debug source" not in out.read_text(), error
        assert "Traceback" not in stderr and "coordinator" not in stderr, stderr
        assert f"run {run}:" in stdout  # the summary was printed …
        assert (tmp_path / "storeval-results" / f"report-{run}.html").is_file()  # … and the HTML report written
        assert stored(tmp_path, "SELECT status FROM studies WHERE run_id = ?", run) == [("failed",)]
        left = [m for (m,) in stored(tmp_path, "SELECT message FROM events WHERE run_id = ? AND kind = 'left-behind'",
                                     run)]
        assert left and all(m.startswith(f"left behind: storeval-{run}/") and " on minio (s3://storeval/testbed): "
                            "target minio: " in m for m in left), left
        assert any(m.startswith("left behind:") for m in stderr.splitlines()), stderr
        assert leftovers(target) == []

        # the server comes back with the upload the dead client began; the next run aborts it
        restart_minio(minio)
        driver = driver_of(minio.targets()["minio"], "minio")
        cell_dir = next(f"storeval-{run}/cell-{c['cell']:04d}" for c in doc["cells"] if c["target"] == "minio")
        keys = [f"{cell_dir}/bw.{k}" for k in (0, 1)]
        assert any(u.path == key for key in keys for u in driver.list_uploads(key))  # what the dead clients began
        again = subprocess.run([sys.executable, "-m", "storeval", "run", str(study), "--target", "minio",
                                "--workload", "bandwidth", "--clients", "1", "--set", "file_size=1MiB"],
                               cwd=tmp_path, capture_output=True, text=True, timeout=SAFETY)
        assert again.returncode == 0, again.stderr
        assert f"removed what run {run} left behind in {cell_dir}/ on minio" in again.stderr
        assert [u for key in keys for u in driver.list_uploads(key)] == [] and driver.listdir("") == []
        assert stored(tmp_path, "SELECT count(*) FROM events WHERE run_id = ? AND kind = 'cleaned-up'", run) == [(1,)]
        report = subprocess.run([sys.executable, "-m", "storeval", "report", "storeval-results", "--run", run],
                                cwd=tmp_path, capture_output=True, text=True, timeout=SAFETY, env={**os.environ,
                                                                                                   "COLUMNS": "400"})
        assert report.returncode == 0, report.stderr
        assert f"left behind: {cell_dir}/ on minio (s3://storeval/testbed): target minio:" in report.stdout
        assert re.search(r"cell \d+: removed what this cell left on minio, during run \S+", report.stdout)
        third = subprocess.run([sys.executable, "-m", "storeval", "run", str(study), "--target", "minio", "--workload",
                                "bandwidth", "--clients", "1", "--set", "file_size=1MiB"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=SAFETY)
        assert third.returncode == 0 and "left behind" not in third.stderr, third.stderr  # done once
        driver.shutdown()
    finally:
        stop(minio)


@needs_minio
def test_cleanup_aborts_the_incomplete_uploads_of_storevals_own_names(tmp_path):
    """A client killed mid-upload leaves an incomplete multipart upload (no listing shows it): the cell's
    cleanup aborts it by the name storeval gave the object; uploads of other names are left alone."""
    minio = start(MinioServer, tmp_path / "minio")
    try:
        driver = driver_of(s3_target(minio), "minio")
        ours, theirs = "storeval-r1/cell-0000/bw.1", "storeval-r1/cell-0000/bw.10"
        foreign = "user-data/big.bin"
        for key in (ours, theirs, foreign):
            driver.http.request("POST", key, {"uploads": ""})  # CreateMultipartUpload, as a writer begins
        assert [u.path for u in driver.list_uploads(ours)] == [ours]
        make_workload("bandwidth", {}).cell_cleanup(driver, "storeval-r1/cell-0000", 2)  # names bw.0, bw.1
        assert driver.list_uploads(ours) == []
        assert [u.path for u in driver.list_uploads(theirs)] == [theirs]  # bw.10 is not bw.1
        assert [u.path for u in driver.list_uploads(foreign)] == [foreign]
        assert driver.rmdir_quietly("storeval-r1/cell-0000")
        aborted = driver.abort_stale_uploads(theirs)
        assert [u.path for u in aborted] == [theirs] and driver.list_uploads(theirs) == []
        driver.abort_stale_uploads(foreign)
        driver.shutdown()
    finally:
        stop(minio)


# ----------------------------------------------------------------------------------------------- case 7
def run_with_frozen_server(tmp_path: Path, target: Path, name: str, entry: dict, server, *args: str) -> tuple:
    """Run bandwidth on ``name`` and a local directory; SIGSTOP the server once the cell writes; return the
    seconds from the freeze to the end of the cell, and the finished run (while the server is still frozen)."""
    study = write_study(tmp_path, {name: entry, "local": {"url": f"file://{target}"}})
    out = tmp_path / "out.json"
    proc = start_run(tmp_path, str(study), "--workload", "bandwidth", "--clients", "2", "--set", "file_size=48MiB",
                     "--json", str(out), *args)
    try:
        wait_for(proc, f"data arriving at {name}", lambda: data_arriving(server))
        signal_server(server, signal.SIGSTOP)
        frozen = time.monotonic()
        wait_for(proc, f"the end of the {name} cell", lambda: cell_over(tmp_path, name))
        took = time.monotonic() - frozen
        rc, stdout, stderr = finish(proc)  # the run ends while the server is still frozen
    finally:
        signal_server(server, signal.SIGCONT)
    return took, rc, stdout, stderr, load_json(out)


@needs_minio
def test_a_frozen_s3_server_fails_its_cell_within_the_timeout(tmp_path, target):
    minio = start(MinioServer, tmp_path / "minio")
    try:
        port = minio.state.ports["api"]
        took, rc, _, stderr, doc = run_with_frozen_server(tmp_path, target, "minio", s3_target(minio), minio)
        assert rc == 1, stderr
        assert took < FREEZE_BOUND, f"the cell ended {took:.0f} s after the freeze"
        assert_one_failed_cell(doc, "minio", rf"^client \d failed in write: (.* )?target minio: .+ failed: no answer "
                                             rf"from 127\.0\.0\.1:{port} within {TIMEOUT} s \(the server is frozen, "
                                             r"overloaded or unreachable\)$")
        assert "Traceback" not in stderr and "coordinator" not in stderr
        assert leftovers(target) == []
    finally:
        stop(minio)


@needs_xrootd
@pytest.mark.parametrize("use", ["xrootd", "xrootd-davs"])  # the same server over root:// and over HTTPS
def test_a_frozen_xrootd_server_fails_its_cell_within_the_timeout(tmp_path, target, use):
    from storeval.testbed.xrootd import XrootdServer

    server = start(XrootdServer, tmp_path / "xrootd")
    try:
        entry = {**server.targets()[use], "timeout": f"{TIMEOUT}s"}
        port = server.state.ports["xrootd"]
        took, rc, _, stderr, doc = run_with_frozen_server(tmp_path, target, "xrootd", entry, server)
        assert rc == 1, stderr
        assert took < FREEZE_BOUND, f"the cell ended {took:.0f} s after the freeze"
        assert_one_failed_cell(doc, "xrootd", rf"^client \d failed in (write|read): (.* )?target xrootd: .+ failed: "
                                              rf"no answer from {re.escape(server.address)}:{port} within {TIMEOUT} s "
                                              r"\(the server is frozen")
        assert "Traceback" not in stderr and "coordinator" not in stderr
        assert leftovers(target) == []
    finally:
        stop(server)


@needs_hdfs
def test_a_frozen_hdfs_cluster_fails_its_cell_within_the_timeout(tmp_path, target):
    from storeval.testbed.hdfs import HdfsServer

    server = start(HdfsServer, tmp_path / "hdfs", {"datanodes": 1, "replication": 1})
    try:
        entry = {**server.targets()["hdfs"], "timeout": f"{TIMEOUT}s"}
        port = server.state.ports["rpc"]
        took, rc, _, stderr, doc = run_with_frozen_server(tmp_path, target, "hdfs", entry, server)
        assert rc == 1, stderr
        assert took < FREEZE_BOUND, f"the cell ended {took:.0f} s after the freeze"
        assert_one_failed_cell(doc, "hdfs", rf"^client \d failed in (write|read): (.* )?target hdfs: .+ failed: "
                                            rf"no answer from 127\.0\.0\.1:{port} within {TIMEOUT} s \(the server is "
                                            r"frozen")
        assert "Traceback" not in stderr and "coordinator" not in stderr
        assert leftovers(target) == []
    finally:
        stop(server)


# ---------------------------------------------------------------------------------- drivers, one by one
def test_a_server_that_is_not_there_is_named_in_one_line_within_the_timeout():
    """Every network driver names the target, the operation and the reason — not the library's text."""
    closed = free_port()
    cases = {
        "s3": ("s3://bucket/p", {"endpoint": f"http://127.0.0.1:{closed}", "timeout": "2s"},
               rf"^target down: listing of the bucket failed: connection refused by 127\.0\.0\.1:{closed} "
               r"\(the server is down or unreachable\)$"),
        "root": (f"root://127.0.0.1:{closed}//data", {"timeout": "2s"},
                 rf"^target down: stat of /data failed: cannot talk to 127\.0\.0\.1:{closed} \(the server is down"),
        "hdfs": (f"hdfs://127.0.0.1:{closed}/data", {"timeout": "2s"},  # hdfs-native retries for ever: the deadline
                 rf"^target down: stat of /data failed: no answer from 127\.0\.0\.1:{closed} within 2 s "),
    }
    for scheme, (url, options, pattern) in cases.items():
        driver = make_driver(url, options)
        driver.name = "down"
        t0 = time.monotonic()
        with pytest.raises(TargetUnreachable) as caught:
            driver.connect()
        assert re.search(pattern, str(caught.value)), (scheme, str(caught.value))
        assert time.monotonic() - t0 < 10 * 2 + 20, scheme
        assert driver.down is caught.value  # what follows fails at once …
        with pytest.raises(TargetUnreachable):
            driver.check_server()
        driver.retry_server()  # … until the server is given another chance
        assert driver.down is None


def test_network_failures_are_recognised_in_every_librarys_words():
    assert network_failure(ConnectionRefusedError(111, "Connection refused")) == "refused"
    assert network_failure(TimeoutError("timed out")) == "timeout"
    assert network_failure("Generic S3 error: ... HttpError { kind: Timeout, ... retry_timeout: 3s") == "timeout"
    assert network_failure("... kind: Connect ... Os { code: 111, kind: ConnectionRefused } retry_timeout: 3s") \
        == "refused"
    assert network_failure("[ERROR] Operation expired") == "timeout"
    assert network_failure("[FATAL] Connection error") == "down"
    assert network_failure('DataTransferError("All nodes failed for write")') == "down"
    assert network_failure(FileNotFoundError(2, "no such object")) is None
    assert network_failure("Server returned non-2XX status code: 403 Forbidden (retry_timeout: 3s)") is None


def test_a_deadline_gives_up_on_a_call_that_never_returns():
    deadline = Deadline(0.5)
    assert deadline.call(lambda a, b: a + b, 2, 3) == 5
    with pytest.raises(KeyError):
        deadline.call({}.__getitem__, "missing")
    never = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):
        deadline.call(never.wait)
    assert time.monotonic() - t0 < 0.5 + 5
    assert deadline.call(str.upper, "after") == "AFTER"  # a fresh helper: the stuck one is abandoned
    helpers = [h.thread for h in deadline._helpers]
    assert len(helpers) == 2 and all(t.is_alive() for t in helpers)
    deadline.close()  # the idle helper ends at once, the stuck one when its call returns
    never.set()
    for t in helpers:
        t.join(timeout=SAFETY)
    assert not any(t.is_alive() for t in helpers)


# ------------------------------------------------------------------------------------------ the watchdog
FOLLOWED = """
def followed(pid):  # the watchdog holds a pidfd of ours: it will see us go
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:[pidfd]":
                return True
        except OSError:
            pass
    return False
while not followed(proc.pid):
    time.sleep(0.01)
"""


@pytest.mark.parametrize("how", ["exits", "killed"])
def test_the_watchdog_says_killed_only_when_the_coordinator_was(tmp_path, target, how):
    """A coordinator that exits on its own before its run is done (an error it could not handle) is not said
    to have been killed; one killed by a signal is. Either way the watchdog cleans up and ends the run."""
    results = tmp_path / "results"
    results.mkdir()
    from storeval.store import Store

    Store(str(results)).begin_run("r1", study={}, study_hash="h", version="t", command_line="t", source=None,
                                  engine="local", environment={})
    (target / "storeval-r1").mkdir()
    state = {"run_id": "r1", "results_dir": str(results), "scratch": "storeval-r1", "done": False, "cell": None,
             "phase": None, "targets": [{"name": "local", "url": f"file://{target}", "options": {}}]}
    path = results / ".storeval-r1.watch"
    script = (f"import os, sys, signal, time\n"
              f"from storeval.engine import watchdog\n"
              f"watchdog.save_state({str(path)!r}, {state!r})\n"
              f"proc = watchdog.start({str(path)!r})\n"
              f"{FOLLOWED}"
              + ("raise SystemExit(1)\n" if how == "exits" else "os.kill(os.getpid(), signal.SIGKILL)\n"))
    # the watchdog shares the coordinator's stderr: this returns once it has said its line and left
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=SAFETY)
    assert not path.exists()
    with duckdb.connect(str(results / "storeval.duckdb"), read_only=True) as con:
        status = con.execute("SELECT status FROM studies WHERE run_id = 'r1'").fetchone()[0]
    assert status == "failed"
    said = "exited before finishing its run" if how == "exits" else "was killed"
    assert f"error: the storeval coordinator {said} between cells" in proc.stderr, proc.stderr
    assert ("killed" in proc.stderr) == (how == "killed")
    assert not (target / "storeval-r1").exists()


def test_the_watchdog_message_names_how_the_coordinator_ended():
    state = {"cell": None, "phase": None}
    assert watchdog._message(state, ["coordinator"], True, False) == "the storeval coordinator was killed between cells"
    assert watchdog._message(state, ["coordinator"], True, False, exited=True) == \
        "the storeval coordinator exited before finishing its run between cells"
    assert watchdog._message(state, [], True, True, exited=True) == \
        "rank 0 (the coordinator) exited before finishing its run between cells; mpiexec ended the job"
