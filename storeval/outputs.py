"""Files storeval writes outside its results store, and the proof that one is storeval's own.

Every such file (``--json`` and ``--html`` of run, report and compare; results held while the store could
not be written) carries an ownership header: one line of JSON at a fixed place for its format that names
the header version, what the file is, the run(s), a random token and the SHA-256 of everything after the
header line. An existing file is replaced only when that header parses *and* the digest still matches the
rest of the file: storeval wrote it and nobody changed it since. A user's file has no such header whatever
words it contains, and a storeval file someone edited no longer matches its digest; both are refused with
one line. The proof travels with the file, so it holds where no results store is at hand (``compare``,
a file copied elsewhere); the results store's ``outputs`` table is the record of what was written where.

A file's kind is part of the proof: a JSON document (of ``run``, ``report`` or ``compare``) replaces only a JSON
document, an HTML report only an HTML report, a figure index (``report --figures``) only a figure index, held
results only held results; anything else is refused in one line naming the file and what it holds.

Writes are atomic (a temporary file beside the target, renamed over it), a new file is linked into place
only if nothing appeared there meanwhile, and a write that fails (a full disk) leaves nothing behind.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import re
import secrets
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from .errors import InputError, StorevalError

VERSION = "storeval-output/1"
KINDS = ("run", "compare", "held", "figures", "listing")  # run/compare: documents and reports; held: unstored
# results; figures: the index of report --figures; listing: what workloads and testbed status/faults/network list
NAMES = {"json": "JSON document", "html": "HTML report"}
KIND_NAMES = {"held": "held results", "figures": "figure index (of report --figures)",
              "listing": "JSON listing (of workloads or testbed status, faults, network)"}
DOCUMENTS = ("run", "compare")  # one family: report --json may replace compare's JSON document and back
# an index of report --figures written before the index had a kind of its own (its header said "run")
_OLD_INDEX = re.compile(rb'\n\s*"storeval_version": "[^"\n]*",\s*"kind": "figures",')
_HEAD_MAX = 4096  # the header line is short; a longer first line is not storeval's
_KEYS = {"format", "kind", "runs", "token", "written", "sha256"}
_JSON_LINE = re.compile(rb'\{"storeval_output": (\{[^\n]*\}),')
_HTML_LINE = re.compile(rb"<!-- storeval-output (\{[^\n]*\}) -->")
_DOCTYPE = b"<!DOCTYPE html>"


@dataclass(frozen=True)
class Mark:
    """A parsed ownership header."""

    fmt: str  # json | html: where the header sits in the file
    kind: str
    runs: list[str]
    token: str
    written: str
    sha256: str


def kind_name(fmt: str, kind: str) -> str:
    """What an output is, in words: ``JSON document``, ``HTML report``, ``figure index (of report --figures)``."""
    return KIND_NAMES.get(kind) or NAMES.get(fmt, fmt)


def family(kind: str) -> tuple[str, ...]:
    """The kinds an output of ``kind`` may replace: its own only (run and compare documents are one family)."""
    return DOCUMENTS if kind in DOCUMENTS else (kind,)


class OutputError(StorevalError):
    """An output file could not be written (full disk, I/O error); nothing was left behind."""


def _header(fields: dict[str, Any]) -> str:
    # compact, one line; '--' and '<' escaped so the header is also a valid HTML comment
    return json.dumps(fields, separators=(", ", ": ")).replace("--", "-\\u002d").replace("<", "\\u003c")


def render(fmt: str, kind: str, runs: list[str], text: str) -> tuple[bytes, Mark]:
    """``text`` (a JSON object as text, or an HTML page starting with ``<!DOCTYPE html>``) with the ownership
    header spliced in: the JSON header is the object's first member, the HTML one a comment after the doctype."""
    if fmt == "json":
        if not text.startswith("{") or text[1:].lstrip().startswith("}"):
            raise ValueError("a storeval JSON output is a non-empty object")
        before, body = "{", text[1:] if text[1:].startswith("\n") else "\n" + text[1:]
    elif fmt == "html":
        if not text.startswith(_DOCTYPE.decode() + "\n"):
            raise ValueError("a storeval HTML output starts with <!DOCTYPE html>")
        before, body = _DOCTYPE.decode() + "\n", text[len(_DOCTYPE):]
    else:
        raise ValueError(fmt)
    data = body.encode("utf-8")
    mark = Mark(fmt=fmt, kind=kind, runs=list(runs), token=secrets.token_hex(16),
                written=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                sha256=hashlib.sha256(data).hexdigest())
    fields = {"format": VERSION, "kind": kind, "runs": mark.runs, "token": mark.token, "written": mark.written,
              "sha256": mark.sha256}
    line = f'"storeval_output": {_header(fields)},' if fmt == "json" else f"<!-- storeval-output {_header(fields)} -->"
    return (before + line).encode("utf-8") + data, mark


def _parse(fields: Any, fmt: str) -> Mark | None:
    if not isinstance(fields, dict) or set(fields) != _KEYS or fields["format"] != VERSION \
            or fields["kind"] not in KINDS or not isinstance(fields["runs"], list) \
            or not all(isinstance(r, str) for r in fields["runs"]) or not isinstance(fields["written"], str) \
            or not isinstance(fields["token"], str) or not re.fullmatch(r"[0-9a-f]{32}", fields["token"]) \
            or not isinstance(fields["sha256"], str) or not re.fullmatch(r"[0-9a-f]{64}", fields["sha256"]):
        return None
    return Mark(fmt=fmt, kind=fields["kind"], runs=fields["runs"], token=fields["token"],
                written=fields["written"], sha256=fields["sha256"])


def read_mark(path: str) -> tuple[Mark | None, str]:
    """The file's ownership header if it is intact, else None and why: ``foreign`` (no header: not storeval's)
    or ``changed`` (storeval's header, but the rest of the file is no longer what it wrote). Raises OSError."""
    with open(path, "rb") as f:
        head = f.read(_HEAD_MAX + len(_DOCTYPE) + 1)
        if head.startswith(_DOCTYPE + b"\n"):
            fmt, start, pattern = "html", len(_DOCTYPE) + 1, _HTML_LINE
        else:
            fmt, start, pattern = "json", 0, _JSON_LINE
        end = head.find(b"\n", start)
        found = pattern.fullmatch(head, start, end) if end >= 0 else None
        if found is None:
            return None, "foreign"
        try:
            mark = _parse(json.loads(found.group(1)), fmt)
        except ValueError:
            mark = None
        if mark is None:
            return None, "foreign"
        f.seek(end)
        digest = hashlib.sha256()
        first = True
        for chunk in iter(lambda: f.read(1 << 20), b""):
            if first and mark.kind == "run" and fmt == "json" and _OLD_INDEX.match(chunk):
                mark = dataclasses.replace(mark, kind="figures")
            first = False
            digest.update(chunk)
    return (mark, "") if digest.hexdigest() == mark.sha256 else (None, "changed")


def check_replaceable(path: str, option: str, fmt: str, kinds: tuple[str, ...] | None = None,
                      kind: str = "run") -> None:
    """Raise InputError unless ``path`` is absent or an unchanged storeval file of format ``fmt`` and one of
    ``kinds`` (default: the family of ``kind``, the output about to be written): a JSON document never replaces
    a figure index or held results, nor an HTML report a JSON document."""
    kinds = family(kind) if kinds is None else kinds
    if os.path.islink(path):
        raise InputError(f"{option} {path}: is a symbolic link (give the path of a new file; storeval replaces only "
                         "its own output)")
    if os.path.isdir(path):
        raise InputError(f"{option} {path}: is a directory (give a file name)")
    if not os.path.lexists(path):
        return
    if not os.path.isfile(path):
        raise InputError(f"{option} {path}: a file that storeval did not write is there (choose a new file name; "
                         "storeval replaces only its own output)")
    try:
        mark, why = read_mark(path)
    except OSError as e:
        raise InputError(f"{option} {path}: cannot read the file that is there ({e.strerror}); choose a new file "
                         "name") from e
    if why == "changed":
        raise InputError(f"{option} {path}: storeval wrote this file but it was changed since (choose a new file "
                         "name; storeval replaces only its own unchanged output)")
    if mark is None:
        raise InputError(f"{option} {path}: a file that storeval did not write is there (choose a new file name; "
                         "storeval replaces only its own output)")
    if mark.kind not in kinds or mark.fmt != fmt:
        raise InputError(f"{option} {path}: holds storeval's {kind_name(mark.fmt, mark.kind)}, not its "
                         f"{kind_name(fmt, kind)} (choose a new file name)")


def check_output(path: str, option: str, fmt: str, creating: str | None = None, kind: str = "run") -> None:
    """Before anything runs: the output's directory exists and is writable, and what is there may be replaced.
    ``creating`` names a directory the command itself will create (the results directory)."""
    directory = os.path.dirname(os.path.abspath(path))
    if creating is not None and directory == os.path.abspath(creating) and not os.path.exists(directory):
        return
    if not os.path.isdir(directory):
        if os.path.isdir(path):
            raise InputError(f"{option} {path}: is a directory (give a file name)")
        raise InputError(f"{option} {path}: directory {directory} does not exist (create it or choose another path)")
    check_replaceable(path, option, fmt, kind=kind)
    if not os.access(directory, os.W_OK):
        raise InputError(f"{option} {path}: directory {directory} is not writable (choose another path)")


def failure(e: OSError, what: str) -> str:
    """One line for a write that failed: a full disk is named as such."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        why = "the file system is full" if e.errno == errno.ENOSPC else "the disk quota is exhausted"
        return f"{what}: {why} ({e.strerror}); free space there or choose another path"
    if e.errno == errno.EROFS:
        return f"{what}: the file system is read-only (choose another path)"
    return f"{what}: {e.strerror or e} (choose another path)"


def place_new(tmp: str, path: str) -> None:
    """Move ``tmp`` to ``path`` only if nothing is at ``path`` (a hard link cannot replace a file); raises
    FileExistsError if something appeared there."""
    try:
        os.link(tmp, path)
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.EXDEV):
            raise
        if os.path.lexists(path):  # no hard links here: the narrowest check-then-rename there is
            raise FileExistsError(errno.EEXIST, "File exists", path) from None
        os.rename(tmp, path)
        return
    os.unlink(tmp)


def write_atomic(path: str, data: bytes, suffix: str = ".tmp", replace: Any = None) -> None:
    """Write ``data`` to ``path`` through a temporary file beside it: a reader never sees half a file, and a
    failure leaves nothing behind and the old file (if any) as it was. An existing file is replaced only after
    ``replace(path)`` returned without raising (None: replace without asking)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".storeval-", suffix=suffix, dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(f.fileno(), 0o666 & ~umask)
            f.write(data)
        if replace is None:
            os.replace(tmp, path)
            return
        for _ in range(3):
            if not os.path.lexists(path):
                try:
                    place_new(tmp, path)
                    return
                except FileExistsError:
                    continue  # something appeared meanwhile: it is checked like any existing file
            replace(path)
            os.replace(tmp, path)
            return
        raise FileExistsError(errno.EEXIST, "File exists", path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def write_owned(path: str, option: str, fmt: str, kind: str, runs: list[str], text: str,
                replaces: tuple[str, ...] | None = None) -> tuple[Mark, int]:
    """Write a file with its ownership header, replacing only storeval's own unchanged file of one of the kinds
    ``replaces`` (default: the family of ``kind``, see :func:`family`); returns the header and the size. A failure to write is one line (OutputError) and leaves
    nothing behind."""
    data, mark = render(fmt, kind, runs, text)
    try:
        write_atomic(path, data, f".{fmt}", replace=lambda p: check_replaceable(p, option, fmt, replaces, kind))
    except OSError as e:
        raise OutputError(failure(e, f"cannot write {option} {path}")) from None
    return mark, len(data)


def read_owned(path: str, kind: str) -> tuple[Mark | None, str]:
    """The header and the text of an intact storeval file of ``kind`` (None, '' when it is not one)."""
    try:
        mark, _ = read_mark(path)
        if mark is None or mark.kind != kind:
            return None, ""
        with open(path, encoding="utf-8") as f:
            return mark, f.read()
    except (OSError, UnicodeDecodeError):
        return None, ""


def remove_own(path: str, kind: str) -> bool:
    """Remove ``path`` only if it is an intact storeval file of ``kind``; True if it was removed."""
    try:
        mark, _ = read_mark(path)
        if mark is not None and mark.kind == kind:
            os.unlink(path)
            return True
    except OSError:
        pass
    return False
