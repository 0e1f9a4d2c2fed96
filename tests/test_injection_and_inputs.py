"""Issue 28 (items 4, 5, 11, 14, 16): nothing executed that the user did not write, one rule for repeated sweep
values, replay on null://, and values shown as they are.

Hostile values — a target path or a setting holding ``$(touch PWNED)``, backquotes, ``;``, quotes, a newline —
go through every template form (the command workload with and without ``shell: true``, setup and teardown
commands, the watchdog's teardown list) and never run; templates that would hand a value to a shell as code are
refused before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from urllib.parse import quote

import pytest

from storeval.core.network import describe_link, factor_text
from storeval.core.shell import check_argv, check_shell_line
from storeval.core.system import command_argv, fill
from storeval.errors import InputError
from storeval.spec import load_study
from storeval.units import format_bitrate, format_share, parse_rate

from .helpers import load_json, storeval

HOSTILE = ["$(touch PWNED)", "`touch PWNED`;touch PWNED;", "q'x\"y $(touch PWNED)", "nl\ntouch PWNED"]


def pwned(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.name == "PWNED"]


def write(tmp_path: Path, data: dict, name: str = "study.yaml") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(data))  # JSON is YAML: any character survives
    return str(path)


# -- item 4: every template form, hostile values ------------------------------------------------------------
def test_hostile_paths_and_settings_never_run_in_any_template_form(tmp_path):
    targets = {}
    for i, name in enumerate(HOSTILE):
        d = tmp_path / "d" / name
        d.mkdir(parents=True)
        targets[f"t{i}"] = {"url": "file://" + quote(str(d)), "settings": {"tag": [name]},
                            "setup": "echo {tag} > {path}/../setup-{target}.log",
                            "teardown": "echo down >> {path}/../setup-{target}.log"}
    small = {"files_per_client": 1, "file_size": "4KiB"}
    study = {"targets": targets, "workloads": {
        "shell": {"command": {"read": "cat {path} > /dev/null", "shell": True, **small}},
        "argv": {"command": {"read": "sh -c 'cat \"$1\" > /dev/null' sh {path}", **small}},
        "env": {"command": {"read": "test -s \"$STOREVAL_PATH\"", "shell": True, **small}}}}
    r = storeval("run", write(tmp_path, study), "--results", str(tmp_path / "res"), "--no-html",
                 "--json", str(tmp_path / "out.json"), cwd=tmp_path)
    assert r.rc == 0, r.err
    assert pwned(tmp_path) == []
    doc = load_json(tmp_path / "out.json")
    assert len(doc["cells"]) == 12 and all(c["status"] == "ok" for c in doc["cells"])
    for i, name in enumerate(HOSTILE):  # each command found the file by its exact name; each setting arrived whole
        assert (tmp_path / "d" / f"setup-t{i}.log").read_text() == f"{name}\ndown\n"
    printed = r.out + r.err
    assert printed.count("setup of target t") == 4 and printed.count("teardown of target t") == 4


def test_the_watchdog_teardown_list_carries_values_as_data(tmp_path):
    values = {"path": str(tmp_path / "$(touch PWNED)"), "tag": "`touch PWNED`;touch PWNED\n'\""}
    (tmp_path / "$(touch PWNED)").mkdir()
    argv = command_argv("printf %s {tag} > {path}/out", values)
    assert argv[-3:-1] == ["/bin/sh", "-c"] and "PWNED" not in argv[-1]
    subprocess.run(argv, check=True, cwd=tmp_path, timeout=60)
    assert (tmp_path / "$(touch PWNED)" / "out").read_text() == values["tag"]
    assert pwned(tmp_path) == []
    assert fill("printf %s {tag}", values) == "printf %s '`touch PWNED`;touch PWNED\n'\"'\"'\"'"


REFUSED_SHELL = [
    ('cat "{path}" > /dev/null', "{path} is inside double quotes"),
    ("cat '{path}'", "{path} is inside single quotes"),
    ("echo `cat {path}`", "{path} is inside backquotes: write $(…)"),
    ("echo $(( {index} + 1 ))", "{index} is inside arithmetic"),
    ("cat ${path}", "{path} is right after \\ or $"),
    ('sh -c "cat {path}"', "{path} is inside double quotes"),
    ("bash -c {path}", "{path} is in the code bash runs"),
    ("env FOO=1 dash -ec cat\\ {path}", "{path} is in the code dash runs"),
    ("eval cat {path}", "{path} is in the code eval runs"),
    ("true; ssh -p 22 host cat {path}", "{path} is in the code ssh runs"),
    ("python3 -c {path}", "{path} is in the code python runs"),
]


@pytest.mark.parametrize("line,reason", REFUSED_SHELL, ids=[x[0] for x in REFUSED_SHELL])
def test_a_shell_line_that_could_read_a_value_as_code_is_refused(line, reason):
    with pytest.raises(ValueError) as e:
        check_shell_line(line)
    assert str(e.value).startswith(reason), str(e.value)


REFUSED_ARGV = [
    ('sh -c "cat {path}"', "{path} is in the code sh runs"),
    ("env sh -c 'cat {path}'", "{path} is in the code sh runs"),
    ("/bin/bash -o pipefail -c 'cat {path} | wc'", "{path} is in the code bash runs"),
    ("nice -n 5 zsh -c {url}", "{url} is in the code zsh runs"),
    ("perl -e 'print q({path})'", "{path} is in the code perl runs"),
    ("awk '{{print \"{path}\"}}'", "{path} is in the code awk runs"),
    ("env -S 'sh -c \"cat {path}\"'", "{path} is in the code env runs"),
]


@pytest.mark.parametrize("line,reason", REFUSED_ARGV, ids=[x[0] for x in REFUSED_ARGV])
def test_a_program_given_a_value_as_its_code_is_refused_without_a_shell_too(line, reason):
    import shlex

    with pytest.raises(ValueError) as e:
        check_argv(shlex.split(line))
    assert str(e.value).startswith(reason), str(e.value)


@pytest.mark.parametrize("line", ["cat {path}", "dd if={path} of=/dev/null bs=1M", "sh -c 'cat \"$1\"' sh {path}",
                                  "xrdcp -f {url} /dev/null", "echo $(cat {path}) > {local}.copy",
                                  "python3 -c 'import sys; open(sys.argv[1])' {path}", "awk -f prog.awk {path}"])
def test_values_given_as_arguments_are_accepted(line):
    check_shell_line(line)


def test_the_numbers_storeval_makes_may_go_anywhere():
    import shlex

    digits = ("rank", "index", "size", "port")
    check_argv(shlex.split("sh -c 'echo cannot open {index} >&2; exit 3'"), digits)
    check_shell_line('echo "file {index} of {size}" $(( {rank} + 1 ))', digits)
    with pytest.raises(ValueError):
        check_argv(shlex.split("sh -c 'echo {index} {local}'"), digits)


@pytest.mark.parametrize("shell,line,expected", [
    (True, 'cat "{path}" > /dev/null', "workloads.c: read: {path} is inside double quotes"),
    (False, 'sh -c "cat {path}"', "workloads.c: read: {path} is in the code sh runs"),
])
def test_the_command_workload_refuses_such_templates_in_one_line(tmp_path, shell, line, expected):
    path = write(tmp_path, {"targets": {"t": str(tmp_path)},
                            "workloads": {"c": {"command": {"read": line, "shell": shell}}}})
    with pytest.raises(InputError) as e:
        load_study(path)
    assert str(e.value).startswith(expected), str(e.value)


@pytest.mark.parametrize("setup,expected", [
    ('lfs setstripe -c "{stripe}" {path}', "targets.t.setup: {stripe} is inside double quotes"),
    ("sh -c 'lfs setstripe -c {stripe}'", "targets.t.setup: {stripe} is inside single quotes"),
    ("sh -c lfs\\ {path}", "targets.t.setup: {path} is in the code sh runs"),
])
def test_setup_commands_that_could_read_a_value_as_code_are_refused(tmp_path, setup, expected):
    path = write(tmp_path, {"targets": {"t": {"url": str(tmp_path), "settings": {"stripe": [1, 2]}, "setup": setup}},
                            "workloads": {"bw": "bandwidth"}})
    with pytest.raises(InputError) as e:
        load_study(path)
    assert str(e.value).startswith(expected), str(e.value)


# -- item 5: targets_from ----------------------------------------------------------------------------------
def _targets_file(tmp_path: Path) -> Path:
    f = tmp_path / "targets.yaml"
    f.write_text(json.dumps({"targets": {"fs": {"url": str(tmp_path / "data"), "setup": "touch {path}/../RAN"}}}))
    (tmp_path / "data").mkdir()
    return f


def test_targets_from_refuses_commands_unless_the_study_allows_them(tmp_path):
    f = _targets_file(tmp_path)
    quick = {"bw": {"bandwidth": {"file_size": "64KiB", "transfer_size": "64KiB", "phases": ["write"]}}}
    path = write(tmp_path, {"targets_from": str(f), "workloads": quick})
    with pytest.raises(InputError) as e:
        load_study(path)
    assert str(e.value) == (f"targets_from: target fs of {f} has setup commands, which storeval would run on this "
                            f"host; a targets file runs no command unless the study allows it (targets_from: {{file: "
                            f"{f}, allow_commands: true}})")
    r = storeval("run", path, "--results", str(tmp_path / "res"), cwd=tmp_path)
    assert r.rc == 2 and not (tmp_path / "RAN").exists()
    allowed = write(tmp_path, {"targets_from": {"file": str(f), "allow_commands": True}, "workloads": quick}, "ok.yaml")
    r = storeval("run", allowed, "--results", str(tmp_path / "res"), "--no-html", cwd=tmp_path)
    assert r.rc == 0, r.err
    assert (tmp_path / "RAN").exists()
    assert f"setup of target fs (from {f}): running `touch {tmp_path / 'data'}/../RAN`" in " ".join((r.out + r.err).split())
    with pytest.raises(InputError) as e:
        load_study(write(tmp_path, {"targets_from": {"file": str(f), "allow": True}}, "bad.yaml"))
    assert str(e.value) == "targets_from.allow: unknown key (known: allow_commands, file, only)"


def test_targets_from_a_fifo_or_a_device_is_refused_at_once_naming_a_targets_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(_refusal(write(tmp_path, {"targets_from": str(fifo)}))), daemon=True)
    t.start()
    t.join(timeout=60)  # the refusal needs no reader nor writer; a blocked open would never return
    assert got == [f"targets file {fifo} is a named pipe (FIFO), not a file (give a YAML file)"]
    assert _refusal(write(tmp_path, {"targets_from": "/dev/zero"})) == ("targets file /dev/zero is a character device, "
                                                                         "not a file (give a YAML file)")
    assert _refusal(str(fifo)) == f"study file {fifo} is a named pipe (FIFO), not a file (give a YAML file)"
    hosts = write(tmp_path, {"targets": {"t": str(tmp_path)}, "workloads": {"bw": "bandwidth"},
                             "clients": {"a": {"count": 1, "hostfile": str(fifo)}}})
    assert _refusal(hosts) == (f"clients.a.hostfile: hostfile {fifo} is a named pipe (FIFO), not a file (give a text "
                               "file)")


def _refusal(path: str) -> str:
    try:
        load_study(path)
    except InputError as e:
        return str(e)
    return "accepted"


# -- item 11: one rule for repeated values --------------------------------------------------------------------
BASE = {"targets": {"t": "null://x"}}


@pytest.mark.parametrize("extra,kwargs,expected", [
    ({"workloads": {"bw": {"bandwidth": {"transfer_size": ["64KiB", "64KiB", 65536]}}}}, {},
     'workloads.bw.transfer_size: ["64KiB", "64KiB", 65536] repeats a value: \'64KiB\' is given at [0] and [1] '
     "(give each value once)"),
    ({"workloads": {"bw": {"bandwidth": {"transfer_size": ["64KiB", 65536]}}}}, {},
     'workloads.bw.transfer_size: ["64KiB", 65536] repeats a value: 65536 at [1] is \'64KiB\' at [0] again (give '
     "each value once)"),
    ({"workloads": {"bw": "bandwidth"}}, {"sets": ["transfer_size=1KiB,2KiB,1024"]},
     '--set transfer_size: ["1KiB", "2KiB", 1024] repeats a value: 1024 at [2] is \'1KiB\' at [0] again (give each '
     "value once)"),
    ({"workloads": {"bw": "bandwidth"}}, {"clients": "1,2,2"},
     '--clients: ["1", "2", "2"] repeats a value: \'2\' is given at [1] and [2] (give each value once)'),
    ({"workloads": {"bw": "bandwidth"}, "clients": [1, 1]}, {},
     "clients: [1, 1] repeats a value: 1 is given at [0] and [1] (give each value once)"),
    ({"workloads": {"bw": "bandwidth"}, "clients": {"a": {"count": [2, 2]}}}, {},
     "clients.a.count: [2, 2] repeats a value: 2 is given at [0] and [1] (give each value once)"),
    ({"workloads": {"bw": "bandwidth"}, "network": {"links": {"wan": {"rtt": ["1ms", "0.001s"]}}}}, {},
     'network.links.wan.rtt: ["1ms", "0.001s"] repeats a value: \'0.001s\' at [1] is \'1ms\' at [0] again (give '
     "each value once)"),
    ({"targets": {"t": {"url": "null://x", "settings": {"s": [1, 1.0]}, "setup": "true {s}"}},
      "workloads": {"bw": "bandwidth"}}, {},
     "targets.t.settings.s: [1, 1.0] repeats a value: 1.0 at [1] is 1 at [0] again (give each value once)"),
    ({"workloads": {"bw": "bandwidth"}}, {"targets": ["null://a", "null://a"]},
     '--target: ["null://a", "null://a"] repeats a value: \'null://a\' is given at [0] and [1] (give each value '
     "once)"),
    ({"workloads": {"bw": "bandwidth"}}, {"workloads": ["bandwidth", "bandwidth"]},
     '--workload: ["bandwidth", "bandwidth"] repeats a value: \'bandwidth\' is given at [0] and [1] (give each '
     "value once)"),
], ids=["yaml", "normalised", "--set", "--clients", "clients", "group", "link", "setting", "--target", "--workload"])
def test_a_repeated_sweep_value_is_refused_naming_it(tmp_path, extra, kwargs, expected):
    path = write(tmp_path, {**BASE, **extra})
    with pytest.raises(InputError) as e:
        load_study(path, **kwargs)
    assert str(e.value) == expected


def test_repeats_are_refused_on_the_command_line_in_one_line(tmp_path):
    r = storeval("run", "--target", "null://x", "--workload", "bandwidth", "--set", "transfer_size=1KiB,1KiB",
                 "--results", str(tmp_path / "res"))
    assert r.rc == 2 and r.err_lines == ['error: --set transfer_size: ["1KiB", "1KiB"] repeats a value: \'1KiB\' is '
                                         "given at [0] and [1] (give each value once)"]


# -- item 14: replay on null:// ------------------------------------------------------------------------------
def test_replay_runs_on_the_null_target(tmp_path):
    trace = tmp_path / "t.csv"
    trace.write_text("t,stream,op,file,offset,length\n0,s,read,/data/a,0,65536\n0.01,s,read,/data/a,65536,4096\n"
                     "0.02,s,write,/out/b,0,1000\n")
    path = write(tmp_path, {"targets": {"n": "null://x"}, "workloads": {"r": {"replay": {"trace": str(trace)}}}})
    r = storeval("run", path, "--results", str(tmp_path / "res"), "--no-html", "--json", str(tmp_path / "o.json"))
    assert r.rc == 0, r.err
    doc = load_json(tmp_path / "o.json")
    (cell,) = doc["cells"]
    assert cell["status"] == "ok", cell["error"]
    (ph,) = cell["phases"]
    assert (ph["bytes_read"], ph["bytes_written"], ph["bytes_equal"]) == (65536 + 4096, 1000, 1)


# -- item 16: values shown as they are -----------------------------------------------------------------------
def test_rates_print_in_the_unit_that_fits_and_read_back():
    assert describe_link({"rate": 1e3, "rtt": 0.0}) == "rate 8 kbit/s, rtt 0 ms"
    assert [factor_text("rate", r) for r in (1e3, 1250.0, 12.5e6, 125e6, 1.25e11)] == \
        ["8kbit/s", "10kbit/s", "100Mbit/s", "1Gbit/s", "1Tbit/s"]
    assert all(parse_rate(factor_text("rate", r)) == r for r in (1e3, 187.5, 12.5e6, 3.75e8))
    assert format_bitrate(100) == "800 bit/s"


def test_a_share_keeps_the_digits_that_make_it_itself():
    assert [format_share(x) for x in (0.3, 0.9999, 0.999999, 0.0001, 0.5)] == \
        ["30%", "99.99%", "99.9999%", "0.01%", "50%"]


def test_runs_error_bounds_what_it_echoes(tmp_path):
    path = write(tmp_path, {"targets": {"t": "null://x"}, "workloads": {"bw": {"bandwidth": {
        "file_size": "64KiB", "transfer_size": "64KiB", "phases": ["write"]}}}})
    assert storeval("run", path, "--results", str(tmp_path / "res"), "--no-html", "-q").rc == 0
    r = storeval("report", str(tmp_path / "res"), "--runs", "x" * 100_000)
    assert r.rc == 2 and len(r.err_lines) == 1 and len(r.err_lines[0]) < 250, r.err[:300]
    assert r.err_lines[0] == f"error: --runs {'x' * 79}…: {'x' * 39}… is not a run id (ids look like 20261126-121314-ab12)"


def test_a_long_run_id_is_echoed_cut_and_quiet_still_says_which_command_runs(tmp_path):
    r = storeval("run", "--target", "null://", "--workload", "bandwidth", "--set", "file_size=1MiB", "--quiet",
                 "--results", str(tmp_path / "res"), cwd=tmp_path)
    assert r.rc == 0, r.err
    r = storeval("report", str(tmp_path / "res"), "--run", "x" * 100_000, cwd=tmp_path)
    assert r.rc == 2 and len(r.err_lines) == 1 and len(r.err) < 400 and "x" * 79 + "…" in r.err, r.err[:500]
    study = tmp_path / "s.yaml"
    study.write_text("targets:\n  t:\n    url: null://\n    setup: 'touch set-up'\n    teardown: 'touch torn-down'\n"
                     "workloads: {bw: {bandwidth: {file_size: 1MiB}}}\n")
    r = storeval("run", str(study), "--quiet", "--results", str(tmp_path / "res"), cwd=tmp_path)
    assert r.rc == 0, r.err
    assert [ln for ln in r.err_lines if "of target t" in ln] == [
        "setup of target t: running `touch set-up`", "teardown of target t: running `touch torn-down`"], r.err
    assert (tmp_path / "set-up").exists() and (tmp_path / "torn-down").exists()
