"""A trace from a real client (issue 18, item 4): a skim by plain uproot — its own XRootD source, not storeval —
reads several branches of the skim's ROOT files from the testbed XRootD server, whose ``xrootd.trace fs fsio
request`` log is the trace. ``replay`` reads that log and replays it on XRootD, POSIX (the same files copied to a
local directory, mapped) and S3 (MinIO, the files laid out at the trace's sizes): the bytes read are the trace's
exactly on all three, XRootD's own log of the replay shows the same vector reads (requests and elements) and
reads as the original, and the open-loop lag and the fidelity (replay time vs the original) are reported. The
ready study ``studies/seed003-replay.yaml`` replays a committed trace recorded this way."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from storeval.drivers import make_driver
from storeval.traces import load_trace
from storeval.traces.model import READ, READV, Trace
from storeval.workloads.rootfiles import GenParams, ensure_dataset

from .helpers import load_json, storeval

STUDIES = Path(__file__).resolve().parent.parent / "studies"
BRANCHES = ["Muon_pt", "Muon_eta", "Jet_pt", "Jet_btagDeepB", "MET_pt", "PV_npvs"]
# uproot's default for root:// URLs is fsspec-xrootd (the xrootd extra installs it), which sends a file's requests
# concurrently on one connection; its own XRootDSource (the XRootD bindings) sends them one after another.
UPROOT_SKIM = """
import sys, uproot
from uproot.source.xrootd import XRootDSource
options = {{"handler": XRootDSource}} if {handler!r} == "XRootDSource" else {{}}
for url in sys.argv[1:]:
    with uproot.open(url, **options) as f:
        arrays = f["Events"].arrays({branches!r}, library="np")
        print(url, len(arrays["MET_pt"]))
"""


def log_excerpt(server, mark, into: Path) -> Path:
    """What the server logged since ``mark`` (a trace_mark), as a file of its own."""
    (log,) = server.trace_logs().values()
    (start,) = mark
    with open(log, "rb") as f:
        f.seek(start)
        into.write_bytes(f.read())
    return into


def data_counts(trace: Trace, under: str) -> dict[str, int]:
    """Reads and vector reads of the event files whose name contains ``under``: what the server was asked (a key
    directory laid out by an earlier replay has its manifest read once more)."""
    files = {i for i, f in enumerate(trace.files) if under in f.name and not f.name.endswith("manifest.json")}
    out = {"read_ops": 0, "read_bytes": 0, "readv_elements": 0, "readv_bytes": 0}
    requests: set[int] = set()
    for s in trace.streams:
        for row in s.ops:
            if int(row["file"]) not in files:
                continue
            if row["kind"] == READ:
                out["read_ops"] += 1
                out["read_bytes"] += int(row["length"])
            elif row["kind"] == READV:
                out["readv_elements"] += 1
                out["readv_bytes"] += int(row["length"])
                requests.add(int(row["request"]))
    out["readv_requests"] = len(requests)
    return out


def record_uproot_skim(testbed, testbed_targets, tmp_path: Path, handler: str = "XRootDSource") -> tuple[Path, list[str]]:
    """Two of the skim's event files on the testbed XRootD, read by plain uproot; returns the server's log of it
    and the files' paths relative to the target."""
    entry = testbed_targets["xrootd"]
    driver = make_driver(entry["url"], {k: v for k, v in entry.items() if k != "url"})
    driver.connect()
    g = GenParams(files=2, file_size=3 << 20, cluster_size=256 << 10, compression="zlib", compression_level=4, seed=18,
                  layout=GenParams.pairs(driver.layout()))
    manifest = ensure_dataset(driver, g)
    driver.shutdown()
    names = [f"{g.directory()}/{f['name']}" for f in manifest["files"][:2]]
    server = testbed.load()["xrootd"]
    mark = server.trace_mark()
    urls = [f"{server.url}//storeval/{name}" for name in names]
    done = subprocess.run([sys.executable, "-c", UPROOT_SKIM.format(branches=BRANCHES, handler=handler), *urls], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return log_excerpt(server, mark, tmp_path / "uproot-skim.log"), names


@pytest.mark.parametrize("handler", ["XRootDSource", "default"])
def test_a_real_uproot_trace_replays_with_the_same_bytes_and_vector_reads(tmp_path, testbed, testbed_targets, handler):
    log, names = record_uproot_skim(testbed, testbed_targets, tmp_path, handler)
    original = load_trace(str(log))
    assert original.format == "xrootd" and original.resolution == 1.0
    orig = data_counts(original, "/storeval-data/skim-")
    assert orig["readv_requests"] > 0 and orig["readv_elements"] > orig["readv_requests"]  # uproot's vector reads
    want_read = original.bytes(READ) + original.bytes(READV)
    assert want_read == orig["read_bytes"] + orig["readv_bytes"]  # the trace holds only the skim's reads
    # the same files on a local directory, where the map puts the trace's names
    server = testbed.load()["xrootd"]
    local = tmp_path / "local"
    for name in names:
        (local / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(server.data_dir / "storeval" / name, local / name)
    mapped = {"files": "map", "map": {"/storeval/": ""}}
    study = {
        "targets": {"xrootd": testbed_targets["xrootd"], "minio": testbed_targets["minio"],
                    "posix": {"url": f"file://{local}"}},
        "clients": [len(original.streams)],
        "workloads": {"mapped": {"replay": {"trace": str(log), **mapped}},
                      "laid-out": {"replay": {"trace": str(log), "files": "create"}}}}
    (tmp_path / "study.yaml").write_text(yaml.safe_dump(study))
    mark = server.trace_mark()
    ran = {}
    # the original files are on xrootd and the local copy (mapped); minio gets them laid out at the trace's sizes,
    # and so does xrootd once more, in its own key directory
    for targets, workload in ((("xrootd", "posix"), "mapped"), (("minio", "xrootd"), "laid-out")):
        out = tmp_path / f"{workload}.json"
        r = storeval("run", str(tmp_path / "study.yaml"), *(a for t in targets for a in ("--target", t)),
                     "--workload", workload, "--json", str(out), "--quiet", "--results", str(tmp_path / "results"),
                     cwd=tmp_path, timeout=900)
        assert r.rc == 0, r.err[-3000:]
        for cell in load_json(out)["cells"]:
            assert cell["status"] == "ok", cell["error"]
            ran[(cell["target"], cell["workload"])] = cell["phases"][0]
    # minio has only laid-out files (nothing of the original is there); xrootd and posix read the original files
    wanted = [("xrootd", "mapped"), ("posix", "mapped"), ("minio", "laid-out"), ("xrootd", "laid-out")]
    for key in wanted:
        ph = ran[key]
        assert ph["bytes_read"] == want_read and ph["bytes_equal"] == 1, key
        assert (ph["readv_requests"], ph["readv_elements"]) == (orig["readv_requests"], orig["readv_elements"]), key
        assert ph["lag_p99_ms"] is not None and ph["lag_max_ms"] >= ph["lag_p99_ms"], key
        assert ph["fidelity"] > 0 and ph["trace_seconds"] >= 1.0, key
    assert ran[("xrootd", "mapped")]["vector"] == "native" and ran[("posix", "mapped")]["vector"] == "split"
    assert ran[("minio", "laid-out")]["probes"]["server_read_bytes"] == want_read  # MinIO sent the trace's bytes
    # XRootD's own log of the replay: the same reads and vector reads of the same files as the original
    again = load_trace(str(log_excerpt(server, mark, tmp_path / "replay.log")))
    replayed = data_counts(again, "/storeval-data/skim-")
    laid = data_counts(again, "/storeval-data/replay-")  # the laid-out cell on xrootd, the same pattern
    assert replayed == orig
    assert laid == orig


def test_the_ready_seed003_replay_study(tmp_path):
    """studies/seed003-replay.yaml brings up XRootD and MinIO itself and replays the committed uproot trace on both."""
    out = tmp_path / "out.json"
    r = storeval("run", str(STUDIES / "seed003-replay.yaml"), "--json", str(out), "--quiet", "--results",
                 str(tmp_path / "results"), cwd=tmp_path, timeout=1200)
    assert r.rc == 0, r.err[-3000:]
    doc = load_json(out)
    trace = load_trace(str(STUDIES / "traces" / "seed003-uproot-skim.log"))
    want = trace.bytes(READ) + trace.bytes(READV)
    assert sorted((c["target"], c["factors"]["mode"]) for c in doc["cells"]) == [
        ("minio", "closed"), ("minio", "open"), ("xrootd", "closed"), ("xrootd", "open")]
    for cell in doc["cells"]:
        assert cell["status"] == "ok", cell["error"]
        ph = cell["phases"][0]
        assert ph["bytes_read"] == want and ph["bytes_equal"] == 1
        assert ph["readv_requests"] == trace.requests(READV) and ph["readv_elements"] == trace.elements(READV)
        assert ph["fidelity"] is not None
        assert (ph.get("lag_p99_ms") is not None) == (cell["factors"]["mode"] == "open")
        if cell["target"] == "minio":  # MinIO's own counters: it sent the trace's bytes, no more (moved × 1)
            assert ph["probes"]["server_read_bytes"] == want and ph["read_amplification"] == 1.0
            assert not [f for f in ph["flags"] if f["code"] == "replay-moved"]
