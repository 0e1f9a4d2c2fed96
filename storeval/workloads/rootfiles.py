"""Physics-like ROOT event files for the skim workload, written once per target and reused.

Each file holds a TTree ``Events`` shaped like a NanoAOD-style analysis format: event-level scalars,
collections of particles as jagged branches with their counter branch (``nMuon`` + ``Muon_pt``, …), and
wide fixed-size arrays (trigger bits, calorimeter towers). Values follow physics-like distributions at
physics-like precision, so the compression (zlib, lz4, zstd or none) behaves as on real data. uproot writes
one basket per branch per ``extend``, so every cluster of ``cluster_size`` uncompressed bytes holds one
basket of each branch — the unit the access strategies read.

A dataset lives in ``storeval-data/skim-<hash>/`` on the target, where the hash covers every generation
parameter but the number of files, and the target's layout (``Driver.layout()``: the options that change how
data sits on it, such as HDFS replication and block size), so files written one way are never reused for a
target that would have written them another. File ``i`` depends only on the parameters and ``i``, so a
dataset is a pool that grows: a cell needing more files than are there adds the missing ones, and a cell
needing fewer reads the first ones. ``manifest.json`` records the parameters, the layout, the files with
their sizes and SHA-256 checksums. Later cells whose parameters and layout match reuse it (sizes are
checked); ``--regenerate`` rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import numpy as np

from ..drivers.base import Driver, join
from ..lazy import lazy
from ..units import format_size, plural

ak = lazy("awkward")
uproot = lazy("uproot")

SCHEMA_VERSION = 2  # 2: the directory's hash leaves out the file count and covers the layout
TREE = "Events"
DATA_DIR = "storeval-data"
COMPRESSIONS = {"zlib": lambda lvl: uproot.ZLIB(lvl), "lz4": lambda lvl: uproot.LZ4(lvl),
                "zstd": lambda lvl: uproot.ZSTD(lvl), "none": lambda lvl: None}

# (collection, mean multiplicity, fields: name -> kind)
COLLECTIONS = (
    ("Muon", 2.0, {"pt": "pt", "eta": "eta", "phi": "phi", "mass": "small", "charge": "charge", "pfRelIso": "iso",
                   "dxy": "ip", "dz": "ip", "tightId": "flag"}),
    ("Electron", 1.5, {"pt": "pt", "eta": "eta", "phi": "phi", "mass": "small", "charge": "charge",
                       "pfRelIso": "iso", "mvaId": "score"}),
    ("Photon", 1.2, {"pt": "pt", "eta": "eta", "phi": "phi", "r9": "score"}),
    ("Jet", 7.0, {"pt": "pt", "eta": "eta", "phi": "phi", "mass": "mass", "btagDeepB": "score", "jetId": "small_int",
                  "nConstituents": "count"}),
    ("Track", 25.0, {"pt": "pt", "eta": "eta", "phi": "phi", "dxy": "ip", "dz": "ip", "nHits": "count"}),
)
FIXED = (("HLT_bits", np.bool_, 128), ("Calo_towers", np.float32, 48))


def _values(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    """Physics-like values at physics-like precision (NanoAOD keeps 10–12 mantissa bits, so do we)."""
    if kind == "pt":
        v = 5 + rng.exponential(25, n)
    elif kind == "eta":
        v = rng.normal(0, 1.6, n)
    elif kind == "phi":
        v = rng.uniform(-np.pi, np.pi, n)
    elif kind == "mass":
        v = rng.gamma(4, 4, n)
    elif kind == "small":
        v = np.abs(rng.normal(0.1, 0.02, n))
    elif kind == "iso":
        v = rng.exponential(0.15, n)
    elif kind == "ip":
        v = rng.normal(0, 0.02, n)
    elif kind == "score":
        v = rng.beta(0.5, 2, n)
    elif kind == "charge":
        return rng.choice(np.array([-1, 1], np.int32), n)
    elif kind == "flag":
        return rng.random(n) < 0.8
    elif kind == "small_int":
        return rng.integers(0, 7, n, dtype=np.int32)
    elif kind == "count":
        return rng.poisson(12, n).astype(np.int32)
    else:  # pragma: no cover - the table above is closed
        raise ValueError(kind)
    v = v.astype(np.float32)
    return (v.view(np.uint32) & np.uint32(0xFFFFF000)).view(np.float32)  # 11 mantissa bits


def make_events(rng: np.random.Generator, n: int, first_event: int) -> dict[str, Any]:
    """One batch of ``n`` events."""
    out: dict[str, Any] = {
        "run": np.full(n, 1, np.int32),
        "luminosityBlock": (first_event + np.arange(n)) // 1000 + 1,
        "event": np.arange(first_event, first_event + n, dtype=np.int64),
        "PV_npvs": rng.poisson(30, n).astype(np.int32),
        "PV_z": _values(rng, "ip", n) * 100,
        "MET_pt": _values(rng, "pt", n),
        "MET_phi": _values(rng, "phi", n),
        "MET_sumEt": _values(rng, "pt", n) * 20,
        "genWeight": np.ones(n, np.float32),
    }
    out["luminosityBlock"] = out["luminosityBlock"].astype(np.int32)
    for coll, mean, fields in COLLECTIONS:
        counts = rng.poisson(mean, n)
        total = int(counts.sum())
        out[coll] = ak.zip({f: ak.unflatten(_values(rng, kind, total), counts) for f, kind in fields.items()})
    for name, dtype, width in FIXED:
        if dtype is np.bool_:
            out[name] = rng.random((n, width)) < 0.05
        else:
            out[name] = np.abs(_values(rng, "pt", n * width).reshape(n, width)) * (rng.random((n, width)) < 0.3)
    return out


def _branch_types(batch: dict[str, Any]) -> dict[str, Any]:
    types: dict[str, Any] = {}
    for name, value in batch.items():
        if isinstance(value, ak.Array):
            types[name] = value.type
        elif value.ndim == 1:
            types[name] = value.dtype
        else:
            types[name] = (value.dtype, value.shape[1:])
    return types


@dataclass(frozen=True)
class GenParams:
    files: int  # how many files of the pool are needed (the pool may hold more)
    file_size: int
    cluster_size: int
    compression: str
    compression_level: int
    seed: int
    layout: tuple[tuple[str, Any], ...] = ()  # the target's Driver.layout(), as sorted (name, value) pairs

    @staticmethod
    def pairs(layout: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
        return tuple(sorted(layout.items()))

    def content(self) -> dict[str, Any]:
        """What the bytes of every file depend on (all but the count and the layout)."""
        return {"file_size": self.file_size, "cluster_size": self.cluster_size, "compression": self.compression,
                "compression_level": self.compression_level, "seed": self.seed}

    def key(self) -> str:
        blob = {**self.content(), "schema": SCHEMA_VERSION, **({"layout": dict(self.layout)} if self.layout else {})}
        return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:12]

    def directory(self) -> str:
        return join(DATA_DIR, f"skim-{self.key()}")


def write_file(path: str, g: GenParams, index: int) -> dict[str, Any]:
    """Write one event file of about ``g.file_size`` bytes; return its entry for the manifest."""
    rng = np.random.default_rng([g.seed & 0xFFFFFFFF, index, 0x500F])
    probe = make_events(rng, 200, 0)
    event_bytes = max(1, sum(v.nbytes for v in probe.values()) // 200)  # uncompressed, as in memory
    per_cluster = max(10, g.cluster_size // event_bytes)
    compression = COMPRESSIONS[g.compression](g.compression_level)
    events = 0
    with uproot.recreate(path, compression=compression) as f:
        first = make_events(rng, per_cluster, 0)
        f.mktree(TREE, _branch_types(first), title="storeval skim events")
        f[TREE].extend(first)
        events = per_cluster
        while True:
            size = os.path.getsize(path)
            per_event = max(1.0, size / events)
            if size + per_event * per_cluster / 2 >= g.file_size:
                break
            batch = min(per_cluster, max(10, int((g.file_size - size) / per_event)))
            f[TREE].extend(make_events(rng, batch, events))
            events += batch
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return {"name": f"events-{index:03d}.root", "bytes": os.path.getsize(path), "events": events,
            "sha256": digest.hexdigest(), "events_per_cluster": per_cluster}


def read_manifest(driver: Driver, directory: str) -> dict[str, Any] | None:
    """The manifest of a kept data directory (None when there is none or it does not parse)."""
    return read_json(driver, join(directory, "manifest.json"))


def read_json(driver: Driver, path: str) -> dict[str, Any] | None:
    """A small JSON file on the target (None when there is none or it does not parse)."""
    try:
        size = driver.stat(path).size
    except FileNotFoundError:
        return None
    buf = bytearray(size)
    n = driver.get_into(path, buf)
    try:
        return json.loads(bytes(buf[:n]))
    except ValueError:
        return None


def ensure_dataset(driver: Driver, g: GenParams, *, regenerate: bool = False, log=lambda message: None) -> dict[str, Any]:
    """The manifest of a dataset with these parameters and layout on ``driver``'s target holding at least
    ``g.files`` files, writing the missing ones (all of them with ``regenerate``)."""
    directory = g.directory()
    manifest = None if regenerate else read_manifest(driver, directory)
    files: list[dict[str, Any]] = []
    if (manifest is not None and manifest.get("schema") == SCHEMA_VERSION and manifest.get("params") == g.content()
            and manifest.get("layout") == dict(g.layout)):
        files = _intact(driver, directory, manifest.get("files", []))
        if len(files) >= g.files:
            return manifest
    count = g.files - len(files)
    layout = ", ".join(f"{k} {'default' if v is None else v}" for k, v in g.layout)
    log(f"writing {plural(count, 'ROOT event file')} of about {format_size(g.file_size)} ({g.compression}"
        f"{'; ' + layout if layout else ''}) to {driver.url}/{directory}"
        + (f", beside the {len(files)} there" if files else ""))
    for d in (DATA_DIR, directory):
        driver.ensure_dir(d)
    manifest = {"schema": SCHEMA_VERSION, "params": g.content(), "layout": dict(g.layout), "tree": TREE,
                "files": files, "generated_at": datetime.now(timezone.utc).isoformat()}
    with tempfile.TemporaryDirectory(prefix="storeval-skim-") as tmp:
        for i in range(len(files), g.files):
            local = os.path.join(tmp, f"events-{i:03d}.root")
            entry = write_file(local, g, i)
            remote = join(directory, entry["name"])
            driver.remove_quietly(remote)  # a file of ours the manifest no longer vouches for (size, layout)
            _upload(driver, local, remote)
            os.unlink(local)
            files.append(entry)
            driver.put(join(directory, "manifest.json"), json.dumps(manifest, indent=1).encode())  # kept if stopped
    return manifest


def _intact(driver: Driver, directory: str, files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The leading files of a manifest that are on the target at their recorded size."""
    out = []
    for i, entry in enumerate(files):
        try:
            if entry.get("name") != f"events-{i:03d}.root" or driver.stat(join(directory, entry["name"])).size != entry["bytes"]:
                break
        except FileNotFoundError:
            break
        out.append(entry)
    return out


def _upload(driver: Driver, local: str, remote: str, chunk: int = 16 << 20) -> None:
    """Copy a local file to the target through the driver, front to back."""
    h = driver.open(remote, "w")
    try:
        write = driver.writer(h)
        buf = bytearray(chunk)
        with open(local, "rb") as fh:
            offset = 0
            while True:
                n = fh.readinto(buf)
                if not n:
                    break
                write([memoryview(buf)[:n]], offset)
                offset += n
        driver.fsync(h)
    finally:
        driver.close(h)
