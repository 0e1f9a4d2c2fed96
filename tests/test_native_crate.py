"""The native engines are a required part of the test environment: built, loaded, io_uring usable where the
kernel offers it, and the Rust loops' own unit tests (native/src/lib.rs, `mod tests`) passing under cargo."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path


from .helpers import REPO, io_uring_expected, kernel_offers_io_uring


def test_the_native_module_is_built_and_loaded():
    from storeval.workloads import kernel

    assert kernel._native is not None, (
        "storeval._native is missing: the Rust build failed or was skipped; reinstall with cargo on PATH "
        "and STOREVAL_NATIVE=required (README, command 2)")
    for name in ("DataJob", "MetaJob", "io_uring_available", "OK", "DEADLINE", "ERRNO", "SHORT", "VERIFY"):
        assert hasattr(kernel._native, name), name


def test_io_uring_is_offered_and_usable():
    from storeval.workloads import kernel

    if not io_uring_expected():  # STOREVAL_TEST_WITHOUT_IO_URING=1: a person said this host lacks it
        assert not kernel_offers_io_uring() or kernel._native.io_uring_available() in (True, False)
        return
    assert kernel_offers_io_uring(), (
        "io_uring is disabled on this host (sysctl kernel.io_uring_disabled is not 0): the io_uring engine cannot "
        "be tested; enable it (sysctl -w kernel.io_uring_disabled=0), or run with STOREVAL_TEST_WITHOUT_IO_URING=1")
    assert kernel._native.io_uring_available(), (
        "the kernel offers io_uring but storeval cannot use a ring here (a seccomp filter or a container refusing "
        "io_uring_setup?); or run with STOREVAL_TEST_WITHOUT_IO_URING=1")


def test_the_rust_loops_unit_tests_pass():
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    assert os.path.exists(cargo), "cargo is missing: the native crate's tests need a Rust toolchain"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env = {**os.environ, "PYO3_PYTHON": sys.executable,
           "LD_LIBRARY_PATH": os.pathsep.join(p for p in (libdir, os.environ.get("LD_LIBRARY_PATH", "")) if p)}
    # its own target directory: never contends with (or invalidates) the wheel's build
    r = subprocess.run([cargo, "test", "--manifest-path", str(REPO / "native" / "Cargo.toml"), "--no-default-features",
                        "--target-dir", str(REPO / "native" / "target" / "unit-tests")],
                       capture_output=True, text=True, env=env, timeout=1500)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    m = re.search(r"test result: ok\. (\d+) passed; 0 failed; 0 ignored", out)
    assert m and int(m.group(1)) >= 6, out[-2000:]


def test_the_io_uring_loops_spin_is_named_beside_its_figures(tmp_path):
    """The io_uring loop spins on its completion queue before sleeping (CPU for IOPS, issue 29.4): the report says
    for how long, from the native module's own constant, next to the engine that ran."""
    from storeval import _native

    from .helpers import storeval

    if not io_uring_expected():
        return
    (tmp_path / "t").mkdir()
    r = storeval("run", "--target", f"file://{tmp_path / 't'}", "--workload", "bandwidth", "--clients", "1",
                 "--set", "file_size=1MiB", "--set", "transfer_size=4KiB", "--set", "phases=write,randread",
                 "--set", "iodepth=8", "--set", "engine=io_uring", cwd=tmp_path)
    assert r.rc in (0, 1), r.err  # 1: a short phase is flagged
    assert _native.SPIN_NS == 10_000
    assert "native io_uring, iodepth operations in flight; a wait for completions spins up to 10 µs before it " \
           "sleeps" in " ".join(r.out.split())
