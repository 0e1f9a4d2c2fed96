"""Every command in README.md runs as written.

README.md is what a new user runs first, so its examples are tested the way a user meets them: the fenced
``sh``/``bash``/``console`` blocks are parsed out of README.md (nothing here repeats a command), and every
command in them runs as written, through ``bash``, in a fresh copy of what a clone of the repository holds
(``git ls-files``), with the installed ``storeval`` first on PATH (tests/conftest.py puts the test environment's
``bin`` there). There is one test per README section that has commands, so a failure is local and names the
section, the README line, the command, its exit code and the tail of its stderr.

What the README marks, this test obeys, and nothing else: a command whose line ends in ``# not run: REASON`` is
skipped (kept few: a cluster's hostfile), ``exit N`` in its comment says the command exits with N (a study whose
cells are meant to fail); output samples are
``text`` blocks, never run. The first block — the two commands of the first screen — is the exception: its
install steps are not repeated (command 2 is the suite itself), and command 1's run part, ``storeval run``, runs
with the installed storeval and must leave what the first screen says it leaves.

Servers are started only the way the README says (``storeval testbed up`` in its blocks) and stopped by the
README's own ``storeval testbed down``; the test runs ``storeval testbed down`` again for every testbed directory a
section named, whatever happened, so a failed section leaves no server behind. Directories outside the copy that
a section's commands make (``/tmp/storeval-scratch``) are removed when they were not there before.
"""

from __future__ import annotations

import glob
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
RUN_LANGS = {"sh", "bash", "console"}
COMMAND_TIMEOUT = 900  # s: the slowest README command here takes a few minutes on a busy 2-core machine


@dataclass
class Command:
    line: int  # README line of its first line
    text: str  # as written (continuation lines joined)
    expect: int = 0
    skip: str | None = None  # the README's reason for not running it


@dataclass
class Section:
    title: str
    line: int
    blocks: list[list[Command]] = field(default_factory=list)

    @property
    def commands(self) -> list[Command]:
        return [c for b in self.blocks for c in b]


def _commands(lines: list[tuple[int, str]], lang: str) -> list[Command]:
    """The commands of one fenced block: ``\\`` continues a line; a console block's commands start with ``$ ``."""
    out: list[Command] = []
    pending: tuple[int, str] | None = None
    for no, raw in lines:
        text = raw.rstrip()
        if lang == "console" and pending is None:
            if not text.startswith("$ "):
                continue  # output shown under a command
            text = text[2:]
        if pending is not None:
            text = pending[1] + "\n" + text
            no = pending[0]
            pending = None
        if text.endswith("\\"):
            pending = (no, text)
            continue
        if not text.strip() or text.lstrip().startswith("#"):
            continue
        cmd = Command(no, text)
        comment = text.split(" #", 1)[1] if " #" in text else ""
        skip = re.search(r"not run:\s*(.+)$", comment)
        if skip:
            cmd.skip = skip.group(1).strip()
        code = re.search(r"\bexit (\d+)\b", comment)
        if code:
            cmd.expect = int(code.group(1))
        out.append(cmd)
    assert pending is None, f"README.md:{pending[0]}: a command ends in a line continuation"
    return out


def parse_readme(text: str) -> tuple[list[Command], list[Section]]:
    """(the first block's commands, every section with runnable blocks after it), in README order."""
    first: list[Command] | None = None
    sections: list[Section] = []
    current = Section("top", 1)
    fence: tuple[str, int] | None = None
    body: list[tuple[int, str]] = []
    for no, line in enumerate(text.splitlines(), 1):
        if fence is None:
            m = re.match(r"^```\s*([\w-]*)\s*$", line)
            if m:
                fence, body = (m.group(1).lower(), no), []
            elif re.match(r"^#{2,4} ", line):
                current = Section(line.lstrip("#").strip(), no)
                sections.append(current)
            continue
        if line.strip() != "```":
            body.append((no, line))
            continue
        lang, _ = fence
        fence = None
        if lang not in RUN_LANGS:
            continue
        cmds = _commands(body, lang)
        if first is None:
            first = cmds
        else:
            current.blocks.append(cmds)
    assert fence is None, f"README.md:{fence[1]}: a code block is never closed"
    assert first is not None, "README.md has no sh block"
    return first, [s for s in sections if s.blocks]


FIRST, SECTIONS = parse_readme(README.read_text(encoding="utf-8"))


def _slug(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:40]


@pytest.fixture
def clone():
    """What a user has after cloning: the tracked files, in a short path of its own (daemons put sockets under a
    testbed directory, and a socket's path has at most 107 bytes)."""
    where = Path(tempfile.mkdtemp(prefix="svr-", dir="/tmp"))
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        src, dst = REPO / name, where / name
        if src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    yield where
    shutil.rmtree(where, ignore_errors=True)


def _env(home: Path) -> dict[str, str]:
    # COLUMNS: rich wraps tables to the terminal; a wide one keeps each row on one line in the captured output
    return {**os.environ, "COLUMNS": "200", "TMPDIR": str(home / ".tmp")}


def _run(cmd: Command, section: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run one README command through bash, as written; fail naming where it is and what it said."""
    (cwd / ".tmp").mkdir(exist_ok=True)
    try:
        proc = subprocess.run(["bash", "-c", cmd.text], cwd=cwd, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, env=_env(cwd), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"README.md:{cmd.line} ({section}): `{cmd.text}` ran over {COMMAND_TIMEOUT} s")
    if proc.returncode != cmd.expect:
        err = proc.stderr.strip()[-3000:] or proc.stdout.strip()[-3000:]
        pytest.fail(f"README.md:{cmd.line} ({section}): `{cmd.text}` exited {proc.returncode}"
                    f"{f' (the README says {cmd.expect})' if cmd.expect else ''}:\n{err}")
    return proc


def _testbed_dirs(section: Section) -> list[str]:
    """The testbed directories a section's commands name (`--dir X`, and the default where one runs without)."""
    dirs = []
    for c in section.commands:
        words = shlex.split(c.text, comments=True)
        if words[:2] != ["storeval", "testbed"]:
            continue
        d = words[words.index("--dir") + 1] if "--dir" in words else "storeval-testbed"
        if d not in dirs:
            dirs.append(d)
    return dirs


def _outside_dirs(section: Section) -> list[str]:
    """Absolute directories a section's `mkdir -p` makes outside the clone (removed after, if they were new)."""
    out = []
    for c in section.commands:
        words = shlex.split(c.text, comments=True)
        if words[:2] == ["mkdir", "-p"]:
            out += [w for w in words[2:] if w.startswith("/")]
    return out


# what each section's commands say they write (globs in the clone) — checked after the section ran, beside the exit
# codes; a section not named here is checked by its exit codes alone
EFFECTS = {
    "a-short-tour": ["out.json", "storeval-results/storeval.duckdb", "storeval-results/report-*.html", "report.html",
                     "before/storeval.duckdb", "after/storeval.duckdb", "storeval-results/export-parquet/cells.parquet"],
    "the-metadata-workload": ["storeval-results/report-*.html"],
    "many-clients-on-many-machines-mpi": ["out.json", "nodes.json", "slurm.json"],
    "the-skim-workload-the-physics-applicatio": ["storeval-data/skim-*/events-003.root"],
    "real-application-i-o-trace-replay-hepix-": ["storeval-results/report-*.html"],
    "the-copy-workload-the-mit-lustre-vs-s3-s": ["storeval-results/report-*.html"],
    "faults-during-a-run-seeds-000-and-003": ["storeval-results/report-*.html"],
    "reports": ["days/storeval.duckdb", "days/both.html", "figs/index.json", "figs/*.svg", "figs/*.png", "figs/*.csv"],
}


def test_the_readme_has_runnable_sections_and_every_not_run_says_why():
    """The parse found the README's examples (a parse that found nothing would pass every test below)."""
    assert len(SECTIONS) >= 8, [s.title for s in SECTIONS]
    skipped = [c for s in SECTIONS for c in s.commands if c.skip is not None]
    assert all(c.skip for c in skipped)
    assert len(skipped) <= 3, [f"README.md:{c.line}" for c in skipped]  # kept few and honest
    assert set(EFFECTS) <= {_slug(s.title) for s in SECTIONS}, "a checked section was renamed: update EFFECTS"


def test_the_example_study_the_readme_shows_is_the_file_it_names():
    """The short tour shows a study and then runs `studies/example.yaml`: they are the same text."""
    text = README.read_text(encoding="utf-8")
    shown = re.search(r"this one is `studies/example.yaml`\):\n\n```yaml\n(.*?)```", text, re.S)
    assert shown, "the short tour no longer shows studies/example.yaml"
    assert shown.group(1) == (REPO / "studies" / "example.yaml").read_text(encoding="utf-8")


def test_every_yaml_example_is_yaml():
    """The study snippets are not run (they name clusters and mounts a reader has, this machine has not), but each
    is valid YAML whose top-level keys are study keys — a typo there would be the reader's first error."""
    import yaml

    from storeval.spec import TOP_KEYS

    blocks = re.findall(r"^```yaml\n(.*?)^```", README.read_text(encoding="utf-8"), re.S | re.M)
    assert len(blocks) >= 5
    for block in blocks:
        doc = yaml.safe_load(block)
        assert isinstance(doc, dict) and set(doc) <= set(TOP_KEYS), block


def test_first_screen_command_1_runs_and_writes_what_the_readme_says(clone):
    """Command 1's run part (`storeval run`, nothing else: the default quick study on the current directory's file
    system) exits 0 and leaves the store and the HTML report in ./storeval-results/ and the skim's event files in
    ./storeval-data/, and nothing else: its scratch directory is gone."""
    c1, c2 = [c.text for c in FIRST]
    assert c1 == "python3 -m venv .venv && .venv/bin/pip install -q . && .venv/bin/storeval run"
    assert c2.endswith(".venv/bin/python -m pytest -q -n 3 --dist loadfile")
    run = Command(FIRST[0].line, c1.rsplit("&& ", 1)[1].removeprefix(".venv/bin/"))
    before = set(os.listdir(clone))
    proc = _run(run, "first screen, command 1", clone)
    new = set(os.listdir(clone)) - before - {".tmp"}
    assert new == {"storeval-results", "storeval-data"}, new
    assert (clone / "storeval-results" / "storeval.duckdb").is_file()
    assert len(list((clone / "storeval-results").glob("report-*.html"))) == 1
    skim = list((clone / "storeval-data").glob("skim-*/events-*.root"))
    assert len(skim) == 2, skim  # one 32 MiB file per client, 1 and 2 clients
    assert "18 cells" in proc.stdout
    # .gitignore covers what it wrote, so a run inside a clone leaves `git status` clean
    # (and the scratch directory a killed run leaves, named like storeval-20261126-121232-5f44)
    paths = ["storeval-results/x", "storeval-data/x", "storeval-20261126-121232-5f44/x"]
    ignored = subprocess.run(["git", "check-ignore", "--no-index", *paths], cwd=REPO, capture_output=True, text=True)
    assert ignored.stdout.split() == paths


@pytest.mark.parametrize("section", SECTIONS, ids=[_slug(s.title) for s in SECTIONS])
def test_readme_section_runs_as_written(section: Section, clone):
    outside = [d for d in _outside_dirs(section) if not os.path.exists(d)]
    beds = _testbed_dirs(section)
    try:
        for cmd in section.commands:
            if cmd.skip is None:
                _run(cmd, section.title, clone)
        for pattern in EFFECTS.get(_slug(section.title), []):
            assert glob.glob(str(clone / pattern)), f"{section.title}: the README's commands wrote no {pattern}"
        for d in beds:  # the README's own `testbed down` ran: nothing of the servers is left
            assert not (clone / d).exists() or not any((clone / d).iterdir()), f"{d} was left by {section.title}"
    finally:
        for d in beds:
            if (clone / d).exists():
                subprocess.run(["storeval", "testbed", "down", "--dir", d], cwd=clone, capture_output=True,
                               timeout=300, env=_env(clone))
        for d in outside:
            shutil.rmtree(d, ignore_errors=True)
