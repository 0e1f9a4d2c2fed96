"""Helpers for tests: run the real `storeval` command in a subprocess and read what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass
class Result:
    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def storeval(*args: str, cwd: str | os.PathLike | None = None, timeout: float = 300, env: dict | None = None) -> Result:
    """Run ``python -m storeval ARGS`` and capture its exit code and output."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "storeval", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=full_env)
    return Result(proc.returncode, proc.stdout, proc.stderr)


def kernel_offers_io_uring() -> bool:
    """Whether the kernel offers io_uring, asked of the kernel, not of storeval: the sysctl absent (kernels before
    6.6: on) or 0 (1 limits it to a group, 2 disables it)."""
    try:
        return Path("/proc/sys/kernel/io_uring_disabled").read_text().strip() == "0"
    except FileNotFoundError:
        return True


def io_uring_expected() -> bool:
    """io_uring is a required part of the suite: its engine must run wherever a test asks for it, and a host that
    refuses it (kernel.io_uring_disabled, a seccomp filter) turns the run red. Only a person who knows the host
    lacks it says so: STOREVAL_TEST_WITHOUT_IO_URING=1 (the tests then expect the threads engine instead)."""
    return os.environ.get("STOREVAL_TEST_WITHOUT_IO_URING", "").strip() not in ("1", "true", "yes")


def load_json(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def leftovers(directory: str | os.PathLike) -> list[str]:
    """Everything storeval may have left in a target directory (its scratch directories)."""
    return sorted(str(p) for p in Path(directory).rglob("*") if "storeval-" in p.name and p.name != "storeval-results")




class InProcessComm:
    """The Comm of clients a test drives one after another in its own process: there is nobody to wait for."""

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size

    def barrier(self) -> None:
        """Every other client has already run (or runs next): a barrier has nothing to wait for."""

    def abort(self) -> None:
        """No other client is waiting in a barrier to be released."""


def listening_addresses(pids: list[int]) -> dict[int, list[tuple[str, int]]]:
    """pid -> the (address, port) pairs it listens on in the host's network namespace (TCP and UDP, from
    /proc/net via psutil), for the check that no testbed server listens beyond loopback."""
    import psutil

    pids = set(pids)
    out: dict[int, list[tuple[str, int]]] = {}
    for c in psutil.net_connections(kind="inet"):
        if c.pid in pids and (c.status == psutil.CONN_LISTEN or c.type == 2):  # 2: SOCK_DGRAM
            out.setdefault(c.pid, []).append((c.laddr.ip, c.laddr.port))
    return out


def exposed(pids: list[int]) -> list[str]:
    """`pid address:port` for every socket of ``pids`` bound beyond loopback (empty when all are private)."""
    import ipaddress

    bad = []
    for pid, addrs in listening_addresses(pids).items():
        for ip, port in addrs:
            addr = ipaddress.ip_address(ip.split("%")[0])
            addr = getattr(addr, "ipv4_mapped", None) or addr  # ::ffff:127.0.0.1 is loopback too
            if not addr.is_loopback:
                bad.append(f"{pid} {ip}:{port}")
    return bad


POLL_BOUND = 180.0  # seconds: the generous bound of a wait on a busy machine


def poll(check, what: str, bound: float = POLL_BOUND, interval: float = 0.05):
    """Poll ``check()`` until it returns something true (returned); fail naming ``what`` after ``bound`` s."""
    import time

    import pytest

    deadline = time.monotonic() + bound
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {bound:g} s")
        time.sleep(interval)


def tree_checksums(root: Path) -> dict[str, str]:
    """Every path under ``root`` (links as links, not followed) with its content's digest: planted files are
    compared byte for byte before and after what storeval did beside them."""
    import hashlib

    out = {}
    for p in sorted(Path(root).rglob("*")):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = "dir"
    return out


def dead_process() -> dict:
    """{pid, started} of a real process that has ended: what an owner record of a dead run names."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    created = psutil.Process(proc.pid).create_time()
    proc.kill()
    proc.wait()
    return {"pid": proc.pid, "started": created}



def everything_written(tmp_path: Path, *extra: str) -> str:
    """Every file under tmp_path that holds text (JSON, report, the store's tables) and the given output: where a
    secret must never appear."""
    import duckdb

    texts = list(extra)
    for path in tmp_path.rglob("*"):
        if path.suffix == ".duckdb":
            con = duckdb.connect(str(path), read_only=True)
            for (table,) in con.execute("SHOW TABLES").fetchall():
                texts.append(str(con.execute(f"SELECT * FROM {table}").fetchall()))
            con.close()
        elif path.is_file() and path.suffix in (".json", ".html", ".yaml", ".csv", ".txt", ".jsonl", ".md"):
            texts.append(path.read_text(errors="replace"))
    return "\n".join(texts)
