"""Write payload: incompressible random data, stamped so no two blocks are alike.

One random block per writer is generated once (outside any timed region).
Before each write the first 8 bytes of every 512-byte sector are set to a tag
made of the writer and the sector's absolute offset — one vectorised numpy
add, about a microsecond — so deduplicating storage cannot fold blocks
together and compression finds nothing to squeeze. The same tags let a reader
check that every block holds what its writer wrote (``verify``).
"""

from __future__ import annotations

import mmap

import numpy as np

from ..errors import VerifyError

SECTOR = 512


def aligned_buffer(size: int) -> memoryview:
    """A page-aligned buffer (what O_DIRECT needs), as a memoryview: every client library takes one."""
    return memoryview(mmap.mmap(-1, max(size, 1)))


class Payload:
    """The random block of one writer and its per-sector tags."""

    def __init__(self, size: int, writer: int, seed: int) -> None:
        self.size = size
        self.writer = writer
        self.base = np.random.default_rng([seed & 0xFFFFFFFF, writer, 0x5EED]).bytes(size)
        self.nstamps = (size - 8) // SECTOR + 1 if size >= 8 else 0
        self.tags = (np.uint64(writer + 1) << np.uint64(48)) + np.arange(self.nstamps, dtype=np.uint64) * np.uint64(SECTOR)

    def tag_view(self, buf) -> np.ndarray:
        """The 8-byte tag slots of ``buf`` (a strided numpy view; writing it writes the buffer)."""
        return np.frombuffer(buf, dtype=np.uint64, count=len(buf) // 8)[:: SECTOR // 8][: self.nstamps]

    def write_buffer(self) -> tuple[memoryview, tuple]:
        """A buffer holding the random block, and the (add, tags, view) triple that stamps it."""
        buf = aligned_buffer(self.size)
        buf[: self.size] = self.base
        return buf, (np.add, self.tags, self.tag_view(buf))

    def chunk_buffer(self, count: int) -> tuple[memoryview, tuple]:
        """A buffer of ``count`` consecutive transfers, stamped in one add: the same bytes as ``count`` single
        writes. Needs the tag grid to be regular (size a multiple of 512); used to lay out files quickly."""
        assert self.size % SECTOR == 0
        buf = aligned_buffer(self.size * count)
        for k in range(count):
            buf[k * self.size:(k + 1) * self.size] = self.base
        tags = np.tile(self.tags, count) + np.repeat(np.arange(count, dtype=np.uint64) * np.uint64(self.size), self.nstamps)
        view = np.frombuffer(buf, dtype=np.uint64, count=len(buf) // 8)[:: SECTOR // 8][: len(tags)]
        return buf, (np.add, tags, view)

    def stamp(self, buf, offset: int) -> None:
        np.add(self.tags, offset, out=self.tag_view(buf))

    def checker(self) -> Checker:
        """A :class:`Checker` comparing read blocks with what this writer wrote."""
        return Checker(self)


class Checker:
    """``check(buf, offset) -> bad byte index or -1``: a read block against what was written at ``offset``.

    ``base`` and ``tags`` are the pattern (the random block, and the tag of each sector before the offset is
    added): the native engine verifies with them, byte for byte as this does. One checker per thread (it
    stamps its own copy of the expected block)."""

    def __init__(self, payload: Payload) -> None:
        self.size = payload.size
        self.base = payload.base
        self.tags = payload.tags
        self.expected = aligned_buffer(self.size)
        self.expected[: self.size] = self.base
        self._exp_view = payload.tag_view(self.expected)
        self._exp = np.frombuffer(self.expected, dtype=np.uint8, count=self.size)

    def __call__(self, buf, offset: int) -> int:
        np.add(self.tags, offset, out=self._exp_view)
        got = np.frombuffer(buf, dtype=np.uint8, count=self.size)
        if np.array_equal(got, self._exp):
            return -1
        return int(np.flatnonzero(got != self._exp)[0])

    def verify(self, buf, offset: int) -> None:
        """Raise VerifyError naming the first byte of ``buf`` (read at ``offset``) that differs."""
        bad = self(buf, offset)
        if bad >= 0:
            raise verify_failed(offset + bad)


def verify_failed(byte: int) -> VerifyError:
    """The error of a verify that found ``byte`` (an offset in the file) not as its writer wrote it."""
    return VerifyError(f"verify failed: byte {byte} differs from what was written")
