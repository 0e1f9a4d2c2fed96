"""The skim workload: real ROOT files, three access strategies, CMSSW-style counters, every target."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import uproot
import yaml

from storeval.drivers import make_driver
from storeval.workloads.rootfiles import GenParams, read_manifest

from .helpers import load_json, storeval

SMALL = ["--set", "files=3", "--set", "file_size=4MiB", "--set", "cluster_size=512KiB"]


def run_skim(tmp_path: Path, target: str, *args: str, clients: str = "2") -> tuple[dict, str]:
    out = tmp_path / "out.json"
    r = storeval("run", "--target", target, "--workload", "skim", "--clients", clients, *args, "--json", str(out),
                 cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    return load_json(out), r.out + r.err


def skim_phase(doc: dict) -> dict:
    (cell,) = doc["cells"]
    assert cell["status"] == "ok", cell["error"]
    (phase,) = cell["phases"]
    return phase


def test_issue_check_figures(tmp_path, target):
    doc, _ = run_skim(tmp_path, f"file://{target}", "--set", "files=3", "--set", "file_size=8MiB",
                      "--set", "fraction=0.5")
    ph = skim_phase(doc)
    assert ph["events"] > 0 and ph["events_per_s"] > 0 and ph["MBps"] > 0
    assert 0 < ph["cpu_efficiency"] <= 1
    assert 0 < ph["bytes_needed"] <= ph["bytes_requested"]
    assert ph["bytes_moved"] is not None and ph["read_amplification"] == ph["bytes_moved"] / ph["bytes_needed"]
    assert set(ph["counters"]) >= {"read-numOperations", "read-totalMegabytes", "readv-numOperations",
                                   "readv-numChunks", "readv-totalMegabytes"}
    for c in ph["client_stats"]:
        assert 0 < c["cpu_efficiency"] <= 1 and c["events_per_s"] > 0 and c["MBps"] > 0
        assert c["bytes_needed"] <= c["bytes_requested"]
    assert ph["MBps_per_client"]["mean"] > 0 and ph["MBps_per_client"]["stderr"] is not None


def test_files_are_real_root_files_with_the_declared_branches_and_are_reused(tmp_path, target):
    doc, output = run_skim(tmp_path, str(target), *SMALL)
    assert "writing 3 ROOT event files" in output
    params = doc["cells"][0]["params"]
    g = GenParams(files=3, file_size=4 << 20, cluster_size=512 << 10, compression=params["compression"],
                  compression_level=params["compression_level"], seed=params["random_seed"])
    directory = target / g.directory()
    manifest = json.loads((directory / "manifest.json").read_text())
    assert [f["name"] for f in manifest["files"]] == ["events-000.root", "events-001.root", "events-002.root"]
    for entry in manifest["files"]:
        path = directory / entry["name"]
        assert path.stat().st_size == entry["bytes"] and abs(entry["bytes"] - (4 << 20)) < 0.15 * (4 << 20)
        tree = uproot.open(path)["Events"]
        assert tree.num_entries == entry["events"]
        types = {k: str(tree[k].interpretation) for k in tree.keys()}
        assert types["event"] == "AsDtype('>i8')"
        assert types["nMuon"] == "AsDtype('>i4')" and types["Muon_pt"] == "AsJagged(AsDtype('>f4'))"
        assert types["HLT_bits"] == "AsDtype(\"('?', (128,))\")"  # numpy's code for bool
        assert types["Calo_towers"] == "AsDtype(\"('>f4', (48,))\")"
        muons = tree.arrays(["nMuon", "Muon_pt"], library="ak")
        assert (muons.nMuon.to_numpy() == [len(x) for x in muons.Muon_pt]).all()  # the counter counts
        assert len(tree.common_entry_offsets()) > 3  # several clusters
    stamp = manifest["generated_at"]
    _, output = run_skim(tmp_path, str(target), *SMALL)
    assert "writing" not in output
    assert json.loads((directory / "manifest.json").read_text())["generated_at"] == stamp
    _, output = run_skim(tmp_path, str(target), *SMALL, "--regenerate")
    assert "writing 3 ROOT event files" in output
    assert json.loads((directory / "manifest.json").read_text())["generated_at"] != stamp


def test_half_the_bytes_and_strategy_request_patterns(tmp_path, target):
    by = {}
    for strategy in ("basket", "ttreecache", "uproot"):
        doc, _ = run_skim(tmp_path, str(target), *SMALL, "--set", f"strategy={strategy}", "--set", "fraction=0.5",
                          clients="1")
        by[strategy] = skim_phase(doc)
    params = doc["cells"][0]["params"]
    g = GenParams(files=3, file_size=4 << 20, cluster_size=512 << 10, compression=params["compression"],
                  compression_level=params["compression_level"], seed=params["random_seed"])
    total = selected_baskets = 0
    from storeval.workloads.toolkit import baskets, select_branches

    for entry in json.loads((target / g.directory() / "manifest.json").read_text())["files"]:
        tree = uproot.open(target / g.directory() / entry["name"])["Events"]
        total += sum(b[3] for k in tree.keys() for b in baskets(tree[k]))
        selected_baskets += sum(len(baskets(tree[k])) for k in select_branches(tree, 0.5, params["random_seed"]))
    for ph in by.values():  # the same selection whatever the strategy
        assert abs(ph["bytes_needed"] - total / 2) <= 0.10 * total / 2
        assert ph["bytes_needed"] == by["basket"]["bytes_needed"] and ph["events"] == by["basket"]["events"]
    basket, cache = by["basket"]["counters"], by["ttreecache"]["counters"]
    assert basket["read-numOperations"] == selected_baskets and basket["readv-numOperations"] == 0
    requests = lambda c: c["read-numOperations"] + c["readv-numOperations"]
    size = lambda c: (c["read-totalMegabytes"] + c["readv-totalMegabytes"]) / requests(c)
    assert requests(cache) < requests(basket) and size(cache) > size(basket)
    assert cache["readv-numChunks"] + cache["read-numOperations"] == selected_baskets  # every basket once
    assert by["uproot"]["counters"]["readv-numOperations"] > 0


def test_each_client_reads_each_file_once_in_its_own_order(tmp_path, target):
    doc, _ = run_skim(tmp_path, str(target), "--set", "files=4", "--set", "file_size=1MiB", "--set",
                      "cluster_size=256KiB", clients="3")
    orders = [c["files_order"] for c in skim_phase(doc)["client_stats"]]
    names = [f"events-{i:03d}.root" for i in range(4)]
    assert all(sorted(o) == names for o in orders)
    assert len({tuple(o) for o in orders}) == 3


def test_sparse_event_reading(tmp_path, target):
    doc, _ = run_skim(tmp_path, str(target), *SMALL, "--set", "event_fraction=0.01", "--set", "strategy=basket",
                      clients="1")
    sparse = skim_phase(doc)
    doc, _ = run_skim(tmp_path, str(target), *SMALL, "--set", "fraction=1", "--set", "strategy=basket", clients="1")
    full = skim_phase(doc)
    assert 0 < sparse["events"] < 0.02 * full["events"]
    # 1 % of the events still needs most baskets: sparse reading saves little I/O (the EOS finding)
    assert sparse["bytes_needed"] > 0.5 * full["bytes_needed"]


def test_cpu_per_event_spends_that_cpu_on_every_event(tmp_path, target):
    """The analysis cost is CPU time, not wall time, so this holds on a busy host too (where the efficiency itself,
    CPU ÷ wall, honestly falls with the share of a core the client gets)."""
    doc, _ = run_skim(tmp_path, str(target), *SMALL, "--set", "cpu_per_event=200us", clients="1")
    busy = skim_phase(doc)
    assert busy["cpu_seconds"] / busy["events"] >= 200e-6 and busy["events_per_s"] < 1 / 200e-6
    assert 0 < busy["cpu_efficiency"] <= 1.05


# ROOT's compression block header: two magic bytes per algorithm; fCompress = algorithm × 100 + level
MAGIC = {"zlib": b"ZL", "lz4": b"L4", "zstd": b"ZS"}
ALGORITHM = {"zlib": 1, "lz4": 4, "zstd": 5}


def baskets(path: Path) -> list[tuple[int, int, bytes]]:
    """(bytes stored, bytes uncompressed, first two stored bytes) of every basket of every branch of the file's
    Events tree, read from the file's own TKey headers, not from what uproot says the file was written with."""
    import struct

    raw = path.read_bytes()
    out = []
    for branch in uproot.open(path)["Events"].itervalues(recursive=True):
        for seek in branch.member("fBasketSeek")[: branch.num_baskets]:
            nbytes, _, objlen, _, keylen = struct.unpack(">ihiiH", raw[seek:seek + 16])
            out.append((nbytes - keylen, objlen, raw[seek + keylen:seek + keylen + 2]))
    return out


def test_compressions(tmp_path, target):
    """The files are written with the compression named (one run sweeping it, a cell each): the file's header
    declares it, and every basket stored smaller than its data carries that algorithm's block header (none:
    level 0, every basket stored as it is)."""
    out = tmp_path / "out.json"
    r = storeval("run", "--target", str(target), "--workload", "skim", "--clients", "1", "--set", "files=1",
                 "--set", "file_size=1MiB", "--set", "compression=lz4,zstd,none", "--json", str(out), "--quiet",
                 "--no-html", cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    cells = load_json(out)["cells"]
    assert sorted(c["params"]["compression"] for c in cells) == ["lz4", "none", "zstd"]
    for cell in cells:
        params = cell["params"]
        compression = params["compression"]
        assert skim_phase({"cells": [cell]})["events"] > 0
        g = GenParams(files=1, file_size=1 << 20, cluster_size=params["cluster_size"], compression=compression,
                      compression_level=params["compression_level"], seed=params["random_seed"])
        (path,) = (target / g.directory()).glob("*.root")
        declared = uproot.open(path).file.fCompress
        found = baskets(path)
        assert len(found) > 10  # every branch has baskets
        stored, whole = sum(b[0] for b in found), sum(b[1] for b in found)
        if compression == "none":
            assert declared % 100 == 0  # level 0: ROOT stores the data as it is, whatever the algorithm
            assert all(n == objlen for n, objlen, _ in found)
        else:
            assert declared == ALGORITHM[compression] * 100 + params["compression_level"]
            assert all(magic == MAGIC[compression] for n, objlen, magic in found if n < objlen)
            assert stored < 0.9 * whole  # and the algorithm made the data smaller


def test_same_skim_on_every_testbed_server(tmp_path, testbed_targets):
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"targets": testbed_targets}))
    out = tmp_path / "out.json"
    r = storeval("run", str(study), "--workload", "skim", "--clients", "2", "--set", "files=2", "--set",
                 "file_size=2MiB", "--set", "cluster_size=256KiB", "--json", str(out), "--quiet", cwd=tmp_path,
                 timeout=900)
    assert r.rc == 0, r.err
    doc = load_json(out)
    needed = {c["target"]: skim_phase({"cells": [c]})["bytes_needed"] for c in doc["cells"]}
    events = {c["target"]: skim_phase({"cells": [c]})["events"] for c in doc["cells"]}
    assert set(needed) == {"minio", "xrootd", "xrootd-davs", "hdfs"}
    assert len(set(needed.values())) == 1 and len(set(events.values())) == 1
    for cell in doc["cells"]:
        ph = skim_phase({"cells": [cell]})
        # moved = what crossed the loopback interface to the server: at least what was requested
        assert ph["bytes_moved"] >= 0.95 * ph["bytes_requested"] and ph["read_amplification"] >= 0.95
        assert ph["counters"]["readv-numOperations"] > 0  # TTreeCache's vector reads through every driver
    # the event files stay on the targets for later runs, with a manifest
    for name, entry in testbed_targets.items():
        options = {k: v for k, v in entry.items() if k != "url"}
        driver = make_driver(entry["url"], options)
        driver.connect()
        params = doc["cells"][0]["params"]
        g = GenParams(files=2, file_size=2 << 20, cluster_size=256 << 10, compression=params["compression"],
                      compression_level=params["compression_level"], seed=params["random_seed"],
                      layout=GenParams.pairs(driver.layout()))  # each target's files where its layout puts them
        assert len(read_manifest(driver, g.directory())["files"]) == 2
        driver.shutdown()
    assert os.path.exists(out)


# -- issue 13: each client its own files, data sets keyed on the target's layout, client-bound and storage-side figures

def test_files_per_client_gives_each_client_its_own_files_and_the_pool_grows(tmp_path, target):
    tiny = ["--set", "file_size=1MiB", "--set", "cluster_size=256KiB"]
    doc, output = run_skim(tmp_path, str(target), *tiny, "--set", "files_per_client=1", clients="2")
    assert "writing 2 ROOT event files" in output
    doc, output = run_skim(tmp_path, str(target), *tiny, "--set", "files_per_client=1", clients="3")
    assert "writing 1 ROOT event file " in output and "beside the 2 there" in output  # only the missing file
    ph = skim_phase(doc)
    assert [c["files_order"] for c in ph["client_stats"]] == [["events-000.root"], ["events-001.root"],
                                                              ["events-002.root"]]
    assert [w for w in ph["warnings"] if w["code"] == "shared-files"] == []  # the clean twin: nothing shared
    (directory,) = (target / "storeval-data").iterdir()
    manifest = json.loads((directory / "manifest.json").read_text())
    assert [f["name"] for f in manifest["files"]] == [f"events-{i:03d}.root" for i in range(3)]
    assert manifest["layout"] == {}  # a file-system target: no option changes how files sit
    # the flawed run: three clients re-reading the same two files (and the same pool: nothing written)
    doc, output = run_skim(tmp_path, str(target), *tiny, "--set", "files=2", clients="3")
    assert "writing" not in output
    ph = skim_phase(doc)
    (shared,) = [w for w in ph["warnings"] if w["code"] == "shared-files"]
    from storeval.units import sig

    assert shared["message"] == (  # in MB, as the skim's table says its bytes
        f"3 clients read 2 files: each file was read by 3 clients; {sig(ph['bytes_moved'] / 1e6)} MB of the "
        f"{sig(ph['bytes_needed'] / 1e6)} MB needed came from disk. One client's reads warm the caches another reads "
        "from, so these figures are partly those of data in memory; set files_per_client to give each client its own "
        "files (the seeds' one file per job)")
    assert "⚠ shared-files" in output


def test_files_and_files_per_client_together_are_refused(tmp_path, target):
    r = storeval("run", "--target", str(target), "--workload", "skim", "--set", "files=2", "--set",
                 "files_per_client=1", cwd=tmp_path)
    assert r.rc == 2
    assert r.err_lines == ["error: --workload skim: set files (every client reads all of them) or files_per_client "
                             "(each client its own files), not both"]
    assert not (target / "storeval-data").exists()


def test_a_dataset_is_keyed_on_the_targets_layout(tmp_path, target):
    """Files written with one layout are never reused for another: a different directory, the layout recorded."""
    from storeval.workloads.rootfiles import ensure_dataset

    driver = make_driver(f"file://{target}", {})
    driver.connect()
    g = lambda layout: GenParams(files=1, file_size=512 << 10, cluster_size=128 << 10, compression="zlib",
                                 compression_level=4, seed=0, layout=GenParams.pairs(layout))
    said: list[str] = []
    one = ensure_dataset(driver, g({"replication": 1, "block_size": None}), log=said.append)
    two = ensure_dataset(driver, g({"replication": 2, "block_size": None}), log=said.append)
    again = ensure_dataset(driver, g({"block_size": None, "replication": 1}), log=said.append)
    assert len(said) == 2 and "replication 1, block_size default" not in said[0]  # sorted: block_size first
    assert "(zlib; block_size default, replication 1)" in said[0] and "replication 2)" in said[1]
    assert one["layout"] == {"block_size": None, "replication": 1} and two["layout"]["replication"] == 2
    assert again == one
    dirs = {g({"replication": r, "block_size": None}).directory() for r in (1, 2)} | {g({}).directory()}
    assert len(dirs) == 3
    assert sorted(p.name for p in (target / "storeval-data").iterdir()) == sorted(d.split("/")[-1] for d in dirs
                                                                               if d != g({}).directory())
    driver.shutdown()


def test_hdfs_datasets_of_replication_1_and_2_are_apart_and_have_their_replication(tmp_path, testbed_targets):
    hdfs = testbed_targets["hdfs"]
    study = tmp_path / "study.yaml"
    study.write_text(yaml.safe_dump({"targets": {"r1": {**hdfs, "replication": 1}, "r2": {**hdfs, "replication": 2}}}))
    out = tmp_path / "out.json"
    args = ("--workload", "skim", "--clients", "1", "--set", "files=1", "--set", "file_size=1MiB", "--set",
            "cluster_size=256KiB", "--set", "random_seed=1313", "--json", str(out))
    r = storeval("run", str(study), *args, cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    assert (r.out + r.err).count("writing 1 ROOT event file ") == 2  # replication 2 did not reuse replication 1's
    from hdfs_native import Client

    for name, replication in (("r1", 1), ("r2", 2)):
        driver = make_driver(hdfs["url"], {"replication": replication})
        driver.connect()
        layout = driver.layout()
        assert layout == {"replication": replication, "block_size": None}
        g = GenParams(files=1, file_size=1 << 20, cluster_size=256 << 10, compression="zlib", compression_level=4,
                      seed=1313, layout=GenParams.pairs(layout))
        manifest = read_manifest(driver, g.directory())
        assert manifest["layout"] == layout
        status = Client(driver.namenode).get_file_info(driver.native(f"{g.directory()}/events-000.root"))
        assert status.replication == replication and status.length == manifest["files"][0]["bytes"]
        driver.shutdown()
    r = storeval("run", str(study), *args, cwd=tmp_path, timeout=900)  # each target reuses its own
    assert r.rc == 0, r.err
    assert "writing" not in r.out + r.err


def _skim_record(rank: int, cpu: float, name: str) -> "PhaseRecord":  # noqa: F821 - imported inside (the test module stays light)
    from storeval.core.records import NS, PhaseRecord
    from storeval.histogram import Histogram

    hist = Histogram()
    hist.record(1_000_000)
    return PhaseRecord(rank=rank, host="h", phase="skim", bytes=50_000_000, ops=100, start_ns=0, end_ns=10 * NS,
                       barrier_ns=10 * NS, cpu_user=cpu, hist=hist,
                       extra={"events": 100_000, "bytes_needed": 40_000_000, "bytes_requested": 50_000_000,
                              "bytes_moved": None, "requests": 120, "io_wait_ns": 2 * NS, "files_order": [name],
                              "counters": {"read-numOperations": 100, "readv-numOperations": 0}, "cache": "none"})


@pytest.mark.parametrize("cpu, bound", [(9.5, True), (3.0, False)])
def test_client_bound_is_said_beside_events_per_second_with_the_storage_side_figures(cpu, bound):
    from storeval.analysis.figures import cell_figures, summarize_run
    from storeval.report.terminal import phase_tables
    from storeval.store import CellRow

    records = [_skim_record(0, cpu, "events-000.root"), _skim_record(1, cpu, "events-001.root")]
    cell = CellRow(cell_id=1, config=0, target="t", target_url="file:///t", workload="skim", kind="skim",
                   params={"strategy": "ttreecache"}, factors={"clients": 2}, clients=2, repetition=0, status="ok",
                   error=None, phases=[("skim", 0, "ok", None)], records=records)
    figures = cell_figures(cell)
    ph = figures.phases[0].as_dict()
    assert ph["client_cpu_share"] == cpu / 10 and ph["client_bound"] is bound
    assert [w["code"] for w in ph["warnings"]] == (["client-bound"] if bound else [])
    # what the client does not change: bytes, requests, the time waiting on I/O and the rate while waiting
    assert ph["bytes_requested"] == 100_000_000 and ph["requests"] == 240
    assert ph["io_wait_seconds"] == 4.0 and ph["io_wait_fraction"] == 0.2
    assert ph["io_bound_MBps"] == 100_000_000 / 1e6 / 2.0
    assert [c["io_wait_seconds"] for c in ph["client_stats"]] == [2.0, 2.0]
    assert [c["io_bound_MBps"] for c in ph["client_stats"]] == [25.0, 25.0]
    (table,) = phase_tables(summarize_run([figures]))
    row = dict(zip(table["columns"], table["rows"][0]))
    assert row["events/s"] == ("20,000 (client-bound, CPU 95%)" if bound else "20,000")
    assert row["requests"] == "240" and row["I/O wait"] == "20%" and row["MB/s I/O-bound"] == "50.0"


def test_storage_side_figures_of_a_real_skim(tmp_path, target):
    doc, output = run_skim(tmp_path, str(target), *SMALL[2:], "--set", "files_per_client=1", clients="2")
    ph = skim_phase(doc)
    c = ph["counters"]
    assert ph["requests"] == c["read-numOperations"] + c["readv-numOperations"] + c["open-numOperations"] > 0
    assert ph["requests"] == sum(s["requests"] for s in ph["client_stats"])
    for s in ph["client_stats"]:
        assert 0 < s["io_wait_seconds"] <= s["seconds"]
        assert s["io_bound_MBps"] == s["bytes_requested"] / 1e6 / s["io_wait_seconds"]
    wait = sum(s["io_wait_seconds"] for s in ph["client_stats"])
    assert ph["io_wait_seconds"] == wait and ph["io_wait_fraction"] == wait / (ph["seconds"] * 2)
    assert ph["io_bound_MBps"] == ph["bytes_requested"] / 1e6 / (wait / 2)
    assert isinstance(ph["client_bound"], bool) and ph["client_bound"] == any(
        w["code"] == "client-bound" for w in ph["warnings"])
    (summary,) = doc["summary"]
    assert summary["io_wait_seconds"]["mean"] == wait and summary["requests"]["mean"] == ph["requests"]
    assert "I/O wait" in output and "MB/s I/O-bound" in output
    (html,) = (tmp_path / "storeval-results").glob("report-*.html")  # the HTML prints the same rows
    assert "<th>I/O wait</th>" in html.read_text() and "<th>MB/s I/O-bound</th>" in html.read_text()
