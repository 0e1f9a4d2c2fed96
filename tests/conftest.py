"""Fixtures shared by the tests."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import sys
from pathlib import Path

import pytest

ALLOWED_SKIPS_FILE = Path(__file__).with_name("skips-allowed.txt")

# The programs installed with the test environment (aws-cli from the test extra) are found as an activated
# virtual environment would find them: the command workload runs them by name.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@contextlib.contextmanager
def _exclusively(lock: Path):
    """Hold an exclusive ``flock`` on ``lock``: what one worker of a side-by-side run makes for all of them."""
    import fcntl

    with open(lock, "a+b") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@pytest.fixture(scope="session")
def default_study_run(tmp_path_factory, pytestconfig):
    """`storeval run` with no arguments, once per session: the default quick study (bandwidth, metadata and skim at
    1 and 2 clients, 3 repetitions) on the file system of a fresh directory — what command 1 runs. Every test that
    checks what that run leaves, prints or draws reads this one run: (its directory, its result, its JSON path
    outside that directory). Side by side, the first worker that needs it runs it and the others read the same
    run (they only read it)."""
    from .helpers import Result, storeval

    shared = _lock_dir(pytestconfig)
    if shared is None:
        work = tmp_path_factory.mktemp("default-run")
        out = tmp_path_factory.mktemp("default-run-json") / "out.json"
        return work, storeval("run", "--json", str(out), cwd=work, timeout=900), out
    base = shared / "default-run"
    work, out, saved = base / "work", base / "out.json", base / "result.json"
    with _exclusively(shared / "default-run.lock"):
        if not saved.exists():
            work.mkdir(parents=True, exist_ok=True)
            r = storeval("run", "--json", str(out), cwd=work, timeout=900)
            saved.write_text(json.dumps(dataclasses.asdict(r)), encoding="utf-8")
    return work, Result(**json.loads(saved.read_text(encoding="utf-8"))), out


# XRootD's client defaults (XrdClConstants.hh). The xrootd driver sets the process-wide client environment
# from its target's timeout; a test that uses the client directly afterwards in the same worker would
# inherit, say, a 5 s request timeout, and a create the redirector answers with a wait would expire.
_XRD_DEFAULTS = {"TimeoutResolution": 15, "ConnectionWindow": 120, "ConnectionRetry": 5, "RequestTimeout": 1800,
                 "StreamTimeout": 60, "StreamErrorWindow": 1800}


@pytest.fixture(autouse=True)
def _xrootd_client_defaults():
    """Each test starts with XRootD's own client defaults, whatever a driver in an earlier test set."""
    xrd = sys.modules.get("XRootD.client")
    if xrd is not None:
        for name, value in _XRD_DEFAULTS.items():
            xrd.EnvPutInt(name, value)
    yield


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """An empty directory to use as a file:// target."""
    d = tmp_path / "target"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def testbed(tmp_path_factory):
    """MinIO, XRootD and HDFS started once for the whole test session by storeval's own testbed code. Side by
    side, each worker has its own: many tests compare a server's own counters (MinIO's metrics, a datanode's JMX)
    with exactly what their clients moved, which another worker's traffic would change."""
    from storeval.testbed import Testbed

    base = tmp_path_factory.mktemp("testbed")
    bed = Testbed(base / "servers", targets_file=base / "storeval-testbed.yaml")
    try:
        bed.up(["minio", "xrootd", "hdfs"], {"hdfs": {"datanodes": 1}}, log=lambda message: None)
        yield bed
    finally:
        bed.down(log=lambda message: None)


@pytest.fixture(scope="session")
def testbed_targets(testbed) -> dict:
    return testbed.targets()


@pytest.fixture(scope="session")
def testbed_credentials(testbed) -> tuple[str, str]:
    """MinIO's (access key, secret key) — to check they never leak."""
    return testbed.load()["minio"].credentials()


@pytest.fixture(scope="session")
def chromium():
    """Debian's chromium (the report tests' browser, and kaleido's for --figures), installed through apt if it is
    missing — never a browser download."""
    from storeval.testbed.base import TestbedError, apt_install

    if not os.path.exists("/usr/bin/chromium"):
        try:
            apt_install("chromium")
        except TestbedError as e:
            pytest.skip(str(e))
    return "/usr/bin/chromium"


# ------------------------------------------------------------------------------------------------ installs
# Everything the suite's servers and browser need is installed once, before collection and outside any test's
# time limit: a test that looks for a tool (xrootd, ganesha.nfsd, chromium) finds it installed, and the first test
# of a server is not charged minutes of apt or go build. Each part that fails is named here; the tests that need it
# then fail with the same line (their fixtures install again and raise). STOREVAL_TEST_INSTALL=0 skips this.


def _install_test_environment() -> list[str]:
    import threading
    import time

    from storeval.testbed.base import TestbedError, apt_install

    lines: list[str] = []

    def part(name, fn):
        t0 = time.monotonic()
        try:
            fn()
            lines.append(f"{name}: ready ({time.monotonic() - t0:.0f} s)")
        except (TestbedError, OSError) as e:
            lines.append(f"{name}: NOT INSTALLED: {e}")

    def debian():
        from storeval.testbed import ceph, glusterfs, nfs, slurm, xrootd

        if os.geteuid() != 0:
            raise TestbedError("not root: the Debian packages of the servers and Chromium are not installed")
        apt_install(*xrootd.PACKAGES, *xrootd.GRID_CLIENTS, *glusterfs.PACKAGES, *ceph.PACKAGES, *nfs.PACKAGES,
                    *slurm.PACKAGES, "chromium", "fio")

    def minio():
        from storeval.testbed.minio import install_minio

        install_minio()

    def hdfs():
        from storeval.testbed.hdfs import HdfsServer

        HdfsServer(Path("/nonexistent")).install()

    threads = [threading.Thread(target=part, args=(name, fn), daemon=True)
               for name, fn in (("Debian packages (servers, grid clients, slurm, chromium, fio)", debian),
                                ("MinIO (go build)", minio), ("HDFS (maven)", hdfs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return lines


def _compile_storeval() -> None:
    """Byte-compile storeval's own modules once. An editable install leaves them as sources, and where
    PYTHONDONTWRITEBYTECODE is set (as on CI's machines) every one of the suite's thousands of storeval processes
    would compile them again (~0.2 s of CPU each)."""
    import compileall

    import storeval

    compileall.compile_dir(Path(storeval.__file__).parent, quiet=1, workers=1)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    config = session.config
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled and installed before it started
    _compile_storeval()
    if not _truthy(os.environ.get("STOREVAL_TEST_INSTALL", "1")):
        return
    import time

    t0 = time.monotonic()
    lines = _install_test_environment()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(f"test environment ({time.monotonic() - t0:.0f} s): " + "; ".join(lines))


# ------------------------------------------------------------------------------------------------ time limits
# Every test is bounded (pyproject: timeout = 900 s, pytest-timeout), so a hang names itself. These files run whole
# studies or bring servers up inside one test, whose own subprocess bounds add up past that on a busy machine; they
# get a longer limit (a test's own @pytest.mark.timeout wins).
LONG_TESTS_S = {"test_readme.py": 2400, "test_seed_studies.py": 2400, "test_network_studies.py": 2400,
                "test_fault_studies.py": 2400, "test_replay_real.py": 2400, "test_testbed_cli.py": 2400,
                "test_testbed_ceph.py": 2400, "test_command.py": 2400, "test_native_crate.py": 1800}


# The files that take longest (seconds of their tests, measured side by side on 2 cores), run first: xdist hands
# files to workers in collection order, and a long file started last would leave the other workers idle while it
# finishes. Any file not listed follows, in its usual order.
SLOWEST_FILES = {"test_readme.py": 860, "test_studies_readme.py": 390, "test_skim.py": 370, "test_report_page.py": 300,
                 "test_seed_studies.py": 290,
                 "test_report.py": 280, "test_jobs.py": 280, "test_fault_studies.py": 240,
                 "test_outputs_and_store.py": 235, "test_network_targets.py": 215, "test_testbed_cli.py": 210,
                 "test_command.py": 180, "test_store_and_cli.py": 180, "test_network_studies.py": 165,
                 "test_replay.py": 150, "test_mpi.py": 120, "test_server_counters.py": 115, "test_testbed_ceph.py": 105,
                 "test_testbed_ownership.py": 105, "test_mpi_nodes.py": 100, "test_testbed_glusterfs.py": 100}


def pytest_collection_modifyitems(config, items):
    for item in items:
        limit = LONG_TESTS_S.get(item.path.name)
        if limit and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(limit))
    items.sort(key=lambda item: -SLOWEST_FILES.get(item.path.name, 0))  # stable: a file's tests keep their order


# ------------------------------------------------------------------------------------------------ side by side
# The suite runs on several pytest-xdist workers (README: -n 3): tests mostly wait on servers, sockets and timed
# phases, not on the CPU. A test marked ``exclusive`` judges something the whole machine shares (a block device's
# counters, every process's CPU, the page cache) and runs alone: workers hold a shared lock on a file for the
# duration of each test, an exclusive test an exclusive one. A waiting exclusive test first takes a gate that
# new tests must pass, so it is not starved by a stream of short ones.


def _lock_dir(config) -> Path | None:
    """The directory every worker of this run shares (the controller's base temporary directory), or None when
    the tests do not run side by side."""
    if not hasattr(config, "workerinput"):
        return None
    return Path(config.workerinput["storeval_lock_dir"])


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):  # xdist's controller, once per worker it starts
    node.workerinput["storeval_lock_dir"] = str(node.config._tmp_path_factory.getbasetemp())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import fcntl

    where = _lock_dir(item.config)
    if where is None:
        yield
        return
    exclusive = item.get_closest_marker("exclusive") is not None
    with open(where / "side-by-side.gate", "a+b") as gate, open(where / "side-by-side.lock", "a+b") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            if not exclusive:
                fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------------ skip policy
# A skipped test is not a passed one. In a strict run (CI=true, STOREVAL_STRICT_SKIPS=1, or --strict-skips) a skip
# is an error unless its reason matches a line of tests/skips-allowed.txt: a missing required part (the native
# module, a server the testbed could not install, Chromium) fails the run and names itself.


def pytest_addoption(parser):
    parser.addoption("--strict-skips", action="store_true", default=False,
                     help="a skip whose reason is not in tests/skips-allowed.txt is an error (on by default with CI=true)")


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def _allowed_skip_patterns() -> list[re.Pattern]:
    lines = ALLOWED_SKIPS_FILE.read_text(encoding="utf-8").splitlines()
    return [re.compile(line) for line in lines if line.strip() and not line.lstrip().startswith("#")]


_config = None  # this session's config: the report hooks are not given it


def pytest_configure(config):
    global _config
    _config = config
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # keep SLOWEST_FILES' order (xdist would sort files by test count)
    config._storeval_strict_skips = (config.getoption("strict_skips") or _truthy(os.environ.get("CI"))
                                     or _truthy(os.environ.get("STOREVAL_STRICT_SKIPS")))
    config._storeval_allowed_skips = _allowed_skip_patterns()
    config._storeval_skips = []  # (nodeid, reason, allowed)


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        reason = str(longrepr[2])
    else:
        reason = str(longrepr)
    return reason.removeprefix("Skipped: ")


def _judge_skip(config, report) -> None:
    """Note a skip on its report (an xdist worker's reports carry it to the controller, which lists it); in a
    strict run turn one whose reason is not allowed into a failure naming it."""
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = _skip_reason(report)
    allowed = any(p.search(reason) for p in config._storeval_allowed_skips)
    report.storeval_skip = [reason, allowed]
    if config._storeval_strict_skips and not allowed:
        report.outcome = "failed"
        report.longrepr = (f"skipped in a strict run: {reason}\n(a required part is missing; only the reasons in "
                           f"tests/skips-allowed.txt may skip under CI=true or --strict-skips)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    _judge_skip(item.config, outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    outcome = yield
    _judge_skip(collector.config, outcome.get_result())


def _list_skip(config, report) -> None:
    if not hasattr(config, "workerinput") and getattr(report, "storeval_skip", None):
        config._storeval_skips.append((report.nodeid, *report.storeval_skip))


def pytest_runtest_logreport(report):
    _list_skip(_config, report)


def pytest_collectreport(report):
    _list_skip(_config, report)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    skips = config._storeval_skips
    if not skips:
        return
    terminalreporter.section(f"skips ({len(skips)}; strict: {'yes' if config._storeval_strict_skips else 'no'})")
    for nodeid, reason, allowed in skips:
        verdict = "allowed" if allowed else ("FAILED: not allowed" if config._storeval_strict_skips else "not allowed")
        terminalreporter.write_line(f"{nodeid}: {reason} [{verdict}]")
