"""Every command in README.md, the user guide (docs/guide/*.md) and studies/README.md runs as written.

These pages are what a user runs first, so their examples are tested the way a user meets them: the fenced
``sh``/``bash``/``console`` blocks are parsed out of each page (nothing here repeats a command), and every
command in them runs as written, through ``bash``, in a fresh copy of what a clone of the repository holds
(``git ls-files``), with the installed ``storeval`` first on PATH (tests/conftest.py puts the test environment's
``bin`` there). There is one test per page section that has commands to run
(id ``PAGE::SECTION``, e.g. ``guide/faults.md::faults-during-a-run``), so a failure is local and names the page and
line (``docs/guide/faults.md:23``), the section, the command, its exit code and the tail of its stderr; no command
that starts a study runs in two sections.

What a page marks, this test obeys, and nothing else: a command whose line ends in ``# not run: REASON`` is
skipped (kept few, each naming why: a cluster's hostfile, a study another section or test
file already runs), ``exit N`` in its comment says the command exits with N (a study whose
cells are meant to fail); output samples are
``text`` blocks, never run. README's first block — the two commands of the first screen — is the exception: its
install steps are not repeated (command 2 is the suite itself), and command 1's run part, ``storeval run``, runs
with the installed storeval and must leave what the first screen says it leaves.

Servers are started only the way a page says (``storeval testbed up`` in its blocks) and stopped by the
page's own ``storeval testbed down``; the test runs ``storeval testbed down`` again for every testbed directory a
section named, whatever happened, so a failed section leaves no server behind. Directories outside the copy that
a section's commands make (``/tmp/storeval-scratch``) are removed when they were not there before — by the last
section using them, when sections run side by side on several workers.
"""

from __future__ import annotations

import contextlib
import fcntl
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
GUIDE = REPO / "docs" / "guide"
STUDIES_README = REPO / "studies" / "README.md"
PAGES = [README, *sorted(GUIDE.glob("*.md")), STUDIES_README]  # the pages whose commands run, in this order
RUN_LANGS = {"sh", "bash", "console"}
COMMAND_TIMEOUT = 900  # s: the slowest README command here takes a few minutes on a busy 2-core machine


@dataclass
class Command:
    line: int  # the page's line of its first line
    text: str  # as written (continuation lines joined)
    expect: int = 0
    skip: str | None = None  # the page's reason for not running it


@dataclass
class Section:
    title: str
    line: int
    page: str = "README.md"  # relative to the repository
    blocks: list[list[Command]] = field(default_factory=list)

    @property
    def commands(self) -> list[Command]:
        return [c for b in self.blocks for c in b]

    @property
    def id(self) -> str:
        """Stable and readable: ``README.md::a-short-tour``, ``guide/faults.md::faults-during-a-run``,
        ``studies/README.md::seed003-wan-yaml``."""
        return f"{self.page.removeprefix('docs/')}::{_slug(self.title)}"

    @property
    def runnable(self) -> bool:
        return any(c.skip is None for c in self.commands)


def _commands(lines: list[tuple[int, str]], lang: str, page: str = "README.md") -> list[Command]:
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
    assert pending is None, f"{page}:{pending[0]}: a command ends in a line continuation"
    return out


def parse_page(text: str, page: str = "README.md", first_screen: bool = True
               ) -> tuple[list[Command] | None, list[Section]]:
    """(the first block's commands when ``first_screen`` — README's first screen, run by its own test —, every
    section with blocks of commands after it), in page order."""
    first: list[Command] | None = None
    current = Section("top", 1, page)
    sections: list[Section] = [current]
    fence: tuple[str, int] | None = None
    body: list[tuple[int, str]] = []
    for no, line in enumerate(text.splitlines(), 1):
        if fence is None:
            m = re.match(r"^```\s*([\w-]*)\s*$", line)
            if m:
                fence, body = (m.group(1).lower(), no), []
            elif re.match(r"^#{2,4} ", line):
                current = Section(line.lstrip("#").strip(), no, page)
                sections.append(current)
            continue
        if line.strip() != "```":
            body.append((no, line))
            continue
        lang, _ = fence
        fence = None
        if lang not in RUN_LANGS:
            continue
        cmds = _commands(body, lang, page)
        if first_screen and first is None:
            first = cmds
        else:
            current.blocks.append(cmds)
    assert fence is None, f"{page}:{fence[1]}: a code block is never closed"
    assert first is not None or not first_screen, f"{page} has no sh block"
    return first, [s for s in sections if s.blocks]


def parse_readme(text: str) -> tuple[list[Command], list[Section]]:
    """README.md: (the first screen's commands, every section with commands after it)."""
    return parse_page(text, "README.md", first_screen=True)


def _parse_pages() -> tuple[list[Command], list[Section]]:
    first: list[Command] = []
    sections: list[Section] = []
    for path in PAGES:
        name = path.relative_to(REPO).as_posix()
        head, found = parse_page(path.read_text(encoding="utf-8"), name, first_screen=path == README)
        first = head if head is not None else first
        sections += found
    return first, sections


FIRST, ALL_SECTIONS = _parse_pages()
SECTIONS = [s for s in ALL_SECTIONS if s.runnable]  # a section whose every command says `not run` has no test


def _slug(title: str) -> str:
    """A section title's id: its words before any " — " (studies/README.md's "seed003-wan.yaml — INFN …" is
    ``seed003-wan-yaml``), lower case, at most 40 characters."""
    return re.sub(r"[^a-z0-9]+", "-", title.split(" — ")[0].lower())[:40].strip("-")


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


def _run(cmd: Command, section: str, cwd: Path, page: str = "README.md") -> subprocess.CompletedProcess:
    """Run one page's command through bash, as written; fail naming where it is (page:line) and what it said."""
    (cwd / ".tmp").mkdir(exist_ok=True)
    try:
        proc = subprocess.run(["bash", "-c", cmd.text], cwd=cwd, capture_output=True, text=True,
                              timeout=COMMAND_TIMEOUT, env=_env(cwd), stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{page}:{cmd.line} ({section}): `{cmd.text}` ran over {COMMAND_TIMEOUT} s")
    if proc.returncode != cmd.expect:
        err = proc.stderr.strip()[-3000:] or proc.stdout.strip()[-3000:]
        pytest.fail(f"{page}:{cmd.line} ({section}): `{cmd.text}` exited {proc.returncode}"
                    f"{f' (the page says {cmd.expect})' if cmd.expect else ''}:\n{err}")
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


@contextlib.contextmanager
def _outside(section: Section, config):
    """The section's outside directories, removed after it if a section made them and no other is using them.

    Several sections use one (``/tmp/storeval-scratch``), and on several xdist workers they overlap: each holds a
    shared lock while it runs; one that finds the directory missing notes that it was made; whoever ends with
    nobody else holding the lock removes a made directory. A directory that was there before any section ran is
    never removed."""
    where = Path(config.workerinput["storeval_lock_dir"]) if hasattr(config, "workerinput") else None
    held = []
    try:
        for d in _outside_dirs(section):
            tag = d.strip("/").replace("/", "-")
            if where is None:  # one process: nobody else uses it
                held.append((d, None, None if os.path.exists(d) else True))
                continue
            lock = open(where / f"readme-{tag}.lock", "a+b")
            fcntl.flock(lock, fcntl.LOCK_SH)
            made = where / f"readme-{tag}.made"
            if not os.path.exists(d):
                made.touch()
            held.append((d, lock, made))
        yield
    finally:
        for d, lock, made in held:
            if lock is None:
                if made:
                    shutil.rmtree(d, ignore_errors=True)
                continue
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass  # another section still uses it: the last one removes it
            else:
                if made.exists():
                    shutil.rmtree(d, ignore_errors=True)
                    made.unlink()
            lock.close()


# what each section's commands say they write (globs in the clone), by section id — checked after the section ran,
# beside the exit codes; a section not named here is checked by its exit codes alone
REPORT = ["storeval-results/report-*.html"]
EFFECTS = {
    "guide/first-study.md::a-short-tour": [
        "out.json", "storeval-results/storeval.duckdb", "storeval-results/report-*.html", "report.html",
        "before/storeval.duckdb", "after/storeval.duckdb", "storeval-results/export-parquet/cells.parquet"],
    "guide/first-study.md::the-metadata-workload": REPORT,
    "guide/clients-and-networks.md::many-clients-on-many-machines-mpi": ["out.json", "nodes.json", "slurm.json"],
    "guide/workloads.md::the-skim-workload-seeds-000-and-003": ["storeval-data/skim-*/events-003.root"],
    "guide/workloads.md::the-copy-workload-seed-004": REPORT,
    "guide/workloads.md::real-clients-the-command-workload-seed-0": REPORT,
    "guide/faults.md::faults-during-a-run": REPORT,
    "guide/reports.md::several-runs-and-figures-for-papers": [
        "days/storeval.duckdb", "days/both.html", "figs/index.json", "figs/*.svg", "figs/*.png", "figs/*.csv"],
    "guide/reports.md::importing-ior-mdtest-fio-and-warp-result": ["peers/storeval.duckdb"],
    "studies/README.md::example-yaml": REPORT,
    "studies/README.md::report-figures-yaml": REPORT,
    "studies/README.md::seed000-placement-yaml": REPORT,
    "studies/README.md::seed000-hepix-yaml": REPORT,
    "studies/README.md::seed003-replay-yaml": REPORT,
    "studies/README.md::seed003-wan-yaml": REPORT,
}

# the fewest runnable sections each page has, and the most `not run` commands it may carry: a parse that found
# nothing would pass every test below, and a `not run` is kept for what cannot or need not run here
RUNNABLE_AT_LEAST = {"README.md": 0, "docs/guide/README.md": 0, "docs/guide/first-study.md": 2,
                     "docs/guide/targets.md": 0, "docs/guide/testbed.md": 1, "docs/guide/clients-and-networks.md": 1,
                     "docs/guide/workloads.md": 3, "docs/guide/faults.md": 1, "docs/guide/reports.md": 2,
                     "studies/README.md": 6}
NOT_RUN_AT_MOST = {"docs/guide/clients-and-networks.md": 1,  # a cluster's hostfile
                   "docs/guide/workloads.md": 1,  # the HEPiX quick run studies/README.md runs on two targets
                   "studies/README.md": 12}  # each names the section or test file that runs it (or its superset)


def _pages() -> list[str]:
    return [p.relative_to(REPO).as_posix() for p in PAGES]


def test_the_pages_have_runnable_sections_and_every_not_run_says_why():
    """The parse found every page's examples, at least as many runnable sections as each page had when this was
    written; every `not run` gives a reason, and they stay few; the ids are unique; no study runs twice."""
    assert set(RUNNABLE_AT_LEAST) == set(_pages()), "a page was added or removed: give it a bound here"
    for page, least in RUNNABLE_AT_LEAST.items():
        found = [s.id for s in SECTIONS if s.page == page]
        assert len(found) >= least, (page, found)
        skipped = [c for s in ALL_SECTIONS if s.page == page for c in s.commands if c.skip is not None]
        assert all(c.skip for c in skipped)
        assert len(skipped) <= NOT_RUN_AT_MOST.get(page, 0), [f"{page}:{c.line}" for c in skipped]
    assert len(SECTIONS) >= 16, [s.id for s in SECTIONS]
    ids = [s.id for s in SECTIONS]
    assert len(ids) == len(set(ids)), "two sections of one page have the same title (their first 40 characters)"
    assert set(EFFECTS) <= set(ids), "a checked section was renamed: update EFFECTS"
    runs = [c.text for s in SECTIONS for c in s.commands if c.skip is None and "storeval run" in c.text]
    assert len(runs) == len(set(runs)), "a command runs in two sections: mark one `# not run: SECTION runs it`"


def test_the_page_cache_warning_comes_before_command_1():
    """A root user meets the warning that storeval drops the whole host's page cache before the command that
    does it."""
    text = README.read_text(encoding="utf-8")
    warning = text.find("drops the whole host's page cache")
    assert 0 <= warning < text.index("```sh"), "README: the page-cache warning must come before command 1"


def test_the_readme_stays_short_and_leads_to_every_guide_page():
    """README.md is read in minutes (at most 200 lines); the guide's pages are each linked from it, and every
    relative link of the README and the guide leads to a file that exists."""
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    for page in GUIDE.glob("*.md"):
        assert f"](docs/guide/{page.name})" in text, f"README.md does not link docs/guide/{page.name}"
        for link in re.findall(r"\]\(([^)#\s:]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (page.parent / link).exists(), f"docs/guide/{page.name} links {link}, which does not exist"
    for link in re.findall(r"\]\(([^)#\s:]+)(?:#[^)]*)?\)", text):
        assert (REPO / link).exists(), f"README.md links {link}, which does not exist"


def test_the_example_study_the_guide_shows_is_the_file_it_names():
    """The short tour shows a study and then runs `studies/example.yaml`: they are the same text."""
    text = (GUIDE / "first-study.md").read_text(encoding="utf-8")
    shown = re.search(r"this one is `studies/example.yaml`\):\n\n```yaml\n(.*?)```", text, re.S)
    assert shown, "the short tour no longer shows studies/example.yaml"
    assert shown.group(1) == (REPO / "studies" / "example.yaml").read_text(encoding="utf-8")


def test_every_yaml_example_is_yaml():
    """The study snippets are not run (they name clusters and mounts a reader has, this machine has not), but each
    is valid YAML whose top-level keys are study keys — a typo there would be the reader's first error."""
    import yaml

    from storeval.spec import TOP_KEYS

    blocks = [b for p in PAGES for b in re.findall(r"^```yaml\n(.*?)^```", p.read_text(encoding="utf-8"), re.S | re.M)]
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


def _testbed_down(beds: list[str], clone: Path) -> None:
    """`storeval testbed down` again for every testbed directory a section named, whatever happened."""
    for d in beds:
        if (clone / d).exists():
            subprocess.run(["storeval", "testbed", "down", "--dir", d], cwd=clone, capture_output=True,
                           timeout=300, env=_env(clone))


# studies/README.md's sections run from tests/test_studies_readme.py: a file of its own, so that the suite's workers
# (pytest-xdist hands out whole files) run them beside the README's and the guide's instead of after them
STUDY_SECTIONS = [s for s in SECTIONS if s.page == "studies/README.md"]
PAGE_SECTIONS = [s for s in SECTIONS if s.page != "studies/README.md"]


@pytest.mark.parametrize("section", PAGE_SECTIONS, ids=[s.id for s in PAGE_SECTIONS])
def test_readme_section_runs_as_written(section: Section, clone, request):
    """Every command of one page section, in order, in one clone (`# not run` ones left out)."""
    run_section(section, clone, request)


def run_section(section: Section, clone: Path, request) -> None:
    """Run a section's commands as the page says, check what they wrote, and leave no testbed behind."""
    beds = _testbed_dirs(section)
    with _outside(section, request.config), contextlib.ExitStack() as after:
        after.callback(_testbed_down, beds, clone)
        for cmd in section.commands:
            if cmd.skip is None:
                _run(cmd, section.title, clone, section.page)
        for pattern in EFFECTS.get(section.id, []):
            assert glob.glob(str(clone / pattern)), f"{section.id}: the page's commands wrote no {pattern}"
        for d in beds:  # the page's own `testbed down` ran: nothing of the servers is left
            assert not (clone / d).exists() or not any((clone / d).iterdir()), f"{d} was left by {section.title}"
