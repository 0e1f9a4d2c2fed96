"""NFS driver (nfs-rs, a user-space NFSv4.1/NFSv3 client in Rust): an NFS server measured without mounting it.

``nfs://HOST[:PORT]/EXPORT/PATH``; PORT is the NFS port (2049 when absent). The protocol version
(``version``: 4.1 by default, 4.0 or 3), the AUTH_SYS identity (``uid``, ``gid``: the caller's by default),
whether to bind a reserved source port (``resvport``: when running as root by default) and the per-call
``timeout`` are target options, never a ``?query``. On a host that can mount the server, a kernel mount
with ``file://`` stays the usual way to measure NFS; this driver reaches a server where no mount is
possible (no kernel client, no root) and measures the server rather than the kernel's client.

Where the client stands: with NFSv4 it mounts the *parent* of the URL's path and works below the last
component. nfs-rs addresses everything by path from its mount point and cannot look the mount point
itself up (a listing of ``.`` is refused with NFS4ERR_BADNAME by Ganesha), while ``storeval clean`` and
the owner records list the target's root; one level up, the root is an ordinary name. NFSv4's pseudo file
system makes every parent reachable (``/`` at worst). NFSv3 can only mount an export, so there the path
is mounted as it is.

Durability, honestly: nfs-rs's ``write_at`` returns only after the bytes of that call are durable — it
sends UNSTABLE WRITEs (up to 8 concurrently, split at the negotiated ``max_write``) and ends each call
with a COMMIT (none when every reply said FILE_SYNC); Ganesha's VFS back end turns that COMMIT into an
fsync(2) of the file (seen with strace: one fsync per ``write_at``). So every write is as durable as a
kernel client's write followed by fsync, ``fsync`` has nothing left to flush (it waits for writes still
settling), and the capability says the target can fsync. nfs-rs keeps no page cache: every read goes to
the server (its own page cache may answer). O_DIRECT has no meaning here and is refused with
:class:`DirectIOUnsupported` (the bandwidth workload falls back and flags the phase); there is no file
descriptor, so no native engine (io_uring, psync) can run it: ``native_io`` is None and workloads use
their Python loop.

What the hot loops cost beyond the RPCs: ``reader`` calls ``readinto_at`` on the caller's buffer (each
reply's payload is copied once into it; nfs-rs makes a memoryview of the buffer per call); ``writer``
calls ``write_at``, and nfs-rs's facade takes a snapshot of the buffer (``bytes(buf)``: one copy and one
allocation of the transfer size per write) before handing it to Rust. Nothing else is allocated per call.

Failures are one line (``target NAME: OP of PATH failed: REASON``). nfs-rs bounds every call by its
``operation_timeout`` (the target's ``timeout``) and the connection by ``connect_timeout``: a frozen or
killed server fails the call within the timeout (no :class:`Deadline` thread needed). A client whose
server went away stays broken after the server comes back (every call: "SafeToRetry … recovery=Retry"),
so after a failure that says the server could not be talked to, :meth:`retry_server` and
:meth:`resume_write` connect anew.

Each driver (each client of a cell) opens its own connection (its own NFSv4.1 session).
"""

from __future__ import annotations

import errno
import os
import posixpath
import threading
from typing import Annotated, Any, Literal

from pydantic import Field

import nfs_rs

from ..errors import DirectIOUnsupported, InputError, StorevalError, error_kind
from ..fields import Duration
from ..redact import redact_text
from .base import (Capabilities, Driver, DriverOptions, FastOps, Handle, IOFunc, StatResult, TargetError,
                   network_failure)

DEFAULT_PORT = 2049
_FILE_ERRORS = {errno.ENOENT: FileNotFoundError, errno.EEXIST: FileExistsError, errno.EISDIR: IsADirectoryError,
                errno.ENOTDIR: NotADirectoryError, errno.EACCES: PermissionError, errno.EPERM: PermissionError}
_CONNECTION_LOST = ("SafeToRetry", "DefiniteFailure", "Uncertain", "recovery=Retry", "recovery=Remount")
_NOT_DONE = (nfs_rs.OperationOutcome.SAFE_TO_RETRY, nfs_rs.OperationOutcome.DEFINITE_FAILURE)


def _lost(exc: BaseException) -> str | None:
    """How a call went when nfs-rs lost its connection: ``not-done`` (it says the call did not happen: safe to
    make again on a new connection), ``uncertain`` (it may have happened, a write above all); None when the
    server answered, or nothing was sent (timeouts and refused connections are told apart elsewhere)."""
    if not isinstance(exc, nfs_rs.NfsError) or getattr(exc, "code", None) is not None:
        return None  # an NFS status from the server
    if isinstance(exc, (nfs_rs.NfsTimeoutError, nfs_rs.NfsConnectionError, ValueError, NotImplementedError)):
        return None
    outcome = getattr(exc, "outcome", None)
    if outcome in _NOT_DONE:
        return "not-done"
    if outcome is not None or any(w in str(getattr(exc, "message", None) or exc) for w in _CONNECTION_LOST):
        return "uncertain"
    return None


class NfsOptions(DriverOptions):
    version: Literal["4.1", "4.0", "3"] = Field("4.1", description="NFS protocol version (4.0 is experimental in "
                                                                   "nfs-rs)")
    uid: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = Field(
        None, description="AUTH_SYS user (none: this process's)")
    gid: Annotated[int, Field(ge=0, le=2**32 - 1)] | None = Field(
        None, description="AUTH_SYS group (none: this process's)")
    resvport: bool | None = Field(None, description="bind a source port below 1024 (none: when root; servers may "
                                                    "demand it)")
    timeout: Duration = Field(30.0, description="per call, and the bound on connecting")


class NfsHandle(Handle):
    __slots__ = ("file",)

    def __init__(self, path: str, mode: str, file: Any) -> None:
        super().__init__(path, mode)
        self.file = file


def _mount_point(path: str, version: str) -> tuple[str, str]:
    """(what nfs-rs mounts, the target root below it) for the URL's decoded path; see the module docstring."""
    clean = posixpath.normpath("/" + path.strip("/"))
    if version == "3":
        return clean, ""
    parent, name = posixpath.split(clean)
    return parent, name


class NfsDriver(Driver):
    default_port = 2049
    scheme = "nfs"
    Options = NfsOptions
    caps = Capabilities(random_write=True, direct_io=False, vector_read=False, directories=True,
                        append_only=False, fsync=True, shared_write=True, client_page_cache=False)
    url_parts = frozenset({"host", "port", "path"})  # nfs://host[:port]/export/path
    url_hints = {"query": "give version, uid, gid, resvport and timeout as keys of the target (options), not in "
                          "the URL",
                 "user": "the AUTH_SYS identity is the target's uid and gid options",
                 "password": "NFS with AUTH_SYS has no password; the identity is the target's uid and gid options"}
    options: NfsOptions

    def __init__(self, url: str, options: NfsOptions | None = None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        self.host = self.parsed_url.host
        self.port = self.parsed_url.port or DEFAULT_PORT
        self.path = posixpath.normpath("/" + self.parsed_url.local_path.strip("/"))
        self.mount, self.root = _mount_point(self.parsed_url.local_path, self.options.version)
        self.client: Any = None
        self._lock = threading.Lock()  # one reconnection at a time

    @classmethod
    def check_url(cls, url: str, options: NfsOptions) -> None:
        parsed = cls.parse(url)
        if not parsed.host:
            raise InputError(f"{parsed.shown} names no server (write nfs://HOST[:PORT]/EXPORT/PATH)")
        if not parsed.local_path.strip("/"):
            raise InputError(f"{parsed.shown} names no export (write nfs://{parsed.netloc}/EXPORT/PATH: the "
                             "export's path on the server, then the directory to work in)")
        parts = parsed.local_path.strip("/").split("/")
        if any(p in (".", "..") for p in parts):
            raise InputError(f"{parsed.shown}: '.' and '..' are not allowed in the path (write the directory's "
                             "own path)")

    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def tool_address(self, path: str) -> str:
        """A libnfs URL (``nfs-cp``, ``nfs-cat``): ``nfs://HOST/EXPORT/PATH?version=4&nfsport=PORT`` — libnfs takes
        the port only as ``nfsport=`` and speaks NFSv4.0 or v3 (a 4.1 target is reached as 4)."""
        version = "3" if self.options.version == "3" else "4"
        full = posixpath.join(self.path, path) if path else self.path
        return f"nfs://{self.host}{full}?version={version}&nfsport={self.port}"

    # -- connections --------------------------------------------------------------------------------------
    def _client_url(self) -> str:
        return f"nfs://{self.host}{self.mount}"

    def _connect_client(self) -> Any:
        resvport = self.options.resvport if self.options.resvport is not None else os.geteuid() == 0
        return nfs_rs.Client.connect(
            self._client_url(), versions=[self.options.version],
            uid=self.options.uid if self.options.uid is not None else os.getuid(),
            gid=self.options.gid if self.options.gid is not None else os.getgid(),
            nfs_port=self.port, noresvport=not resvport,
            connect_timeout=float(self.options.timeout), operation_timeout=float(self.options.timeout))

    def connect(self) -> None:
        try:
            self.client = self._connect_client()
        except FileNotFoundError:
            raise StorevalError(f"{self.label}: the server {self.address()} has no {self.mount} (check the "
                                "export in the URL)") from None
        except Exception as e:
            raise self._error(e, "mount", self.mount) from None
        try:
            info = self._ns("stat", "", nfs_rs.Client.stat, self._p(""))
        except FileNotFoundError:
            raise StorevalError(f"{self.label}: directory {self.path} does not exist on {self.address()} (create it "
                                "first)") from None
        if info.type != nfs_rs.FileType.DIRECTORY:
            raise StorevalError(f"{self.label}: {self.path} on {self.address()} is not a directory")

    def _close_client(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - a client whose server went away does not close cleanly
                pass

    def shutdown(self) -> None:
        self._close_client()

    def retry_server(self) -> None:
        """Talk to the server again: a client that lost its server stays broken, so connect anew (lazily: the
        next call does, within the timeout)."""
        if self.down is not None:
            with self._lock:
                self._close_client()
        super().retry_server()

    def _live(self) -> Any:
        """The client, connected anew if an earlier failure dropped it."""
        self.check_server()
        client = self.client
        if client is None:
            with self._lock:
                if self.client is None:
                    try:
                        self.client = self._connect_client()
                    except Exception as e:
                        raise self._error(e, "mount", self.mount) from None
                client = self.client
        return client

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "driver": self.scheme, "server": self.address(), "client": "nfs-rs",
                               "client_version": nfs_rs.__version__, "mount": self.mount}
        if self.client is not None and self.down is None:
            try:
                out["nfs_version"] = str(self.client.version.value)
                limits = self.client.io_limits
                out["max_read"], out["max_write"] = limits.max_read, limits.max_write
                fs = self.client.fs_stat()
                out["fs_bytes_total"], out["fs_bytes_free"] = fs.total_bytes, fs.available_bytes
            except Exception:  # noqa: BLE001 - a description is a nicety
                pass
        return out

    def layout(self) -> dict[str, Any]:
        """No option of an NFS target changes how its files sit (the server's file system does)."""
        return {}

    @classmethod
    def describe_target(cls, url: str, options: Any = None) -> dict[str, Any]:
        from .carrier import option

        return {"url": redact_text(url), "nfs_version": option(options, "version") or "4.1"}

    # -- errors --------------------------------------------------------------------------------------------
    def _p(self, path: str) -> str:
        """A path for nfs-rs: relative to its mount point (``.`` is the mount point itself)."""
        if self.root:
            return f"{self.root}/{path}" if path else self.root
        return path or "."

    def _error(self, exc: BaseException, op: str, path: str) -> BaseException:
        """What nfs-rs raised, as callers expect it: a missing or existing name as FileNotFoundError /
        FileExistsError, a directory that is not empty as OSError(ENOTEMPTY), a server that cannot be talked
        to as one line (TargetUnreachable), anything else as one line naming the NFS error."""
        shown = path or "/"
        if isinstance(exc, nfs_rs.NfsTimeoutError):
            return self.failure(exc, op, shown, kind="timeout", raw_kind="timeout")
        if isinstance(exc, nfs_rs.NfsConnectionError):
            return self.failure(exc, op, shown, kind=network_failure(exc) or "down")
        text = str(getattr(exc, "message", None) or exc).strip()
        if _lost(exc):
            # the connection is gone (the server went away, maybe came back): this client cannot go on, and
            # retry_server connects anew
            return self.failure(exc, op, shown, kind="reset", raw_kind="reset")
        reason = text.removeprefix("NFS4 error: ").removeprefix("NFS3 error: ")
        code = getattr(exc, "code_name", None)
        message = self.scrub(f"{self.label}: {op} of {shown} failed: {reason}" + (f" ({code})" if code else ""))
        number = getattr(exc, "errno", None)
        if isinstance(exc, OSError) and number:
            return _FILE_ERRORS.get(number, OSError)(number, message)
        if isinstance(exc, (nfs_rs.NfsError, OSError)):
            return TargetError(message, error_kind(exc))
        return exc

    def _call(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            raise self._error(e, op, path) from None

    def _ns(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        """``fn(client, *args)`` for a call on the client (not on an open file). When the connection broke
        before the call went out — a server that was restarted since this client last talked to it, the
        coordinator's client between two cells — connect anew once and make it again: nfs-rs says such a
        call did not happen. A call that may have happened is not repeated."""
        client = self._live()
        try:
            return fn(client, *args)
        except Exception as e:
            if _lost(e) != "not-done":
                raise self._error(e, op, path) from None
        with self._lock:
            if self.client is client:
                self._close_client()
        return self._call(op, path, fn, self._live(), *args)

    # -- data -------------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> NfsHandle:
        if direct:
            raise DirectIOUnsupported(f"{self.label}: nfs-rs has no client page cache to bypass (every read and "
                                      "write goes to the server), so O_DIRECT does not apply")
        p = self._p(path)
        if mode == "r":
            return NfsHandle(path, mode, self._ns("open", path, nfs_rs.Client.open, p, "rb"))
        # write: create if missing, never truncate ("ab" creates without truncating, but cannot write at offsets)
        return NfsHandle(path, mode, self._ns("open", path, _open_for_writing, p))

    def pread(self, h: Handle, buf: Any, offset: int) -> int:
        return self._call("read", h.path, h.file.readinto_at, buf, offset)

    def pwrite(self, h: Handle, buf: Any, offset: int) -> int:
        return self._call("write", h.path, h.file.write_at, buf, offset)

    def fsync(self, h: Handle) -> None:
        """Every write is durable when it returns (see the module docstring): wait for any still settling."""
        if h.mode != "r":
            self._call("sync", h.path, h.file.flush)

    def close(self, h: Handle) -> None:
        self.check_server()
        self._call("close", h.path, h.file.close)

    def resume_write(self, h: Handle) -> int | None:
        """A write that failed because the server went away left this client broken: close the old file
        quietly, connect anew and open the file again; the failed write is then simply tried again in place."""
        try:
            h.file.close()
        except Exception:  # noqa: BLE001 - a file of a server that is gone does not close cleanly
            pass
        with self._lock:
            self._close_client()
        self.down = None
        h.file = self.open(h.path, h.mode).file
        return None

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        readinto_at, error, path = h.file.readinto_at, self._error, h.path

        def read(bufs, offset: int) -> int:
            try:
                return readinto_at(bufs[0], offset)
            except Exception as e:
                raise error(e, "read", path) from None

        return read

    def writer(self, h: Handle) -> IOFunc:
        write_at, error, path = h.file.write_at, self._error, h.path

        def write(bufs, offset: int) -> int:
            try:
                return write_at(bufs[0], offset)
            except Exception as e:
                raise error(e, "write", path) from None

        return write

    # -- whole files ---------------------------------------------------------------------------------------------
    def put(self, path: str, data: Any) -> None:
        self._ns("write", path, _put, self._p(path), data)

    def get_into(self, path: str, buf: Any) -> int:
        return self._ns("read", path, _read_into, self._p(path), buf)

    # -- metadata ------------------------------------------------------------------------------------------------
    def native(self, path: str) -> str:
        return self._p(path)

    def stat(self, path: str) -> StatResult:
        info = self._ns("stat", path, nfs_rs.Client.stat, self._p(path))
        return StatResult(size=info.size, is_dir=info.type == nfs_rs.FileType.DIRECTORY, mtime=info.mtime / 1e9)

    def mkdir(self, path: str) -> None:
        self._ns("mkdir", path, nfs_rs.Client.mkdir, self._p(path), 0o755)

    def rmdir(self, path: str) -> None:
        """Remove one empty directory. NFSv4's REMOVE takes files as well, and nfs-rs does not check: a file is
        refused here first, so a directory's removal never takes a file with it."""
        if not self.stat(path).is_dir:
            raise NotADirectoryError(errno.ENOTDIR, f"{self.label}: rmdir of {path} failed: not a directory")
        self._ns("rmdir", path, nfs_rs.Client.rmdir, self._p(path))

    def remove(self, path: str) -> None:
        self._ns("removal", path, nfs_rs.Client.remove, self._p(path))

    def listdir(self, path: str) -> list[str]:
        return self._ns("listing", path, nfs_rs.Client.listdir, self._p(path))

    def fast_ops(self) -> FastOps:
        """The namespace calls on native paths (relative to the mount point), one nfs-rs call each; create is
        OPEN(create)+WRITE+COMMIT+CLOSE as a kernel client's open/write/fsync/close, read is OPEN+READ+CLOSE.
        Each call takes the driver's client as it is then (one attribute read), so after degraded mode's
        ``retry_server`` the same operations go on over the new connection."""
        self._live()
        live, error = self._live, self._error

        def wrap(op: str, fn: Any) -> Any:
            def call(path: str, *args: Any) -> Any:
                try:
                    return fn(self.client or live(), path, *args)
                except Exception as e:
                    raise error(e, op, path) from None
            return call

        Client = nfs_rs.Client
        return FastOps(mkdir=wrap("mkdir", _mkdir), rmdir=wrap("rmdir", Client.rmdir), stat=wrap("stat", Client.stat),
                       listdir=wrap("listing", Client.listdir), create=wrap("creation", _put),
                       read=wrap("read", _read_into), remove=wrap("removal", Client.remove))


# Composite calls (module functions: nothing is built per call).
def _open_for_writing(client: Any, path: str) -> Any:
    """``path`` open for writing at any offset: created if missing, never truncated (another client may have
    created and written it meanwhile: "ab" creates without truncating)."""
    try:
        return client.open(path, "r+b")
    except FileNotFoundError:
        client.open(path, "ab").close()
        return client.open(path, "r+b")


def _mkdir(client: Any, path: str) -> None:
    client.mkdir(path, 0o755)


def _put(client: Any, path: str, data: Any) -> None:
    f = client.open(path, "wb")
    try:
        if len(data):
            f.write_at(data, 0)
    finally:
        f.close()


def _read_into(client: Any, path: str, buf: Any) -> int:
    f = client.open(path, "rb")
    try:
        return f.readinto_at(buf, 0) if len(buf) else 0
    finally:
        f.close()
