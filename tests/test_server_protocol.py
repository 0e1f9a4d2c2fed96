"""The testbed servers' fault protocol and the server-counter sources (issue 31): every kind answers the same
methods with the same signatures, and the fault handles and the server probe never ask what kind a thing is."""

from __future__ import annotations

import ast
import inspect
import socket
from pathlib import Path

import pytest

import storeval.probes.server as probe_server
import storeval.testbed.faults as faults
from storeval.core.reported import CounterSource, source_class
from storeval.drivers import DRIVERS, driver_class
from storeval.probes.server import ServerProbe, server_spec
from storeval.testbed import SERVERS, server_class
from storeval.testbed import base
from storeval.testbed.base import (FAULT_ACTIONS, SIGNAL_ACTIONS, FaultNode, Proc, Server, ServerState, TestbedError,
                                   pick_ports)

PROTOCOL = ("fault_server", "fault_nodes", "respawn", "start_node", "act_on_node", "fault_names", "server_counters",
            "pick_port", "pick_ports")
KIND_WORDS = sorted({*SERVERS, *(k.split("-")[0] for k in SERVERS), "gluster", "datanode", "jmx", "prometheus"})


def _shape(fn) -> list[tuple[str, object, object]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("kind", list(SERVERS))
def test_every_kind_has_the_fault_protocol_with_the_base_signatures(kind):
    cls = server_class(kind)
    assert issubclass(cls, Server)
    for name in PROTOCOL:
        assert _shape(getattr(cls, name)) == _shape(getattr(Server, name)), (kind, name)
    server = cls(Path("/nonexistent/protocol-check"), {})
    assert server.respawns == (cls.respawn is not Server.respawn)
    assert server.fault_server().actions == (FAULT_ACTIONS if server.respawns else SIGNAL_ACTIONS)


def _code_words(path: Path) -> list[str]:
    """Every identifier and string constant of a module's code: docstrings and comments left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    words = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            words.append(node.value)
        elif isinstance(node, ast.Name):
            words.append(node.id)
        elif isinstance(node, ast.Attribute):
            words.append(node.attr)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            words.append(node.name)
        elif isinstance(node, ast.alias):
            words.extend([node.name, node.asname or ""])
        elif isinstance(node, ast.ImportFrom):
            words.append(node.module or "")
        elif isinstance(node, ast.arg):
            words.append(node.arg)
    return words


ROOT = Path(probe_server.__file__).parents[1]
# the core never asks what kind a thing is: no server or driver kind named in its code (strings included). Left
# out: probes/topology.py, whose names are the kernel's file-system types of a mount (ceph, fuse.glusterfs), and
# core/faultplan.py, whose one-line error gives a handle as an example (hdfs.datanode1)
KINDLESS = sorted({ROOT / "testbed/faults.py", ROOT / "faults.py", ROOT / "engine/watchdog.py",
                   *(ROOT / "probes").glob("*.py"), *(ROOT / "core").glob("*.py")}
                  - {ROOT / "probes/topology.py", ROOT / "core/faultplan.py"})


@pytest.mark.parametrize("path", KINDLESS, ids=[str(p.relative_to(ROOT)) for p in KINDLESS])
def test_the_core_the_fault_handles_the_probes_and_the_watchdog_name_no_kind(path):
    found = {(w, word) for w in _code_words(path) for word in KIND_WORDS if word in w.lower()}
    assert not found, sorted(found)


# ------------------------------------------------------------------------------------------------ fault handles
def _dead(n: int) -> list[Proc]:
    return [Proc(pid=999_999_999 - i, create_time=0.0, name=f"p{i}", log="/dev/null") for i in range(n)]


def _server(kind: str, tmp_path: Path, procs: int, ports: dict, info: dict, options: dict | None = None) -> Server:
    state = ServerState(kind=kind, root=str(tmp_path / kind), procs=_dead(procs), ports=ports, info=info)
    return server_class(kind)(tmp_path / kind, options or {}, state)


def _handles(servers: dict[str, Server]) -> dict[str, tuple]:
    return {name: (t.handle.kind, t.handle.actions, t.handle.description, t.label, t.procs, t.ports)
            for name, t in faults._targets(servers).items()}


def test_each_kind_describes_its_own_handles_as_the_fault_vocabulary_always_named_them(tmp_path):
    nodes = [{"port": 30001 + 2 * i, "console_port": 30002 + 2 * i, "proc": i, "log": "/dev/null"} for i in range(3)]
    servers = {
        "minio": _server("minio", tmp_path, 1, {"api": 21000, "console": 21001}, {}),
        "minio-ec": _server("minio-ec", tmp_path, 3, {}, {"nodes": nodes, "node_count": 3}),
        "xrootd": _server("xrootd", tmp_path, 1, {"xrootd": 1094}, {}),
        "hdfs": _server("hdfs", tmp_path, 1, {"rpc": 22000, "http": 22001, "control": 22002},
                        {"datanode_ports": [23001, 23002]}),
        "nfs": _server("nfs", tmp_path, 1, {"nfs": 2049}, {}),
    }
    every, signals = FAULT_ACTIONS, SIGNAL_ACTIONS
    assert _handles(servers) == {
        "minio": ("minio", every, "MinIO server, one process (API port 21000)", "minio", [0], [21000]),
        "minio-ec": ("minio-ec", every, "MinIO erasure-coded cluster, all 3 nodes (API ports 30001, 30003, 30005)",
                     "all 3 minio-ec nodes", [0, 1, 2], [30001, 30003, 30005]),
        "minio-ec.node1": ("minio-ec", every, "MinIO-EC node 1 of 3 (API port 30001)", "minio-ec node 1", [0], [30001]),
        "minio-ec.node2": ("minio-ec", every, "MinIO-EC node 2 of 3 (API port 30003)", "minio-ec node 2", [1], [30003]),
        "minio-ec.node3": ("minio-ec", every, "MinIO-EC node 3 of 3 (API port 30005)", "minio-ec node 3", [2], [30005]),
        "xrootd": ("xrootd", every, "XRootD server (port 1094)", "xrootd", [0], [1094]),
        "hdfs": ("hdfs", signals, "HDFS MiniDFSCluster JVM: NameNode and 2 datanodes (RPC port 22000)", "the HDFS JVM",
                 [0], [22000, 22001, 22002]),
        "hdfs.datanode1": ("hdfs", ("kill", "start", "restart"), "HDFS datanode 1 of 2 (transfer port 23001), shut "
                           "down and started inside the JVM", "HDFS datanode 1", [], [23001]),
        "hdfs.datanode2": ("hdfs", ("kill", "start", "restart"), "HDFS datanode 2 of 2 (transfer port 23002), shut "
                           "down and started inside the JVM", "HDFS datanode 2", [], [23002]),
        "nfs": ("nfs", every, "nfs testbed server (1 process)", "nfs", [0], [2049]),
    }
    targets = faults._targets(servers)
    assert targets["hdfs.datanode1"].inside and not targets["minio-ec.node1"].inside
    assert targets["minio-ec.node2"].node == "node2" and targets["minio"].node is None

    class Bed:
        dir = tmp_path

    with pytest.raises(TestbedError) as e:
        faults._resolve(targets, Bed, "hdfs", "start")
    assert str(e.value) == ("hdfs does not support 'start' (supported: stop, cont, kill): the launcher formats a new "
                            "namespace when it starts, so a killed HDFS cannot come back with its data: `storeval "
                            "testbed down hdfs`, then `storeval testbed up hdfs`")
    with pytest.raises(TestbedError) as e:
        faults._resolve(targets, Bed, "hdfs.datanode2", "stop")
    assert str(e.value) == ("hdfs.datanode2 does not support 'stop' (supported: kill, start, restart): its datanodes "
                            "run inside one JVM, so one cannot be frozen alone (`hdfs` freezes the whole JVM)")
    # a datanode is the server's to act on: with its JVM gone, the server says so in one line
    with pytest.raises(TestbedError) as e:
        servers["hdfs"].act_on_node("datanode1", "kill")
    assert str(e.value) == (f"hdfs.datanode1: the HDFS JVM (pid {servers['hdfs'].state.procs[0].pid}) is not running, "
                            "its datanodes are gone with it: `storeval testbed down hdfs`, then `storeval testbed up hdfs`")


def test_a_kind_that_cannot_respawn_says_so_and_offers_signals_only(tmp_path):
    gluster = _server("glusterfs", tmp_path, 2, {}, {})
    assert not gluster.respawns
    whole = gluster.fault_server()
    assert (whole.name, whole.actions, whole.why_not, whole.procs) == ("glusterfs", SIGNAL_ACTIONS, {}, [0, 1])
    with pytest.raises(TestbedError) as e:
        gluster.respawn([0])
    assert str(e.value) == ("glusterfs: a killed glusterfs cannot be started again with its data: `storeval testbed "
                            "down glusterfs`, then `storeval testbed up glusterfs`")
    with pytest.raises(TestbedError, match=r"^minio-ec: no node ds1 \(node1\.\.node3\)$"):
        _server("minio-ec", tmp_path, 3, {}, {"nodes": [], "node_count": 3}).start_node("ds1")


def test_fault_nodes_default_their_label_to_kind_and_name(tmp_path):
    node = FaultNode("osd2", "Ceph OSD 2 of 3", [4])
    target = faults._target("ceph", _server("ceph", tmp_path, 5, {}, {}), node, node=True)
    assert (target.handle.name, target.label, target.node, target.handle.actions) == \
        ("ceph.osd2", "ceph osd2", "osd2", FAULT_ACTIONS)


# ------------------------------------------------------------------------------------------------ ports, registry
def test_pick_ports_gives_distinct_ports_free_on_loopback_at_once():
    ports = pick_ports(5)
    assert len(set(ports)) == 5
    held = []
    try:
        for port in ports:  # each is bindable now, all together
            s = socket.socket()
            held.append(s)
            s.bind(("127.0.0.1", port))
    finally:
        for s in held:
            s.close()


def test_placeable_kinds_come_from_the_registry_it_is_handed(monkeypatch):
    monkeypatch.setattr(base, "_registered", tuple)
    assert base.placeable_kinds() == []
    base.use_registry(lambda: [server_class(k) for k in SERVERS])
    assert base.placeable_kinds() == ["minio", "minio-ec", "xrootd", "hdfs", "nfs"]


# ------------------------------------------------------------------------------------------------ counter sources
SOURCES = ("storeval.drivers.s3metrics:MinioMetrics", "storeval.drivers.hdfsjmx:DatanodeJmx",
           "storeval.drivers.xcachestats:XcacheRecords")


def test_every_counter_source_is_its_driver_s_and_declares_its_option_probe_and_name():
    declared = {scheme: driver_class(f"{scheme}://").counter_sources for scheme in DRIVERS}
    assert {k: v for k, v in declared.items() if v} == {"s3": (SOURCES[0],), "hdfs": (SOURCES[1],),
                                                        "root": (SOURCES[2],)}
    classes = [source_class(path) for path in SOURCES]
    assert [(s.option, s.probe, s.name) for s in classes] == [("metrics_urls", "server_minio", "minio metrics"),
                                                             ("jmx", "server_jmx", "datanode jmx"),
                                                             ("cache_dir", "server_xcache", "xcache records")]
    assert all(issubclass(s, CounterSource) for s in classes)
    with pytest.raises(TypeError, match="is not a CounterSource"):
        source_class("storeval.drivers.s3:S3Driver")


def test_the_probe_reads_each_source_a_target_names_and_records_why_one_failed(tmp_path):
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = protocolkey\naws_secret_access_key = protocolsecret\n")
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()
    url = f"http://127.0.0.1:{port}/minio/metrics/v3/api/requests"
    options = {"metrics_urls": [url], "credentials_file": str(creds), "jmx": [f"127.0.0.1:{port}"],
               "jmx_period": 0.01, "timeout": 2, "server_pids": [1]}
    spec = server_spec(options, SOURCES)
    assert spec["reported"] == {"server_minio": {"where": [url], "credentials": {"credentials_file": str(creds)},
                                                 "source": SOURCES[0]},
                                "server_jmx": {"where": [f"127.0.0.1:{port}"], "period": 0.01, "source": SOURCES[1]}}
    assert "reported" not in server_spec(options)  # a driver that names no source: only the processes
    assert "protocolsecret" not in repr(spec)
    probe = ServerProbe(spec)
    assert [s.name for s in probe.sources] == ["minio metrics", "datanode jmx"]
    assert probe.sources[0].keys == ("protocolkey", "protocolsecret")
    snap = probe.snapshot()
    assert sorted(snap["server_error"]) == [
        f"datanode jmx failed: http://127.0.0.1:{port}/jmx?qry=Hadoop:service=DataNode,name=DataNodeActivity-*: "
        "Connection refused",
        f"minio metrics failed: {url}: Connection refused"]
    assert server_spec({"url": "file:///x"}) == {}


def test_an_xcache_snapshot_waits_while_the_cache_holds_a_file_open_and_the_records_stand_still(tmp_path):
    """XrdPfc writes a file's access record only when it lets the file go, seconds after its client closed it on
    a busy host: a reading waits while a cache process (here: this one) holds a file under the cache open."""
    import os
    import threading
    import time

    from storeval.drivers.xcachestats import XcacheRecords

    root = tmp_path / "cache"
    (root / "store").mkdir(parents=True)
    spec = XcacheRecords.spec({"cache_dir": str(root), "server_pids": [os.getpid()], "origin_pids": []})
    assert spec == {"where": [str(root)], "origin_pids": [], "cache_pids": [os.getpid()]}
    source = XcacheRecords(spec, timeout=30.0)
    assert not source.pending()
    held = open(root / "store" / "file.root", "wb")  # noqa: SIM115 - held open across the reading on purpose
    assert source.pending()
    released = []
    threading.Timer(1.0, lambda: (held.close(), released.append(time.monotonic()))).start()
    source.fetch = lambda: {"cache": {"hit_bytes": 0.0, "miss_bytes": 0.0, "bypass_bytes": 0.0}}
    probe = ServerProbe({"timeout": 30})
    snap: dict = {}
    probe._settled(source.probe, source.name, source.fetch, snap, 0.2, source.pending)
    assert released and time.monotonic() > released[0] and snap == {"server_xcache": source.fetch()}
    assert not source.pending()
    # a record that never comes: the reading fails, saying so, after its timeout
    with open(root / "store" / "other", "wb"):
        probe = ServerProbe({"timeout": 0.3})
        probe._settled(source.probe, source.name, source.fetch, snap := {}, 0.0, source.pending)
    (why,) = snap["server_error"]
    assert why.startswith("xcache records failed: a record still pending after "), why
