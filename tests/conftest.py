"""Fixtures shared by the tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# The programs installed with the test environment (aws-cli from the test extra) are found as an activated
# virtual environment would find them: the command workload runs them by name.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """An empty directory to use as a file:// target."""
    d = tmp_path / "target"
    d.mkdir()
    return d


@pytest.fixture(scope="session")
def testbed(tmp_path_factory):
    """MinIO, XRootD and HDFS started once for the whole test session by storeval's own testbed code."""
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
