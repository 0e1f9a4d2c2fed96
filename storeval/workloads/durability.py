"""How a write phase ends durably, the same way in every workload that writes: ``make_durable`` inside the timed
region (fsync, or an object store's committing close), ``warn_write_back`` after it when the figure may include
data the storage does not hold yet."""

from __future__ import annotations

from ..core.oplog import PhaseRecorder
from .base import ClientContext


def make_durable(c: ClientContext, h, fsync: bool) -> str:
    """End a file's writes durably, inside the timed region, the same way for every client and transfer
    size: fsync where the driver can and ``fsync`` is on; an object store's close (its PUT or
    multipart-complete acknowledgment, which the caller's close waits for) needs nothing more. Returns how
    the data was made durable: ``fsync``, ``close`` or ``none`` (see :func:`warn_write_back`)."""
    caps = c.driver.caps
    if fsync and caps.fsync:
        c.driver.fsync(h)
        return "fsync"
    return "close" if caps.close_commits else "none"


def warn_write_back(c: ClientContext, rec: PhaseRecorder, phase: str, durable: str, fsync: bool,
                    direct: bool = False) -> None:
    """Warn ``write-back`` when a write phase's figure may include data not yet on the storage."""
    rec.extra["durable"] = durable
    if durable != "none" or (direct and c.driver.caps.client_page_cache):
        return
    why = "fsync turned off" if not fsync or c.driver.caps.fsync else f"the {c.driver.scheme} driver cannot fsync"
    if c.driver.caps.client_page_cache:
        c.warn(rec, "write-back", f"{phase} may have ended with data still in the page cache ({why}, no O_DIRECT): "
                                  "the figure can exceed what the storage accepts")
    else:
        c.warn(rec, "write-back", f"{phase} ended without a durable flush ({why}): the server may still hold the "
                                  "data in memory, and the figure can exceed what its storage accepts")


__all__ = ["make_durable", "warn_write_back"]
