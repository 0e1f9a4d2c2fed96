"""Issue 12, cases 1, 3, 4 and 15: storeval replaces only files it can prove are its own, never loses a measured
cell when its results store cannot be written, names a full disk in one line and leaves nothing half-made,
and calls a damaged store damaged."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from storeval import outputs
from storeval.store import DB_NAME, Store

from .helpers import load_json, storeval

QUICK = ["--target", "null://", "--workload", "bandwidth", "--set", "file_size=1MiB", "--quiet"]
NOT_MINE = "a file that storeval did not write is there (choose a new file name; storeval replaces only its own output)"
CHANGED = ("storeval wrote this file but it was changed since (choose a new file name; storeval replaces only its "
           "own unchanged output)")


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def storeval_files(directory: Path) -> list[str]:
    """What storeval may have left in a directory besides its store and reports: temporary, held, watch files."""
    return sorted(p.name for p in directory.iterdir() if p.name.startswith((".storeval-", "storeval-held-")))


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Two runs, each in its own results directory, with their JSON documents."""
    base = tmp_path_factory.mktemp("stored")
    for name in ("A", "B"):
        r = storeval("run", *QUICK, "--clients", "1", "--results", name, "--json", f"{name}.json", "--no-html", cwd=base)
        assert r.rc == 0, r.err
    return base


# -- case 1: ownership of output files ------------------------------------------------------------------

def test_a_users_file_is_never_replaced_whatever_it_says(stored, tmp_path):
    res = stored / "A"
    readme = tmp_path / "README.md"
    readme.write_text('Run `storeval report storeval-results --html report.html`; "storeval_version" is in the JSON.\n'
                      "<!-- storeval report --> storeval comparison\n")
    forged = tmp_path / "forged.json"  # storeval's own header line copied over a user's text: the digest says no
    header = (stored / "A.json").read_text().splitlines()[0]
    forged.write_text(header + '\n  "notes": "mine"\n}\n')
    before = {p: digest(p) for p in (readme, forged, res / DB_NAME)}
    for option, path in (("--html", readme), ("--json", readme), ("--html", res / DB_NAME), ("--json", forged)):
        r = storeval("report", str(res), option, str(path), cwd=tmp_path)
        expected = CHANGED if path == forged else NOT_MINE
        assert r.rc == 2 and r.err_lines == [f"error: {option} {path}: {expected}"], r.err
        r = storeval("compare", str(stored / "A"), str(stored / "B"), option, str(path), cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [f"error: {option} {path}: {expected}"], r.err
    r = storeval("run", *QUICK, "--results", str(tmp_path / "new"), "--json", str(readme), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: --json {readme}: {NOT_MINE}"]
    assert not (tmp_path / "new").exists()  # refused before anything ran
    assert {p: digest(p) for p in before} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "forged.json"]  # no temporary file either


def test_storevals_own_unchanged_output_is_replaced_and_recorded_an_edited_one_is_not(stored, tmp_path):
    res = stored / "A"
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    tokens = []
    for _ in range(2):  # its own output is replaced, again and again
        r = storeval("report", str(res), "--json", str(out), "--html", str(page), cwd=tmp_path)
        assert r.rc == 0, r.err
        doc = load_json(out)
        mark = doc["storeval_output"]
        assert mark["format"] == "storeval-output/1" and mark["kind"] == "run" and mark["runs"] == [doc["run_id"]]
        assert doc["cells"] and doc["status"] == "ok"  # the document itself is as before, one member more
        html_mark, why = outputs.read_mark(str(page))
        assert why == "" and html_mark.kind == "run" and html_mark.runs == [doc["run_id"]]
        assert page.read_text().startswith("<!DOCTYPE html>\n<!-- storeval-output {")
        tokens.append((mark["token"], html_mark.token))
    assert tokens[0] != tokens[1]
    recorded = query(res / DB_NAME, "SELECT path, format, token FROM outputs WHERE path IN (?, ?) ORDER BY written",
                     [str(out), str(page)])
    assert {(p, f, t) for p, f, t in recorded} >= {(str(out), "json", tokens[1][0]), (str(page), "html", tokens[1][1])}
    # an output of the other format, a link to storeval's output, and an output the user edited: refused
    r = storeval("report", str(res), "--html", str(out), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: --html {out}: holds storeval's JSON document, not its HTML report "
                                         "(choose a new file name)"]
    (tmp_path / "link.json").symlink_to(out)
    r = storeval("report", str(res), "--json", str(tmp_path / "link.json"), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: --json {tmp_path / 'link.json'}: is a symbolic link (give the path of "
                                         "a new file; storeval replaces only its own output)"]
    with open(page, "a", encoding="utf-8") as f:
        f.write("<p>my notes</p>\n")
    edited = digest(page)
    for command in (["report", str(res)], ["compare", str(stored / "A"), str(stored / "B")]):
        r = storeval(*command, "--html", str(page), cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [f"error: --html {page}: {CHANGED}"]
    assert digest(page) == edited and os.path.islink(tmp_path / "link.json")


def test_compare_owns_its_outputs_by_their_header_alone(stored, tmp_path):
    a, b = stored / "A", stored / "B"
    for _ in range(2):
        r = storeval("compare", str(a), str(b), "--json", "c.json", "--html", "c.html", cwd=tmp_path)
        assert r.rc == 0, r.err
    doc = load_json(tmp_path / "c.json")
    ids = [load_json(stored / "A.json")["run_id"], load_json(stored / "B.json")["run_id"]]
    assert doc["storeval_output"]["kind"] == "compare" and doc["storeval_output"]["runs"] == ids
    assert outputs.read_mark(str(tmp_path / "c.html"))[0].runs == ids
    r = storeval("report", str(a), "--json", "c.json", cwd=tmp_path)  # storeval's own output, of another command
    assert r.rc == 0, r.err


def test_a_file_appearing_while_storeval_writes_is_not_replaced(tmp_path):
    """The check before the run is repeated at the moment of writing; a new file is linked in, never renamed over."""
    path = tmp_path / "out.json"
    calls = []

    def appear(p):
        calls.append(p)
        raise AssertionError("not reached: the path was free")

    data, _ = outputs.render("json", "run", ["r"], '{\n  "a": 1\n}\n')
    outputs.write_atomic(str(path), data, ".json", replace=appear)
    assert path.read_bytes() == data and not calls
    path.write_text("user's")
    with pytest.raises(Exception) as e:
        outputs.write_owned(str(path), "--json", "json", "run", ["r"], '{\n  "a": 1\n}\n')
    assert str(e.value) == f"--json {path}: {NOT_MINE}"
    assert path.read_text() == "user's" and os.listdir(tmp_path) == ["out.json"]
    with pytest.raises(FileExistsError):
        outputs.place_new(str(tmp_path / "out.json"), str(path))


# -- case 3: a store another process holds open ------------------------------------------------------------

def _run_beside_a_reader(res: Path, cwd: Path, release_when: str | None, wait: str, *args: str):
    """Start a run of 8 cells while this process holds the store open read-only (DuckDB then refuses every
    writer); close it when a stderr line contains ``release_when`` (None: only after the run ended)."""
    con = duckdb.connect(str(res / DB_NAME), read_only=True)
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", *QUICK, "--clients", "1,2,3,4", "--repetitions",
                             "2", "--results", str(res), "--no-html", *args], cwd=cwd, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200", "STOREVAL_STORE_WAIT": wait})
    lines = []
    try:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if release_when is not None and release_when in line:
                con.close()
        rc = proc.wait(timeout=600)
    finally:
        proc.kill() if proc.poll() is None else None
        con.close()
    return rc, [line for line in lines if line.strip()]


def test_a_reader_holding_the_store_loses_no_cell_the_run_waits_for_it(tmp_path):
    res = tmp_path / "res"
    Store(str(res))  # an empty store, so that a reader can hold it before the run starts
    rc, err = _run_beside_a_reader(res, tmp_path, "waiting up to", "600", "--json", "o.json")
    assert rc == 0, err
    doc = load_json(tmp_path / "o.json")
    run = doc["run_id"]
    held = res / f"storeval-held-{run}-"
    assert err[0].startswith(f"warning: results store {res / DB_NAME} is in use by another process (PID {os.getpid()}): "
                             f"the run's own rows held, kept in {held}") and err[0].endswith(
        ".json; they are stored as soon as the store can be written")
    assert err[1].startswith("warning: waiting up to 600 s for the results store (STOREVAL_STORE_WAIT sets how long): ")
    assert err[1].endswith("; 8 cells and the run's own rows held")
    assert err[2:] == [f"warning: results store {res / DB_NAME}: the held results are stored now"]
    assert doc["status"] == "ok" and [c["status"] for c in doc["cells"]] == ["ok"] * 8
    db = res / DB_NAME
    assert query(db, "SELECT status FROM studies WHERE run_id = ?", [run]) == [("ok",)]
    assert query(db, "SELECT count(*) FROM cells WHERE run_id = ? AND status = 'ok'", [run]) == [(8,)]
    assert query(db, "SELECT count(DISTINCT cell_id) FROM records WHERE run_id = ?", [run]) == [(8,)]
    assert storeval_files(res) == []


def test_a_store_that_stays_busy_keeps_every_cell_in_a_held_file_and_the_run_fails(tmp_path):
    res = tmp_path / "res"
    Store(str(res))
    rc, err = _run_beside_a_reader(res, tmp_path, None, "1", "--json", "o.json")
    assert rc == 1
    held = [p for p in res.iterdir() if p.name.startswith("storeval-held-")]
    assert len(held) == 1 and storeval_files(res) == [held[0].name]
    run = json.loads(held[0].read_text())["units"][0]["run_id"]
    assert err[-1] == (f"error: cannot store 8 cells and the run's own rows of run {run}: results store {res / DB_NAME} "
                       f"is in use by another process (PID {os.getpid()}); they are kept in {held[0]}: storeval report "
                       f"{res} stores them once it can")
    assert not (tmp_path / "o.json").exists()  # no document of a run that is not stored
    assert query(res / DB_NAME, "SELECT count(*) FROM studies") == [(0,)]
    copy = tmp_path / "copy.json"
    shutil.copy(held[0], copy)
    # the next command that opens the store stores them, once; storing a held file again changes nothing
    r = storeval("report", str(res), cwd=tmp_path)
    assert r.rc == 0 and r.err_lines == [f"stored the held results of {held[0]} in {res / DB_NAME}"], r.err
    assert f"run {run} (" in r.out and "): ok; 8 cells" in r.out
    assert storeval_files(res) == []
    counts = "SELECT (SELECT count(*) FROM cells), (SELECT count(*) FROM records), (SELECT count(*) FROM events), " \
             "(SELECT count(*) FROM environment), (SELECT count(*) FROM studies)"
    first = query(res / DB_NAME, counts)
    assert first[0][0] == 8 and first[0][4] == 1
    shutil.copy(copy, held[0])
    r = storeval("report", str(res), "--json", "again.json", cwd=tmp_path)
    assert r.rc == 0 and r.err_lines == [f"stored the held results of {held[0]} in {res / DB_NAME}"]
    assert query(res / DB_NAME, counts) == first
    assert [c["status"] for c in load_json(tmp_path / "again.json")["cells"]] == ["ok"] * 8


def test_held_files_that_are_not_storevals_own_or_of_a_live_process_are_left_alone(tmp_path):
    res = tmp_path / "res"
    store = Store(str(res))
    mine = res / "storeval-held-mine.json"
    mine.write_text('{"units": []}')  # a user's file with that name: no ownership header
    live = res / "storeval-held-live.json"
    text = json.dumps({"pid": os.getpid(), "created": __import__("psutil").Process().create_time(), "units": [
        {"unit": "end", "run_id": "x", "finished": "2024-01-01 00:00:00", "status": "ok"}]})
    outputs.write_owned(str(live), "held", "json", "held", ["x"], text, replaces=())
    before = {p: digest(p) for p in (mine, live)}
    again = Store(str(res), create=False)
    assert again.imported == [] and again.unimported == [] and store.held == []
    assert {p: digest(p) for p in before} == before


# -- case 4: a full results file system ------------------------------------------------------------------

@pytest.fixture
def small_fs(tmp_path):
    """A 24 MiB tmpfs (root only): a file system that storeval can fill."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill it needs root")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24M", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte."""
    path = directory / "filler"
    chunk = b"\0" * (1 << 16)
    with open(path, "wb", buffering=0) as f:
        try:
            while True:
                f.write(chunk)
        except OSError as e:
            assert e.errno == errno.ENOSPC
    for size in (4096, 512, 1):
        try:
            with open(path, "ab", buffering=0) as f:
                while True:
                    f.write(b"\0" * size)
        except OSError:
            pass
    return path


def test_a_full_results_disk_at_start_is_one_line_and_leaves_nothing(small_fs, tmp_path):
    existing = small_fs / "existing"
    Store(str(existing))
    (small_fs / "mine").mkdir()
    fill(small_fs)
    before = digest(existing / DB_NAME)
    for res in (small_fs / "new" / "deeper", small_fs / "mine", existing):
        # the preflight check refuses a full results file system first; --force goes on to meet it for real
        r = storeval("run", *QUICK, "--results", str(res), "--json", str(tmp_path / "o.json"), cwd=tmp_path)
        assert r.rc == 2 and len(r.err_lines) == 1 and "it has 0 B free" in r.err and "--force" in r.err, r.err
        r = storeval("run", *QUICK, "--results", str(res), "--json", str(tmp_path / "o.json"), "--force",
                     cwd=tmp_path)
        where = res / (DB_NAME + ".wal" if res == existing else DB_NAME)
        assert r.rc == 2 and r.err_lines[-1] == f"error: the file system holding {where} is full (No space left on " \
                                                "device); free space there or use another --results directory", r.err
        assert all(line.startswith("warning:") for line in r.err_lines[:-1]), r.err
    assert sorted(os.listdir(small_fs)) == ["existing", "filler", "mine"]  # new/deeper was made, and removed again
    assert os.listdir(small_fs / "mine") == [] and os.listdir(existing) == [DB_NAME]
    assert digest(existing / DB_NAME) == before and not (tmp_path / "o.json").exists()
    r = storeval("report", str(existing), "--json", str(small_fs / "r.json"), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: {existing} holds no runs yet (run storeval run first)"]


def test_a_results_disk_that_fills_mid_run_holds_the_cells_until_there_is_room(small_fs, tmp_path):
    res = small_fs / "res"
    Store(str(res))
    spill = tmp_path / "tmp"  # the temporary directory, where held results go when the results disk is full
    spill.mkdir()
    con = duckdb.connect(str(res / DB_NAME), read_only=True)  # every write is held from the start ...
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", *QUICK, "--clients", "1,2", "--repetitions", "2",
                             "--results", str(res), "--json", str(tmp_path / "o.json"), "--no-html"], cwd=tmp_path,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "STOREVAL_STORE_WAIT": "600", "TMPDIR": str(spill)})
    lines, filler = [], None
    try:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if "is in use by another process" in line and filler is None:
                filler = fill(small_fs)  # ... then the disk is full, and the reader lets go
                con.close()
            if "waiting up to" in line:
                os.unlink(filler)  # room again: the run stores everything it held
        rc = proc.wait(timeout=600)
    finally:
        proc.kill() if proc.poll() is None else None
        con.close()
    assert rc == 0, "the run's stderr:\n" + "\n".join(lines)
    full = [line for line in lines if "is full" in line]
    assert full and full[0].startswith(f"warning: the file system holding {res / DB_NAME}")
    assert "(No space left on device)" in full[0] and f"kept in {spill}/storeval-held-" in full[0]
    assert lines[-1] == f"warning: results store {res / DB_NAME}: the held results are stored now"
    doc = load_json(tmp_path / "o.json")
    assert doc["status"] == "ok" and [c["status"] for c in doc["cells"]] == ["ok"] * 4
    assert query(res / DB_NAME, "SELECT count(*) FROM cells WHERE status = 'ok'") == [(4,)]
    assert sorted(os.listdir(res)) == [DB_NAME] and os.listdir(spill) == []  # no held, watch, tmp or journal file


def test_outputs_to_a_full_disk_are_one_line_and_leave_nothing(stored, small_fs, tmp_path):
    fill(small_fs)
    for option, name in (("--json", "r.json"), ("--html", "r.html")):
        r = storeval("report", str(stored / "A"), option, str(small_fs / name), cwd=tmp_path)
        assert r.rc == 1 and r.err_lines[-1] == (f"error: cannot write {option} {small_fs / name}: the file system is "
                                                 "full (No space left on device); free space there or choose another "
                                                 "path"), r.err
    r = storeval("export", str(stored / "A"), "--format", "csv", "--out", str(small_fs / "exp"), cwd=tmp_path)
    assert r.rc == 1 and len(r.err_lines) == 1 and r.err_lines[0].startswith(f"error: cannot write --out {small_fs / 'exp'}: ")
    assert "full (No space left on device)" in r.err
    assert sorted(os.listdir(small_fs)) == ["filler"]


# -- case 15: a damaged store ------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["truncated", "bit-flipped", "empty", "foreign"])
def test_a_damaged_store_is_one_line_naming_it_for_every_command(stored, tmp_path, damage):
    res = tmp_path / "res"
    shutil.copytree(stored / "A", res)
    db = res / DB_NAME
    data = bytearray(db.read_bytes())
    if damage == "truncated":
        data = data[: len(data) // 2]
    elif damage == "bit-flipped":  # one bit in every 4 KiB past the header: whatever is read is damaged
        for offset in range(12288, len(data), 4096):
            data[offset] ^= 0x10
    elif damage == "empty":
        data = bytearray()
    else:
        data = bytearray(b"my notes\n" * 100)
    db.write_bytes(bytes(data))
    before = digest(db)
    lines = {
        "truncated": f"error: results store {db} is damaged (",
        "bit-flipped": f"error: results store {db} is damaged (",
        "empty": f"error: results store {db} is empty (0 bytes: left by a failed start, or damaged); remove it or use "
                 "another --results directory",
        "foreign": f"error: {db} is not a storeval results store (not a DuckDB file); choose another results directory",
    }
    for command in (["run", *QUICK, "--results", str(res)], ["report", str(res)], ["compare", str(res), str(res)],
                    ["export", str(res), "--format", "csv", "--out", str(tmp_path / "exp")]):
        r = storeval(*command, cwd=tmp_path)
        assert r.rc == 2 and len(r.err_lines) == 1, (command, r.err)
        assert r.err_lines[0].startswith(lines[damage]), (command, r.err)
        if damage in ("truncated", "bit-flipped"):
            assert r.err_lines[0].endswith("); restore it from a backup or use another --results directory")
    assert digest(db) == before and sorted(os.listdir(res)) == [DB_NAME]
    assert sorted(os.listdir(tmp_path)) == ["res"]
