"""POSIX driver: local and mounted file systems (ext4, XFS, Lustre, GPFS, BeeGFS, NFS, CephFS …).

Data moves with ``os.preadv``/``os.pwritev`` on plain descriptors; O_DIRECT
needs page-aligned buffers (the workloads allocate them with mmap) and
transfer sizes that are multiples of the device block size.
"""

from __future__ import annotations

import errno
import functools
import os
import stat as stat_mod

from ..core.remove import unlink_beneath
from ..errors import DirectIOUnsupported, InputError
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, IOFunc, NativeIO, StatResult


def url_path(url: str) -> str:
    """The local path of a ``file://`` URL."""
    parsed = PosixDriver.parse(url)
    if parsed.host not in ("", "localhost"):
        raise InputError(f"{parsed.shown} names a host; file:// URLs name a local path (write file:///path, three "
                         "slashes)")
    return parsed.local_path or "/"


class PosixHandle(Handle):
    __slots__ = ("fd",)

    def __init__(self, path: str, mode: str, fd: int, direct: bool) -> None:
        super().__init__(path, mode, direct)
        self.fd = fd


_MODES = {"r": os.O_RDONLY, "w": os.O_WRONLY | os.O_CREAT, "rw": os.O_RDWR | os.O_CREAT}


class PosixDriver(Driver):
    scheme = "file"
    Options = DriverOptions
    caps = Capabilities(random_write=True, direct_io=hasattr(os, "O_DIRECT"), vector_read=False,
                        directories=True, append_only=False, fsync=True, shared_write=True, client_page_cache=True)
    url_parts = frozenset({"host", "path"})  # the host only as localhost (url_path says so)
    url_hints = {"port": "file:// URLs name a local path, not a server",
                 "user": "file:// URLs name a local path, not a server"}

    def __init__(self, url: str, options: DriverOptions | None = None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        self.root = url_path(url)

    @classmethod
    def check_url(cls, url: str, options: DriverOptions) -> None:
        root = url_path(url)
        if not os.path.exists(root):
            raise InputError(f"directory {root} does not exist (create it, or choose an existing directory)")
        if not os.path.isdir(root):
            raise InputError(f"{root} is not a directory (a file:// target is a directory)")
        if not os.access(root, os.W_OK | os.X_OK):
            raise InputError(f"directory {root} is not writable (choose a directory you can write to)")

    def _p(self, path: str) -> str:
        return os.path.join(self.root, path) if path else self.root

    def layout(self) -> dict:
        """No option of a file-system target changes how its files sit (striping is the directory's, set
        outside storeval)."""
        return {}

    def describe(self) -> dict:
        st = os.statvfs(self.root)
        return {"url": self.url, "driver": self.scheme, "path": self.root,
                "fs_block_size": st.f_bsize, "fs_bytes_total": st.f_blocks * st.f_frsize,
                "fs_bytes_free": st.f_bavail * st.f_frsize}

    def tool_address(self, path: str) -> str:
        """The file's absolute local path (what cp, dd or a ROOT macro opens)."""
        return self._p(path)

    # -- data ---------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> PosixHandle:
        flags = _MODES[mode] | os.O_CLOEXEC
        if direct:
            flags |= os.O_DIRECT
        full = self._p(path)
        try:
            fd = os.open(full, flags, 0o644)
        except OSError as e:
            if direct and e.errno == errno.EINVAL:
                raise DirectIOUnsupported(f"the file system of {self.root} refuses O_DIRECT") from e
            raise
        return PosixHandle(path, mode, fd, direct)

    def pread(self, h: Handle, buf, offset: int) -> int:
        return os.preadv(h.fd, [buf], offset)

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        return os.pwritev(h.fd, [buf], offset)

    def preadv(self, h: Handle, ranges):
        fd = h.fd
        return [os.pread(fd, length, offset) for offset, length in ranges]

    def fsync(self, h: Handle) -> None:
        os.fsync(h.fd)

    def close(self, h: Handle) -> None:
        os.close(h.fd)

    def invalidate(self, path: str) -> bool:
        """Write back and drop the page cache of one file (posix_fadvise DONTNEED), as fio does before I/O."""
        fd = os.open(self._p(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            return True
        finally:
            os.close(fd)

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        return functools.partial(os.preadv, h.fd)

    def writer(self, h: Handle) -> IOFunc:
        return functools.partial(os.pwritev, h.fd)

    def native_io(self, h: Handle | None = None) -> NativeIO:
        """Plain system calls: on the handle's descriptor, and on native paths (absolute local paths)."""
        return NativeIO("syscall", h.fd if h is not None else -1)

    # -- whole files ------------------------------------------------------------------------------
    def put(self, path: str, data) -> None:
        fd = os.open(self._p(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view, done = memoryview(data), 0
            while done < len(view):
                done += os.write(fd, view[done:])
        finally:
            os.close(fd)

    def get_into(self, path: str, buf) -> int:
        fd = os.open(self._p(path), os.O_RDONLY | os.O_CLOEXEC)
        try:
            view, total = memoryview(buf), 0
            while total < len(view):
                n = os.readv(fd, [view[total:]])
                if n == 0:
                    break
                total += n
            return total
        finally:
            os.close(fd)

    # -- metadata --------------------------------------------------------------------------------
    def native(self, path: str) -> str:
        return self._p(path)

    def fast_ops(self) -> FastOps:
        """Plain system calls on absolute paths: create is open(O_CREAT)+write+close, as mdtest does it."""
        flags_w = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC
        flags_r = os.O_RDONLY | os.O_CLOEXEC
        os_open, os_close, os_write, os_readv = os.open, os.close, os.write, os.readv
        vec: list = [None]  # the one-buffer vector of read(), made once, not a list per read

        def create(path: str, data) -> None:
            fd = os_open(path, flags_w, 0o644)
            try:
                if data:
                    os_write(fd, data)
            finally:
                os_close(fd)

        def read(path: str, buf) -> int:
            fd = os_open(path, flags_r)
            try:
                if not len(buf):  # an empty file's read is its open and close, as mdtest's (-e 0 reads nothing)
                    return 0
                if vec[0] is not buf:
                    vec[0] = buf
                total = n = os_readv(fd, vec)
                while n and total < len(buf):  # short reads happen on network file systems
                    n = os_readv(fd, [memoryview(buf)[total:]])
                    total += n
                return total
            finally:
                os_close(fd)

        return FastOps(mkdir=os.mkdir, rmdir=os.rmdir, stat=os.stat, listdir=os.listdir, create=create,
                       read=read, remove=os.unlink)

    def stat(self, path: str) -> StatResult:
        st = os.stat(self._p(path))
        return StatResult(size=st.st_size, is_dir=stat_mod.S_ISDIR(st.st_mode), mtime=st.st_mtime)

    def mkdir(self, path: str) -> None:
        os.mkdir(self._p(path))

    def rmdir(self, path: str) -> None:
        self._unlink(path, directory=True)

    def remove(self, path: str) -> None:
        self._unlink(path, directory=False)

    def _unlink(self, path: str, directory: bool) -> None:
        """Remove one file or empty directory below the target without following a link in any part of its path
        nor crossing a mount: a cell directory swapped for a link to the user's data never leads a cleanup
        there (core/remove.py). The timed metadata loops use fast_ops, not this."""
        if os.path.isabs(path) or not path:
            (os.rmdir if directory else os.unlink)(self._p(path))
            return
        unlink_beneath(self.root, path, directory=directory)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(self._p(path))

    def exists(self, path: str) -> bool:
        return os.path.lexists(self._p(path))

    @classmethod
    def carrier(cls, url: str, options=None):
        """A local path: its mount's block device, or the interface to a network file system's server."""
        from .carrier import Carrier

        return Carrier(path=url_path(url))
