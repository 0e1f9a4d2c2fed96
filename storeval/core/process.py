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
