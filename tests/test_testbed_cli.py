"""`storeval testbed up/status/down` through the real command, with the issue's run in between."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from pathlib import Path

import psutil
import pytest

from storeval.testbed import Testbed
from storeval.testbed.base import cache_dir, port_open
from storeval.testbed.minio import BUCKET, MINIO_VERSION

from .helpers import load_json, storeval

MiB = 1 << 20


def test_testbed_up_run_down_leaves_nothing_behind(tmp_path, testbed):
    # `testbed` (the session's servers) only makes sure the software is installed and built already
    r = storeval("testbed", "up", "minio", "xrootd", "hdfs", cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    state = json.loads((tmp_path / "storeval-testbed" / "state.json").read_text())
    procs = [p for s in state["servers"].values() for p in s["procs"]]
    ports = [port for s in state["servers"].values() for port in s["ports"].values()]
    assert len(procs) == 3 and all(psutil.pid_exists(p["pid"]) for p in procs)
    assert (tmp_path / "storeval-testbed.yaml").exists()

    try:  # a failed check must not leave the servers running: down in every case
        status = storeval("testbed", "status", cwd=tmp_path)
        assert status.rc == 0 and all(k in status.out for k in ("minio", "xrootd", "hdfs")) and "DOWN" not in status.out

        # the check, verbatim: every target succeeds with identical byte and op counts
        run = storeval("run", "storeval-testbed.yaml", "--workload", "bandwidth", "--workload", "metadata",
                       "--clients", "2", "--set", "file_size=16MiB", "--json", "out.json", cwd=tmp_path, timeout=1800)
        assert run.rc == 0, run.err
        doc = load_json(tmp_path / "out.json")
        counts: dict[str, dict] = {}
        for cell in doc["cells"]:
            assert cell["status"] == "ok", cell["error"]
            counts.setdefault(cell["target"], {}).update({(cell["workload"], p["phase"]): (p["bytes"], p["ops"])
                                                          for p in cell["phases"] if p["status"] == "ok"})
        assert set(counts) == {"minio", "xrootd", "xrootd-davs", "hdfs"}  # the same XRootD over root:// and davs://
        assert counts["minio"][("bandwidth", "write")] == (2 * 16 * MiB, 32)
        assert counts["minio"][("metadata", "file-create")] == (2 * 100 * 16 * MiB, 200)  # mdtest -n 100, -w 16MiB
        for name in ("xrootd", "xrootd-davs", "hdfs"):
            assert {k: v for k, v in counts[name].items() if k in counts["minio"]} == counts["minio"], name
    finally:
        down = storeval("testbed", "down", cwd=tmp_path, timeout=300)
    assert down.rc == 0, down.err
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (any(psutil.pid_exists(p["pid"]) and
                                               psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE
                                               for p in procs) or any(port_open(port) for port in ports)):
        time.sleep(0.2)
    assert not any(psutil.pid_exists(p["pid"]) and psutil.Process(p["pid"]).status() != psutil.STATUS_ZOMBIE
                   for p in procs)
    assert not any(port_open(port) for port in ports)
    assert not (tmp_path / "storeval-testbed").exists() and not (tmp_path / "storeval-testbed.yaml").exists()
    assert storeval("testbed", "status", cwd=tmp_path).out.strip() == "no testbed servers running here"


def test_testbed_rejects_unknown_servers(tmp_path):
    r = storeval("testbed", "up", "lustre", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: testbed up lustre: unknown system (choose from minio, minio-ec, xrootd, "
                                         "xcache, xrootd-tpc, hdfs, glusterfs, ceph, nfs, slurm)"]
    assert not (tmp_path / "storeval-testbed").exists()
    r = storeval("testbed", "up", "minio", "--servers", "3", cwd=tmp_path)  # a setting the kind does not take
    assert r.rc == 2 and r.err_lines == ["error: testbed minio: no setting 'servers' (it takes: none besides disk_rate and disk_iops)"]


def _sums(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


@pytest.mark.skipif(shutil.which("go") is None and not (cache_dir() / "bin" / f"minio-{MINIO_VERSION}").exists(),
                    reason="Go is not installed and no MinIO binary is cached")
def test_testbed_down_keeps_a_users_files_in_and_around_a_real_minio(tmp_path):
    import obstore
    from obstore.store import S3Store

    bed, data = tmp_path / "storeval-testbed", tmp_path / "storeval-testbed" / "minio" / "data"
    r = storeval("testbed", "up", "minio", cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    server = Testbed(bed).load()["minio"]
    proc, port = server.state.procs[0], server.state.ports["api"]
    access, secret = server.credentials()
    store = S3Store(BUCKET, endpoint=server.endpoint, region="us-east-1", access_key_id=access,
                    secret_access_key=secret, virtual_hosted_style_request=False, client_options={"allow_http": True})
    obstore.put(store, "testbed/obj.bin", b"stored by MinIO")
    assert (data / BUCKET / "testbed" / "obj.bin" / "xl.meta").is_file()

    planted = {tmp_path / "beside.txt": b"beside", bed / "notes.txt": b"in the testbed directory",
               bed / "minio" / "notes.txt": b"in minio's directory", data / "notes.txt": b"in the drive",
               data / BUCKET / "notes.txt": b"in the bucket", data / BUCKET / "testbed" / "obj.bin" / "mine.txt": b"in an object"}
    for path, content in planted.items():
        path.write_bytes(content)
    sums = _sums(planted)

    again = storeval("testbed", "up", "minio", cwd=tmp_path, timeout=300)
    assert again.rc == 0 and again.err_lines == ["minio: already running"], again.err
    assert Testbed(bed).load()["minio"].state.procs == [proc]

    down = storeval("testbed", "down", cwd=tmp_path, timeout=300)
    assert down.rc == 0, down.err
    assert down.err_lines == [
        f"minio: stopped; left {data / 'notes.txt'}, {data / BUCKET / 'notes.txt'}, "
        f"{data / BUCKET / 'testbed/obj.bin/mine.txt'} and 1 more (not created by storeval or its server): they stay, "
        "with the directories holding them (move them away, then `storeval testbed down` again)"]
    assert not proc.alive() and not port_open(port)
    assert _sums(planted) == sums
    # MinIO's own data, the credentials and the log are gone; the user's files and the directories holding them stay
    assert {str(p.relative_to(bed / "minio")) for p in (bed / "minio").rglob("*")} == {
        ".storeval-testbed", "notes.txt", "data", "data/notes.txt", f"data/{BUCKET}", f"data/{BUCKET}/notes.txt",
        f"data/{BUCKET}/testbed", f"data/{BUCKET}/testbed/obj.bin", f"data/{BUCKET}/testbed/obj.bin/mine.txt"}
    assert not (tmp_path / "storeval-testbed.yaml").exists()

    for path in planted:
        if path != tmp_path / "beside.txt":
            os.rename(path, tmp_path / f"kept-{len(str(path))}-{path.name}")
    down = storeval("testbed", "down", cwd=tmp_path, timeout=300)
    assert down.rc == 0 and down.err_lines == ["minio: nothing was running, data removed"], down.err
    assert not bed.exists() and (tmp_path / "beside.txt").read_bytes() == b"beside"


@pytest.mark.skipif(os.geteuid() != 0, reason="the XRootD testbed needs root (the server then runs as its own user)")
def test_testbed_down_keeps_a_users_files_in_the_xrootd_home(tmp_path):
    from XRootD import client
    from XRootD.client.flags import OpenFlags

    from storeval.testbed.xrootd import XrootdServer

    XrootdServer(tmp_path / "unused").install()  # looked for now, after installing it: a failure names what is missing

    r = storeval("testbed", "up", "xrootd", cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    server = Testbed(tmp_path / "storeval-testbed").load()["xrootd"]
    home = server.home
    f = client.File()  # a file the server writes (as its own user), in a directory it makes
    assert f.open(f"{server.url}//storeval/run/x.bin", OpenFlags.NEW | OpenFlags.WRITE | OpenFlags.MAKEPATH)[0].ok
    assert f.write(b"through xrootd", offset=0)[0].ok and f.close()[0].ok
    assert (home / "data" / "storeval" / "run" / "x.bin").is_file()
    planted = {home / "mine.txt": b"in the home", home / "data" / "storeval" / "mine.txt": b"in the export",
               home / "data" / "storeval" / "run" / "mine.txt": b"beside the server's file",
               tmp_path / "storeval-testbed" / "xrootd" / "mine.txt": b"in the server's root"}
    for path, content in planted.items():
        path.write_bytes(content)
    sums = _sums(planted)

    down = storeval("testbed", "down", cwd=tmp_path, timeout=300)
    assert down.rc == 0 and len(down.err_lines) == 1 and down.err_lines[0].startswith("xrootd: stopped; left "), down.err
    assert _sums(planted) == sums
    assert not (home / "data" / "storeval" / "run" / "x.bin").exists() and not (home / "xrootd.cfg").exists()
    assert {str(p.relative_to(home)) for p in home.rglob("*")} == {
        ".storeval-testbed", "mine.txt", "data", "data/storeval", "data/storeval/mine.txt", "data/storeval/run",
        "data/storeval/run/mine.txt"}
    for path in planted:
        path.unlink()
    down = storeval("testbed", "down", cwd=tmp_path, timeout=300)
    assert down.rc == 0 and down.err_lines == ["xrootd: nothing was running, data removed"], down.err
    assert not home.exists() and not (tmp_path / "storeval-testbed").exists()
