"""Streaming S3 writes whose requests are timed one by one: the latency of an S3 write is that of its uploads.

A writer of ``transfer_size`` pieces hands them to the driver, which copies them into a part buffer; a full
part is uploaded (UploadPart) by one of ``upload_concurrency`` threads while the writer fills the next buffer.
Timing the writer's calls would time those copies (microseconds) and, now and then, a wait for a free
buffer — not what the storage did. So every request that carries data (UploadPart, or the single PUT of an
object smaller than a part) is timed from its first byte sent to its response, into :class:`RequestTimes`,
and a workload's write phase reports those latencies (``Driver.take_requests``).

Buffers are preallocated per driver (``upload_concurrency`` + 1 of ``part_size``) and reused for every
object; a part is sent from its buffer as it is (no copy). An object becomes multipart when its first part
fills: CreateMultipartUpload, then one UploadPart per part, then CompleteMultipartUpload at close. A failed
part fails the next write (or the close); the upload is then aborted as far as the server still answers,
and a cleanup aborts what remains (``S3Driver.rmdir_quietly``).
"""

from __future__ import annotations

import queue
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import Future, ThreadPoolExecutor

from ..histogram import Histogram
from .sigv4 import SignedS3


class RequestTimes:
    """Latencies of the data-carrying requests a driver made, from any thread, until taken."""

    def __init__(self, what: str) -> None:
        self.what = what  # how the requests are named in a caption
        self._lock = threading.Lock()
        self.hist = Histogram()
        self.count = 0
        self.bytes = 0

    def add(self, ns: int, nbytes: int) -> None:
        with self._lock:
            self.hist.record(ns)
            self.count += 1
            self.bytes += nbytes

    def take(self) -> RequestTimes | None:
        """What was recorded since the last take (None: no request), and a fresh start."""
        with self._lock:
            if not self.count:
                return None
            taken = RequestTimes(self.what)
            taken.hist, taken.count, taken.bytes = self.hist, self.count, self.bytes
            self.hist, self.count, self.bytes = Histogram(), 0, 0
            return taken


class ObjectUpload:
    """One object being written: its part buffer, its multipart upload once it has one, its parts in flight."""

    __slots__ = ("path", "buf", "fill", "upload_id", "parts", "pending", "error")

    def __init__(self, path: str) -> None:
        self.path = path
        self.buf: bytearray | None = None  # the part being filled
        self.fill = 0
        self.upload_id: str | None = None
        self.parts: list[tuple[int, str]] = []  # (part number, ETag), in the order the parts were numbered
        self.pending: list[tuple[Future, bytearray]] = []  # parts handed to the threads, with their buffers
        self.error: BaseException | None = None  # the first failed part's error


class PartUploader:
    """The part buffers and upload threads of one driver (one client)."""

    def __init__(self, http: SignedS3, part_size: int, concurrency: int, times: RequestTimes) -> None:
        self.http, self.part_size, self.concurrency, self.times = http, part_size, concurrency, times
        self._free: queue.SimpleQueue[bytearray] = queue.SimpleQueue()
        self._lock = threading.Lock()  # writers of several objects may share the driver (threads of a client)
        self._made = 0
        self._inflight = 0  # parts handed to the threads and not back yet
        self._pool: ThreadPoolExecutor | None = None

    # -- buffers -------------------------------------------------------------------------------------------
    def _buffer(self) -> bytearray:
        """A free part buffer: a returned one, a new one while fewer than concurrency + 1 exist (or while none is
        being uploaded: objects being filled at once hold one each), else the first to come back from an upload
        (at most one request's time: every request has the target's timeout)."""
        try:
            return self._free.get_nowait()
        except queue.Empty:
            pass
        with self._lock:
            if self._made <= self.concurrency or not self._inflight:
                self._made += 1
                return bytearray(self.part_size)
        return self._free.get()

    # -- writing -------------------------------------------------------------------------------------------
    def write(self, up: ObjectUpload, data) -> int:
        """Copy ``data`` into the object's part buffers, uploading each part that fills; returns its length.
        Raises the error of a part that failed since the last call."""
        if up.error is not None:
            raise up.error
        view = memoryview(data).cast("B")
        n, done = len(view), 0
        while done < n:
            if up.buf is None:
                up.buf, up.fill = self._buffer(), 0
            take = min(n - done, self.part_size - up.fill)
            up.buf[up.fill:up.fill + take] = view[done:done + take]
            up.fill += take
            done += take
            if up.fill == self.part_size:
                self._ship(up)
        return n

    def _ship(self, up: ObjectUpload) -> None:
        """Hand the filled buffer to an upload thread (the upload is created first, in the writer's thread)."""
        if up.upload_id is None:
            body, _ = self.http.exchange("POST", up.path, {"uploads": ""})
            up.upload_id = _find(body, "UploadId")
        number = len(up.parts) + 1
        up.parts.append((number, ""))
        buf, fill = up.buf, up.fill
        up.buf, up.fill = None, 0
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="s3-part")
            self._inflight += 1
        up.pending = [(f, b) for f, b in up.pending if not f.done()]
        up.pending.append((self._pool.submit(self._part, up, number, buf, fill), buf))

    def _part(self, up: ObjectUpload, number: int, buf: bytearray, fill: int) -> None:
        try:
            if up.error is None:  # after a failed part the upload is lost: the rest are not sent
                t0 = time.perf_counter_ns()
                _, etag = self.http.exchange("PUT", up.path, {"partNumber": str(number), "uploadId": up.upload_id},
                                             memoryview(buf)[:fill])
                self.times.add(time.perf_counter_ns() - t0, fill)
                up.parts[number - 1] = (number, etag)
        except BaseException as e:  # noqa: BLE001 - the writer raises it at its next call
            if up.error is None:
                up.error = e
        finally:
            self._free.put(buf)
            with self._lock:
                self._inflight -= 1

    def finish(self, up: ObjectUpload) -> None:
        """Complete the object: the single PUT of a small one, or the last part and CompleteMultipartUpload.
        A failure aborts the multipart upload (as far as the server answers) and is raised."""
        try:
            if up.upload_id is None:
                fill = up.fill
                t0 = time.perf_counter_ns()
                self.http.exchange("PUT", up.path, {}, memoryview(up.buf)[:fill] if up.buf is not None else b"")
                self.times.add(time.perf_counter_ns() - t0, fill)
                return
            if up.fill and up.error is None:
                self._ship(up)
            for f, _ in up.pending:
                f.result()
            if up.error is not None:
                raise up.error
            parts = "".join(f"<Part><PartNumber>{n}</PartNumber><ETag>{_xml(e)}</ETag></Part>" for n, e in up.parts)
            self.http.exchange("POST", up.path, {"uploadId": up.upload_id},
                               f"<CompleteMultipartUpload>{parts}</CompleteMultipartUpload>".encode())
        except BaseException:
            self.abandon(up)
            raise
        finally:
            self.release(up)

    def abandon(self, up: ObjectUpload) -> None:
        """Give the object up: its parts stop being sent and its multipart upload is aborted, if the server
        still answers (if not, the cell's cleanup aborts it)."""
        if up.error is None:
            up.error = OSError("upload abandoned")
        for f, buf in up.pending:
            if f.cancel():  # never sent: its buffer comes back here, not from the thread
                self._free.put(buf)
                with self._lock:
                    self._inflight -= 1
        if up.upload_id is not None:
            upload_id, up.upload_id = up.upload_id, None
            try:
                for f, _ in up.pending:
                    if not f.cancelled():
                        f.exception()  # a part still being sent would recreate what the abort drops
                self.http.abort_upload(up.path, upload_id)
            except Exception:  # noqa: BLE001 - best effort: the cleanup lists and aborts what is left
                pass
        self.release(up)

    def release(self, up: ObjectUpload) -> None:
        """Return the object's unfinished part buffer."""
        if up.buf is not None:
            self._free.put(up.buf)
            up.buf, up.fill = None, 0
        up.pending = []

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None


def _find(body: bytes, tag: str) -> str:
    root = ET.fromstring(body)
    ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
    value = root.findtext(f"{ns}{tag}")
    if not value:
        raise OSError(f"the server's answer has no {tag}")
    return value


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
