"""HDFS driver (hdfs-native, a native Rust client: no JVM on the client).

``hdfs://namenode:port/path``. Files are created with the target's ``replication`` and ``block_size``
(HDFS's own defaults when unset), written front to back (HDFS has no random writes: the capability flags
say so), and read at any offset. ``fsync`` is HDFS's hsync: the data is on the datanodes' disks.

hdfs-native has no timeouts of its own: a namenode that is frozen, or killed, keeps every call waiting for
ever (it retries the connection without end). Every call therefore goes through a :class:`Deadline` of the
target's ``timeout`` — one thread hand-off per call (10–20 µs, next to 0.3–10 ms for the call itself) — and a
server that does not answer in time fails the operation with one line (``Driver.failure``); the operations
after it fail at once.
"""

from __future__ import annotations

import errno
import http.client
import json
from typing import Annotated, Any, Literal

from hdfs_native import Client, WriteOptions
from pydantic import Field, StringConstraints

from ..errors import CapabilityError, InputError, StorevalError, error_kind
from ..fields import Duration, Size
from .base import (Capabilities, Deadline, Driver, DriverOptions, FastOps, Handle, IOFunc, StatResult, TargetError,
                   first_line, network_failure)


class HdfsOptions(DriverOptions):
    replication: Annotated[int, Field(ge=1, le=512)] | None = Field(
        None, description="replicas of each block the client writes, 1-512 (none: the cluster's default)")
    block_size: Size | None = Field(None, description="block size of the files written (none: the cluster's default)")
    timeout: Duration = Field(30.0, description="per call to the namenode or the datanodes")
    jmx: list[Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+:[0-9]{1,5}$")]] = Field(
        [], description="the datanodes' HTTP addresses (HOST:PORT): their JMX BytesRead/BytesWritten say what they "
                        "moved")
    jmx_period: Duration = Field(10.0, description="the datanodes' metrics period (*.period): JMX values are "
                                                   "refreshed that often")
    on_datanode_failure: Literal["continue", "replace"] = Field(
        "continue", description="when a datanode of a write pipeline fails: continue with the ones left (what the "
                                "Java client does), or replace it first (fails when the cluster has no spare)")
    # (a MiniDFSCluster serves the namenode's beans on every daemon's port, so the jmx addresses do)
    namenode_jmx: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9._-]+:[0-9]{1,5}$")] | None = Field(
        None, description="the namenode's HTTP address (HOST:PORT): its JMX says how many blocks lack replicas "
                          "(none: the jmx addresses')")


class HdfsHandle(Handle):
    __slots__ = ("io", "pos")

    def __init__(self, path: str, mode: str, io: Any) -> None:
        super().__init__(path, mode)
        self.io = io
        self.pos = 0


def _not_found(exc: BaseException) -> bool:
    return isinstance(exc, FileNotFoundError) or "FileNotFound" in str(exc) or "does not exist" in str(exc)


# Composite calls, each made under one deadline (module functions: nothing is built per call).
def _listing(client: Client, path: str) -> list:
    return list(client.list_status(path))


def _create(client: Client, path: str, options: WriteOptions, data: Any) -> None:
    w = client.create(path, options)
    try:
        if len(data):
            w.write(data)
    finally:
        w.close()


def _read_whole(client: Client, path: str, limit: int) -> int:
    r = client.read(path)
    try:
        n = min(limit, len(r))
        return len(r.read_range(0, n)) if n else 0  # new memory from the library: not copied anywhere
    finally:
        r.close()


def _read_into(client: Client, path: str, buf: Any) -> int:
    r = client.read(path)
    try:
        n = min(len(buf), len(r))  # hdfs-native panics on reads past the end: clamp first
        if n > 0:
            memoryview(buf)[:n] = r.read_range(0, n)
        return max(n, 0)
    finally:
        r.close()


def _namenode_bean(address: str, timeout: float) -> dict[str, Any] | None:
    """The FSNamesystem bean from ``address``'s /jmx, or None (not a namenode's JVM, not answering)."""
    host, _, port = address.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", "/jmx?qry=Hadoop:service=NameNode,name=FSNamesystem")
        response = conn.getresponse()
        if response.status != 200:
            return None
        beans = json.loads(response.read()).get("beans") or []
        return beans[0] if beans else None
    except (OSError, http.client.HTTPException, ValueError):
        return None
    finally:
        conn.close()


def client_config(options: HdfsOptions) -> dict[str, str]:
    """hdfs-native's settings. Its pipeline recovery treats any block with data as an append, so under the
    DEFAULT replace-datanode policy it always asks the namenode for a new datanode after a failure — which a
    cluster with as many datanodes as replicas does not have, and the write fails ("Block writer is closed",
    after the real cause). The Java client goes on with the datanodes left for a file being written; so does
    this one with policy NEVER (or best effort)."""
    if options.on_datanode_failure == "continue":
        return {"dfs.client.block.write.replace-datanode-on-failure.policy": "NEVER",
                "dfs.client.block.write.replace-datanode-on-failure.best-effort": "true"}
    return {"dfs.client.block.write.replace-datanode-on-failure.policy": "DEFAULT",
            "dfs.client.block.write.replace-datanode-on-failure.best-effort": "false"}


def _connect(namenode: str, root: str, config: dict[str, str]) -> tuple[Client, Any]:
    client = Client(namenode, config=config)
    return client, client.get_file_info(root)


class HdfsDriver(Driver):
    default_port = 8020
    scheme = "hdfs"
    counter_sources = ("storeval.drivers.hdfsjmx:DatanodeJmx",)  # the datanodes' JMX, where jmx says
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
        self.deadline = Deadline(self.options.timeout)

    @classmethod
    def check_url(cls, url: str, options: HdfsOptions) -> None:
        parsed = cls.parse(url)
        if not parsed.host:
            raise InputError(f"{parsed.shown} names no namenode (write hdfs://HOST:PORT/path)")
        if options.block_size is not None and (options.block_size < 1 << 20 or options.block_size % 512):
            raise InputError("block_size must be at least 1MiB and a multiple of 512 bytes (HDFS limits)")

    def _p(self, path: str) -> str:
        return f"{self.root.rstrip('/')}/{path}" if path else self.root

    def tool_address(self, path: str) -> str:
        """``hdfs://namenode:port/path``: what ``hdfs dfs`` and other Hadoop clients take."""
        return f"{self.namenode}{self._p(path)}"

    def _call(self, op: str, path: str, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` within the deadline; a missing path raises FileNotFoundError, a server that cannot be
        talked to the one-line TargetUnreachable, anything else what the library raised."""
        self.check_server()
        try:
            return self.deadline.call(fn, *args)
        except Exception as e:
            raise self._error(e, op, path) from None

    def _error(self, exc: BaseException, op: str, path: str) -> BaseException:
        """The namenode's exceptions as the OSErrors callers expect (a directory that is not empty must read as
        one, not as an RPCError with a Java stack trace), a server that cannot be talked to in one line."""
        if _not_found(exc):
            return FileNotFoundError(2, "no such file", path)
        if "PathIsNotEmptyDirectoryException" in str(exc):
            return OSError(errno.ENOTEMPTY, "directory not empty", path)
        if "FileAlreadyExistsException" in str(exc):
            return FileExistsError(errno.EEXIST, "already exists", path)
        if "All DataNodes failed" in str(exc):  # the namenode answered; no datanode with a replica did
            return TargetError(self.scrub(f"{self.label}: {op} of {path} failed: no datanode holding a replica of "
                                          "the data answered (they are down or unreachable)"), error_kind(exc))
        kind = network_failure(exc)
        if kind in ("refused", "reset") and op in ("read", "write"):  # a datanode went away; the namenode may be fine
            return TargetError(self.scrub(f"{self.label}: {op} of {path} failed: a datanode of the file's pipeline "
                                          f"or replicas broke off ({first_line(exc)})"), error_kind(exc))
        if kind is not None:
            return self.failure(exc, op, path)
        return exc

    def connect(self) -> None:
        try:
            self.client, info = self._call("stat", self.root, _connect, self.namenode, self.root,
                                           client_config(self.options))
        except FileNotFoundError:
            raise StorevalError(f"HDFS directory {self.root} does not exist on {self.namenode} (create it first)") \
                from None
        if not info.isdir:
            raise StorevalError(f"HDFS path {self.root} on {self.namenode} is not a directory")

    def shutdown(self) -> None:
        self.client = None
        self.deadline.close()

    def describe(self) -> dict[str, Any]:
        return {"url": self.url, "driver": self.scheme, "namenode": self.namenode, "client": "hdfs-native",
                "server": "unknown (the HDFS RPC protocol does not name the server version)",
                "replication": self.options.replication, "block_size": self.options.block_size}

    def layout(self) -> dict[str, Any]:
        """Replication and block size (None: the cluster's default): files with 1 replica read differently
        from files with 3 (a reader may pick among datanodes)."""
        return {"replication": self.options.replication, "block_size": self.options.block_size}

    # -- data ---------------------------------------------------------------------------------------
    def _write_options(self) -> WriteOptions:
        return WriteOptions(replication=self.options.replication, block_size=self.options.block_size, overwrite=True)

    def open(self, path: str, mode: str, *, direct: bool = False) -> HdfsHandle:
        if mode == "r":
            return HdfsHandle(path, mode, self._call("open", path, self.client.read, self._p(path)))
        if mode == "rw":
            raise CapabilityError(f"target {self.url} cannot open a file for reading and writing")
        return HdfsHandle(path, mode, self._call("creation", path, self.client.create, self._p(path),
                                                 self._write_options()))

    def pread(self, h: Handle, buf, offset: int) -> int:
        n = min(len(buf), len(h.io) - offset)  # hdfs-native panics on reads past the end: clamp first
        if n <= 0:
            return 0
        memoryview(buf)[:n] = self._call("read", h.path, h.io.read_range, offset, n)
        return n

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        if offset != h.pos:
            raise CapabilityError(f"target {self.url} writes files front to back (write at {offset}, expected {h.pos})")
        try:
            n = self.deadline.call(h.io.write, buf)
        except Exception as e:
            raise self._error(e, "write", h.path) from None
        h.pos += n
        return n

    def redundancy(self) -> dict[str, int] | None:
        """The namenode's FSNamesystem bean: blocks under-replicated, missing, and pending replication."""
        for address in ([self.options.namenode_jmx] if self.options.namenode_jmx else self.options.jmx):
            bean = _namenode_bean(address, min(2.0, float(self.options.timeout)))
            if bean is not None:
                return {"under": int(bean.get("UnderReplicatedBlocks", 0)), "missing": int(bean.get("MissingBlocks", 0)),
                        "pending": int(bean.get("PendingReplicationBlocks", 0))}
        return None

    def resume_write(self, h: Handle) -> int | None:
        """After a failed write the hdfs-native writer is dead (its next block allocation names a datanode
        that is gone, and nothing excludes it): recover the file's lease, read how much the datanodes kept,
        and reopen the file for appending there — what a client must do that cannot recover its pipeline. The
        lease takes the namenode some seconds; until then this raises, and degraded mode tries again."""
        try:
            self.deadline.call(h.io.close)
        except Exception:  # noqa: BLE001 - a dead writer does not close
            pass
        p = self._p(h.path)
        if not self._call("lease recovery", h.path, self.client.recover_lease, p):
            raise TargetError(f"{self.label}: lease recovery of {h.path} is not finished yet (the namenode is "
                              "closing the file's last block)", "lease-recovery")
        length = self._call("stat", h.path, self.client.get_file_info, p).length
        h.io = self._call("append", h.path, self.client.append, p)
        h.pos = length
        return length

    def fsync(self, h: Handle) -> None:
        if h.mode != "r":
            self._call("sync", h.path, h.io.hsync)

    def close(self, h: Handle) -> None:
        self._call("close", h.path, h.io.close)

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        read_range, size, call, path = h.io.read_range, len(h.io), self.deadline.call, h.path

        def read(bufs, offset: int) -> int:
            buf = bufs[0]
            n = min(len(buf), size - offset)  # hdfs-native panics on reads past the end
            if n <= 0:
                return 0
            try:
                data = call(read_range, offset, n)
            except Exception as e:
                raise self._error(e, "read", path) from None
            if into_buffer:
                memoryview(buf)[:n] = data
            return len(data)

        return read

    def writer(self, h: Handle) -> IOFunc:
        return lambda bufs, offset: self.pwrite(h, bufs[0], offset)

    # -- whole files -----------------------------------------------------------------------------------
    def put(self, path: str, data) -> None:
        self._call("write", path, _create, self.client, self._p(path), self._write_options(), data)

    def get_into(self, path: str, buf) -> int:
        return self._call("read", path, _read_into, self.client, self._p(path), buf)

    # -- metadata ----------------------------------------------------------------------------------------
    def native(self, path: str) -> str:
        return self._p(path)

    def stat(self, path: str) -> StatResult:
        st = self._call("stat", path, self.client.get_file_info, self._p(path))
        return StatResult(size=st.length, is_dir=st.isdir, mtime=st.modification_time / 1000)

    def mkdir(self, path: str) -> None:
        self._call("mkdir", path, self.client.mkdirs, self._p(path), 0o755, False)

    def rmdir(self, path: str) -> None:
        if not self._call("rmdir", path, self.client.delete, self._p(path), False):
            raise FileNotFoundError(2, "no such directory", path)

    def remove(self, path: str) -> None:
        if not self._call("removal", path, self.client.delete, self._p(path), False):
            raise FileNotFoundError(2, "no such file", path)

    def listdir(self, path: str) -> list[str]:
        return [st.path.rstrip("/").rsplit("/", 1)[-1] for st in self._call("listing", path, _listing, self.client,
                                                                              self._p(path))]

    def fast_ops(self) -> FastOps:
        """Metadata on absolute HDFS paths: create is create+write+close, as an HDFS client does it; each
        operation is one call under the deadline."""
        client, wopts, call, error = self.client, self._write_options(), self.deadline.call, self._error

        def create(path: str, data) -> None:
            try:
                call(_create, client, path, wopts, data)
            except Exception as e:
                raise error(e, "creation", path) from None

        def read(path: str, buf) -> int:
            try:
                return call(_read_whole, client, path, len(buf))
            except Exception as e:
                raise error(e, "read", path) from None

        def remove(path: str) -> None:
            try:
                gone = call(client.delete, path, False)
            except Exception as e:
                raise error(e, "removal", path) from None
            if not gone:
                raise FileNotFoundError(2, "no such file", path)

        def listdir(path: str) -> list:
            try:
                return call(_listing, client, path)
            except Exception as e:
                raise error(e, "listing", path) from None

        def mkdir(path: str) -> None:
            try:
                call(client.mkdirs, path, 0o755, False)
            except Exception as e:
                raise error(e, "mkdir", path) from None

        def stat(path: str) -> Any:
            try:
                return call(client.get_file_info, path)
            except Exception as e:
                raise error(e, "stat", path) from None

        return FastOps(mkdir=mkdir, rmdir=remove, stat=stat, listdir=listdir, create=create, read=read, remove=remove)
