"""Go programs the testbed needs (the MinIO server, the warp benchmark), built from the Go module proxy.

The binaries are built once into ``cache_dir()/bin`` (``go install`` of a pinned pseudo-version; MinIO
publishes no semver tags, so the proxy serves it only as ``v0.0.0-<date>-<commit>``) and reused afterwards;
a file lock keeps concurrent builds (parallel test sessions) from racing, and the Go caches are removed
after a build.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from .base import TestbedError, cache_dir, run

# Pinned 2026-11-21 (when this module was written): what `go list -m github.com/minio/minio@latest` resolved to
# through the module proxy — commit 7aac2a2c5b7c of 2026-02-12, the newest one served; its go.mod needs
# go >= 1.24. It builds with the machine's Go 1.26.8 (CGO_ENABLED=0) and passes tests/test_testbed_minio.py.
# `--version` prints DEVELOPMENT.GOGET for any `go install` build, so the version lives in the file name.
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
# warp (MinIO's S3 benchmark): the proxy refuses warp's version list (403), so `@latest` cannot be resolved;
# v1.0.0 is served (pinned 2026-11-21) and builds with `go build` in a writable copy of the module directory.
WARP_MODULE = "github.com/minio/warp"
WARP_VERSION = "v1.0.0"

BUILD_TIMEOUT = 3600.0  # a cold MinIO build (download included) took 2 min 16 s on 2 cores


def _go_env() -> dict[str, str]:
    go = cache_dir() / "go"
    return {
        "GOMODCACHE": str(go / "mod"),
        "GOCACHE": str(go / "build"),
        "GOPATH": str(go / "path"),
        "GOTOOLCHAIN": "local",  # never download another Go toolchain
        # sum.golang.org is unreachable here; the modules themselves come from the proxy over HTTPS, and
        # every dependency is still checked against the go.sum of minio/warp.
        "GONOSUMDB": f"{MINIO_MODULE},{WARP_MODULE}",
        "GOFLAGS": "-mod=mod -modcacherw -buildvcs=false",  # -modcacherw: the module cache can be removed
        "CGO_ENABLED": "0",  # static binaries, as MinIO's own releases are built
    }


def _require_go(what: str) -> str:
    go = shutil.which("go")
    if go is None:
        raise TestbedError(f"go is not installed: install Go >= 1.24 (https://go.dev/dl) to build {what}")
    return go


def _runs(binary: Path) -> bool:
    if not binary.is_file() or not os.access(binary, os.X_OK):
        return False
    try:
        return subprocess.run([str(binary), "--version"], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@contextmanager
def _build_lock() -> Iterator[None]:
    """One Go build at a time per cache directory (MinIO and warp share the module and build caches)."""
    with open(cache_dir() / "go-build.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _clean_go_caches() -> None:
    """Drop the Go caches once the binary is in place: ~1–2 GB of build cache and ~1.2 GB of modules.

    The module cache is dropped too: the binary is only rebuilt when the pinned version changes, and then
    the proxy serves the modules again in about a minute — not worth keeping 1.2 GB for."""
    go = cache_dir() / "go"
    for sub in ("build", "mod", "path", "src", "gobin"):
        path = go / sub
        if path.exists():
            for d, _, _ in os.walk(path):  # module directories are read-only unless built with -modcacherw
                try:
                    os.chmod(d, 0o755)
                except OSError:
                    pass
            shutil.rmtree(path, ignore_errors=True)


def install_minio() -> Path:
    """The MinIO server binary (``cache_dir()/bin/minio-<MINIO_VERSION>``), built on first use (minutes)."""
    binary = cache_dir() / "bin" / f"minio-{MINIO_VERSION}"
    if _runs(binary):
        return binary
    _require_go("MinIO")
    with _build_lock():
        if _runs(binary):  # another process built it while we waited
            return binary
        gobin = cache_dir() / "go" / "gobin"
        try:
            shutil.rmtree(gobin, ignore_errors=True)
            gobin.mkdir(parents=True)
            run(["go", "install", f"{MINIO_MODULE}@{MINIO_VERSION}"], "building minio", timeout=BUILD_TIMEOUT,
                env={**_go_env(), "GOBIN": str(gobin)}, cwd=cache_dir())
            built = gobin / "minio"
            if not _runs(built):
                raise TestbedError(f"building minio failed: {built} was not produced or does not run")
            binary.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, binary)
        finally:
            _clean_go_caches()
    return binary


def install_warp() -> Path:
    """The warp S3 benchmark binary (``cache_dir()/bin/warp-<WARP_VERSION>``), built on first use."""
    binary = cache_dir() / "bin" / f"warp-{WARP_VERSION}"
    if _runs(binary):
        return binary
    _require_go("warp")
    with _build_lock():
        if _runs(binary):
            return binary
        env = _go_env()
        work = cache_dir() / "go" / "src"
        try:
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            proc = subprocess.run(["go", "mod", "download", "-json", f"{WARP_MODULE}@{WARP_VERSION}"],
                                  capture_output=True, text=True, timeout=BUILD_TIMEOUT, env={**os.environ, **env},
                                  cwd=work)
            try:
                info = json.loads(proc.stdout)
            except ValueError:
                info = {"Error": (proc.stderr or proc.stdout).strip().replace("\n", " | ")}
            if proc.returncode or "Dir" not in info:
                raise TestbedError(f"downloading warp failed: {' '.join(str(info.get('Error', '')).split())}")
            src = work / f"warp-{WARP_VERSION}"
            shutil.copytree(info["Dir"], src)
            for p in [src, *src.rglob("*")]:  # module cache files are read-only; go build may update go.sum
                p.chmod(0o755 if p.is_dir() else 0o644)
            built = work / "warp"
            run(["go", "build", "-o", str(built), "."], "building warp", timeout=BUILD_TIMEOUT, env=env, cwd=src)
            if not _runs(built):
                raise TestbedError(f"building warp failed: {built} was not produced or does not run")
            binary.parent.mkdir(parents=True, exist_ok=True)
            os.replace(built, binary)
        finally:
            _clean_go_caches()
    return binary


__all__ = ["MINIO_VERSION", "WARP_VERSION", "install_minio", "install_warp"]
