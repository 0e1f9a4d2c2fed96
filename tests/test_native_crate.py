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

import pytest

from .helpers import REPO


def kernel_offers_io_uring() -> bool:
    """io_uring as the kernel offers it: the sysctl absent (older kernels: on) or 0 (2 disables it, 1 limits it
    to a group)."""
    try:
        return Path("/proc/sys/kernel/io_uring_disabled").read_text().strip() == "0"
    except FileNotFoundError:
        return True


def test_the_native_module_is_built_and_loaded():
    from storeval.workloads import kernel

    assert kernel._native is not None, (
        "storeval._native is missing: the Rust build failed or was skipped; reinstall with cargo on PATH "
        "and STOREVAL_NATIVE=required (README, command 2)")
    for name in ("DataJob", "MetaJob", "io_uring_available", "OK", "DEADLINE", "ERRNO", "SHORT", "VERIFY"):
        assert hasattr(kernel._native, name), name


def test_io_uring_is_usable_where_the_kernel_offers_it():
    from storeval.workloads import kernel

    if kernel_offers_io_uring():
        assert kernel._native.io_uring_available(), (
            "the kernel offers io_uring (kernel.io_uring_disabled is 0) but storeval cannot use a ring: "
            "a seccomp filter or a container refusing io_uring_setup?")
    else:
        assert not kernel._native.io_uring_available()


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
