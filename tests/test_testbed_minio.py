"""The MinIO testbed servers, for real: build (once, cached), start, S3 round trips with obstore, faults, stop.

The first run builds MinIO from source through the Go module proxy (2–5 minutes on 2 cores); later runs
reuse the cached binary and each server starts in about a second.
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import socket
import stat
import time
from pathlib import Path

import obstore
import psutil
import pytest
from obstore.store import S3Store

from storeval.testbed import Testbed
import storeval.testbed.minio as minio_module
import storeval.testbed.base as base_module
from storeval.testbed.base import ServerState, TestbedError, cache_dir, port_open
from storeval.testbed.minio import (BUCKET, MINIO_VERSION, MinioECServer, MinioServer, create_bucket,
                                    install_minio)

pytestmark = pytest.mark.skipif(
    shutil.which("go") is None and not (cache_dir() / "bin" / f"minio-{MINIO_VERSION}").exists(),
    reason="Go is not installed and no MinIO binary is cached")


def _store(server: MinioServer, *, secret: str | None = None, bucket: str = BUCKET) -> S3Store:
    access, real_secret = server.credentials()
    return S3Store(bucket, endpoint=server.endpoint, region="us-east-1", access_key_id=access,
                   secret_access_key=secret or real_secret, virtual_hosted_style_request=False,
                   client_options={"allow_http": True, "timeout": "30s"})


def _ports(server: MinioServer) -> list[int]:
    return sorted(server.state.ports.values())


def _assert_stopped(server: MinioServer) -> None:
    procs = list(server.state.procs)
    ports = _ports(server)
    pids = [p.pid for p in procs]
    server.stop()
    for p in procs:
        assert not p.alive(), f"{p.name} (pid {p.pid}) still alive"
        if psutil.pid_exists(p.pid):  # the PID may have been reused by now, but not by our process
            assert abs(psutil.Process(p.pid).create_time() - p.create_time) >= 0.5, pids
    assert not [port for port in ports if port_open(port)], "a port still listens after stop()"
    assert not server.root.exists()
    assert server.state.procs == []


def _listening_addresses(server: MinioServer) -> set[str]:
    addrs = set()
    for p in server.state.procs:
        for c in psutil.Process(p.pid).net_connections(kind="inet"):
            if c.status == psutil.CONN_LISTEN:
                addrs.add(c.laddr.ip)
    return addrs


@pytest.fixture(scope="module")
def minio(tmp_path_factory: pytest.TempPathFactory):
    install_minio()  # the first build takes minutes; do it outside the start timing
    server = MinioServer(tmp_path_factory.mktemp("minio") / "minio")
    server.install()
    try:
        server.start()
        server.wait_ready(timeout=60)
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def minio_ec(tmp_path_factory: pytest.TempPathFactory):
    install_minio()
    server = MinioECServer(tmp_path_factory.mktemp("minio-ec") / "minio-ec")
    server.install()
    try:
        server.start()
        server.wait_ready(timeout=120)
        yield server
    finally:
        server.stop()


# ------------------------------------------------------------------------------------------- single node
def test_install_is_cached() -> None:
    binary = install_minio()
    assert binary == cache_dir() / "bin" / f"minio-{MINIO_VERSION}"
    assert install_minio() == binary  # idempotent (and fast: the binary runs)
    assert os.access(binary, os.X_OK)


def test_credentials_file_and_targets(minio: MinioServer) -> None:
    path = minio.root / "credentials"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    cp = configparser.ConfigParser()
    cp.read(path)
    access, secret = cp["default"]["aws_access_key_id"], cp["default"]["aws_secret_access_key"]
    assert (access, secret) == minio.credentials()
    targets = minio.targets()
    api = minio.state.ports['api']
    assert targets == {"minio": {"url": "s3://storeval/testbed", "endpoint": f"http://127.0.0.1:{api}",
                                 "region": "us-east-1", "credentials_file": str(path.absolute()),
                                 "server_pids": [p.pid for p in minio.state.procs],
                                 "metrics_urls": [f"http://127.0.0.1:{api}/minio/metrics/v3/api/requests"]}}
    assert secret not in json.dumps(targets) and secret not in json.dumps(minio.state.to_json())
    # the secret is in the environment of the server, not on its command line
    for p in minio.state.procs:
        assert secret not in " ".join(psutil.Process(p.pid).cmdline())


def test_listens_on_localhost_only(minio: MinioServer) -> None:
    # MinIO adds every loopback address ([::1] too) to the API listener by design; nothing else
    assert "127.0.0.1" in _listening_addresses(minio) <= {"127.0.0.1", "::1"}
    assert set(minio.state.ports) == {"api", "console"}
    deadline = time.monotonic() + 15  # the console may open its port a moment after the API answers
    while not all(port_open(p) for p in minio.state.ports.values()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert all(port_open(p) for p in minio.state.ports.values())


def test_round_trip(minio: MinioServer) -> None:
    store = _store(minio)
    obstore.put(store, "testbed/a/one.bin", b"hello minio")
    obstore.put(store, "testbed/a/two.bin", b"x" * 1000)
    assert obstore.get(store, "testbed/a/one.bin").bytes().to_bytes() == b"hello minio"
    assert obstore.head(store, "testbed/a/two.bin")["size"] == 1000
    listed = sorted(m["path"] for batch in obstore.list(store, "testbed/a") for m in batch)
    assert listed == ["testbed/a/one.bin", "testbed/a/two.bin"]
    obstore.delete(store, ["testbed/a/one.bin", "testbed/a/two.bin"])
    assert [m for batch in obstore.list(store, "testbed/a") for m in batch] == []
    with pytest.raises(FileNotFoundError):
        obstore.head(store, "testbed/a/one.bin")


def test_multipart_upload(minio: MinioServer) -> None:
    store = _store(minio)
    data = os.urandom(1 << 20) * 20  # 20 MiB: four 5 MiB parts
    obstore.put(store, "testbed/big.bin", data, chunk_size=5 << 20, max_concurrency=4)
    meta = obstore.head(store, "testbed/big.bin")
    assert meta["size"] == len(data)
    assert "-" in (meta["e_tag"] or "")  # a multipart ETag: <md5 of part md5s>-<parts>
    got = obstore.get(store, "testbed/big.bin", options={"range": (3 << 20, (3 << 20) + 100)}).bytes().to_bytes()
    assert got == data[3 << 20:(3 << 20) + 100]
    assert obstore.get(store, "testbed/big.bin").bytes().to_bytes() == data
    with obstore.open_writer(store, "testbed/streamed.bin", buffer_size=5 << 20) as w:
        for _ in range(3):
            w.write(data[: 4 << 20])
    assert obstore.head(store, "testbed/streamed.bin")["size"] == 12 << 20
    obstore.delete(store, ["testbed/big.bin", "testbed/streamed.bin"])


def test_wrong_credentials_are_refused(minio: MinioServer) -> None:
    bad = _store(minio, secret="not-the-secret-at-all")
    with pytest.raises(Exception, match="(?i)signature|denied|403|unauthenticated"):
        obstore.put(bad, "testbed/nope.bin", b"no")
    with pytest.raises(TestbedError, match="SignatureDoesNotMatch|InvalidAccessKeyId|403"):
        create_bucket(minio.endpoint, minio.credentials()[0], "wrong", "other")


def test_create_bucket_is_idempotent(minio: MinioServer) -> None:
    access, secret = minio.credentials()
    create_bucket(minio.endpoint, access, secret, BUCKET)  # exists already (made by wait_ready)
    create_bucket(minio.endpoint, access, secret, "storeval-second")
    create_bucket(minio.endpoint, access, secret, "storeval-second")
    store = _store(minio, bucket="storeval-second")
    obstore.put(store, "x", b"1")
    assert obstore.get(store, "x").bytes().to_bytes() == b"1"
    with pytest.raises(TestbedError, match="InvalidBucketName|400"):
        create_bucket(minio.endpoint, access, secret, "Bad_Bucket")


def test_state_round_trips(minio: MinioServer) -> None:
    state = ServerState.from_json(json.loads(json.dumps(minio.state.to_json())))
    again = MinioServer(Path(state.root), {}, state)
    assert again.alive()
    assert again.ready()
    assert again.targets() == minio.targets()
    assert again.credentials() == minio.credentials()
    assert "minio pid" in again.status() and "up" in again.status()


def test_stop_leaves_nothing(tmp_path: Path) -> None:
    """A server of its own (about a second to start), so that stopping it leaves the module's server to the
    tests that use it, in whatever order they run."""
    install_minio()
    server = MinioServer(tmp_path / "minio")
    server.install()
    try:
        server.start()
        server.wait_ready(timeout=60)
        assert server.alive() and server.state.procs
        _assert_stopped(server)
        server.stop()  # idempotent
        assert server.state.procs == [] and not server.root.exists()
    finally:
        server.stop()


def test_start_retries_on_a_taken_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_pick = base_module.pick_ports
    calls: list[list[int]] = []
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        busy = blocker.getsockname()[1]

        def pick(n: int) -> list[int]:
            ports = real_pick(n)
            calls.append(ports)
            return [busy, *ports[1:]] if len(calls) == 1 else ports

        monkeypatch.setattr(base_module, "pick_ports", pick)
        server = MinioServer(tmp_path / "minio")
        try:
            server.start()
            server.wait_ready(timeout=60)
            assert len(calls) == 2 and server.state.ports["api"] != busy
            assert "already in use" in (tmp_path / "minio" / "minio.log").read_text()
            assert len(server.state.procs) == 1 and server.alive()
        finally:
            server.stop()


def test_testbed_up_and_down(tmp_path: Path) -> None:
    bed = Testbed(tmp_path / "bed")
    servers = bed.up(["minio"], log=lambda *_: None)
    server = servers["minio"]
    procs = list(server.state.procs)
    try:
        loaded = bed.load()["minio"]  # rebuilt from state.json
        assert loaded.alive() and loaded.ready()
        assert loaded.targets() == server.targets()
        text = (tmp_path / "storeval-testbed.yaml").read_text()
        assert "s3://storeval/testbed" in text and "credentials_file" in text
        assert loaded.credentials()[1] not in text
    finally:
        bed.down(log=lambda *_: None)
    assert not any(p.alive() for p in procs)
    assert not (tmp_path / "bed").exists()


# ------------------------------------------------------------------------------------- erasure-coded
def test_ec_cluster_layout(minio_ec: MinioECServer) -> None:
    nodes = minio_ec.state.info["nodes"]
    assert len(nodes) == 4 and len(minio_ec.state.procs) == 4
    assert [n["proc"] for n in nodes] == [0, 1, 2, 3]
    assert len(set(minio_ec.state.ports.values())) == 8
    assert minio_ec.targets()["minio-ec"]["endpoint"] == nodes[0]["endpoint"]
    assert minio_ec.targets()["minio-ec"]["url"] == "s3://storeval/testbed"
    assert "127.0.0.1" in _listening_addresses(minio_ec) <= {"127.0.0.1", "::1"}
    for i, n in enumerate(nodes, start=1):
        assert (minio_ec.root / f"d{i}").is_dir()
        assert n["endpoint"] == f"http://127.0.0.1:{n['port']}"


def test_ec_round_trip_and_node_failure(minio_ec: MinioECServer) -> None:
    store = _store(minio_ec)
    data = os.urandom(3 << 20)
    obstore.put(store, "testbed/ec.bin", data)
    # every node serves the cluster's objects
    for n in minio_ec.state.info["nodes"]:
        access, secret = minio_ec.credentials()
        s = S3Store(BUCKET, endpoint=n["endpoint"], region="us-east-1", access_key_id=access,
                    secret_access_key=secret, virtual_hosted_style_request=False,
                    client_options={"allow_http": True})
        assert obstore.get(s, "testbed/ec.bin").bytes().to_bytes() == data

    old = minio_ec.state.procs[2]
    minio_ec.stop_node(3)
    assert not old.alive() and not minio_ec.node_alive(3) and not minio_ec.alive()
    assert "DOWN" in minio_ec.status()
    assert obstore.get(store, "testbed/ec.bin").bytes().to_bytes() == data  # EC:2 — one node may be missing
    obstore.put(store, "testbed/ec-degraded.bin", b"written with node 3 down")  # write quorum is 3 of 4

    minio_ec.start_node("node3")
    assert minio_ec.node_alive(3) and minio_ec.alive()
    assert minio_ec.state.procs[2].pid != old.pid
    minio_ec.wait_ready(timeout=60)
    assert obstore.get(store, "testbed/ec-degraded.bin").bytes().to_bytes() == b"written with node 3 down"
    obstore.delete(store, ["testbed/ec.bin", "testbed/ec-degraded.bin"])


def test_ec_state_round_trips(minio_ec: MinioECServer) -> None:
    state = ServerState.from_json(json.loads(json.dumps(minio_ec.state.to_json())))
    again = MinioECServer(Path(state.root), {}, state)
    assert again.alive() and again.ready()
    assert again.targets() == minio_ec.targets()
    # a rebuilt server can stop and restart a node too (fault injection from another process)
    old = minio_ec.state.procs[0]
    again.stop_node(1)
    assert not old.alive() and not again.node_alive(1)
    again.start_node("node1")
    minio_ec.state = again.state  # the fixture's teardown must stop the new node 1
    assert again.node_alive(1) and again.state.procs[0].pid != old.pid
    again.wait_ready(timeout=60)
    obstore.put(_store(again), "testbed/after-restart.bin", b"ok")
    assert obstore.get(_store(minio_ec), "testbed/after-restart.bin").bytes().to_bytes() == b"ok"


def test_ec_stop_leaves_nothing(tmp_path: Path) -> None:
    """A cluster of its own: stopping it leaves the module's cluster to the other tests, in any order."""
    install_minio()
    server = MinioECServer(tmp_path / "minio-ec")
    server.install()
    try:
        server.start()
        server.wait_ready(timeout=120)
        assert len(server.state.procs) == 4 and server.alive()
        _assert_stopped(server)
        server.stop()  # idempotent
    finally:
        server.stop()


def test_node_numbers_are_checked(tmp_path: Path) -> None:
    server = MinioECServer(tmp_path / "x")
    with pytest.raises(TestbedError, match="no node 5"):
        server.stop_node(5)


def test_install_without_go_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STOREVAL_CACHE", str(tmp_path / "cache"))  # no cached binary there
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(TestbedError, match="^go is not installed"):
        install_minio()
    with pytest.raises(TestbedError, match="^go is not installed"):
        minio_module.install_warp()
