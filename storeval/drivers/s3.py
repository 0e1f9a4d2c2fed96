"""S3 driver (obstore): AWS S3, MinIO, Ceph RGW and every other S3-compatible store.

``s3://bucket/prefix`` with ``endpoint``, ``region`` and credentials from, in this order: the environment
variables named by ``access_key_env``/``secret_key_env``, an AWS shared-credentials file
(``credentials_file`` + ``profile``), or the standard ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``.
Only those names and paths are ever recorded; the secrets stay in memory and are scrubbed from messages.

Writes stream (``s3upload.py``): ``open(path, "w")`` starts an object that becomes a multipart upload once
``part_size`` bytes are buffered, up to ``upload_concurrency`` parts are uploaded while the writer goes on, and
``close`` completes it; each part's request is timed on its own (``take_requests``), so a write phase's latency
is that of its uploads. An upload that never completes (a client killed, a server gone) keeps
its parts on the server, unlisted: removing a storeval directory aborts those under it (``rmdir_quietly``),
and ``abort_stale_uploads`` does it for a dead run's prefix. Reads are ranged GETs; the vector read is
``get_ranges`` (parallel ranged GETs, ranges closer than ``vector_coalesce`` merged into one request). There
are no directories, no random writes, no fsync — the capability flags say so and workloads adapt.

Every request waits at most ``timeout`` (obstore's request timeout, retried only within it; the signed HTTP
path's socket timeout). A server that could not be talked to is named in one line (``Driver.failure``), and the
operations after it fail at once instead of waiting again.
"""

from __future__ import annotations

import configparser
import http.client
import os
import re
from datetime import timedelta
from typing import Annotated, Any

import obstore
from obstore.exceptions import (BaseError, NotFoundError, PermissionDeniedError, UnauthenticatedError)
from obstore.store import S3Store
from pydantic import Field, field_validator

from ..errors import CapabilityError, InputError, StorevalError
from ..fields import Duration, Size
from ..redact import redact_text, register_secret, visible
from .base import (Capabilities, Driver, DriverOptions, FastOps, Handle, IOFunc, StatResult, TargetError,
                   TargetUnreachable, Upload, first_line, network_failure)
from .s3upload import ObjectUpload, PartUploader, RequestTimes
from .sigv4 import S3HttpError, SignedS3
from .url import ParsedUrl, parse_url

ERRORS = (BaseError, OSError, http.client.HTTPException)  # what obstore (its writer: OSError) and http.client raise

CREDENTIALS_HINT = ("give the keys through access_key_env/secret_key_env, which name environment variables, or "
                    "credentials_file")


def parse_endpoint(endpoint: str) -> ParsedUrl:
    """An S3 endpoint: http(s)://HOST[:PORT][/path], nothing else (no credentials, query or fragment)."""
    return parse_url(endpoint, {"host", "port", "path"}, {"password": CREDENTIALS_HINT, "user": CREDENTIALS_HINT},
                     ("http", "https"), "an S3 endpoint")


class S3Options(DriverOptions):
    endpoint: str | None = Field(None, description="the S3 server, http(s)://HOST[:PORT] (none: AWS S3 in region)")
    region: str = Field("us-east-1", description="the region requests are signed for")
    access_key_env: str | None = Field(None, description="the environment variable that holds the access key (with "
                                                          "secret_key_env)")
    secret_key_env: str | None = Field(None, description="the environment variable that holds the secret key")
    credentials_file: str | None = Field(None, description="an AWS shared-credentials file to read the keys from "
                                                           "(section: profile)")
    profile: str = Field("default", description="the section of credentials_file")
    part_size: Size = Field(16 << 20, description="multipart part size of streaming writes and large puts")
    upload_concurrency: Annotated[int, Field(ge=1, le=64)] = Field(8, description="parts in flight per client, "
                                                                                  "1-64")
    vector_coalesce: Size = Field(1 << 20, description="vector reads merge ranges closer than this into one GET")
    timeout: Duration = Field(30.0, description="per request, and the bound on retries")
    virtual_hosted: bool = Field(False, description="virtual-hosted-style requests (bucket.HOST) instead of "
                                                    "path-style (HOST/bucket)")
    fast_get: bool = Field(True, description="GETs through storeval's lean signed HTTP path (sigv4.py); false: "
                                             "through obstore")
    # read with a bearer token signed by this target's keys (probes/server.py)
    metrics_urls: list[str] = Field([], description="MinIO's Prometheus metrics, one URL per node "
                                                    "(http://HOST:PORT/minio/metrics/v3/api/requests): what the "
                                                    "server says it moved")

    @field_validator("metrics_urls")
    @classmethod
    def _metrics_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            cls._endpoint(url)
        return value

    @field_validator("endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                if not parse_endpoint(value).host:
                    raise ValueError("names no server (write http://HOST:PORT)")
            except InputError as e:  # the value is shown before the reason: do not repeat it
                raise ValueError(str(e).removeprefix(f"{visible(redact_text(value))}: ")) from None
        return value


class S3Handle(Handle):
    __slots__ = ("writer", "pos")

    def __init__(self, path: str, mode: str, writer: ObjectUpload | None = None) -> None:
        super().__init__(path, mode)
        self.writer = writer
        self.pos = 0


def _bucket_prefix(url: str) -> tuple[str, str]:
    parsed = S3Driver.parse(url)
    return parsed.host, parsed.path.strip("/")


def credentials(o: S3Options) -> tuple[str | None, str | None, str]:
    """(access key, secret key, where they came from) — the source is safe to show, the keys are not (they are
    registered, so every message and record of this process masks them). The one place S3 keys are read: the
    driver, and whatever else needs a target's keys (the server's metrics, probes/reported.py), call this."""
    if o.access_key_env or o.secret_key_env:
        key, secret = os.environ.get(o.access_key_env or ""), os.environ.get(o.secret_key_env or "")
        source = f"environment variables {o.access_key_env}/{o.secret_key_env}"
    elif o.credentials_file:
        cp = configparser.ConfigParser()
        cp.read(o.credentials_file)
        section = cp[o.profile] if cp.has_section(o.profile) else {}
        key, secret = section.get("aws_access_key_id"), section.get("aws_secret_access_key")
        source = f"{o.credentials_file} [{o.profile}]"
    else:
        key, secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        source = "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY"
    register_secret(key)
    register_secret(secret)
    return key, secret, source


class S3Driver(Driver):
    scheme = "s3"
    counter_sources = ("storeval.drivers.s3metrics:MinioMetrics",)  # MinIO's metrics v3, where metrics_urls says
    Options = S3Options
    caps = Capabilities(random_write=False, direct_io=False, vector_read=True, directories=False,
                        append_only=True, fsync=False, shared_write=False, close_commits=True)
    url_parts = frozenset({"host", "path"})  # s3://BUCKET/prefix
    url_hints = {"port": "an s3:// URL names a bucket; the server is the endpoint option, e.g. endpoint: "
                         "http://HOST:9000",
                 "user": CREDENTIALS_HINT, "password": CREDENTIALS_HINT,
                 "query": "give settings as keys of the target (endpoint, region, …), not in the URL"}
    options: S3Options

    def __init__(self, url: str, options: S3Options | None = None, *, client: int = -1) -> None:
        super().__init__(url, options, client=client)
        self.bucket, self.prefix = _bucket_prefix(url)
        self.store: S3Store | None = None
        self.http: SignedS3 | None = None  # signed requests obstore has no call for (incomplete uploads)
        self.getter: SignedS3 | None = None  # the same, for GETs when fast_get is on
        self.uploads: PartUploader | None = None  # streaming writes, their parts timed one by one
        self.requests = RequestTimes("upload request (UploadPart, or the PUT of an object smaller than a part)")

    @classmethod
    def check_url(cls, url: str, options: S3Options) -> None:
        bucket, _ = _bucket_prefix(url)
        if not bucket:
            raise InputError(f"{cls.parse(url).shown} names no bucket (write s3://BUCKET/prefix)")
        for name in (options.access_key_env, options.secret_key_env):
            if name is not None and name not in os.environ:
                raise InputError(f"environment variable {name} is not set (export it, or use credentials_file)")
        if (options.access_key_env is None) != (options.secret_key_env is None):
            raise InputError("give both access_key_env and secret_key_env, or neither")
        if options.credentials_file is not None:
            path = options.credentials_file
            if not os.path.isfile(path) or not os.access(path, os.R_OK):
                raise InputError(f"credentials_file {path} is not a readable file")
            cp = configparser.ConfigParser()
            try:
                cp.read(path)
            except configparser.Error:
                raise InputError(f"credentials_file {path} is not an AWS credentials file ([profile] with "
                                 "aws_access_key_id and aws_secret_access_key)") from None
            if not cp.has_section(options.profile) or "aws_access_key_id" not in cp[options.profile]:
                raise InputError(f"credentials_file {path} has no profile [{options.profile}] with aws_access_key_id")
        if options.part_size < 5 << 20:
            raise InputError("part_size must be at least 5MiB (the S3 minimum for multipart parts)")
        credentials(options)  # known from now on, so nothing this process stores or prints can show them

    # -- sessions ---------------------------------------------------------------------------------
    def address(self) -> str:
        return parse_endpoint(self.options.endpoint).netloc if self.options.endpoint else f"AWS S3 ({self.options.region})"

    def _error(self, exc: BaseException, op: str, path: str | None = None) -> OSError | TargetError:
        """The one place obstore's and the signed path's errors become one line, never holding a credential:
        a missing object (FileNotFoundError, which callers rely on), refused credentials, a missing bucket, a
        server that cannot be talked to (``Driver.failure``), or else the library's first line — never its
        pages of debug detail or its request URLs with upload ids."""
        if isinstance(exc, (FileNotFoundError, NotFoundError)):  # obstore raises both, by call
            return FileNotFoundError(2, "no such object", path or "")
        first = first_line(exc)
        where = self.options.endpoint or "AWS"
        what = f"{op} of {path}" if path else op
        raw = type(exc).__name__
        kind = network_failure(exc)
        if kind == "down":  # obstore's short form ("… in 3.0s - HTTP error: error sending request") says how long
            took = re.search(r" in ([0-9.]+)(ms|s)\b", first)
            if took and float(took.group(1)) / (1000 if took.group(2) == "ms" else 1) >= 0.95 * self.options.timeout:
                kind = "timeout"
        if kind is not None:
            return self.failure(exc, op, path, raw_kind=raw, kind=kind)
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or "403" in first or "AccessDenied" in first \
                or (isinstance(exc, S3HttpError) and exc.status == 403) \
                or "InvalidAccessKeyId" in first or "SignatureDoesNotMatch" in first:
            return TargetError(f"{self.label}: S3 at {where} refused the credentials from {self._source} ({what})", raw)
        if "NoSuchBucket" in str(exc):
            return TargetError(f"{self.label}: bucket {self.bucket} does not exist at {where} (create it first)", raw)
        # "Error performing DELETE http://…?uploadId=… in 3.0s - Server returned …": the request, not its URL
        first = re.sub(r"\s+in [0-9.]+\S*s\b", "", re.sub(r"\s*https?://\S+", "", first))
        return self.failure(first, op, path, raw_kind=raw)

    def connect(self) -> None:
        o = self.options
        key, secret, self._source = credentials(o)
        kwargs: dict[str, Any] = {"region": o.region, "virtual_hosted_style_request": o.virtual_hosted}
        if o.endpoint:
            kwargs["endpoint"] = o.endpoint
        if key and secret:
            kwargs["access_key_id"], kwargs["secret_access_key"] = key, secret
        else:
            kwargs["skip_signature"] = True
        # A request waits at most the timeout, and is retried only while its first attempt began less than the
        # timeout ago: a silent server fails an operation after one timeout, a refused connection at once.
        timeout = timedelta(seconds=o.timeout)
        self.store = S3Store(self.bucket, prefix=self.prefix or None,
                             client_options={"allow_http": bool(o.endpoint and o.endpoint.startswith("http:")),
                                             "timeout": timeout, "connect_timeout": min(timeout, timedelta(seconds=10))},
                             retry_config={"max_retries": 2, "retry_timeout": timeout}, **kwargs)
        try:
            obstore.list_with_delimiter(self.store, None)
        except ERRORS as e:
            raise self._error(e, "listing", "the bucket") from None
        token = os.environ.get("AWS_SESSION_TOKEN") if self._source.startswith("AWS_ACCESS_KEY_ID") else None
        self.http = SignedS3(o.endpoint or f"https://s3.{o.region}.amazonaws.com", self.bucket, self.prefix,
                             o.region, key, secret, token, o.virtual_hosted, o.timeout)
        self.getter = self.http if o.fast_get else None
        self.uploads = PartUploader(self.http, o.part_size, o.upload_concurrency, self.requests)

    def shutdown(self) -> None:
        if self.uploads is not None:
            self.uploads.close()
        if self.http is not None:
            self.http.close()
        self.store = self.getter = self.http = self.uploads = None

    def take_requests(self) -> RequestTimes | None:
        return self.requests.take()

    def _get(self, path: str, buf, offset: int = 0, length: int | None = None) -> int:
        """A GET through the lean path, with its errors turned into storeval's."""
        try:
            return self.getter.get_into(path, buf, offset, length)
        except S3HttpError as e:
            if e.code == "NoSuchKey" or (e.status == 404 and e.code != "NoSuchBucket"):
                raise FileNotFoundError(2, "no such object", path) from None
            if e.status == 416:  # the range starts past the end of the object
                return 0
            raise self._error(e, "read", path) from None
        except (OSError, http.client.HTTPException) as e:
            raise self._error(e, "read", path) from None

    def tool_address(self, path: str) -> str:
        """``s3://bucket/key``: what aws-cli, s5cmd, rclone and mc take."""
        key = "/".join(p for p in (self.prefix, path.strip("/")) if p)
        return f"s3://{self.bucket}/{key}"

    def tool_env(self) -> dict[str, str]:
        """The standard AWS variables from this target's credentials, endpoint and region (aws-cli ≥ 1.29 reads
        AWS_ENDPOINT_URL). The keys were registered with ``redact`` when they were read (``credentials``)."""
        o = self.options
        key, secret, source = credentials(o)
        env = {"AWS_DEFAULT_REGION": o.region, "AWS_REGION": o.region}
        if o.endpoint:
            env["AWS_ENDPOINT_URL"] = o.endpoint
        if key and secret:
            env["AWS_ACCESS_KEY_ID"], env["AWS_SECRET_ACCESS_KEY"] = key, secret
            token = os.environ.get("AWS_SESSION_TOKEN") if source.startswith("AWS_ACCESS_KEY_ID") else None
            if token:
                register_secret(token)
                env["AWS_SESSION_TOKEN"] = token
        return env

    def describe(self) -> dict[str, Any]:
        out = {"url": self.url, "driver": self.scheme, "endpoint": self.options.endpoint or "AWS",
               "region": self.options.region, "bucket": self.bucket, "prefix": self.prefix}
        if self.options.endpoint:  # the server names itself in its response headers (MinIO, Ceph RGW …)
            ep = parse_endpoint(self.options.endpoint)
            cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
            conn = cls(ep.netloc, timeout=min(5.0, self.options.timeout))
            try:
                conn.request("HEAD", "/")
                out["server"] = conn.getresponse().getheader("Server") or "unknown"
            except (OSError, http.client.HTTPException):
                out["server"] = "unknown (no answer)"
            finally:
                conn.close()
        return out

    def layout(self) -> dict[str, Any]:
        """The multipart part size: an object is stored as parts of this size (erasure-coded and served per
        part by MinIO and others), so ranged reads of it cross part boundaries where it says."""
        return {"part_size": self.options.part_size}

    # -- data -------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> S3Handle:
        if mode == "r":
            return S3Handle(path, mode)
        if mode == "rw":
            raise CapabilityError(f"target {self.url} cannot open an object for reading and writing")
        self.check_server()
        return S3Handle(path, mode, ObjectUpload(path))

    def pread(self, h: Handle, buf, offset: int) -> int:
        if self.getter is not None:
            return self._get(h.path, buf, offset, len(buf))
        try:
            data = obstore.get_range(self.store, h.path, start=offset, length=len(buf))
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(2, "no such object", h.path) from None
        except ERRORS as e:
            raise self._error(e, "read", h.path) from None
        n = len(data)
        memoryview(buf)[:n] = data
        return n

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        if offset != h.pos:
            raise CapabilityError(f"target {self.url} writes objects front to back (write at {offset}, expected {h.pos})")
        try:  # copied into a part buffer (the caller reuses and re-stamps its own); full parts are uploaded
            n = self.uploads.write(h.writer, buf)
        except (*ERRORS, SyntaxError) as e:  # a part that could not be uploaded surfaces here or at close
            raise self._error(e, "write", h.path) from None
        h.pos += n
        return n

    def resume_write(self, h: Handle) -> int | None:
        """A streaming upload whose part failed cannot go on: it is aborted (as far as the server answers; else
        with the cell's directory) and the object is uploaded again from its first byte."""
        if h.writer is not None:
            self.uploads.abandon(h.writer)
        h.writer, h.pos = ObjectUpload(h.path), 0
        return 0

    def preadv(self, h: Handle, ranges, coalesce: int | None = None) -> list:
        """Parallel ranged GETs of ``ranges``; those closer than ``coalesce`` bytes (default: the target's
        ``vector_coalesce``; 0: none across a gap) are merged into one GET, which reads the gap too."""
        if not ranges:
            return []
        try:
            return obstore.get_ranges(self.store, h.path, starts=[o for o, _ in ranges], lengths=[n for _, n in ranges],
                                      coalesce=self.options.vector_coalesce if coalesce is None else coalesce)
        except ERRORS as e:
            raise self._error(e, "vector read", h.path) from None

    def close(self, h: Handle) -> None:
        """Complete a streaming upload. When that fails the upload is aborted — a request that fails too when
        the server is gone; the parts then stay until a cleanup aborts them (``rmdir_quietly``)."""
        if h.writer is not None:
            writer, h.writer = h.writer, None
            try:
                self.check_server()
            except TargetError:
                self.uploads.release(writer)
                raise
            try:
                self.uploads.finish(writer)
            except (*ERRORS, SyntaxError) as e:
                raise self._error(e, "write", h.path) from None

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        if self.getter is not None:  # the bytes land in the buffer as they arrive: no extra copy either way
            get, path = self._get, h.path
            return lambda bufs, offset: get(path, bufs[0], offset, len(bufs[0]))
        store, path, get_range = self.store, h.path, obstore.get_range

        def read(bufs, offset: int) -> int:
            buf = bufs[0]
            try:
                data = get_range(store, path, start=offset, length=len(buf))
            except ERRORS as e:
                raise self._error(e, "read", path) from None
            n = len(data)
            if into_buffer:
                memoryview(buf)[:n] = data
            return n

        return read

    def writer(self, h: Handle) -> IOFunc:
        return lambda bufs, offset: self.pwrite(h, bufs[0], offset)

    # -- whole objects -----------------------------------------------------------------------------------
    def put(self, path: str, data) -> None:
        o = self.options
        self.check_server()
        try:
            obstore.put(self.store, path, memoryview(data) if len(data) else b"", chunk_size=o.part_size,
                        max_concurrency=o.upload_concurrency)
        except ERRORS as e:
            raise self._error(e, "write", path) from None

    def get_into(self, path: str, buf) -> int:
        self.check_server()
        if self.getter is not None:
            return self._get(path, buf)
        try:
            result = obstore.get(self.store, path)
            view, total = memoryview(buf), 0
            for chunk in result.stream(min_chunk_size=1 << 20):
                n = len(chunk)
                view[total:total + n] = chunk
                total += n
            return total
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(2, "no such object", path) from None
        except ERRORS as e:
            raise self._error(e, "read", path) from None
        except ValueError:  # the object is larger than the buffer
            raise StorevalError(f"object {path} is larger than the {len(buf)} bytes expected") from None

    def fast_ops(self) -> FastOps:
        """PUT, HEAD, GET, DELETE and LIST: the object-store mapping of the metadata phases."""
        base = super().fast_ops()
        store = self.store
        if self.getter is not None:
            return FastOps(mkdir=base.mkdir, rmdir=base.rmdir, stat=base.stat, listdir=base.listdir,
                           create=base.create, read=self._get, remove=base.remove)

        def read(path: str, buf) -> int:
            try:  # the GET's bytes arrive in obstore's memory; they are counted, not copied again
                return sum(len(chunk) for chunk in obstore.get(store, path).stream(min_chunk_size=64 << 10))
            except (NotFoundError, FileNotFoundError):
                raise FileNotFoundError(2, "no such object", path) from None
            except ERRORS as e:
                raise self._error(e, "read", path) from None

        return FastOps(mkdir=base.mkdir, rmdir=base.rmdir, stat=base.stat, listdir=base.listdir, create=base.create,
                       read=read, remove=base.remove)

    # -- metadata ----------------------------------------------------------------------------------------
    def stat(self, path: str) -> StatResult:
        self.check_server()
        try:
            meta = obstore.head(self.store, path)
            return StatResult(size=meta["size"], is_dir=False, mtime=meta["last_modified"].timestamp())
        except (NotFoundError, FileNotFoundError):
            pass
        except ERRORS as e:
            raise self._error(e, "stat", path) from None
        if self.listdir(path):  # a prefix with objects under it behaves as a directory
            return StatResult(size=0, is_dir=True)
        raise FileNotFoundError(2, "no such object", path)

    def remove(self, path: str) -> None:
        self.check_server()
        try:
            obstore.delete(self.store, path)
        except (NotFoundError, FileNotFoundError):
            raise FileNotFoundError(2, "no such object", path) from None
        except ERRORS as e:
            raise self._error(e, "removal", path) from None

    def listdir(self, path: str) -> list[str]:
        self.check_server()
        prefix = path.strip("/")
        try:
            result = obstore.list_with_delimiter(self.store, prefix or None)
        except ERRORS as e:
            raise self._error(e, "listing", path or "the bucket") from None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"]]
        names += [m["path"].rsplit("/", 1)[-1] for m in result["objects"]]
        return names

    def remove_quietly(self, path: str) -> bool:
        """Remove an object storeval created — and any incomplete upload of that key, which holds parts on the
        server though no listing shows it (a client killed mid-upload, a server gone before the upload ended)."""
        mine = [up for up in self._uploads(path) if up.path == path]  # the prefix also matches bw.1 → bw.10
        self._abort(mine)
        return super().remove_quietly(path) or bool(mine)

    def rmdir_quietly(self, path: str) -> bool:
        """A prefix is gone with its last object — and its last incomplete upload, which holds parts on the
        server though no listing shows it: those under storeval's directory are aborted first."""
        self._abort(self._uploads(f"{path.strip('/')}/"))
        return not self.listdir(path)

    def _uploads(self, prefix: str) -> list[Upload]:
        """``list_uploads`` for a cleanup: a server that will not list uploads (credentials without that right,
        a store without the call) leaves only the objects to remove; one that cannot be reached is an error."""
        try:
            return self.list_uploads(prefix)
        except TargetUnreachable:
            raise
        except TargetError:
            return []

    # -- incomplete uploads ----------------------------------------------------------------------------
    def list_uploads(self, prefix: str) -> list[Upload]:
        """ListMultipartUploads under ``prefix`` (through the signed HTTP path: obstore has no such call)."""
        self.check_server()
        try:
            return [Upload(path, upload_id, initiated) for path, upload_id, initiated in self.http.list_uploads(prefix)]
        except (S3HttpError, OSError, http.client.HTTPException) as e:
            raise self._error(e, "listing of the incomplete uploads", prefix) from None
        except SyntaxError as e:  # ElementTree's ParseError: not an S3 answer
            raise self._error(e, "listing of the incomplete uploads", prefix) from None

    def abort_stale_uploads(self, prefix: str) -> list[Upload]:
        """Abort the incomplete uploads under ``prefix`` (storeval's own, of clients that are gone).

        AWS S3 and Ceph list every upload under a prefix; MinIO lists only those of an exact key, so there a
        directory's uploads are found key by key, as ``remove_quietly`` removes storeval's objects."""
        uploads = self.list_uploads(prefix)
        self._abort(uploads)
        return uploads

    def _abort(self, uploads: list[Upload]) -> None:
        for up in uploads:
            self.check_server()
            try:
                self.http.abort_upload(up.path, up.upload_id)
            except (S3HttpError, OSError, http.client.HTTPException) as e:
                raise self._error(e, "abort of the incomplete upload", up.path) from None

    @classmethod
    def carrier(cls, url: str, options=None):
        """The URL names the bucket; the server is the endpoint (AWS's when none: unknown here)."""
        from .carrier import Carrier, option

        cls.parse(url)
        endpoint = option(options, "endpoint")
        return Carrier(host=(parse_endpoint(endpoint).host.strip("[]") or None) if endpoint else None)
