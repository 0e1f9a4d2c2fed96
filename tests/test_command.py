"""The command workload: real client programs (xrdcp, aws-cli, cp, dd) as the load, against the testbed's XRootD
and MinIO and local files — bytes as the server saw them, the commands' own CPU and I/O, failures, hangs and
refusals in one line, and values that stay one argument."""

from __future__ import annotations

import os
import re
import shutil
import secrets
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from .helpers import leftovers, load_json, poll, storeval

MiB = 1 << 20
SIZE = 3 * MiB + 4321  # not a multiple of any client's buffer: the last read is short


@pytest.fixture
def xrdcp(testbed) -> str:
    """xrdcp: the testbed's XRootD installs it (Debian's xrootd-client) when the session's servers come up, so a
    fresh machine has it by the time these tests run (a skip decided at collection would skip them there)."""
    path = shutil.which("xrdcp")
    assert path, "the testbed's XRootD installs xrootd-client, which has xrdcp"
    return path
needs_aws = pytest.mark.skipif(shutil.which("aws") is None, reason="aws-cli (pip install awscli) is missing")


def study(tmp_path: Path, targets: dict, workloads: dict, **top) -> Path:
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"targets": targets, "workloads": workloads, **top}))
    return path


def run(tmp_path: Path, path: Path, *args: str, rc: int = 0):
    out = tmp_path / "out.json"
    r = storeval("run", str(path), "--json", str(out), "--results", str(tmp_path / "res"), "--quiet", *args,
                 cwd=tmp_path, timeout=900)
    assert r.rc == rc, r.err
    return r, (load_json(out) if rc == 0 else None)


def phases(doc: dict) -> dict[str, dict]:
    return {p["phase"]: p for c in doc["cells"] for p in c["phases"]}


def read_bytes(ops) -> int:
    return sum(n for op, _, n in ops if op in ("read", "pgread", "readV"))


# -- XRootD: xrdcp against the testbed server -----------------------------------------------------------------
def test_xrdcp_moves_exactly_the_bytes_the_server_saw_and_reports_its_cpu(tmp_path, xrdcp, testbed,
                                                                          testbed_targets):
    server = testbed.load()["xrootd"]
    entry = testbed_targets["xrootd"]
    path = study(tmp_path, {"xrootd": entry}, {"xrdcp": {"command": {
        "write": "xrdcp -s -f {local} {url}", "read": "xrdcp -s -f {url} /dev/null",
        "files_per_client": 3, "file_size": SIZE}}}, clients=[2])
    mark = server.trace_mark()
    _, doc = run(tmp_path, path)
    ops = server.trace_ops(mark)
    files = 2 * 3 * SIZE
    p = phases(doc)
    for name in ("write", "read"):
        ph = p[name]
        assert ph["status"] == "ok" and ph["bytes"] == ph["file_bytes"] == files
        assert ph["ops"] == ph["commands"] == 6 and ph["failures"] == 0
        assert ph["cmd_cpu_seconds"] > 0 and ph["cmd_cpu_seconds_per_GB"] > 0
        assert ph["command"].startswith("xrdcp -s -f ") and entry["url"] in ph["command"]
        # what the server's processes moved through syscalls for the phase: the files' bytes and little more
        assert ph["moved_bytes"] is not None and files <= ph["moved_bytes"] <= 1.05 * files, ph["moved_bytes"]
        assert ph["latency_us"]["p50"] > 0 and ph["latency_us"]["p99"] >= ph["latency_us"]["p50"]
    # the server's trace: every byte xrdcp read and wrote, exactly (storeval's own driver only stats and removes)
    assert read_bytes(ops) == files
    assert sum(n for op, _, n in ops if op == "pgwrite") == files  # xrdcp 5 writes with pgwrite
    assert [op for op in ops if op[0] == "write"] == [("write", 0, ops[0][2])] and ops[0][2] < 1024  # the run's owner
    # record, written by storeval itself when it claims its scratch directory
    # xrdcp writes what it reads to /dev/null through write(2): the commands' wchar holds every byte read
    assert p["read"]["syscall_bytes"]["wchar"] >= files
    assert p["write"]["syscall_bytes"]["rchar"] >= files  # the local sources, read through read(2)
    data = Path(server.state.info["data"])
    # nothing of the run's scratch is left; storeval-data/ holds the input data other tests on this shared server keep
    assert [p for p in leftovers(data) if "/storeval-data" not in p] == []


# -- local files: cp and dd -------------------------------------------------------------------------------------
def local_dirs() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("storeval-command-")}


def test_cp_writes_and_dd_reads_local_files_with_their_own_io_counted(tmp_path, target):
    before = local_dirs()
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"cpdd": {"command": {
        "write": "cp {local} {url}", "read": "dd if={url} of=/dev/null bs=1M", "files_per_client": 2,
        "file_size": SIZE}}}, clients=[2])
    _, doc = run(tmp_path, path)
    p = phases(doc)
    files = 2 * 2 * SIZE
    for name in ("write", "read"):
        assert p[name]["bytes"] == p[name]["file_bytes"] == files and p[name]["commands"] == 4
        assert p[name]["cmd_cpu_seconds_per_GB"] > 0
    # dd read every byte of the files through read(2) and wrote them to /dev/null, plus its statistics on stderr
    io = p["read"]["syscall_bytes"]
    assert files <= io["wchar"] < files + 4 * 4096
    assert io["rchar"] >= files
    io = p["write"]["syscall_bytes"]
    assert files <= io["wchar"] < files + 4 * 4096  # cp wrote the files and nothing else
    # cp does not flush: the write figure may hold data still in the page cache, and says so
    assert [w["code"] for w in p["write"]["warnings"]] == ["write-back"]
    assert p["read"]["command"].startswith(f"dd if={target}/storeval-")
    assert p["read"]["command"].endswith("/command-0-0 of=/dev/null bs=1M")
    assert leftovers(target) == []
    assert local_dirs() <= before  # the local sources are gone with the cell


def test_a_value_with_spaces_and_semicolons_stays_one_argument(tmp_path):
    """The target's directory is named like an attack on a shell: each command still gets the path as one
    argument (cat succeeds only then), with and without shell: true, and nothing else runs."""
    top = tmp_path / "a; touch PWNED; b $(touch PWNED2)"
    top.mkdir()
    url = "file://" + str(top).replace("%", "%25").replace(" ", "%20").replace(";", "%3B").replace("$", "%24") \
        .replace("(", "%28").replace(")", "%29")
    for shell in (False, True):
        path = study(tmp_path, {"odd": {"url": url}}, {"cat": {"command": {
            "run": "cat {url}", "shell": shell, "files_per_client": 2, "file_size": 65536}}})
        _, doc = run(tmp_path, path)
        ph = phases(doc)["read"]
        assert ph["bytes"] == 2 * 65536 and ph["failures"] == 0
        assert ph["syscall_bytes"]["wchar"] == 2 * 65536  # cat wrote each file to its stdout, /dev/null
    assert not list(tmp_path.rglob("PWNED*"))
    assert not (Path.cwd() / "PWNED").exists()


# -- failures, hangs, refusals -------------------------------------------------------------------------------
def test_a_failing_command_fails_the_cell_in_one_line_with_its_status_and_stderr(tmp_path, target):
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"fails": {"command": {
        "run": "sh -c 'echo warming up >&2; echo cannot open {index}: no luck >&2; exit 3'", "files_per_client": 3,
        "file_size": 4096}}})
    r, _ = run(tmp_path, path, rc=1)
    assert r.err_lines == ["cell 0 (local · fails · 1 client) failed: client 0 failed in read: sh (file 0) exited "
                           "with status 3: cannot open 0: no luck"]
    assert leftovers(target) == []


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _running(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker in Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                    found.append(int(pid))
            except OSError:
                pass
    return found


def test_a_hanging_command_is_killed_at_its_timeout_with_its_children(tmp_path, target):
    marker = f"sleep {4000 + secrets.randbelow(1000)}.{secrets.randbelow(1000):03d}"
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"hangs": {"command": {
        "run": f"sh -c '{marker} & {marker}; echo never'", "files_per_client": 1, "file_size": 4096,
        "timeout": "1s"}}})
    r, _ = run(tmp_path, path, rc=1)
    assert r.err_lines == ["cell 0 (local · hangs · 1 client) failed: client 0 failed in read: sh (file 0) did not "
                           "finish within its timeout of 1 s and was killed: (nothing on stderr)"]
    assert _running(marker) == []  # the command's whole process group, the background sleep included


def test_a_stopped_run_kills_the_commands_it_started(tmp_path, target):
    marker = f"sleep {5000 + secrets.randbelow(1000)}.{secrets.randbelow(1000):03d}"
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"hangs": {"command": {
        "run": marker, "files_per_client": 1, "file_size": 4096}}}, clients=[2])
    # a shell's background jobs ignore SIGINT and children inherit that (storeval keeps an ignored SIGINT ignored,
    # as nohup wants): give the run the terminal's default
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", str(path), "--results", str(tmp_path / "res"),
                             "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        poll(lambda: len(_running(marker)) == 2, "both clients' commands to run")
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGINT, err
    assert _running(marker) == []


@pytest.mark.parametrize("run_line,message", [
    ("xrdcp {url} {dest}", "error: workloads.w: run: unknown placeholder {dest} (known: {url}, {path}, {host}, {port}, "
                           "{local}, {rank}, {index}, {size}; write {{ for a literal brace)"),
    ("cp {url!r} /dev/null", "error: workloads.w: run: 'cp {url!r} /dev/null': {url!r} is not a placeholder (write one "
                             "of {url}, {path}, {host}, {port}, {local}, {rank}, {index}, {size})"),
    ("no-such-client-xyz {url}", "error: workloads.w: run: no-such-client-xyz is not on PATH (install it, or give its "
                                 "full path)"),
    ("cp 'x {url}", "error: workloads.w: run: \"cp 'x {url}\" cannot be split into arguments (No closing quotation: "
                    "close the quote)"),
])
def test_bad_templates_and_missing_programs_are_refused_in_one_line(tmp_path, target, run_line, message):
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"w": {"command": {"run": run_line}}})
    r, _ = run(tmp_path, path, rc=2)
    assert r.err_lines == [message]
    assert not (tmp_path / "res").exists() and leftovers(target) == []


@pytest.mark.parametrize("extra,message", [
    ({"env": {"A=B": "x"}}, "error: workloads.w: env: 'A=B' is not an environment variable name (no '=', no NUL "
                            "byte, not empty: write e.g. env: {MY_VAR: value})"),
    ({"env": {"": "x"}}, "error: workloads.w: env: '' is not an environment variable name (no '=', no NUL byte, not "
                         "empty: write e.g. env: {MY_VAR: value})"),
    ({"env": {"A": "x\0y"}}, "error: workloads.w: env: the value of A has a NUL byte, which no environment can hold "
                             "(remove it)"),
    # the commands' I/O is not through storeval's driver: a recording would hold nothing and claim an overhead
    ({"record": True}, "error: workloads.w: record: true cannot record the command workload: its commands do their "
                       "I/O themselves, not through storeval's driver, so nothing would be recorded (drop record, or "
                       "trace the program with its own tools)"),
])
def test_bad_env_and_record_are_refused_in_one_line_before_anything_runs(tmp_path, target, extra, message):
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"w": {"command": {
        "run": "cat {url}", "file_size": 4096, **extra}}})
    r, _ = run(tmp_path, path, rc=2)
    assert r.err_lines == [message]
    assert not (tmp_path / "res").exists() and leftovers(target) == []


def test_a_known_client_that_is_missing_is_named_with_how_to_get_it(tmp_path, target):
    bare = {"PATH": str(tmp_path / "empty-bin")}
    (tmp_path / "empty-bin").mkdir()
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"w": {"command": {"run": "xrdcp {url} /dev/null"}}})
    r = storeval("run", str(path), "--results", str(tmp_path / "res"), cwd=tmp_path, env=bare)
    assert r.rc == 2 and r.err_lines == ["error: workloads.w: run: xrdcp is not on PATH (install it: apt-get install "
                                         "xrootd-client)"]


def test_a_target_no_tool_can_reach_is_refused_in_one_line(tmp_path):
    path = study(tmp_path, {"n": {"url": "null://a"}}, {"w": {"command": {"run": "cat {url}", "file_size": 4096}}})
    r, _ = run(tmp_path, path, rc=1)
    assert r.err_lines == ["cell 0 (n · w · 1 client) failed: client 0 failed in prepare: target n cannot be reached "
                           "by outside tools (the command workload needs a target whose files a program can name: "
                           "file://, root://, davs://, s3://, hdfs://, nfs://)"]


# -- S3: aws-cli against the testbed MinIO, its keys through the environment only ---------------------------------
@needs_aws
def test_aws_cli_on_minio_gets_the_keys_only_through_its_environment(tmp_path, testbed_targets, testbed_credentials):
    entry = testbed_targets["minio"]
    path = study(tmp_path, {"minio": entry}, {"aws": {"command": {
        "write": "aws s3 cp --only-show-errors {local} {url}", "read": "aws s3 cp --only-show-errors {url} {local}",
        "files_per_client": 2, "file_size": SIZE}}})
    out = tmp_path / "out.json"
    html = tmp_path / "report.html"
    r = storeval("run", str(path), "--json", str(out), "--html", str(html), "--results", str(tmp_path / "res"),
                 cwd=tmp_path, timeout=900)
    assert r.rc == 0, r.err
    doc = load_json(out)
    p = phases(doc)
    for name in ("write", "read"):
        assert p[name]["bytes"] == p[name]["file_bytes"] == 2 * SIZE and p[name]["failures"] == 0
        assert p[name]["cmd_cpu_seconds_per_GB"] > 0
        assert p[name]["command"].startswith("aws s3 cp --only-show-errors ")
    assert "s3://" in p["read"]["command"]
    # MinIO's own metrics say what it moved: the files, and the little the CLI asked besides (HEAD, listing)
    assert p["read"]["moved_bytes"] is not None and 2 * SIZE <= p["read"]["moved_bytes"] <= 1.05 * 2 * SIZE
    texts = [r.out, r.err, out.read_text(), html.read_text()]
    texts += [f.read_bytes().decode("latin-1") for f in (tmp_path / "res").rglob("*") if f.is_file()]
    for secret in testbed_credentials:
        assert all(secret not in t for t in texts)


def test_a_write_command_that_leaves_a_short_file_fails_the_cell_after_the_phase(tmp_path, target):
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"short": {"command": {
        "run": "dd if={local} of={url} bs=1000 count=1", "phase": "write", "files_per_client": 2,
        "file_size": 8192}}})
    r, _ = run(tmp_path, path, rc=1)
    assert len(r.err_lines) == 1 and r.err_lines[0].startswith(
        "cell 0 (local · short · 1 client) failed: client 0 failed in write: the write command left "
        f"{target}/storeval-")
    assert r.err_lines[0].endswith("/command-0-0 with 1,000 bytes, not 8,192")
    assert leftovers(target) == []


# -- seed 004: the site's client beside storeval's own driver -----------------------------------------------------
@needs_aws
@pytest.mark.skipif(os.geteuid() != 0, reason="the study's testbed systems and cold reads need root")
def test_seed004_puts_xrdcp_and_aws_cli_beside_storevals_own_drivers(tmp_path, xrdcp):
    study_file = Path(__file__).resolve().parent.parent / "studies" / "seed004-clients.yaml"
    size = 8 * MiB
    out = tmp_path / "out.json"
    r = storeval("run", str(study_file), "--clients", "1,2", "--set", f"file_size={size}", "--set",
                 f"chunk_size={size}", "--results", str(tmp_path / "res"), "--json", str(out), "--quiet",
                 cwd=tmp_path, timeout=1500)
    assert r.rc == 0, r.err[-3000:]
    doc = load_json(out)
    cells = {(c["target"], c["workload"], c["clients"]): c for c in doc["cells"]}
    assert set(cells) == {(t, w, n) for t in ("xrootd", "minio") for w in ("client", "storeval") for n in (1, 2)}
    for (target, workload, n), c in cells.items():
        assert c["status"] == "ok", (target, workload, n)
        (ph,) = c["phases"]
        assert ph["phase"] == ("read" if workload == "client" else "download")
        assert ph["bytes"] == n * size, (target, workload, n)  # the same bytes, whoever reads them
        # the server's own counters saw the same bytes move for both (its processes' I/O, MinIO's metrics)
        assert abs(ph["read_amplification"] - 1) <= 0.05, (target, workload, n, ph["read_amplification"])
        if workload == "client":
            assert ph["file_bytes"] == n * size and ph["commands"] == n and ph["failures"] == 0
            assert ph["cmd_cpu_seconds_per_GB"] > 0 and ph["syscall_bytes"]["wchar"] >= n * size
            assert ph["moved_bytes"] == pytest.approx(ph["read_amplification"] * ph["bytes"])
            assert ph["command"].split()[0] == ("xrdcp" if target == "xrootd" else "aws")
        else:
            assert ph["cpu_seconds_per_GB"] > 0
    rows = {(row["target"], row["workload"]) for row in doc["table"]}
    assert rows == {(t, w) for t in ("xrootd", "minio") for w in ("client", "storeval")}


def test_parallel_commands_run_at_once(tmp_path, target):
    """Each command marks that it started and waits until three have: only three at once get past it (one at a
    time would wait until its timeout), and every file is counted."""
    wait = ("touch {local}.go; while [ $(ls $(dirname {local}) | grep -c 'go$') -lt 3 ]; do sleep 0.05; done; "
            "cat {url}")
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"par": {"command": {
        "run": wait, "shell": True, "parallel": 3, "files_per_client": 6, "file_size": 65536, "timeout": "120s"}}})
    _, doc = run(tmp_path, path)
    ph = phases(doc)["read"]
    assert ph["commands"] == ph["ops"] == 6 and ph["bytes"] == 6 * 65536 and ph["failures"] == 0
    assert ph["command"].startswith("/bin/sh -c 'touch /")


def test_the_io_and_cpu_of_a_commands_own_children_are_counted(tmp_path, target):
    """/proc/PID/io and wait4's rusage of the command include the children it waited for: sh running cat twice
    per file counts both cats' bytes."""
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"twice": {"command": {
        "run": "sh -c 'cat \"$0\"; cat \"$0\"' {url}", "files_per_client": 3, "file_size": 65536}}})
    _, doc = run(tmp_path, path)
    ph = phases(doc)["read"]
    assert ph["bytes"] == 3 * 65536
    assert ph["syscall_bytes"]["wchar"] == 2 * 3 * 65536  # both cats wrote each file to stdout (/dev/null)
    assert ph["syscall_ratio"] >= 4  # ... after reading it twice


# -- how outside tools name each target's files (Driver.tool_address / tool_env) ----------------------------------
def test_each_driver_gives_outside_tools_an_address_and_only_the_s3_keys_in_the_environment(monkeypatch, tmp_path):
    from storeval.drivers import make_driver
    from storeval.errors import CapabilityError
    from storeval.redact import redact_text

    assert make_driver(f"file://{tmp_path}", {}).tool_address("d/f") == f"{tmp_path}/d/f"
    assert make_driver("root://10.1.2.3:1094//data/x", {}).tool_address("d/f") == "root://10.1.2.3:1094//data/x/d/f"
    assert make_driver("hdfs://127.0.0.1:9000/storeval", {}).tool_address("d/f") == "hdfs://127.0.0.1:9000/storeval/d/f"
    assert make_driver("nfs://127.0.0.1:2050/export/run", {}).tool_address("d/f") == \
        "nfs://127.0.0.1/export/run/d/f?version=4&nfsport=2050"
    assert make_driver("nfs://127.0.0.1/export/run", {"version": "3"}).tool_address("f") == \
        "nfs://127.0.0.1/export/run/f?version=3&nfsport=2049"
    for url in (f"file://{tmp_path}", "root://10.1.2.3:1094//data", "hdfs://127.0.0.1:9000/x"):
        assert make_driver(url, {}).tool_env() == {}
    with pytest.raises(CapabilityError) as e:
        make_driver("null://a", {}).tool_address("f")
    assert str(e.value).startswith("target null://a cannot be reached by outside tools")

    monkeypatch.setenv("MY_KEY", "AKIAEXAMPLEKEY123")
    monkeypatch.setenv("MY_SECRET", "s3cr3t/Value+with=odd")
    s3 = make_driver("s3://bucket/prefix", {"endpoint": "http://127.0.0.1:9000", "region": "eu-west-3",
                                            "access_key_env": "MY_KEY", "secret_key_env": "MY_SECRET"})
    assert s3.tool_address("d/f") == "s3://bucket/prefix/d/f"
    assert s3.tool_env() == {"AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY123", "AWS_SECRET_ACCESS_KEY": "s3cr3t/Value+with=odd",
                             "AWS_ENDPOINT_URL": "http://127.0.0.1:9000", "AWS_DEFAULT_REGION": "eu-west-3",
                             "AWS_REGION": "eu-west-3"}
    # once read, the keys are masked in everything this process prints or stores
    assert redact_text("key AKIAEXAMPLEKEY123 secret s3cr3t/Value+with=odd") == "key *** secret ***"


# -- nothing of a command outlives its client -------------------------------------------------------------------
def _scratch(root: Path) -> list[str]:
    """What storeval's runs left under a target directory (its storeval-<run> directories and their files)."""
    return sorted(str(p) for p in root.rglob("*") if any(part.startswith("storeval-") and part != "storeval-data"
                                                          for part in p.relative_to(root).parts[:1]))


def _sigkill_mid_command(tmp_path: Path, targets: dict, copy: str, data: Path) -> None:
    """The review's scenario: a write command that waits, then copies; ``storeval run`` SIGKILLed while it waits.
    After the run's stderr ends (the watchdog's last line), nothing of the script may run, nothing may reach the
    target, no local source may be left — observed until the script's wait would have ended."""
    # its sleep, recognisable in the process table: 20–26 s to a millisecond drawn for this test alone (a whole
    # number of seconds also matched a neighbour's `sleep 240` when tests run side by side)
    wait = f"{20 + secrets.randbelow(6000) / 1000:.3f}"
    script = tmp_path / "slow.sh"
    script.write_text(f"#!/bin/sh\nsleep {wait}\nexec {copy} \"$1\" \"$2\"\n")
    script.chmod(0o755)
    local_tmp = tmp_path / "tmp"  # where the clients' local sources go (TMPDIR)
    local_tmp.mkdir()
    path = study(tmp_path, targets, {"w": {"command": {"write": f"{script} {{local}} {{url}}", "files_per_client": 1,
                                                        "file_size": "4MiB"}}}, clients=[2])
    proc = subprocess.Popen([sys.executable, "-m", "storeval", "run", str(path), "--results", str(tmp_path / "res"),
                             "--quiet"], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(local_tmp)})
    try:
        poll(lambda: len(_running(f"sleep {wait}")) == 2, "both clients' scripts to wait", bound=300)
        import time
        started = time.monotonic()
        assert len(list(local_tmp.glob("storeval-command-*"))) == 2  # the local sources, while the commands run
        proc.kill()
        _, err = proc.communicate(timeout=300)  # ends when the watchdog, which shares it, has said its last line
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert "storeval removed its files" in err, err
    # until the scripts would have copied (and a while more), nothing of them runs and nothing reaches the target
    while time.monotonic() < started + float(wait) + 5:
        assert _running(str(script)) == [] and _running(f"sleep {wait}") == []
        assert _scratch(data) == []
        time.sleep(0.2)
    assert list(local_tmp.glob("storeval-command-*")) == []  # (pymp-*: multiprocessing's, of the killed coordinator)


def test_a_killed_run_leaves_no_command_running_and_nothing_on_a_posix_target(tmp_path, target):
    _sigkill_mid_command(tmp_path, {"local": {"url": f"file://{target}"}}, "cp", target)


def test_a_killed_run_leaves_no_command_running_and_nothing_on_the_xrootd_server(tmp_path, xrdcp, testbed,
                                                                                testbed_targets):
    server = testbed.load()["xrootd"]
    _sigkill_mid_command(tmp_path, {"xrootd": testbed_targets["xrootd"]}, "xrdcp -s -f",
                         Path(server.state.info["data"]))


def test_a_daemon_a_command_leaves_is_killed_at_the_phase_end_and_named(tmp_path, target):
    marker = f"sleep {7000 + secrets.randbelow(1000)}.{secrets.randbelow(1000):03d}"  # this test's alone
    script = tmp_path / "daemon.sh"
    script.write_text(f"#!/bin/sh\nsetsid {marker} &\nsleep 1\nexit 0\n")  # the review's daemon.sh
    script.chmod(0o755)
    path = study(tmp_path, {"local": {"url": f"file://{target}"}}, {"d": {"command": {
        "run": f"{script}", "files_per_client": 1, "file_size": 4096}}})
    _, doc = run(tmp_path, path)
    ph = phases(doc)["read"]
    assert _running(marker) == []
    (warning,) = [w for w in ph["warnings"] if w["code"] == "left-running"]
    # named as it was when killed: sleep, or (on a busy machine) the shell's child before it became sleep
    assert re.fullmatch(r"the commands left 1 process\(es\) running after they exited or were killed, killed at the "
                        r"phase's end: (sleep|setsid|daemon\.sh) \(pid \d+\) \(their I/O and CPU are not in the "
                        r"figures\)", warning["message"]), warning["message"]
    assert ph["status"] == "ok" and ph["commands"] == 1 and ph["failures"] == 0
    assert leftovers(target) == []


def test_the_processes_of_a_run_are_found_by_their_mark_wherever_they_went(tmp_path):
    from storeval.workloads.command import MARK, kill_commands_of_run

    marker = f"sleep {8000 + secrets.randbelow(1000)}.{secrets.randbelow(1000):03d}"
    env = {**os.environ, MARK: f"storeval-test{os.getpid()}:0:ab12"}
    other = {**os.environ, MARK: f"storeval-test{os.getpid()}x:0:cd34"}  # another run whose name starts alike
    # a daemon in a session of its own, its parent gone: found by its environment only
    subprocess.run(["sh", "-c", f"setsid {marker} >/dev/null 2>&1 &"], env=env, check=True)
    keep = subprocess.Popen(["sh", "-c", f"exec {marker}"], env=other, start_new_session=True)
    try:
        # both have exec'd sleep: a busy machine may show `setsid sleep …` for a while before setsid execs it
        poll(lambda: len(_running(marker)) == 2 and all(_comm(p) == "sleep" for p in _running(marker)),
             "the daemon and the other run's process to run")
        killed = kill_commands_of_run(f"storeval-test{os.getpid()}")
        assert [name for _, name in killed] == ["sleep"]
        poll(lambda: _running(marker) == [keep.pid], "the daemon to end")
        assert keep.poll() is None
    finally:
        keep.kill()
        keep.wait()


def test_a_recorded_phase_that_recorded_nothing_says_so_instead_of_an_overhead():
    """(engine/clients.py's record_trace is to take its warning from recorded_note.)"""
    import numpy as np

    from storeval.drivers.recording import ROW_DTYPE, recorded_note

    nothing = recorded_note({"rows": np.empty(0, ROW_DTYPE), "files": [], "dropped": 0, "bound": 100})
    assert nothing == ("record: true: nothing was recorded in this phase: none of its I/O went through storeval's "
                       "driver (the trace of this phase is empty)")
    some = recorded_note({"rows": np.empty(3, ROW_DTYPE), "files": ["a"], "dropped": 2, "bound": 3})
    assert some == ("record: true: 3 operations recorded through the Python loop, each costing about 0.3-0.8 µs more "
                    "(measured on tmpfs): a few % on a network target, much more at page-cache speed; 2 more beyond "
                    "the bound of 3 were not recorded")
