"""The testbed deletes only what it created (issue 12, case 2), and `testbed status` says what is true.

A cheap stand-in server (a Python process that writes "data" files into the directory it is given and
listens on a port) goes through the real ``storeval testbed`` command: user files planted around and inside
the testbed directory must come out byte for byte identical, whatever is done to the directory or its state.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from storeval.testbed import SERVERS, Testbed
from storeval.testbed import cgroups
from storeval.testbed.base import Server, free_port, port_open
from storeval.testbed.owned import MARKER, Ledger, NotOwned, _id_path

from .helpers import REPO, Result

FAKE = "fake"
DATA_RULE = "fake-data"
# The stand-in server: writes its "objects" (*.dat) under the data directory, then listens until stopped.
FAKE_SERVER = r"""
import os, socket, sys, time
data, port = sys.argv[1], int(sys.argv[2])
os.makedirs(os.path.join(data, "obj", "deep"), exist_ok=True)
for rel in ("obj/a.dat", "obj/deep/b.dat", "top.dat"):
    with open(os.path.join(data, rel), "wb") as f:
        f.write(os.urandom(1000))
s = socket.socket()
s.bind(("127.0.0.1", port))
s.listen()
print("READY", flush=True)
while True:
    time.sleep(3600)
"""


class FakeServer(Server):
    """A server as cheap as a sleeping Python process, made the way the real ones are (ledger, _spawn)."""

    kind = FAKE
    summary = "test stand-in"

    def install(self) -> None:
        pass

    def start(self) -> None:
        self.make_root()
        self.mkdir(self.root / "data", rule=DATA_RULE)
        self.write_file(self.root / "config", "port = ?\n")
        self.state.ports = {"api": free_port()}
        self._spawn([sys.executable, "-c", FAKE_SERVER, str(self.root / "data"), str(self.state.ports["api"])],
                    name="fake", log=self.root / "fake.log")

    def ready(self) -> bool:
        return not os.environ.get("FAKE_NEVER_READY") and port_open(self.state.ports["api"])

    def targets(self) -> dict:
        return {FAKE: {"url": "null://"}}

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        return rule == DATA_RULE and (stat.S_ISDIR(st.st_mode) or parts[-1].endswith(".dat"))


_REGISTER = ("import sys; from storeval.testbed import SERVERS; "
             f"SERVERS[{FAKE!r}] = 'tests.test_testbed_ownership:FakeServer'; "
             "from storeval.cli import main; main(sys.argv[1:])")


def cli(*args: str, cwd: Path, env: dict | None = None, timeout: float = 300) -> Result:
    """``storeval ARGS`` with the stand-in server registered (the real command line otherwise)."""
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-c", _REGISTER, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "200", "PYTHONPATH": path, **(env or {})})
    return Result(proc.returncode, proc.stdout, proc.stderr)


def plant(files: dict[Path, bytes]) -> dict[str, str]:
    """Write a user's files; return their checksums."""
    for path, data in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return checksums(files)


def checksums(paths) -> dict[str, str]:
    return {str(p): hashlib.sha256(Path(p).read_bytes()).hexdigest() if Path(p).is_file() else "MISSING"
            for p in paths}


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")} if root.exists() else set()


def state(bed: Path) -> dict:
    return json.loads((bed / "state.json").read_text())


def gone(pid: int, create_time: float) -> bool:
    try:
        p = psutil.Process(pid)
        return abs(p.create_time() - create_time) >= 0.5 or p.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_gone(proc: dict) -> None:
    """Until the killed process is gone (or a zombie nobody reaps); the deadline only guards a broken kill."""
    deadline = time.monotonic() + 120
    while not gone(proc["pid"], proc["create_time"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(proc["pid"], proc["create_time"])


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setitem(SERVERS, FAKE, "tests.test_testbed_ownership:FakeServer")


# ---------------------------------------------------------------------------------------------- refusals
def test_up_refuses_a_directory_it_does_not_own_and_touches_nothing(tmp_path):
    mine = tmp_path / "mine"
    sums = plant({mine / "thesis.tex": b"chapter 1", mine / "minio" / "notes.txt": b"my notes"})
    r = cli("testbed", "up", FAKE, "--dir", "mine", cwd=tmp_path)
    assert r.rc == 2, r.err
    assert r.err_lines == [f"error: {mine} exists and holds files storeval did not create (minio, thesis.tex); "
                           "choose a new or empty directory"]
    assert checksums(sums) == sums and tree(mine) == {"thesis.tex", "minio", "minio/notes.txt"}
    assert not (mine / "state.json").exists() and not (mine / MARKER).exists()
    assert not (tmp_path / "storeval-testbed.yaml").exists()

    # a user's own state.json does not make a directory a testbed (nor one nested too deep to read): up, status
    # and down all refuse it
    (mine / "state.json").write_text('{"servers": {}}')
    (mine / "deep").mkdir()
    (mine / "deep" / "state.json").write_text("[" * 100_000 + "]" * 100_000)
    sums = checksums([mine / "thesis.tex", mine / "minio" / "notes.txt", mine / "state.json"])
    r = cli("testbed", "down", "--dir", "mine/deep", cwd=tmp_path)
    assert r.rc == 2 and "(state.json was not written by storeval testbed, or is damaged)" in r.err_lines[0], r.err
    for command in (["up", FAKE], ["status"], ["down"]):
        r = cli("testbed", *command, "--dir", "mine", cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [
            f"error: {mine} is not a storeval testbed directory (state.json was not written by storeval testbed, "
            "or is damaged): nothing was stopped, started or removed; choose another --dir"], (command, r.err)
    assert checksums(sums) == sums

    # a file, a symbolic link, a missing parent
    (tmp_path / "afile").write_bytes(b"data")
    r = cli("testbed", "up", FAKE, "--dir", "afile", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: {tmp_path / 'afile'} is not a storeval testbed directory (it is a "
                                         "file): nothing was stopped, started or removed; choose another --dir"]
    (tmp_path / "link").symlink_to(mine)
    r = cli("testbed", "up", FAKE, "--dir", "link", cwd=tmp_path)
    assert r.rc == 2 and "(it is a symbolic link; give the directory it points to)" in r.err_lines[0]
    r = cli("testbed", "up", FAKE, "--dir", "no/such/bed", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: {tmp_path / 'no/such/bed'}: its parent directory "
                                         f"{tmp_path / 'no/such'} does not exist (create it first)"]
    assert checksums(sums) == sums and (tmp_path / "afile").read_bytes() == b"data"
    assert not (tmp_path / "no").exists() and not (tmp_path / "storeval-testbed.yaml").exists()


def test_up_refuses_a_targets_file_it_did_not_write(tmp_path):
    sums = plant({tmp_path / "storeval-testbed.yaml": b"targets:\n  mine: {url: 'file:///data'}\n"})
    r = cli("testbed", "up", FAKE, cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [
        f"error: {tmp_path / 'storeval-testbed.yaml'} exists and storeval did not write it: storeval replaces only "
        "its own targets file; move it away (or choose another --dir)"]
    assert checksums(sums) == sums and not (tmp_path / "storeval-testbed").exists()


def test_a_second_testbed_beside_and_a_moved_testbed_are_refused(tmp_path):
    assert cli("testbed", "up", FAKE, "--dir", "one", cwd=tmp_path).rc == 0
    targets = (tmp_path / "storeval-testbed.yaml").read_bytes()
    r = cli("testbed", "up", FAKE, "--dir", "two", cwd=tmp_path)  # would write the same targets file
    assert r.rc == 2 and r.err_lines == [
        f"error: {tmp_path / 'storeval-testbed.yaml'} exists and another testbed wrote it: storeval replaces only its "
        "own targets file; move it away (or choose another --dir)"]
    assert not (tmp_path / "two").exists() and (tmp_path / "storeval-testbed.yaml").read_bytes() == targets

    os.rename(tmp_path / "one", tmp_path / "moved")
    for command in ("down", "status"):
        r = cli("testbed", command, "--dir", "moved", cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [
            f"error: {tmp_path / 'moved'} is not a storeval testbed directory (state.json was made for "
            f"{tmp_path / 'one'}: moved, copied or edited; move the directory back there): nothing was stopped, "
            "started or removed; choose another --dir"], r.err
    os.rename(tmp_path / "moved", tmp_path / "one")
    (tmp_path / "alias").symlink_to(tmp_path, target_is_directory=True)  # the same directory by another path
    r = cli("testbed", "status", "--dir", str(tmp_path / "alias" / "one"), cwd=tmp_path)
    assert r.rc == 0 and r.out.startswith(f"{FAKE}: running — "), r.err
    r = cli("testbed", "down", "--dir", "one", cwd=tmp_path)
    assert r.rc == 0 and r.err_lines == [f"{FAKE}: stopped, data removed"], r.err
    assert not (tmp_path / "one").exists() and not (tmp_path / "storeval-testbed.yaml").exists()


def test_an_empty_directory_is_used_and_kept(tmp_path):
    (tmp_path / "bed").mkdir()
    r = cli("testbed", "up", FAKE, "--dir", "bed", cwd=tmp_path)
    assert r.rc == 0, r.err
    r = cli("testbed", "down", "--dir", "bed", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert (tmp_path / "bed").is_dir() and tree(tmp_path / "bed") == set()  # it was the user's: emptied, kept
    assert not (tmp_path / "storeval-testbed.yaml").exists()


# ------------------------------------------------------------------------------------ down keeps user files
def test_down_removes_what_it_made_and_leaves_user_files_with_one_line(tmp_path):
    bed = tmp_path / "storeval-testbed"
    r = cli("testbed", "up", FAKE, cwd=tmp_path)
    assert r.rc == 0, r.err
    assert r.out.strip() == (f"targets written to {tmp_path / 'storeval-testbed.yaml'}: "
                             "storeval run storeval-testbed.yaml --workload bandwidth")
    proc = state(bed)["servers"][FAKE]["procs"][0]
    outside = tmp_path / "elsewhere"
    sums = plant({
        tmp_path / "beside.txt": b"beside the testbed",
        bed / "notes.txt": b"in the testbed directory",
        bed / FAKE / "user.txt": b"in the server's directory",
        bed / FAKE / "data" / "user.txt": b"in the server's data directory",
        bed / FAKE / "data" / "obj" / "user.txt": b"inside a directory the server made",
        bed / FAKE / "mine" / "deep" / "x.dat": b"a user's directory, named like the server's data",
        outside / "precious.dat": b"reached only through a link",
    })
    (bed / FAKE / "data" / "link").symlink_to(outside)  # a link the server's rule would claim if followed
    (bed / FAKE / "data" / "obj" / "dirlink").symlink_to(outside, target_is_directory=True)

    r = cli("testbed", "down", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert gone(proc["pid"], proc["create_time"])
    data = bed / FAKE / "data"
    assert r.err_lines == [
        f"{FAKE}: stopped; left {data / 'link'}, {data / 'obj/dirlink'}, {data / 'obj/user.txt'} and 3 more "
        "(not created by storeval or its server): they stay, with the directories holding them (move them away, "
        "then `storeval testbed down` again)"]
    assert checksums(sums) == sums
    assert os.readlink(data / "link") == str(outside)
    # what the server and the testbed made is gone; the user's files stay with the directories leading to them
    assert tree(bed / FAKE) == {MARKER, "user.txt", "mine", "mine/deep", "mine/deep/x.dat", "data", "data/user.txt",
                                "data/link", "data/obj", "data/obj/user.txt", "data/obj/dirlink"}
    assert (tmp_path / "storeval-testbed.yaml").exists() is False  # no running server: no targets
    status = cli("testbed", "status", cwd=tmp_path)
    assert status.rc == 0 and status.out.startswith(f"{FAKE}: stopped; left {data / 'link'}, ")
    assert status.out.strip().endswith("(not created by storeval or its server): move them away, then "
                                       "`storeval testbed down` removes the rest")

    # once the user moved their things away, down finishes the job; the file beside stays untouched
    for p in ("user.txt", "mine", "data/user.txt", "data/link", "data/obj/user.txt", "data/obj/dirlink"):
        os.rename(bed / FAKE / p, tmp_path / f"moved-{p.replace('/', '-')}")
    r = cli("testbed", "down", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert r.err_lines == [f"{FAKE}: nothing was running, data removed",
                           f"left {bed / 'notes.txt'} (not created by storeval or its server): {bed} stays with them "
                           "and its state (move them away, then `storeval testbed down` again)"]
    os.rename(bed / "notes.txt", tmp_path / "moved-notes.txt")
    r = cli("testbed", "down", cwd=tmp_path)
    assert r.rc == 0 and r.err_lines == [], r.err
    assert not bed.exists()
    assert checksums([tmp_path / "beside.txt", outside / "precious.dat"]) == {
        k: v for k, v in sums.items() if k in (str(tmp_path / "beside.txt"), str(outside / "precious.dat"))}
    assert cli("testbed", "status", cwd=tmp_path).out.strip() == "no testbed servers running here"


def test_a_replaced_file_and_a_changed_targets_file_stay(tmp_path):
    bed = tmp_path / "storeval-testbed"
    assert cli("testbed", "up", FAKE, cwd=tmp_path).rc == 0
    # the user replaces storeval's config by their own file of the same name, and edits the targets file
    (bed / FAKE / "config").unlink()
    sums = plant({bed / FAKE / "config": b"my config", tmp_path / "storeval-testbed.yaml": b"targets: {}\n# mine\n"})
    r = cli("testbed", "down", cwd=tmp_path)
    assert r.rc == 0
    assert r.err_lines == [
        f"{FAKE}: stopped; left {bed / FAKE / 'config'} (replaced since storeval created it): they stay, with the "
        "directories holding them (move them away, then `storeval testbed down` again)",
        f"left {tmp_path / 'storeval-testbed.yaml'} as it is (changed since storeval wrote it)"]
    assert checksums(sums) == sums
    (bed / FAKE / "config").unlink()
    r = cli("testbed", "down", cwd=tmp_path)  # the changed targets file is the user's now: not mentioned again
    assert r.rc == 0 and r.err_lines == [f"{FAKE}: nothing was running, data removed"], r.err
    assert checksums(sums)[str(tmp_path / "storeval-testbed.yaml")] == sums[str(tmp_path / "storeval-testbed.yaml")]
    assert not bed.exists()


# ------------------------------------------------------------------------------- repeated and interrupted
def test_up_twice_then_a_dead_server_is_shown_dead_and_restarted(tmp_path):
    bed = tmp_path / "storeval-testbed"
    assert cli("testbed", "up", FAKE, cwd=tmp_path).rc == 0
    first = state(bed)["servers"][FAKE]["procs"][0]
    targets = (tmp_path / "storeval-testbed.yaml").read_bytes()

    again = cli("testbed", "up", FAKE, cwd=tmp_path)
    assert again.rc == 0 and again.err_lines == [f"{FAKE}: already running"], again.err
    assert state(bed)["servers"][FAKE]["procs"][0] == first
    assert (tmp_path / "storeval-testbed.yaml").read_bytes() == targets

    port = state(bed)["servers"][FAKE]["ports"]["api"]
    status = cli("testbed", "status", cwd=tmp_path)
    assert status.rc == 0 and status.out.strip() == f"{FAKE}: running — fake pid {first['pid']} up; ports api {port}"

    os.kill(first["pid"], signal.SIGSTOP)
    try:
        status = cli("testbed", "status", cwd=tmp_path)
        assert status.out.strip() == (f"{FAKE}: FROZEN — fake pid {first['pid']} stopped (SIGSTOP); ports api {port}; "
                                      f"`kill -CONT {first['pid']}` resumes it")
        r = cli("testbed", "up", FAKE, cwd=tmp_path)
        assert r.rc == 1 and r.err_lines[-1] == (f"error: {FAKE}: started earlier but frozen: `kill -CONT {first['pid']}` "
                                                 f"resumes it, or `storeval testbed down {FAKE}` and up again")
    finally:
        os.kill(first["pid"], signal.SIGCONT)

    os.kill(first["pid"], signal.SIGKILL)
    wait_gone(first)
    status = cli("testbed", "status", cwd=tmp_path)
    assert status.rc == 0 and status.out.strip() == (
        f"{FAKE}: DOWN — fake pid {first['pid']} DOWN (exited); ports api {port}; `storeval testbed up {FAKE}` "
        f"starts it again, `storeval testbed down {FAKE}` removes its data")

    r = cli("testbed", "up", FAKE, cwd=tmp_path)
    assert r.rc == 0, r.err
    second = state(bed)["servers"][FAKE]["procs"][0]
    assert second["pid"] != first["pid"] and not gone(second["pid"], second["create_time"])
    assert cli("testbed", "down", cwd=tmp_path).rc == 0
    assert gone(second["pid"], second["create_time"]) and not bed.exists()
    assert not (tmp_path / "storeval-testbed.yaml").exists()


def test_down_without_a_testbed_changes_nothing(tmp_path):
    r = cli("testbed", "down", "--dir", "nothing-here", cwd=tmp_path)
    assert r.rc == 0 and r.err_lines == [f"no testbed in {tmp_path / 'nothing-here'}: nothing to stop or remove"]
    assert not (tmp_path / "nothing-here").exists()
    # a user's directory (with a targets file of theirs beside it): nothing there is storeval's
    sums = plant({tmp_path / "mine" / "a.txt": b"a", tmp_path / "storeval-testbed.yaml": b"targets: {}\n"})
    r = cli("testbed", "down", "--dir", "mine", cwd=tmp_path)
    assert r.rc == 0 and r.err_lines == [f"no testbed in {tmp_path / 'mine'}: nothing to stop or remove"]
    assert checksums(sums) == sums
    r = cli("testbed", "status", "--dir", "mine", cwd=tmp_path)
    assert r.rc == 0 and r.out.strip() == "no testbed servers running here"


def test_down_after_a_killed_up_stops_the_orphan_and_removes_what_was_made(tmp_path):
    bed = tmp_path / "storeval-testbed"
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    up = subprocess.Popen([sys.executable, "-c", _REGISTER, "testbed", "up", FAKE], cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": path, "FAKE_NEVER_READY": "1"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # wait for the state to record the server's process (up then waits for a readiness that never comes)
        deadline = time.monotonic() + 240
        procs: list = []
        while not procs and up.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
            try:
                procs = state(bed)["servers"][FAKE]["procs"]
            except (OSError, ValueError, KeyError):
                pass
        assert procs, "the state never recorded the server's process"
    finally:
        up.kill()
        up.wait()
    proc = procs[0]
    assert not gone(proc["pid"], proc["create_time"])  # the orphan outlived the killed `up`
    sums = plant({bed / FAKE / "data" / "user.txt": b"mine"})
    r = cli("testbed", "down", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert gone(proc["pid"], proc["create_time"])
    assert checksums(sums) == sums and tree(bed / FAKE) == {MARKER, "data", "data/user.txt"}
    os.unlink(bed / FAKE / "data" / "user.txt")
    assert cli("testbed", "down", cwd=tmp_path).rc == 0 and not bed.exists()


# ---------------------------------------------------------------------------- a state that points elsewhere
@pytest.mark.parametrize("edit", ["root", "anchor", "entry", "symlink", "pid", "cgroup"])
def test_an_edited_state_never_leads_outside_the_testbed(tmp_path, edit, fake):
    victim = tmp_path / "victim"
    sums = plant({victim / "keep.dat": b"looks like server data", victim / "obj" / "a.dat": b"also",
                  victim / "config": b"same name as a testbed file"})
    bed = Testbed(tmp_path / "bed")
    bed.up([FAKE], log=lambda m: None)
    doc = state(tmp_path / "bed")
    server = doc["servers"][FAKE]
    groups = {k: server["info"].get(k) for k in ("cgroup", "blkio")}  # the server's own, removed at the end
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        if edit == "root":
            server["root"] = str(victim)
        elif edit == "anchor":  # the server's top directory moved to the victim, identity and all
            server["made"]["anchors"][0].update(path=str(victim), **_id_path(victim))
        elif edit == "entry":  # entries naming paths above the anchor
            st = os.stat(victim / "keep.dat")
            server["made"]["entries"].append({"anchor": 0, "path": "../../victim/keep.dat", "dir": False,
                                              "dev": st.st_dev, "ino": st.st_ino})
            server["made"]["entries"].append({"anchor": 0, "path": "/" + str(victim / "config"), "dir": False,
                                              "dev": st.st_dev, "ino": st.st_ino})
        elif edit == "symlink":  # the server's data directory swapped for a link to the victim
            data = tmp_path / "bed" / FAKE / "data"
            os.rename(data, tmp_path / "moved-data")
            data.symlink_to(victim, target_is_directory=True)
        elif edit == "pid":  # another process of the user's, with a guessed start time
            server["procs"].append({"pid": bystander.pid, "create_time": 1.0, "name": "x", "log": "x"})
        elif edit == "cgroup":  # the server's control groups swapped for an empty directory of the user's
            (victim / "empty").mkdir()
            server["info"]["cgroup"] = str(victim / "empty")
        (tmp_path / "bed" / "state.json").write_text(json.dumps(doc))

        messages: list[str] = []
        if edit == "root":
            with pytest.raises(NotOwned, match=r"state.json puts fake outside .*/bed \(edited\?\)"):
                Testbed(tmp_path / "bed").down(log=messages.append)
        else:
            Testbed(tmp_path / "bed").down(log=messages.append)
        assert checksums(sums) == sums and tree(victim) == {"keep.dat", "obj", "obj/a.dat", "config",
                                                            *(["empty"] if edit == "cgroup" else [])}
        assert bystander.poll() is None  # never signalled
        if edit == "anchor":
            assert f"left {victim} (its storeval marker is missing or belongs to another testbed)" in messages[0]
        if edit == "cgroup":
            assert messages[0].startswith(f"{FAKE}: stopped; left {victim / 'empty'} (not a control group storeval "
                                          "names (an edited state?): left alone)"), messages
        if edit == "symlink":
            assert messages[0].startswith(f"{FAKE}: stopped; left {tmp_path / 'bed' / FAKE / 'data'} "
                                          "(replaced since storeval created it)")
    finally:
        bystander.kill()
        bystander.wait()
        for p in doc["servers"][FAKE]["procs"][:1]:
            with_pid = psutil.Process(p["pid"]) if not gone(p["pid"], p["create_time"]) else None
            if with_pid:
                with_pid.kill()
                with_pid.wait(30)
        for group in groups.values():  # a refused down (the edited root, groups) left the server's groups: ours
            if group:
                assert cgroups.remove(group) is None


# ------------------------------------------------------------------------------------------ the ledger
def test_ledger_removes_only_recorded_and_claimed_entries(tmp_path):
    ledger = Ledger()
    root = ledger.anchor(tmp_path / "top")
    ledger.mkdir(root / "a" / "b", rule="r")
    ledger.write(root / "a" / "f", "mine")
    (root / "a" / "b" / "server.dat").write_bytes(b"server")
    (root / "a" / "b" / "user.txt").write_bytes(b"user")
    (root / "a" / "g").write_bytes(b"user, beside a recorded file")
    with pytest.raises(NotOwned, match="exists and storeval did not create it"):
        ledger.open(root / "a" / "g")  # a user's file is never opened for writing
    with pytest.raises(NotOwned, match="exists and holds files storeval did not create"):
        Ledger().anchor(root)
    left = ledger.remove(lambda rule, parts, st: rule == "r" and parts[-1].endswith(".dat"))
    assert sorted(x.path for x in left) == [str(root / "a" / "b" / "user.txt"), str(root / "a" / "g")]
    assert tree(root) == {MARKER, "a", "a/b", "a/b/user.txt", "a/g"}
    # what is left stays recorded: once the user's files are gone, the next removal finishes
    os.unlink(root / "a" / "b" / "user.txt")
    os.unlink(root / "a" / "g")
    assert ledger.remove() == [] and not root.exists() and not ledger


class _Killed(BaseException):
    """A start killed (SIGKILL) right before it could save again."""


def _start(ledger: Ledger, top: Path, var_tmp: Path) -> None:
    """What a server's start makes, in the order a testbed makes it: its root, a home elsewhere, directories
    handed to the server, files written."""
    root = ledger.anchor(top / "server")
    ledger.mkdir(root / "data" / "export", rule="r")
    ledger.write(root / "server.cfg", "configured")
    home = ledger.new_anchor(var_tmp, "storeval-x-")
    home.chmod(0o755)
    ledger.mkdir(home / "tls")
    ledger.write(home / "tls" / "host.key", "key", mode=0o600)
    os.close(ledger.open(home / "log", append=True))


def test_a_start_killed_between_any_two_saves_leaves_nothing_a_removal_cannot_prove(tmp_path):
    """The state is saved at every change; a kill lands between two saves, after the file system changes of the
    first but before the second records them. For every such moment, the last saved state removes everything."""
    saves = 0
    while True:
        saves += 1
        case = tmp_path / f"kill-{saves}"
        (case / "var-tmp").mkdir(parents=True)
        saved: list[dict] = []
        ledger = Ledger()

        def save(ledger=ledger, saved=saved, at=saves):
            if len(saved) == at:
                raise _Killed
            saved.append(json.loads(json.dumps(ledger.to_json())))

        ledger.on_change = save
        try:
            _start(ledger, case, case / "var-tmp")
            finished = True
        except _Killed:
            finished = False
        again = Ledger.from_json(saved[-1])
        assert again.remove() == [], f"killed before save {saves + 1}"
        assert tree(case) == {"var-tmp"}, f"killed before save {saves + 1}: {tree(case)}"
        if finished:
            break
    assert saves > 10  # each creation is an intent saved, then the thing recorded


def test_an_intent_proves_only_what_was_born_after_it(tmp_path):
    """A thing found at an intent's path that is older than the intent is someone else's: left, named."""
    top = tmp_path / "top"
    ledger = Ledger()
    root = ledger.anchor(top)
    (root / "old.txt").write_bytes(b"a user's, from before")
    time.sleep(0.1)  # older than the intent by more than the clock slack
    state = ledger.to_json()
    state["entries"].append({"anchor": 0, "path": "old.txt", "dir": False, "pending": time.time_ns()})
    left = Ledger.from_json(state).remove()
    assert [x.path for x in left] == [str(root / "old.txt")] and (root / "old.txt").read_bytes() == b"a user's, from before"
