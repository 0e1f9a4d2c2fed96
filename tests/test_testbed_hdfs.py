"""The HDFS testbed server: a real MiniDFSCluster on 127.0.0.1, driven through the hdfs-native client.

Needs java and mvn (skipped otherwise); the first run builds the launcher into the storeval cache
(about 25 s, 135 MB of Maven downloads), later runs start a 3-datanode cluster in about 5 s.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import psutil
import pytest

from storeval.testbed import server_class
from storeval.testbed.base import ServerState, TestbedError, cache_dir, port_open

pytestmark = pytest.mark.skipif(not (shutil.which("java") and shutil.which("mvn")),
                                reason="the HDFS testbed needs java and mvn")

hdfs_native = pytest.importorskip("hdfs_native")
from hdfs_native import WriteOptions  # noqa: E402

from storeval.testbed import hdfs as hdfs_mod  # noqa: E402
from storeval.testbed.hdfs import HdfsServer  # noqa: E402

MiB = 2**20
REPO = Path(__file__).resolve().parents[1]


def _listening(pid: int) -> list[tuple[str, int]]:
    """Addresses the process listens on (TCP)."""
    conns = psutil.Process(pid).net_connections(kind="tcp")
    return [(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN]


def _all_ports(server: HdfsServer) -> list[int]:
    return [*server.state.ports.values(), *server.state.info.get("datanode_ports", [])]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    server = HdfsServer(tmp_path_factory.mktemp("hdfs") / "hdfs", {"datanodes": 3, "replication": 2})
    server.install()
    server.start()
    try:
        server.wait_ready(timeout=120)
    except BaseException:
        server.stop()
        raise
    yield server
    server.stop()


@pytest.fixture
def client(cluster):
    return cluster.client()


def test_install_is_cached_outside_the_repository(cluster):
    build = hdfs_mod.build_dir()
    assert (build / "launcher.args").is_file()
    assert build.is_relative_to(cache_dir())
    assert not (REPO / "storeval" / "testbed" / "java" / "target").exists()
    # a second install is a no-op
    cluster.install()
    assert hdfs_mod.build_dir() == build


def test_state_ports_and_targets(cluster):
    st = cluster.state
    assert set(st.ports) == {"rpc", "http", "control"}
    assert st.info["datanodes"] == 3 and st.info["replication"] == 2
    assert cluster.targets() == {"hdfs": {"url": f"hdfs://127.0.0.1:{st.ports['rpc']}/storeval", "replication": 2,
                                          "server_pids": [p.pid for p in st.procs],
                                          "jmx": [f"127.0.0.1:{st.ports['http']}"], "jmx_period": 1.0}}
    assert cluster.alive()
    assert "datanodes 3 of 3 alive, replication 2" in cluster.status()
    dns = cluster.datanodes()
    assert [d["index"] for d in dns] == [0, 1, 2]
    assert all(d["alive"] for d in dns)
    assert [d["port"] for d in dns] == st.info["datanode_ports"]
    # everything the JVM listens on is bound to loopback
    listening = _listening(st.procs[0].pid)
    assert {p for _, p in listening} >= set(_all_ports(cluster))
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1") for ip, _ in listening), listening


def test_write_read_stat_list(cluster, client):
    data = os.urandom(5 * MiB + 12345)
    with client.create("/storeval/rw/data.bin", WriteOptions(block_size=MiB, replication=2, create_parent=True)) as w:
        assert w.write(data) == len(data)
    st = client.get_file_info("/storeval/rw/data.bin")
    assert (st.length, st.isdir, st.replication, st.blocksize) == (len(data), False, 2, MiB)
    assert [(s.path, s.length) for s in client.list_status("/storeval/rw")] == [("/storeval/rw/data.bin", len(data))]
    blocks = cluster.blocks("/storeval/rw/data.bin")
    assert [b["offset"] for b in blocks] == [i * MiB for i in range(6)]
    assert all(len(b["ports"]) == 2 for b in blocks)
    with client.read("/storeval/rw/data.bin") as r:
        assert len(r) == len(data)
        for off, n in [(0, 100), (MiB - 7, 14), (3 * MiB + 5, 2 * MiB), (len(data) - 10, 10)]:
            assert r.read_range(off, n) == data[off:off + n]
        assert r.read() == data
    # files created without options get the cluster's replication and the default 128 MiB block size
    with client.create("/storeval/rw/small") as w:
        w.write(b"x" * 1000)
    st = client.get_file_info("/storeval/rw/small")
    assert (st.length, st.replication, st.blocksize) == (1000, 2, 128 * MiB)


def test_mkdirs_and_delete(client):
    client.mkdirs("/storeval/d/e/f", 0o755, True)
    assert client.get_file_info("/storeval/d/e/f").isdir
    with client.create("/storeval/d/e/f/g") as w:
        w.write(b"abc")
    assert sorted(s.path for s in client.list_status("/storeval/d", True)) == [
        "/storeval/d/e", "/storeval/d/e/f", "/storeval/d/e/f/g"]
    assert client.delete("/storeval/d/e/f/g") is True
    assert client.delete("/storeval/d/e/f/g") is False  # already gone
    with pytest.raises(FileNotFoundError):
        client.get_file_info("/storeval/d/e/f/g")
    assert client.delete("/storeval/d", True) is True
    with pytest.raises(FileNotFoundError):
        list(client.list_status("/storeval/d"))


def test_reads_with_stopped_datanodes(cluster, client):
    data = os.urandom(4 * MiB)
    with client.create("/storeval/faults.bin", WriteOptions(block_size=MiB, replication=2)) as w:
        w.write(data)
    blocks = cluster.blocks("/storeval/faults.bin")
    first, second = blocks[0]["ports"]  # the two datanodes that hold block 0
    stopped: list[int] = []
    try:
        stopped.append(cluster.stop_datanode(first))
        assert {d["port"]: d["alive"] for d in cluster.datanodes()}[first] is False
        # one of the two replicas of every block is left: every read succeeds (the client fails over)
        with client.read("/storeval/faults.bin") as r:
            assert r.read() == data
            assert r.read_range(100, 1000) == data[100:1100]

        stopped.append(cluster.stop_datanode(second))
        # The namenode re-replicates a block whose replica died (from the survivor to the third datanode), and on
        # a busy machine it may have done so before `second` was stopped, or while this test reads: so judge each
        # read by where the namenode said the block's live replicas were just before it (a read that fails must
        # have had none) and just after it (a read that succeeds must have found one).
        def live(offset: int) -> set[int]:
            return {p for b in cluster.blocks("/storeval/faults.bin") if b["offset"] == offset
                    for p in b["ports"]} - {first, second}

        failed = 0
        for b in blocks:
            off = b["offset"]
            before = live(off)
            try:
                with client.read("/storeval/faults.bin") as r:
                    got = r.read_range(off, 100)
            except RuntimeError as e:
                assert "All DataNodes failed" in str(e)
                assert not before, f"block at {off} had live replicas on {before} yet its read failed"
                failed += 1
            else:
                assert got == data[off:off + 100]
                assert before or live(off), f"block at {off} was read with both of its replicas stopped"
        # block 0 lived only on the two stopped datanodes: unless it was re-replicated in time, its read failed
        assert failed or live(0)
    finally:
        for port in stopped:
            cluster.start_datanode(port)
    assert all(d["alive"] for d in cluster.datanodes())
    with client.read("/storeval/faults.bin") as r:
        assert r.read() == data


def test_datanodes_by_index(cluster):
    port = cluster.state.info["datanode_ports"][2]
    assert cluster.stop_datanode(2) == port
    try:
        # indices refer to the original list: they do not shift after a stop
        assert [d["alive"] for d in cluster.datanodes()] == [True, True, False]
        assert cluster.stop_datanode(1) == cluster.state.info["datanode_ports"][1]
        assert cluster.start_datanode(1) == cluster.state.info["datanode_ports"][1]
    finally:
        assert cluster.start_datanode(port) == port
    assert [d["alive"] for d in cluster.datanodes()] == [True, True, True]


def test_control_errors(cluster):
    assert cluster.control("ping").startswith("OK")
    with pytest.raises(TestbedError, match="unknown command"):
        cluster.control("frobnicate")
    with pytest.raises(TestbedError, match="not stopped"):
        cluster.start_datanode(0)
    with pytest.raises(TestbedError, match="no datanode"):
        cluster.stop_datanode(7)
    with pytest.raises(TestbedError, match="no datanode"):
        cluster.control("stop-datanode 1")


def test_state_round_trip_and_stop_leaves_nothing(cluster):
    """Rebuilt from its JSON state like `Testbed.load` does, the server is found alive and stopped completely."""
    data = json.loads(json.dumps(cluster.state.to_json()))
    state = ServerState.from_json(data)
    again = server_class("hdfs")(Path(state.root), state.info.get("options", {}), state)
    assert again.alive()
    assert again.targets() == cluster.targets()
    assert again.status() == cluster.status()
    assert again.datanodes() == cluster.datanodes()
    pid = state.procs[0].pid
    family = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    ports = _all_ports(again)
    again.stop()
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in family)
    assert not again.alive() and not cluster.alive()
    assert [p for p in ports if port_open(p)] == []
    assert not Path(state.root).exists()
    cluster.stop()  # a second stop is harmless


def test_sigterm_port_race_and_defaults(tmp_path, monkeypatch):
    """One datanode, default replication 1; a taken control port makes start() retry; SIGTERM shuts down cleanly."""
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    busy = blocker.getsockname()[1]
    real_free_port = hdfs_mod.free_port
    calls = iter([None, None, busy])  # attempt 1: rpc and http free, control taken

    def fake_free_port():
        nxt = next(calls, None)
        return busy if nxt == busy else real_free_port()

    monkeypatch.setattr(hdfs_mod, "free_port", fake_free_port)
    server = HdfsServer(tmp_path / "hdfs1", {"datanodes": 1})
    try:
        server.start()
        assert server.state.ports["control"] != busy
        log = (tmp_path / "hdfs1" / "hdfs.log").read_text()
        assert "BindException" in log or "Address already in use" in log
        server.wait_ready(timeout=120)
        assert server.targets()["hdfs"]["replication"] == 1
        with server.client().create("/storeval/one") as w:
            w.write(b"1" * 10)
        assert server.client().get_file_info("/storeval/one").replication == 1
        ports = _all_ports(server)
        server.state.procs[0].stop()  # SIGTERM only: the launcher's shutdown hook stops the cluster
        assert not server.alive()
        assert "STOPPED" in (tmp_path / "hdfs1" / "hdfs.log").read_text().splitlines()
        assert [p for p in ports if port_open(p)] == []
    finally:
        blocker.close()
        server.stop()
    assert not (tmp_path / "hdfs1").exists()
