"""Removing a tree on a local file system, and nothing beyond it: the one remover of local paths.

``storeval clean``, a cell's cleanup on a file-system target, the testbed's ledger and the command workload's
local copies all remove through :func:`remove_tree` (or :func:`clear_fd`). The walk

* never follows a symbolic link: each directory is opened ``O_NOFOLLOW | O_DIRECTORY`` relative to its
  parent's descriptor, each entry is looked at with ``fstatat(AT_SYMLINK_NOFOLLOW)`` and removed with
  ``unlinkat``/``rmdir`` on the parent's descriptor, so a link is removed as a link (or left, as the caller's
  ``judge`` says) and a directory swapped for a link meanwhile is never entered;
* never crosses a mount: an entry whose device or mount id differs from the tree's (a bind mount, a FUSE
  mount a killed client left) is left alone, whole, and named (:data:`MOUNTED`), in a dry run too;
* iterates: one directory descriptor is held at a time (a parent is reopened through ``..`` and checked to be
  the directory it left), so a tree of any depth costs memory, never stack or descriptors.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field

MOUNTED = "another file system is mounted there"
LINK = "a symbolic link, not followed"
MOVED = "replaced or moved while it was being removed"
SKIP = object()  # a judge's verdict: leave the entry, unnamed (its directory is then not removed either)
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: ``judge(rel, name, lstat, dir_fd)``: None to remove the entry (and what is in it), a reason to leave it
#: (named in :attr:`Removal.left`), or :data:`SKIP` to leave it unnamed. ``rel`` is below the tree's top.
Judge = Callable[[str, str, os.stat_result, int], "str | object | None"]


@dataclass(frozen=True)
class Left:
    """Something a removal left in place: where, and why."""

    path: str
    why: str


@dataclass
class Removal:
    """What a removal did (or, in a dry run, would do)."""

    left: list[Left] = field(default_factory=list)
    files: int = 0  # files removed (links not counted)
    bytes: int = 0
    dirs: int = 0
    gone: bool = False  # the top itself is gone (removed now, or missing)
    emptied: bool = False  # nothing is left inside the top (in a dry run: would be left)

    @property
    def mounts(self) -> list[str]:
        return [x.path for x in self.left if x.why == MOUNTED]


def describe(left: list[Left], limit: int = 3) -> str:
    """One line naming what was left: ``A, B and 2 more (why); C (why)`` grouped by reason."""
    groups: dict[str, list[str]] = {}
    for item in left:
        groups.setdefault(item.why, []).append(item.path)
    parts = []
    for why, paths in groups.items():
        shown = ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
        parts.append(f"{shown} ({why})")
    return "; ".join(parts)


# -- statx: birth time (the ledger tells a reused inode from its own) and mount id (a bind mount of the same
# file system has the same device) ---------------------------------------------------------------------------
class _StatxTime(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_int64), ("nsec", ctypes.c_uint32), ("reserved", ctypes.c_int32)]


class _Statx(ctypes.Structure):  # struct statx (linux/stat.h), 256 bytes
    _fields_ = [("mask", ctypes.c_uint32), ("blksize", ctypes.c_uint32), ("attributes", ctypes.c_uint64),
                ("nlink", ctypes.c_uint32), ("uid", ctypes.c_uint32), ("gid", ctypes.c_uint32),
                ("mode", ctypes.c_uint16), ("spare0", ctypes.c_uint16), ("ino", ctypes.c_uint64),
                ("size", ctypes.c_uint64), ("blocks", ctypes.c_uint64), ("attributes_mask", ctypes.c_uint64),
                ("atime", _StatxTime), ("btime", _StatxTime), ("ctime", _StatxTime), ("mtime", _StatxTime),
                ("rdev_major", ctypes.c_uint32), ("rdev_minor", ctypes.c_uint32),
                ("dev_major", ctypes.c_uint32), ("dev_minor", ctypes.c_uint32), ("mnt_id", ctypes.c_uint64),
                ("rest", ctypes.c_uint8 * 120)]


STATX_BTIME, STATX_MNT_ID, AT_SYMLINK_NOFOLLOW, AT_EMPTY_PATH, AT_FDCWD = 0x800, 0x1000, 0x100, 0x1000, -100
try:
    _statx = ctypes.CDLL(None, use_errno=True).statx
    _statx.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_uint, ctypes.POINTER(_Statx)]
except (AttributeError, OSError):  # glibc before 2.28, or no libc: no birth times, mounts told by device only
    _statx = None


def _statx_of(dir_fd: int, name: str, want: int) -> _Statx | None:
    if _statx is None:
        return None
    buf = _Statx()
    flags = AT_SYMLINK_NOFOLLOW | (AT_EMPTY_PATH if not name else 0)
    if _statx(dir_fd, os.fsencode(name), flags, want, ctypes.byref(buf)) != 0 or not buf.mask & want:
        return None
    return buf


def born(dir_fd: int, name: str) -> int | None:
    """Birth time in ns of ``name`` in ``dir_fd`` (of ``dir_fd`` itself when ``name`` is empty), not following
    a link; None where the file system does not keep one."""
    buf = _statx_of(dir_fd, name, STATX_BTIME)
    return None if buf is None else buf.btime.sec * 1_000_000_000 + buf.btime.nsec


def mount_id(dir_fd: int, name: str) -> int | None:
    """The mount ``name`` in ``dir_fd`` (``dir_fd`` itself when ``name`` is empty) sits on; None if unknown."""
    buf = _statx_of(dir_fd, name, STATX_MNT_ID)
    return None if buf is None else buf.mnt_id


@dataclass(frozen=True)
class _Mount:
    dev: int
    mnt: int | None

    def other(self, st: os.stat_result, dir_fd: int, name: str) -> bool:
        """Whether the entry sits on another mount than the tree's (its device, else its mount id, differs)."""
        if st.st_dev != self.dev:
            return True
        if self.mnt is None or stat.S_ISLNK(st.st_mode):
            return False
        mnt = mount_id(dir_fd, name)
        return mnt is not None and mnt != self.mnt


def mount_of(fd: int) -> _Mount:
    return _Mount(os.fstat(fd).st_dev, mount_id(fd, ""))


@dataclass
class _Frame:
    rel: str
    ident: tuple[int, int]
    names: list[str]
    name: str
    whole: bool = True  # everything in it was (or would be) removed


def _why(e: OSError) -> str:
    if e.errno == errno.EBUSY:
        return MOUNTED
    if e.errno in (errno.ELOOP, errno.ENOTDIR):
        return MOVED
    if e.errno == errno.ENOTEMPTY:
        return "something was put in it meanwhile"
    return e.strerror or str(e)


def clear_fd(top: int, where: str, *, judge: Judge | None = None, dry_run: bool = False,
             mount: _Mount | None = None, out: Removal | None = None) -> Removal:
    """Remove what is inside the open directory ``top`` (named ``where`` in messages), never ``top`` itself.
    Nothing on another mount than ``mount`` (default: ``top``'s) is touched. ``out.left`` empty and nothing
    skipped means it is empty now (in a dry run: would be)."""
    out = out if out is not None else Removal()
    mount = mount or mount_of(top)
    tst = os.fstat(top)
    try:
        names = sorted(os.listdir(top), reverse=True)
    except OSError as e:
        out.left.append(Left(where, _why(e)))
        return out
    stack = [_Frame("", (tst.st_dev, tst.st_ino), names, "")]
    first = stack[0]
    cur = top
    try:
        while stack:
            f = stack[-1]
            if f.names:
                name = f.names.pop()
                rel = f"{f.rel}/{name}" if f.rel else name
                try:
                    st = os.stat(name, dir_fd=cur, follow_symlinks=False)
                except FileNotFoundError:
                    continue
                except OSError as e:
                    out.left.append(Left(f"{where}/{rel}", _why(e)))
                    f.whole = False
                    continue
                if mount.other(st, cur, name):
                    out.left.append(Left(f"{where}/{rel}", MOUNTED))
                    f.whole = False
                    continue
                verdict = judge(rel, name, st, cur) if judge is not None else None
                if verdict is not None:
                    f.whole = False
                    if verdict is not SKIP:
                        out.left.append(Left(f"{where}/{rel}", str(verdict)))
                    continue
                if stat.S_ISDIR(st.st_mode):
                    try:
                        sub = os.open(name, DIR_FLAGS, dir_fd=cur)
                    except FileNotFoundError:
                        continue
                    except OSError as e:
                        out.left.append(Left(f"{where}/{rel}", _why(e)))
                        f.whole = False
                        continue
                    sst = os.fstat(sub)
                    if (sst.st_dev, sst.st_ino) != (st.st_dev, st.st_ino):  # swapped (or mounted on) since the stat
                        os.close(sub)
                        out.left.append(Left(f"{where}/{rel}", MOVED))
                        f.whole = False
                        continue
                    try:
                        sub_names = sorted(os.listdir(sub), reverse=True)
                    except OSError as e:
                        os.close(sub)
                        out.left.append(Left(f"{where}/{rel}", _why(e)))
                        f.whole = False
                        continue
                    if cur != top:
                        os.close(cur)
                    cur = sub
                    stack.append(_Frame(rel, (sst.st_dev, sst.st_ino), sub_names, name))
                    continue
                if not dry_run:
                    try:
                        os.unlink(name, dir_fd=cur)
                    except FileNotFoundError:
                        continue
                    except OSError as e:
                        out.left.append(Left(f"{where}/{rel}", _why(e)))
                        f.whole = False
                        continue
                if not stat.S_ISLNK(st.st_mode):
                    out.files += 1
                    out.bytes += st.st_size
                continue
            # every entry of f is done: back to its parent, then remove f if it was emptied
            stack.pop()
            if not stack:
                break
            parent = stack[-1]
            if len(stack) == 1:
                pfd = top
            else:
                try:
                    pfd = os.open("..", DIR_FLAGS, dir_fd=cur)
                except OSError as e:
                    out.left.append(Left(f"{where}/{parent.rel}", _why(e)))
                    first.whole = False
                    break
                pst = os.fstat(pfd)
                if (pst.st_dev, pst.st_ino) != parent.ident:  # the tree was moved meanwhile: stop here
                    os.close(pfd)
                    out.left.append(Left(f"{where}/{parent.rel}", MOVED))
                    first.whole = False
                    break
            os.close(cur)
            cur = pfd
            if not f.whole:
                parent.whole = False
                continue
            if not dry_run:
                try:
                    os.rmdir(f.name, dir_fd=cur)
                except FileNotFoundError:
                    pass
                except OSError as e:
                    out.left.append(Left(f"{where}/{f.rel}", _why(e)))
                    parent.whole = False
                    continue
            out.dirs += 1
    finally:
        if cur != top:
            os.close(cur)
    out.emptied = first.whole
    return out


def _split(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{rel}: '..' in a path to remove")
    return parts


def _open_beneath(root_fd: int, parts: list[str], where: str, mount: _Mount, out: Removal) -> int | None:
    """The directory ``parts`` below ``root_fd``, each step opened without following a link and on the root's
    mount; None (and why, in ``out``) where that is not so, or it does not exist (``out.gone``)."""
    fd = root_fd
    for k, part in enumerate(parts):
        path = os.path.join(where, *parts[: k + 1])
        try:
            st = os.stat(part, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                out.left.append(Left(path, LINK))
            elif not stat.S_ISDIR(st.st_mode):
                out.left.append(Left(path, "not a directory"))
            elif mount.other(st, fd, part):
                out.left.append(Left(path, MOUNTED))
            else:
                sub = os.open(part, DIR_FLAGS, dir_fd=fd)
                sst = os.fstat(sub)
                if (sst.st_dev, sst.st_ino) != (st.st_dev, st.st_ino):
                    os.close(sub)
                    out.left.append(Left(path, MOVED))
                else:
                    if fd != root_fd:
                        os.close(fd)
                    fd = sub
                    continue
        except FileNotFoundError:
            out.gone = True
        except OSError as e:
            out.left.append(Left(path, _why(e)))
        if fd != root_fd:
            os.close(fd)
        return None
    return fd


def remove_tree(root: str, rel: str = "", *, judge: Judge | None = None, dry_run: bool = False,
                keep_top: bool = False) -> Removal:
    """Remove ``rel`` below the directory ``root`` (the user's path, taken as it is) and everything in it.

    No component of ``rel`` is followed if it is a link; nothing on another mount than ``root``'s is entered
    or removed (it is named in ``left``, as is whatever ``judge`` keeps); ``rel`` itself (never ``root``) is
    removed last, once empty, unless ``keep_top``. A top that is a file is removed as one. With ``dry_run``
    nothing is removed: the counts say what would be."""
    out = Removal()
    parts = _split(rel)
    where = os.path.normpath(root)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        mount = mount_of(root_fd)
        if not parts:
            clear_fd(root_fd, where, judge=judge, dry_run=dry_run, mount=mount, out=out)
            return out
        parent = _open_beneath(root_fd, parts[:-1], where, mount, out)
        if parent is None:
            return out
        name, top_path = parts[-1], os.path.join(where, *parts)
        try:
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if mount.other(st, parent, name):
                out.left.append(Left(top_path, MOUNTED))
            elif stat.S_ISLNK(st.st_mode):
                out.left.append(Left(top_path, LINK))
            elif not stat.S_ISDIR(st.st_mode):
                if not dry_run and not keep_top:
                    os.unlink(name, dir_fd=parent)
                    out.gone = True
                out.files, out.bytes = 1, st.st_size
            else:
                top = os.open(name, DIR_FLAGS, dir_fd=parent)
                try:
                    tst = os.fstat(top)
                    if (tst.st_dev, tst.st_ino) != (st.st_dev, st.st_ino):
                        out.left.append(Left(top_path, MOVED))
                        return out
                    clear_fd(top, top_path, judge=judge, dry_run=dry_run, mount=mount, out=out)
                finally:
                    os.close(top)
                if out.emptied and not dry_run and not keep_top:
                    try:
                        now = os.stat(name, dir_fd=parent, follow_symlinks=False)
                        if (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino):
                            os.rmdir(name, dir_fd=parent)
                            out.dirs += 1
                            out.gone = True
                        else:
                            out.left.append(Left(top_path, MOVED))
                    except FileNotFoundError:
                        out.gone = True
                    except OSError as e:
                        out.left.append(Left(top_path, _why(e)))
        except FileNotFoundError:
            out.gone = True
        except OSError as e:
            out.left.append(Left(top_path, _why(e)))
        finally:
            if parent != root_fd:
                os.close(parent)
        return out
    finally:
        os.close(root_fd)


def local_root(driver: object) -> str | None:
    """The local directory a file-system target (``file://``) lives in, else None: removal there goes through
    :func:`remove_tree`, anywhere else through the driver. Duck-typed: this layer imports no driver."""
    if getattr(driver, "scheme", None) != "file":
        return None
    native = getattr(driver, "native", None)
    root = native("") if callable(native) else None
    return root if isinstance(root, str) else None


def unlink_beneath(root: str, rel: str, *, directory: bool = False) -> None:
    """Remove the one file (or, with ``directory``, empty directory) ``rel`` below ``root`` without following a
    link in any component of ``rel`` nor crossing a mount; raises like ``os.unlink``/``os.rmdir``
    (FileNotFoundError when missing; ELOOP where a component is a link)."""
    parts = _split(rel)
    if not parts:
        raise IsADirectoryError(errno.EISDIR, "the target's own directory is never removed", root)
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        out = Removal()
        parent = _open_beneath(root_fd, parts[:-1], os.path.normpath(root), mount_of(root_fd), out)
        if parent is None:
            if out.gone:
                raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), os.path.join(root, rel))
            raise OSError(errno.ELOOP if out.left[0].why == LINK else errno.EXDEV, out.left[0].why,
                          out.left[0].path)
        try:
            (os.rmdir if directory else os.unlink)(parts[-1], dir_fd=parent)
        finally:
            if parent != root_fd:
                os.close(parent)
    finally:
        os.close(root_fd)


__all__ = ["Left", "Removal", "Judge", "SKIP", "MOUNTED", "LINK", "MOVED", "DIR_FLAGS", "describe", "born",
           "mount_id", "mount_of", "clear_fd", "remove_tree", "local_root", "unlink_beneath"]
