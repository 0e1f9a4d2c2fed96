"""The Ceph testbed server, for real, through the `storeval` command: a one-host cluster (mon, mgr, 3 OSDs,
MDS, radosgw) comes up, studies run on CephFS (ceph-fuse) and on its S3 gateway with exact byte counts, an OSD
is killed while data stays readable and comes back, and `down` leaves nothing running, mounted or written —
also after an `up` killed half-way.

One cluster for the module (about 30 s to start, 15 s to stop); needs root, /dev/fuse and Debian's Ceph
packages (installed by `storeval testbed up ceph` when missing).
"""

from __future__ import annotations

import configparser
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from storeval.testbed.base import mounted, port_open

from .helpers import REPO, exposed, load_json, storeval

MiB = 1 << 20
SYSTEM_DIRS = ("/var/log/ceph", "/etc/ceph", "/var/lib/ceph", "/run/ceph")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse") or (shutil.which("ceph-mon") is None
                                                             and shutil.which("apt-get") is None),
    reason="needs root, /dev/fuse and Debian's Ceph packages (or apt-get to install them)")


def _system_files() -> set[str]:
    """Everything under the directories Ceph writes to by default (none of it may be new after `down`)."""
    out = set()
    for top in SYSTEM_DIRS:
        for base, dirs, files in os.walk(top):
            out.update(os.path.join(base, n) for n in dirs + files)
    return out


def _state(bed: Path) -> dict:
    return load_json(bed / "state.json")["servers"]["ceph"]


def _procs(bed: Path) -> list[dict]:
    return _state(bed)["procs"]


def _alive(p: dict) -> bool:
    """The recorded process is still running (same PID *and* start time, not a zombie)."""
    try:
        q = psutil.Process(p["pid"])
        return abs(q.create_time() - p["create_time"]) < 0.5 and q.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _mentioning(path: Path) -> list[str]:
    """Processes whose command line names ``path`` (none may outlive `down`)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if str(path) in cmd and p.info["pid"] != os.getpid():
            out.append(f"{p.info['pid']} {cmd}")
    return out


def _ceph(bed: Path, *args: str) -> dict:
    """What the cluster itself says (``ceph -c <conf> ARGS --format json``)."""
    out = subprocess.run(["ceph", "-c", str(bed / "ceph" / "ceph.conf"), "--connect-timeout", "30", *args,
                          "--format", "json"], capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out)


def _osds_up(bed: Path) -> dict[int, int]:
    return {o["osd"]: o["up"] for o in _ceph(bed, "osd", "dump")["osds"]}


def _s3(targets: dict):
    from obstore.store import S3Store

    t = targets["ceph-rgw"]
    cp = configparser.ConfigParser()
    cp.read(t["credentials_file"])
    return S3Store("storeval", endpoint=t["endpoint"], region=t["region"],
                   access_key_id=cp["default"]["aws_access_key_id"],
                   secret_access_key=cp["default"]["aws_secret_access_key"], virtual_hosted_style_request=False,
                   client_options={"allow_http": True, "timeout": "120s"})


def _poll(check, what: str, timeout: float = 180.0) -> None:
    """Generous bound for something the cluster does on its own (a busy machine makes Ceph slow)."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.5)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    base = tmp_path_factory.mktemp("ceph")
    bed = base / "bed"
    before = _system_files()
    r = storeval("testbed", "up", "ceph", "--dir", str(bed), cwd=base, timeout=1200)
    try:
        assert r.rc == 0, r.err
        yield {"base": base, "bed": bed, "up": r, "system_before": before}
    finally:
        if bed.exists():
            storeval("testbed", "down", "--dir", str(bed), cwd=base, timeout=300)


# ------------------------------------------------------------------------------------------------ settings
def test_bad_settings_are_one_line_and_start_nothing(tmp_path):
    for args, message in [
        (["--servers", "0"], "Invalid value for '--servers'"),
        (["--servers", "9"], "testbed ceph: servers must be a whole number of OSDs from 1 to 8 (got 9)"),
        (["--type", "x"], "testbed ceph: no setting 'type' (it takes: servers (OSDs of the cluster"),
    ]:
        r = storeval("testbed", "up", "ceph", *args, "--dir", str(tmp_path / "bed"), cwd=tmp_path)
        assert r.rc == 2 and len(r.err_lines) == 1 and message in r.err_lines[0], (args, r.err)
        assert not (tmp_path / "bed").exists() and not (tmp_path / "storeval-testbed.yaml").exists()


# ------------------------------------------------------------------------------------------------ the cluster
def test_up_writes_targets_and_everything_stays_on_loopback(cluster):
    base, bed = cluster["base"], cluster["bed"]
    state = _state(bed)
    names = [p["name"] for p in state["procs"]]
    assert names == ["mon.a", "mgr.x", "osd.0", "osd.1", "osd.2", "mds.a", "radosgw", "ceph-fuse"]
    assert all(_alive(p) for p in state["procs"])
    assert exposed([p["pid"] for p in state["procs"]]) == []

    root = bed / "ceph"
    mnt = root / "mnt"
    assert mounted(mnt)
    targets = yaml.safe_load((base / "storeval-testbed.yaml").read_text())["targets"]
    rgw = state["ports"]["rgw"]
    osd_pids = [p["pid"] for p in state["procs"] if p["name"].startswith("osd.")]
    radosgw = next(p["pid"] for p in state["procs"] if p["name"] == "radosgw")
    mds = next(p["pid"] for p in state["procs"] if p["name"] == "mds.a")
    cephfs = {"url": f"file://{mnt}/storeval", "server_pids": [*osd_pids, mds]}
    assert targets == {
        "ceph-rgw": {"url": "s3://storeval/storeval", "endpoint": f"http://127.0.0.1:{rgw}", "region": "us-east-1",
                     "credentials_file": str(root / "credentials"), "server_pids": [*osd_pids, radosgw]},
        "cephfs": cephfs}

    creds = root / "credentials"
    assert creds.stat().st_mode & 0o777 == 0o600
    cp = configparser.ConfigParser()
    cp.read(creds)
    secret = cp["default"]["aws_secret_access_key"]
    assert secret not in (base / "storeval-testbed.yaml").read_text() and secret not in (bed / "state.json").read_text()
    for p in state["procs"]:
        assert secret not in " ".join(psutil.Process(p["pid"]).cmdline())
    # every daemon reads the one ceph.conf under the root; the cluster has 3 OSDs up and in, pools of 3 copies
    conf = str(root / "ceph.conf")
    assert all(conf in psutil.Process(p["pid"]).cmdline() for p in state["procs"])
    assert _osds_up(bed) == {0: 1, 1: 1, 2: 1}
    pools = _ceph(bed, "osd", "pool", "ls", "detail")
    assert {p["pool_name"] for p in pools} >= {"cephfs.cephfs.meta", "cephfs.cephfs.data", "default.rgw.meta"}
    assert {(p["size"], p["min_size"]) for p in pools} == {(3, 2)}

    status = storeval("testbed", "status", "--dir", str(bed), cwd=base)
    assert status.rc == 0 and status.out.startswith("ceph: running — mon.a pid"), status.out
    assert "cluster: 3 of 3 OSDs up, 3 in; CephFS mounted on" in status.out
    faults = storeval("testbed", "faults", "--dir", str(bed), cwd=base)
    assert [line.split()[:2] for line in faults.out.splitlines()] == [
        ["ceph", "stop,cont,kill"], *[[f"ceph.osd{n}", "stop,cont,kill,start,restart"] for n in (1, 2, 3)]]


def _cells(doc: dict) -> dict:
    out = {}
    for cell in doc["cells"]:
        assert cell["status"] == "ok", cell["error"]
        out[(cell["target"], cell["workload"])] = {p["phase"]: (p["bytes"], p["ops"]) for p in cell["phases"]
                                                   if p["status"] == "ok"}
    return out


def test_bandwidth_on_cephfs_and_s3_and_metadata_on_cephfs(cluster):
    base = cluster["base"]
    # CephFS reports no inode limit (statvfs f_files = inodes in use, f_favail = -1): the preflight passes it
    bw = storeval("run", "storeval-testbed.yaml", "--workload", "bandwidth", "--clients", "1",
                  "--set", "file_size=4MiB", "--json", "bw.json", cwd=base, timeout=600)
    assert bw.rc == 0, bw.err
    cells = _cells(load_json(base / "bw.json"))
    for target in ("cephfs", "ceph-rgw"):
        assert cells[(target, "bandwidth")] == {"write": (4 * MiB, 4), "read": (4 * MiB, 4)}, target

    md = storeval("run", "storeval-testbed.yaml", "--target", "cephfs", "--workload", "metadata", "--clients", "1",
                  "--set", "file_size=4KiB", "--json", "md.json", cwd=base, timeout=600)
    assert md.rc == 0, md.err
    assert _cells(load_json(base / "md.json"))[("cephfs", "metadata")] == {
        "tree-create": (0, 1), "dir-create": (0, 100), "dir-stat": (0, 100), "dir-remove": (0, 100),
        "file-create": (100 * 4096, 100), "file-stat": (0, 100), "file-read": (100 * 4096, 100),
        "file-remove": (0, 100), "tree-remove": (0, 1)}


def test_a_killed_osd_keeps_data_readable_and_comes_back(cluster):
    import obstore

    base, bed = cluster["base"], cluster["bed"]
    targets = yaml.safe_load((base / "storeval-testbed.yaml").read_text())["targets"]
    store = _s3(targets)
    mnt = Path(targets["cephfs"]["url"][len("file://"):])
    before = os.urandom(3 * MiB + 17)
    obstore.put(store, "storeval/fault/before.bin", before)
    (mnt / "before.bin").write_bytes(before)
    osd0 = next(p for p in _procs(bed) if p["name"] == "osd.0")

    kill = storeval("testbed", "fault", "ceph.osd1", "kill", "--dir", str(bed), cwd=base)
    assert kill.rc == 0 and kill.out.strip() == f"SIGKILL to ceph osd1 (pid {osd0['pid']})", kill.out + kill.err
    assert not _alive(osd0)
    _poll(lambda: _osds_up(bed) == {0: 0, 1: 1, 2: 1}, "the monitor marks osd.0 down")
    # size 3, min_size 2: with one OSD gone, what was written stays readable and new writes work
    assert obstore.get(store, "storeval/fault/before.bin").bytes().to_bytes() == before
    after = os.urandom(2 * MiB + 5)
    obstore.put(store, "storeval/fault/after.bin", after)
    assert obstore.get(store, "storeval/fault/after.bin").bytes().to_bytes() == after
    assert (mnt / "before.bin").read_bytes() == before
    (mnt / "after.bin").write_bytes(after)
    with open(mnt / "after.bin", "rb+") as f:
        os.fsync(f.fileno())
    assert (mnt / "after.bin").read_bytes() == after
    status = storeval("testbed", "status", "--dir", str(bed), cwd=base)
    assert "ceph: DOWN — mon.a pid" in status.out and f"osd.0 pid {osd0['pid']} DOWN (exited)" in status.out
    assert "(NAME: ceph.osd1)" in status.out and "cluster: 2 of 3 OSDs up, 3 in" in status.out, status.out

    start = storeval("testbed", "fault", "ceph.osd1", "start", "--dir", str(bed), cwd=base, timeout=600)
    assert start.rc == 0, start.err
    again = next(p for p in _procs(bed) if p["name"] == "osd.0")
    assert again["pid"] != osd0["pid"] and _alive(again) and f"(pid {again['pid']})" in start.out
    assert [p["name"] for p in _procs(bed)][2] == "osd.0"  # in its old slot
    assert _osds_up(bed) == {0: 1, 1: 1, 2: 1}  # the cluster says so: `start` returned once it was up
    assert exposed([again["pid"]]) == []
    assert obstore.get(store, "storeval/fault/before.bin").bytes().to_bytes() == before
    obstore.delete(store, ["storeval/fault/before.bin", "storeval/fault/after.bin"])
    for name in ("before.bin", "after.bin"):
        (mnt / name).unlink()


def test_an_osd_killed_during_writes_heals_by_the_placement_groups_own_word(cluster):
    """Issue 35: osd.0 killed for 3 s while two clients write to CephFS. storeval reads the monitor's placement
    groups once a second, keeps the files until every one is active+clean again, and counts the bytes the PGs
    themselves say they recovered."""
    base, bed = cluster["base"], cluster["bed"]

    def clean() -> bool:  # the OSD the test before killed is back: its placement groups first recover
        st = _ceph(bed, "pg", "stat")
        return [s["name"] for s in st.get("pg_summary", st)["num_pg_by_state"]] == ["active+clean"]

    _poll(clean, "every placement group active+clean before the fault", timeout=300)
    study = base / "heal.yaml"
    study.write_text(yaml.safe_dump({
        "targets_from": {"file": "storeval-testbed.yaml", "only": ["cephfs"]}, "testbed": str(bed), "clients": [2],
        "workloads": {"bw": {"bandwidth": {"file_size": "64MiB", "transfer_size": "1MiB", "phases": ["write"],
                                           "rate": "8MiB/s"},
                             "faults": [{"at": "10%", "phase": "write", "action": "kill", "server": "ceph.osd1",
                                         "for": "3s", "heal_timeout": "5m"}]}}}))
    out = base / "heal.json"
    r = storeval("run", str(study), "--json", str(out), "--no-html", cwd=base, timeout=900)
    assert r.rc == 0, r.err
    (cell,) = load_json(out)["cells"]
    (ph,) = cell["phases"]
    assert cell["status"] == "ok" and ph["written_check"]["bytes_intact"] == ph["bytes"] == 2 * 64 * MiB
    (f,) = ph["timeline"]["faults"]
    h = f["healing"]
    assert h["unit"] == "placement groups" and h["source"].startswith("ceph pg dump")
    assert h["pending_before"] == 0 and h["max_pending"] >= 1 and h["pending_at_end"] == 0 and h["down_at_end"] == []
    assert any(s[2] == 1 for s in h["samples"])  # the monitor said osd.0 was down
    assert h["back_after_s"] >= 3.0 and h["healed_after_s"] >= h["back_after_s"]
    assert h["heal_s"] == pytest.approx(h["healed_after_s"] - h["back_after_s"])
    assert h["parts"]["pgs_by_state"] == {"active+clean": sum(h["parts"]["pgs_by_state"].values())}
    # what the PGs recovered: at most what was written while osd.0 was away, three copies of it at most
    assert 0 < h["bytes_moved"] <= 3 * 2 * 64 * MiB and all(k.startswith("pg ") for k in h["bytes_by_part"])
    assert _osds_up(bed) == {0: 1, 1: 1, 2: 1}
    assert clean() and "placement groups to heal" in f["message"] and "Healing — what each system repaired" in r.out


def test_down_stops_unmounts_and_removes_everything(cluster):
    base, bed = cluster["base"], cluster["bed"]
    procs = _procs(bed)
    ports = list(_state(bed)["ports"].values())
    assert exposed([p["pid"] for p in procs]) == []
    root = bed / "ceph"
    # a user's files beside Ceph's logs, sockets and configuration are not Ceph's: they stay, named
    planted = [root / "notes.txt", root / "log" / "notes.txt", root / "run" / "notes.txt"]
    for path in planted:
        path.write_text("mine")
    down = storeval("testbed", "down", "--dir", str(bed), cwd=base, timeout=300)
    assert down.rc == 0 and len(down.err_lines) == 1, down.err
    assert down.err_lines[0].startswith("ceph: stopped; left ") and all(str(p) in down.err for p in planted)
    assert not [p for p in procs if _alive(p)] and _mentioning(bed) == []
    assert not mounted(root / "mnt") and str(bed) not in Path("/proc/self/mountinfo").read_text()
    assert not [port for port in ports if port_open(port)]
    assert {str(p.relative_to(root)) for p in root.rglob("*")} == {
        ".storeval-testbed", "notes.txt", "log", "log/notes.txt", "run", "run/notes.txt"}
    for path in planted:
        path.unlink()
    again = storeval("testbed", "down", "--dir", str(bed), cwd=base, timeout=300)
    assert again.rc == 0 and again.err_lines == ["ceph: nothing was running, data removed"], again.err
    assert not bed.exists() and not (base / "storeval-testbed.yaml").exists()
    assert _system_files() - cluster["system_before"] == set()


def test_down_after_a_killed_up_removes_the_rest(tmp_path):
    """`up` SIGKILLed once its OSDs are being made: the next `down` finds every process it had started."""
    bed = tmp_path / "bed"
    before = _system_files()
    up = subprocess.Popen([sys.executable, "-m", "storeval", "testbed", "up", "ceph", "--servers", "1",
                           "--dir", str(bed)], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    recorded: list[dict] = []

    def osd_recorded() -> bool:
        try:
            recorded[:] = _procs(bed)
        except (OSError, ValueError, KeyError):
            return False
        return any(p["name"].startswith(("osd.", "mkfs.osd")) for p in recorded)

    try:
        _poll(lambda: osd_recorded() or up.poll() is not None, "up records an OSD")
    finally:
        up.send_signal(signal.SIGKILL)
        up.wait()
    recorded = _procs(bed)
    down = storeval("testbed", "down", "--dir", str(bed), cwd=tmp_path, timeout=300)
    assert down.rc == 0, down.err
    assert not [p for p in recorded if _alive(p)] and _mentioning(bed) == []
    assert not bed.exists() and not (tmp_path / "storeval-testbed.yaml").exists()
    assert str(bed) not in Path("/proc/self/mountinfo").read_text()
    assert _system_files() - before == set()
