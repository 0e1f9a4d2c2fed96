"""Testbed servers placed on an emulated host: every process inside the host's network namespace, listening on the
host's address, and reached from the root namespace by real clients at that address.

The emulated hosts here are made with :class:`storeval.testbed.netns.Netns` (a namespace and one veth pair: the
host's address inside, reached from the root namespace); ``Server.place(netns, address)`` is what the testbed's
network will call. One host, ``server1``, carries MinIO, MinIO-EC, one XRootD server, Ganesha and HDFS side by
side, like the services of one machine; an XRootD cluster (whose redirector and data servers use XRootD's own
ports) gets a host of its own, ``server2``. Each server is started once (module fixtures) and shared by the tests;
the last tests stop them and check that nothing of them is left while the hosts stay (they are the network's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import urllib.request
from pathlib import Path

import psutil
import pytest
import yaml

from storeval.testbed import server_class
from storeval.testbed.base import Server, ServerState, TestbedError, TestbedOptionError, port_open
from storeval.testbed.netns import Netns

from .helpers import exposed, poll, storeval

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="emulated hosts are network namespaces, which need root")

XRootD = pytest.importorskip("XRootD.client")
hdfs_native = pytest.importorskip("hdfs_native")
nfs_rs = pytest.importorskip("nfs_rs")
pytest.importorskip("obstore")  # the s3 driver's library, for the run through MinIO

MiB = 1 << 20
BOUND = 180.0  # seconds: the generous bound of every wait (a busy machine)
KINDS = ("minio", "minio-ec", "xrootd", "xrootd-cluster", "nfs", "hdfs")
SETTINGS = {"minio": {}, "minio-ec": {"servers": 2}, "xrootd": {}, "xrootd-cluster": {"servers": 2}, "nfs": {},
            "hdfs": {"servers": 2, "replication": 2, "heap": "512m"}}
WILDCARD = ("0.0.0.0", "*", "[::]")


def _kind(name: str) -> str:
    return "xrootd" if name.startswith("xrootd") else name


def _installable(kind: str) -> str | None:
    """Why ``kind`` cannot run here (None: it can)."""
    if kind == "hdfs" and not (shutil.which("java") and shutil.which("mvn")):
        return "the HDFS testbed needs java and mvn"
    try:
        server_class(kind)(Path("/nonexistent")).install()
    except TestbedError as e:
        return f"{kind} cannot be installed here: {e}"
    return None


# ------------------------------------------------------------------------------------------------ hosts, servers
@pytest.fixture(scope="module")
def hosts():
    """Two emulated hosts: server1 (shared by most servers) and server2 (the XRootD cluster)."""
    made: dict[str, Netns] = {}
    try:
        for name in ("server1", "server2"):
            made[name] = Netns.plan()
            made[name].create()
        yield made
    finally:
        for ns in made.values():
            ns.remove()


@pytest.fixture(scope="module")
def servers(hosts, tmp_path_factory):
    """Every placeable kind started once on its host; stopped at the end (again: the last tests stop them)."""
    started: dict[str, Server] = {}
    base = tmp_path_factory.mktemp("placed")
    try:
        for name in KINDS:
            why = _installable(_kind(name))
            if why:
                continue
            host = "server2" if name == "xrootd-cluster" else "server1"
            cls = server_class(_kind(name))
            server = cls(base / name, cls.check_options({**SETTINGS[name], "host": host}))
            server.place(hosts[host].name, hosts[host].ns_addr)
            started[name] = server
            server.start()
            server.wait_ready(timeout=BOUND)
        yield started
    finally:
        errors = []
        for server in started.values():
            try:
                server.stop()
            except TestbedError as e:
                errors.append(str(e))
        assert not errors, errors


def _server(servers: dict[str, Server], name: str) -> Server:
    if name not in servers:
        pytest.skip(_installable(_kind(name)) or f"{name} did not start")
    return servers[name]


def _netns_inode(name: str) -> int:
    return os.stat(f"/run/netns/{name}").st_ino


def _in_netns(pid: int, name: str) -> bool:
    """Whether process ``pid`` lives in network namespace ``name`` (the same nsfs inode)."""
    return os.stat(f"/proc/{pid}/ns/net").st_ino == _netns_inode(name)


def _listeners(netns: str) -> dict[int, dict[int, set[str]]]:
    """pid -> {port: local addresses} of every TCP listener inside ``netns`` (``ss`` run there)."""
    out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Htlnp"], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    found: dict[int, dict[int, set[str]]] = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        addr, _, port = fields[3].rpartition(":")
        for pid in re.findall(r"pid=(\d+)", line):
            found.setdefault(int(pid), {}).setdefault(int(port), set()).add(addr)
    return found


def _expected_listeners(name: str, server: Server) -> dict[int, tuple[str, ...]]:
    """port -> the addresses it may listen on: the host's; 0.0.0.0 *of the namespace* where the daemon cannot bind
    one address (XRootD, Ganesha, HDFS's NameNode: see their module docstrings)."""
    address = server.address
    ports = {int(p): (address,) for p in server.state.ports.values()}
    if _kind(name) == "xrootd":
        ports = {p: ("0.0.0.0",) for p in ports}
    elif name == "nfs":
        ports = {p: (address, *WILDCARD) for p in ports}
    elif name == "hdfs":
        ports[int(server.state.ports["rpc"])] = ("0.0.0.0",)
        ports[int(server.state.ports["http"])] = ("0.0.0.0",)
        ports.update({int(p): (address,) for p in server.state.info["datanode_ports"]})
    return ports


def _check_inside(name: str, server: Server) -> None:
    """Every recorded process inside the host's namespace, none exposed in the root namespace, every port
    listening there on the host's address, and answering at that address from here."""
    placement = server.state.info["placement"]
    pids = [p.pid for p in server.state.procs]
    assert pids and all(p.alive() for p in server.state.procs)
    assert all(_in_netns(pid, placement["netns"]) for pid in pids), name
    assert exposed(pids) == []
    inside = _listeners(placement["netns"])
    by_port: dict[int, set[str]] = {}
    for pid in pids:
        for port, addrs in inside.get(pid, {}).items():
            by_port.setdefault(port, set()).update(addrs)
    for port, allowed in _expected_listeners(name, server).items():
        assert by_port.get(port, set()) & set(allowed), (name, port, by_port)
    # what listens elsewhere than the host's address is inside the namespace only: its loopback or its wildcard
    assert set().union(*by_port.values()) <= {placement["address"], "127.0.0.1", "[::1]", *WILDCARD}, (name, by_port)
    for port in server.state.ports.values():
        assert port_open(int(port), placement["address"]), (name, port)


# ------------------------------------------------------------------------------------------------ the setting
@pytest.mark.parametrize("kind", ["minio", "minio-ec", "xrootd", "nfs", "hdfs"])
def test_placeable_kinds_take_a_host_and_list_it(kind):
    cls = server_class(kind)
    assert "host" in cls.options_help
    assert cls.check_options({"host": "server-1.example"})["host"] == "server-1.example"


@pytest.mark.parametrize("kind", ["glusterfs", "ceph"])
def test_glusterfs_and_ceph_refuse_a_host_naming_the_kinds_that_take_one(kind):
    with pytest.raises(TestbedOptionError) as e:
        server_class(kind).check_options({"host": "server1"})
    assert str(e.value) == (f"testbed {kind}: cannot run on an emulated host (host 'server1'); only minio, minio-ec, "
                            "xrootd, hdfs, nfs can: drop host, or choose one of those")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("bad", ["", " server1", "server1 ", "a\nb", "x" * 65, 7, None, ["server1"]])
def test_a_host_name_must_be_a_short_printable_string(bad):
    with pytest.raises(TestbedOptionError) as e:
        server_class("minio").check_options({"host": bad})
    assert str(e.value).startswith("testbed minio: host must be an emulated host's name, 1-64 printable characters")
    assert "\n" not in str(e.value)


def test_place_checks_its_namespace_and_address(tmp_path, hosts):
    ns = hosts["server1"]
    minio = server_class("minio")(tmp_path / "m", {"host": "server1"})
    with pytest.raises(TestbedError, match=r"network namespace storeval-nothere0 does not exist"):
        minio.place("storeval-nothere0", ns.ns_addr)
    with pytest.raises(TestbedError, match=r"'10\.1\.2' is not an IPv4 address"):
        minio.place(ns.name, "10.1.2")
    with pytest.raises(TestbedError, match=r"is not a network namespace name"):
        minio.place("../etc", ns.ns_addr)
    with pytest.raises(TestbedError, match=r"testbed glusterfs: cannot run on an emulated host"):
        server_class("glusterfs")(tmp_path / "g").place(ns.name, ns.ns_addr)
    assert "placement" not in minio.state.info
    minio.place(ns.name, ns.ns_addr)
    assert minio.state.info["placement"] == {"host": "server1", "netns": ns.name, "address": ns.ns_addr}
    assert minio.address == ns.ns_addr and not tmp_path.joinpath("m").exists()  # nothing made before start


# ------------------------------------------------------------------------------------------------ placed servers
@pytest.mark.parametrize("name", KINDS)
def test_every_process_runs_inside_the_host_on_its_address(servers, hosts, name):
    server = _server(servers, name)
    host = "server2" if name == "xrootd-cluster" else "server1"
    ns = hosts[host]
    assert server.state.info["placement"] == {"host": host, "netns": ns.name, "address": ns.ns_addr}
    assert server.address == ns.ns_addr
    _check_inside(name, server)
    target = next(iter(server.targets().values()))  # the first (XRootD's root://; its davs:// is on the same host)
    for other in server.targets().values():
        assert re.match(rf"\w+://{re.escape(ns.ns_addr)}:\d+", other.get("endpoint") or other["url"]), other
    where = target.get("endpoint") or target["url"]
    assert re.match(rf"\w+://{re.escape(ns.ns_addr)}:\d+", where), where
    for url in target.get("metrics_urls", []):
        assert url.startswith(f"http://{ns.ns_addr}:")
    assert target.get("jmx", [f"{ns.ns_addr}:"])[0].startswith(f"{ns.ns_addr}:")
    assert server.health() == ("running", "")
    assert f" on {ns.ns_addr} (host {host}, network namespace {ns.name})" in server.status()
    if _kind(name) == "xrootd":
        assert server.netns is None  # the host's namespace is used, none of its own is made
    # rebuilt from its saved state (as `testbed status`, `down` and the fault handles do), it finds its host again
    state = ServerState.from_json(json.loads(json.dumps(server.state.to_json())))
    rebuilt = server_class(_kind(name))(server.root, server.options, state)
    assert rebuilt.address == ns.ns_addr and rebuilt.targets() == server.targets()
    assert rebuilt.health() == ("running", "")


def test_storeval_runs_bandwidth_through_every_placed_target(servers, tmp_path):
    """A real run from the root namespace: each target written and read back through the host's address."""
    targets = {}
    for name, server in servers.items():
        for use, target in server.targets().items():  # the placed XRootD also as davs://
            targets[name if use == _kind(name) or len(server.targets()) == 1 else f"{name}-{use}"] = target
    if not targets:
        pytest.skip("no placeable server could run here")
    study = tmp_path / "placed.yaml"
    study.write_text(yaml.safe_dump({"targets": targets}, sort_keys=False))
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--workload", "bandwidth", "--clients", "1", "--set", "file_size=4MiB",
                 "--json", str(out), "--no-html", "-q", "--results", str(tmp_path / "results"), cwd=tmp_path,
                 timeout=900)
    assert r.rc == 0, r.err
    doc = json.loads(out.read_text())
    moved = {}
    for cell in doc["cells"]:
        assert cell["status"] == "ok", (cell["target"], cell.get("error"))
        moved[cell["target"]] = {p["phase"]: p["bytes"] for p in cell["phases"] if p["status"] == "ok"}
    assert moved == {name: {"write": 4 * MiB, "read": 4 * MiB} for name in targets}


def test_xrootd_cluster_redirects_to_the_hosts_address(servers):
    """Written and read through the redirector from the root namespace: the data server it sends the client to is
    at the host's address (not the namespace's loopback, which nothing outside reaches)."""
    from XRootD.client.flags import OpenFlags

    cluster = _server(servers, "xrootd-cluster")
    data = os.urandom(3 * MiB)
    f = XRootD.File()
    status, _ = f.open(f"{cluster.url}//storeval/redirected.bin", OpenFlags.DELETE | OpenFlags.MAKEPATH,
                       timeout=60)
    assert status.ok, status.message
    assert f.write(data, timeout=60)[0].ok and f.close(timeout=60)[0].ok
    f = XRootD.File()
    assert f.open(f"{cluster.url}//storeval/redirected.bin", timeout=60)[0].ok
    status, got = f.read(timeout=60)
    assert status.ok and got == data
    data_servers = {f"{cluster.address}:{cluster.state.ports[node]}" for node in ("ds1", "ds2")}
    assert f.get_property("DataServer") in data_servers
    status, located = XRootD.FileSystem(cluster.url).locate("/storeval/redirected.bin", OpenFlags.REFRESH, timeout=30)
    assert status.ok
    # locate writes an IPv4 address the IPv6 way: [::10.x.y.z]:port
    assert [re.sub(r"^\[::(?:ffff:)?([\d.]+)\]", r"\1", loc.address) for loc in located] == [f.get_property("DataServer")]
    f.close()
    assert XRootD.FileSystem(cluster.url).rm("/storeval/redirected.bin", timeout=60)[0].ok


def test_hdfs_hands_out_the_hosts_address_for_its_datanodes(servers):
    """The NameNode's block locations name the datanodes at the host's address, and hdfs-native in the root
    namespace writes and reads through them."""
    from hdfs_native import WriteOptions

    hdfs = _server(servers, "hdfs")
    client = hdfs.client()
    data = os.urandom(3 * MiB)
    with client.create("/storeval/placed.bin", WriteOptions(block_size=MiB, replication=2)) as w:
        w.write(data)
    with client.read("/storeval/placed.bin") as r:
        assert r.read() == data
    # what the NameNode records for each datanode (and so hands out in block locations): its JMX says
    url = f"http://{hdfs.address}:{hdfs.state.ports['http']}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=60) as resp:
        live = json.loads(json.load(resp)["beans"][0]["LiveNodes"])
    assert {node["xferaddr"] for node in live.values()} == {f"{hdfs.address}:{p}"
                                                            for p in hdfs.state.info["datanode_ports"]}
    assert len(hdfs.blocks("/storeval/placed.bin")) == 3
    client.delete("/storeval/placed.bin")


# ------------------------------------------------------------------------------------------------ fault handles
def _kill(server: Server, index: int) -> None:
    proc = server.state.procs[index]
    os.kill(proc.pid, signal.SIGKILL)
    poll(lambda: not proc.alive(), f"{proc.name} gone after SIGKILL", BOUND)


def _restart(name: str, server: Server) -> list[int]:
    """Kill one node (or the whole server) the way a fault does and start it again through what the fault
    handle's start calls; return the indices of the new processes in ``state.procs``."""
    if name == "minio":
        _kill(server, 0)
        server.respawn([0], timeout=BOUND)
        return [0]
    if name == "minio-ec":
        _kill(server, 1)
        server.start_node("node2", timeout=BOUND)
        return [1]
    if name == "xrootd":
        _kill(server, 0)
        server.respawn(timeout=BOUND)
        return [0]
    if name == "xrootd-cluster":
        _kill(server, 3)  # ds1's xrootd, then its cmsd
        _kill(server, 2)
        server.start_node("ds1", timeout=BOUND)
        return [2, 3]
    if name == "nfs":
        _kill(server, 0)
        server.respawn([0], timeout=BOUND)
        return [0]
    raise AssertionError(name)


@pytest.mark.parametrize("name", ["minio", "minio-ec", "xrootd", "xrootd-cluster", "nfs"])
def test_a_node_started_again_stays_on_the_host(servers, name):
    server = _server(servers, name)
    before = {p.pid for p in server.state.procs}
    again = _restart(name, server)
    assert all(server.state.procs[i].pid not in before for i in again)
    _check_inside(name, server)
    poll(lambda: server.ready(), f"{name} answering again", BOUND, interval=0.5)
    poll(lambda: server.health() == ("running", ""), f"{name} healthy again", BOUND, interval=0.5)


def test_an_hdfs_datanode_started_again_listens_on_the_host(servers):
    """Datanodes are shut down and started inside the JVM (which stays in the namespace): the restarted one takes
    its transfer port on the host's address again, and a read from the root namespace goes through."""
    from hdfs_native import WriteOptions

    hdfs = _server(servers, "hdfs")
    client = hdfs.client()
    with client.create("/storeval/restart.bin", WriteOptions(block_size=MiB, replication=2)) as w:
        w.write(b"r" * MiB)
    port = hdfs.stop_datanode(0)
    assert not port_open(port, hdfs.address)
    hdfs.start_datanode(port)
    assert [d["alive"] for d in hdfs.datanodes()] == [True, True]
    _check_inside("hdfs", hdfs)
    with client.read("/storeval/restart.bin") as r:
        assert r.read() == b"r" * MiB
    client.delete("/storeval/restart.bin")


# ------------------------------------------------------------------------------------------------ stop
@pytest.mark.parametrize("name", KINDS)
def test_stop_leaves_nothing_of_the_server_and_keeps_the_host(servers, hosts, name):
    server = _server(servers, name)
    ns_name = server.state.info["placement"]["netns"]
    pids = [p.pid for p in server.state.procs]
    ports = [int(p) for p in server.state.ports.values()]
    root = server.root
    home = Path(server.state.info["home"]) if "home" in server.state.info else None
    assert server.stop() == []
    assert server.state.procs == []
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE for pid in pids)
    inside = subprocess.run(["ip", "netns", "pids", ns_name], capture_output=True, text=True, timeout=60).stdout
    assert not set(map(int, inside.split())) & set(pids)
    poll(lambda: not any(port_open(p, server.address) for p in ports), f"{name}'s ports closed", BOUND)
    assert not root.exists() and (home is None or not home.exists())
    assert os.path.exists(f"/run/netns/{ns_name}")  # the host is the network's: it stays
    assert server.stop() == []  # again: nothing to do
