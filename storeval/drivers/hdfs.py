"""HDFS driver (hdfs-native, a native Rust client: no JVM on the client).

``hdfs://namenode:port/path``. Files are created with the target's ``replication`` and ``block_size``
(HDFS's own defaults when unset), written front to back (HDFS has no random writes: the capability flags
say so), and read at any offset. ``fsync`` is HDFS's hsync: the data is on the datanodes' disks.
"""

from __future__ import annotations

import threading
from typing import Annotated, Any

from hdfs_native import Client, WriteOptions
from pydantic import Field

from ..errors import CapabilityError, InputError, StorevalError
from ..fields import Duration, Size
from .base import Capabilities, Driver, DriverOptions, Handle, IOFunc, StatResult


class HdfsOptions(DriverOptions):
    replication: Annotated[int, Field(ge=1, le=512)] | None = None
    block_size: Size | None = None
    timeout: Duration = 30.0  # bound on reaching the namenode when a cell starts


class HdfsHandle(Handle):
    __slots__ = ("io", "pos")

    def __init__(self, path: str, mode: str, io: Any) -> None:
        super().__init__(path, mode)
        self.io = io
        self.pos = 0


def _not_found(exc: BaseException) -> bool:
    return isinstance(exc, FileNotFoundError) or "FileNotFound" in str(exc) or "does not exist" in str(exc)


class HdfsDriver(Driver):
    scheme = "hdfs"
    Options = HdfsOptions
    caps = Capabilities(random_write=False, direct_io=False, vector_read=False, directories=True,
                        append_only=True, fsync=True, shared_write=False)
    url_parts = frozenset({"host", "port", "path"})  # hdfs://namenode[:port]/path
    url_hints = {"user": "the HDFS user comes from Kerberos, or from HADOOP_USER_NAME in the environment",
                 "password": "the HDFS user comes from Kerberos, or from HADOOP_USER_NAME in the environment"}
    options: HdfsOptions

    def __init__(self, url: str, options: HdfsOptions | None = None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        self.namenode = f"hdfs://{self.parsed_url.netloc}"
        self.root = "/" + self.parsed_url.path.strip("/") if self.parsed_url.path.strip("/") else "/"
        self.client: Client | None = None

    @classmethod
    def check_url(cls, url: str, options: HdfsOptions) -> None:
        parsed = cls.parse(url)
        if not parsed.host:
            raise InputError(f"{parsed.shown} names no namenode (write hdfs://HOST:PORT/path)")
        if options.block_size is not None and (options.block_size < 1 << 20 or options.block_size % 512):
            raise InputError("block_size must be at least 1MiB and a multiple of 512 bytes (HDFS limits)")

    def _p(self, path: str) -> str:
        return f"{self.root.rstrip('/')}/{path}" if path else self.root

    def connect(self) -> None:
        result: dict[str, Any] = {}

        def probe() -> None:
            try:
                client = Client(self.namenode)
                info = client.get_file_info(self.root)
                result["client"], result["info"] = client, info
            except BaseException as e:  # noqa: BLE001 - reported below
                result["error"] = e

        t = threading.Thread(target=probe, daemon=True)
        t.start()
        t.join(self.options.timeout)
        if t.is_alive():
            raise StorevalError(f"cannot reach the HDFS namenode at {self.namenode} within {self.options.timeout:g} s "
                                "(is it up?)")
        if "error" in result:
            e = result["error"]
            if _not_found(e):
                raise StorevalError(f"HDFS directory {self.root} does not exist on {self.namenode} (create it first)")
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise StorevalError(f"cannot reach the HDFS namenode at {self.namenode}: {first}")
        if not result["info"].isdir:
            raise StorevalError(f"HDFS path {self.root} on {self.namenode} is not a directory")
        self.client = result["client"]

    def shutdown(self) -> None:
        self.client = None

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "driver": self.scheme, "namenode": self.namenode, "client": "hdfs-native",
                "server": "unknown (the HDFS RPC protocol does not name the server version)",
                "replication": self.options.replication, "block_size": self.options.block_size}

    # -- data ---------------------------------------------------------------------------------------
    def _write_options(self) -> WriteOptions:
        return WriteOptions(replication=self.options.replication, block_size=self.options.block_size, overwrite=True)

    def open(self, path: str, mode: str, *, direct: bool = False) -> HdfsHandle:
        if mode == "r":
            try:
                return HdfsHandle(path, mode, self.client.read(self._p(path)))
            except Exception as e:
                if _not_found(e):
                    raise FileNotFoundError(2, "no such file", path) from None
                raise
        if mode == "rw":
            raise CapabilityError(f"target {self.url} cannot open a file for reading and writing")
        return HdfsHandle(path, mode, self.client.create(self._p(path), self._write_options()))

    def pread(self, h: Handle, buf, offset: int) -> int:
        n = min(len(buf), len(h.io) - offset)  # hdfs-native panics on reads past the end: clamp first
        if n <= 0:
            return 0
        memoryview(buf)[:n] = h.io.read_range(offset, n)
        return n

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        if offset != h.pos:
            raise CapabilityError(f"target {self.url} writes files front to back (write at {offset}, expected {h.pos})")
        n = h.io.write(buf)
        h.pos += n
        return n

    def fsync(self, h: Handle) -> None:
        if h.mode != "r":
            h.io.hsync()

    def close(self, h: Handle) -> None:
        h.io.close()

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        read_range, size = h.io.read_range, len(h.io)

        def read(bufs, offset: int) -> int:
            buf = bufs[0]
            n = min(len(buf), size - offset)  # hdfs-native panics on reads past the end
            if n <= 0:
                return 0
            data = read_range(offset, n)
            if into_buffer:
                memoryview(buf)[:n] = data
            return len(data)

        return read

    def writer(self, h: Handle) -> IOFunc:
        return lambda bufs, offset: self.pwrite(h, bufs[0], offset)

    # -- whole files -----------------------------------------------------------------------------------
    def put(self, path: str, data) -> None:
        w = self.client.create(self._p(path), self._write_options())
        try:
            if len(data):
                w.write(data)
        finally:
            w.close()

    def get_into(self, path: str, buf) -> int:
        h = self.open(path, "r")
        try:
            if not len(buf):
                return 0
            return self.pread(h, buf, 0)
        finally:
            h.io.close()

    # -- metadata ----------------------------------------------------------------------------------------
    def native(self, path: str) -> str:
        return self._p(path)

    def stat(self, path: str) -> StatResult:
        try:
            st = self.client.get_file_info(self._p(path))
        except Exception as e:
            if _not_found(e):
                raise FileNotFoundError(2, "no such file", path) from None
            raise
        return StatResult(size=st.length, is_dir=st.isdir, mtime=st.modification_time / 1000)

    def mkdir(self, path: str) -> None:
        self.client.mkdirs(self._p(path), create_parent=False)

    def rmdir(self, path: str) -> None:
        if not self.client.delete(self._p(path), recursive=False):
            raise FileNotFoundError(2, "no such directory", path)

    def remove(self, path: str) -> None:
        if not self.client.delete(self._p(path), recursive=False):
            raise FileNotFoundError(2, "no such file", path)

    def listdir(self, path: str) -> list[str]:
        return [st.path.rstrip("/").rsplit("/", 1)[-1] for st in self.client.list_status(self._p(path))]

    def fast_ops(self):
        """Metadata on absolute HDFS paths: create is create+write+close, as an HDFS client does it."""
        from .base import FastOps

        client, wopts = self.client, self._write_options()

        def create(path: str, data) -> None:
            w = client.create(path, wopts)
            try:
                if len(data):
                    w.write(data)
            finally:
                w.close()

        def read(path: str, buf) -> int:
            r = client.read(path)
            try:
                n = min(len(buf), len(r))
                return len(r.read_range(0, n)) if n else 0  # new memory from the library: no copy into buf
            finally:
                r.close()

        def remove(path: str) -> None:
            if not client.delete(path, recursive=False):
                raise FileNotFoundError(2, "no such file", path)

        def listdir(path: str) -> list:
            return list(client.list_status(path))

        return FastOps(mkdir=lambda p: client.mkdirs(p, create_parent=False), rmdir=remove, stat=client.get_file_info,
                       listdir=listdir, create=create, read=read, remove=remove)
