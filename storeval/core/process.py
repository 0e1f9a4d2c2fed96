"""Facts about this process and its peers: the host name records carry, process naming, liveness."""

from __future__ import annotations

import socket

import psutil

HOST = socket.gethostname()


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
    import os

    path = os.path.join(RUN_NETNS, name)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err) + (" (root is needed)" if os.geteuid() else ""))
    finally:
        os.close(fd)

