"""Testbed fault handles (storeval.testbed.faults, issue 15 item 7), against real servers.

Tests that kill nodes start a testbed of their own (a module fixture per server kind), so the session's shared
servers are never hurt; the session testbed serves only the read-only checks. Every wait follows progress or
readiness with a generous bound (the machine may be busy), never a fixed sleep.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
from pathlib import Path

import psutil
import pytest
import yaml

from storeval.testbed import Testbed
from storeval.testbed.base import TestbedError, cache_dir, port_open
from storeval.testbed.faults import ACTIONS, FaultHandle, act, fault_handles
from storeval.testbed.minio import BUCKET, MINIO_VERSION

from .helpers import poll, storeval

MiB = 1 << 20
BOUND = 180.0  # seconds: the generous bound of every wait below
HDFS_DEAD = 300.0  # seconds for the NameNode to declare a stopped datanode dead (about 20-25 s when idle)

needs_minio = pytest.mark.skipif(
    shutil.which("go") is None and not (cache_dir() / "bin" / f"minio-{MINIO_VERSION}").exists(),
    reason="Go is not installed and no MinIO binary is cached")
needs_xrootd = pytest.mark.skipif(shutil.which("xrootd") is None and os.geteuid() != 0,
                                  reason="xrootd is not installed and cannot be (not root)")
needs_hdfs = pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")), reason="HDFS needs java and mvn")


# ------------------------------------------------------------------------------------------------ helpers


def http_get(port: int, path: str, timeout: float) -> int:
    """The status of ``GET path`` on 127.0.0.1:port; TimeoutError if no answer within ``timeout``."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def minio_live(port: int) -> bool:
    try:
        return http_get(port, "/minio/health/live", 2.0) == 200
    except OSError:
        return False


def xrootd_handshake(host: str, port: int, timeout: float) -> bytes:
    """Send the XRootD handshake (12 zero bytes, 4, 2012) and return the first bytes of the answer; TimeoutError
    when the server takes no notice within ``timeout``."""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(bytes(12) + (4).to_bytes(4, "big") + (2012).to_bytes(4, "big"))
        return s.recv(16)


def status_of(bed: Testbed, kind: str) -> str:
    lines = [line for line in bed.status() if line.startswith(f"{kind}:")]
    assert len(lines) == 1, bed.status()
    return lines[0]


def state_procs(bed: Testbed, kind: str) -> list[dict]:
    """The processes state.json records for ``kind`` (what `testbed down` will stop)."""
    return json.loads(bed.state_file.read_text())["servers"][kind]["procs"]


def is_running(proc: dict) -> bool:
    try:
        p = psutil.Process(proc["pid"])
        return abs(p.create_time() - proc["create_time"]) < 0.5 and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def start_bed(base: Path, kinds: list[str], options: dict | None = None) -> Testbed:
    bed = Testbed(base / "bed", targets_file=base / "storeval-testbed.yaml")
    try:
        bed.up(kinds, options or {}, log=lambda message: None)
    except BaseException:
        bed.down(log=lambda message: None)
        raise
    return bed


def stop_bed(bed: Testbed) -> None:
    """The fixtures' teardown: whatever a test left (SIGCONT goes with SIGTERM, so a frozen node stops too). A
    fresh Testbed reads the state as it is now; a testbed already taken down is nothing to stop."""
    Testbed(bed.dir, targets_file=bed.targets_file).down(log=lambda message: None)


def down_leaves_nothing(bed: Testbed, kind: str) -> None:
    """`testbed down` stops every process the state records now (the restarted ones included) and removes all."""
    procs = state_procs(bed, kind)
    ports = list(json.loads(bed.state_file.read_text())["servers"][kind]["ports"].values())
    assert bed.down(log=lambda message: None) == []
    poll(lambda: not any(is_running(p) for p in procs), "every recorded process gone")
    poll(lambda: not any(port_open(port) for port in ports), "every port closed")
    assert not bed.dir.exists()


# ------------------------------------------------------------------------------- the session's testbed
def test_handles_of_the_session_testbed(testbed):
    handles = fault_handles(testbed.dir)
    servers = testbed.load()
    api, xport = servers["minio"].state.ports["api"], servers["xrootd"].state.ports["xrootd"]
    rpc, dn = servers["hdfs"].state.ports["rpc"], servers["hdfs"].state.info["datanode_ports"][0]
    assert handles == {
        "minio": FaultHandle("minio", "minio", ACTIONS, f"MinIO server, one process (API port {api})"),
        "xrootd": FaultHandle("xrootd", "xrootd", ACTIONS, f"XRootD server (port {xport})"),
        "hdfs": FaultHandle("hdfs", "hdfs", ("stop", "cont", "kill"),
                            f"HDFS MiniDFSCluster JVM: NameNode and 1 datanode (RPC port {rpc})"),
        "hdfs.datanode1": FaultHandle("hdfs.datanode1", "hdfs", ("kill", "start", "restart"),
                                      f"HDFS datanode 1 of 1 (transfer port {dn}), shut down and started inside the JVM"),
    }


def test_unknown_names_and_unsupported_actions_are_one_line_errors(testbed):
    d = testbed.dir
    with pytest.raises(TestbedError) as e:
        act(d, "minio.node1", "kill")
    assert str(e.value) == (f"no fault handle 'minio.node1' in the testbed at {d} "
                            "(known: minio, xrootd, hdfs, hdfs.datanode1)")
    with pytest.raises(TestbedError) as e:
        act(d, "minio", "freeze")
    assert str(e.value) == "minio does not support 'freeze' (supported: stop, cont, kill, start, restart)"
    with pytest.raises(TestbedError) as e:
        act(d, "hdfs.datanode1", "stop")
    assert str(e.value) == ("hdfs.datanode1 does not support 'stop' (supported: kill, start, restart): its datanodes "
                            "run inside one JVM, so one cannot be frozen alone (`hdfs` freezes the whole JVM)")
    with pytest.raises(TestbedError) as e:
        act(d, "hdfs", "restart")
    assert str(e.value) == ("hdfs does not support 'restart' (supported: stop, cont, kill): the launcher formats a new "
                            "namespace when it starts, so a killed HDFS cannot come back with its data: "
                            "`storeval testbed down hdfs`, then `storeval testbed up hdfs`")
    # starting what runs is an error; continuing what is not stopped is harmless
    pid = testbed.load()["xrootd"].state.procs[0].pid
    with pytest.raises(TestbedError) as e:
        act(d, "xrootd", "start")
    assert str(e.value) == ("xrootd: xrootd is running: nothing to start (`storeval testbed fault xrootd restart` "
                            "kills it and starts it again)")
    with pytest.raises(TestbedError) as e:
        act(d, "hdfs.datanode1", "start")
    assert str(e.value) == ("hdfs.datanode1: HDFS datanode 1 is running: nothing to start (`storeval testbed fault "
                            "hdfs.datanode1 restart` shuts it down and starts it again)")
    assert act(d, "xrootd", "cont") == "xrootd was not stopped: nothing to continue"
    assert testbed.load()["xrootd"].state.procs[0].pid == pid


def test_no_testbed_is_one_line_naming_the_fix(tmp_path):
    with pytest.raises(TestbedError) as e:
        fault_handles(tmp_path / "nothing")
    assert str(e.value) == (f"no testbed in {tmp_path / 'nothing'}: start one with `storeval testbed up --dir "
                            f"{tmp_path / 'nothing'}` (or give the --dir of a running one)")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "state.json").write_text("{}")
    with pytest.raises(TestbedError, match="is not a storeval testbed directory"):
        act(tmp_path / "mine", "minio", "kill")


# ---------------------------------------------------------------------------------------- MinIO-EC
@pytest.fixture(scope="module")
def ec_bed(tmp_path_factory):
    bed = start_bed(tmp_path_factory.mktemp("faults-minio-ec"), ["minio-ec"])
    try:
        yield bed
    finally:
        stop_bed(bed)


def ec_store(bed: Testbed, node: int = 1):
    from obstore.store import S3Store

    server = bed.load()["minio-ec"]
    access, secret = server.credentials()
    return S3Store(BUCKET, endpoint=server.state.info["nodes"][node - 1]["endpoint"], region="us-east-1",
                   access_key_id=access, secret_access_key=secret, virtual_hosted_style_request=False,
                   client_options={"allow_http": True, "timeout": "60s"})


@needs_minio
def test_minio_ec_kill_and_start_a_node(ec_bed):
    import obstore

    d = ec_bed.dir
    nodes = ec_bed.load()["minio-ec"].state.info["nodes"]
    ports = [n["port"] for n in nodes]
    data = os.urandom(3 * MiB + 17)
    obstore.put(ec_store(ec_bed), "testbed/faults/before-kill.bin", data)
    old = ec_bed.load()["minio-ec"].state.procs[1]

    assert act(d, "minio-ec.node2", "kill") == f"SIGKILL to minio-ec node 2 (pid {old.pid})"
    assert not old.alive()
    assert not port_open(ports[1])
    assert [minio_live(p) for p in ports] == [True, False, True, True]
    line = status_of(ec_bed, "minio-ec")
    assert line.startswith("minio-ec: DOWN — ") and f"minio node2 pid {old.pid} DOWN (exited)" in line
    assert line.endswith("`storeval testbed fault NAME start` starts it again with its data (NAME: minio-ec.node2), "
                         "`storeval testbed up minio-ec` starts it afresh, `storeval testbed down minio-ec` removes its data")
    with pytest.raises(TestbedError) as e:
        act(d, "minio-ec.node2", "kill")
    assert str(e.value) == ("minio-ec.node2: minio-ec node 2 is DOWN (not running): nothing to kill; "
                            "`storeval testbed fault minio-ec.node2 start` starts it again")
    assert bytes(obstore.get(ec_store(ec_bed, 3), "testbed/faults/before-kill.bin").bytes()) == data  # EC:2

    said = act(d, "minio-ec.node2", "start")
    new = ec_bed.load()["minio-ec"].state.procs[1]  # state.json records the new process, in node 2's slot
    assert said == f"started minio-ec node 2 again (pid {new.pid}) on the same port {ports[1]} with its data"
    assert new.pid != old.pid and new.alive() and is_running(state_procs(ec_bed, "minio-ec")[1])
    assert ec_bed.load()["minio-ec"].state.info["nodes"] == nodes
    assert all(minio_live(p) for p in ports)
    assert bytes(obstore.get(ec_store(ec_bed, 2), "testbed/faults/before-kill.bin").bytes()) == data
    assert status_of(ec_bed, "minio-ec").startswith("minio-ec: running — ")
    # the targets file names the new process
    assert new.pid in yaml.safe_load(ec_bed.targets_file.read_text())["targets"]["minio-ec"]["server_pids"]


@needs_minio
def test_minio_ec_stop_and_cont_a_node(ec_bed):
    d = ec_bed.dir
    proc = ec_bed.load()["minio-ec"].state.procs[2]
    port = ec_bed.load()["minio-ec"].state.info["nodes"][2]["port"]
    assert act(d, "minio-ec.node3", "stop") == f"SIGSTOP to minio-ec node 3 (pid {proc.pid})"
    try:
        assert port_open(port)  # the kernel still accepts connections ...
        with pytest.raises(TimeoutError):  # ... but nobody answers them
            http_get(port, "/minio/health/live", 1.0)
        assert minio_live(ec_bed.load()["minio-ec"].state.info["nodes"][0]["port"])
        line = status_of(ec_bed, "minio-ec")
        assert line.startswith("minio-ec: FROZEN — ") and f"minio node3 pid {proc.pid} stopped (SIGSTOP)" in line
        assert line.endswith(f"`kill -CONT {proc.pid}` resumes it")
        assert act(d, "minio-ec.node3", "stop") == "minio-ec node 3 was stopped already (SIGSTOP): nothing to do"
    finally:
        said = act(d, "minio-ec.node3", "cont")
    assert said == f"SIGCONT to minio-ec node 3 (pid {proc.pid})"
    poll(lambda: minio_live(port), "node 3 answering after SIGCONT")
    assert act(d, "minio-ec.node3", "cont") == "minio-ec node 3 was not stopped: nothing to continue"
    assert ec_bed.load()["minio-ec"].state.procs[2] == proc
    assert status_of(ec_bed, "minio-ec").startswith("minio-ec: running — ")


@needs_minio
def test_minio_ec_restart_of_the_whole_cluster_keeps_ports_and_data(ec_bed):
    import obstore

    d = ec_bed.dir
    before = ec_bed.load()["minio-ec"]
    ports = [n["port"] for n in before.state.info["nodes"]]
    obstore.put(ec_store(ec_bed), "testbed/faults/before-restart.bin", b"kept across a cluster restart")
    said = act(d, "minio-ec", "restart")
    after = ec_bed.load()["minio-ec"].state.procs
    assert said == (f"SIGKILL to all 4 minio-ec nodes (pids {', '.join(str(p.pid) for p in before.state.procs)}); "
                    f"started all 4 minio-ec nodes again (pids {', '.join(str(p.pid) for p in after)}) on the same "
                    f"ports {', '.join(map(str, ports))} with its data")
    assert not any(p.alive() for p in before.state.procs) and all(p.alive() for p in after)
    assert all(minio_live(p) for p in ports)
    assert bytes(obstore.get(ec_store(ec_bed, 4), "testbed/faults/before-restart.bin").bytes()) == \
        b"kept across a cluster restart"


@needs_minio
def test_cli_lists_handles_and_acts(ec_bed):
    d = str(ec_bed.dir)
    server = ec_bed.load()["minio-ec"]
    ports = [n["port"] for n in server.state.info["nodes"]]
    r = storeval("testbed", "faults", "--dir", d)
    assert r.rc == 0, r.err
    assert r.out.splitlines() == [
        f"minio-ec        stop,cont,kill,start,restart  MinIO erasure-coded cluster, all 4 nodes (API ports "
        f"{', '.join(map(str, ports))})",
        *(f"minio-ec.node{i}  stop,cont,kill,start,restart  MinIO-EC node {i} of 4 (API port {ports[i - 1]})"
          for i in range(1, 5))]
    old = server.state.procs[3]
    r = storeval("testbed", "fault", "minio-ec.node4", "restart", "--dir", d)
    new = ec_bed.load()["minio-ec"].state.procs[3]
    assert r.rc == 0 and r.out.strip() == (f"SIGKILL to minio-ec node 4 (pid {old.pid}); started minio-ec node 4 "
                                           f"again (pid {new.pid}) on the same port {ports[3]} with its data"), r.err
    r = storeval("testbed", "fault", "minio-ec.node4", "stop", "--dir", d)
    try:
        assert r.rc == 0 and r.out.strip() == f"SIGSTOP to minio-ec node 4 (pid {new.pid})", r.err
        status = storeval("testbed", "status", "--dir", d)
        assert status.rc == 0 and status.out.startswith("minio-ec: FROZEN — ") and \
            f"minio node4 pid {new.pid} stopped (SIGSTOP)" in status.out
    finally:
        r = storeval("testbed", "fault", "minio-ec.node4", "cont", "--dir", d)
    assert r.rc == 0 and r.out.strip() == f"SIGCONT to minio-ec node 4 (pid {new.pid})", r.err
    r = storeval("testbed", "fault", "minio-ec.node5", "kill", "--dir", d)
    assert r.rc == 1 and " ".join(r.err.split()) == (
        f"error: no fault handle 'minio-ec.node5' in the testbed at {d} (known: minio-ec, minio-ec.node1, "
        "minio-ec.node2, minio-ec.node3, minio-ec.node4)")
    r = storeval("testbed", "fault", "minio-ec.node1", "pause", "--dir", d)
    assert r.rc == 1 and " ".join(r.err.split()) == (
        "error: minio-ec.node1 does not support 'pause' (supported: stop, cont, kill, start, restart)")


@needs_minio
def test_minio_ec_down_stops_the_restarted_nodes(ec_bed):
    act(ec_bed.dir, "minio-ec.node1", "kill")  # down also copes with a node a fault left dead
    down_leaves_nothing(ec_bed, "minio-ec")


# ------------------------------------------------------------------------------------------ XRootD
@pytest.fixture(scope="module")
def xrootd_bed(tmp_path_factory):
    bed = start_bed(tmp_path_factory.mktemp("faults-xrootd"), ["xrootd"])
    try:
        yield bed
    finally:
        stop_bed(bed)


@needs_xrootd
def test_xrootd_kill_and_start_on_the_same_port_with_the_file(xrootd_bed):
    from XRootD import client
    from XRootD.client.flags import OpenFlags

    d = xrootd_bed.dir
    server = xrootd_bed.load()["xrootd"]
    port, old = server.port, server.state.procs[0]
    data = os.urandom(MiB + 3)
    f = client.File()
    assert f.open(f"{server.url}//storeval/faults/f.bin", OpenFlags.NEW | OpenFlags.WRITE | OpenFlags.MAKEPATH)[0].ok
    assert f.write(data, offset=0)[0].ok and f.close()[0].ok

    assert act(d, "xrootd", "kill") == f"SIGKILL to xrootd (pid {old.pid})"
    assert not old.alive() and not port_open(port, server.address)  # in its network namespace
    line = status_of(xrootd_bed, "xrootd")
    assert line.startswith("xrootd: DOWN — ") and "(NAME: xrootd)" in line

    said = act(d, "xrootd", "start")
    new = xrootd_bed.load()["xrootd"].state.procs[0]
    assert said == f"started xrootd again (pid {new.pid}) on the same port {port} with its data"
    assert new.pid != old.pid and is_running(state_procs(xrootd_bed, "xrootd")[0])
    assert xrootd_bed.load()["xrootd"].port == port and port_open(port, server.address)
    f = client.File()
    assert f.open(f"{server.url}//storeval/faults/f.bin", OpenFlags.READ)[0].ok
    status, got = f.read(0, len(data) + 10)
    assert status.ok and got == data
    f.close()
    assert status_of(xrootd_bed, "xrootd").startswith("xrootd: running — ")


@needs_xrootd
def test_xrootd_stop_and_cont(xrootd_bed):
    d = xrootd_bed.dir
    server = xrootd_bed.load()["xrootd"]
    assert len(xrootd_handshake(server.address, server.port, 10.0)) > 0  # it answers now
    assert act(d, "xrootd", "stop") == f"SIGSTOP to xrootd (pid {server.state.procs[0].pid})"
    try:
        with pytest.raises(TimeoutError):
            xrootd_handshake(server.address, server.port, 1.0)
        assert status_of(xrootd_bed, "xrootd").startswith("xrootd: FROZEN — ")
    finally:
        assert act(d, "xrootd", "cont") == f"SIGCONT to xrootd (pid {server.state.procs[0].pid})"

    def answers() -> bool:
        try:
            return len(xrootd_handshake(server.address, server.port, 5.0)) > 0
        except OSError:
            return False

    poll(answers, "xrootd answering after SIGCONT")


@needs_xrootd
def test_xrootd_down_after_faults(xrootd_bed):
    assert act(xrootd_bed.dir, "xrootd", "restart").startswith("SIGKILL to xrootd (pid ")
    down_leaves_nothing(xrootd_bed, "xrootd")


# -------------------------------------------------------------------------------------------- HDFS
@pytest.fixture(scope="module")
def hdfs_bed(tmp_path_factory):
    bed = start_bed(tmp_path_factory.mktemp("faults-hdfs"), ["hdfs"], {"hdfs": {"datanodes": 3, "replication": 2}})
    try:
        yield bed
    finally:
        stop_bed(bed)


def live_datanodes(server) -> int:
    """What the NameNode itself counts as live datanodes (its FSNamesystemState MBean)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.state.ports["http"], timeout=10)
    try:
        conn.request("GET", "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystemState")
        return int(json.loads(conn.getresponse().read())["beans"][0]["NumLiveDataNodes"])
    finally:
        conn.close()


@needs_hdfs
def test_hdfs_datanode_kill_and_start(hdfs_bed):
    pytest.importorskip("hdfs_native")
    d = hdfs_bed.dir
    server = hdfs_bed.load()["hdfs"]
    jvm = server.state.procs[0]
    port = server.state.info["datanode_ports"][1]
    data = os.urandom(2 * MiB + 5)
    with server.client().create("/storeval/faults/f.bin") as w:
        w.write(data)
    assert live_datanodes(server) == 3

    assert act(d, "hdfs.datanode2", "kill") == (f"shut down HDFS datanode 2 (transfer port {port}) inside the JVM "
                                                f"(pid {jvm.pid})")
    assert [dn["alive"] for dn in server.datanodes()] == [True, False, True]
    assert jvm.condition() == "up" and hdfs_bed.load()["hdfs"].state.procs == [jvm]
    line = status_of(hdfs_bed, "hdfs")
    assert "; datanodes 2 of 3 alive, replication" in line  # what is true now, not what was started
    assert line.startswith("hdfs: DOWN — ") and line.endswith(
        f"datanode2 (transfer port {port}) DOWN (stopped inside the JVM): `storeval testbed fault NAME start` starts "
        "it again (NAME: hdfs.datanode2)")
    poll(lambda: live_datanodes(server) == 2, "the NameNode counting 2 live datanodes", HDFS_DEAD)
    with server.client().read("/storeval/faults/f.bin") as r:  # replication 2: one replica is left at least
        assert r.read() == data
    with pytest.raises(TestbedError) as e:
        act(d, "hdfs.datanode2", "kill")
    assert str(e.value) == ("hdfs.datanode2: HDFS datanode 2 is DOWN already: nothing to kill; "
                            "`storeval testbed fault hdfs.datanode2 start` starts it again")

    assert act(d, "hdfs.datanode2", "start") == (f"started HDFS datanode 2 again on transfer port {port} with its "
                                                 f"data (JVM pid {jvm.pid})")
    assert [dn["alive"] for dn in server.datanodes()] == [True, True, True]
    poll(lambda: live_datanodes(server) == 3, "the NameNode counting 3 live datanodes again")
    assert status_of(hdfs_bed, "hdfs").startswith("hdfs: running — ")
    with server.client().read("/storeval/faults/f.bin") as r:
        assert r.read() == data


@needs_hdfs
def test_hdfs_jvm_stop_cont_and_kill(hdfs_bed):
    d = hdfs_bed.dir
    server = hdfs_bed.load()["hdfs"]
    jvm = server.state.procs[0]
    assert server.control("ping", timeout=30).startswith("OK")
    assert act(d, "hdfs", "stop") == f"SIGSTOP to the HDFS JVM (pid {jvm.pid})"
    try:
        with pytest.raises(TestbedError, match="did not answer 'ping'"):
            server.control("ping", timeout=1.0)
        assert status_of(hdfs_bed, "hdfs").startswith("hdfs: FROZEN — ")
        with pytest.raises(TestbedError) as e:
            act(d, "hdfs.datanode1", "kill")
        assert str(e.value) == (f"hdfs.datanode1: the HDFS JVM (pid {jvm.pid}) is frozen (SIGSTOP), its control port "
                                "cannot answer: `storeval testbed fault hdfs cont` first")
    finally:
        said = act(d, "hdfs", "cont")
    assert said == f"SIGCONT to the HDFS JVM (pid {jvm.pid})"
    poll(lambda: server.control("ping", timeout=30).startswith("OK"), "the launcher answering after SIGCONT")

    assert act(d, "hdfs", "kill") == f"SIGKILL to the HDFS JVM (pid {jvm.pid})"
    assert not any(port_open(p) for p in server.state.ports.values())
    assert status_of(hdfs_bed, "hdfs").startswith("hdfs: DOWN — ")
    with pytest.raises(TestbedError) as e:
        act(d, "hdfs.datanode1", "restart")
    assert str(e.value) == (f"hdfs.datanode1: the HDFS JVM (pid {jvm.pid}) is not running, its datanodes are gone "
                            "with it: `storeval testbed down hdfs`, then `storeval testbed up hdfs`")
    down_leaves_nothing(hdfs_bed, "hdfs")
