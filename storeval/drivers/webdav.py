"""HTTP/WebDAV driver: the grid's ``davs://`` (and ``https://``, ``http://``, ``dav://``) endpoints — XRootD's
XrdHttp, dCache, EOS, StoRM, any WebDAV server.

``davs://host:port/path`` is ``https://host:port/path`` spoken as WebDAV, ``dav://`` the same over plain HTTP.
Reads are ranged GETs received straight into the caller's buffer, each clipped to the file's size (learnt by
the HEAD that opens it). Vector reads are one multi-range GET per batch of ranges (``multipart/byteranges``)
where the server answers them so, and one GET per range where it does not — found on the first vector read and
recorded in the environment (``vector_read``); every phase whose vector reads were split so carries the warning
``vector-split``. Writes stream one PUT per file in chunked transfer encoding, front to back, each ``pwrite``
one chunk, sent without waiting for the server's ``100 Continue`` (``Expect: 100-continue`` is sent all the
same: XrdHttp 5.5 answers a chunked PUT without it with ``400 Invalid chunked encoding`` or a closed
connection); ``close`` ends the PUT and returns once the server has answered it (it holds the whole file).
Whole files (``put``) go as one PUT with its length. Over plain HTTP, XrdHttp 5.5 breaks chunked uploads, so a
streamed write to it is refused in one line (``davs://`` works; whole-file PUTs work on both). Metadata is WebDAV's: PROPFIND (depth 0: stat, depth 1:
listing), MKCOL, DELETE. A DELETE of a collection removes everything under it, so ``rmdir`` lists the directory
first and refuses one that is not empty, and ``remove`` refuses a directory: storeval deletes only what it
created.

Authentication is a bearer token, read once from ``token_file``, from the environment variable ``token_env``,
or as the WLCG bearer-token discovery finds it (``BEARER_TOKEN``, ``BEARER_TOKEN_FILE``,
``$XDG_RUNTIME_DIR/bt_u<uid>``, ``/tmp/bt_u<uid>``); it is registered with ``redact`` the moment it is read, so
no output, result or report can show it, and only where it came from is recorded. TLS checks the server's
certificate against ``ca_file`` and ``ca_dir`` (else the system's CAs, and ``X509_CERT_DIR`` where the grid's
CA directory is set). Every socket operation waits at most the target's ``timeout``. A redirect (a redirector
sending clients to a data server, as XRootD's, dCache's and EOS's do) is followed; once a target has redirected,
a streamed write first creates its file with an empty PUT (which follows the redirect) and streams to where
that went.

Why ``http.client`` and not another library: obstore's HTTP store (reqwest/hyper) sends header names in lower
case, as HTTP allows, and XrdHttp 5.5 matches ``Range``, ``Depth`` and ``Content-Length`` case-sensitively:
a ranged GET came back as the whole file. davix and gfal2 (the grid's own clients) have no Python binding that
reads into a caller's buffer; they are measured beside this driver through the ``command`` workload. The
standard library's client keeps header names as written, receives into preallocated memory (``readinto``)
and costs the client least per byte (see ``sigv4.py``), so the tool is not the bottleneck it measures.
"""

from __future__ import annotations

import errno as errno_mod
import http.client
import os
import re
import ssl
import threading
import time
import xml.etree.ElementTree as ET
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from pydantic import Field

from ..errors import CapabilityError, InputError, StorevalError
from ..fields import Duration
from ..redact import register_secret
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, IOFunc, StatResult, TargetError, first_line

DAV = "{DAV:}"
PROPFIND_BODY = (b'<?xml version="1.0" encoding="utf-8"?><D:propfind xmlns:D="DAV:"><D:prop><D:resourcetype/>'
                 b'<D:getcontentlength/><D:getlastmodified/></D:prop></D:propfind>')
REDIRECTS = (301, 302, 303, 307, 308)
MAX_REDIRECTS = 5
RANGE_UNIT = 128 << 10  # XrdHttp answers a multi-range GET of at most 1024 pieces of 128 KiB (readv's limits)
MAX_UNITS = 1024
MAX_RANGES = 512  # ranges per request: keeps the Range header well under servers' header limits (8 KiB and up)
CHUNK_END = b"0\r\n\r\n"
CRLF = b"\r\n"
# servers whose chunked uploads break without TLS: XrdHttp 5.5.3 resets 2 of 3 fast 32 MiB chunked PUTs over plain
# HTTP whatever the chunk size (a chunk's size line read together with data, it seems); over TLS every one passed
PLAIN_CHUNKED_BROKEN = ("XrootD/v5.5",)
_CONTENT_RANGE = re.compile(rb"content-range:\s*bytes\s+(\d+)-(\d+)/", re.IGNORECASE)
SECURE = {"https": True, "davs": True, "http": False, "dav": False}
TPC_SILENCE = 30.0  # seconds a third-party copy's answer may stay silent (XrdHttpTPC writes a marker every 5 s)


class WebdavOptions(DriverOptions):
    timeout: Duration = Field(30.0, description="per socket operation (connect, send, each wait for an answer)")
    ca_file: str | None = Field(None, description="the CA certificates (PEM) the server's certificate is checked "
                                                  "against (default: the system's, and X509_CERT_DIR's)")
    ca_dir: str | None = Field(None, description="a directory of CA certificates named by hash (the grid's "
                                                 "/etc/grid-security/certificates); outside tools get it as "
                                                 "X509_CERT_DIR (default: the X509_CERT_DIR variable's)")
    token_file: str | None = Field(None, description="a file holding the bearer token (default: WLCG discovery: "
                                                     "BEARER_TOKEN, BEARER_TOKEN_FILE, $XDG_RUNTIME_DIR/bt_u<uid>)")
    token_env: str | None = Field(None, description="the environment variable holding the bearer token")
    multi_range: bool = Field(True, description="vector reads as multi-range GETs where the server answers them "
                                                "(false: one GET per range)")


def bearer_token(o: WebdavOptions) -> tuple[str | None, str]:
    """The token and where it came from (never the token itself in the second), registered as a secret."""
    if o.token_env is not None:
        token, source = os.environ.get(o.token_env), f"environment variable {o.token_env}"
    elif o.token_file is not None:
        token, source = _read_token(o.token_file), f"token_file {o.token_file}"
    elif os.environ.get("BEARER_TOKEN"):
        token, source = os.environ["BEARER_TOKEN"], "environment variable BEARER_TOKEN"
    else:
        token, source = None, "none"
        uid = os.geteuid()
        candidates = [("BEARER_TOKEN_FILE", os.environ.get("BEARER_TOKEN_FILE"))]
        if os.environ.get("XDG_RUNTIME_DIR"):
            candidates.append(("XDG_RUNTIME_DIR", os.path.join(os.environ["XDG_RUNTIME_DIR"], f"bt_u{uid}")))
        candidates.append(("/tmp", f"/tmp/bt_u{uid}"))
        for _why, path in candidates:
            if path and os.path.isfile(path):
                token, source = _read_token(path), f"file {path} (WLCG bearer-token discovery)"
                break
    token = (token or "").strip() or None
    register_secret(token)
    return token, source


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the bearer token from {path}: {e.strerror or e} (give a readable file)") \
            from None


class DavHandle(Handle):
    __slots__ = ("target", "conn", "pos", "size")

    def __init__(self, path: str, mode: str, target: str, size: int = -1) -> None:
        super().__init__(path, mode)
        self.target = target  # the encoded URL path (after a redirect: the full URL it went to)
        self.conn: http.client.HTTPConnection | None = None  # a streaming PUT's own connection
        self.pos = 0
        self.size = size


class HttpStatus(OSError):
    """A request answered with an error status (``status``) and the first line of the server's reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"HTTP {status} {reason}".strip())
        self.status, self.reason = status, reason


class WebdavDriver(Driver):
    scheme = "davs"
    Options = WebdavOptions
    default_port = 443
    caps = Capabilities(random_write=False, direct_io=False, vector_read=True, directories=True, append_only=True,
                        fsync=False, shared_write=False, close_commits=True)
    url_parts = frozenset({"host", "port", "path"})
    url_hints = {"user": "a bearer token is given by token_file, token_env or BEARER_TOKEN, never in the URL",
                 "password": "a bearer token is given by token_file, token_env or BEARER_TOKEN, never in the URL",
                 "query": "give settings as keys of the target (timeout, ca_file, token_file …), not in the URL"}
    options: WebdavOptions

    def __init__(self, url: str, options: WebdavOptions | None = None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        p = self.parsed_url
        self.secure = SECURE[p.scheme]
        self.netloc = p.host + (f":{p.port}" if p.port else "")
        self.root = "/" + p.path.strip("/")
        self.timeout = float(self.options.timeout)
        self._local = threading.local()
        self._context: ssl.SSLContext | None = None
        self._headers: dict[str, str] = {}
        self._source = "none"
        self.redirected = False  # the target sent a request elsewhere: streamed writes find their home first
        self.multi_range: bool | None = None if self.options.multi_range else False  # None: not known yet
        self.split_reads = 0  # vector reads sent as one GET per range since the last take_warnings
        self.server_name = ""  # what a plain-HTTP server says it is (Server:), where that decides what works

    @classmethod
    def check_url(cls, url: str, options: WebdavOptions) -> None:
        parsed = cls.parse(url)
        if not parsed.host:
            raise InputError(f"{parsed.shown} names no server (write {parsed.scheme}://HOST:PORT/path)")
        ca_file = options.ca_file
        if ca_file is not None and not (os.path.isfile(ca_file) and os.access(ca_file, os.R_OK)):
            raise InputError(f"ca_file {options.ca_file} is not a readable file (give the CA certificates in PEM)")
        if options.ca_dir is not None and not os.path.isdir(options.ca_dir):
            raise InputError(f"ca_dir {options.ca_dir} is not a directory (give the CA certificates' directory, "
                             "e.g. /etc/grid-security/certificates)")
        if options.token_env is not None and options.token_file is not None:
            raise InputError("give token_file or token_env, not both")
        if options.token_env is not None and not os.environ.get(options.token_env):
            raise InputError(f"environment variable {options.token_env} is not set (export the bearer token in it, "
                             "or give token_file)")
        if options.token_file is not None and not os.path.isfile(options.token_file):
            raise InputError(f"token_file {options.token_file} is not a file (give the file holding the bearer token)")
        bearer_token(options)  # known from now on, so nothing this process stores or prints can show it

    @classmethod
    def carrier(cls, url: str, options: Any = None) -> Any:
        from .carrier import Carrier

        return Carrier(host=cls.parse(url).host.strip("[]") or None)

    # -- connections ------------------------------------------------------------------------------------
    def _ssl(self) -> ssl.SSLContext:
        if self._context is None:
            self._context = ssl.create_default_context(
                cafile=self.options.ca_file, capath=self.options.ca_dir or os.environ.get("X509_CERT_DIR") or None)
        return self._context

    def _new_conn(self, netloc: str | None = None, secure: bool | None = None) -> http.client.HTTPConnection:
        netloc = netloc or self.netloc
        if self.secure if secure is None else secure:
            return http.client.HTTPSConnection(netloc, timeout=self.timeout, context=self._ssl())
        return http.client.HTTPConnection(netloc, timeout=self.timeout)

    def _take(self) -> http.client.HTTPConnection:
        """An idle keep-alive connection of this thread to the target's server, or a new one."""
        idle = getattr(self._local, "idle", None)
        if idle:
            return idle.pop()
        return self._new_conn()

    def _give(self, conn: http.client.HTTPConnection) -> None:
        idle = getattr(self._local, "idle", None)
        if idle is None:
            idle = self._local.idle = []
        idle.append(conn)

    def _url_path(self, path: str) -> str:
        return self.root.rstrip("/") + "/" + quote(path, safe="/~") if path else self.root

    def _request(self, method: str, target: str, headers: dict[str, str] | None = None, body: Any = None,
                 op: str = "", path: str = "", into: Any = None) -> tuple[http.client.HTTPResponse, bytes, int]:
        """Send one request (following redirects) and read its answer: the response, its body (when ``into``
        is None) and the bytes received into ``into`` (a buffer; more than it holds is received, counted, not
        kept). A kept-alive connection the server closed is opened anew once. Error statuses raise."""
        sent = {**self._headers, **(headers or {})}
        if body is not None:
            sent["Content-Length"] = str(memoryview(body).nbytes)
        for _hop in range(MAX_REDIRECTS + 1):
            netloc, secure, url = self._where(target)
            for attempt in (0, 1):
                conn = self._take() if netloc is None else self._new_conn(netloc, secure)
                try:
                    conn.request(method, url, body=body, headers=sent)
                    resp = conn.getresponse()
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                    conn.close()
                    if attempt:
                        raise self._error(e, op, path) from None
                    continue
                except (OSError, http.client.HTTPException) as e:
                    conn.close()
                    raise self._error(e, op, path) from None
                break
            try:
                if resp.status in REDIRECTS:
                    resp.read()
                    location = resp.getheader("Location")
                    self._done(conn, resp, netloc)
                    if not location:
                        raise self.failure(f"HTTP {resp.status} without a Location", op, path)
                    self.redirected = True
                    target = location
                    continue
                if into is not None and resp.status < 300:
                    n = _receive(resp, into)
                    self._done(conn, resp, netloc)
                    return resp, b"", n
                data = resp.read()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise self._error(e, op, path) from None
            self._done(conn, resp, netloc)
            if resp.status >= 300:
                raise self._status(resp.status, data, op, path)
            return resp, data, len(data)
        raise self.failure(f"more than {MAX_REDIRECTS} redirects", op, path)

    def _where(self, target: str) -> tuple[str | None, bool | None, str]:
        """(netloc, secure, request target) of an encoded path (our server) or a full URL (a redirect's)."""
        if target.startswith("/"):
            return None, None, target
        u = urlsplit(target)
        return u.netloc, u.scheme in ("https", "davs"), (u.path or "/") + (f"?{u.query}" if u.query else "")

    def _done(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, netloc: str | None) -> None:
        """Keep the connection for the next request, unless the server closes it, it is a redirect's other server,
        or the answer was an error: XrdHttp 5.5 keeps a DELETE's 404 alive and then drops the connection's next
        request (measured: the PUT after it failed with a TLS EOF, every time)."""
        if netloc is None and not resp.will_close and resp.status < 400:
            self._give(conn)
        else:
            conn.close()

    # -- errors -----------------------------------------------------------------------------------------
    def _status(self, status: int, body: bytes, op: str, path: str) -> OSError | TargetError:
        text = body.decode("utf-8", "replace")
        reason = first_line(Exception(text)) if text.strip() else http.client.responses.get(status, "")
        if status == 404:
            return FileNotFoundError(errno_mod.ENOENT, f"{op} {path}: {reason}")
        if status in (401, 403):
            return TargetError(self.scrub(f"{self.label}: {op} of {path or '/'} refused (HTTP {status} {reason}); "
                                          f"the bearer token came from {self._source}"), "HTTP" + str(status))
        if status == 405 and op == "mkdir":
            return FileExistsError(errno_mod.EEXIST, f"mkdir {path}: {reason}")
        if op == "rmdir" and ("not empty" in reason.lower() or status == 409):
            return OSError(errno_mod.ENOTEMPTY, f"rmdir {path}: {reason}")
        if status == 416:
            return HttpStatus(status, reason)
        return self.failure(f"HTTP {status} {reason}", op, path, raw_kind=f"HTTP{status}")

    def _error(self, exc: BaseException, op: str, path: str) -> TargetError:
        if isinstance(exc, ssl.SSLCertVerificationError):
            return TargetError(self.scrub(f"{self.label}: {op} failed: the server's certificate is not trusted "
                                          f"({exc.verify_message}); give its CA as ca_file"),
                               "SSLCertVerificationError")
        return self.failure(exc, op, path)

    # -- lifecycle --------------------------------------------------------------------------------------
    def connect(self) -> None:
        token, self._source = bearer_token(self.options)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            st = self._stat_native(self.root, self.root)
        except FileNotFoundError:
            raise StorevalError(f"directory {self.root} does not exist on {self.netloc} (create it first)") from None
        if not st.is_dir:
            raise StorevalError(f"{self.root} on {self.netloc} is not a directory")
        if not self.secure:
            resp, _, _ = self._request("HEAD", self.root + "/", op="stat", path=self.root)
            self.server_name = resp.getheader("Server") or ""

    def shutdown(self) -> None:
        for conn in getattr(self._local, "idle", None) or []:
            conn.close()
        self._local = threading.local()

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"url": self.url, "driver": self.scheme, "tls": self.secure,
                               "token": self._source, "redirects": self.redirected,
                               "vector_read": {None: "multi-range GET where the server answers it (not tried yet)",
                                               True: "multi-range GET", False: "one GET per range"}[self.multi_range]}
        if self.down is None:
            try:
                resp, _, _ = self._request("HEAD", self.root + "/", op="describe")
                out["server"] = resp.getheader("Server") or "unknown"
            except (OSError, StorevalError):
                out["server"] = "unknown (no answer)"
        return out

    def tool_address(self, path: str) -> str:
        """``davs://host:port/path`` (``https://`` … as the target was written): what gfal-copy and davix take."""
        return f"{self.parsed_url.scheme}://{self.netloc}{self._url_path(path)}"

    def tool_env(self) -> dict[str, str]:
        """``BEARER_TOKEN`` (gfal2 reads it; the token was registered as a secret when read) and, with ``ca_dir``,
        ``X509_CERT_DIR`` (where gfal2 and davix look for CAs; davix-get also takes ``--capath {ca_dir}``)."""
        token, _ = bearer_token(self.options)
        env = {"BEARER_TOKEN": token} if token else {}
        if self.options.ca_dir:
            env["X509_CERT_DIR"] = self.options.ca_dir
        return env

    # -- data -------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> DavHandle:
        self.check_server()
        if mode == "rw":
            raise CapabilityError(f"target {self.url} cannot open a file for reading and writing over HTTP")
        target = self._url_path(path)
        if mode == "r":
            resp, _, _ = self._request("HEAD", target, op="open", path=path)
            size = resp.getheader("Content-Length")
            return DavHandle(path, mode, target, int(size) if size and size.isdigit() else self.stat(path).size)
        h = DavHandle(path, mode, target)
        if self.redirected:  # a redirector: create the file where it sends it, then stream there
            h.target = self._put_whole(target, b"", path)
        return h

    def pread(self, h: Handle, buf, offset: int) -> int:
        # the range is clipped to the file: XrdHttp 5.5 answers one that crosses the end (or starts there) with a
        # Content-Length it never sends, and the connection, then the server's next answer, are lost
        n = min(len(buf), h.size - offset) if h.size >= 0 else len(buf)
        if n <= 0:
            return 0
        try:
            resp, _, got = self._request("GET", h.target, {"Range": f"bytes={offset}-{offset + n - 1}"}, op="read",
                                         path=h.path, into=buf)
        except HttpStatus as e:
            if e.status == 416:  # the range starts at or past the end
                return 0
            raise
        if resp.status == 200 and offset:
            raise self.failure("the server ignored the Range header and sent the whole file", "read", h.path)
        return min(got, n)

    def preadv(self, h: Handle, ranges) -> list:
        """Multi-range GETs (batches the server takes whole), or one GET per range where it answers otherwise."""
        wanted = [(o, n) for o, n in ranges if n > 0]
        if len(wanted) < 2:
            return super().preadv(h, ranges)
        if self.multi_range is False:
            self.split_reads += 1
            return super().preadv(h, ranges)
        size = h.size if h.size >= 0 else self.stat(h.path).size
        got: dict[tuple[int, int], bytes] = {}
        batch: list[tuple[int, int]] = []
        units = 0
        for o, n in sorted(set(wanted)):
            n = min(n, size - o)
            if n <= 0:
                continue
            u = -(-n // RANGE_UNIT)
            if batch and (units + u > MAX_UNITS or len(batch) >= MAX_RANGES):
                if not self._multi(h, batch, got):
                    self.split_reads += 1
                    return super().preadv(h, ranges)
                batch, units = [], 0
            batch.append((o, n))
            units += u
        if batch and not self._multi(h, batch, got):
            self.split_reads += 1
            return super().preadv(h, ranges)
        out = []
        for o, n in ranges:
            m = max(0, min(n, size - o))
            out.append(got.get((o, m), b"") if m > 0 else b"")
        return out

    def _multi(self, h: DavHandle, batch: list[tuple[int, int]], got: dict) -> bool:
        """One multi-range GET of ``batch``; False (and remembered) where the server does not answer with parts."""
        if len(batch) == 1:
            o, n = batch[0]
            buf = bytearray(n)
            got[(o, n)] = bytes(buf[:self.pread(h, buf, o)])
            return True
        spec = ",".join(f"{o}-{o + n - 1}" for o, n in batch)
        resp, body, _ = self._request("GET", h.target, {"Range": f"bytes={spec}"}, op="vector read", path=h.path)
        kind = resp.getheader("Content-Type") or ""
        if resp.status != 206 or "multipart/byteranges" not in kind or "boundary=" not in kind:
            self._fall_back()
            return False
        parts = _byteranges(body)
        for o, n in batch:
            for start, data in parts:
                if start <= o and o + n <= start + len(data):
                    got[(o, n)] = data[o - start:o - start + n]
                    break
            else:
                raise self.failure(f"the multi-range answer lacks bytes {o}-{o + n - 1}", "vector read", h.path)
        self.multi_range = True
        return True

    def _fall_back(self) -> None:
        self.multi_range = False

    def take_warnings(self) -> list[tuple[str, str]]:
        """``vector-split`` for a phase whose vector reads went as one GET per range."""
        split, self.split_reads = self.split_reads, 0
        if not split:
            return []
        why = ("multi_range is off" if not self.options.multi_range
               else "the server does not answer multi-range GETs")
        return [("vector-split", f"{split} vector read(s) went as one GET per range ({why})")]

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        if offset != h.pos:
            raise CapabilityError(f"target {self.url} writes files front to back (write at {offset}, expected {h.pos})")
        n = memoryview(buf).nbytes
        if n == 0:
            return 0
        try:
            if h.conn is None:
                self._start_put(h, buf, n)
            else:
                _send_chunk(h.conn.sock, buf, n)
        except (OSError, http.client.HTTPException) as e:
            self._drop(h)
            raise self._error(e, "write", h.path) from None
        h.pos += n
        return n

    def _start_put(self, h: DavHandle, buf, n: int) -> None:
        """The PUT's headers and its first chunk, on a kept-alive connection of this thread's or a new one; a kept
        connection the server had closed is found here and the start is made again on a new one (nothing of the
        file has been sent yet)."""
        if not self.secure and self.server_name.startswith(PLAIN_CHUNKED_BROKEN):
            raise CapabilityError(f"{self.label}: streamed writes over plain HTTP to {self.server_name} are refused: "
                                  "XrdHttp 5.5 breaks chunked uploads that are not over TLS (measured: most 32 MiB "
                                  "uploads reset); write through davs://")
        netloc, secure, url = self._where(h.target)
        idle = getattr(self._local, "idle", None)
        kept = netloc is None and bool(idle)
        while True:
            h.conn = self._new_conn(netloc, secure) if netloc else self._take()
            try:
                h.conn.putrequest("PUT", url, skip_accept_encoding=True)
                for name, value in self._headers.items():
                    h.conn.putheader(name, value)
                h.conn.putheader("Transfer-Encoding", "chunked")
                h.conn.putheader("Expect", "100-continue")  # XrdHttp 5.5 misreads a chunked body without it
                h.conn.endheaders()
                _send_chunk(h.conn.sock, buf, n)
                return
            except (OSError, http.client.HTTPException):
                self._drop(h)
                if not kept:
                    raise
                kept = False

    def _drop(self, h: DavHandle) -> None:
        if h.conn is not None:
            h.conn.close()
            h.conn = None

    def close(self, h: Handle) -> None:
        if h.mode == "r":
            return
        self.check_server()
        if h.conn is None:
            if h.pos == 0 and not self.redirected:  # nothing written: an empty file (a redirector made it already)
                self._put_whole(h.target, b"", h.path)
            return
        conn, h.conn = h.conn, None
        try:
            conn.sock.sendall(CHUNK_END)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._error(e, "write", h.path) from None
        if resp.will_close or urlsplit(h.target).netloc:
            conn.close()
        else:
            self._give(conn)
        if resp.status in REDIRECTS:
            raise self.failure(f"the server redirected the upload to {resp.getheader('Location')} after it was sent",
                               "write", h.path)
        if resp.status >= 300:
            raise self._status(resp.status, data, "write", h.path)

    def resume_write(self, h: Handle) -> int | None:
        """A PUT that broke is gone with its connection: the file starts again from its beginning."""
        self._drop(h)
        h.pos = 0
        return 0

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        pread = self.pread
        return lambda bufs, offset: pread(h, bufs[0], offset)

    def writer(self, h: Handle) -> IOFunc:
        pwrite = self.pwrite
        return lambda bufs, offset: pwrite(h, bufs[0], offset)

    # -- whole files ------------------------------------------------------------------------------------
    def _put_whole(self, target: str, data: Any, path: str) -> str:
        """PUT ``data`` as the whole file; returns where it went (the URL after any redirect)."""
        resp, _, _ = self._request("PUT", target, body=data, op="creation", path=path)
        return target if not self.redirected else (resp.getheader("Content-Location") or self._final(target, path))

    def _final(self, target: str, path: str) -> str:
        """Where a redirector sends ``target`` now that the file exists (a HEAD not followed)."""
        netloc, secure, url = self._where(target)
        conn = self._new_conn(netloc, secure) if netloc else self._take()
        try:
            conn.request("HEAD", url, headers=self._headers)
            resp = conn.getresponse()
            resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._error(e, "creation", path) from None
        conn.close()
        return resp.getheader("Location") or target if resp.status in REDIRECTS else target

    def put(self, path: str, data: Any) -> None:
        self.check_server()
        self._put_whole(self._url_path(path), data, path)

    def get_into(self, path: str, buf) -> int:
        self.check_server()
        _, _, n = self._request("GET", self._url_path(path), op="read", path=path, into=buf)
        return n

    # -- third-party copy (HTTP-TPC) -------------------------------------------------------------------
    tpc_modes = ("pull", "push")
    tpc_family = "http"

    def tpc_url(self, path: str) -> str:
        """``https://host:port/path`` (``http://`` for a plain target): what the other server's libcurl takes."""
        return f"{'https' if self.secure else 'http'}://{self.netloc}{self._url_path(path)}"

    def tpc_headers(self) -> dict[str, str]:
        token, _ = bearer_token(self.options)
        return {"Authorization": f"Bearer {token}"} if token else {}

    def third_party_copy(self, path: str, other: str, mode: str, timeout: float,
                         other_headers: dict[str, str] | None = None) -> None:
        """HTTP-TPC as FTS and gfal2 drive it: ``COPY`` sent to this target's ``path`` with ``Source: other``
        (pull: this server fetches) or ``Destination: other`` (push: this server sends), the other end's
        credentials as ``TransferHeader…`` headers the server forwards. The server answers at once (202) and
        then streams perf markers; the copy has ended when it writes ``success: …`` or ``failure: …`` and closes
        the answer. Markers come every few seconds, so the connection waits for one at most ``TPC_SILENCE``
        seconds (or the target's timeout, if longer), and the whole copy at most ``timeout``."""
        self.check_server()
        headers = {**self._headers, ("Source" if mode == "pull" else "Destination"): other,
                   **{f"TransferHeader{k}": v for k, v in (other_headers or {}).items()}}
        deadline = time.monotonic() + timeout
        last = ""
        target = self._url_path(path)
        conn = None
        try:
            for _hop in range(MAX_REDIRECTS + 1):  # a redirector sends the COPY to the data server holding the file
                netloc, secure, url = self._where(target)
                conn = self._new_conn(netloc, secure)
                conn.timeout = max(self.timeout, TPC_SILENCE)
                conn.request("COPY", url, headers=headers)
                resp = conn.getresponse()
                if resp.status not in REDIRECTS or not resp.getheader("Location"):
                    break
                resp.read()
                conn.close()
                target = resp.getheader("Location")
            if resp.status >= 300:
                raise self._status(resp.status, resp.read(), "third-party copy", path)
            while True:
                line = resp.readline(4096)
                if not line:
                    break
                text = line.decode("utf-8", "replace").strip()
                if text.startswith(("success:", "failure:")):
                    last = text
                if time.monotonic() > deadline:
                    raise self.failure(f"the copy did not end within {timeout:g} s", "third-party copy", path)
        except (OSError, http.client.HTTPException) as e:
            if isinstance(e, (StorevalError, FileNotFoundError)):
                raise
            raise self._error(e, "third-party copy", path) from None
        finally:
            if conn is not None:
                conn.close()
        if not last.startswith("success:"):
            why = last.split(":", 1)[1].strip() if last else "the server closed the answer without saying how it ended"
            raise OSError(errno_mod.EIO, self.scrub(f"third-party copy {path}: {why}"))

    def checksum(self, path: str, algorithm: str = "adler32") -> str:
        """``Want-Digest`` on a HEAD (RFC 3230): the server computes it where the file is."""
        self.check_server()
        resp, _, _ = self._request("HEAD", self._url_path(path), {"Want-Digest": algorithm}, op="checksum", path=path)
        for part in (resp.getheader("Digest") or "").split(","):
            name, _, value = part.strip().partition("=")
            if name.lower() == algorithm and value:
                return value.strip().lower()
        raise OSError(errno_mod.EIO, f"checksum {path}: the server gave no {algorithm} digest (Digest: "
                                     f"{resp.getheader('Digest') or 'none'})")

    # -- metadata ---------------------------------------------------------------------------------------
    def _propfind(self, target: str, depth: str, op: str, path: str) -> list[tuple[str, StatResult]]:
        _, body, _ = self._request("PROPFIND", target, {"Depth": depth, "Content-Type": "application/xml"},
                                   PROPFIND_BODY, op=op, path=path)
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            raise self.failure("the PROPFIND answer is not XML", op, path) from None
        out = []
        for r in root.iter(f"{DAV}response"):
            href = unquote(r.findtext(f"{DAV}href") or "")
            size, is_dir, mtime = 0, False, 0.0
            for prop in r.iter(f"{DAV}prop"):
                if prop.find(f"{DAV}resourcetype/{DAV}collection") is not None:
                    is_dir = True
                text = prop.findtext(f"{DAV}getcontentlength")
                if text and text.strip().isdigit():
                    size = int(text)
                text = prop.findtext(f"{DAV}getlastmodified")
                if text:
                    try:
                        mtime = parsedate_to_datetime(text).timestamp()
                    except (TypeError, ValueError):
                        pass
            out.append((href, StatResult(size=0 if is_dir else size, is_dir=is_dir, mtime=mtime)))
        return out

    def native(self, path: str) -> str:
        return self._url_path(path)

    def stat(self, path: str) -> StatResult:
        self.check_server()
        return self._stat_native(self._url_path(path), path)

    def _stat_native(self, target: str, path: str) -> StatResult:
        found = self._propfind(target, "0", "stat", path)
        if not found:
            raise FileNotFoundError(errno_mod.ENOENT, f"stat {path}: no answer for it")
        return found[0][1]

    def mkdir(self, path: str) -> None:
        self.check_server()
        self._request("MKCOL", self._url_path(path), op="mkdir", path=path)

    def rmdir(self, path: str) -> None:
        self.check_server()
        target = self._url_path(path)
        if self.listdir(path):  # DELETE of a collection removes everything under it: rmdir must not
            raise OSError(errno_mod.ENOTEMPTY, f"rmdir {path}: directory not empty")
        self._request("DELETE", target, op="rmdir", path=path)

    def remove(self, path: str) -> None:
        """DELETE of one file; a directory is refused first (a WebDAV DELETE of a collection takes its whole tree)."""
        self.check_server()
        if self.stat(path).is_dir:
            raise IsADirectoryError(errno_mod.EISDIR, f"removal {path}: is a directory")
        self._request("DELETE", self._url_path(path), op="removal", path=path)

    def _list_native(self, target: str, path: str) -> list[str]:
        own = unquote(urlsplit(target).path).rstrip("/")
        names = []
        for href, _ in self._propfind(target.rstrip("/") + "/", "1", "listing", path):
            href = unquote(urlsplit(href).path).rstrip("/")
            if href != own and href:
                names.append(href.rsplit("/", 1)[-1])
        return names

    def listdir(self, path: str) -> list[str]:
        self.check_server()
        return self._list_native(self._url_path(path), path)

    def fast_ops(self) -> FastOps:
        """WebDAV's calls on encoded URL paths (:meth:`native`). rmdir is a depth-1 PROPFIND and a DELETE, as
        :meth:`rmdir`: a metadata phase's dir-remove rate counts both requests. remove is the DELETE alone (the
        phase removes the files it created)."""
        request = self._request

        def mkdir(p: str) -> None:
            request("MKCOL", p, op="mkdir", path=p)

        def rmdir(p: str) -> None:  # a listing, then DELETE: a collection's DELETE would take what is inside
            if self._list_native(p, p):
                raise OSError(errno_mod.ENOTEMPTY, f"rmdir {p}: directory not empty")
            request("DELETE", p, op="rmdir", path=p)

        def create(p: str, data) -> None:
            request("PUT", p, body=data, op="creation", path=p)

        def read(p: str, buf) -> int:
            return request("GET", p, op="read", path=p, into=buf)[2]

        def remove(p: str) -> None:
            request("DELETE", p, op="removal", path=p)

        return FastOps(mkdir=mkdir, rmdir=rmdir, stat=lambda p: self._stat_native(p, p),
                       listdir=lambda p: self._list_native(p, p), create=create, read=read, remove=remove)


def _send_chunk(sock: Any, buf: Any, n: int) -> None:
    """One chunk of a chunked body: its size line, the bytes as they are (no copy), its end."""
    if isinstance(sock, ssl.SSLSocket):  # no sendmsg on TLS sockets: three writes
        sock.sendall(b"%X\r\n" % n)
        sock.sendall(buf)
        sock.sendall(b"\r\n")
        return
    views = [memoryview(b"%X\r\n" % n), memoryview(buf).cast("B"), memoryview(CRLF)]
    while views:  # a socket with a timeout may take part of it: send the rest, still without a copy
        sent = sock.sendmsg(views)
        while views and sent >= len(views[0]):
            sent -= len(views[0])
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def _receive(resp: http.client.HTTPResponse, into: Any) -> int:
    """Receive a response's whole body into ``into``; bytes beyond its end are received and counted, not kept."""
    view = memoryview(into).cast("B")
    total = 0
    while True:
        n = resp.readinto(view[total:]) if total < len(view) else len(resp.read(1 << 20))
        if not n:
            return total
        total += n


def _byteranges(body: bytes) -> list[tuple[int, bytes]]:
    """(first byte, data) of each part of a ``multipart/byteranges`` body, sliced by its Content-Range (so data
    that happens to hold the boundary cannot cut a part short)."""
    parts = []
    pos = 0
    while True:
        m = _CONTENT_RANGE.search(body, pos)
        if m is None:
            return parts
        start, end = int(m.group(1)), int(m.group(2))
        head_end = body.find(b"\r\n\r\n", m.end())
        if head_end < 0:
            return parts
        data_start = head_end + 4
        parts.append((start, body[data_start:data_start + end - start + 1]))
        pos = data_start + end - start + 1


class DavDriver(WebdavDriver):
    """``dav://``: WebDAV over plain HTTP."""

    scheme = "dav"
    default_port = 80


class HttpsDriver(WebdavDriver):
    """``https://``: the same as ``davs://``."""

    scheme = "https"


class HttpDriver(WebdavDriver):
    """``http://``: the same as ``dav://``."""

    scheme = "http"
    default_port = 80


__all__ = ["WebdavDriver", "DavDriver", "HttpsDriver", "HttpDriver", "WebdavOptions", "bearer_token"]
