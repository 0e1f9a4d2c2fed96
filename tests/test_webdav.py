"""The HTTP/WebDAV driver (davs://, dav://) against the testbed's real XRootD serving HTTPS through XrdHttp."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from storeval.drivers import make_driver

from .helpers import everything_written, load_json, storeval

MiB = 1 << 20
TOKEN = "sv-bearer-4f1c9e2a7d.only-in-the-environment"


def study(tmp_path: Path, targets: dict, **rest) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"targets": targets, **rest}))
    return path


def test_the_same_files_are_reachable_as_root_and_as_davs(testbed_targets):
    """A file written over root:// reads back byte for byte over davs://, and the other way round."""
    root, davs = (dict(testbed_targets[n]) for n in ("xrootd", "xrootd-davs"))
    assert davs["url"].startswith("davs://") and davs["url"].endswith(":1094/storeval")
    assert Path(davs["ca_file"]).is_file() and davs["server_pids"] == root["server_pids"]
    x = make_driver(root.pop("url"), root)
    d = make_driver(davs.pop("url"), davs)
    x.connect()
    d.connect()
    one, two = os.urandom(2 * MiB + 5), os.urandom(MiB + 3)
    name = f"both-{os.getpid()}"
    try:
        x.put(f"{name}.root", one)
        h = d.open(f"{name}.davs", "w")
        for off in range(0, len(two), 256 << 10):
            d.pwrite(h, memoryview(two)[off:off + (256 << 10)], off)
        d.close(h)
        buf = bytearray(len(one))
        assert d.get_into(f"{name}.root", buf) == len(one) and bytes(buf) == one
        assert x.stat(f"{name}.davs").size == len(two)
        buf = bytearray(len(two))
        assert x.get_into(f"{name}.davs", buf) == len(two) and bytes(buf) == two
        assert {f"{name}.root", f"{name}.davs"} <= set(d.listdir("")) == set(x.listdir(""))
        assert d.describe()["server"].startswith("XrootD/")
    finally:
        for suffix in ("root", "davs"):
            x.remove_quietly(f"{name}.{suffix}")
        x.shutdown()
        d.shutdown()


def test_a_write_handle_is_front_to_back_and_an_empty_file_is_a_file(testbed_targets):
    davs = dict(testbed_targets["xrootd-davs"])
    d = make_driver(davs.pop("url"), davs)
    d.connect()
    name = f"ftb-{os.getpid()}"
    try:
        h = d.open(name, "w")
        d.pwrite(h, b"abc", 0)
        with pytest.raises(Exception, match="front to back"):
            d.pwrite(h, b"x", 10)
        d.pwrite(h, b"def", 3)
        d.close(h)
        assert d.stat(name).size == 6
        h = d.open(f"{name}.empty", "w")
        d.close(h)
        assert d.stat(f"{name}.empty").size == 0 and not d.stat(f"{name}.empty").is_dir
        with pytest.raises(FileNotFoundError):
            d.open(f"{name}.missing", "r")
        d.mkdir(f"{name}.d")
        assert d.stat(f"{name}.d").is_dir
        d.put(f"{name}.d/inner", b"1")
        with pytest.raises(OSError, match="not empty"):
            d.rmdir(f"{name}.d")  # a WebDAV DELETE would take the whole tree: rmdir refuses first
        with pytest.raises(OSError, match="not empty"):
            d.fast_ops().rmdir(d.native(f"{name}.d"))
        with pytest.raises(IsADirectoryError):
            d.remove(f"{name}.d")  # a file's removal never deletes a directory
        assert d.exists(f"{name}.d/inner")
    finally:
        for p in (name, f"{name}.empty", f"{name}.d/inner"):
            d.remove_quietly(p)
        d.rmdir_quietly(f"{name}.d")
        d.shutdown()


def test_the_wlcg_http_study_puts_both_protocols_side_by_side_with_equal_bytes(tmp_path, testbed, testbed_targets):
    """The ready study's bandwidth, metadata and skim on root:// and davs:// of one server (the session's, here):
    the same bytes and operations in every phase, and the bytes the server's own trace says it was asked to read
    agree with what the clients read within 2 %, on each protocol."""
    spec = yaml.safe_load(Path("studies/wlcg-http.yaml").read_text())
    spec["targets"] = {"root": testbed_targets["xrootd"], "davs": testbed_targets["xrootd-davs"]}
    spec["clients"] = [2]
    spec["workloads"]["bw"]["bandwidth"]["file_size"] = "4MiB"
    spec["workloads"]["md"]["metadata"]["items"] = 100
    spec["workloads"]["skim"]["skim"]["file_size"] = "4MiB"
    path = tmp_path / "wlcg-http.yaml"
    path.write_text(yaml.safe_dump(spec))
    server = testbed.load()["xrootd"]
    storeval("run", str(path), "--target", "root", "--workload", "skim", "--quiet", cwd=tmp_path, timeout=900)  # lay out
    cells: dict[tuple, dict] = {}
    outputs = []
    for name in ("root", "davs"):
        out = tmp_path / f"{name}.json"
        mark = server.trace_mark()
        r = storeval("run", str(path), "--target", name, "--json", str(out), cwd=tmp_path, timeout=900)
        assert r.rc == 0, r.err
        outputs.append(r.out)
        asked = sum(n for op, _, n in server.trace_ops(mark) if op in ("read", "readV", "pgread"))
        read = 0
        for cell in load_json(out)["cells"]:
            assert cell["status"] == "ok", (cell["target"], cell["error"])
            cells[(cell["target"], cell["workload"], json.dumps(cell["params"], sort_keys=True))] = cell
            read += sum(p["bytes"] for p in cell["phases"] if p["phase"] in ("read", "file-read", "skim"))
        assert read > 8 * MiB and abs(asked - read) <= 0.02 * read, (name, asked, read)
    keys = {k[1:] for k in cells}
    assert len(keys) == 4 and {k[0] for k in cells} == {"root", "davs"}
    for key in keys:
        root, davs = cells[("root", *key)], cells[("davs", *key)]
        phases_root = {p["phase"]: (p["bytes"], p["ops"]) for p in root["phases"] if p["status"] == "ok"}
        phases_davs = {p["phase"]: (p["bytes"], p["ops"]) for p in davs["phases"] if p["status"] == "ok"}
        assert phases_root == phases_davs and phases_root, key
    # one report puts both protocols side by side
    both = storeval("report", "--runs", "all", cwd=tmp_path)
    assert both.rc == 0 and "root" in both.out and "davs" in both.out, both.err


def test_a_bearer_token_from_the_environment_or_a_file_reaches_no_output(tmp_path, testbed_targets):
    davs = dict(testbed_targets["xrootd-davs"])
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "-file\n")
    token_file.chmod(0o600)
    targets = {"env": {**davs, "token_env": "SV_TEST_BEARER"}, "file": {**davs, "token_file": str(token_file)}}
    out = tmp_path / "out.json"
    r = storeval("run", str(study(tmp_path, targets)), "--workload", "bandwidth", "--set", "file_size=2MiB",
                 "--json", str(out), cwd=tmp_path, env={"SV_TEST_BEARER": TOKEN})
    assert r.rc == 0, r.err
    blob = everything_written(tmp_path, r.out, r.err)
    assert "environment variable SV_TEST_BEARER" in blob and f"token_file {token_file}" in blob  # where it came from
    assert TOKEN not in blob  # never the token itself (nor the file's, which begins with it)


def test_refusals_are_one_line(tmp_path, testbed_targets):
    davs = dict(testbed_targets["xrootd-davs"])
    no_ca = {k: v for k, v in davs.items() if k not in ("ca_file", "ca_dir")}
    r = storeval("run", str(study(tmp_path, {"x": no_ca})), "--workload", "bandwidth", "--set", "file_size=1MiB",
                 cwd=tmp_path, env={"X509_CERT_DIR": ""})
    assert r.rc != 0
    lines = [line for line in (r.out + r.err).splitlines() if "certificate is not trusted" in line]
    assert lines and "give its CA as ca_file" in lines[0], r.out + r.err
    cases = [
        ({"token_env": "SV_NOT_SET_ANYWHERE"}, "environment variable SV_NOT_SET_ANYWHERE is not set"),
        ({"token_env": "HOME", "token_file": "/etc/hostname"}, "give token_file or token_env, not both"),
        ({"ca_file": str(tmp_path / "nope.pem")}, "is not a readable file"),
        ({"token_file": str(tmp_path / "missing")}, "is not a file"),
    ]
    for extra, words in cases:
        r = storeval("run", str(study(tmp_path, {"x": {**davs, **extra}})), "--dry-run", cwd=tmp_path)
        assert r.rc == 2 and len(r.err_lines) == 1 and words in r.err_lines[0], (extra, r.err)
        assert "Traceback" not in r.err
    r = storeval("run", str(study(tmp_path, {"x": {"url": "davs://user:pw@host/x"}})), "--dry-run", cwd=tmp_path)
    assert r.rc == 2 and "pw" not in r.err and "never in the URL" in r.err


def test_vector_reads_are_multi_range_gets_and_a_split_is_said(tmp_path, testbed_targets):
    """With multi-range GETs the skim's bytes are those of root://'s kXR_readv; with multi_range off every range
    is a GET of its own, the same bytes, and each such phase carries the vector-split warning."""
    davs = dict(testbed_targets["xrootd-davs"])
    targets = {"multi": davs, "split": {**davs, "multi_range": False}, "root": testbed_targets["xrootd"]}
    out = tmp_path / "out.json"
    r = storeval("run", str(study(tmp_path, targets, workloads={"s": {"skim": {
        "files_per_client": 1, "file_size": "4MiB", "cluster_size": "256KiB", "fraction": 0.3,
        "learn_entries": 20, "strategy": "ttreecache"}}})), "--json", str(out), cwd=tmp_path, timeout=600)
    assert r.rc == 0, r.err
    doc = load_json(out)
    by = {c["target"]: c for c in doc["cells"]}
    read = {t: next(p for p in c["phases"] if p["phase"] == "skim") for t, c in by.items()}
    assert read["multi"]["bytes"] == read["split"]["bytes"] == read["root"]["bytes"] > 0
    codes = {t: {w["code"] for w in p.get("warnings", [])} for t, p in read.items()}
    assert "vector-split" in codes["split"] and "vector-split" not in codes["multi"]
    env = json.dumps(doc.get("environment", {}))
    assert "multi-range GET" in env and "one GET per range" in env
    assert shutil.which("xrootd")  # the testbed's server ran (the session fixture would have failed otherwise)


def test_davix_and_gfal2_read_beside_storeval_with_the_token_in_their_environment_only(tmp_path, testbed_targets):
    """The ready study wlcg-clients: davix-get and gfal2 (Python binding) read the same files as storeval's driver;
    each command's bytes are the files', the CA reaches them as X509_CERT_DIR, the token as BEARER_TOKEN."""
    spec = yaml.safe_load(Path("studies/wlcg-clients.yaml").read_text())
    spec["targets"] = {"davs": {**testbed_targets["xrootd-davs"], "token_env": "SV_TEST_BEARER"}}
    spec["clients"] = [2]
    path = tmp_path / "wlcg-clients.yaml"
    path.write_text(yaml.safe_dump(spec))
    out = tmp_path / "out.json"
    r = storeval("run", str(path), "--set", "file_size=8MiB", "--set", "storeval.chunk_size=8MiB", "--json", str(out),
                 cwd=tmp_path, env={"SV_TEST_BEARER": TOKEN}, timeout=900)
    assert r.rc == 0, r.err
    cells = {c["workload"]: c for c in load_json(out)["cells"]}
    assert set(cells) == {"davix", "gfal2", "storeval"}
    for name, cell in cells.items():
        assert cell["status"] == "ok", (name, cell["error"])
        (phase,) = [p for p in cell["phases"] if p["status"] == "ok"]
        assert phase["bytes"] == 2 * 8 * MiB, name
    blob = everything_written(tmp_path, r.out, r.err)
    assert "davix-get --capath" in blob and "environment variable SV_TEST_BEARER" in blob
    assert TOKEN not in blob


def test_plain_http_works_for_whole_files_and_refuses_streams_xrdhttp_breaks(tmp_path, testbed_targets):
    """dav:// (no TLS) to the same server: metadata's whole-file PUTs and GETs give the same bytes as davs://;
    a streamed write is refused in one line naming why and what to use (XrdHttp 5.5 resets chunked uploads
    without TLS), and the run goes on."""
    url = testbed_targets["xrootd-davs"]["url"].replace("davs://", "dav://")
    targets = {"plain": {"url": url, "server_pids": testbed_targets["xrootd-davs"]["server_pids"]}}
    out = tmp_path / "out.json"
    r = storeval("run", str(study(tmp_path, targets)), "--workload", "metadata", "--workload", "bandwidth",
                 "--set", "items=20", "--set", "file_size=1MiB", "--json", str(out), cwd=tmp_path)
    assert r.rc == 1, r.err
    cells = {c["workload"]: c for c in load_json(out)["cells"]}
    assert cells["metadata"]["status"] == "ok"
    read = next(p for p in cells["metadata"]["phases"] if p["phase"] == "file-read")
    assert read["bytes"] == 20 * MiB
    assert "streamed writes over plain HTTP to XrootD/v5.5" in cells["bandwidth"]["error"]
    assert "write through davs://" in cells["bandwidth"]["error"]
