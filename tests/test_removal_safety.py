"""Issue 28, items 1-3 and 13: data a run must never touch.

Every removal of local files goes through one remover (``storeval.core.remove``) that never crosses a mount, never
follows a symbolic link and iterates at any depth: ``storeval clean``, a metadata cell's cleanup, the testbed's
ledger. And an output's kind is part of its ownership: a JSON document never replaces a figure index."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from storeval import outputs
from storeval.clean import OWNER
from storeval.core.remove import LINK, MOUNTED, remove_tree
from storeval.drivers import make_driver
from storeval.errors import StorevalError
from storeval.testbed.owned import Ledger
from storeval.units import format_size, plural
from storeval.workloads import make_workload

from .helpers import dead_process, load_json, storeval, tree_checksums

HOST = os.uname().nodename
RUN = "storeval-20990101-000000-abcd"
DEPTH = 1_500  # deeper than Python's recursion limit: a recursive walk raises RecursionError




def _dead_owner() -> dict:
    return {"run_id": RUN[9:], "host": HOST, **dead_process()}


def _user_tree(where: Path) -> Path:
    """A user's directory with files, a subdirectory and names like storeval's own (t., d., f., bw.)."""
    (where / "t.0" / "d.0").mkdir(parents=True)
    for rel, data in {"precious.txt": b"mine", "t.0/f.0": b"not storeval's", "t.0/d.0/f.1": b"x" * 5000,
                      "bw.0": b"user data"}.items():
        (where / rel).write_bytes(data)
    return where


def _deep(top: Path, depth: int) -> None:
    """``top``/d.0/d.0/…, ``depth`` levels, a file f.0 every 100 levels (made through descriptors: a path that long
    is refused by the kernel)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for i in range(depth):
            os.mkdir("d.0", dir_fd=fd)
            sub = os.open("d.0", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = sub
            if i % 100 == 99:
                os.close(os.open("f.0", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd))
    finally:
        os.close(fd)


@pytest.fixture
def mount():
    """``mount(src, dst)`` bind-mounts ``src`` on ``dst`` (a small tmpfs when ``src`` is None), as root; every
    mount made is unmounted at the end, whatever happened."""
    if os.geteuid() != 0:
        pytest.skip("bind mounts need root")
    made: list[Path] = []

    def bind(src: Path | None, dst: Path) -> None:
        how = ["--bind", str(src)] if src is not None else ["-t", "tmpfs", "-o", "size=4M", "tmpfs"]
        subprocess.run(["mount", *how, str(dst)], check=True, capture_output=True)
        made.append(dst)

    try:
        yield bind
    finally:
        for dst in reversed(made):
            subprocess.run(["umount", "-l", str(dst)], capture_output=True)


# -- item 1: never across a mount ------------------------------------------------------------------------------

@pytest.mark.parametrize("source", ["same file system", "tmpfs"])
def test_clean_leaves_a_file_system_mounted_in_a_dead_runs_directory_whole_and_names_it(tmp_path, mount, source):
    target, user = tmp_path / "target", tmp_path / "user"
    target.mkdir()
    user.mkdir()
    if source == "tmpfs":  # another device: st_dev differs (else a bind of the same file system: another mount id)
        mount(None, user)
    _user_tree(user)
    run = target / RUN
    (run / "cell-0000" / "mnt").mkdir(parents=True)
    (run / OWNER).write_text(json.dumps(_dead_owner()))
    (run / "cell-0000" / "bw.0").write_bytes(b"s" * 4096)
    mount(user, run / "cell-0000" / "mnt")
    (target / "notes.txt").write_text("a user's notes")
    keep = {**tree_checksums(user), str(target / "notes.txt"): tree_checksums(target)[str(target / "notes.txt")]}
    size = os.path.getsize(run / OWNER) + 4096
    line = f"left alone: {run}/cell-0000/mnt ({MOUNTED}: unmount it, then clean again)"

    r = storeval("clean", str(target), "--dry-run", cwd=tmp_path)
    assert r.rc == 0, r.err
    owner = json.loads((run / OWNER).read_text())
    assert r.out.splitlines() == [
        f"file://{target}: {RUN}  {format_size(size)} in {plural(2, 'file')}  dead: its process {owner['pid']} on "
        f"{HOST} has ended; {line}",
        f"dry run: 1 directory ({format_size(size)}) would be removed"]

    r = storeval("clean", str(target), "--yes", cwd=tmp_path)
    assert r.rc == 1 and r.err_lines == [f"error: file://{target}: {RUN}: {line}"], r.err
    assert {**tree_checksums(user), str(target / "notes.txt"): keep[str(target / "notes.txt")]} == keep
    # what was storeval's went; the owner record stays beside the mount, so the directory is still a dead run's
    assert sorted(os.listdir(run)) == [OWNER, "cell-0000"] and os.listdir(run / "cell-0000") == ["mnt"]

    subprocess.run(["umount", str(run / "cell-0000" / "mnt")], check=True)
    r = storeval("clean", str(target), "--yes", cwd=tmp_path)
    assert r.rc == 0 and r.out.splitlines()[-1].startswith(f"removed file://{target}: {RUN} ("), r.out + r.err
    assert sorted(os.listdir(target)) == ["notes.txt"]
    assert tree_checksums(user) == {k: v for k, v in keep.items() if k.startswith(f"{user}/")}


def test_a_cell_cleanup_and_the_ledger_never_cross_a_mount(tmp_path, mount):
    user = _user_tree(tmp_path / "user")
    root = tmp_path / "target"
    cell = root / RUN / "cell-0000"
    (cell / "t.0").mkdir(parents=True)
    (cell / "t.0" / "f.0").write_bytes(b"storeval's")
    mount(user, cell / "t.0")  # a mount where the cleanup removes by pattern: its content looks like storeval's
    (cell / "t.1").mkdir()
    mount(user, cell / "t.1")
    before = tree_checksums(user)
    driver = make_driver(f"file://{root}")
    with pytest.raises(StorevalError) as e:
        make_workload("metadata", {}).cell_cleanup(driver, f"{RUN}/cell-0000", 1)
    assert str(e.value) == f"left alone: {cell}/t.0, {cell}/t.1 ({MOUNTED})"
    assert tree_checksums(user) == before

    ledger = Ledger()  # the testbed's ledger: a server's directory with a mount in it
    anchor = ledger.anchor(tmp_path / "tb", rule="all")
    ledger.mkdir(anchor / "data", rule="all")
    (anchor / "data" / "m").mkdir()
    mount(user, anchor / "data" / "m")
    left = ledger.remove(lambda rule, parts, st: True)
    assert [(x.path, x.why) for x in left] == [(f"{anchor}/data/m", MOUNTED)]
    assert tree_checksums(user) == before


# -- item 2: never through a symbolic link --------------------------------------------------------------------

def test_a_cell_directory_swapped_for_a_link_is_never_followed(tmp_path):
    user = _user_tree(tmp_path / "user")
    other = _user_tree(tmp_path / "other")
    root = tmp_path / "target"
    (root / RUN).mkdir(parents=True)
    (root / RUN / "cell-0000").symlink_to(user, target_is_directory=True)  # swapped in during the run
    (root / RUN / "cell-0001" / "t.0").mkdir(parents=True)  # a real cell, with a link among storeval's names
    (root / RUN / "cell-0001" / "t.0" / "f.0").write_bytes(b"storeval's")
    (root / RUN / "cell-0001" / "t.0" / "d.0").symlink_to(other, target_is_directory=True)
    (root / RUN / "cell-0001" / "f.9").symlink_to(other / "precious.txt")
    before = {**tree_checksums(user), **tree_checksums(other)}
    driver = make_driver(f"file://{root}")
    metadata = make_workload("metadata", {})

    with pytest.raises(StorevalError) as e:
        metadata.cell_cleanup(driver, f"{RUN}/cell-0000", 1)
    assert str(e.value) == f"left alone: {root}/{RUN}/cell-0000 ({LINK})"
    metadata.cell_cleanup(driver, f"{RUN}/cell-0001", 1)  # the links go as links; nothing they point at
    assert os.listdir(root / RUN / "cell-0001") == []
    assert not driver.rmdir_quietly(f"{RUN}/cell-0000")  # the runner's next step: a link is no directory
    assert {**tree_checksums(user), **tree_checksums(other)} == before

    # storeval clean of the dead run: the links inside go as links, nothing behind them
    (root / RUN / OWNER).write_text(json.dumps(_dead_owner()))
    r = storeval("clean", str(root), "--yes", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert os.listdir(root) == [] and {**tree_checksums(user), **tree_checksums(other)} == before


def test_the_remover_never_follows_a_link_on_the_way_to_what_it_removes(tmp_path):
    user = _user_tree(tmp_path / "user")
    root = tmp_path / "target"
    root.mkdir()
    (root / RUN).symlink_to(user, target_is_directory=True)
    before = tree_checksums(user)
    for rel in (RUN, f"{RUN}/t.0", f"{RUN}/t.0/f.0", f"{RUN}/precious.txt"):
        for dry_run in (True, False):
            r = remove_tree(str(root), rel, dry_run=dry_run)
            assert [(x.path, x.why) for x in r.left] == [(f"{root}/{RUN}", LINK)] and (r.files, r.dirs) == (0, 0)
    assert tree_checksums(user) == before


# -- item 3: any depth ---------------------------------------------------------------------------------------

def test_clean_the_ledger_and_a_cell_cleanup_remove_trees_deeper_than_the_recursion_limit(tmp_path):
    assert DEPTH > sys.getrecursionlimit()
    user = _user_tree(tmp_path / "user")
    before = tree_checksums(user)
    root = tmp_path / "target"
    run = root / RUN
    (run / "cell-0000" / "t.0").mkdir(parents=True)
    (run / OWNER).write_text(json.dumps(_dead_owner()))
    _deep(run / "cell-0000", DEPTH)
    (run / "cell-0000" / "t.0" / "link").symlink_to(user, target_is_directory=True)
    r = storeval("clean", str(root), "--dry-run", cwd=tmp_path)
    assert r.rc == 0 and " in 16 files  dead: " in r.out, r.out + r.err  # 15 in the tree and the owner record
    r = storeval("clean", str(root), "--yes", cwd=tmp_path)
    assert r.rc == 0 and r.out.splitlines()[-1].startswith(f"removed file://{root}: {RUN} ("), r.out + r.err
    assert os.listdir(root) == []

    (root / RUN / "cell-0000" / "t.0").mkdir(parents=True)  # a metadata cell's cleanup
    _deep(root / RUN / "cell-0000" / "t.0", DEPTH)
    make_workload("metadata", {}).cell_cleanup(make_driver(f"file://{root}"), f"{RUN}/cell-0000", 1)
    assert os.listdir(root / RUN / "cell-0000") == []

    ledger = Ledger()  # the testbed's ledger, in a server's ruled directory
    anchor = ledger.anchor(tmp_path / "tb", rule="all")
    _deep(anchor, DEPTH)
    assert ledger.remove(lambda rule, parts, st: True) == [] and not anchor.exists()
    assert tree_checksums(user) == before


# -- item 13: an output's kind is part of its ownership ----------------------------------------------------------

@pytest.fixture(scope="module")
def results(tmp_path_factory):
    base = tmp_path_factory.mktemp("results")
    r = storeval("run", "--target", "null://", "--workload", "bandwidth", "--set", "file_size=1MiB", "--clients", "1",
                 "--quiet", "--results", "res", "--json", "run.json", "--no-html", cwd=base)
    assert r.rc == 0, r.err
    return base, load_json(base / "run.json")["run_id"]


def test_each_output_replaces_only_its_own_kind(results, tmp_path):
    from storeval.report.figure_files import write_figures

    base, run_id = results
    res = base / "res"
    figs = tmp_path / "figs"
    write_figures(str(figs), [], [run_id])  # a figure index as report --figures writes it
    index = figs / "index.json"
    assert outputs.read_mark(str(index))[0].kind == "figures"
    held = tmp_path / "held.json"
    outputs.write_owned(str(held), "held results", "json", "held", [run_id], '{"units": []}')
    doc, page = tmp_path / "doc.json", tmp_path / "page.html"
    r = storeval("report", str(res), "--json", str(doc), "--html", str(page), cwd=tmp_path)
    assert r.rc == 0, r.err
    before = {p: p.read_bytes() for p in (index, held, doc, page)}

    refused = [("--json", index, "figure index (of report --figures)", "JSON document"),
               ("--html", index, "figure index (of report --figures)", "HTML report"),
               ("--json", held, "held results", "JSON document"),
               ("--json", page, "HTML report", "JSON document"),
               ("--html", doc, "JSON document", "HTML report")]
    for option, path, what, wanted in refused:
        r = storeval("report", str(res), option, str(path), cwd=tmp_path)
        assert r.rc == 2 and r.err_lines == [f"error: {option} {path}: holds storeval's {what}, not its {wanted} "
                                             "(choose a new file name)"], r.err
    # the index is intact and still the figures' own: report --figures would replace it
    assert {p: p.read_bytes() for p in before} == before
    write_figures(str(figs), [], [run_id])
    assert outputs.read_mark(str(index))[0].kind == "figures" and index.read_bytes() != before[index]
    # and never a JSON document in its place
    (tmp_path / "figs2").mkdir()
    (tmp_path / "figs2" / "index.json").write_bytes(before[doc])
    with pytest.raises(StorevalError) as e:
        write_figures(str(tmp_path / "figs2"), [], [run_id])
    assert str(e.value).startswith(f"--figures {tmp_path / 'figs2'}: index.json there is not the figure index ")
    assert (tmp_path / "figs2" / "index.json").read_bytes() == before[doc]
    # each kind replaces its own
    r = storeval("report", str(res), "--json", str(doc), "--html", str(page), cwd=tmp_path)
    assert r.rc == 0, r.err
    assert outputs.read_mark(str(doc))[0].fmt == "json" and outputs.read_mark(str(page))[0].fmt == "html"
    outputs.write_owned(str(held), "held results", "json", "held", [run_id], '{"units": [1]}')
    assert json.loads(held.read_text())["units"] == [1]


def test_an_index_written_before_it_had_a_kind_of_its_own_is_still_a_figure_index(results, tmp_path):
    from storeval.report.figure_files import write_figures

    base, run_id = results
    figs = tmp_path / "figs"
    figs.mkdir()
    old = {"storeval_version": "0.1", "kind": "figures", "runs": [run_id], "figures": [], "files": {}}
    outputs.write_owned(str(figs / "index.json"), "--figures", "json", "run", [run_id], json.dumps(old, indent=2))
    before = (figs / "index.json").read_bytes()
    r = storeval("report", str(base / "res"), "--json", str(figs / "index.json"), cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == [f"error: --json {figs / 'index.json'}: holds storeval's figure index (of "
                                         "report --figures), not its JSON document (choose a new file name)"], r.err
    assert (figs / "index.json").read_bytes() == before
    write_figures(str(figs), [], [run_id])
    assert outputs.read_mark(str(figs / "index.json"))[0].kind == "figures"


def test_the_posix_drivers_removals_never_follow_a_link_or_cross_a_mount(tmp_path):
    """The cleanups of bandwidth, copy, jobs, replay and command remove by name through the driver: a cell directory
    swapped for a link to a user's directory must not lead them there."""
    from storeval.drivers import make_driver

    target = tmp_path / "target"
    (target / "storeval-run" / "real").mkdir(parents=True)
    users = tmp_path / "users"
    users.mkdir()
    (users / "bw.0").write_bytes(b"a user's file")
    (users / "sub").mkdir()
    os.symlink(users, target / "storeval-run" / "cell-0000")
    d = make_driver(f"file://{target}", {})
    with pytest.raises(OSError):
        d.remove("storeval-run/cell-0000/bw.0")
    with pytest.raises(OSError):
        d.rmdir("storeval-run/cell-0000/sub")
    with pytest.raises(OSError, match="symbolic link, not followed"):  # a cleanup records it as left behind
        d.remove_quietly("storeval-run/cell-0000/bw.0")
    assert (users / "bw.0").read_bytes() == b"a user's file" and (users / "sub").is_dir()
    # what storeval made is still removed
    (target / "storeval-run" / "real" / "f").write_bytes(b"x")
    d.remove("storeval-run/real/f")
    d.rmdir("storeval-run/real")
    assert not (target / "storeval-run" / "real").exists()
    with pytest.raises(FileNotFoundError):
        d.remove("storeval-run/real/f")
