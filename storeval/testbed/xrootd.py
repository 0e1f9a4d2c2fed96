"""A real XRootD server (Debian's ``xrootd-server``) on 127.0.0.1, with every read and write traced.

The server runs in the foreground of its own session (no ``-b``), so the PID we record is the server
itself; it drops to the ``xrootd`` user (``-R xrootd``) because it refuses to run as root. Its data lives
in ``<root>/data`` and the storeval target points at ``root://127.0.0.1:PORT//storeval``.

``xrootd.trace fsio`` makes it log one line per read, vector-read element and write: :func:`parse_trace`
turns those lines into ``(op, offset, length)`` so a test can count the bytes the server was asked for.
The log is never rotated (``-k fifo``: it would only rotate when someone writes to ``<log dir>/.xrootd.log``),
so its path stays valid for as long as the server runs.

XRootD binds 0.0.0.0 (it has no option for one address); the ``xrd.allow`` lines reject other hosts.

``-R xrootd`` makes the server work as the ``xrootd`` user, which must reach its files. The testbed
directory may sit where that user cannot go (a home directory, pytest's 0700 temporary directories), so
the server's own files — data, log, configuration, admin and pid directories — live in a *home* of their
own under ``/var/tmp`` (``storeval-xrootd-*``): a second anchor of the server's ledger, with its own marker.
On stop only what the ledger proves is removed, plus what the server wrote: everything in its admin and pid
directories, its log fifo, and in the data directory what belongs to the ``xrootd`` user it runs as (when
not root it runs as the caller, and a file put into its data directory cannot be told from one written
through the server: it is removed with the data).
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .base import (
    LOCALHOST,
    Proc,
    Server,
    TestbedError,
    apt_install,
    free_port,
    port_open,
)

PACKAGES = ("xrootd-server", "xrootd-client")
RUN_AS = "xrootd"  # the user Debian's package creates; the server refuses to run as root
EXPORT = "storeval"  # the directory (under the data dir) the storeval target points at
START_ATTEMPTS = 3
DATA, ADMIN, LOGS = "xrootd-data", "xrootd-admin", "xrootd-logs"  # ledger rules, see XrootdServer.claims
START_TIMEOUT = 30.0

# One trace line per read / readV element / write with ``xrootd.trace fsio``:
#   5.5:  ... root.123:20@localhost Xrootd_Protocol: 0 fh=0 read 2176@64970135
#         ... root.123:20@localhost Xrootd_Protocol: fh=0 readV 10@0
#         ... root.123:20@localhost Xrootd_Protocol: 0 pgread 8388608@0 fn=/storeval/f
#         ... root.123:20@localhost Xrootd_Protocol: 0 fh=0 write 10@100
#         ... root.123:20@localhost Xrootd_Protocol: 0 pgwrite 8396800@0 fn=/storeval/f
#   <5.4: the same with ``XrootdProtocol:``; pgread may read ``0 fh=0 pgread 8388608@0``.
_TRACE = re.compile(
    r"\bXrootd_?Protocol:\s+(?:\d+\s+)?(?:fh=\d+\s+)?"
    r"(?P<op>readV|read|pgread|writeV|write|pgwrite)\s+(?:retry\s+)?(?P<len>\d+)@(?P<off>\d+)")
PAGE = 4096  # pgread/pgwrite page size
CRC = 4  # a CRC32C per page travels with pgwrite data, and the traced length includes them


def pgwrite_payload(offset: int, traced: int) -> int:
    """Data bytes of a pgwrite whose traced length (data plus one 4-byte CRC per page) is ``traced``.

    Pages are aligned to 4 KiB file offsets, so the first one may be short.
    """
    first = PAGE - offset % PAGE
    if traced <= first + CRC:
        return max(traced - CRC, 0)
    full, rest = divmod(traced - first - CRC, PAGE + CRC)
    return first + full * PAGE + max(rest - CRC, 0)


def parse_trace(lines: Iterable[str]) -> list[tuple[str, int, int]]:
    """``(op, offset, length)`` for every read, readV element, pgread, write and pgwrite in trace lines.

    ``op`` is the name the server logs (``read``, ``readV``, ``pgread``, ``write``, ``pgwrite``); one readV
    request gives one tuple per element. Lengths are what the client *asked* for, as the server logs them
    before doing the I/O: a read that crosses the end of the file is logged with its full length, and a
    request that fails afterwards is logged too. For ``pgwrite`` the length is the data only (the CRC32C
    bytes the server also logs are taken off). Other lines are ignored.
    """
    out = []
    for line in lines:
        m = _TRACE.search(line)
        if not m:
            continue
        op, offset, length = m["op"], int(m["off"]), int(m["len"])
        if op == "pgwrite":
            length = pgwrite_payload(offset, length)
        out.append((op, offset, length))
    return out


def query_readv_limits(url: str, timeout: int = 10) -> tuple[int, int]:
    """``(readv_iov_max, readv_ior_max)`` of the server at ``root://host:port``: elements per kXR_readv
    request, and bytes per element. 5.5.3 answers (1024, 2097136)."""
    from XRootD import client
    from XRootD.client.flags import QueryCode

    status, answer = client.FileSystem(url).query(QueryCode.CONFIG, "readv_iov_max readv_ior_max",
                                                  timeout=timeout)
    if not status.ok or not answer:
        raise TestbedError(f"xrootd: cannot query the vector-read limits of {url}: {status.message.strip()}")
    iov, ior = (int(v) for v in answer.decode().split())
    return iov, ior


def _can_reach(path: Path, user: str) -> bool:
    """Whether ``user`` can search (traverse) ``path``, every directory above it included."""
    proc = subprocess.run(["test", "-x", str(path)], user=user, group=user, extra_groups=[],
                          capture_output=True)
    return proc.returncode == 0


class XrootdServer(Server):
    kind = "xrootd"
    summary = "XRootD 5 (Debian xrootd-server) on 127.0.0.1, every read traced"

    # -- install ----------------------------------------------------------------------------------------
    def install(self) -> None:
        apt_install(*PACKAGES)
        if not shutil.which("xrootd"):
            raise TestbedError("xrootd: the xrootd binary is missing although xrootd-server is installed; "
                               "run apt-get install --reinstall xrootd-server")

    # -- paths (all derived from the recorded home, so a rebuilt server finds them too) --------------------
    @property
    def home(self) -> Path:
        """Where the server's files live: a directory every user can reach (see the module docstring)."""
        if "home" not in self.state.info:
            base = Path("/var/tmp") if os.access("/var/tmp", os.W_OK) else Path(tempfile.gettempdir())
            home = Path(tempfile.mkdtemp(prefix="storeval-xrootd-", dir=base))
            self.ledger.adopt_new(home)  # made exclusively just now: recorded at once
            home.chmod(0o755)
            self.state.info["home"] = str(home)
        return Path(self.state.info["home"])

    @property
    def data_dir(self) -> Path:
        return self.home / "data"

    @property
    def config_file(self) -> Path:
        return self.home / "xrootd.cfg"

    @property
    def log_file(self) -> Path:
        return Path(self.state.info.get("log") or self.home / "log" / "xrootd.log")

    @property
    def port(self) -> int:
        try:
            return int(self.state.ports["xrootd"])
        except KeyError:
            raise TestbedError("xrootd: not started (no port recorded)") from None

    @property
    def url(self) -> str:
        """``root://127.0.0.1:PORT`` — the server, without a path."""
        return f"root://{LOCALHOST}:{self.port}"

    def trace_log(self) -> Path:
        """The log with the ``fsio`` trace lines (one file for the server's whole life)."""
        return self.log_file

    def trace_mark(self) -> int:
        """The current end of the trace log: pass it to :meth:`trace_ops` to see only what follows."""
        try:
            return self.trace_log().stat().st_size
        except FileNotFoundError:
            return 0

    def trace_ops(self, since: int = 0) -> list[tuple[str, int, int]]:
        """:func:`parse_trace` of the trace log from byte ``since`` (a :meth:`trace_mark`) on.

        A request is logged before the server answers it, so once a synchronous client call has returned,
        its lines are in the log."""
        with open(self.trace_log(), "rb") as f:
            f.seek(since)
            text = f.read().decode("utf-8", "replace")
        return parse_trace(text.splitlines())

    # -- start ------------------------------------------------------------------------------------------
    def _user(self) -> str | None:
        """The user the server drops to (None when we are not root: then it simply runs as us)."""
        if os.geteuid() != 0:
            return None
        try:
            pwd.getpwnam(RUN_AS)
        except KeyError:
            raise TestbedError(f"xrootd: user '{RUN_AS}' is missing (xrootd-server creates it); "
                               "run apt-get install --reinstall xrootd-server") from None
        return RUN_AS

    def _prepare_dirs(self, user: str | None) -> None:
        self.mkdir(self.data_dir, rule=DATA)
        self.mkdir(self.data_dir / EXPORT)
        self.mkdir(self.home / "admin", rule=ADMIN)
        self.mkdir(self.home / "run", rule=ADMIN)
        self.mkdir(self.home / "log", rule=LOGS)
        self.state.info["user"] = user
        if user is None:
            return
        ent = pwd.getpwnam(user)
        for top, dirs, files in os.walk(self.home):
            for name in [top, *(os.path.join(top, n) for n in dirs + files)]:
                os.chown(name, ent.pw_uid, ent.pw_gid, follow_symlinks=False)
        if not _can_reach(self.data_dir, user):
            raise TestbedError(f"xrootd: user {user} cannot reach {self.data_dir}; set TMPDIR to a directory every "
                               "user can traverse")

    def claims(self, rule: str, parts: tuple[str, ...], st: os.stat_result) -> bool:
        """The admin and pid directories are the server's alone (sockets, fifos, links, its pid file); in the
        log directory it makes ``.xrootd.log`` (a fifo) and rotated logs; in the data directory, when it runs
        as its own user, exactly what that user owns (as the caller, everything: see the module docstring)."""
        if rule == ADMIN:
            return True
        if rule == LOGS:
            return len(parts) == 1 and (parts[0] == ".xrootd.log" or parts[0].startswith("xrootd.log"))
        if rule == DATA:
            user = self.state.info.get("user")
            if user is None:
                return True
            try:
                return st.st_uid == pwd.getpwnam(user).pw_uid
            except KeyError:
                return False
        return False

    def _write_config(self, port: int) -> None:
        self.write_file(self.config_file, "\n".join([
            "# written by storeval testbed",
            f"xrd.port {port}",
            "xrd.allow host localhost",
            f"xrd.allow host {LOCALHOST}",
            "all.role server",
            "all.export /",
            f"oss.localroot {self.data_dir}",
            f"all.adminpath {self.home / 'admin'}",
            f"all.pidpath {self.home / 'run'}",
            "xrootd.trace fsio",
            "",
        ]))

    def _command(self, user: str | None) -> list[str]:
        cmd = ["xrootd", "-c", str(self.config_file), "-l", str(self.log_file), "-k", "fifo", "-I", "v4"]
        return cmd + (["-R", user] if user else [])

    def start(self) -> None:
        xrootd = shutil.which("xrootd")
        if not xrootd:
            raise TestbedError("xrootd: not installed (run `storeval testbed up xrootd` as root, "
                               "or apt-get install xrootd-server xrootd-client)")
        user = self._user()
        self.make_root()
        self._prepare_dirs(user)
        log = self.home / "log" / "xrootd.log"
        self.state.info.update({"log": str(log), "data": str(self.data_dir), "config": str(self.config_file),
                                "export": f"/{EXPORT}", "version": self._version(xrootd)})
        last = ""
        for _attempt in range(START_ATTEMPTS):
            port = free_port()
            self._write_config(port)
            (self.home / "run" / "xrootd.pid").unlink(missing_ok=True)  # the server's, in its own directory
            os.close(self.ledger.open(log, append=True))
            if user:  # the server (re)opens its log as that user
                ent = pwd.getpwnam(user)
                os.chown(log, ent.pw_uid, ent.pw_gid)
            mark = log.stat().st_size
            self.state.procs = []
            self.state.ports = {"xrootd": port}
            proc = self._spawn(self._command(user), name="xrootd", log=log, cwd=self.home)
            outcome, last = self._await_start(proc, log, mark)
            if outcome == "ok":
                return
            proc.stop(grace=5)
            self.state.procs = []
            if outcome != "port":
                break
        self.state.ports = {}
        raise TestbedError(f"xrootd did not start: {last or 'no message'}; see {log}")

    def fault_names(self, exited: list[int]) -> list[str]:
        return [self.kind] if exited else []

    def respawn(self, timeout: float = 120.0) -> Proc:
        """Start the server again after a fault killed it: the same port, configuration and data, recorded in its
        old slot of ``state.procs``. A port still held by the killed server's connections is retried until
        ``timeout``. Raises TestbedError if it is running."""
        if self.state.procs and self.state.procs[0].alive():
            raise TestbedError("xrootd: it is running; nothing to start")
        if not shutil.which("xrootd") or not self.state.ports:
            raise TestbedError("xrootd: cannot start it again (not installed, or never started here)")
        user = self.state.info.get("user")
        log = self.log_file
        deadline = time.monotonic() + timeout
        while True:
            (self.home / "run" / "xrootd.pid").unlink(missing_ok=True)  # the killed server's, in its own directory
            mark = log.stat().st_size if log.exists() else 0
            if self.state.procs:
                proc = self._spawn(self._command(user), name="xrootd", log=log, cwd=self.home, slot=0)
            else:
                proc = self._spawn(self._command(user), name="xrootd", log=log, cwd=self.home)
            outcome, why = self._await_start(proc, log, mark)
            if outcome == "ok":
                return proc
            proc.stop(grace=5)
            if outcome != "port" or time.monotonic() >= deadline:
                raise TestbedError(f"xrootd did not start again on port {self.port}: {why or 'no message'}; see {log}")
            time.sleep(0.5)

    @staticmethod
    def _version(xrootd: str) -> str:
        try:
            p = subprocess.run([xrootd, "-v"], capture_output=True, text=True, timeout=10)
            return (p.stderr or p.stdout).strip().splitlines()[-1]
        except (OSError, subprocess.SubprocessError, IndexError):
            return "unknown"

    @staticmethod
    def _await_start(proc: Proc, log: Path, mark: int) -> tuple[str, str]:
        """Watch the log of one start attempt: ("ok", ""), ("port", why) for a lost port, ("fail", why)."""
        deadline = time.monotonic() + START_TIMEOUT
        text = ""
        while time.monotonic() < deadline:
            with open(log, "rb") as f:
                f.seek(mark)
                text = f.read().decode("utf-8", "replace")
            if "initialization completed" in text and proc.alive():
                return "ok", ""
            failed = "initialization failed" in text
            if failed or not proc.alive():
                if not failed:
                    time.sleep(0.2)  # let a dying server finish its last line
                    with open(log, "rb") as f:
                        f.seek(mark)
                        text = f.read().decode("utf-8", "replace")
                errors = [ln.strip() for ln in text.splitlines()
                          if any(w in ln for w in ("Unable", "rror", "nvalid", "prohibit", "failed"))]
                why = errors[0] if errors else (text.strip().splitlines() or ["exited"])[-1]
                return ("port" if "address already in use" in text else "fail"), why
            time.sleep(0.05)
        return "fail", f"no 'initialization completed' within {START_TIMEOUT:g} s"

    # -- ready, targets -----------------------------------------------------------------------------------
    def ready(self) -> bool:
        if not self.state.ports or not port_open(self.port):
            return False
        from XRootD import client

        status, info = client.FileSystem(self.url).stat(f"/{EXPORT}", timeout=5)
        return bool(status.ok and info is not None)

    def targets(self) -> dict[str, dict[str, Any]]:
        return {"xrootd": {"url": f"{self.url}//{EXPORT}", **self.server_counters()}}

    def readv_limits(self) -> tuple[int, int]:
        """``(readv_iov_max, readv_ior_max)`` as this server reports them."""
        return query_readv_limits(self.url)


__all__ = ["XrootdServer", "parse_trace", "pgwrite_payload", "query_readv_limits"]
