"""``storeval export``: the results store's tables as JSON, CSV or Parquet files, written by DuckDB itself.

One file per table (studies, cells, phases, records, events, environment, samples, outputs; a table an
older store lacks is left out), optionally for one run. The files go into a new directory (or an empty
one): export never overwrites what is there, and a failure (a full disk) leaves nothing behind. Binary
columns (latency histograms) are written as they are stored: Parquet keeps them as BLOBs, CSV and JSON as
DuckDB's escaped text; ``storeval.histogram.Histogram.from_bytes`` reads them back.
"""

from __future__ import annotations

import os
import tempfile

from ..core.remove import remove_tree
from ..errors import InputError
from ..outputs import OutputError, failure, place_new
from ..store import TABLES, Store, StoreError, table_names

FORMATS = {"json": ("json", "(FORMAT json, ARRAY true)"), "csv": ("csv", "(FORMAT csv, HEADER true)"),
           "parquet": ("parquet", "(FORMAT parquet)")}


def check_destination(out: str) -> None:
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise InputError(f"--out {out}: exists and is not an empty directory (choose a new directory; export never "
                         "overwrites files)")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
        raise InputError(f"--out {out}: {parent} is not a writable directory (create it or choose another path)")


def export(store: Store, fmt: str, out: str, run_id: str | None) -> list[str]:
    """Write one file per table into ``out`` (created here); returns the file names. All or nothing: the
    files are written into a temporary directory beside ``out`` that is renamed at the end."""
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt}: not a format storeval exports (choose json, csv or parquet)")
    check_destination(out)
    ext, options = FORMATS[fmt]
    parent = os.path.dirname(os.path.abspath(out))
    try:
        tmp = tempfile.mkdtemp(prefix=".storeval-export-", dir=parent)
    except OSError as e:
        raise OutputError(failure(e, f"cannot write --out {out}")) from None
    names = []
    try:
        with store.connect(read_only=True) as con:
            have = table_names(con)
            for table in [t for t in TABLES if t in have]:
                path = os.path.join(tmp, f"{table}.{ext}")
                where = " WHERE run_id = $run" if run_id is not None else ""
                query = f"SELECT * FROM {table}{where}"
                params = {"run": run_id} if run_id is not None else {}
                quoted = path.replace("'", "''")
                con.execute(f"COPY ({query}) TO '{quoted}' {options}", params)
                names.append(f"{table}.{ext}")
        if os.path.isdir(out):  # the user's empty directory stays theirs (its mode too): move the files in
            for name in names:  # never over a file that appeared there meanwhile
                place_new(os.path.join(tmp, name), os.path.join(out, name))
            os.rmdir(tmp)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o777 & ~umask)  # mkdtemp made it private; exported results are meant to be shared
            os.rename(tmp, out)
    except StoreError as e:
        remove_tree(parent, os.path.basename(tmp))  # our own temporary directory only
        if e.file is not None and e.file.startswith(tmp + os.sep):  # the export's side, not the store's
            raise OutputError(f"cannot write --out {out}: {e.reason.replace(e.file, parent)}; free space there or "
                              "choose another directory") from None
        raise
    except OSError as e:
        remove_tree(parent, os.path.basename(tmp))
        raise OutputError(failure(e, f"cannot write --out {out}")) from None
    except BaseException:
        remove_tree(parent, os.path.basename(tmp))
        raise
    return names
