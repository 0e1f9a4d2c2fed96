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
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from ..errors import CapabilityError
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
class StatResult:
    size: int
    is_dir: bool
    mtime: float = 0.0


class DriverOptions(BaseModel):
    """Options every target may carry; drivers extend this with their own."""

    model_config = ConfigDict(extra="forbid", frozen=True)


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

    def __init__(self, url: str, options: DriverOptions | None = None, *, client: int = -1) -> None:
        self.url = url
        self.parsed_url = self.parse(url)
        self.options = options if options is not None else self.Options()
        self.client = client  # rank of the client using this driver (-1: the coordinator)

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
        """Remove a directory storeval created if it is empty; True if removed."""
        if not self.caps.directories:
            return True
        try:
            self.rmdir(path)
            return True
        except (FileNotFoundError, OSError):
            return False


def join(*parts: str) -> str:
    """Join driver-relative path parts with '/'."""
    return "/".join(p.strip("/") for p in parts if p and p.strip("/"))
