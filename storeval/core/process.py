"""Facts about this process and its peers: the host name records carry, process naming, liveness; and the one
bounded runner of a shell command (:func:`run_bounded`: a fault's command, the watchdog's undos)."""

from __future__ import annotations

import os
import platform
import select
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Any

import psutil

HOST = socket.gethostname()


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_facts() -> dict[str, Any]:
    """What a run records of each host its clients ran on: name, kernel, OS, CPU, memory."""
    uname = platform.uname()
    return {"host": socket.gethostname(), "kernel": f"{uname.system} {uname.release} {uname.version}",
            "os": platform.platform(), "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
            "ram_bytes": psutil.virtual_memory().total}


def process_view() -> str:
    """Which processes this one can see and follow by PID: its kernel's boot and its PID namespace. Ranks on
    emulated nodes (network and UTS namespaces of their own) share both with the coordinator, though their host
    names differ; real hosts, or containers with PID namespaces of their own, do not."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            boot = f.read().strip()
        return f"{boot}:{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return f"{socket.gethostname()}:unknown"


def set_process_name(name: str) -> None:
    """Name this process for ps/top (Linux comm, 15 characters): storeval's clients are easy to tell apart."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def alive(pid: int, created: float | None = None) -> bool:
    """Whether ``pid`` still runs and is the process started at ``created`` (a recycled PID is not; a zombie
    has ended)."""
    try:
        p = psutil.Process(pid)
        return (created is None or abs(p.create_time() - created) < 0.5) and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


CLONE_NEWNET = 0x40000000
RUN_NETNS = "/run/netns"


def enter_netns(name: str) -> None:
    """Move this process into the network namespace ``/run/netns/NAME`` (an emulated host of the testbed's
    network), before it makes any socket: every connection it opens then starts on that host. Root only;
    OSError (one line) otherwise."""
    import ctypes

    path = os.path.join(RUN_NETNS, name)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err) + (" (root is needed)" if os.geteuid() else ""))
    finally:
        os.close(fd)


def join_groups(groups: tuple[str, ...] | list[str]) -> None:
    """Move this process into each control group of ``groups`` (their directories): what it uses is then counted
    with what else runs on its emulated host (testbed/cgroups.py). One that cannot be joined (gone, not root) is
    left: the host's figures then miss this process, its own are unchanged."""
    for group in groups:
        try:
            fd = os.open(os.path.join(group, "cgroup.procs"), os.O_WRONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            os.write(fd, b"0")
        except OSError:
            pass
        finally:
            os.close(fd)


# -- a bounded shell command (a fault's command, its undo; the watchdog's undos of a killed run) ----------------
OUTPUT_TAIL = 4096  # bytes of a bounded command's output kept
KILL_GRACE = 5.0  # seconds a SIGKILLed group leader may take to end (one in uninterruptible sleep may not)


@dataclass
class Finished:
    """What a bounded command did. ``code`` is its exit status (negative: the signal that ended it; None: it
    could not be made to end); ``left`` the processes of its group still running when it ended — killed."""

    code: int | None
    output: bytes
    timed_out: bool
    left: list[tuple[int, str]]
    seconds: float

    def last_line(self, limit: int = 300) -> str:
        """The last non-empty line of its output, printable (not redacted: the caller redacts)."""
        lines = [ln.strip() for ln in self.output.decode("utf-8", "replace").splitlines() if ln.strip()]
        text = lines[-1] if lines else ""
        return "".join(ch if ch.isprintable() else "?" for ch in text)[:limit]


def group_members(pgid: int, exclude: int | None = None) -> list[tuple[int, str]]:
    """(pid, name) of the live (not zombie) processes of the process group ``pgid``, from /proc."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == exclude:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
        except OSError:
            continue
        comm, _, rest = stat.partition("(")[2].rpartition(")")
        fields = rest.split()
        if len(fields) >= 3 and fields[0] != "Z" and fields[2] == str(pgid):
            found.append((int(name), comm))
    return found


def _kill_group(pgid: int, leader: int) -> list[tuple[int, str]]:
    """SIGKILL the group of ``leader`` (still unreaped, so the id is no one else's) until nothing of it lives;
    what was found in it besides the leader."""
    seen: list[tuple[int, str]] = []
    for _ in range(100):
        members = group_members(pgid, exclude=leader)
        seen += members
        if not members:
            break
        try:
            os.killpg(pgid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.01)
    return seen


def run_bounded(argv: list[str], timeout: float, *, env: dict[str, str] | None = None,
                tail: int = OUTPUT_TAIL) -> Finished:
    """Run ``argv`` for at most ``timeout`` seconds, in a session (process group) of its own, stdin /dev/null,
    stdout and stderr into one pipe read without blocking (the last ``tail`` bytes kept).

    It is judged by its own exit status, waited for through a pidfd: a background child that holds the pipe
    open (``sleep 20 & echo started``) does not make it look hung. Whether it ended or its time ran out, its
    whole process group is SIGKILLed while the leader is an unreaped zombie (its id cannot be another's
    then) — nothing it started outlives it in its group (a process that leaves the group, ``setsid``, is not
    found). OSError when it cannot be started."""
    r, w = os.pipe()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=w, stderr=w, start_new_session=True,
                                close_fds=True, env=env)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    t0 = time.monotonic()
    out = bytearray()
    pidfd = os.pidfd_open(proc.pid)
    try:
        os.set_blocking(r, False)
        pipe = r

        def drain() -> None:
            nonlocal pipe
            while pipe is not None:
                try:
                    chunk = os.read(pipe, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    chunk = b""
                if not chunk:
                    pipe = None
                    return
                out.extend(chunk)
                if len(out) > 2 * tail:
                    del out[:-tail]

        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(r, select.POLLIN)
        timed_out = exited = False
        while not exited:
            wait = t0 + timeout - time.monotonic()
            if wait <= 0:
                timed_out = True
                break
            for fd, _ in poller.poll(min(wait, 1.0) * 1000 + 1):
                if fd == pidfd:
                    exited = True
                elif pipe is not None:
                    drain()
                    if pipe is None:
                        poller.unregister(r)
        left = dict(group_members(proc.pid, exclude=proc.pid))  # pid → name (as it is now: a fork may exec yet)
        if timed_out:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            if not select.select([pidfd], [], [], KILL_GRACE)[0]:  # in uninterruptible sleep: it stays
                drain()
                return Finished(None, bytes(out[-tail:]), True, list(left.items()), time.monotonic() - t0)
        os.waitid(os.P_PIDFD, pidfd, os.WEXITED | os.WNOWAIT)  # a zombie now: its group id stays its own
        left.update(_kill_group(proc.pid, proc.pid))
        proc.wait()
        drain()  # what the group wrote before it was killed (a writer outside the group never blocks us)
        return Finished(proc.returncode, bytes(out[-tail:]), timed_out, list(left.items()), time.monotonic() - t0)
    finally:
        os.close(pidfd)
        os.close(r)
