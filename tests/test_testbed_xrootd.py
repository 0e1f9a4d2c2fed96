"""The XRootD testbed server: real xrootd and cmsd daemons in a network namespace of their own, driven through the
XRootD Python bindings and the storeval CLI — one server (shared by most tests), and a cluster of a redirector and
two data servers started, faulted and taken down through the CLI."""

from __future__ import annotations

import ipaddress
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import yaml

from storeval.testbed import Testbed
from storeval.testbed.base import ServerState, TestbedError, port_open
from storeval.testbed.netns import Netns, Taken, free_subnet, used_networks
from storeval.testbed.xrootd import XrootdServer, parse_trace, pgwrite_payload

from .helpers import exposed, listening_addresses, load_json, poll, storeval

client = pytest.importorskip("XRootD.client")
from XRootD.client.flags import DirListFlags, MkDirFlags, OpenFlags, QueryCode  # noqa: E402

MiB = 1 << 20
BOUND = 180.0  # seconds: the generous bound of every wait below (a busy machine)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")


def _installed_or_skip() -> None:
    if os.geteuid() != 0:
        pytest.skip("the XRootD testbed runs in a network namespace, which needs root")
    try:
        XrootdServer(Path("/nonexistent")).install()
    except TestbedError as e:
        pytest.skip(f"xrootd cannot be installed here: {e}")


def _start(root: Path, options: dict | None = None) -> XrootdServer:
    server = XrootdServer(root, options)
    try:
        server.start()
        server.wait_ready(timeout=BOUND)
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




def ns_listening(pid: int) -> set[int]:
    """TCP ports ``pid`` listens on in its own network namespace (``/proc/PID/net/tcp`` is that namespace's)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            continue
        if m:
            inodes.add(m[1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


def alive(pid: int, create_time: float) -> bool:
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - create_time) < 0.5 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


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


# -- the server, its state and its network namespace -------------------------------------------------------
def test_state_has_everything_a_rebuilt_server_needs(server: XrootdServer):
    st = server.state
    port = st.ports["xrootd"]
    ns = server.netns
    assert st.kind == "xrootd" and len(st.procs) == 1 and port == 1094
    assert Path(st.info["log"]).is_file() and Path(st.info["data"], "storeval").is_dir()
    assert st.info["version"].startswith("v5") and st.info["servers"] == 1
    # the recorded PID is the server itself: the one in its pid file, listening on the port inside its namespace
    pid = st.procs[0].pid
    assert int((server.home / "run" / "xrootd.pid").read_text()) == pid
    assert server.home.parent == Path("/var/tmp") and server.home.name.startswith("storeval-xrootd-")
    assert ns_listening(pid) == {port}
    assert os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net")
    assert psutil.Process(pid).children(recursive=True) == []
    assert ns.name in netns_names() and ns.name == f"storeval-{ns.host_if[2:-1]}"

    rebuilt = XrootdServer(Path(st.root), {}, ServerState.from_json(st.to_json()))
    assert rebuilt.alive() and rebuilt.ready()
    pids = [p.pid for p in server.state.procs]
    assert rebuilt.targets() == server.targets() == {
        "xrootd": {"url": f"root://{ns.ns_addr}:{port}//storeval", "server_pids": pids},
        "xrootd-davs": {"url": f"davs://{ns.ns_addr}:{port}/storeval", "ca_file": str(server.ca_file),
                        "ca_dir": str(server.ca_file.parent), "server_pids": pids}}
    assert server.ca_file.is_file() and oct((server.home / "tls" / "host.key").stat().st_mode & 0o777) == "0o600"
    assert rebuilt.trace_log() == server.trace_log() == Path(st.info["log"])
    assert rebuilt.status() == (f"xrootd: running — xrootd pid {pid} up; ports xrootd {port} on {ns.ns_addr} (network "
                                f"namespace {ns.name}; clients connect from {ns.host_addr})")


def test_the_server_is_reachable_only_over_the_namespaces_veth_pair(server: XrootdServer, fs):
    ns = server.netns
    pids = [p.pid for p in server.state.procs]
    # nothing of it in the host's network namespace (`ss -ltnp` there), let alone on a public address ...
    assert exposed(pids) == [] and listening_addresses(pids) == {}
    host_ss = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    assert not any(f"pid={pid}," in host_ss for pid in pids)
    # ... while inside it listens on every address of the namespace, which has only lo and its veth end
    inside = ns.run_in(["ss", "-Hltnp"]).stdout
    assert re.search(rf"0\.0\.0\.0:1094 .*\"xrootd\",pid={pids[0]},", inside), inside
    addrs = ns.run_in(["ip", "-o", "-4", "addr", "show"]).stdout
    assert sorted(re.findall(r"inet (\S+)", addrs)) == sorted(["127.0.0.1/8", f"{ns.ns_addr}/30"])
    # a private /30 that leads nowhere else: no default route inside, no forwarding out of the host end
    net = ipaddress.ip_network(f"{ns.ns_addr}/30", strict=False)
    assert net.subnet_of(ipaddress.ip_network("10.0.0.0/8")) and ns.host_addr in {str(h) for h in net.hosts()}
    assert ns.run_in(["ip", "-4", "route", "show"]).stdout.split() == [
        str(net), "dev", ns.ns_if, "proto", "kernel", "scope", "link", "src", ns.ns_addr]
    assert Path(f"/proc/sys/net/ipv4/conf/{ns.host_if}/forwarding").read_text().strip() == "0"
    # the host end's address is where clients come from (the server logs each login)
    _ok(fs.stat("/storeval"))
    logins = re.findall(r"XrootdXeq: \S+@(\S+) pvt IP46 login", server.log_file.read_text())
    assert logins and set(logins) == {ns.host_addr}


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
    # `xrootd.trace fs fsio request` puts the client's 4-hex-digit stream id into every line
    assert any(re.search(r"Xrootd_Protocol: [0-9a-f]{4} fh=\d+ readV 100@5000$", ln) for ln in lines)
    assert any(re.search(r"Xrootd_Protocol: [0-9a-f]{4} 0 fh=\d+ read 456@123$", ln) for ln in lines)
    assert any(re.search(r"Xrootd_Protocol: [0-9a-f]{4} 0 fh=\d+ write 3000@5000$", ln) for ln in lines)


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
BLOCKER = """
import socket, sys, time
s = socket.socket()
s.bind(("0.0.0.0", int(sys.argv[1])))
s.listen()
print("listening", flush=True)
time.sleep(600)
"""


def test_lost_port_is_retried(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """Someone holding XRootD's port inside the namespace (only a test can): the next start takes another one."""
    _installed_or_skip()
    blockers: list[subprocess.Popen] = []
    write_config = XrootdServer._write_config

    def hold_port_first(self: XrootdServer, port: int) -> None:
        if not blockers:
            blocker = subprocess.Popen(self.netns.command([sys.executable, "-c", BLOCKER, str(port)]),
                                       stdout=subprocess.PIPE, text=True)
            blockers.append(blocker)
            assert blocker.stdout.readline().strip() == "listening"
        write_config(self, port)

    monkeypatch.setattr(XrootdServer, "_write_config", hold_port_first)
    root = tmp_path_factory.mktemp("xrootd-race") / "xrootd"
    s = XrootdServer(root)
    try:
        s.start()
        s.wait_ready(timeout=BOUND)
        assert s.state.ports["xrootd"] != 1094 and s.ready()
        assert "address already in use" in s.trace_log().read_text()
    finally:
        for blocker in blockers:
            blocker.kill()
            blocker.wait()
        s.stop()
    assert s.netns is None and not root.exists()


def test_stop_leaves_nothing(tmp_path_factory: pytest.TempPathFactory):
    _installed_or_skip()
    root = tmp_path_factory.mktemp("xrootd-stop") / "xrootd"
    s = _start(root)
    pid, port, home, ns = s.state.procs[0].pid, s.state.ports["xrootd"], s.home, s.netns
    assert _ours(home) and port_open(port, ns.ns_addr)
    # stop through a server rebuilt from the saved state, as `storeval testbed down` does
    rebuilt = XrootdServer(Path(s.state.root), {}, ServerState.from_json(s.state.to_json()))
    rebuilt.stop()
    assert not rebuilt.alive() and rebuilt.state.procs == [] and "netns" not in rebuilt.state.info
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert _ours(home) == []
    assert ns.name not in netns_names() and not link_exists(ns.host_if)
    assert not root.exists() and not home.exists()
    rebuilt.stop()  # again: nothing to do, no error


def test_stop_also_ends_a_daemon_an_interrupted_start_did_not_record(tmp_path_factory: pytest.TempPathFactory):
    """An `up` killed between starting a daemon and saving its PID: found in the namespace, with our config."""
    _installed_or_skip()
    s = _start(tmp_path_factory.mktemp("xrootd-stray") / "xrootd")
    lost = s.state.procs.pop()  # as if the state had been saved just before this process was recorded
    home, ns = s.home, s.netns
    s.stop()
    assert not alive(lost.pid, lost.create_time) and _ours(home) == []
    assert ns.name not in netns_names() and not home.exists()


def test_as_another_user_it_says_root_is_needed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    if shutil.which("xrootd") is None:
        pytest.skip("xrootd is not installed")
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    s = XrootdServer(tmp_path / "xrootd")
    with pytest.raises(TestbedError) as e:
        s.start()
    assert str(e.value) == ("xrootd: the testbed's XRootD (it cannot bind one address) runs in a network namespace of "
                            "its own, which needs root: run storeval as root")
    assert not (tmp_path / "xrootd").exists() and "netns" not in s.state.info and not s.state.procs


def test_servers_setting():
    assert XrootdServer.check_options({}) == {"servers": 1}
    assert XrootdServer.check_options({"servers": 8}) == {"servers": 8}
    for bad in (0, 9, True, "2", 1.5):
        with pytest.raises(TestbedError) as e:
            XrootdServer.check_options({"servers": bad})
        assert str(e.value) == f"testbed xrootd: servers must be a whole number from 1 to 8, not {bad!r}"
    with pytest.raises(TestbedError) as e:
        XrootdServer.check_options({"type": "replicate"})
    assert str(e.value) == ("testbed xrootd: no setting 'type' (it takes: servers (data servers, 1-8 (default 1: one "
                            "xrootd; 2 or more: a redirector and that many data servers)) besides disk_rate and "
                            "disk_iops)")


def test_cli_refuses_too_many_data_servers(tmp_path: Path):
    r = storeval("testbed", "up", "xrootd", "--servers", "9", "--dir", str(tmp_path / "bed"), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: testbed xrootd: servers must be a whole number from 1 to 8, not 9"]
    assert not (tmp_path / "bed").exists()


# -- the network namespace alone (storeval.testbed.netns) ---------------------------------------------------
def test_free_subnet_overlaps_nothing_in_use():
    rng = random.Random(7)
    lower_half = [ipaddress.ip_network("10.0.0.0/9"), ipaddress.ip_network("0.0.0.0/0")]  # a default route is no overlap
    nets = [free_subnet(lower_half, rng) for _ in range(50)]
    assert all(n.prefixlen == 30 and n.subnet_of(ipaddress.ip_network("10.128.0.0/9")) for n in nets)
    with pytest.raises(TestbedError) as e:
        free_subnet([ipaddress.ip_network("10.0.0.0/8")], rng)
    assert str(e.value) == ("no free /30 in 10.0.0.0/8 for a network namespace: this host's addresses and routes cover "
                            "it; remove some")


@needs_root
def test_netns_made_used_and_removed():
    ns = Netns.plan()
    assert len(ns.host_if) <= 15 and len(ns.ns_if) <= 15 and ns.name.startswith("storeval-")
    assert not any(ipaddress.ip_network(f"{ns.ns_addr}/30", strict=False).overlaps(n)
                   for n in used_networks() if n.prefixlen)
    try:
        ns.create()
        assert ns.name in netns_names() and ns.exists() and ns.link_up()
        host = subprocess.run(["ip", "-o", "-4", "addr", "show", "dev", ns.host_if], capture_output=True, text=True).stdout
        assert f"inet {ns.host_addr}/30" in host
        # the pair carries a connection from inside to the host end ...
        with socket.create_server((ns.host_addr, 0)) as listener:
            port = listener.getsockname()[1]
            said = {}

            def accept() -> None:
                conn, peer = listener.accept()
                with conn:
                    said["peer"], said["data"] = peer[0], conn.recv(16)

            t = threading.Thread(target=accept)
            t.start()
            r = ns.run_in([sys.executable, "-c", f"import socket; socket.create_connection(('{ns.host_addr}', {port}), "
                                                  "timeout=10).sendall(b'over veth')"])
            t.join(timeout=30)
        assert r.returncode == 0, r.stderr
        assert said == {"peer": ns.ns_addr, "data": b"over veth"}
        # ... and nothing beyond it: no route from inside to anywhere else
        r = ns.run_in([sys.executable, "-c", "import socket; socket.create_connection(('192.0.2.1', 80), timeout=5)"])
        assert r.returncode != 0 and "Network is unreachable" in r.stderr
    finally:
        ns.remove()
    assert ns.name not in netns_names() and not link_exists(ns.host_if) and not ns.exists()
    ns.remove()  # again: nothing left to do


@needs_root
def test_netns_removal_after_an_interrupted_create_and_names_taken():
    ns = Netns.plan()
    subprocess.run(["ip", "netns", "add", ns.name], check=True)  # killed right after the namespace was made
    ns.remove()
    assert ns.name not in netns_names()
    Netns.plan().remove()  # planned and recorded, never made: nothing to do
    # a name that exists is never taken over (nor, then, removed): Taken, and nothing made
    theirs = Netns.plan()
    subprocess.run(["ip", "netns", "add", theirs.name], check=True)
    try:
        with pytest.raises(Taken):
            theirs.create()
        assert not link_exists(theirs.host_if)
    finally:
        subprocess.run(["ip", "netns", "del", theirs.name], check=True)


# -- a cluster: a redirector and two data servers, through the CLI -------------------------------------------
@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    _installed_or_skip()
    base = tmp_path_factory.mktemp("xrootd-cluster")
    bed = base / "bed"
    r = storeval("testbed", "up", "xrootd", "--servers", "2", "--dir", str(bed), cwd=base, timeout=600)
    try:
        assert r.rc == 0, r.err
        yield bed
    finally:
        storeval("testbed", "down", "--dir", str(bed), cwd=base, timeout=600)


def state_of(bed: Path) -> dict:
    return json.loads((bed / "state.json").read_text())["servers"]["xrootd"]


def test_cluster_daemons_status_and_handles(cluster: Path):
    st = state_of(cluster)
    ns = st["info"]["netns"]
    assert [p["name"] for p in st["procs"]] == ["cmsd redir", "xrootd redir", "cmsd ds1", "xrootd ds1", "cmsd ds2",
                                                "xrootd ds2"]
    assert st["ports"] == {"xrootd": 1094, "cms": 3121, "ds1": 1095, "ds2": 1096}
    assert st["info"]["servers"] == 2
    pids = [p["pid"] for p in st["procs"]]
    assert exposed(pids) == [] and listening_addresses(pids) == {}
    assert [ns_listening(pid) & {1094, 1095, 1096, 3121} for pid in pids] == [{3121}, {1094}, set(), {1095}, set(), {1096}]
    config = Path(st["info"]["config"]).read_text()
    assert f"all.manager {ns['ns_addr']}:3121" in config and "xrd.allow" not in config
    targets = yaml.safe_load((cluster.parent / "storeval-testbed.yaml").read_text())["targets"]
    assert targets == {"xrootd": {"url": f"root://{ns['ns_addr']}:1094//storeval", "server_pids": pids}}

    status = storeval("testbed", "status", "--dir", str(cluster))
    daemons = ", ".join(f"{p['name']} pid {p['pid']} up" for p in st["procs"])
    assert status.rc == 0 and status.out.strip() == (
        f"xrootd: running — {daemons}; ports xrootd 1094, cms 3121, ds1 1095, ds2 1096 on {ns['ns_addr']} (network "
        f"namespace {ns['name']}; clients connect from {ns['host_addr']})")
    handles = storeval("testbed", "faults", "--dir", str(cluster))
    data = st["info"]["data_dirs"]
    assert handles.rc == 0 and handles.out.splitlines() == [
        "xrootd      stop,cont,kill,start,restart  XRootD server (port 1094)",
        f"xrootd.ds1  stop,cont,kill,start,restart  XRootD data server 1 of 2: cmsd and xrootd (port 1095 on "
        f"{ns['ns_addr']}, {data['ds1']})",
        f"xrootd.ds2  stop,cont,kill,start,restart  XRootD data server 2 of 2: cmsd and xrootd (port 1096 on "
        f"{ns['ns_addr']}, {data['ds2']})"]


def test_bandwidth_through_the_redirector_spreads_files_over_both_data_servers(cluster: Path, tmp_path: Path):
    server = Testbed(cluster).load()["xrootd"]
    localroots = {name: Path(path) for name, path in state_of(cluster)["info"]["data_dirs"].items()}
    mark = server.trace_mark()
    seen: dict[str, set[str]] = {name: set() for name in localroots}
    run = subprocess.Popen([sys.executable, "-m", "storeval", "run", str(cluster.parent / "storeval-testbed.yaml"),
                            "--workload", "bandwidth", "--clients", "4", "--set", "file_size=4MiB", "--set",
                            "transfer_size=1MiB", "--set", "phases=write,read", "--json", str(tmp_path / "out.json"),
                            "--results", str(tmp_path / "results"), "--quiet"],
                           cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while run.poll() is None:  # the clients' files, as they sit in each data server's own directory
        for name, root in localroots.items():
            seen[name] |= {p.name for p in root.rglob("bw.*")}
        assert time.monotonic() < deadline, "the run did not end"
        time.sleep(0.01)
    out, err = run.communicate()
    assert run.returncode == 0, err
    assert all(seen.values()) and not set.intersection(*seen.values())  # whole files, each on one data server
    assert sum(len(names) for names in seen.values()) == 4
    doc = load_json(tmp_path / "out.json")
    (cell,) = doc["cells"]
    phases = {p["phase"]: p for p in cell["phases"]}
    assert {k: (p["status"], p["bytes"]) for k, p in phases.items()} == {"write": ("ok", 16 * MiB),
                                                                          "read": ("ok", 16 * MiB)}
    by_server = server.trace_ops_by_server(mark)
    # the phase's 1 MiB transfers, and one small write besides: the run's owner record (.storeval-run.json)
    written = {name: sum(n for op, _, n in ops if op == "write" and n == MiB) for name, ops in by_server.items()}
    every = [op for ops in by_server.values() for op in ops]
    owner = [op for op in every if op[0] == "write" and op[2] != MiB]
    assert len(owner) == 1 and owner[0][1] == 0 and 0 < owner[0][2] < 4096
    assert {op for op, _, _ in every} == {"write", "read"}
    read = {name: sum(n for op, _, n in ops if op == "read") for name, ops in by_server.items()}
    assert sum(written.values()) == phases["write"]["bytes"] and sum(read.values()) == phases["read"]["bytes"]
    assert written == read == {name: len(names) * 4 * MiB for name, names in seen.items()}  # reads go where files are


def test_listing_through_the_redirector_needs_locate(cluster: Path):
    """A plain listing is the redirector's own (empty) disk; LOCATE | MERGE asks every data server."""
    server = Testbed(cluster).load()["xrootd"]
    fs = client.FileSystem(server.url)
    _ok(fs.mkdir("/storeval/listing", MkDirFlags.MAKEPATH))
    for i in range(4):
        f = client.File()
        _ok(f.open(f"{server.url}//storeval/listing/f{i}", OpenFlags.NEW))
        _ok(f.close())
    status, _ = fs.dirlist("/storeval/listing", DirListFlags.NONE)
    assert not status.ok and status.errno == 3011
    names = [e.name for e in _ok(fs.dirlist("/storeval/listing", DirListFlags.LOCATE | DirListFlags.MERGE))]
    assert sorted(names) == ["f0", "f1", "f2", "f3"]
    homes = {name: {p.name for p in (Path(path) / "storeval" / "listing").iterdir()}
             for name, path in state_of(cluster)["info"]["data_dirs"].items()}
    assert homes["ds1"] | homes["ds2"] == {"f0", "f1", "f2", "f3"} and homes["ds1"] and homes["ds2"]
    for i in range(4):
        _ok(fs.rm(f"/storeval/listing/f{i}"))  # sent to the data server that has it, which answers
    assert not any((Path(path) / "storeval" / "listing" / f"f{i}").exists()
                   for path in state_of(cluster)["info"]["data_dirs"].values() for i in range(4))
    status, _ = fs.rm("/storeval/listing/f0")
    assert not status.ok and status.errno == 3011
    _ok(fs.rmdir("/storeval/listing"))  # forwarded one way to every data server: gone from both a moment later
    poll(lambda: not any((Path(path) / "storeval" / "listing").exists()
                         for path in state_of(cluster)["info"]["data_dirs"].values()), "the directory gone everywhere")


def test_a_killed_data_server_leaves_the_other_serving_and_starts_again(cluster: Path):
    server = Testbed(cluster).load()["xrootd"]
    data = {name: os.urandom(MiB + 7) for name in ("a", "b")}
    where = {}
    for name, blob in data.items():
        f = client.File()
        _ok(f.open(f"{server.url}//storeval/faults/{name}.bin", OpenFlags.NEW | OpenFlags.MAKEPATH))
        _ok(f.write(blob, offset=0))
        where[name] = f.get_property("DataServer")
        _ok(f.close())
    ports = {name: int(addr.rsplit(":", 1)[1]) for name, addr in where.items()}
    assert sorted(ports.values()) == [1095, 1096]  # one file on each
    on_ds1 = next(n for n, p in ports.items() if p == 1095)
    on_ds2 = next(n for n, p in ports.items() if p == 1096)
    old = state_of(cluster)["procs"][2:4]

    r = storeval("testbed", "fault", "xrootd.ds1", "kill", "--dir", str(cluster))
    assert r.rc == 0 and r.out.strip() == f"SIGKILL to xrootd ds1 (pids {old[0]['pid']}, {old[1]['pid']})", r.err
    assert not any(alive(p["pid"], p["create_time"]) for p in old)
    status = storeval("testbed", "status", "--dir", str(cluster)).out
    assert status.startswith("xrootd: DOWN — ") and f"cmsd ds1 pid {old[0]['pid']} DOWN (exited)" in status
    assert "(NAME: xrootd.ds1)" in status
    # the other data server still serves its file through the redirector; the dead one's file is unavailable
    f = client.File()
    _ok(f.open(f"{server.url}//storeval/faults/{on_ds2}.bin", OpenFlags.READ, timeout=60))
    assert _ok(f.read(0, len(data[on_ds2]) + 10, timeout=60)) == data[on_ds2]
    _ok(f.close())
    status_, _ = client.File().open(f"{server.url}//storeval/faults/{on_ds1}.bin", OpenFlags.READ, timeout=60)
    assert not status_.ok and status_.errno == 3011, status_.message

    r = storeval("testbed", "fault", "xrootd.ds1", "start", "--dir", str(cluster), timeout=600)
    new = state_of(cluster)["procs"][2:4]
    assert r.rc == 0 and r.out.strip() == (f"started xrootd ds1 again (pids {new[0]['pid']}, {new[1]['pid']}) on the "
                                           "same port 1095 with its data"), r.err
    assert all(alive(p["pid"], p["create_time"]) for p in new)
    status = storeval("testbed", "status", "--dir", str(cluster)).out
    assert status.startswith("xrootd: running — ") and f"cmsd ds1 pid {new[0]['pid']} up" in status
    f = client.File()
    _ok(f.open(f"{server.url}//storeval/faults/{on_ds1}.bin", OpenFlags.READ, timeout=60))
    assert _ok(f.read(0, len(data[on_ds1]) + 10, timeout=60)) == data[on_ds1]
    _ok(f.close())


def test_a_restart_of_the_whole_cluster_keeps_ports_and_data(cluster: Path):
    server = Testbed(cluster).load()["xrootd"]
    f = client.File()
    _ok(f.open(f"{server.url}//storeval/faults/whole.bin", OpenFlags.NEW | OpenFlags.MAKEPATH))
    _ok(f.write(b"kept across a cluster restart", offset=0))
    _ok(f.close())
    old = state_of(cluster)["procs"]
    r = storeval("testbed", "fault", "xrootd", "restart", "--dir", str(cluster), timeout=600)
    new = state_of(cluster)["procs"]
    assert r.rc == 0 and r.out.strip() == (
        f"SIGKILL to xrootd (pids {', '.join(str(p['pid']) for p in old)}); started xrootd again (pids "
        f"{', '.join(str(p['pid']) for p in new)}) on the same port 1094 with its data"), r.err
    assert [p["name"] for p in new] == [p["name"] for p in old]
    assert not any(alive(p["pid"], p["create_time"]) for p in old) and all(alive(p["pid"], p["create_time"]) for p in new)
    assert storeval("testbed", "status", "--dir", str(cluster)).out.startswith("xrootd: running — ")
    f = client.File()
    _ok(f.open(f"{server.url}//storeval/faults/whole.bin", OpenFlags.READ, timeout=60))
    assert _ok(f.read(0, 100, timeout=60)) == b"kept across a cluster restart"
    _ok(f.close())


def test_cluster_down_leaves_nothing(cluster: Path):
    st = state_of(cluster)
    ns, home = st["info"]["netns"], Path(st["info"]["home"])
    down = storeval("testbed", "down", "--dir", str(cluster), timeout=600)
    assert down.rc == 0 and down.err_lines == ["xrootd: stopped, data removed"], down.err
    assert not any(alive(p["pid"], p["create_time"]) for p in st["procs"]) and _ours(home) == []
    assert ns["name"] not in netns_names() and not link_exists(ns["host_if"])
    assert not home.exists() and not cluster.exists() and not (cluster.parent / "storeval-testbed.yaml").exists()


@pytest.mark.parametrize("moment", ["namespace recorded", "three daemons recorded"])
def test_down_after_a_killed_up_removes_everything(tmp_path: Path, moment: str):
    _installed_or_skip()
    bed = tmp_path / "bed"
    up = subprocess.Popen([sys.executable, "-m", "storeval", "testbed", "up", "xrootd", "--servers", "2", "--dir",
                           str(bed)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def reached():
        try:
            st = state_of(bed)
        except (FileNotFoundError, KeyError, ValueError):
            return None
        ready = "netns" in st["info"] if moment == "namespace recorded" else len(st["procs"]) >= 3
        return st if ready else None

    try:
        st = poll(reached, moment)
    finally:
        up.send_signal(signal.SIGKILL)
        up.wait()
    st = state_of(bed)
    ns, home = st["info"]["netns"], Path(st["info"]["home"])
    down = storeval("testbed", "down", "--dir", str(bed), cwd=tmp_path, timeout=600)
    assert down.rc == 0, down.err
    assert not any(alive(p["pid"], p["create_time"]) for p in st["procs"]) and _ours(home) == []
    assert ns["name"] not in netns_names() and not link_exists(ns["host_if"])
    assert not home.exists() and not bed.exists(), (down.err, sorted(str(p) for p in home.rglob("*")))
