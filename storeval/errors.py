"""Exceptions that carry a one-line message for the user.

Anything derived from :class:`StorevalError` is printed as its message, never
as a traceback. :class:`InputError` means the study or the command line is
wrong: nothing runs and nothing is written (exit code 2).
"""

from __future__ import annotations


class StorevalError(Exception):
    """A problem the user can act on; ``str(exc)`` is the whole message."""

    exit_code = 1


class InputError(StorevalError):
    """Bad study, option or target: detected before anything runs or is written."""

    exit_code = 2


class CapabilityError(StorevalError):
    """A target cannot do what a workload asks (e.g. random writes on HDFS)."""


class DirectIOUnsupported(StorevalError):
    """The file system refused O_DIRECT; the caller falls back to buffered I/O and says so."""


class VerifyError(StorevalError):
    """Data read back differs from what storeval wrote."""


def one_line(exc: BaseException) -> str:
    """A single line describing ``exc``, for records and error messages."""
    text = str(exc).strip().replace("\n", " ")
    if isinstance(exc, StorevalError):
        return text
    if isinstance(exc, KeyboardInterrupt):  # a client (an MPI rank) got SIGINT of its own
        return "interrupted (SIGINT)"
    if isinstance(exc, OSError) and exc.strerror:
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror}{where}"
    name = type(exc).__name__
    return f"{name}: {text}" if text else name


def error_kind(exc: BaseException) -> str:
    """A short stable label for counting errors by kind (``ENOSPC``, ``timeout``, ``VerifyError``)."""
    import errno

    raw = getattr(exc, "raw_kind", None)  # a driver's one-line error keeps the kind of what the library raised
    if isinstance(exc, StorevalError) and raw:
        return raw
    if isinstance(exc, OSError) and exc.errno:
        return errno.errorcode.get(exc.errno, f"errno{exc.errno}")
    if isinstance(exc, TimeoutError):
        return "timeout"
    return type(exc).__name__
