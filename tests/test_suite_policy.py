"""The suite's own rules, checked on a throw-away test tree run by a real pytest with this repository's settings:
a skip is an error in a strict run unless its reason is allowed, every skip is printed with its reason, a
missing part found at collection does not hide the rest, and a test that hangs is stopped by its own limit and
named."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .helpers import REPO

TESTS = Path(__file__).resolve().parent

HANGS = '''
import time
def test_hangs_forever():
    time.sleep(3600)
'''

SKIPS = '''
import pytest
pytest.importorskip("storeval_no_such_module_for_the_policy_test")
'''

MIXED = '''
import pytest
def test_passes():
    assert 2 + 2 == 4
def test_allowed_skip():
    pytest.skip("dropping the page cache needs root")
def test_missing_part():
    pytest.skip("xrootd cannot be installed here: apt-get failed")
'''


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for name in ("conftest.py", "skips-allowed.txt", "__init__.py", "helpers.py"):
        shutil.copy(TESTS / name, tmp_path / name)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def _pytest(tree: Path, *args: str, ci: bool) -> subprocess.CompletedProcess:
    env = {**os.environ, "STOREVAL_TEST_INSTALL": "0", "CI": "true" if ci else "", "STOREVAL_STRICT_SKIPS": ""}
    return subprocess.run([sys.executable, "-m", "pytest", "-c", str(REPO / "pyproject.toml"), "--rootdir", str(tree),
                           "-p", "no:cacheprovider", *args, str(tree)], capture_output=True, text=True, env=env,
                          timeout=600, cwd=tree)


def test_a_strict_run_fails_a_skip_whose_reason_is_not_allowed(tmp_path):
    tree = _tree(tmp_path, {"test_mixed.py": MIXED, "test_collect.py": SKIPS})
    strict = _pytest(tree, ci=True)
    out = strict.stdout
    assert strict.returncode == 1, out
    assert "1 failed, 1 passed, 1 skipped, 1 error" in out, out
    assert "FAILED test_mixed.py::test_missing_part - skipped in a strict run: xrootd cannot be installed here" in out
    assert "ERROR test_collect.py - skipped in a strict run: could not import" in out
    # every skip printed with its reason and the verdict
    assert "test_mixed.py::test_allowed_skip: dropping the page cache needs root [allowed]" in out
    assert "test_mixed.py::test_missing_part: xrootd cannot be installed here: apt-get failed [FAILED: not allowed]" in out
    # the same tree outside CI: skips stay skips, still listed
    relaxed = _pytest(tree, ci=False)
    assert relaxed.returncode == 0, relaxed.stdout
    assert "1 passed, 3 skipped" in relaxed.stdout, relaxed.stdout
    assert "test_mixed.py::test_missing_part: xrootd cannot be installed here: apt-get failed [not allowed]" in relaxed.stdout


def test_a_hanging_test_is_stopped_by_its_own_limit_and_named(tmp_path):
    tree = _tree(tmp_path, {"test_hang.py": HANGS})
    r = _pytest(tree, "-o", "timeout=3", ci=True)
    assert r.returncode == 1, r.stdout
    assert "Timeout" in r.stdout and "FAILED test_hang.py::test_hangs_forever" in r.stdout, r.stdout[-3000:]


def test_the_repository_bounds_every_test_and_prints_the_slowest():
    text = (REPO / "pyproject.toml").read_text()
    assert "\ntimeout = " in text and "--durations=10" in text


STAMPED = '''
import os, time
import pytest

def _stamp(name):
    start = time.monotonic()
    time.sleep(0.4)
    with open(os.environ["STAMPS"], "a") as f:
        f.write(f"{name} {start} {time.monotonic()} {os.environ['PYTEST_XDIST_WORKER']}\\n")
'''


def _stamped_run(tmp_path: Path, files: dict[str, str], workers: str) -> tuple[subprocess.CompletedProcess, Path]:
    """The throw-away tree of ``files`` run on ``workers`` xdist workers in a strict run; the file its tests
    stamped (name, start, end, worker per line)."""
    tree = _tree(tmp_path, files)
    stamps = tmp_path / "stamps"
    os.environ["STAMPS"] = str(stamps)
    try:
        return _pytest(tree, "-n", workers, "--dist", "loadfile", ci=True), stamps
    finally:
        del os.environ["STAMPS"]


def test_side_by_side_an_exclusive_test_runs_alone_and_skips_are_still_judged_and_listed(tmp_path):
    """The suite's own run (README: -n 3 --dist loadfile) on the throw-away tree: every test of three files runs
    on its worker, the exclusive one never overlaps another; a worker's skips are failed or allowed as in one
    process, and the controller lists them."""
    files = {f"test_plain{k}.py": STAMPED + "".join(f"\ndef test_{k}_{i}():\n    _stamp('p{k}.{i}')\n"
                                                   for i in range(4)) for k in range(2)}
    files["test_alone.py"] = STAMPED + ("\ndef test_first():\n    _stamp('before')\n"
                                        "\n@pytest.mark.exclusive\ndef test_alone():\n    _stamp('alone')\n")
    files["test_mixed.py"] = MIXED
    r, stamps = _stamped_run(tmp_path, files, "3")
    out = r.stdout
    assert r.returncode == 1 and "1 failed, 11 passed, 1 skipped" in out, out[-3000:]
    assert "FAILED test_mixed.py::test_missing_part - skipped in a strict run: xrootd cannot be installed here" in out
    assert "test_mixed.py::test_allowed_skip: dropping the page cache needs root [allowed]" in out, out[-3000:]
    assert "test_mixed.py::test_missing_part: xrootd cannot be installed here: apt-get failed [FAILED: not allowed]" in out
    lines = [line.split() for line in stamps.read_text().splitlines()]
    spans = {name: (float(a), float(b)) for name, a, b, _ in lines}
    assert len(spans) == 10
    alone = spans.pop("alone")
    assert all(b <= alone[0] or a >= alone[1] for a, b in spans.values()), (alone, spans)
    # side by side otherwise: a file's tests on one worker, the files on several
    worker = {name: w for name, _, _, w in lines}
    assert len({worker[f"p0.{i}"] for i in range(4)}) == 1 and len({worker[f"p1.{i}"] for i in range(4)}) == 1
    assert len(set(worker.values())) >= 2, worker


def test_side_by_side_the_longest_files_start_first_whatever_their_test_counts(tmp_path):
    """xdist sorts files by their number of tests unless told not to; the suite keeps its own order (conftest's
    SLOWEST_FILES, the longest first), so no long file starts last. Here one worker takes the files in turn:
    the two listed files first, longest first, though another file has more tests."""
    files = {"test_many.py": STAMPED + "".join(f"\ndef test_m{i}():\n    _stamp('many')\n" for i in range(6)),
             "test_skim.py": STAMPED + "\ndef test_s():\n    _stamp('skim')\n",
             "test_readme.py": STAMPED + "\ndef test_r():\n    _stamp('readme')\n"}
    r, stamps = _stamped_run(tmp_path, files, "1")
    assert r.returncode == 0, r.stdout[-3000:]
    order = [line.split()[0] for line in stamps.read_text().splitlines()]
    assert order == ["readme", "skim"] + ["many"] * 6
