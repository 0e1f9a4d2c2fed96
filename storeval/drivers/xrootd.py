"""XRootD driver (the XRootD Python bindings): the HEP data servers (EOS, dCache, XCache, plain xrootd).

``root://host:port//path``. Reads at any offset, vector reads as kXR_readv split to honour the server's
limits (``readv_iov_max`` elements per request, ``readv_ior_max`` bytes per element, asked once at
connect), writes at any offset, sync, and the namespace calls (stat, mkdir, rmdir, rm, dirlist).

Every call carries the target's ``timeout``, and the client checks its timers every second (its default is
every 15 s, which let a 3 s timeout fire after 15): a frozen server fails an operation within the timeout.
A server that cannot be talked to is named in one line (``Driver.failure``); the operations after it fail
at once.

A read-only cache in front of an origin (XCache) is a target with ``write_url``: writes, creations and removals
go to the origin, reads, stats and listings through the cache, as a site's jobs read through XCache and write to
storage directly. A file rewritten at the origin may still be served from the cache as it was (XCache does not
revalidate what it holds). With ``cache_dir``, the cache's own access records give each phase its hit and miss
bytes (``drivers/xcachestats.py``).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Field
from XRootD import client as xrd
from XRootD.client.flags import AccessMode, DirListFlags, MkDirFlags, OpenFlags, QueryCode, StatInfoFlags

import errno as errno_mod

from ..errors import InputError, StorevalError
from ..fields import Duration
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, IOFunc, StatResult, network_failure

NOT_FOUND = 3011  # kXR_NotFound
ITEM_EXISTS = 3018  # kXR_ItExists
OPERATION_EXPIRED = 206  # XrdCl::errOperationExpired: no answer within the timeout
NETWORK_CODES = range(101, 111)  # XrdCl's socket, stream and connection errors (errInvalidAddr … errTlsError)
DEFAULT_IOV_MAX = 1024
DEFAULT_IOR_MAX = 2097136
# a redirector lists its own (empty) disk; LOCATE asks every data server holding the directory, MERGE joins their
# answers (the names each server has once). A single server answers it as it answers a plain listing.
LISTING = DirListFlags.LOCATE | DirListFlags.MERGE
MODE = AccessMode.UR | AccessMode.UW | AccessMode.GR | AccessMode.OR


class XrootdOptions(DriverOptions):
    timeout: Duration = Field(30.0, description="per request, and the bound on connecting")
    cache_dir: str | None = Field(None, description="the disk cache of an XCache on this host (its oss.localroot): "
                                                    "the access records there say, per phase, the bytes served from "
                                                    "the cache (hits) and fetched from the origin (misses)")
    origin_pids: list[Annotated[int, Field(ge=1)]] = Field(
        [], description="with cache_dir: the PIDs of the cache's origin server on this host, to count what the "
                        "origin moved in each phase")
    write_url: str | None = Field(None, description="where writes, creations and removals go when the target is a "
                                                    "read-only cache (an XCache's origin: root://HOST:PORT//same/path);"
                                                    " reads, stats and listings go to the target's url")


class XrdHandle(Handle):
    __slots__ = ("file", "url")

    def __init__(self, path: str, mode: str, file: Any, url: str) -> None:
        super().__init__(path, mode)
        self.file = file
        self.url = url


class XrootdDriver(Driver):
    default_port = 1094
    scheme = "root"
    counter_sources = ("storeval.drivers.xcachestats:XcacheRecords",)  # an XCache's records, where cache_dir says
    Options = XrootdOptions
    caps = Capabilities(random_write=True, direct_io=False, vector_read=True, directories=True,
                        append_only=False, fsync=True, shared_write=True)  # shared writes open with FORCE
    url_parts = frozenset({"user", "host", "port", "path"})  # root://[user@]host[:port]//path
    url_hints = {"password": "use XRootD's own authentication: a token, Kerberos or an X.509 proxy from the "
                             "environment",
                 "query": "files are opened by host and path, so ?xrd.… settings would be dropped; set them as "
                          "XRD_… environment variables instead"}
    options: XrootdOptions

    def __init__(self, url: str, options: XrootdOptions | None = None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        self.server = f"root://{self.parsed_url.netloc}"
        self.root = "/" + self.parsed_url.path.strip("/")
        self.fs: Any = None
        self.wfs: Any = None  # the write side's (the origin's, under a read-only cache; else the same as fs)
        self.wserver = self.server
        if self.options.write_url:
            self.wserver = f"root://{self.parse(self.options.write_url).netloc}"
        self.iov_max, self.ior_max = DEFAULT_IOV_MAX, DEFAULT_IOR_MAX
        self.timeout = int(max(1, round(self.options.timeout)))

    @classmethod
    def check_url(cls, url: str, options: XrootdOptions) -> None:
        parsed = cls.parse(url)
        if not parsed.host:
            raise InputError(f"{parsed.shown} names no server (write root://HOST:PORT//path)")
        if not parsed.path.startswith("//"):
            raise InputError(f"{parsed.shown}: XRootD paths are absolute (write root://{parsed.netloc}//path, two "
                             "slashes)")
        if options.write_url is not None:
            origin = cls.parse(options.write_url)
            if not origin.host or origin.path.strip("/") != parsed.path.strip("/"):
                raise InputError(f"write_url {origin.shown}: give the server and the same path as the url "
                                 f"(root://HOST:PORT/{parsed.path}: a cache shows its origin's files at the same "
                                 "paths)")

    def _p(self, path: str) -> str:
        return f"{self.root.rstrip('/')}/{path}" if path else self.root

    def _url(self, path: str) -> str:
        return f"{self.server}/{self._p(path)}"

    def tool_address(self, path: str) -> str:
        """``root://host:port//path``: what xrdcp, xrdfs and ROOT's TFile::Open take."""
        return self._url(path)

    # -- third-party copy --------------------------------------------------------------------------------
    tpc_modes = ("pull",)  # XRootD's TPC: the destination's server pulls (xrdcp --server, ofs.tpc)
    tpc_family = "xroot"

    def third_party_copy(self, path: str, other: str, mode: str, timeout: float,
                         other_headers: dict[str, str] | None = None) -> None:
        """XRootD's native TPC as XrdCl's ThirdPartyCopyJob sets it up: the destination opened with the rendezvous
        (``tpc.key``, the source's host ``tpc.src`` and path ``tpc.lfn``, ``oss.asize``, ``tpc.stage=copy``), a
        first sync that arms it, the source opened with the same key and the destination's host (``tpc.dst``),
        and a second sync that the destination's server answers when it has pulled the whole file. XrdCl's job
        waits for that answer in steps of a second (its progress stat); this waits for it directly, so a copy is
        timed to the server's answer, not to the client's next tick."""
        if mode != "pull":
            raise StorevalError(f"{self.label}: XRootD's third-party copy is pulled by the destination; use "
                                "mode: pull")
        import secrets
        from urllib.parse import quote

        self.check_server()
        source = self.parse(other)
        src_path = "/" + source.path.lstrip("/")
        wait = max(1, int(timeout))
        info = xrd.FileSystem(f"root://{source.netloc}")
        status, st = info.stat(src_path, timeout=self.timeout)
        self._source_check(status, "stat", other)
        key = secrets.token_hex(12)
        dest = xrd.File()
        src = xrd.File()
        url = (f"{self.wserver}/{self._p(path)}?tpc.key={key}&tpc.src={source.netloc}&tpc.lfn={quote(src_path)}"
               f"&oss.asize={st.size}&tpc.stage=copy")
        try:
            flags = OpenFlags.NEW | OpenFlags.UPDATE | OpenFlags.MAKEPATH
            status, _ = dest.open(url, flags, MODE, timeout=self.timeout)
            self._check(status, "third-party copy (open of the destination)", path)
            status, _ = dest.sync(timeout=self.timeout)
            self._check(status, "third-party copy (rendezvous)", path)
            status, _ = src.open(f"root://{source.netloc}/{src_path}?tpc.key={key}&tpc.dst={self.parsed_url.host}"
                                 "&tpc.stage=copy", OpenFlags.READ, timeout=self.timeout)
            self._source_check(status, "open", other)
            status, _ = dest.sync(timeout=wait)
            self._check(status, "third-party copy", path)
        finally:
            for f in (src, dest):
                if f.is_open():
                    f.close(timeout=self.timeout)

    @staticmethod
    def _source_check(status: Any, op: str, other: str) -> None:
        """A copy's source that failed: the copy fails with its words, and this target is not marked down (the
        next copy tries again; the source may be back)."""
        if not status.ok:
            message = (status.message or "").strip().replace("\n", " ") or "no answer"
            raise OSError(status.errno or 5, f"third-party copy: {op} of the source {other}: {message}")

    def checksum(self, path: str, algorithm: str = "adler32") -> str:
        """``kXR_query`` checksum: the server computes it (``xrootd.chksum``) where the file is."""
        self.check_server()
        status, answer = self.wfs.query(QueryCode.CHECKSUM, self._p(path), timeout=self.timeout)
        self._check(status, "checksum", path)
        words = (answer or b"").decode(errors="replace").strip("\x00 \n").split()
        if len(words) != 2 or words[0].lower() != algorithm:
            raise OSError(5, f"checksum {path}: the server answered {' '.join(words) or 'nothing'}, not {algorithm} "
                             "(enable it with xrootd.chksum)")
        return words[1].lower()

    def _check(self, status: Any, op: str, path: str) -> None:
        """Turn a failed XRootDStatus into an exception: FileNotFoundError, FileExistsError, one line naming a
        server that cannot be talked to (TargetUnreachable), or OSError with the server's message."""
        if status.ok:
            return
        message = (status.message or "").strip().replace("\n", " ")
        if status.errno == NOT_FOUND or "No such file" in message:
            raise FileNotFoundError(2, f"{op} {path}: {message}")
        if status.errno == ITEM_EXISTS:
            raise FileExistsError(17, f"{op} {path}: {message}")
        if status.code == OPERATION_EXPIRED or status.code in NETWORK_CODES or network_failure(message):
            why = "Operation expired" if status.code == OPERATION_EXPIRED else (message or "Connection error")
            raw = errno_mod.errorcode.get(status.errno or 5, "EIO")
            raise self.failure(why if network_failure(why) else f"Connection error: {why}", op, path or "/",
                               raw_kind=raw)
        raise OSError(status.errno or 5, f"{op} {path}: {message}")

    def connect(self) -> None:
        # bound every wait on an absent or silent server by the target's timeout; the client looks at its
        # timers every TimeoutResolution seconds (15 by default: a 3 s timeout would fire after 15 s)
        xrd.EnvPutInt("TimeoutResolution", 1)
        xrd.EnvPutInt("ConnectionWindow", self.timeout)
        xrd.EnvPutInt("ConnectionRetry", 1)
        xrd.EnvPutInt("RequestTimeout", self.timeout)
        xrd.EnvPutInt("StreamTimeout", self.timeout)
        # a stream that failed is not tried again for StreamErrorWindow seconds (30 min by default): a server
        # that came back could never be reached again by this process (on_error: retry reopens its files)
        xrd.EnvPutInt("StreamErrorWindow", 1)
        self.fs = xrd.FileSystem(self.server)
        self.wfs = xrd.FileSystem(self.wserver) if self.wserver != self.server else self.fs
        if self.wfs is not self.fs:
            self._check(self.wfs.stat(self.root, timeout=self.timeout)[0], "stat", self.root)
        status, info = self.fs.stat(self.root, timeout=self.timeout)
        if not status.ok:
            if status.errno == NOT_FOUND:
                raise StorevalError(f"directory {self.root} does not exist on {self.server} (create it first)")
            self._check(status, "stat", self.root)
        if not info.flags & StatInfoFlags.IS_DIR:
            raise StorevalError(f"{self.root} on {self.server} is not a directory")
        status, answer = self.fs.query(QueryCode.CONFIG, "readv_iov_max readv_ior_max", timeout=self.timeout)
        if status.ok and answer:
            values = [int(v) for v in answer.decode(errors="replace").split() if v.strip().isdigit()]
            if len(values) == 2 and all(v > 0 for v in values):
                self.iov_max, self.ior_max = values

    def shutdown(self) -> None:
        self.fs = self.wfs = None

    def layout(self) -> dict[str, Any]:
        """No option of an XRootD target changes how its files sit (the server's configuration does)."""
        return {}

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "driver": self.scheme, "server": self.server,
                               **({"write_server": self.wserver} if self.wserver != self.server else {}),
                               "readv_iov_max": self.iov_max, "readv_ior_max": self.ior_max}
        if self.fs is not None and self.down is None:
            status, answer = self.fs.query(QueryCode.CONFIG, "version", timeout=self.timeout)
            if status.ok and answer:
                out["server_version"] = answer.decode(errors="replace").strip()
        return out

    # -- data -------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> XrdHandle:
        self.check_server()
        f = xrd.File()
        url = self._url(path) if mode == "r" else f"{self.wserver}/{self._p(path)}"
        if mode == "r":
            status, _ = f.open(url, OpenFlags.READ, timeout=self.timeout)
        else:
            # UPDATE opens an existing file without truncating it; FORCE lets several clients write disjoint
            # ranges of one file (the server refuses a second writer otherwise). A File whose open failed
            # keeps failing, so a new one is used for the create.
            status, _ = f.open(url, OpenFlags.UPDATE | OpenFlags.FORCE, timeout=self.timeout)
            if not status.ok and status.errno == NOT_FOUND:
                f = xrd.File()
                status, _ = f.open(url, OpenFlags.NEW | OpenFlags.MAKEPATH | OpenFlags.FORCE, MODE, timeout=self.timeout)
        self._check(status, "open", path)
        return XrdHandle(path, mode, f, url)

    def resume_write(self, h: Handle) -> int | None:
        """A server that went away took the file's open handle with it: open the file again (UPDATE keeps
        its data) and try the failed write again in place."""
        try:
            h.file.close(timeout=1)
        except Exception:  # noqa: BLE001 - a handle on a server that is gone does not close
            pass
        fresh = self.open(h.path, h.mode)
        h.file = fresh.file
        return None

    def pread(self, h: Handle, buf, offset: int) -> int:
        status, data = h.file.read(offset, len(buf), timeout=self.timeout)
        self._check(status, "read", h.path)
        n = len(data)
        memoryview(buf)[:n] = data
        return n

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        status, _ = h.file.write(bytes(buf), offset, len(buf), timeout=self.timeout)
        self._check(status, "write", h.path)
        return len(buf)

    def preadv(self, h: Handle, ranges) -> list:
        """kXR_readv in batches of at most iov_max elements of at most ior_max bytes.

        Identical elements are asked once (the client library rejects a response that repeats one)."""
        unique = sorted(set((o, n) for o, n in ranges if n > 0))
        pieces: list[tuple[tuple[int, int], int, int]] = []  # (range, offset, length)
        for offset, length in unique:
            for start in range(offset, offset + length, self.ior_max):
                pieces.append(((offset, length), start, min(self.ior_max, offset + length - start)))
        parts: dict[tuple[int, int], list[bytes]] = {r: [] for r in unique}
        for b in range(0, len(pieces), self.iov_max):
            batch = pieces[b:b + self.iov_max]
            status, info = h.file.vector_read(chunks=[(o, n) for _, o, n in batch], timeout=self.timeout)
            self._check(status, "vector read", h.path)
            for (r, _, _), chunk in zip(batch, info.chunks):
                parts[r].append(chunk.buffer)
        joined = {r: p[0] if len(p) == 1 else b"".join(p) for r, p in parts.items()}
        return [joined.get((o, n), b"") for o, n in ranges]

    def fsync(self, h: Handle) -> None:
        self.check_server()
        status, _ = h.file.sync(timeout=self.timeout)
        self._check(status, "sync", h.path)

    def close(self, h: Handle) -> None:
        self.check_server()
        status, _ = h.file.close(timeout=self.timeout)
        self._check(status, "close", h.path)

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        read, timeout, path, check = h.file.read, self.timeout, h.path, self._check

        def fast(bufs, offset: int) -> int:
            buf = bufs[0]
            status, data = read(offset, len(buf), timeout=timeout)
            if not status.ok:
                check(status, "read", path)
            n = len(data)
            if into_buffer:
                memoryview(buf)[:n] = data
            return n

        return fast

    def writer(self, h: Handle) -> IOFunc:
        write, timeout, path, check = h.file.write, self.timeout, h.path, self._check

        def fast(bufs, offset: int) -> int:
            buf = bufs[0]  # the bindings take only bytes: one copy per write (in storeval's CPU figure)
            status, _ = write(bytes(buf), offset, len(buf), timeout=timeout)
            if not status.ok:
                check(status, "write", path)
            return len(buf)

        return fast

    # -- whole files -----------------------------------------------------------------------------------
    def put(self, path: str, data) -> None:
        self.check_server()
        f = xrd.File()
        status, _ = f.open(f"{self.wserver}/{self._p(path)}", OpenFlags.DELETE | OpenFlags.WRITE, MODE,
                           timeout=self.timeout)
        self._check(status, "creation", path)
        try:
            if len(data):
                status, _ = f.write(bytes(data), 0, len(data), timeout=self.timeout)
                self._check(status, "write", path)
        finally:
            if self.down is None:
                f.close(timeout=self.timeout)

    def get_into(self, path: str, buf) -> int:
        h = self.open(path, "r")
        try:
            return self.pread(h, buf, 0) if len(buf) else 0
        finally:
            if self.down is None:
                h.file.close(timeout=self.timeout)

    # -- metadata ----------------------------------------------------------------------------------------
    def native(self, path: str) -> str:
        return self._p(path)

    def stat(self, path: str) -> StatResult:
        self.check_server()
        status, info = self.fs.stat(self._p(path), timeout=self.timeout)
        self._check(status, "stat", path)
        return StatResult(size=info.size, is_dir=bool(info.flags & StatInfoFlags.IS_DIR), mtime=float(info.modtime))

    def mkdir(self, path: str) -> None:
        self.check_server()
        status, _ = self.wfs.mkdir(self._p(path), MkDirFlags.NONE, MODE | AccessMode.UX | AccessMode.GX | AccessMode.OX,
                                  timeout=self.timeout)
        self._check(status, "mkdir", path)

    def rmdir(self, path: str) -> None:
        self.check_server()
        status, _ = self.wfs.rmdir(self._p(path), timeout=self.timeout)
        self._check(status, "rmdir", path)

    def remove(self, path: str) -> None:
        self.check_server()
        status, _ = self.wfs.rm(self._p(path), timeout=self.timeout)
        self._check(status, "removal", path)

    def listdir(self, path: str) -> list[str]:
        self.check_server()
        status, listing = self.fs.dirlist(self._p(path), LISTING, timeout=self.timeout)
        self._check(status, "listing", path)
        return [e.name for e in listing.dirlist]

    def fast_ops(self) -> FastOps:
        """The namespace calls on absolute server paths; create and read open the file by URL."""
        fs, server, timeout = self.fs, self.server, self.timeout
        wfs, wserver = self.wfs, self.wserver
        dir_mode = MODE | AccessMode.UX | AccessMode.GX | AccessMode.OX

        def check(status: Any, what: str, path: str) -> None:
            if not status.ok:
                self._check(status, what, path)

        def mkdir(path: str) -> None:
            check(wfs.mkdir(path, MkDirFlags.NONE, dir_mode, timeout=timeout)[0], "mkdir", path)

        def rmdir(path: str) -> None:
            check(wfs.rmdir(path, timeout=timeout)[0], "rmdir", path)

        def stat(path: str) -> Any:
            status, info = fs.stat(path, timeout=timeout)
            check(status, "stat", path)
            return info

        def listdir(path: str) -> list:
            status, listing = fs.dirlist(path, LISTING, timeout=timeout)
            check(status, "listing", path)
            return listing.dirlist

        def create(path: str, data) -> None:
            f = xrd.File()
            check(f.open(f"{wserver}/{path}", OpenFlags.NEW, MODE, timeout=timeout)[0], "creation", path)
            try:
                if len(data):
                    check(f.write(bytes(data), 0, len(data), timeout=timeout)[0], "write", path)
            finally:
                if self.down is None:  # after a server that stopped answering, closing would only wait again
                    f.close(timeout=timeout)

        def read(path: str, buf) -> int:
            f = xrd.File()
            check(f.open(f"{server}/{path}", OpenFlags.READ, timeout=timeout)[0], "open", path)
            try:
                if not len(buf):
                    return 0
                status, data = f.read(0, len(buf), timeout=timeout)
                check(status, "read", path)
                return len(data)  # the bindings return new memory: no copy into buf
            finally:
                if self.down is None:  # after a server that stopped answering, closing would only wait again
                    f.close(timeout=timeout)

        def remove(path: str) -> None:
            check(wfs.rm(path, timeout=timeout)[0], "removal", path)

        return FastOps(mkdir=mkdir, rmdir=rmdir, stat=stat, listdir=listdir, create=create, read=read,
                       remove=remove)
