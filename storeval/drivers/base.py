"""The Driver protocol: one table of data and metadata operations per kind of target.

Like IOR's aiori backends, every driver offers the same operations, and like
fio's engines it declares what it can do in :class:`Capabilities`. Workloads
ask for capabilities; they never test which driver they talk to.

Paths given to a driver are relative to the target's root (the path of its
URL) and use ``/`` as separator. Hot loops do not call driver methods per
operation: they ask once for :meth:`Driver.reader` / :meth:`Driver.writer`,
which return a pre-bound callable ``f(buffers, offset) -> bytes`` (for POSIX,
``os.preadv`` with the descriptor bound).
"""

from __future__ import annotations

import functools
import http.client
import socket
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..errors import CapabilityError, StorevalError, error_kind
from ..redact import redact_text
from .url import ParsedUrl, parse_url

IOFunc = Callable[[Sequence[Any], int], int]


@dataclass(frozen=True)
class Capabilities:
    """What a target can do; workloads skip or refuse phases that need a missing one."""

    random_write: bool = True  # write at any offset of an existing file
    direct_io: bool = False  # O_DIRECT, bypassing the client's page cache
    vector_read: bool = False  # many ranges in one request (preadv of ranges, readV, get_ranges)
    directories: bool = True  # real directories (mkdir/rmdir/list); object stores have prefixes
    append_only: bool = False  # files are written once, front to back
    fsync: bool = False  # durable flush of a file's data
    shared_write: bool = True  # several clients may write disjoint ranges of one file
    client_page_cache: bool = False  # reads go through this host's kernel page cache (POSIX file systems)
    close_commits: bool = False  # close returns once the target holds the whole object durably (an object
    # store's PUT or multipart-complete acknowledgment): nothing is left to flush after it
    keeps_data: bool = True  # what is written can be read back (the null target discards it)

    def as_dict(self) -> dict[str, bool]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


CAPABILITY_WORDS = {
    "random_write": "write at random offsets",
    "direct_io": "bypass the page cache (O_DIRECT)",
    "vector_read": "read many ranges in one request",
    "directories": "create directories",
    "fsync": "flush data durably (fsync)",
    "shared_write": "let several clients write one shared file",
}


@dataclass(frozen=True)
class FastOps:
    """Metadata operations on native paths (see :meth:`Driver.native`), for hot metadata loops.

    This is where a target's mapping lives: on a file system ``create`` is open(O_CREAT)+write+close and
    ``stat`` is stat(2); on an object store they are PUT and HEAD. Workloads call these and never know which.
    """

    mkdir: Callable[[Any], Any]
    rmdir: Callable[[Any], Any]
    stat: Callable[[Any], Any]
    listdir: Callable[[Any], list]
    create: Callable[[Any, Any], Any]  # create(path, data): a new file or object holding data (may be empty)
    read: Callable[[Any, Any], int]  # read(path, buf): the whole file, returns its size; drivers whose library
    # hands back its own memory (object stores, HDFS, XRootD) leave buf untouched rather than copy for nothing
    remove: Callable[[Any], Any]


@dataclass(frozen=True)
class NativeIO:
    """What a native engine may do itself for a driver (see :meth:`Driver.native_io`): ``syscall`` — its own
    system calls on ``fd`` (an open handle's file descriptor) and on native paths, which are local paths;
    ``null`` — nothing at all, every operation succeeding at once as the driver's own do."""

    kind: str  # "syscall" or "null"
    fd: int = -1


@dataclass(frozen=True)
class StatResult:
    size: int
    is_dir: bool
    mtime: float = 0.0


@dataclass(frozen=True)
class Upload:
    """An incomplete multipart upload: invisible to listings, yet it holds the parts sent so far on the server."""

    path: str  # the object it would have become, relative to the target's root
    upload_id: str
    initiated: str = ""  # when the server says it began (ISO 8601), "" when unknown


# -- failed operations, in one line ------------------------------------------------------------------------
class TargetError(StorevalError):
    """An operation on a target failed: the message names the target, the operation, the path and the reason.

    ``raw_kind`` is the kind of what the library raised (``error_kind``), so errors are still counted by it."""

    def __init__(self, message: str, raw_kind: str = "") -> None:
        super().__init__(message)
        self.raw_kind = raw_kind


class TargetUnreachable(TargetError):
    """The server did not answer: it refused or broke the connection, or stayed silent past the target's
    ``timeout``. The driver that saw it stops talking to that server (see :meth:`Driver.check_server`)."""


# Why talking to a server failed, from the words Python, reqwest/hyper (obstore, hdfs-native) and the XRootD
# client use for it; the first kind whose word appears in an error's text (with its debug source) wins.
NETWORK_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("timeout", ("timed out", "kind: Timeout", "TimedOut", "Operation expired", "Socket timeout")),
    ("refused", ("Connection refused", "ConnectionRefused", "os error 111")),
    ("reset", ("Connection reset", "ConnectionReset", "os error 104", "Broken pipe", "BrokenPipe", "os error 32",
               "connection closed before message completed", "IncompleteMessage", "Remote end closed",
               "UnexpectedEof", "unexpected end of file", "Socket disconnected", "Stream disconnect")),
    ("dns", ("failed to lookup address", "Name or service not known", "dns error", "Temporary failure in name")),
    ("down", ("error sending request", "tcp connect error", "Connection error", "Socket error",
              "Network is unreachable", "No route to host", "All nodes failed", "DataTransferError")),
)
NETWORK_REASONS = {
    "timeout": "no answer from {server} within {timeout:g} s (the server is frozen, overloaded or unreachable)",
    "refused": "connection refused by {server} (the server is down or unreachable)",
    "reset": "the connection to {server} broke (the server closed it or went down)",
    "dns": "cannot resolve the server's name in {server} (check the URL or endpoint)",
    "down": "cannot talk to {server} (the server is down or unreachable)",
}


def network_failure(exc: BaseException | str) -> str | None:
    """``timeout``, ``refused``, ``reset``, ``dns`` or ``down`` when ``exc`` says a server could not be talked
    to; None for any other failure (permissions, a missing file, a full disk …)."""
    if isinstance(exc, BaseException):
        if isinstance(exc, (TimeoutError, socket.timeout)):
            return "timeout"
        if isinstance(exc, ConnectionRefusedError):
            return "refused"
        if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.IncompleteRead,
                            http.client.RemoteDisconnected)):
            return "reset"
        if isinstance(exc, socket.gaierror):
            return "dns"
        text = f"{type(exc).__name__}: {exc}"
    else:
        text = exc
    for kind, words in NETWORK_WORDS:
        if any(w in text for w in words):
            return kind
    return None


def first_line(exc: BaseException) -> str:
    """The first line of an exception's text (libraries append pages of debug detail after it)."""
    text = str(exc).strip()
    return text.splitlines()[0].strip() if text else type(exc).__name__


class Deadline:
    """Calls into a library that has no timeouts of its own, giving up after ``timeout`` seconds.

    Each calling thread hands its calls to a helper thread of its own and waits at most ``timeout``; a call still
    blocked then (a frozen or vanished server) is abandoned to its helper and ``TimeoutError`` is raised, so the
    caller goes on. Costs one thread hand-off per call (about 10–20 µs), nothing allocated but the call's own
    arguments."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._local = threading.local()
        self._helpers: list[_Helper] = []

    def call(self, fn: Callable[..., Any], *args: Any) -> Any:
        helper = getattr(self._local, "helper", None)
        if helper is None:
            helper = self._local.helper = _Helper()
            self._helpers.append(helper)
        helper.fn, helper.args = fn, args
        helper.go.release()
        try:
            answered = helper.done.acquire(timeout=self.timeout)
        except BaseException:  # interrupted (the engine stops this client): the call may still be running
            self._local.helper = None
            raise
        if not answered:
            self._local.helper = None  # stuck in the library: never reused
            raise TimeoutError(f"no answer within {self.timeout:g} s")
        helper.fn = helper.args = None
        if helper.error is not None:
            error, helper.error = helper.error, None
            raise error
        result, helper.result = helper.result, None
        return result

    def close(self) -> None:
        """Let the helper threads end (one stuck in a call ends when the call returns, if ever)."""
        helpers, self._helpers = self._helpers, []
        self._local = threading.local()
        for helper in helpers:
            helper.fn = None
            helper.go.release()


class _Helper:
    """The thread that makes one caller's library calls (see :class:`Deadline`)."""

    def __init__(self) -> None:
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.fn: Any = None
        self.args: tuple = ()
        self.result: Any = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._serve, name="storeval-deadline", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            self.go.acquire()
            if self.fn is None:  # Deadline.close()
                return
            try:
                self.result = self.fn(*self.args)
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                self.error = e
            self.done.release()


class DriverOptions(BaseModel):
    """Options every target may carry; drivers extend this with their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # (a testbed's server processes: probes/server.py counts what they moved)
    server_pids: list[Annotated[int, Field(ge=1)]] = Field(
        [], description="the PIDs of the target's server processes on this host: the moved bytes count them alone")


class Handle:
    """An open file or object. Drivers subclass it to carry what they need."""

    __slots__ = ("path", "mode", "direct")

    def __init__(self, path: str, mode: str, direct: bool = False) -> None:
        self.path = path
        self.mode = mode
        self.direct = direct


class Driver(ABC):
    """Base class of all drivers. Subclasses set ``scheme``, ``Options``, ``caps`` and the URL parts they use."""

    scheme: ClassVar[str]
    Options: ClassVar[type[DriverOptions]] = DriverOptions
    caps: Capabilities = Capabilities()
    url_parts: ClassVar[frozenset[str]] = frozenset({"path"})  # what the driver reads from its URL; the rest is refused
    url_hints: ClassVar[dict[str, str]] = {}  # what to write instead of a part it does not read (see drivers/url.py)
    # what the servers of its targets report of themselves (``module:Class`` of ``core.reported.CounterSource``s,
    # imported when a probe reads them): probes/server.py reads those a target's options point at
    counter_sources: ClassVar[tuple[str, ...]] = ()
    default_port: ClassVar[int | None] = None  # of its URLs' servers when a URL gives none (the round trip's)

    def __init__(self, url: str, options: DriverOptions | None = None, *, client: int = -1) -> None:
        self.url = url
        self.parsed_url = self.parse(url)
        self.options = options if options is not None else self.Options()
        self.client = client  # rank of the client using this driver (-1: the coordinator)
        self.name: str | None = None  # the study's name of this target, for messages
        self.down: TargetUnreachable | None = None  # the server stopped answering (see check_server)

    # -- failures ---------------------------------------------------------------------------
    @property
    def label(self) -> str:
        """How messages name this target: ``target NAME`` (the study's name), else its URL."""
        return f"target {self.name}" if self.name else f"target {self.url}"

    def address(self) -> str:
        """The host:port this driver talks to, for messages."""
        return self.parsed_url.netloc or self.url

    def failure(self, exc: BaseException | str, op: str, path: str | None = None, *,
                raw_kind: str | None = None, kind: str | None = None) -> TargetError:
        """The one-line error of a failed ``op`` (``write``, ``removal`` …) on ``path``, naming the target.

        A server that could not be talked to gives :class:`TargetUnreachable` with the reason in plain words, and
        the driver remembers it: the operations that follow (closing, cleaning up) fail at once with it instead
        of waiting for the same silent server again. ``kind`` overrides what the text says (a driver that knows
        better). Drivers call this in their error paths only."""
        what = f"{op} of {path}" if path else op
        kind = kind or network_failure(exc)
        raw = raw_kind or (error_kind(exc) if isinstance(exc, BaseException) else "")
        if kind is None:
            detail = first_line(exc) if isinstance(exc, BaseException) else str(exc)
            return TargetError(self.scrub(f"{self.label}: {what} failed: {detail}"), raw)
        reason = NETWORK_REASONS[kind].format(server=self.address(), timeout=getattr(self.options, "timeout", 0) or 0)
        self.down = TargetUnreachable(f"{self.label}: {what} failed: {reason}", raw)
        return self.down

    def scrub(self, text: str) -> str:
        """``text`` without any secret (drivers register the keys they read with ``redact.register_secret``)."""
        return redact_text(text)

    def check_server(self) -> None:
        """Raise the server's last failure if it stopped answering: after one operation waited the full timeout
        (or was refused), closing and cleaning up must not wait again, one operation after another."""
        if self.down is not None:
            raise self.down

    def retry_server(self) -> None:
        """Talk to the server again (a new cell: it may be back)."""
        self.down = None

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def parse(cls, url: str) -> ParsedUrl:
        """The parts of a target URL, or InputError naming a part this driver would ignore."""
        return parse_url(url, cls.url_parts, cls.url_hints, (cls.scheme,))

    @classmethod
    def check_url(cls, url: str, options: DriverOptions) -> None:
        """Raise InputError if the URL or options cannot work, without touching the network."""

    def connect(self) -> None:
        """Open sessions; raise with one clear line if the target is unreachable."""

    def shutdown(self) -> None:
        """Release sessions and connections."""

    def describe(self) -> dict[str, Any]:
        """What the target says about itself (server, version, file system), for the environment record."""
        return {"url": self.url, "driver": self.scheme}

    def layout(self) -> dict[str, Any]:
        """The target's options that change how data sits on it (replication, block size, stripe, part size …),
        by name; data laid out once and reused (the skim's event files) is keyed on them, so files written one
        way are never read as if written another. Empty when no option changes the layout."""
        return {}

    def require(self, capability: str, what: str) -> None:
        """Raise CapabilityError unless this target has ``capability``."""
        if not getattr(self.caps, capability):
            raise CapabilityError(f"target {self.url} cannot {CAPABILITY_WORDS.get(capability, capability)} (needed for {what})")

    # -- data --------------------------------------------------------------------------------
    @abstractmethod
    def open(self, path: str, mode: str, *, direct: bool = False) -> Handle:
        """Open ``path``: mode 'r' (read), 'w' (write, create if missing, never truncate), 'rw'."""

    @abstractmethod
    def pread(self, h: Handle, buf: Any, offset: int) -> int:
        """Read up to len(buf) bytes at offset into buf; return the count."""

    @abstractmethod
    def pwrite(self, h: Handle, buf: Any, offset: int) -> int:
        """Write buf at offset; return the count."""

    def preadv(self, h: Handle, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Vector read: the bytes of each (offset, length). Drivers without one loop over pread."""
        out = []
        for offset, length in ranges:
            buf = bytearray(length)
            n = self.pread(h, buf, offset)
            out.append(bytes(buf[:n]))
        return out

    def fsync(self, h: Handle) -> None:
        """Make written data durable (no-op where the target has no such notion)."""

    def redundancy(self) -> dict[str, int] | None:
        """What the target says of its own redundancy now — the blocks short of replicas (``under``) and those
        with none left (``missing``) — for the time a fault plan's re-replication takes (seed 003); None where
        the target says nothing of it. Called on the coordinator, about once a second while a fault is watched."""
        return None

    def resume_write(self, h: Handle) -> int | None:
        """Make a write handle whose write failed usable again (degraded mode's retry); return the offset the
        file must be continued from when the storage kept less than was acknowledged, or None when the failed
        write can simply be tried again (the default: a file at any offset, an object store's part)."""
        return None

    def take_requests(self) -> Any:
        """The latencies of the data-carrying requests this driver made on its own since the last call, when a
        writer's calls are not its requests (an object store's streaming write: its parts are uploaded apart
        from the writes that fill them, ``s3upload.RequestTimes``); None where each call is its own request."""
        return None

    def take_warnings(self) -> list[tuple[str, str]]:
        """The (code, sentence) warnings this driver has for the phase that just ended (codes from
        ``core/codes.py``): how it had to do an operation other than the phase asked, e.g. a vector read split
        into one request per range. The engine attaches them to the client's record; most drivers have none."""
        return []

    def invalidate(self, path: str) -> bool:
        """Drop this client's cached pages of ``path`` (fio's ``invalidate``); False where there is no such cache."""
        return False

    @abstractmethod
    def close(self, h: Handle) -> None:
        """Close the handle; for streaming writers this completes the upload."""

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        """A fast callable ``f(buffers, offset) -> n`` reading into the first buffer.

        With ``into_buffer=False`` a driver whose library returns the data in memory of its own may skip the
        copy into the buffer (nothing will look at it); the bytes still travel and are counted."""
        return lambda bufs, offset, _p=functools.partial(self.pread, h): _p(bufs[0], offset)

    def writer(self, h: Handle) -> IOFunc:
        """A fast callable ``f(buffers, offset) -> n`` writing the first buffer."""
        return lambda bufs, offset, _p=functools.partial(self.pwrite, h): _p(bufs[0], offset)

    # -- whole files / objects ----------------------------------------------------------------
    def put(self, path: str, data: Any) -> None:
        """Create (or replace) ``path`` with ``data`` in one go."""
        h = self.open(path, "w")
        try:
            if len(data):
                self.pwrite(h, data, 0)
        finally:
            self.close(h)

    def get_into(self, path: str, buf: Any) -> int:
        """Read the whole of ``path`` into buf (which must be large enough); return its size."""
        h = self.open(path, "r")
        try:
            total, view = 0, memoryview(buf)
            while total < len(view):
                n = self.pread(h, view[total:], total)
                if n <= 0:
                    break
                total += n
            return total
        finally:
            self.close(h)

    # -- metadata -------------------------------------------------------------------------------
    @abstractmethod
    def stat(self, path: str) -> StatResult:
        """Size and kind of ``path``; FileNotFoundError when missing."""

    def mkdir(self, path: str) -> None:
        """Create one directory (parents must exist)."""
        self.require("directories", f"mkdir {path}")

    def rmdir(self, path: str) -> None:
        """Remove one empty directory."""
        self.require("directories", f"rmdir {path}")

    @abstractmethod
    def remove(self, path: str) -> None:
        """Remove one file or object; FileNotFoundError when missing."""

    @abstractmethod
    def listdir(self, path: str) -> list[str]:
        """Names directly under ``path``."""

    def exists(self, path: str) -> bool:
        try:
            self.stat(path)
            return True
        except FileNotFoundError:
            return False

    def size(self, path: str) -> int:
        return self.stat(path).size

    # -- fast paths for metadata loops --------------------------------------------------------------
    def native(self, path: str) -> Any:
        """The driver's own form of a path (absolute path, object key …), computed once, outside timed loops."""
        return path

    def fast_ops(self) -> FastOps:
        """Metadata operations taking native paths; drivers override this with thinner callables."""
        return FastOps(mkdir=self.mkdir, rmdir=self.rmdir, stat=self.stat, listdir=self.listdir, create=self.put,
                       read=self.get_into, remove=self.remove)

    def native_io(self, h: Handle | None = None) -> NativeIO | None:
        """How a native engine can run this driver's operations (on ``h``, or on native paths without one);
        None where only the driver's own calls can (a library talks to a server)."""
        return None

    # -- helpers used by the engine --------------------------------------------------------------
    def ensure_dir(self, path: str) -> None:
        """Create ``path`` if the target has directories and it is missing."""
        if self.caps.directories and not self.exists(path):
            self.mkdir(path)

    def remove_quietly(self, path: str) -> bool:
        """Remove a file storeval created, ignoring one that is already gone; True if removed."""
        try:
            self.remove(path)
            return True
        except FileNotFoundError:
            return False

    def rmdir_quietly(self, path: str) -> bool:
        """Remove a directory storeval created if it is empty; True if removed. A server that does not answer
        is an error (:class:`TargetUnreachable`), not a directory that is still in use."""
        if not self.caps.directories:
            return True
        try:
            self.rmdir(path)
            return True
        except (FileNotFoundError, OSError):
            return False

    # -- incomplete uploads (object stores) ---------------------------------------------------------------
    def list_uploads(self, prefix: str) -> list[Upload]:
        """Incomplete multipart uploads under ``prefix`` (relative to the target's root). Object stores keep
        them, unlisted, until they are aborted; targets without such uploads have none."""
        return []

    def abort_stale_uploads(self, prefix: str) -> list[Upload]:
        """Abort every incomplete upload under ``prefix`` and return them. The caller vouches that ``prefix`` is
        storeval's own (``storeval-<run>/`` or a cell directory) and that nobody writes there any more."""
        return []

    # -- outside tools (the command workload runs xrdcp, aws, cp … on the target's files) ------------------
    def tool_address(self, path: str) -> str:
        """The address an outside tool gives ``path`` (relative to the target's root): a local path, or a URL such
        as ``root://host:port//path`` or ``s3://bucket/key``. Targets that no outside tool can reach refuse in
        one line."""
        raise CapabilityError(f"{self.label} cannot be reached by outside tools (the command workload needs a "
                              "target whose files a program can name: file://, root://, davs://, s3://, hdfs://, nfs://)")

    def tool_env(self) -> dict[str, str]:
        """The environment an outside tool needs to reach this target (credentials, endpoint), never printed
        or stored: the secrets in it are registered with ``redact`` by the driver that read them."""
        return {}

    # -- third-party copy (the tpc workload): the servers move the data, the client only asks ---------------
    tpc_modes: ClassVar[tuple[str, ...]] = ()  # "pull": its server fetches from another; "push": it sends to one
    tpc_family: ClassVar[str | None] = None  # the protocol both ends of a copy speak ("http", "xroot")

    def tpc_url(self, path: str) -> str:
        """The URL another server reaches ``path`` at, in the protocol it copies with."""
        return self.tool_address(path)

    def tpc_headers(self) -> dict[str, str]:
        """What the other server must send this target on the client's behalf (a bearer token, as HTTP-TPC's
        ``TransferHeader…`` headers forward it); never printed or stored."""
        return {}

    def third_party_copy(self, path: str, other: str, mode: str, timeout: float,
                         other_headers: dict[str, str] | None = None) -> None:
        """Copy between this target's ``path`` and ``other`` (another server's URL, :meth:`tpc_url`) without the
        data passing through this client: ``pull`` writes ``path`` from ``other``, ``push`` writes ``other`` from
        ``path``. Returns once the server says the copy ended (within ``timeout`` seconds); a failure raises with
        the server's own words."""
        raise self.no_tpc()

    def no_tpc(self) -> CapabilityError:
        """The one line that says this target cannot be an end of a third-party copy."""
        return CapabilityError(f"{self.label} cannot copy between servers (third-party copy needs XRootD's root:// "
                               "or HTTP-TPC's davs:// on both ends)")

    def checksum(self, path: str, algorithm: str = "adler32") -> str:
        """The server's checksum of ``path`` (lowercase hex), computed where the data is."""
        raise CapabilityError(f"{self.label} cannot give a file's checksum")

    # -- where its bytes travel, and the environment record (probes/topology.py, environment.py) ---------
    @classmethod
    def carrier(cls, url: str, options: Any = None) -> Any:
        """What carries this target's bytes (``drivers/carrier.py``: a local path, a server's host, or nothing),
        from the URL and options alone (a dict as stored, or the Options model). Default: the URL's host."""
        from .carrier import Carrier

        host = cls.parse(url).host.strip("[]")
        return Carrier(host=host or None)

    @classmethod
    def describe_target(cls, url: str, options: Any = None) -> dict[str, Any]:
        """What the environment record says of a target without talking to it (secrets masked)."""
        return {"url": redact_text(url)}


def join(*parts: str) -> str:
    """Join driver-relative path parts with '/'."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))
