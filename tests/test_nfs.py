"""NFS: the testbed's NFS-Ganesha (NFSv4, 127.0.0.1) and the nfs:// driver (nfs-rs), against the real server.

One Ganesha for the module, started and stopped through the CLI as a user would (`storeval testbed up nfs`,
`storeval testbed down`). The driver's own behaviour (offsets, short reads, listings, errors) is checked
call by call; studies run through `storeval run` on the target the testbed wrote. Waits follow readiness
with generous bounds; nothing asserts on wall time.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import time
from pathlib import Path

import psutil
import pytest
import yaml

from storeval.drivers import make_driver
from storeval.drivers.base import TargetError, TargetUnreachable
from storeval.errors import DirectIOUnsupported, InputError
from storeval.testbed.nfs import SQUASH_ID, NfsServer

from .helpers import exposed, listening_addresses, storeval

nfs_rs = pytest.importorskip("nfs_rs")

MiB = 1 << 20
TIMEOUT = 5  # seconds: the driver's per-call timeout in these tests

pytestmark = pytest.mark.skipif(os.geteuid() != 0 and shutil.which("ganesha.nfsd") is None,
                                reason="NFS-Ganesha is not installed and cannot be (not root)")


# ------------------------------------------------------------------------------------------------ fixtures
class Bed:
    """The module's testbed: its directory, the targets file, the server's port, URL and export directory."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.dir = base / "tb"
        self.targets_file = base / "storeval-testbed.yaml"

    def state(self) -> dict:
        return json.loads((self.dir / "state.json").read_text())["servers"]["nfs"]

    @property
    def port(self) -> int:
        return int(self.state()["ports"]["nfs"])

    @property
    def url(self) -> str:
        return f"nfs://127.0.0.1:{self.port}/export/storeval"

    @property
    def export(self) -> Path:
        return self.dir / "nfs" / "export" / "storeval"

    def pids(self) -> list[int]:
        return [p["pid"] for p in self.state()["procs"]]

    def driver(self, **options):
        d = make_driver(self.url, {"timeout": TIMEOUT, **options})
        d.name = "nfs"
        d.connect()
        return d


@pytest.fixture(scope="module")
def bed(tmp_path_factory: pytest.TempPathFactory):
    b = Bed(tmp_path_factory.mktemp("nfs"))
    run_dir_there = os.path.lexists("/run/ganesha")
    r = storeval("testbed", "up", "nfs", "--dir", str(b.dir), cwd=b.base, timeout=900)
    if r.rc and "apt-get" in r.err:
        pytest.skip(f"NFS-Ganesha cannot be installed here: {r.err_lines[-1]}")
    assert r.rc == 0, r.err
    b.run_dir_there = run_dir_there
    yield b
    if b.dir.exists():
        storeval("testbed", "down", "--dir", str(b.dir), cwd=b.base)


@pytest.fixture
def scratch(bed: Bed):
    """A directory of the export for one test, made and removed through the driver."""
    d = bed.driver()
    name = f"t-{os.getpid()}-{time.monotonic_ns()}"
    d.mkdir(name)
    yield d, name
    d.retry_server()
    for entry in d.listdir(name):
        path = f"{name}/{entry}"
        (d.rmdir if d.stat(path).is_dir else d.remove)(path)
    d.rmdir(name)
    d.shutdown()


def _run(bed: Bed, *args: str, name: str) -> dict:
    out = bed.base / f"{name}.json"
    r = storeval("run", str(bed.targets_file), *args, "--json", str(out), "--no-html", "-q",
                 "--results", str(bed.base / "results"), cwd=bed.base, timeout=600)
    assert r.rc == 0, r.err
    return json.loads(out.read_text())


def _phases(doc: dict) -> dict[tuple[int, str], dict]:
    return {(c["clients"], ph["phase"]): ph for c in doc["cells"] for ph in c["phases"]}


# ------------------------------------------------------------------------------------------------ the testbed
def test_up_writes_the_target_and_listens_on_loopback_only(bed: Bed):
    targets = yaml.safe_load(bed.targets_file.read_text())["targets"]
    pids = bed.pids()
    assert targets == {"nfs": {"url": bed.url, "server_pids": pids}}
    assert len(pids) == 1 and psutil.Process(pids[0]).name() == "ganesha.nfsd"
    listening = listening_addresses(pids)[pids[0]]
    assert ("::ffff:127.0.0.1", bed.port) in listening or ("127.0.0.1", bed.port) in listening
    assert exposed(pids) == []
    status = storeval("testbed", "status", "--dir", str(bed.dir))
    assert status.rc == 0 and status.out.strip() == (f"nfs: running — ganesha.nfsd pid {pids[0]} up; "
                                                     f"ports nfs {bed.port}")
    faults = storeval("testbed", "faults", "--dir", str(bed.dir))
    assert faults.rc == 0 and "nfs  stop,cont,kill,start,restart" in faults.out
    # the same as data (--json -: to stdout, nothing else there)
    status = storeval("testbed", "status", "--dir", str(bed.dir), "--json", "-")
    assert status.rc == 0 and json.loads(status.out) == {
        "directory": str(bed.dir), "network": None,
        "servers": [{"kind": "nfs", "state": "running", "to_do": "", "ports": {"nfs": bed.port},
                     "processes": [{"pid": pids[0], "condition": "up"}], "targets": targets}]}
    faults = storeval("testbed", "faults", "--dir", str(bed.dir), "--json", "-")
    (handle,) = json.loads(faults.out)["handles"]
    assert handle["name"] == "nfs" and handle["actions"] == ["stop", "cont", "kill", "start", "restart"]


def test_down_stops_a_ganesha_an_interrupted_up_did_not_record(bed: Bed, tmp_path: Path):
    """`up` killed between starting Ganesha and saving the state: Ganesha's own pid file in the server's run
    directory finds it, and only a process whose command line names this server's configuration is taken."""
    server = NfsServer(tmp_path / "nfs")
    server.start()
    pid = server.state.procs[0].pid
    server.state.procs = []  # the record that was never saved
    real = server.pid_file.read_text()
    server.pid_file.write_text(f"{os.getpid()}\n")  # some other process: not ours to stop
    server.adopt_unrecorded()
    assert server.state.procs == []
    server.pid_file.write_text(real)
    assert server.stop() == []
    assert not psutil.pid_exists(pid) and not (tmp_path / "nfs").exists()
    assert psutil.Process(bed.pids()[0]).is_running()  # the module's server is untouched


def test_settings_nfs_does_not_take_are_one_line_errors(tmp_path: Path):
    r = storeval("testbed", "up", "nfs", "--servers", "2", "--dir", str(tmp_path / "x"))
    assert r.rc == 2 and len(r.err_lines) == 1 and "one NFS server only (servers 1), not 2" in r.err
    r = storeval("testbed", "up", "nfs", "--type", "disperse", "--dir", str(tmp_path / "x"))
    assert r.rc == 2 and len(r.err_lines) == 1 and "no setting 'type'" in r.err
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------------ the driver
def test_writes_at_offsets_land_in_the_export_directory(bed: Bed, scratch):
    d, top = scratch
    h = d.open(f"{top}/f", "w")
    assert d.pwrite(h, bytearray(b"abcdef"), 0) == 6
    assert d.writer(h)([memoryview(b"XY")], 10) == 2  # a hole from 6 to 10
    d.fsync(h)
    d.close(h)
    on_disk = bed.export / top / "f"
    assert on_disk.read_bytes() == b"abcdef\0\0\0\0XY"
    assert on_disk.stat().st_uid == SQUASH_ID  # written through NFS, as the squash user: `down` may remove it
    h = d.open(f"{top}/f", "w")  # write mode opens an existing file without truncating it
    d.pwrite(h, b"Z", 1)
    d.close(h)
    assert on_disk.read_bytes() == b"aZcdef\0\0\0\0XY"
    assert d.stat(f"{top}/f").size == 12 and not d.stat(f"{top}/f").is_dir and d.stat(top).is_dir


def test_reads_at_offsets_and_short_reads_at_the_end(bed: Bed, scratch):
    d, top = scratch
    data = os.urandom(3 * MiB + 123)
    (bed.export / top / "r").write_bytes(data)  # put there by hand: read through NFS
    h = d.open(f"{top}/r", "r")
    try:
        buf = bytearray(MiB)
        assert d.pread(h, buf, 5) == MiB and bytes(buf) == data[5:5 + MiB]
        read = d.reader(h)
        assert read([buf], 2 * MiB) == MiB and bytes(buf) == data[2 * MiB:3 * MiB]
        assert read([buf], 3 * MiB) == 123 and bytes(buf[:123]) == data[3 * MiB:]  # short at the end
        assert d.pread(h, buf, len(data)) == 0 and d.pread(h, buf, len(data) + MiB) == 0
    finally:
        d.close(h)
    big = bytearray(4 * MiB)
    assert d.get_into(f"{top}/r", big) == len(data) and bytes(big[:len(data)]) == data
    assert d.preadv(h := d.open(f"{top}/r", "r"), [(0, 4), (3 * MiB + 120, 10)]) == [data[:4], data[-3:]]
    d.close(h)


def test_listing_removal_and_directory_errors(bed: Bed, scratch):
    d, top = scratch
    d.mkdir(f"{top}/sub")
    d.put(f"{top}/sub/a", b"12345")
    d.put(f"{top}/b", b"")
    assert sorted(d.listdir(top)) == ["b", "sub"] and d.listdir(f"{top}/sub") == ["a"]
    with pytest.raises(FileExistsError) as e:
        d.mkdir(f"{top}/sub")
    assert str(e.value) == f"[Errno 17] target nfs: mkdir of {top}/sub failed: file exists (NFS4ERR_EXIST)"
    with pytest.raises(FileExistsError):
        d.mkdir(f"{top}/b")  # an existing file's name
    with pytest.raises(OSError) as e:
        d.rmdir(f"{top}/sub")
    assert e.value.errno == errno.ENOTEMPTY and "directory not empty" in str(e.value)
    assert d.rmdir_quietly(f"{top}/sub") is False
    with pytest.raises(NotADirectoryError):
        d.rmdir(f"{top}/b")  # NFSv4's REMOVE would take the file: refused before
    assert (bed.export / top / "b").exists()
    with pytest.raises(FileNotFoundError) as e:
        d.stat(f"{top}/nothing")
    assert "\n" not in str(e.value) and "stat of" in str(e.value)
    with pytest.raises(FileNotFoundError):
        d.open(f"{top}/nothing", "r")
    d.remove(f"{top}/sub/a")
    assert d.remove_quietly(f"{top}/sub/a") is False
    d.rmdir(f"{top}/sub")
    assert d.listdir(top) == ["b"] and sorted(os.listdir(bed.export / top)) == ["b"]
    assert top in d.listdir("")  # the target's root lists too (storeval clean needs it)


def test_metadata_fast_ops_on_native_paths(bed: Bed, scratch):
    d, top = scratch
    ops = d.fast_ops()
    ops.mkdir(d.native(f"{top}/m"))
    ops.create(d.native(f"{top}/m/x"), b"abc")
    assert ops.read(d.native(f"{top}/m/x"), bytearray(16)) == 3
    assert ops.stat(d.native(f"{top}/m/x")).size == 3 and ops.listdir(d.native(f"{top}/m")) == ["x"]
    ops.remove(d.native(f"{top}/m/x"))
    with pytest.raises(FileNotFoundError):
        ops.remove(d.native(f"{top}/m/x"))
    ops.rmdir(d.native(f"{top}/m"))
    assert not (bed.export / top / "m").exists()


def test_two_clients_write_one_file_over_two_connections(bed: Bed, scratch):
    d, top = scratch
    other = bed.driver()
    try:
        h1, h2 = d.open(f"{top}/shared", "w"), other.open(f"{top}/shared", "w")
        d.pwrite(h1, b"a" * MiB, 0)
        other.pwrite(h2, b"b" * MiB, MiB)
        d.close(h1)
        other.close(h2)
    finally:
        other.shutdown()
    assert (bed.export / top / "shared").read_bytes() == b"a" * MiB + b"b" * MiB


def test_capabilities_and_what_is_refused(bed: Bed, scratch):
    d, top = scratch
    assert d.caps.fsync and d.caps.random_write and d.caps.shared_write and d.caps.directories
    assert not d.caps.direct_io and not d.caps.client_page_cache and d.native_io() is None
    with pytest.raises(DirectIOUnsupported):
        d.open(f"{top}/direct", "w", direct=True)
    assert not (bed.export / top / "direct").exists()
    info = d.describe()
    assert info["nfs_version"] == "4.1" and info["mount"] == "/export" and info["max_write"] > 0


def test_urls_the_driver_refuses(bed: Bed):
    cls = type(make_driver(bed.url))
    for url, words in [(f"nfs://127.0.0.1:{bed.port}/", "names no export"),
                       (f"nfs://127.0.0.1:{bed.port}", "names no export"),
                       (f"{bed.url}?version=3", "give version, uid, gid, resvport and timeout as keys of the target"),
                       (f"nfs://me@127.0.0.1:{bed.port}/export", "uid and gid options"),
                       (f"nfs://127.0.0.1:{bed.port}/export/../etc", "'.' and '..' are not allowed")]:
        with pytest.raises(InputError) as e:
            cls.check_url(url, cls.Options())
        assert words in str(e.value) and "\n" not in str(e.value)
    d = make_driver(f"nfs://127.0.0.1:{bed.port}/export/absent", {"timeout": TIMEOUT})
    with pytest.raises(Exception) as e:
        d.connect()
    assert str(e.value) == f"target nfs://127.0.0.1:{bed.port}/export/absent: directory /export/absent does not exist on 127.0.0.1:{bed.port} (create it first)"
    d = make_driver(f"nfs://127.0.0.1:{bed.port}/elsewhere/x", {"timeout": TIMEOUT})
    with pytest.raises(Exception) as e:
        d.connect()
    assert "has no /elsewhere (check the export in the URL)" in str(e.value)


def test_bad_urls_on_the_command_line_are_one_line_exit_2(bed: Bed, tmp_path: Path):
    for url in (f"nfs://127.0.0.1:{bed.port}/", f"{bed.url}?version=3"):
        r = storeval("run", "--target", url, "--workload", "bandwidth", "--no-html", "-q", cwd=tmp_path)
        assert r.rc == 2 and len(r.err_lines) == 1 and r.err_lines[0].startswith("error: --target nfs://"), r.err
    assert not (tmp_path / "storeval-results").exists()


# ------------------------------------------------------------------------------------------------ studies
def test_bandwidth_moves_exact_bytes_and_verifies_them(bed: Bed):
    doc = _run(bed, "--workload", "bandwidth", "--clients", "1,2", "--set", "file_size=4MiB",
               "--set", "transfer_size=1MiB", "--set", "verify=true", name="bandwidth")
    assert [c["status"] for c in doc["cells"]] == ["ok", "ok"]
    phases = _phases(doc)
    for n in (1, 2):
        for phase in ("write", "read"):
            ph = phases[(n, phase)]
            assert (ph["status"], ph["bytes"], ph["ops"], ph["errors"]) == ("ok", n * 4 * MiB, n * 4, {})
            assert ph["io_engines"] == ["python"]
        # Ganesha's own counters: it wrote (to its file system) at least what the clients sent
        assert phases[(n, "write")]["probes"]["server_write_bytes"] >= n * 4 * MiB
    assert doc["environment"]["target:nfs"]["client"] == "nfs-rs"
    assert [n for n in os.listdir(bed.export) if n.startswith("storeval-2")] == []  # the run's scratch is gone


def test_random_io_and_direct_are_handled(bed: Bed):
    doc = _run(bed, "--workload", "bandwidth", "--clients", "1", "--set", "file_size=2MiB",
               "--set", "transfer_size=64KiB", "--set", "phases=randwrite,randread", "--set", "direct=true",
               "--set", "verify=true", name="random")
    phases = _phases(doc)
    for phase in ("randwrite", "randread"):
        ph = phases[(1, phase)]
        assert (ph["status"], ph["bytes"], ph["ops"], ph["errors"]) == ("ok", 2 * MiB, 32, {})
    warned = [w for ph in phases.values() for w in ph["warnings"]]
    assert any("O_DIRECT does not apply" in str(w) for w in warned), warned


def test_metadata_counts_every_operation(bed: Bed):
    doc = _run(bed, "--workload", "metadata", "--clients", "1,2", "--set", "items=20", "--set", "file_size=100",
               name="metadata")
    assert [c["status"] for c in doc["cells"]] == ["ok", "ok"]
    phases = _phases(doc)
    for n in (1, 2):
        for phase in ("dir-create", "dir-stat", "dir-remove", "file-create", "file-stat", "file-read", "file-remove"):
            ph = phases[(n, phase)]
            assert (ph["status"], ph["ops"], ph["errors"]) == ("ok", 20 * n, {}), phase
        assert phases[(n, "file-create")]["bytes"] == phases[(n, "file-read")]["bytes"] == 20 * n * 100


def test_a_frozen_server_fails_its_cell_in_one_line_and_the_run_goes_on(bed: Bed):
    (bed.base / "local").mkdir(exist_ok=True)
    study = bed.base / "frozen.yaml"
    study.write_text(yaml.safe_dump({"targets": {"nfs": {"url": bed.url, "timeout": "3s"},
                                                 "local": {"url": f"file://{bed.base / 'local'}"}}}))
    out = bed.base / "frozen.json"
    r = storeval("testbed", "fault", "nfs", "stop", "--dir", str(bed.dir))
    assert r.rc == 0, r.err
    try:
        r = storeval("run", str(study), "--workload", "bandwidth", "--clients", "1", "--set", "file_size=1MiB",
                     "--set", "transfer_size=1MiB", "--json", str(out), "--no-html", "-q",
                     "--results", str(bed.base / "results"), cwd=bed.base, timeout=600)
    finally:
        assert storeval("testbed", "fault", "nfs", "cont", "--dir", str(bed.dir)).rc == 0
    assert r.rc == 1
    cells = {c["target"]: c for c in json.loads(out.read_text())["cells"]}
    assert cells["local"]["status"] == "ok"
    assert cells["nfs"]["status"] == "failed"
    assert cells["nfs"]["error"] == (f"target nfs: mount of /export failed: no answer from 127.0.0.1:{bed.port} "
                                     "within 3 s (the server is frozen, overloaded or unreachable)")


def test_driver_calls_fail_within_the_timeout_and_recover(bed: Bed, scratch):
    d, top = scratch
    d.put(f"{top}/kept", b"kept data")
    h = d.open(f"{top}/kept", "r")
    pid = bed.pids()[0]
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(TargetUnreachable) as e:
            d.pread(h, bytearray(4), 0)
        assert str(e.value) == (f"target nfs: read of {top}/kept failed: no answer from 127.0.0.1:{bed.port} within "
                                f"{TIMEOUT} s (the server is frozen, overloaded or unreachable)")
        with pytest.raises(TargetUnreachable):
            d.stat(f"{top}/kept")  # the driver remembers: no second wait
    finally:
        os.kill(pid, signal.SIGCONT)
    d.retry_server()
    assert d.stat(f"{top}/kept").size == 9


# ------------------------------------------------------------------------------------------------ faults
def test_kill_then_start_brings_the_data_back_on_the_same_port(bed: Bed):
    before = bed.driver()
    before.put("fault-file", b"survives a crash")
    port, old = bed.port, bed.pids()[0]
    r = storeval("testbed", "fault", "nfs", "kill", "--dir", str(bed.dir))
    assert r.rc == 0 and r.out.strip() == f"SIGKILL to nfs (pid {old})", r.err
    status = storeval("testbed", "status", "--dir", str(bed.dir)).out
    assert status.startswith(f"nfs: DOWN — ganesha.nfsd pid {old} DOWN (exited)") and "fault NAME start" in status
    with pytest.raises(TargetError) as e:  # a new client: the port is closed
        bed.driver()
    assert str(e.value) == (f"target nfs: mount of /export failed: connection refused by 127.0.0.1:{port} (the "
                            "server is down or unreachable)")
    r = storeval("testbed", "fault", "nfs", "start", "--dir", str(bed.dir))
    assert r.rc == 0, r.err
    new = bed.pids()[0]
    assert new != old and r.out.strip() == f"started nfs again (pid {new}) on the same port {port} with its data"
    assert bed.port == port and yaml.safe_load(bed.targets_file.read_text())["targets"]["nfs"]["server_pids"] == [new]
    after = bed.driver()
    buf = bytearray(64)
    assert after.get_into("fault-file", buf) == 16 and bytes(buf[:16]) == b"survives a crash"
    after.shutdown()
    # the client from before the crash: its calls fail in one line, then it connects anew
    with pytest.raises(TargetError):
        before.stat("fault-file")
    before.retry_server()
    assert before.stat("fault-file").size == 16
    before.remove("fault-file")
    before.shutdown()
    r = storeval("testbed", "fault", "nfs", "start", "--dir", str(bed.dir))
    assert r.rc == 1 and "is running: nothing to start" in r.err


def test_a_crash_mid_write_loses_no_acknowledged_byte(bed: Bed):
    """Seed 000's server-off experiment on the NFS appliance: Ganesha killed 20 % into a write and started
    again 2 s later; under on_error retry the clients reconnect, and every block a write had acknowledged reads
    back intact (each nfs-rs write returns once committed)."""
    study = bed.base / "crash.yaml"
    study.write_text(yaml.safe_dump({
        "targets_from": str(bed.targets_file), "testbed": str(bed.dir),
        "workloads": {"off": {"bandwidth": {"file_size": "256MiB", "transfer_size": "4MiB", "phases": ["write"],
                                           "on_error": "retry", "retry_for": "2m"},
                              "faults": [{"target": "nfs", "at": "20%", "phase": "write", "action": "kill",
                                          "server": "nfs", "for": "2s", "expect": "ok"}]}}}))
    out = bed.base / "crash.json"
    r = storeval("run", str(study), "--json", str(out), "--no-html", "-q", "--results", str(bed.base / "results"),
                 cwd=bed.base, timeout=600)
    assert r.rc == 0, r.err
    doc = json.loads(out.read_text())
    (cell,) = doc["cells"]
    (write,) = cell["phases"]
    assert (cell["status"], write["status"], write["bytes"], write["ops"]) == ("ok", "ok", 256 * MiB, 64)
    assert write["errors"] and set(write["errors"]) <= {"reset", "timeout", "refused"}, write["errors"]
    check = write["written_check"]
    assert (check["bytes_checked"], check["bytes_intact"], check["bytes_lost"], check["bytes_corrupted"],
            check["bytes_unreadable"]) == (256 * MiB, 256 * MiB, 0, 0, 0)
    faults = [e for e in doc["events"] if e["kind"] == "fault"]
    assert len(faults) == 1 and "SIGKILL to nfs" in faults[0]["message"] and "started nfs again" in faults[0]["message"]
    assert not [e for e in doc["events"] if e["kind"] == "left-behind"]
    assert storeval("testbed", "status", "--dir", str(bed.dir)).out.startswith("nfs: running")


def test_metadata_goes_on_after_a_crash_under_retry(bed: Bed):
    """The metadata loop's operations follow the driver to its new connection after Ganesha comes back."""
    study = bed.base / "md-crash.yaml"
    study.write_text(yaml.safe_dump({
        "targets_from": str(bed.targets_file), "testbed": str(bed.dir),
        "workloads": {"md": {"metadata": {"items": 2000, "file_size": 100,
                                          "phases": ["file-create", "file-stat", "file-remove"],
                                          "on_error": "retry", "retry_for": "2m"},
                             "faults": [{"target": "nfs", "at": "30%", "phase": "file-create", "action": "kill",
                                         "server": "nfs", "for": "2s", "expect": "ok"}]}}}))
    out = bed.base / "md-crash.json"
    r = storeval("run", str(study), "--json", str(out), "--no-html", "-q", "--results", str(bed.base / "results"),
                 cwd=bed.base, timeout=600)
    assert r.rc == 0, r.err
    doc = json.loads(out.read_text())
    phases = {ph["phase"]: ph for ph in doc["cells"][0]["phases"]}
    assert [(ph["status"], ph["ops"]) for ph in phases.values()] == [("ok", 2000)] * 3
    assert phases["file-create"]["bytes"] == 2000 * 100 and phases["file-create"]["errors"]
    assert phases["file-stat"]["errors"] == phases["file-remove"]["errors"] == {}
    assert [n for n in os.listdir(bed.export) if n.startswith("storeval-2")] == []


# ------------------------------------------------------------------------------------------------ down (last)
def test_down_leaves_nothing(bed: Bed):
    pids = bed.pids()
    assert (bed.export.parent.parent / "recovery" / "v4recov").is_dir()  # Ganesha's client records: its own
    r = storeval("testbed", "down", "--dir", str(bed.dir), cwd=bed.base)
    assert r.rc == 0 and "nfs: stopped, data removed" in (r.out + r.err).splitlines(), r.out + r.err
    assert not bed.dir.exists() and not bed.targets_file.exists()
    assert not any(psutil.pid_exists(p) and psutil.Process(p).name() == "ganesha.nfsd" for p in pids)
    if not bed.run_dir_there:  # Ganesha made /run/ganesha at start: removed with the rest
        assert not os.path.lexists("/run/ganesha")
