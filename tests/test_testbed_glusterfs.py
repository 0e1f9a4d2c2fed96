"""The GlusterFS testbed server for real: a volume over bricks on 127.0.0.1 (in glusterd's own network namespace),
FUSE-mounted, measured by storeval's posix driver, bricks killed and started again, everything removed by down.

Needs root (FUSE mount, network namespace) and Debian's glusterfs-server/-client (installed by `testbed up`).
One replicated volume is shared by most tests; the distribute, bad-option and killed-`up` tests make their own.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from storeval.testbed.base import mounted

from .helpers import REPO, exposed, load_json, storeval
from .test_mpi import mpirun, needs_mpiexec

MiB = 1 << 20
SYSTEM_TREES = ("/var/lib/glusterd", "/var/log/glusterfs", "/var/run/gluster")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="GlusterFS needs root (a FUSE mount, a network namespace)"),
    pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="no /dev/fuse"),
    pytest.mark.skipif(shutil.which("glusterd") is None and shutil.which("apt-get") is None,
                       reason="glusterfs-server is not installed and there is no apt-get to install it"),
]


def system_files() -> set[str]:
    """Every path under the directories glusterd writes to outside a testbed, plus its default CLI socket."""
    out = {p for p in ("/var/run/glusterd.socket",) if os.path.lexists(p)}
    for top in SYSTEM_TREES:
        for where, dirs, files in os.walk(top):
            out.update(os.path.join(where, n) for n in dirs + files)
    return out


def state_of(d: Path) -> dict:
    return json.loads((d / "state.json").read_text())["servers"]["glusterfs"]


def living(pids: list[int]) -> list[int]:
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_for(check, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"{what}: not within {timeout:g} s")


def brick_status(d: Path) -> dict[str, bool]:
    """What glusterd itself says of each brick (online or not), through the testbed's own CLI socket."""
    from storeval.testbed import Testbed

    g = d / "glusterfs"
    sock = Testbed(d).load()["glusterfs"].sock_file  # in the server's short home under /var/tmp
    out = subprocess.run(["gluster", "--mode=script", f"--glusterd-sock={sock}",
                          f"--log-file={g / 'log' / 'cli.log'}", "volume", "status", "storeval", "--xml"],
                         capture_output=True, text=True, timeout=120).stdout
    import xml.etree.ElementTree as ET

    return {n.findtext("path"): n.findtext("status") == "1" for n in ET.fromstring(out).iter("node")
            if n.findtext("hostname") != "Self-heal Daemon"}


def uncached_read(path: Path) -> bytes:
    """Read a file after dropping its pages from the client's page cache, so the bytes come from the bricks."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        return os.read(fd, os.fstat(fd).st_size + 1)
    finally:
        os.close(fd)


def down_and_check(cwd: Path, d: Path, pids: list[int], mnt: Path, before: set[str]) -> None:
    mine = sockets_of(pids)  # what our processes serve in glusterd's shared directories (brick sockets)
    r = storeval("testbed", "down", "--dir", str(d), cwd=cwd, timeout=300)
    assert r.rc == 0, r.err
    assert not mounted(mnt)
    assert wait_for(lambda: not living(pids), 30, "every recorded process gone") is True
    assert not d.exists()
    assert not (cwd / "storeval-testbed.yaml").exists()
    left = system_files() - before
    assert not left & mine, left & mine
    assert not_ours(left) == set()


def sockets_of(pids: list[int]) -> set[str]:
    """The UNIX socket paths under glusterd's run directory that these processes were started with (``-S``)."""
    out = set()
    for pid in pids:
        try:
            out.update(a for a in psutil.Process(pid).cmdline() if a.startswith("/var/run/gluster/"))
        except psutil.Error:
            pass
    return out


def not_ours(left: set[str]) -> set[str]:
    """What stays of ``left`` once other GlusterFS testbeds of the suite may own it: they run in other workers
    beside this test and share glusterd's system directories (a brick one of them killed leaves its socket until
    that testbed is brought down), so while another glusterd runs nothing there is this test's to judge beyond
    its own processes' sockets (checked apart)."""
    others = any(p.info["name"] == "glusterd" for p in psutil.process_iter(["name"]))
    return set() if others else left


# ------------------------------------------------------------------------------------------- the replicated volume
@pytest.fixture(scope="module")
def replicated(tmp_path_factory):
    """`storeval testbed up glusterfs --servers 3 --type replicate`, through the command; down at the end."""
    cwd = tmp_path_factory.mktemp("gluster-replica")
    d = cwd / "bed"
    before = system_files()
    r = storeval("testbed", "up", "glusterfs", "--servers", "3", "--type", "replicate", "--dir", str(d), cwd=cwd,
                 timeout=900)
    try:
        assert r.rc == 0, r.err
        yield cwd, d, before
    finally:
        storeval("testbed", "down", "--dir", str(d), cwd=cwd, timeout=300)


def test_replicated_volume_is_recorded_and_mounted(replicated):
    cwd, d, _ = replicated
    st = state_of(d)
    info = st["info"]
    mnt = d / "glusterfs" / "mnt"
    assert (info["volume"], info["type"], info["replica"]) == ("storeval", "replicate", 3)
    assert [b["path"] for b in info["bricks"]] == [str(d / "glusterfs" / "bricks" / f"brick{i}") for i in (1, 2, 3)]
    assert [p["name"] for p in st["procs"]] == ["glusterd", "brick1", "brick2", "brick3", "self-heal daemon",
                                                "fuse client"]
    assert [b["proc"] for b in info["bricks"]] == [1, 2, 3]
    assert info["mounts"] == [str(mnt)] and mounted(mnt)
    for p in st["procs"]:  # each recorded process is the one glusterd and the mount started
        cmd = psutil.Process(p["pid"]).cmdline()
        assert {"glusterd": "glusterd", "fuse client": "/usr/sbin/glusterfs"}.get(
            p["name"], "/usr/sbin/glusterfs" if p["name"] == "self-heal daemon" else "/usr/sbin/glusterfsd") == cmd[0]
    assert brick_status(d) == {b["path"]: True for b in info["bricks"]}
    targets = yaml.safe_load((cwd / "storeval-testbed.yaml").read_text())["targets"]
    assert targets["glusterfs"]["url"] == f"file://{mnt}/storeval"
    assert set(targets["glusterfs"]) == {"url", "server_pids"}
    # glusterd, the bricks and the self-heal daemon: what the servers moved is counted at them
    assert targets["glusterfs"]["server_pids"] == [p["pid"] for p in st["procs"][:5]]
    status = storeval("testbed", "status", "--dir", str(d), cwd=cwd)
    assert status.rc == 0 and status.out.startswith("glusterfs: running — ")
    assert ("volume storeval (replica 3): brick1 online, brick2 online, brick3 online; "
            f"mounted at {mnt}") in status.out


def test_every_process_listens_on_loopback_inside_its_own_namespace(replicated):
    _, d, _ = replicated
    st = state_of(d)
    pids = [p["pid"] for p in st["procs"]]
    assert exposed(pids) == []
    mine = os.stat("/proc/self/ns/net").st_ino
    namespaces = {os.stat(f"/proc/{pid}/ns/net").st_ino for pid in pids}
    assert namespaces == {st["info"]["netns"]} and mine not in namespaces
    ss = subprocess.run(["nsenter", f"--net=/proc/{pids[0]}/ns/net", "ss", "-ltnuHp"], capture_output=True, text=True,
                        timeout=60)
    assert ss.returncode == 0, ss.stderr
    listening = [line.split()[4] for line in ss.stdout.splitlines() if line.strip()]
    assert len(listening) >= 4  # glusterd's 24007 and one port per brick
    assert all(addr.rsplit(":", 1)[0] == "127.0.0.1" for addr in listening), listening
    assert "127.0.0.1:24007" in listening


def test_storeval_run_against_the_targets_file(replicated):
    cwd, d, _ = replicated
    out = cwd / "run.json"
    r = storeval("run", "storeval-testbed.yaml", "--workload", "bandwidth", "--workload", "metadata", "--clients", "2",
                 "--set", "bandwidth.file_size=4MiB", "--set", "metadata.file_size=4KiB", "--set", "metadata.items=20",
                 "--json", str(out), "--quiet", "--no-html", cwd=cwd, timeout=900)
    assert r.rc == 0, r.err
    doc = load_json(out)
    cells = {c["workload"]: c for c in doc["cells"]}
    assert set(cells) == {"bandwidth", "metadata"} and all(c["status"] == "ok" for c in cells.values())
    bw = {p["phase"]: (p["bytes"], p["ops"]) for p in cells["bandwidth"]["phases"]}
    assert bw == {"write": (2 * 4 * MiB, 8), "read": (2 * 4 * MiB, 8)}
    md = {p["phase"]: (p["bytes"], p["ops"]) for p in cells["metadata"]["phases"]}
    assert md["file-create"] == md["file-read"] == (2 * 20 * 4096, 40)
    assert md["file-stat"] == md["file-remove"] == (0, 40)
    targets = yaml.safe_load((cwd / "storeval-testbed.yaml").read_text())["targets"]
    assert "server_pids" in targets["glusterfs"]  # the bricks wrote every byte three times (replica 3)
    write = next(p for p in cells["bandwidth"]["phases"] if p["phase"] == "write")
    assert 2.9 <= write["write_amplification"] <= 3.3
    assert os.listdir(d / "glusterfs" / "mnt" / "storeval") == []  # storeval removed its files


def test_killed_brick_reads_go_on_and_start_brings_it_back(replicated):
    cwd, d, _ = replicated
    mnt = d / "glusterfs" / "mnt"
    data = os.urandom(3 * MiB)
    before_kill = mnt / "storeval" / "before-kill.bin"
    before_kill.write_bytes(data)
    old = state_of(d)["procs"][1]

    r = storeval("testbed", "fault", "glusterfs.brick1", "kill", "--dir", str(d), cwd=cwd)
    assert r.rc == 0 and r.out.strip() == f"SIGKILL to glusterfs brick1 (pid {old['pid']})", r.err
    bricks = state_of(d)["info"]["bricks"]
    assert wait_for(lambda: brick_status(d) == {bricks[0]["path"]: False, bricks[1]["path"]: True,
                                                bricks[2]["path"]: True}, 60, "glusterd sees brick1 offline")
    assert uncached_read(before_kill) == data  # from the two bricks left
    during = os.urandom(1 * MiB)
    (mnt / "storeval" / "during-outage.bin").write_bytes(during)  # writes go on too (two copies)
    status = storeval("testbed", "status", "--dir", str(d), cwd=cwd)
    assert status.out.startswith("glusterfs: DOWN — ") and f"brick1 pid {old['pid']} DOWN (exited)" in status.out
    assert "brick1 OFFLINE, brick2 online, brick3 online" in status.out
    assert "`storeval testbed fault NAME start` starts it again with its data (NAME: glusterfs.brick1)" in status.out

    r = storeval("testbed", "fault", "glusterfs.brick1", "start", "--dir", str(d), cwd=cwd, timeout=300)
    new = state_of(d)["procs"][1]
    assert r.rc == 0 and r.out.strip().startswith(f"started glusterfs brick1 again (pid {new['pid']})"), r.err
    assert new["pid"] != old["pid"] and new["name"] == "brick1"
    assert "--brick-name" in (cmd := psutil.Process(new["pid"]).cmdline()) and cmd[cmd.index("--brick-name") + 1] \
        == bricks[0]["path"]
    assert brick_status(d) == {b["path"]: True for b in bricks}
    status = storeval("testbed", "status", "--dir", str(d), cwd=cwd)
    assert status.out.startswith("glusterfs: running — ") and "brick1 online, brick2 online, brick3 online" in status.out
    assert uncached_read(mnt / "storeval" / "during-outage.bin") == during
    # the self-heal daemon copies what brick1 missed onto it
    healed = Path(bricks[0]["path"]) / "storeval" / "during-outage.bin"
    wait_for(lambda: healed.exists() and healed.read_bytes() == during, 300, "self-heal of brick1", interval=1)
    for name in ("before-kill.bin", "during-outage.bin"):
        (mnt / "storeval" / name).unlink()


# ------------------------------------------------------------------------------------------- healing
def _heal_study(cwd: Path, d: Path, at: str) -> Path:
    """Two clients write 128 MiB each at 16 MiB/s (8 s); brick2 is killed for 1 s early on; storeval waits up to
    5 min after the phase for the volume to heal, keeping the files meanwhile."""
    study = cwd / f"heal-{at}.yaml"
    study.write_text(yaml.safe_dump({
        "testbed": str(d), "targets": {"glusterfs": {"url": f"file://{d}/glusterfs/mnt/storeval"}}, "clients": [2],
        "workloads": {"bw": {"bandwidth": {"file_size": "128MiB", "transfer_size": "1MiB", "phases": ["write"],
                                           "rate": "16MiB/s"},
                             "faults": [{"at": at, "phase": "write", "action": "kill", "server": "glusterfs.brick2",
                                         "for": "1s", "heal_timeout": "5m"}]}}}))
    return study


def _check_heal(doc: dict, d: Path) -> dict:
    """What every heal run must show, whichever engine ran it; the fault's figures."""
    from storeval.testbed.faults import healing

    (cell,) = doc["cells"]
    (ph,) = cell["phases"]
    assert cell["status"] == "ok" and ph["status"] == "ok", cell.get("error")
    assert ph["written_check"]["bytes_intact"] == ph["bytes"] == 2 * 128 * MiB
    (f,) = ph["timeline"]["faults"]
    h = f["healing"]
    assert h["unit"] == "entries" and h["source"].startswith("gluster volume heal info summary (glfsheal)")
    before = h["pending_before"]
    assert before is not None and h["samples"][0][2] == 1  # the first reading: brick2 down
    assert h["detected_after_s"] == pytest.approx(h["samples"][0][0], abs=1e-3) and h["max_pending"] > before
    assert h["back_after_s"] >= 1.0 and h["healed_after_s"] >= h["back_after_s"]  # for: 1s, then `start`
    assert h["heal_s"] == pytest.approx(h["healed_after_s"] - h["back_after_s"])
    assert h["pending_at_end"] <= before and h["down_at_end"] == [] and h["samples"][-1][1:] == [h["pending_at_end"], 0]
    assert list(h["bytes_by_part"]) and all(k.startswith("self-heal daemon pid ") for k in h["bytes_by_part"])
    assert h["bytes_moved"] == sum(h["bytes_by_part"].values()) >= 0
    # the volume says so itself now: every brick connected, nothing more to heal than before the fault
    now = healing(d, "glusterfs.brick2")
    assert now["down"] == [] and now["pending"] <= before and all(b["connected"] for b in now["parts"].values())
    # the clients' rate while it healed, from the part's return, beside the healthy one
    assert f["baseline_MiBps"] == pytest.approx(32.0, rel=0.1)
    inside = min(f["start_s"] + h["healed_after_s"], ph["timeline"]["seconds"]) - (f["start_s"] + h["back_after_s"])
    assert f["healing_in_phase_s"] == pytest.approx(max(0.0, inside))
    assert (f["healing_MiBps"] is not None) == (f["healing_in_phase_s"] >= 0.05), str(f)
    return f


def test_a_brick_killed_during_writes_heals_and_the_rate_while_healing_stands_beside_the_healthy_one(replicated):
    """Seed 002 fig. 12: brick2 of a replica-3 volume killed for 1 s while two clients write. storeval reads the
    volume's own heal info once a second (glfsheal, as `gluster volume heal VOL info summary`), keeps the files
    until it says it is whole again, and puts the time to heal and the clients' rate while healing in one table
    with the healthy rate."""
    cwd, d, _ = replicated
    out = cwd / "heal.json"
    r = storeval("run", str(_heal_study(cwd, d, "10%")), "--json", str(out), "--results", str(cwd / "res"), cwd=cwd,
                 timeout=900)
    assert r.rc == 0, r.err
    f = _check_heal(load_json(out), d)
    h = f["healing"]
    table = r.out[r.out.index("Healing — what each system repaired after its fault"):]
    assert "glusterfs.brick2" in table and f"{h['max_pending']:,} entries" in table
    assert f"healed {h['healed_after_s']:.1f} s after it, {h['heal_s']:.1f} s after it was back" in f["message"]
    page = next((cwd / "res").glob("report-*.html")).read_text()
    assert 'id="heal-table"' in page and "moved to heal" in page
    assert os.listdir(d / "glusterfs" / "mnt" / "storeval") == []  # the files went once it had healed


@needs_mpiexec
def test_under_mpiexec_the_ranks_keep_the_files_until_the_volume_healed(replicated):
    """The same under ``mpiexec -n 2``: rank 0's own client waits for the coordinator's release, the other rank at
    a barrier after it (MpiComm.hold)."""
    cwd, d, _ = replicated
    out = cwd / "heal-mpi.json"
    r = mpirun(2, "run", str(_heal_study(cwd, d, "1s")), "--json", str(out), "--results", str(cwd / "res-mpi"),
               cwd=cwd)
    assert r.returncode == 0, r.stderr
    doc = load_json(out)
    assert doc["engine"] == "mpi"
    _check_heal(doc, d)
    assert os.listdir(d / "glusterfs" / "mnt" / "storeval") == []


# ------------------------------------------------------------------------------------------- other volumes
def test_distribute_spreads_whole_files_over_both_bricks_beside_another_volume(tmp_path, replicated):
    _, other, _ = replicated  # a second testbed's glusterd runs meanwhile: each keeps to its own
    other_state = state_of(other)
    d = tmp_path / "bed"
    before = system_files()
    r = storeval("testbed", "up", "glusterfs", "--servers", "2", "--dir", str(d), cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    st = state_of(d)
    try:
        assert (st["info"]["type"], st["info"]["replica"], len(st["info"]["bricks"])) == ("distribute", 1, 2)
        assert st["info"]["netns"] != other_state["info"]["netns"]
        assert brick_status(d) == {b["path"]: True for b in st["info"]["bricks"]}
        assert brick_status(other) == {b["path"]: True for b in other_state["info"]["bricks"]}
        assert [p["name"] for p in st["procs"]] == ["glusterd", "brick1", "brick2", "fuse client"]  # no self-heal
        mnt = d / "glusterfs" / "mnt"
        names = [f"f{i:02d}" for i in range(40)]
        for i, name in enumerate(names):
            (mnt / "storeval" / name).write_bytes(bytes([i]) * (1000 + i))
        on = {b["name"]: sorted(os.listdir(Path(b["path"]) / "storeval")) for b in st["info"]["bricks"]}
        assert sorted(on["brick1"] + on["brick2"]) == names  # each file whole on exactly one brick
        assert on["brick1"] and on["brick2"], on
        for b in st["info"]["bricks"]:
            for name in on[b["name"]]:
                assert (Path(b["path"]) / "storeval" / name).stat().st_size == 1000 + names.index(name)
    finally:
        down_and_check(tmp_path, d, [p["pid"] for p in st["procs"]], d / "glusterfs" / "mnt", before)
    assert brick_status(other) == {b["path"]: True for b in other_state["info"]["bricks"]}
    assert mounted(other / "glusterfs" / "mnt") and not living([p["pid"] for p in st["procs"]])


def test_disperse_stores_a_fragment_of_every_file_on_each_brick(tmp_path):
    d = tmp_path / "bed"
    before = system_files()
    r = storeval("testbed", "up", "glusterfs", "--servers", "3", "--type", "disperse", "--dir", str(d), cwd=tmp_path,
                 timeout=900)
    assert r.rc == 0, r.err
    st = state_of(d)
    try:
        info = st["info"]
        assert (info["type"], info["disperse"], info["redundancy"]) == ("disperse", 3, 1)
        mnt = d / "glusterfs" / "mnt"
        data = os.urandom(2 * MiB)
        (mnt / "storeval" / "f").write_bytes(data)
        # two data fragments and one of redundancy: half the file on each of the three bricks
        sizes = [(Path(b["path"]) / "storeval" / "f").stat().st_size for b in info["bricks"]]
        assert sizes == [MiB, MiB, MiB]
        assert uncached_read(mnt / "storeval" / "f") == data
    finally:
        down_and_check(tmp_path, d, [p["pid"] for p in st["procs"]], d / "glusterfs" / "mnt", before)


def test_down_removes_everything_it_made(replicated):
    cwd, d, before = replicated
    st = state_of(d)
    pids = [p["pid"] for p in st["procs"]]
    planted = d / "glusterfs" / "notes.txt"  # a user's file beside the bricks stays, and so does what holds it
    planted.write_text("mine")
    r = storeval("testbed", "down", "--dir", str(d), cwd=cwd, timeout=300)
    assert r.rc == 0 and f"left {planted} (not created by storeval or its server)" in " ".join(r.err.split()), r.err
    assert planted.read_text() == "mine" and sorted(os.listdir(d / "glusterfs")) == [".storeval-testbed", "notes.txt"]
    assert not mounted(d / "glusterfs" / "mnt") and not living(pids)
    planted.unlink()
    down_and_check(cwd, d, pids, d / "glusterfs" / "mnt", before)


@pytest.mark.parametrize("args, line", [
    (["--type", "raid5"], "error: testbed glusterfs: no volume type 'raid5' (choose distribute, replicate, disperse)"),
    (["--servers", "5", "--type", "replicate"],
     "error: testbed glusterfs: a replicate volume keeps a copy on every brick and takes 2 or 3 servers, not 5 "
     "(--servers 3, or --type distribute or disperse)"),
    (["--servers", "2", "--type", "disperse"],
     "error: testbed glusterfs: a disperse volume takes 3 or more servers, not 2 (--servers 3)"),
    (["--servers", "9"], "error: testbed glusterfs: servers (bricks) must be a whole number from 1 to 8, not 9"),
])
def test_bad_options_start_nothing(tmp_path, args, line):
    r = storeval("testbed", "up", "glusterfs", *args, "--dir", str(tmp_path / "bed"), cwd=tmp_path)
    assert (r.rc, r.err_lines) == (2, [line])
    assert os.listdir(tmp_path) == []


def test_a_directory_glusterd_cannot_name_is_refused_in_one_line(tmp_path):
    d = tmp_path / "with space" / "bed"
    d.parent.mkdir()
    r = storeval("testbed", "up", "glusterfs", "--dir", str(d), cwd=tmp_path, timeout=900)
    assert r.rc == 1 and r.err_lines[-1] == (f"error: glusterfs: {d}/glusterfs holds a space or one of :,;\"'# which "
                                             "glusterd's volume files and brick names cannot carry; choose a --dir "
                                             "without them")
    assert sorted(os.listdir(d)) == [".storeval-testbed", "state.json"]  # no server directory, nothing started
    assert storeval("testbed", "down", "--dir", str(d), cwd=tmp_path).rc == 0 and not d.exists()


def test_check_options_fills_defaults_and_checks_redundancy():
    from storeval.testbed.base import TestbedOptionError
    from storeval.testbed.glusterfs import GlusterServer

    assert GlusterServer.check_options({}) == {"servers": 3, "type": "distribute"}
    assert GlusterServer.check_options({"type": "disperse", "servers": 5}) == {"servers": 5, "type": "disperse",
                                                                                "redundancy": 1}
    for bad in ({"type": "disperse", "servers": 4, "redundancy": 2}, {"type": "replicate", "redundancy": 1},
                {"servers": 3, "replica": 3}):
        with pytest.raises(TestbedOptionError) as e:
            GlusterServer.check_options(bad)
        assert e.value.exit_code == 2 and "\n" not in str(e.value)


def kill_once_mounted(up: subprocess.Popen, mnt: Path, timeout: float) -> bool:
    """SIGKILL ``up`` the moment ``mnt`` is mounted (woken by the mount table's own change notice); False if it
    ended first."""
    with open("/proc/self/mountinfo", "rb") as table:
        watch = select.poll()
        watch.register(table, select.POLLPRI | select.POLLERR)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            table.seek(0)
            table.read()  # re-arms the notice
            if up.poll() is not None:
                return False
            if mounted(mnt):
                up.send_signal(signal.SIGKILL)
                up.wait(timeout=30)
                return up.returncode == -signal.SIGKILL
            watch.poll(50)
    raise AssertionError(f"{mnt} not mounted within {timeout:g} s")


def test_down_after_a_killed_up_removes_everything(tmp_path):
    before = system_files()
    for attempt in range(3):  # `up` has little left to do once mounted: if it finishes first, nothing was tested
        d = tmp_path / f"bed{attempt}"
        mnt = d / "glusterfs" / "mnt"
        up = subprocess.Popen([sys.executable, "-m", "storeval", "testbed", "up", "glusterfs", "--servers", "2",
                               "--type", "replicate", "--dir", str(d)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(REPO)})
        try:
            killed = kill_once_mounted(up, mnt, 300)
        finally:
            if up.poll() is None:
                up.kill()
                up.wait()
        if killed:
            break
        assert up.returncode == 0, up.stderr.read().decode(errors="replace")
        assert storeval("testbed", "down", "--dir", str(d), cwd=tmp_path, timeout=300).rc == 0
    else:
        pytest.fail("`storeval testbed up` finished before it could be killed three times")
    st: dict = {"procs": []}
    ours: list[int] = []
    try:
        st = state_of(d)
        assert st["info"]["mounts"] == [str(mnt)] and mounted(mnt)
        # what runs for it: everything in glusterd's network namespace (the FUSE client may not be recorded yet)
        netns = st["info"]["netns"]
        ours = [p.pid for p in psutil.process_iter() if p.pid != os.getpid()
                and os.path.exists(f"/proc/{p.pid}/ns/net") and os.stat(f"/proc/{p.pid}/ns/net").st_ino == netns]
        assert len(ours) >= 4  # glusterd, two bricks, self-heal daemon, FUSE client
    finally:
        down_and_check(tmp_path, d, ours + [p["pid"] for p in st["procs"]], mnt, before)
