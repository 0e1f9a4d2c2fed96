"""Real storage servers on 127.0.0.1: the building blocks every testbed server uses.

A :class:`Server` installs what it needs (once, into the user's cache directory), starts its processes in
their own session so they outlive ``storeval testbed up``, waits until they answer, describes the storeval
targets that reach it, and stops exactly the processes it started — identified by PID *and* start time,
so a recycled PID is never killed — before removing the data it created.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psutil

from ..errors import StorevalError

LOCALHOST = "127.0.0.1"


class TestbedError(StorevalError):
    """A testbed server could not be installed, started or stopped; the message says why and what to do."""

    __test__ = False  # not a pytest test class


def cache_dir() -> Path:
    """Where built servers and downloads are kept between runs (``$XDG_CACHE_HOME/storeval``)."""
    base = os.environ.get("STOREVAL_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "storeval")
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (the server may still lose a race for it: retry on failure)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((LOCALHOST, 0))
        return s.getsockname()[1]


def port_open(port: int, host: str = LOCALHOST) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(check, timeout: float, what: str, *, log: Path | None = None, interval: float = 0.2) -> None:
    """Poll ``check()`` until it is true; raise TestbedError naming ``what`` (and the log) on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(interval)
    hint = f"; see {log}" if log else ""
    raise TestbedError(f"{what} did not become ready within {timeout:g} s{hint}")


@dataclass
class Proc:
    """A process the testbed started: enough to find it again, and only it."""

    pid: int
    create_time: float
    name: str
    log: str

    def alive(self) -> bool:
        try:
            p = psutil.Process(self.pid)
            return abs(p.create_time() - self.create_time) < 0.5 and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL — this process and its children only."""
        if not self.alive():
            return
        p = psutil.Process(self.pid)
        family = [p, *p.children(recursive=True)]
        for q in family:
            try:
                q.send_signal(signal.SIGTERM)
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(family, timeout=grace)
        for q in alive:
            try:
                q.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=5)


def spawn(cmd: list[str], *, name: str, log: Path, env: dict[str, str] | None = None, cwd: Path | None = None,
          user: str | None = None) -> Proc:
    """Start ``cmd`` in a new session (it outlives the caller), output to ``log``."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True, user=user)
        except OSError as e:
            raise TestbedError(f"cannot start {name} ({cmd[0]}): {e.strerror}") from e
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.NoSuchProcess:
        created = time.time()
    return Proc(pid=proc.pid, create_time=created, name=name, log=str(log))


def run(cmd: list[str], what: str, *, timeout: float = 1800, env: dict[str, str] | None = None,
        cwd: str | Path | None = None) -> str:
    """Run an installation step; on failure raise one line with the tail of its output."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})},
                              cwd=cwd)
    except FileNotFoundError:
        raise TestbedError(f"{what}: {cmd[0]} is not installed") from None
    except subprocess.TimeoutExpired:
        raise TestbedError(f"{what}: did not finish within {timeout:g} s") from None
    if proc.returncode:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        raise TestbedError(f"{what} failed (exit {proc.returncode}): {tail}")
    return proc.stdout


def apt_install(*packages: str) -> None:
    """Install Debian packages that are missing (needs root); one clear line if that is impossible."""
    missing = [p for p in packages if subprocess.run(["dpkg", "-s", p], capture_output=True).returncode]
    if not missing:
        return
    if os.geteuid() != 0:
        raise TestbedError(f"Debian packages {' '.join(missing)} are needed: run apt-get install {' '.join(missing)} as root")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    try:
        run(["apt-get", "install", "-y", "--no-install-recommends", *missing], "apt-get install", env=env)
    except TestbedError:
        run(["apt-get", "update"], "apt-get update", env=env)
        run(["apt-get", "install", "-y", "--no-install-recommends", *missing], "apt-get install", env=env)


@dataclass
class ServerState:
    """What `testbed down` and `testbed status` need to know about a running server (saved as JSON)."""

    kind: str
    root: str
    procs: list[Proc] = field(default_factory=list)
    ports: dict[str, int] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ServerState:
        return cls(kind=d["kind"], root=d["root"], procs=[Proc(**p) for p in d["procs"]], ports=d["ports"],
                   info=d.get("info", {}))


class Server(ABC):
    """One kind of testbed server. Subclasses implement install, start, ready and targets."""

    kind: ClassVar[str]
    summary: ClassVar[str] = ""

    def __init__(self, root: Path, options: dict[str, Any] | None = None, state: ServerState | None = None) -> None:
        self.root = Path(root)
        self.options = options or {}
        self.state = state or ServerState(kind=self.kind, root=str(self.root))

    @abstractmethod
    def install(self) -> None:
        """Make the server's software available (idempotent, cached); raise TestbedError if impossible."""

    @abstractmethod
    def start(self) -> None:
        """Start the processes on 127.0.0.1 with data under ``self.root``; record them in ``self.state``."""

    @abstractmethod
    def ready(self) -> bool:
        """Whether the server answers requests now."""

    @abstractmethod
    def targets(self) -> dict[str, dict[str, Any]]:
        """storeval targets reaching this server: name -> {url: ..., options...} (no secrets, only references)."""

    def wait_ready(self, timeout: float = 120) -> None:
        log = Path(self.state.procs[0].log) if self.state.procs else None

        def check() -> bool:
            dead = [p for p in self.state.procs if not p.alive()]
            if dead:
                raise TestbedError(f"{self.kind}: {dead[0].name} exited while starting; see {dead[0].log}")
            return self.ready()

        wait_until(check, timeout, self.kind, log=log)

    def alive(self) -> bool:
        return bool(self.state.procs) and all(p.alive() for p in self.state.procs)

    def status(self) -> str:
        procs = ", ".join(f"{p.name} pid {p.pid} {'up' if p.alive() else 'DOWN'}" for p in self.state.procs)
        ports = ", ".join(f"{k} {v}" for k, v in self.state.ports.items())
        return f"{self.kind}: {procs}; ports {ports}"

    def stop(self) -> None:
        """Stop exactly the processes this server started, then remove its data directory."""
        for p in reversed(self.state.procs):
            p.stop()
        if self.root.exists():
            shutil.rmtree(self.root, ignore_errors=True)
        self.state.procs = []


def save_json(path: Path, data: Any, mode: int = 0o600) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
    os.replace(tmp, path)
