"""The command line behaves like the tools its users know: -h on every command, a usage error that points to
the subcommand's own help, and the commands whose arguments are another program's (mpiexec, a Slurm command)
left alone — ``-hosts`` is mpiexec's, never -h."""

from __future__ import annotations

import pytest
import typer

from storeval.cli import app

from .helpers import storeval


def _commands(group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], object]]:
    """Every command and group of the CLI, with its path (``("testbed", "nodes", "up")``)."""
    out = [(path, group)]
    for name, cmd in getattr(group, "commands", {}).items():
        out += _commands(cmd, (*path, name))
    return out


COMMANDS = _commands(typer.main.get_command(app))


# every command's help through main(), in one child process (main installs the stop-signal handlers)
HELP_ALL = """
import contextlib, io, json, sys
from storeval.cli import main
out = {}
for path, flag in json.loads(sys.argv[1]):
    text = io.StringIO()
    with contextlib.redirect_stdout(text), contextlib.suppress(SystemExit) as stopped:
        main([*path, flag])
    out[" ".join([*path, flag])] = [stopped.code if stopped else 0, " ".join(text.getvalue().split())]
print(json.dumps(out))
"""


ASKED = [(path, flag) for path, cmd in COMMANDS
         for flag in (("-h", "--help") if "-h" in cmd.context_settings.get("help_option_names", ["-h"])
                      else ("--help",))]


@pytest.fixture(scope="module")
def helps(tmp_path_factory) -> dict[str, list]:
    """Every command's help, asked with each of its help options: {"testbed up -h": [exit code, text]}, the text's
    white space made single spaces (a terminal 200 columns wide)."""
    import json
    import os
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", HELP_ALL, json.dumps(ASKED)], cwd=tmp_path_factory.mktemp("help"),
                       capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def test_every_command_takes_dash_h_and_says_its_usage(helps):
    paths = [path for path, _ in COMMANDS]
    assert ("testbed", "nodes", "up") in paths and ("run",) in paths and len(paths) >= 20
    said = helps
    for path, flag in ASKED:
        code, text = said[" ".join([*path, flag])]
        assert code == 0 and f"Usage: storeval {' '.join(path)}".rstrip() in text, (path, flag, code, text[:200])
    # the commands that hand their arguments on keep -h for the program they run
    assert sorted(path for path, cmd in COMMANDS
                  if "-h" not in cmd.context_settings.get("help_option_names", ["-h"])) == [
        ("testbed", "mpiexec"), ("testbed", "slurm")]


def test_a_usage_error_points_to_the_subcommand_s_own_help(tmp_path):
    r = storeval("testbed", "up", "--servers", "x", cwd=tmp_path)
    assert r.rc == 2 and r.out == ""
    assert r.err_lines == ["error: Invalid value for '--servers': Input should be a valid integer, unable to parse "
                           "string as an integer (see storeval testbed up --help)"]
    r = storeval("run", "--nosuch", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: No such option: --nosuch (see storeval run --help)"]
    r = storeval("--nosuch", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: No such option: --nosuch (see storeval --help)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_mpiexec_s_dash_hosts_is_mpiexec_s_not_a_help_request(tmp_path):
    r = storeval("testbed", "mpiexec", "--dir", str(tmp_path / "bed"), "-hosts", "node1", "-n", "1", "true",
                 cwd=tmp_path)
    assert r.rc == 2 and "Usage" not in r.out
    assert r.err_lines == [f"error: no emulated network in {tmp_path / 'bed'} (`storeval testbed nodes up N --dir "
                           f"{tmp_path / 'bed'}` makes nodes)"]
    assert not (tmp_path / "bed").exists()


def test_report_and_compare_are_quiet_with_dash_q_and_still_write(tmp_path):
    import json

    args = ("--target", "null://", "--workload", "bandwidth", "--set", "file_size=1MiB", "--clients", "1",
            "--repetitions", "2", "--results", "res", "--no-html", "-q")
    for name in ("a", "b"):
        r = storeval("run", *args, "--json", f"{name}.json", cwd=tmp_path)
        assert r.rc == 0, r.err
    first, latest = (json.loads((tmp_path / f"{n}.json").read_text())["run_id"] for n in ("a", "b"))
    r = storeval("report", "res", "-q", "--json", "one.json", cwd=tmp_path)
    assert (r.rc, r.out, r.err) == (0, "", "")
    assert json.loads((tmp_path / "one.json").read_text())["cells"]
    loud = storeval("report", "res", cwd=tmp_path)
    assert loud.rc == 0 and "bandwidth" in loud.out  # without -q the tables are there
    assert json.loads((tmp_path / "one.json").read_text())["run_id"] == latest
    r = storeval("compare", first, latest, "--results", "res", "-q", "--json", "cmp.json", cwd=tmp_path)
    assert (r.rc, r.out) == (0, ""), r.err
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert (cmp["a"], cmp["b"]) == (first, latest) and cmp["changes"]


def test_a_dry_run_prints_the_study_the_cells_and_their_needs_and_touches_nothing(tmp_path):
    target = tmp_path / "target"
    target.mkdir()
    args = ("run", "--target", str(target), "--workload", "bandwidth", "--workload", "metadata", "--clients", "1,2",
            "--repetitions", "2", "--set", "bandwidth.file_size=8MiB", "--set", "metadata.items=100", "--dry-run")
    r = storeval(*args, cwd=tmp_path)
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "study, as it resolves:" and "        file_size: 8388608" in lines
    assert "8 cells, in the order they run" in r.out
    rows = [line for line in lines if line.startswith("│")]
    assert len(rows) == 8  # one row per cell
    assert "target · bandwidth · 2 clients" in rows[1] and "16 MiB" in rows[1]  # two clients' 8 MiB files
    assert lines[-1] == "preflight: every cell fits this host; nothing ran (dry run)"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"] and list(target.iterdir()) == []
    # what preflight would stop the run with, and the run's exit code, still without touching anything
    r = storeval(*args[:-1], "--set", "bandwidth.file_size=64PiB", "--dry-run", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines[-1].startswith(f"error: cell 1 ({target} · bandwidth · 2 clients) needs about ")
    assert r.err_lines[-1].endswith("(dry run: nothing ran)")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"] and list(target.iterdir()) == []


def test_listings_write_json_to_stdout_or_to_a_file_of_their_own(tmp_path):
    import json

    from storeval.workloads import WORKLOADS

    r = storeval("workloads", "--json", "-", cwd=tmp_path)
    assert r.rc == 0 and r.err == ""
    doc = json.loads(r.out)  # stdout holds the JSON alone
    assert [w["kind"] for w in doc["workloads"]] == list(WORKLOADS)
    bandwidth = next(w for w in doc["workloads"] if w["kind"] == "bandwidth")
    fields = {p["name"]: p for p in bandwidth["parameters"]}
    assert fields["transfer_size"]["default"] == "1MiB" and fields["transfer_size"]["unit"] == "bytes (size)"
    assert fields["file_size"]["default_study"] == "2GiB" and bandwidth["package"] == "storeval"
    # a file: written with storeval's header, replaced only if it is storeval's own listing
    r = storeval("workloads", "metadata", "--json", "w.json", cwd=tmp_path)
    assert (r.rc, r.out) == (0, "")
    written = json.loads((tmp_path / "w.json").read_text())
    assert written["storeval_output"]["kind"] == "listing" and [w["kind"] for w in written["workloads"]] == ["metadata"]
    assert storeval("workloads", "--json", "w.json", cwd=tmp_path).rc == 0
    (tmp_path / "mine.json").write_text('{"mine": 1}\n')
    r = storeval("workloads", "--json", "mine.json", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: --json mine.json: a file that storeval did not write is there "
                                         "(choose a new file name; storeval replaces only its own output)"]
    assert (tmp_path / "mine.json").read_text() == '{"mine": 1}\n'
    # testbed listings where there is no testbed: empty, and nothing made
    r = storeval("testbed", "status", "--dir", "bed", "--json", "-", cwd=tmp_path)
    assert r.rc == 0 and json.loads(r.out) == {"directory": str(tmp_path / "bed"), "servers": [], "network": None}
    r = storeval("testbed", "network", "--dir", "bed", "--json", "-", cwd=tmp_path)
    assert r.rc == 0 and json.loads(r.out) == {"network": None}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.json", "w.json"]


def test_a_flag_met_in_every_repetition_is_said_once_per_configuration(tmp_path):
    r = storeval("run", "--target", "null://", "--workload", "bandwidth", "--set", "file_size=4MiB", "--clients", "1,2",
                 "--repetitions", "3", "--results", "res", "--no-html", cwd=tmp_path)
    assert r.rc == 0, r.err
    said = [line for line in r.out.splitlines() if line.startswith("✗ short-phase")]
    # one line per configuration and phase (2 client counts × write, read), not one per repetition; each says in
    # how many repetitions it was met (all 3 on a quiet machine: a busy one may stretch one past the minimum)
    import re

    assert len(said) == 4 and all(re.match(r"✗ short-phase( \(in [23] of 3 reps; the first said\))?: the timed "
                                           r"phase lasted ", line) for line in said), said
    assert any(line.startswith("✗ short-phase (in ") for line in said)  # met more than once: said once, counted
    assert sorted(line.rsplit("[", 1)[1] for line in said) == [
        "null:// · bandwidth · 1 client · read]", "null:// · bandwidth · 1 client · write]",
        "null:// · bandwidth · 2 clients · read]", "null:// · bandwidth · 2 clients · write]"]


def test_json_dash_writes_the_document_alone_to_stdout_for_run_report_and_compare(tmp_path):
    import json

    args = ("--target", "null://", "--workload", "bandwidth", "--set", "file_size=1MiB", "--clients", "1",
            "--repetitions", "2", "--results", "res", "--no-html")
    r = storeval("run", *args, "--json", "-", cwd=tmp_path)
    assert r.rc == 0, r.err
    first = json.loads(r.out)  # nothing but the document on stdout: no tables, no last line
    assert len(first["cells"]) == 2 and "storeval_output" not in first  # a stream carries no ownership header
    second = json.loads(storeval("run", *args, "--json", "-", "-q", cwd=tmp_path).out)
    r = storeval("report", "res", "--run", first["run_id"], "--json", "-", cwd=tmp_path)
    assert r.rc == 0 and json.loads(r.out)["run_id"] == first["run_id"]
    r = storeval("compare", first["run_id"], second["run_id"], "--results", "res", "--json", "-", cwd=tmp_path)
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    assert (doc["a"], doc["b"]) == (first["run_id"], second["run_id"]) and doc["changes"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]  # no file named "-"


# what typer would show of a parameter's Python type; users read what they type instead (DIR, N, FILE|-)
PYTHON_TYPES = ("<bool>", "<str>", "<int", "<float>", "<list", "<path>", "<=x", "x>=")


def test_every_command_s_help_shows_what_users_type_never_python_types(helps):
    for asked, (code, text) in helps.items():
        assert code == 0 and not [t for t in PYTHON_TYPES if t in text], (asked, text)
        # a flag shows nothing between its name and its help
        help_option = "--help -h" if asked.split()[:-1] not in (["testbed", "mpiexec"], ["testbed", "slurm"]) \
            else "--help"
        assert f"{help_option} Show this message and exit." in text, asked
    run = helps["run --help"][1]
    for shown in ("[OPTIONS] [STUDY]", "--results DIR ", "--json FILE|- ", "--set KEY=VALUE ", "--clients N[,N...] ",
                  "--phase-timeout DURATION ", "--target URL|NAME ", "--dry-run Print the resolved study"):
        assert shown in run, shown
    # the results directory: --results DIR on every command that reads or writes a store
    for command in ("run", "report", "import", "compare", "export", "clean"):
        assert "--results DIR " in helps[f"{command} --help"][1], command
    # report and export take the old positional form too, but do not show it
    for command in ("report", "export"):
        assert f"Usage: storeval {command} [OPTIONS] " in helps[f"{command} -h"][1]
        assert "─ Arguments ─" not in helps[f"{command} -h"][1] and "[RESULTS]" not in helps[f"{command} -h"][1]
    # testbed up: the systems are SYSTEM..., --servers is a count; ranges said in words
    up = helps["testbed up -h"][1]
    assert "Usage: storeval testbed up [OPTIONS] [SYSTEM]..." in up and "SYSTEM... Systems to start: minio" in up
    assert "--servers N Storage servers of each SYSTEM, 1 to 16:" in up and "servers..." not in up
    assert "--hdfs-datanodes N Datanodes of the HDFS mini-cluster, 1 to 16" in up
    assert "Usage: storeval testbed down [OPTIONS] [SYSTEM]..." in helps["testbed down -h"][1]
    assert "N How many nodes, 1 to 250" in helps["testbed nodes up -h"][1]
    assert "Usage: storeval testbed fault [OPTIONS] {HANDLE} {ACTION}" in helps["testbed fault -h"][1]
    assert "--version Print the version and exit." in helps["-h"][1]


def test_a_bad_testbed_system_or_count_is_refused_in_one_line_and_starts_nothing(tmp_path):
    r = storeval("testbed", "up", "lustre", "--dir", "bed", cwd=tmp_path)
    assert r.rc == 2 and r.out == "" and r.err_lines == [
        "error: testbed up lustre: unknown system (choose from minio, minio-ec, xrootd, xcache, xrootd-tpc, hdfs, "
        "glusterfs, ceph, nfs, slurm)"]
    r = storeval("testbed", "up", "minio", "--servers", "17", "--dir", "bed", cwd=tmp_path)
    assert r.rc == 2 and r.err_lines == ["error: Invalid value for '--servers': Input should be less than or equal "
                                         "to 16 (see storeval testbed up --help)"]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_every_store_command_takes_the_results_directory_as_dash_dash_results(tmp_path):
    import json

    target = tmp_path / "target"
    target.mkdir()
    r = storeval("run", "--target", "null://", "--workload", "bandwidth", "--set", "file_size=1MiB", "--clients", "1",
                 "--repetitions", "1", "--results", "res", "--no-html", "-q", "--json", "run.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    run_id = json.loads((tmp_path / "run.json").read_text())["run_id"]
    r = storeval("report", "--results", "res", "-q", "--json", "new.json", cwd=tmp_path)
    assert (r.rc, r.out, r.err) == (0, "", "")
    assert json.loads((tmp_path / "new.json").read_text())["run_id"] == run_id
    # the old positional form still works, and so does giving the same directory both ways
    for args in (("res",), ("res", "--results", "res")):
        (tmp_path / "old.json").unlink(missing_ok=True)
        r = storeval("report", *args, "-q", "--json", "old.json", cwd=tmp_path)
        assert (r.rc, r.err) == (0, ""), args
        assert json.loads((tmp_path / "old.json").read_text())["run_id"] == run_id
    r = storeval("export", "--results", "res", "--format", "csv", "--out", "new", cwd=tmp_path)
    assert r.rc == 0, r.err
    r = storeval("export", "res", "--format", "csv", "--out", "old", cwd=tmp_path)
    assert r.rc == 0, r.err
    tables = sorted(p.name for p in (tmp_path / "new").iterdir())
    assert "cells.csv" in tables and sorted(p.name for p in (tmp_path / "old").iterdir()) == tables
    assert (tmp_path / "new" / "cells.csv").read_text() == (tmp_path / "old" / "cells.csv").read_text()
    r = storeval("compare", run_id, run_id, "--results", "res", "-q", "--json", "cmp.json", cwd=tmp_path)
    assert r.rc == 0, r.err
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    assert (cmp["a"], cmp["b"]) == (run_id, run_id)
    r = storeval("clean", str(target), "--results", "res", "--dry-run", cwd=tmp_path)
    assert r.rc == 0 and r.out.splitlines() == [f"file://{target}: no storeval scratch directories", "nothing to remove"]
    # two different directories: one line naming the fix, nothing written
    before = sorted(p.name for p in tmp_path.iterdir())
    for command, extra in (("report", ("--json", "x.json")), ("export", ("--format", "csv", "--out", "x"))):
        r = storeval(command, "res", "--results", "elsewhere", *extra, cwd=tmp_path)
        assert r.rc == 2 and r.out == "" and r.err_lines == [
            "error: the results directory given twice, as res and as --results elsewhere: give it once, as "
            f"--results DIR (see storeval {command} --help)"], command
    assert sorted(p.name for p in tmp_path.iterdir()) == before
