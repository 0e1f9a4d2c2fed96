"""The XRootD testbed server: a real xrootd on 127.0.0.1, driven through the XRootD Python bindings."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from storeval.testbed import xrootd as xrootd_mod
from storeval.testbed.base import ServerState, TestbedError, port_open
from storeval.testbed.xrootd import XrootdServer, parse_trace, pgwrite_payload

client = pytest.importorskip("XRootD.client")
from XRootD.client.flags import DirListFlags, MkDirFlags, OpenFlags, QueryCode  # noqa: E402


def _installed_or_skip() -> None:
    try:
        XrootdServer(Path("/nonexistent")).install()
    except TestbedError as e:
        pytest.skip(f"xrootd cannot be installed here: {e}")


def _start(root: Path) -> XrootdServer:
    server = XrootdServer(root)
    server.start()
    try:
        server.wait_ready(timeout=30)
    except BaseException:
        server.stop()
        raise
    return server


def _ours(root: Path) -> list[psutil.Process]:
    """Processes whose command line names this server's directory (ours only, never anyone else's)."""
    out = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            if any(str(root) in a for a in p.info["cmdline"] or []) and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    _installed_or_skip()
    s = _start(tmp_path_factory.mktemp("xrootd-testbed") / "xrootd")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fs(server: XrootdServer):
    return client.FileSystem(server.url)


def _ok(result):
    status = result[0]
    assert status.ok, status.message
    return result[1]


def _write_file(server: XrootdServer, name: str, pieces: dict[int, bytes]) -> str:
    url = f"{server.url}//storeval/{name}"
    f = client.File()
    _ok(f.open(url, OpenFlags.NEW | OpenFlags.WRITE))
    for offset, data in pieces.items():
        _ok(f.write(data, offset=offset))
    _ok(f.sync())
    _ok(f.close())
    return url


# -- the server and its state ---------------------------------------------------------------------------
def test_state_has_everything_a_rebuilt_server_needs(server: XrootdServer):
    st = server.state
    port = st.ports["xrootd"]
    assert st.kind == "xrootd" and len(st.procs) == 1
    assert Path(st.info["log"]).is_file() and Path(st.info["data"], "storeval").is_dir()
    assert st.info["version"].startswith("v5")
    # the recorded PID is the server itself: the one in its pid file, listening on the port
    pid = st.procs[0].pid
    assert int((server.home / "run" / "xrootd.pid").read_text()) == pid
    assert server.home.parent == Path("/var/tmp") and server.home.name.startswith("storeval-xrootd-")
    assert any(c.laddr.port == port and c.status == psutil.CONN_LISTEN
               for c in psutil.Process(pid).net_connections(kind="tcp"))
    assert psutil.Process(pid).children(recursive=True) == []

    rebuilt = XrootdServer(Path(st.root), {}, ServerState.from_json(st.to_json()))
    assert rebuilt.alive() and rebuilt.ready()
    assert rebuilt.targets() == server.targets() == {"xrootd": {"url": f"root://127.0.0.1:{port}//storeval",
                                                                 "server_pids": [p.pid for p in server.state.procs]}}
    assert rebuilt.trace_log() == server.trace_log() == Path(st.info["log"])
    assert f"xrootd pid {pid} up" in rebuilt.status() and str(port) in rebuilt.status()


def test_target_url_reaches_the_export(server: XrootdServer):
    url = server.targets()["xrootd"]["url"]
    f = client.File()
    _ok(f.open(url + "/via-target.bin", OpenFlags.NEW | OpenFlags.WRITE))
    _ok(f.write(b"hello", offset=0))
    _ok(f.close())
    assert (Path(server.state.info["data"]) / "storeval" / "via-target.bin").read_bytes() == b"hello"


def test_readv_limits(server: XrootdServer, fs):
    iov, ior = server.readv_limits()
    assert (iov, ior) == (1024, 2097136)
    # the names go space-separated: with a newline between them only the first one is answered
    assert _ok(fs.query(QueryCode.CONFIG, "readv_iov_max readv_ior_max")) == b"1024\n2097136\n"
    assert _ok(fs.query(QueryCode.CONFIG, "readv_iov_max\nreadv_ior_max")) == b"1024\n"


# -- data through the Python bindings ---------------------------------------------------------------------
def test_write_at_offsets_stat_and_read(server: XrootdServer, fs):
    url = _write_file(server, "offsets.bin", {100: b"x" * 10, 0: b"y" * 10, 4096: b"z" * 4096})
    info = _ok(fs.stat("/storeval/offsets.bin"))
    assert info.size == 8192
    f = client.File()
    _ok(f.open(url))
    assert _ok(f.read(0, 20)) == b"y" * 10 + b"\0" * 10
    assert _ok(f.read(95, 20)) == b"\0" * 5 + b"x" * 10 + b"\0" * 5
    assert _ok(f.read(8000, 1000)) == b"z" * 192  # short read at the end of the file
    _ok(f.close())

    # an existing file: NEW fails (3018); UPDATE writes in place. A File whose open failed is stuck:
    # every later open on it answers the same error without asking the server, so take a fresh File.
    f = client.File()
    status, _ = f.open(url, OpenFlags.NEW | OpenFlags.WRITE)
    assert not status.ok and status.errno == 3018
    status, _ = f.open(url, OpenFlags.UPDATE)
    assert not status.ok and status.errno == 3018 and not f.is_open()
    f = client.File()
    _ok(f.open(url, OpenFlags.UPDATE))
    _ok(f.write(b"W" * 4, offset=8190))
    _ok(f.close())
    assert _ok(fs.stat("/storeval/offsets.bin")).size == 8194


def test_vector_read_returns_the_right_bytes(server: XrootdServer):
    data = bytes(range(256)) * 64  # 16 KiB
    url = _write_file(server, "vector.bin", {0: data})
    chunks = [(0, 10), (100, 50), (5000, 4000), (16374, 10), (3, 5)]
    f = client.File()
    _ok(f.open(url))
    got = _ok(f.vector_read(chunks=chunks))
    _ok(f.close())
    assert got.size == sum(n for _, n in chunks)
    assert [(c.offset, c.length, c.buffer) for c in got.chunks] == [(o, n, data[o:o + n]) for o, n in chunks]


def test_namespace(server: XrootdServer, fs):
    _ok(fs.mkdir("/storeval/ns/a/b", MkDirFlags.MAKEPATH))
    _write_file(server, "ns/a/file.bin", {0: b"abc"})
    listing = _ok(fs.dirlist("/storeval/ns/a", DirListFlags.STAT))
    entries = {e.name: e.statinfo.size for e in listing}
    assert set(entries) == {"b", "file.bin"} and entries["file.bin"] == 3

    status, _ = fs.rmdir("/storeval/ns/a")
    assert not status.ok  # not empty
    _ok(fs.rmdir("/storeval/ns/a/b"))
    _ok(fs.rm("/storeval/ns/a/file.bin"))
    _ok(fs.rmdir("/storeval/ns/a"))
    _ok(fs.rmdir("/storeval/ns"))
    status, _ = fs.stat("/storeval/ns")
    assert not status.ok and status.errno == 3011  # kXR_NotFound
    status, _ = fs.rm("/storeval/never-there")
    assert not status.ok and status.errno == 3011


def test_concurrent_writers_need_force(server: XrootdServer):
    url = f"{server.url}//storeval/shared.bin"
    a = client.File()
    _ok(a.open(url, OpenFlags.NEW | OpenFlags.WRITE))
    b = client.File()
    status, _ = b.open(url, OpenFlags.UPDATE)
    assert not status.ok and status.errno == 3003  # "already opened by 1 writer; open denied"
    r = client.File()
    status, _ = r.open(url, OpenFlags.READ)
    assert not status.ok and status.errno == 3003  # readers are refused too while a writer has it open
    b = client.File()  # a File whose open failed cannot be opened again
    _ok(b.open(url, OpenFlags.UPDATE | OpenFlags.FORCE))
    _ok(a.write(b"A" * 10, offset=0))
    _ok(b.write(b"B" * 10, offset=10))
    _ok(a.close())
    _ok(b.close())
    assert (Path(server.state.info["data"]) / "storeval" / "shared.bin").read_bytes() == b"A" * 10 + b"B" * 10


# -- the trace ----------------------------------------------------------------------------------------------
def test_trace_shows_writes_reads_and_readv_elements(server: XrootdServer):
    mark = server.trace_mark()
    url = _write_file(server, "traced.bin", {0: b"a" * 1000, 5000: b"b" * 3000})
    chunks = [(10, 20), (5000, 100), (7990, 10)]
    f = client.File()
    _ok(f.open(url))
    _ok(f.read(123, 456))
    _ok(f.vector_read(chunks=chunks))
    _ok(f.read(7000, 5000))  # crosses the end: logged with the length asked for
    _ok(f.close())
    ops = server.trace_ops(mark)
    assert ops == [("write", 0, 1000), ("write", 5000, 3000), ("read", 123, 456),
                   ("readV", 10, 20), ("readV", 5000, 100), ("readV", 7990, 10), ("read", 7000, 5000)]
    # parse_trace on the raw lines gives the same, and every one of them is a real server line
    lines = server.trace_log().read_text().splitlines()
    assert parse_trace(lines)[-len(ops):] == ops
    assert any(re.search(r"Xrootd_Protocol: fh=\d+ readV 100@5000$", ln) for ln in lines)
    assert any(re.search(r"Xrootd_Protocol: 0 fh=\d+ read 456@123$", ln) for ln in lines)
    assert any(re.search(r"Xrootd_Protocol: 0 fh=\d+ write 3000@5000$", ln) for ln in lines)


def test_trace_of_xrdcp_pgread_and_pgwrite(server: XrootdServer, tmp_path: Path):
    if not shutil.which("xrdcp"):
        pytest.skip("xrdcp (xrootd-client) is not installed")
    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(9_000_000))
    mark = server.trace_mark()
    subprocess.run(["xrdcp", "-s", str(src), f"{server.url}//storeval/cp.bin"], check=True, timeout=60)
    subprocess.run(["xrdcp", "-s", "-f", f"{server.url}//storeval/cp.bin", str(tmp_path / "back.bin")],
                   check=True, timeout=60)
    assert (tmp_path / "back.bin").read_bytes() == src.read_bytes()
    ops = server.trace_ops(mark)
    writes = [o for o in ops if o[0] == "pgwrite"]
    reads = [o for o in ops if o[0] == "pgread"]
    assert writes and reads
    assert sum(n for _, _, n in writes) == 9_000_000  # data only, without the CRC32C bytes
    assert sum(n for _, _, n in reads) == 9_000_000
    assert [o for _, o, _ in writes] == sorted(o for _, o, _ in writes) and writes[0][1] == 0


def test_parse_trace_formats():
    lines = [
        "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: 0 fh=0 read 2176@64970135",
        "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: fh=0 readV 10@0",
        "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: 0 pgread 8388608@0 fn=/storeval/f",
        "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: 0 fh=1 write 10@100",
        "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: 0 pgwrite 8396800@8388608 fn=/f",
        "261121 05:23:01 9619 root.12366:20@localhost Xrootd_Protocol: 0 pgwrite retry 4100@0 fn=/f",
        "200101 01:02:03 111 user.1:2@host XrootdProtocol: 0 fh=3 read 5@7",  # before 5.4
        "200101 01:02:03 111 user.1:2@host XrootdProtocol: fh=3 readV 1@2",
        "200101 01:02:03 111 user.1:2@host XrootdProtocol: 0 fh=3 pgread 4096@8192",
        "261121 05:23:01 9619 XrootdXeq: root.12366:20@localhost pvt IP46 login",
        "261121 05:23:01 9619 ofs_open: root.1:22@localhost Unable to open /storeval/nope; no such file",
    ]
    assert parse_trace(lines) == [
        ("read", 64970135, 2176), ("readV", 0, 10), ("pgread", 0, 8388608), ("write", 100, 10),
        ("pgwrite", 8388608, 8388608), ("pgwrite", 0, 4096),
        ("read", 7, 5), ("readV", 2, 1), ("pgread", 8192, 4096)]


@pytest.mark.parametrize("offset,size", [(0, 1), (0, 4096), (0, 4097), (0, 8388608), (16777216, 3222784),
                                         (100, 3996), (100, 3997), (4095, 1), (4095, 2), (12345, 100000)])
def test_pgwrite_payload(offset: int, size: int):
    first = 4096 - offset % 4096
    pages = 1 + max(0, -(-(size - first) // 4096))
    assert pgwrite_payload(offset, size + 4 * pages) == size


# -- start and stop ---------------------------------------------------------------------------------------
def test_lost_port_is_retried(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    _installed_or_skip()
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    taken = busy.getsockname()[1]
    ports = iter([taken])
    real = xrootd_mod.free_port
    monkeypatch.setattr(xrootd_mod, "free_port", lambda: next(ports, None) or real())
    try:
        s = _start(tmp_path_factory.mktemp("xrootd-race") / "xrootd")
    finally:
        busy.close()
    try:
        assert s.state.ports["xrootd"] != taken and s.ready()
        assert "address already in use" in s.trace_log().read_text()
    finally:
        s.stop()


def test_stop_leaves_nothing(tmp_path_factory: pytest.TempPathFactory):
    _installed_or_skip()
    root = tmp_path_factory.mktemp("xrootd-stop") / "xrootd"
    s = _start(root)
    pid, port, home = s.state.procs[0].pid, s.state.ports["xrootd"], s.home
    assert _ours(home) and port_open(port)
    # stop through a server rebuilt from the saved state, as `storeval testbed down` does
    rebuilt = XrootdServer(Path(s.state.root), {}, ServerState.from_json(s.state.to_json()))
    rebuilt.stop()
    assert not rebuilt.alive() and rebuilt.state.procs == []
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _ours(home) == []
    assert not port_open(port)
    assert not root.exists() and not home.exists()
