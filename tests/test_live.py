"""The live view (issue 34): each second of a running cell, every client's rates and errors — as JSON lines, as
Prometheus gauges, and as the table under the progress bars — read from the counters the clients keep anyway."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from storeval.report.live import MAX_ROWS, LiveView, Sample, rows_of

from .helpers import load_json, storeval

# a paced cell of known length: 2 clients × 600 operations at 400/s each = 1.5 s per phase, two phases
PACED = ("--target", "null://live", "--workload", "bandwidth", "--clients", "2", "--set", "file_size=2400KiB",
         "--set", "transfer_size=4KiB", "--set", "phases=write,read", "--set", "iops=400", "--no-html")


def test_live_json_to_stdout_is_one_json_object_per_line_and_adds_up(tmp_path):
    r = storeval("run", *PACED, "--live-json", "-", "--json", str(tmp_path / "run.json"), "--results",
                 str(tmp_path / "res"), cwd=tmp_path)
    assert r.rc == 0, r.err
    lines = [json.loads(line) for line in r.out.splitlines()]  # every line of stdout parses on its own
    assert lines, "a 3-second run streamed nothing"
    phases = [s["phase"] for s in lines]
    assert set(phases) <= {"write", "read"} and phases == sorted(phases, key=["write", "read"].index)
    last: dict[tuple[str, int], int] = {}
    for s in lines:
        assert s["cell"] == 0 and s["interval_s"] >= 1.0
        assert [c["rank"] for c in s["clients"]] == [0, 1]
        for key in ("bytes", "ops", "errors", "MiBps", "ops_per_s"):
            assert s["total"][key] == pytest.approx(sum(c[key] for c in s["clients"]))
        for c in s["clients"]:
            assert c["bytes"] == c["ops"] * 4096 and c["errors"] == 0 and c["host"]
            assert c["ops"] <= 600 and c["ops"] >= last.get((s["phase"], c["rank"]), 0)  # grows within a phase
            last[(s["phase"], c["rank"])] = c["ops"]
    assert any(c["ops_per_s"] > 0 for s in lines for c in s["clients"])
    doc = load_json(tmp_path / "run.json")
    assert all(ph["ops"] == 1200 for ph in doc["cells"][0]["phases"])  # the run itself is as without the view


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_metrics_serves_each_clients_gauges_while_the_cell_runs(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", *PACED, "--quiet", "--metrics",
                             f"127.0.0.1:{port}", "--results", str(tmp_path / "res")], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = ""
    try:
        while proc.poll() is None:  # until the gauges show, or the run ends without them
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                    text = resp.read().decode()
            except OSError:
                time.sleep(0.1)
                continue
            if 'storeval_client_ops{cell="0",client="1"' in text:
                seen = text
                break
            time.sleep(0.1)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert seen, "the run ended without its gauges ever showing"
    for name in ("bytes", "ops", "errors", "bytes_per_second", "ops_per_second"):
        assert f'storeval_client_{name}{{cell="0",client="0",group="",host=' in seen
    with pytest.raises(OSError):  # the endpoint goes with the run
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def test_beyond_a_screenful_the_table_has_a_row_per_group():
    clients = [{"rank": r, "host": "h", "group": "bulk" if r < 12 else "skim", "bytes": 1 << 20, "ops": 10,
                "errors": r % 2, "MiBps": 1.0, "ops_per_s": 10.0} for r in range(MAX_ROWS + 4)]
    first, rows = rows_of(Sample(0.0, 3, "c", "read", 1.0, clients))
    assert first == "group"
    assert rows == [["bulk", "12 clients", "12.0", "120", "12.0", "6"], ["skim", "8 clients", "8.0", "80", "8.0", "4"]]
    first, rows = rows_of(Sample(0.0, 3, "c", "read", 1.0, clients[:MAX_ROWS]))
    assert first == "client" and len(rows) == MAX_ROWS


@pytest.mark.parametrize("args, message", [
    (("--metrics", "nonsense"), "--metrics nonsense: not [HOST]:PORT (e.g. :9464 or 127.0.0.1:9464)"),
    (("--live-json", "/nonexistent-dir/x.jsonl"), "--live-json /nonexistent-dir/x.jsonl: cannot write it"),
    (("--live-json", "-", "--json", "-"), "--live-json - and --json - both want stdout"),
])
def test_bad_live_options_are_one_line(tmp_path, args, message):
    r = storeval("run", *PACED, *args, "--results", str(tmp_path / "res"), cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and message in r.err_lines[0], r.err


def test_a_port_in_use_is_one_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(Exception, match=f"--metrics 127.0.0.1:{port}: cannot listen there"):
            LiveView(metrics=f"127.0.0.1:{port}")
    assert not os.path.exists(tmp_path / "res")
