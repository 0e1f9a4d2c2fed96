"""Signed S3 requests over ``http.client``: the lean GET of hot read loops, the requests of streaming writes
(``s3upload.py``: each part's upload timed on its own), and the multipart-upload calls obstore does not offer
(listing and aborting incomplete uploads).

The GET: one keep-alive connection per thread, bytes received into the caller's buffer.

Why not obstore here: on the same MinIO, obstore's GETs cost 0.40–0.46 client CPU seconds per GiB and
reached 1,440–1,550 MiB/s from one client, while ``http.client`` receiving straight into a preallocated
buffer cost 0.19 s/GiB and reached 1,740–1,860 MiB/s (warp, MinIO's own benchmark: 1,560–1,630). A
benchmark's client must not be the bottleneck it measures, so GETs of whole objects and byte ranges go
through this path; obstore does everything else (multipart uploads, HEAD, LIST, DELETE, vector reads) but
for ListMultipartUploads and AbortMultipartUpload, which it has no call for: the uploads a dead client or a
failed server left behind are found and aborted here.

Requests are AWS Signature Version 4 (header form, empty payload) for path-style or virtual-hosted URLs.
Every socket operation waits at most the target's ``timeout``.
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import http.client
import ssl
import threading
import xml.etree.ElementTree as ET
from urllib.parse import quote, urlsplit

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"  # a part's body is not hashed: 16 MiB of SHA-256 would cost the client ~30 ms a part


class S3HttpError(OSError):
    """A request answered with an error status: ``status`` and S3's error ``code``."""

    def __init__(self, status: int, code: str, path: str) -> None:
        super().__init__(f"HTTP {status} {code}".strip())
        self.status, self.code, self.path = status, code, path


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def signing_key(secret_key: str, day: str, region: str) -> bytes:
    """SigV4's derived key for one day, region and the s3 service."""
    return _hmac(_hmac(_hmac(_hmac(f"AWS4{secret_key}".encode(), day), region), "s3"), "aws4_request")


def canonical_query(params: dict[str, str]) -> str:
    """SigV4's canonical query string (also the query to send): names sorted, names and values encoded."""
    return "&".join(f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted(params.items()))


def authorization(method: str, uri: str, headers: dict[str, str], payload_hash: str, access_key: str,
                  region: str, key: bytes, amz_date: str, query: str = "") -> str:
    """The ``Authorization`` header of a request whose ``headers`` (lower-case names, ``x-amz-date`` among
    them) are all signed; ``uri`` is already URI-encoded, ``query`` is :func:`canonical_query`'s."""
    names = sorted(headers)
    canonical = "\n".join([method, uri, query, *(f"{n}:{headers[n]}" for n in names), "", ";".join(names),
                           payload_hash])
    scope = f"{amz_date[:8]}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return f"AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={';'.join(names)}, Signature={signature}"


class SignedS3:
    """Signed requests to one bucket; one connection per thread, reused across requests (keep-alive)."""

    def __init__(self, endpoint: str, bucket: str, prefix: str, region: str, access_key: str | None,
                 secret_key: str | None, session_token: str | None = None, virtual_hosted: bool = False,
                 timeout: float = 30.0) -> None:
        parts = urlsplit(endpoint)
        self.https = parts.scheme == "https"
        self.netloc = f"{bucket}.{parts.netloc}" if virtual_hosted else parts.netloc
        base = parts.path.rstrip("/")
        self.base = base if virtual_hosted else f"{base}/{quote(bucket, safe='')}"
        self.prefix = prefix.strip("/")
        self.region, self.access_key, self.secret_key, self.token = region, access_key, secret_key, session_token
        self.timeout = timeout
        self._local = threading.local()
        self._keys: dict[str, bytes] = {}

    def _conn(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            if self.https:
                conn = http.client.HTTPSConnection(self.netloc, timeout=self.timeout, context=ssl.create_default_context())
            else:
                conn = http.client.HTTPConnection(self.netloc, timeout=self.timeout)
            self._local.conn = conn
        return conn

    def _signing_key(self, day: str) -> bytes:
        key = self._keys.get(day)
        if key is None:
            key = signing_key(self.secret_key, day, self.region)
            self._keys = {day: key}
        return key

    def _headers(self, uri: str, byte_range: str | None, method: str = "GET", query: str = "",
                 payload: str = EMPTY_SHA256) -> dict[str, str]:
        now = datetime.datetime.now(datetime.timezone.utc)
        amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
        headers = {"host": self.netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date}
        if byte_range:
            headers["range"] = byte_range
        if self.token:
            headers["x-amz-security-token"] = self.token
        if not (self.access_key and self.secret_key):
            return headers
        headers["authorization"] = authorization(method, uri, headers, payload, self.access_key, self.region,
                                                 self._signing_key(day), amz_date, query)
        return headers

    def _drop(self) -> None:
        """Forget this thread's connection (after an error its state is unknown: the next request opens anew)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    def _send(self, method: str, uri: str, query: str = "", byte_range: str | None = None,
              body=None) -> http.client.HTTPResponse:
        """Send one request and return its response (body unread); a kept-alive connection the server closed is
        reopened once (every request sent here may be repeated: GETs, part uploads, aborts)."""
        try:
            return self._once(method, uri, query, byte_range, body)
        except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
            return self._once(method, uri, query, byte_range, body)

    def _once(self, method: str, uri: str, query: str, byte_range: str | None, body=None) -> http.client.HTTPResponse:
        conn = self._conn()
        try:
            headers = self._headers(uri, byte_range, method, query, EMPTY_SHA256 if body is None else UNSIGNED)
            if body is not None:  # a bytes-like body goes out as it is (no copy); its length is the header's
                headers["content-length"] = str(memoryview(body).nbytes)
            conn.request(method, f"{uri}?{query}" if query else uri, body=body, headers=headers)
            return conn.getresponse()
        except BaseException:  # the connection's state is unknown: the next request opens a new one
            self._drop()
            raise

    def request(self, method: str, path: str | None, params: dict[str, str], body=None) -> bytes:
        """A request (``path`` None: the bucket itself); returns the body, raises S3HttpError on an error
        status and OSError/http.client errors when the server cannot be talked to."""
        return self.exchange(method, path, params, body)[0]

    def exchange(self, method: str, path: str | None, params: dict[str, str], body=None) -> tuple[bytes, str]:
        """:meth:`request`, returning the response's ETag header beside its body (a part upload's name for the
        part). A 200 whose body is an S3 ``<Error>`` (CompleteMultipartUpload may answer so) is an error too."""
        uri = (self.base or "/") if path is None else f"{self.base}/{quote(self._key(path), safe='/~')}"
        resp = self._send(method, uri, canonical_query(params), body=body)
        try:
            data = resp.read()
        except BaseException:
            self._drop()
            raise
        if resp.status >= 300 or data.lstrip()[:200].find(b"<Error>") >= 0:
            text = data.decode(errors="replace")
            code = text.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in text else ""
            raise S3HttpError(resp.status, code, path or "")
        return data, resp.getheader("ETag") or ""

    def list_uploads(self, prefix: str) -> list[tuple[str, str, str]]:
        """(path, upload id, initiated) of the incomplete multipart uploads under ``prefix`` (paths and prefix
        relative to the driver's own prefix), through every page of ListMultipartUploads."""
        full = self._key(prefix)
        params = {"uploads": "", "prefix": full}
        strip = len(self.prefix) + 1 if self.prefix else 0
        out: list[tuple[str, str, str]] = []
        while True:
            root = ET.fromstring(self.request("GET", None, params))
            ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
            for up in root.iter(f"{ns}Upload"):
                key = up.findtext(f"{ns}Key") or ""
                if key.startswith(full):  # a server that ignores the prefix must not widen what is aborted
                    out.append((key[strip:], up.findtext(f"{ns}UploadId") or "", up.findtext(f"{ns}Initiated") or ""))
            if (root.findtext(f"{ns}IsTruncated") or "").lower() != "true":
                return out
            params = {"uploads": "", "prefix": full, "key-marker": root.findtext(f"{ns}NextKeyMarker") or "",
                      "upload-id-marker": root.findtext(f"{ns}NextUploadIdMarker") or ""}

    def abort_upload(self, path: str, upload_id: str) -> None:
        """AbortMultipartUpload: the server drops the parts; an upload already gone is fine."""
        try:
            self.request("DELETE", path, {"uploadId": upload_id})
        except S3HttpError as e:
            if e.code != "NoSuchUpload" and e.status != 404:
                raise

    def get_into(self, path: str, buf, offset: int = 0, length: int | None = None) -> int:
        """GET ``path`` (or ``length`` bytes at ``offset``) into ``buf``; returns the bytes received.

        With ``length`` None the whole object is read; more bytes than ``buf`` holds are received and counted
        but not kept (the caller only needs them to arrive)."""
        uri = f"{self.base}/{quote(self._key(path), safe='/~')}"
        byte_range = f"bytes={offset}-{offset + length - 1}" if length is not None else None
        resp = self._send("GET", uri, "", byte_range)
        try:
            if resp.status not in (200, 206):
                body = resp.read().decode(errors="replace")
                code = body.split("<Code>", 1)[1].split("</Code>", 1)[0] if "<Code>" in body else ""
                raise S3HttpError(resp.status, code, path)
            view = memoryview(buf)
            total = 0
            while True:
                if total < len(view):
                    n = resp.readinto(view[total:])
                else:
                    n = len(resp.read(1 << 20))
                if not n:
                    break
                total += n
            return total
        except S3HttpError:
            raise
        except BaseException:  # a response cut short leaves the connection unusable
            self._drop()
            raise

    def close(self) -> None:
        self._drop()
