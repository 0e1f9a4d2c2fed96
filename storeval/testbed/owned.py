"""Proof of what the testbed created, and removal of exactly that.

The testbed may only delete what it made. A :class:`Ledger`, kept in the state file, is the proof:

* an **anchor** is a top directory the testbed made, or found empty and took: ``--dir`` itself, each
  server's root, XRootD's home under /var/tmp. It holds a marker file with the ledger's random token, so a
  state file edited to name some other directory proves nothing there;
* an **entry** is a directory or file made inside an anchor, created exclusively (``mkdir``, ``O_EXCL``)
  and recorded with its device, inode and birth time the moment it exists (``on_change`` saves the state
  right then). The birth time (``statx``) tells a user's file from storeval's when the file system gave the
  user's new file the inode number storeval's just freed;
* an **intent** comes first: before anything is created, its path and the time are recorded (``pending``) and
  saved, so a start killed between creating a thing and recording it still proves it: the thing at that path
  born after the intent is the one storeval made (an exclusive create fails on anything there before);
* a directory handed to a server carries a **rule**: the server's ``claims(rule, parts, stat)`` says which
  of the things inside it the server itself writes (MinIO's ``xl.meta`` files, HDFS's storage directories …).

:meth:`Ledger.remove` walks each anchor with the shared remover (:mod:`storeval.core.remove`: directory
descriptors opened with ``O_NOFOLLOW``, no mount crossed, iterative at any depth): it removes a recorded entry
whose device and inode still match and an entry the rule claims, removes a directory only once it is empty,
never enters a directory it cannot prove, never follows a symbolic link, and returns what it left and why. What is left stays recorded, so a later removal finishes the job once the user moved it.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core.remove import AT_FDCWD, Left, SKIP, born, clear_fd, describe, mount_of
from ..errors import InputError

MARKER = ".storeval-testbed"
MARKER_HEAD = "storeval testbed directory: storeval created it and records in its state what it made here\n"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

#: ``claims(rule, parts, stat)``: whether a server wrote ``parts`` (path below the ruled directory)
Claims = Callable[[str, tuple[str, ...], os.stat_result], bool]


class NotOwned(InputError):
    """A path the testbed would create, reuse or replace is not its own: refused before anything is touched."""


FOREIGN = "not created by storeval or its server"
#: how far a file system's (coarse) timestamps may lag the clock an intent reads its time from
CLOCK_SLACK_NS = 50_000_000
REPLACED = "replaced since storeval created it"


def is_marker(path: Path) -> bool:
    """Whether ``path`` is a marker file some storeval testbed wrote (whatever its token)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    with os.fdopen(fd, "rb") as f:
        return os.fstat(f.fileno()).st_size < 4096 and f.read(4096).decode(errors="replace").startswith(MARKER_HEAD)


def _born(dir_fd: int, name: str) -> int | None:
    """Birth time in ns of ``name`` in ``dir_fd`` (of ``dir_fd`` itself when ``name`` is empty), not following
    a link; None where the file system does not keep one."""
    return born(dir_fd, name)


def _ident(st: os.stat_result, born: int | None) -> dict[str, int]:
    return {"dev": st.st_dev, "ino": st.st_ino, **({"born": born} if born is not None else {})}


def _id_path(path: str | Path) -> dict[str, int]:
    return _ident(os.lstat(path), _born(AT_FDCWD, str(path)))


def _id_fd(fd: int) -> dict[str, int]:
    return _ident(os.fstat(fd), _born(fd, ""))


def _same(rec: dict[str, Any], ident: dict[str, int]) -> bool:
    """The recorded thing is this one: same device and inode, and the same birth time where one was recorded."""
    return rec.get("dev") == ident["dev"] and rec.get("ino") == ident["ino"] and rec.get("born") == ident.get("born")


def _proven(rec: dict[str, Any], ident: dict[str, int]) -> bool:
    """:func:`_same`, or, for an intent never completed, a thing born after the intent was recorded."""
    if "pending" in rec:
        return ident.get("born") is not None and ident["born"] >= rec["pending"]
    return _same(rec, ident)


def _identified(d: dict[str, Any]) -> bool:
    """A recorded anchor or entry names its thing: by device and inode, or as an intent (its time)."""
    return all(isinstance(d.get(k), int) for k in ("dev", "ino")) or isinstance(d.get("pending"), int)


@dataclass
class Ledger:
    """Anchors and entries of one owner (a server, or the testbed directory itself); see the module docstring."""

    token: str = field(default_factory=lambda: secrets.token_hex(16))
    anchors: list[dict[str, Any]] = field(default_factory=list)  # {path, dev, ino, created, rule?}
    entries: list[dict[str, Any]] = field(default_factory=list)  # {anchor, path, dir, dev, ino, rule?}
    on_change: Callable[[], None] | None = field(default=None, repr=False, compare=False)

    # -- state ------------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"token": self.token, "anchors": self.anchors, "entries": self.entries}

    @classmethod
    def from_json(cls, d: dict[str, Any] | None) -> Ledger:
        """A ledger from a state file; malformed parts are dropped (they could only prove less)."""
        if not isinstance(d, dict) or not isinstance(d.get("token"), str) or len(d["token"]) < 16:
            return cls(token=secrets.token_hex(16))  # nothing recorded: nothing provable
        anchors = [a for a in d.get("anchors", []) if isinstance(a, dict) and isinstance(a.get("path"), str)
                   and os.path.isabs(a["path"]) and _identified(a)]
        entries = [e for e in d.get("entries", []) if isinstance(e, dict) and isinstance(e.get("path"), str)
                   and isinstance(e.get("anchor"), int) and 0 <= e["anchor"] < len(anchors) and _identified(e)]
        return cls(token=d["token"], anchors=anchors, entries=entries)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()

    def _intend(self, into: list[dict[str, Any]], rec: dict[str, Any]) -> dict[str, Any]:
        """Record (and save) that ``rec`` is about to be created: see *intent* in the module docstring."""
        rec["pending"] = time.time_ns() - CLOCK_SLACK_NS
        into.append(rec)
        self._changed()
        return rec

    def _made(self, rec: dict[str, Any], ident: dict[str, int]) -> None:
        """The intent ``rec`` was carried out: it now names its thing by identity."""
        rec.pop("pending", None)
        rec.update(ident)
        self._changed()

    def _abandon(self, into: list[dict[str, Any]], rec: dict[str, Any]) -> None:
        """The intent ``rec`` was not carried out (something was there already, or the create failed)."""
        into.remove(rec)
        self._changed()

    def __bool__(self) -> bool:
        """True while anything recorded may still exist."""
        return bool(self.anchors)

    # -- where --------------------------------------------------------------------------------------------
    def _locate(self, path: Path) -> tuple[int, str]:
        """(anchor index, path relative to it) for a path inside one of the anchors."""
        p = os.path.normpath(os.path.abspath(path))
        best = -1
        for i, a in enumerate(self.anchors):
            if (p == a["path"] or p.startswith(a["path"].rstrip("/") + "/")) and (
                    best < 0 or len(a["path"]) > len(self.anchors[best]["path"])):
                best = i
        if best < 0:
            raise NotOwned(f"{p}: outside every directory this testbed created (a bug in storeval: please report it)")
        return best, os.path.relpath(p, self.anchors[best]["path"]) if p != self.anchors[best]["path"] else ""

    def _entry(self, anchor: int, rel: str) -> dict[str, Any] | None:
        for e in self.entries:
            if e["anchor"] == anchor and e["path"] == rel:
                return e
        return None

    def owns(self, path: Path) -> bool:
        """Whether ``path`` is an anchor or a recorded entry that is still the very thing recorded."""
        try:
            st = os.lstat(path)
            i, rel = self._locate(path)
        except (OSError, NotOwned):
            return False
        rec = self.anchors[i] if rel == "" else self._entry(i, rel)
        return rec is not None and _same(rec, _ident(st, _born(AT_FDCWD, str(path))))

    # -- creating ---------------------------------------------------------------------------------------
    def anchor(self, path: Path, rule: str | None = None, *, intent_first: bool = True) -> Path:
        """Make ``path`` a top directory of this ledger: create it (its parent must exist), or take it if it
        exists and is empty (it then outlives the removal). Anything else there is refused with one line.
        ``intent_first=False`` where the ledger is saved inside ``path`` itself (nothing can be saved before)."""
        p = Path(os.path.normpath(os.path.abspath(path)))
        if any(a["path"] == str(p) for a in self.anchors) and self.owns(p):
            return p
        created = True
        intent = None
        if intent_first and not os.path.lexists(p):
            intent = self._intend(self.anchors, {"path": str(p), "created": True, **({"rule": rule} if rule else {})})
        try:
            os.mkdir(p, 0o755)
        except FileNotFoundError:
            if intent:
                self._abandon(self.anchors, intent)
            raise NotOwned(f"{p}: its parent directory {p.parent} does not exist (create it first)") from None
        except FileExistsError:
            if intent:
                self._abandon(self.anchors, intent)
            created = False
            if os.path.islink(p) or not p.is_dir():
                raise NotOwned(f"{p} exists and is not a directory storeval created (choose another path)") from None
            foreign = [n for n in os.listdir(p) if not (n == MARKER and is_marker(p / n))]
            if foreign:
                raise NotOwned(f"{p} exists and holds files storeval did not create ({', '.join(sorted(foreign)[:3])}"
                               f"{' …' if len(foreign) > 3 else ''}); choose a new or empty directory") from None
            (p / MARKER).unlink(missing_ok=True)  # an earlier testbed's marker, alone: that testbed is gone
        except OSError as e:
            if intent:
                self._abandon(self.anchors, intent)
            raise NotOwned(f"{p}: cannot create it ({e.strerror})") from None
        return self._record_anchor(p, intent or {"path": str(p), "created": created, **({"rule": rule} if rule else {})})

    def new_anchor(self, parent: Path, prefix: str) -> Path:
        """A new directory ``prefix<random>`` in ``parent`` (mode 0700 until the caller opens it), recorded as an
        intent before it is made exclusively: a start killed at any point leaves nothing unproven."""
        for _ in range(100):
            p = Path(os.path.normpath(os.path.abspath(parent))) / f"{prefix}{secrets.token_hex(4)}"
            intent = self._intend(self.anchors, {"path": str(p), "created": True})
            try:
                os.mkdir(p, 0o700)
            except FileExistsError:
                self._abandon(self.anchors, intent)
                continue
            except OSError as e:
                self._abandon(self.anchors, intent)
                raise NotOwned(f"{p}: cannot create it ({e.strerror})") from None
            return self._record_anchor(p, intent)
        raise NotOwned(f"{parent}: no unused name {prefix}… after 100 tries (remove old ones)")

    def _record_anchor(self, p: Path, rec: dict[str, Any]) -> Path:
        """Write the marker first, then record anchor and marker in one change: an interrupted start leaves a
        directory holding nothing but a marker, which counts as empty the next time (and, made after an intent,
        is removed by it)."""
        fd = os.open(p / MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(f"{MARKER_HEAD}{self.token}\n")
            marker = _id_fd(f.fileno())
        at = next((k for k, a in enumerate(self.anchors) if a is rec), None)
        if at is None:
            self.anchors.append(rec)
            at = len(self.anchors) - 1
        rec.pop("pending", None)
        rec.update(_id_path(p))
        self.entries.append({"anchor": at, "path": MARKER, "dir": False, **marker})
        self._changed()
        return p

    def check_anchor(self, i: int = 0) -> str | None:
        """None if anchor ``i`` is still the very directory recorded and holds this ledger's marker; else why not."""
        where = self.anchors[i]["path"]
        try:
            fd = os.open(where, _DIR_FLAGS)
        except OSError as e:
            return "it is a symbolic link" if e.errno == errno.ELOOP else e.strerror or str(e)
        try:
            if not _same(self.anchors[i], _id_fd(fd)):
                return f"{where} is not the directory it was made for (copied, moved or edited)"
            if not self._marker_ok(fd):
                return f"{where}/{MARKER} is missing or belongs to another testbed"
            return None
        finally:
            os.close(fd)

    def mkdir(self, path: Path, rule: str | None = None) -> Path:
        """Create ``path`` and the missing directories leading to it inside an anchor, recording each; an
        existing one must be a recorded entry (or an anchor). ``rule`` marks the last one as a server's."""
        i, rel = self._locate(path)
        base = Path(self.anchors[i]["path"])
        parts = Path(rel).parts if rel else ()
        for k in range(1, len(parts) + 1):
            sub = "/".join(parts[:k])
            full = base / sub
            rec = self._entry(i, sub)
            want_rule = rule if k == len(parts) else None
            if os.path.lexists(full):
                if rec is None or not self.owns(full) or not rec["dir"]:
                    raise NotOwned(f"{full} exists and storeval did not create it (move it away and try again)")
                if want_rule and rec.get("rule") != want_rule:
                    rec["rule"] = want_rule
                    self._changed()
                continue
            if rec is not None:
                self.entries.remove(rec)  # recorded once, gone since: this one is new
            intent = self._intend(self.entries, {"anchor": i, "path": sub, "dir": True,
                                                 **({"rule": want_rule} if want_rule else {})})
            try:
                os.mkdir(full, 0o755)
            except OSError as e:
                self._abandon(self.entries, intent)
                if e.errno == errno.EEXIST:
                    raise NotOwned(f"{full} exists and storeval did not create it (move it away and try again)") from None
                raise NotOwned(f"{full}: cannot create it ({e.strerror})") from None
            self._made(intent, _id_path(full))
        return Path(path)

    def open(self, path: Path, append: bool = False, mode: int = 0o644) -> int:
        """A descriptor for writing the file ``path``: created exclusively and recorded, or, if it is a recorded
        file still, reopened (truncated unless ``append``). Never through a symbolic link."""
        i, rel = self._locate(path)
        if not rel:
            raise NotOwned(f"{path}: is a directory")
        rec = self._entry(i, rel)
        flags = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | (os.O_APPEND if append else os.O_TRUNC)
        if os.path.lexists(path):
            if rec is None or rec["dir"] or not self.owns(path):
                raise NotOwned(f"{path} exists and storeval did not create it (move it away and try again)")
            return os.open(path, flags)
        if rec is not None:
            self.entries.remove(rec)  # recorded once, gone since: this one is new
        intent = self._intend(self.entries, {"anchor": i, "path": rel, "dir": False})
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, mode)
        except OSError as e:
            self._abandon(self.entries, intent)
            if e.errno == errno.EEXIST:
                raise NotOwned(f"{path} exists and storeval did not create it (move it away and try again)") from None
            raise NotOwned(f"{path}: cannot create it ({e.strerror})") from None
        self._made(intent, _id_fd(fd))
        return fd

    def write(self, path: Path, text: str, mode: int = 0o644) -> None:
        """Write a whole file of this ledger (see :meth:`open`)."""
        with os.fdopen(self.open(path, mode=mode), "w") as f:
            f.write(text)

    # -- removing -----------------------------------------------------------------------------------------
    def remove(self, claims: Claims | None = None, *, dry_run: bool = False) -> list[Left]:
        """Remove what this ledger proves is its own (and what ``claims`` says a server wrote in a ruled
        directory); return what was left and why. With ``dry_run`` nothing is removed: only what would stay.
        The walk is the shared remover's (``core.remove``): no link followed, no mount crossed, any depth."""
        claims = claims or (lambda rule, parts, st: False)
        left: list[Left] = []
        keep_anchors: list[int] = []
        kept_entries: set[int] = set()
        for i in reversed(range(len(self.anchors))):
            anchor = self.anchors[i]
            where = anchor["path"]
            try:
                fd = os.open(where, _DIR_FLAGS)
            except FileNotFoundError:
                continue  # already gone, with whatever was recorded in it
            except OSError as e:
                left.append(Left(where, "replaced by a link or file since storeval created it"
                                 if e.errno in (errno.ELOOP, errno.ENOTDIR) else e.strerror or str(e)))
                continue  # not ours any more: forget it, never follow it
            try:
                if not _proven(anchor, _id_fd(fd)):
                    left.append(Left(where, REPLACED))
                    continue
                pending = "pending" in anchor  # made, or about to be, when a start was killed
                if not self._marker_ok(fd) and not (pending and set(os.listdir(fd)) <= {MARKER}):
                    left.append(Left(where, "its storeval marker is missing or belongs to another testbed"))
                    continue
                recorded = {e["path"]: (k, e) for k, e in enumerate(self.entries) if e["anchor"] == i}
                judge = _judge(recorded, claims, (anchor["rule"], "") if anchor.get("rule") else None)
                stays = clear_fd(fd, where, judge=judge, dry_run=dry_run, mount=mount_of(fd)).left
                left += stays
                marker = recorded.get(MARKER)
                if stays:  # nothing but the marker is left only when nothing was named
                    keep_anchors.append(i)
                    kept_entries.update(_kept(recorded, stays, where))
                    if marker:
                        kept_entries.add(marker[0])
                    continue
                if dry_run:
                    continue
                if marker or pending:
                    try:
                        os.unlink(MARKER, dir_fd=fd)
                    except FileNotFoundError:
                        pass  # a start killed before it wrote (or recorded) the marker
                if anchor["created"]:
                    self._rmdir_anchor(anchor, left)
            finally:
                os.close(fd)
        if not dry_run:
            remap = {old: new for new, old in enumerate(sorted(keep_anchors))}
            self.entries = [{**e, "anchor": remap[e["anchor"]]} for k, e in enumerate(self.entries)
                            if k in kept_entries and e["anchor"] in remap]
            self.anchors = [self.anchors[k] for k in sorted(keep_anchors)]
            self._changed()
        return left

    def _marker_ok(self, dir_fd: int) -> bool:
        try:
            fd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as f:
            return f.read(4096).decode(errors="replace") == f"{MARKER_HEAD}{self.token}\n"

    @staticmethod
    def _rmdir_anchor(anchor: dict[str, Any], left: list[Left]) -> None:
        """Remove the (now empty) anchor directory by name inside its parent, if it is still the one recorded."""
        parent, name = os.path.split(anchor["path"])
        try:
            pfd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except OSError as e:
            left.append(Left(anchor["path"], e.strerror or str(e)))
            return
        try:
            if _proven(anchor, _ident(os.stat(name, dir_fd=pfd, follow_symlinks=False), _born(pfd, name))):
                os.rmdir(name, dir_fd=pfd)
        except OSError as e:
            if e.errno != errno.ENOENT:
                left.append(Left(anchor["path"], e.strerror or str(e)))
        finally:
            os.close(pfd)


def _judge(recorded: dict[str, tuple[int, dict]], claims: Claims, top: tuple[str, str] | None):
    """The shared remover's judge for one anchor: remove a recorded entry that is still the thing recorded, and
    what the rule of the nearest ruled directory above claims; leave (and name) anything else."""
    ctx_of: dict[str, tuple[str, str] | None] = {"": top}  # a directory being removed → the rule inside it

    def judge(rel: str, name: str, st: os.stat_result, dir_fd: int) -> str | object | None:
        if rel == MARKER:
            return SKIP  # the anchor's proof goes last
        is_dir = stat.S_ISDIR(st.st_mode)
        ctx = ctx_of.get(rel.rpartition("/")[0], top)
        rec = recorded.get(rel)
        replaced = rec is not None and (bool(rec[1]["dir"]) != is_dir
                                        or not _proven(rec[1], _ident(st, _born(dir_fd, name))))
        if rec is not None and not replaced:
            if is_dir:
                ctx_of[rel] = (rec[1]["rule"], rel) if rec[1].get("rule") else ctx
            return None
        if ctx is not None and claims(ctx[0], tuple(os.path.relpath(rel, ctx[1]).split("/")) if ctx[1]
                                      else tuple(rel.split("/")), st):
            if is_dir:
                ctx_of[rel] = ctx
            return None
        return REPLACED if replaced else FOREIGN

    return judge


def _kept(recorded: dict[str, tuple[int, dict]], stays: list[Left], where: str) -> set[int]:
    """The entries to keep recording after a removal that left ``stays``: a directory something was left in,
    and a thing that could not be removed (not one found replaced: that one is not ours any more)."""
    inside: set[str] = set()
    at: set[str] = set()
    for item in stays:
        rel = item.path[len(where) + 1:] if item.path.startswith(where + "/") else ""
        if item.why not in (REPLACED, FOREIGN):
            at.add(rel)
        while rel:
            rel = rel.rpartition("/")[0]
            inside.add(rel)
    return {k for path, (k, _) in recorded.items() if path in inside or path in at}


__all__ = ["Ledger", "Left", "NotOwned", "MARKER", "describe", "is_marker", "FOREIGN", "REPLACED"]
