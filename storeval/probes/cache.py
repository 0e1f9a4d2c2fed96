"""Page cache control: the first defence against reporting what the hardware cannot deliver.

In order of preference (DESIGN.md): O_DIRECT; dropping the page cache when running as root; reading data
another client wrote; and otherwise a warning when the data read would fit in RAM.
"""

from __future__ import annotations

import os

import psutil


def is_root() -> bool:
    return os.geteuid() == 0


def ram_bytes() -> int:
    return psutil.virtual_memory().total


def drop_page_cache() -> bool:
    """``sync; echo 3 > /proc/sys/vm/drop_caches`` — True when it was done (root only)."""
    if not is_root():
        return False
    os.sync()
    try:
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def fits_in_ram(nbytes: int) -> bool:
    """Whether ``nbytes`` of data read could be served from the page cache (less than twice RAM)."""
    return nbytes < 2 * ram_bytes()


def process_read_bytes() -> int | None:
    """Bytes this process caused to be fetched from storage (``/proc/self/io`` read_bytes); None if unknown."""
    try:
        with open("/proc/self/io", encoding="ascii") as f:
            for line in f:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None
