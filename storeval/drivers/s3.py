"""S3 driver (obstore): AWS S3, MinIO, Ceph RGW and every other S3-compatible store.

``s3://bucket/prefix`` with ``endpoint``, ``region`` and credentials from, in this order: the environment
variables named by ``access_key_env``/``secret_key_env``, an AWS shared-credentials file
(``credentials_file`` + ``profile``), or the standard ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``.
Only those names and paths are ever recorded; the secrets stay in memory and are scrubbed from messages.

Writes stream: ``open(path, "w")`` starts an upload that becomes multipart once ``part_size`` bytes are
buffered, and ``close`` completes it. Reads are ranged GETs; the vector read is ``get_ranges`` (parallel
ranged GETs, ranges closer than ``vector_coalesce`` merged into one request). There are no directories,
no random writes, no fsync — the capability flags say so and workloads adapt.
"""

from __future__ import annotations

import configparser
import os
from datetime import timedelta
from typing import Annotated, Any

import obstore
from obstore.exceptions import (BaseError, NotFoundError, PermissionDeniedError, UnauthenticatedError)
from obstore.store import S3Store
from pydantic import Field, field_validator

from ..errors import CapabilityError, InputError, StorevalError
from ..fields import Duration, Size
from ..redact import redact_text, register_secret, visible
from .base import Capabilities, Driver, DriverOptions, FastOps, Handle, IOFunc, StatResult
from .sigv4 import S3HttpError, SignedGetter
from .url import ParsedUrl, parse_url

CREDENTIALS_HINT = ("give the keys through access_key_env/secret_key_env, which name environment variables, or "
                    "credentials_file")


def parse_endpoint(endpoint: str) -> ParsedUrl:
    """An S3 endpoint: http(s)://HOST[:PORT][/path], nothing else (no credentials, query or fragment)."""
    return parse_url(endpoint, {"host", "port", "path"}, {"password": CREDENTIALS_HINT, "user": CREDENTIALS_HINT},
                     ("http", "https"), "an S3 endpoint")


class S3Options(DriverOptions):
    endpoint: str | None = None
    region: str = "us-east-1"
    access_key_env: str | None = None
    secret_key_env: str | None = None
    credentials_file: str | None = None
    profile: str = "default"
    part_size: Size = 16 << 20  # multipart part size of streaming writes and large puts
    upload_concurrency: Annotated[int, Field(ge=1, le=64)] = 8  # parts in flight per client
    vector_coalesce: Size = 1 << 20  # get_ranges merges ranges closer than this into one GET
    timeout: Duration = 30.0  # per request, and the bound on retries
    virtual_hosted: bool = False
    fast_get: bool = True  # GETs through storeval's lean signed HTTP path (see sigv4.py); false: through obstore

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

    def __init__(self, path: str, mode: str, writer: Any = None) -> None:
        super().__init__(path, mode)
        self.writer = writer
        self.pos = 0


def _bucket_prefix(url: str) -> tuple[str, str]:
    parsed = S3Driver.parse(url)
    return parsed.host, parsed.path.strip("/")


def _credentials(o: S3Options) -> tuple[str | None, str | None, str]:
    """(access key, secret key, where they came from) — the source is safe to show, the keys are not (they are
    registered, so every message and record of this process masks them)."""
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
    Options = S3Options
    caps = Capabilities(random_write=False, direct_io=False, vector_read=True, directories=False,
                        append_only=True, fsync=False, shared_write=False)
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
        self.getter: SignedGetter | None = None

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
        _credentials(options)  # known from now on, so nothing this process stores or prints can show them

    # -- sessions ---------------------------------------------------------------------------------
    def _error(self, exc: BaseException, what: str) -> StorevalError:
        """One line for an obstore error, never holding a credential."""
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        where = self.options.endpoint or "AWS"
        if isinstance(exc, (PermissionDeniedError, UnauthenticatedError)) or "403" in first or "AccessDenied" in first \
                or (isinstance(exc, S3HttpError) and exc.status == 403) \
                or "InvalidAccessKeyId" in first or "SignatureDoesNotMatch" in first:
            return StorevalError(f"S3 at {where} refused the credentials from {self._source} ({what})")
        if "NoSuchBucket" in str(exc):
            return StorevalError(f"bucket {self.bucket} does not exist at {where} (create it first)")
        if "error sending request" in first or "Connection refused" in str(exc) or "timed out" in str(exc).lower() \
                or isinstance(exc, (ConnectionError, TimeoutError)):
            return StorevalError(f"cannot reach S3 at {where} ({what}: no answer; is the server up?)")
        return StorevalError(redact_text(f"S3 {what} failed: {first}"))

    def connect(self) -> None:
        o = self.options
        key, secret, self._source = _credentials(o)
        kwargs: dict[str, Any] = {"region": o.region, "virtual_hosted_style_request": o.virtual_hosted}
        if o.endpoint:
            kwargs["endpoint"] = o.endpoint
        if key and secret:
            kwargs["access_key_id"], kwargs["secret_access_key"] = key, secret
        else:
            kwargs["skip_signature"] = True
        timeout = timedelta(seconds=o.timeout)
        self.store = S3Store(self.bucket, prefix=self.prefix or None,
                             client_options={"allow_http": bool(o.endpoint and o.endpoint.startswith("http:")),
                                             "timeout": timeout, "connect_timeout": min(timeout, timedelta(seconds=10))},
                             retry_config={"max_retries": 2, "retry_timeout": timeout}, **kwargs)
        try:
            obstore.list_with_delimiter(self.store, None)
        except BaseError as e:
            raise self._error(e, "listing the bucket") from None
        if o.fast_get:
            token = os.environ.get("AWS_SESSION_TOKEN") if self._source.startswith("AWS_ACCESS_KEY_ID") else None
            self.getter = SignedGetter(o.endpoint or f"https://s3.{o.region}.amazonaws.com", self.bucket, self.prefix,
                                       o.region, key, secret, token, o.virtual_hosted, o.timeout)

    def shutdown(self) -> None:
        if self.getter is not None:
            self.getter.close()
        self.store = self.getter = None

    def _get(self, path: str, buf, offset: int = 0, length: int | None = None) -> int:
        """A GET through the lean path, with its errors turned into storeval's."""
        try:
            return self.getter.get_into(path, buf, offset, length)
        except S3HttpError as e:
            if e.code == "NoSuchKey" or (e.status == 404 and e.code != "NoSuchBucket"):
                raise FileNotFoundError(2, "no such object", path) from None
            if e.status == 416:  # the range starts past the end of the object
                return 0
            raise self._error(e, f"reading {path}") from None
        except OSError as e:
            raise self._error(e, f"reading {path}") from None

    def describe(self) -> dict[str, Any]:
        out = {"url": self.url, "driver": self.scheme, "endpoint": self.options.endpoint or "AWS",
               "region": self.options.region, "bucket": self.bucket, "prefix": self.prefix}
        if self.options.endpoint:  # the server names itself in its response headers (MinIO, Ceph RGW …)
            import http.client

            ep = parse_endpoint(self.options.endpoint)
            cls = http.client.HTTPSConnection if ep.scheme == "https" else http.client.HTTPConnection
            try:
                conn = cls(ep.netloc, timeout=5)
                conn.request("HEAD", "/")
                resp = conn.getresponse()
                out["server"] = resp.getheader("Server") or "unknown"
                conn.close()
            except OSError:
                out["server"] = "unknown (no answer)"
        return out

    # -- data -------------------------------------------------------------------------------------------
    def open(self, path: str, mode: str, *, direct: bool = False) -> S3Handle:
        if mode == "r":
            return S3Handle(path, mode)
        if mode == "rw":
            raise CapabilityError(f"target {self.url} cannot open an object for reading and writing")
        o = self.options
        try:
            writer = obstore.open_writer(self.store, path, buffer_size=o.part_size, max_concurrency=o.upload_concurrency)
        except BaseError as e:
            raise self._error(e, f"starting the upload of {path}") from None
        return S3Handle(path, mode, writer)

    def pread(self, h: Handle, buf, offset: int) -> int:
        if self.getter is not None:
            return self._get(h.path, buf, offset, len(buf))
        try:
            data = obstore.get_range(self.store, h.path, start=offset, length=len(buf))
        except NotFoundError:
            raise FileNotFoundError(2, "no such object", h.path) from None
        except BaseError as e:
            raise self._error(e, f"reading {h.path}") from None
        n = len(data)
        memoryview(buf)[:n] = data
        return n

    def pwrite(self, h: Handle, buf, offset: int) -> int:
        if offset != h.pos:
            raise CapabilityError(f"target {self.url} writes objects front to back (write at {offset}, expected {h.pos})")
        try:
            # obstore keeps a reference to what it is given until the part is uploaded; the caller reuses
            # (and re-stamps) its buffer, so hand over a copy: one memcpy per write, in storeval's CPU figure
            n = h.writer.write(bytes(buf))
        except BaseError as e:
            raise self._error(e, f"uploading {h.path}") from None
        h.pos += n
        return n

    def preadv(self, h: Handle, ranges) -> list:
        if not ranges:
            return []
        try:
            return obstore.get_ranges(self.store, h.path, starts=[o for o, _ in ranges], lengths=[n for _, n in ranges],
                                      coalesce=self.options.vector_coalesce)
        except BaseError as e:
            raise self._error(e, f"reading ranges of {h.path}") from None

    def close(self, h: Handle) -> None:
        if h.writer is not None:
            try:
                h.writer.close()
            except BaseError as e:
                raise self._error(e, f"completing the upload of {h.path}") from None

    def reader(self, h: Handle, into_buffer: bool = True) -> IOFunc:
        if self.getter is not None:  # the bytes land in the buffer as they arrive: no extra copy either way
            get, path = self._get, h.path
            return lambda bufs, offset: get(path, bufs[0], offset, len(bufs[0]))
        store, path, get_range = self.store, h.path, obstore.get_range

        def read(bufs, offset: int) -> int:
            buf = bufs[0]
            try:
                data = get_range(store, path, start=offset, length=len(buf))
            except BaseError as e:
                raise self._error(e, f"reading {path}") from None
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
        try:
            obstore.put(self.store, path, memoryview(data) if len(data) else b"", chunk_size=o.part_size,
                        max_concurrency=o.upload_concurrency)
        except BaseError as e:
            raise self._error(e, f"writing {path}") from None

    def get_into(self, path: str, buf) -> int:
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
        except NotFoundError:
            raise FileNotFoundError(2, "no such object", path) from None
        except BaseError as e:
            raise self._error(e, f"reading {path}") from None
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
            except NotFoundError:
                raise FileNotFoundError(2, "no such object", path) from None
            except BaseError as e:
                raise self._error(e, f"reading {path}") from None

        return FastOps(mkdir=base.mkdir, rmdir=base.rmdir, stat=base.stat, listdir=base.listdir, create=base.create,
                       read=read, remove=base.remove)

    # -- metadata ----------------------------------------------------------------------------------------
    def stat(self, path: str) -> StatResult:
        try:
            meta = obstore.head(self.store, path)
            return StatResult(size=meta["size"], is_dir=False, mtime=meta["last_modified"].timestamp())
        except NotFoundError:
            pass
        except BaseError as e:
            raise self._error(e, f"stat of {path}") from None
        if self.listdir(path):  # a prefix with objects under it behaves as a directory
            return StatResult(size=0, is_dir=True)
        raise FileNotFoundError(2, "no such object", path)

    def remove(self, path: str) -> None:
        try:
            obstore.delete(self.store, path)
        except NotFoundError:
            raise FileNotFoundError(2, "no such object", path) from None
        except BaseError as e:
            raise self._error(e, f"deleting {path}") from None

    def listdir(self, path: str) -> list[str]:
        prefix = path.strip("/")
        try:
            result = obstore.list_with_delimiter(self.store, prefix or None)
        except BaseError as e:
            raise self._error(e, f"listing {path}") from None
        names = [p.rstrip("/").rsplit("/", 1)[-1] for p in result["common_prefixes"]]
        names += [m["path"].rsplit("/", 1)[-1] for m in result["objects"]]
        return names

    def rmdir_quietly(self, path: str) -> bool:
        return not self.listdir(path)  # a prefix disappears with its last object

