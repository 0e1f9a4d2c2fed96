"""Study validation: the issue's example works verbatim; every mistake is one precise line."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

from storeval.errors import InputError
from storeval.plan import plan
from storeval.spec import load_study

from .helpers import storeval

EXAMPLE = """\
targets:
  scratch: {url: "file://%s"}
workloads:
  bw: {bandwidth: {file_size: 64MiB, transfer_size: [64KiB, 1MiB], phases: [write, read]}}
clients: [1, 2]
repetitions: 2
"""


def write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "study.yaml"
    p.write_text(textwrap.dedent(text))
    return str(p)


def test_issue_example_expands_to_the_right_cells(tmp_path, target):
    study = load_study(write(tmp_path, EXAMPLE % target))
    cells = plan(study)
    assert len(cells) == 2 * 2 * 2  # transfer sizes x clients x repetitions
    assert {c.params.transfer_size for c in cells} == {65536, 1048576}
    assert {c.clients for c in cells} == {1, 2}
    assert [c.repetition for c in cells] == [0] * 4 + [1] * 4
    assert all(c.params.file_size == 64 << 20 and c.params.phases == ["write", "read"] for c in cells)
    assert cells[0].factors == {"transfer_size": 65536, "clients": 1}
    # repetitions of one configuration share its config id
    assert {c.config for c in cells if c.repetition == 0} == {c.config for c in cells if c.repetition == 1}


MALFORMED = [
    ("bad size", "workloads: {bw: {bandwidth: {transfer_size: 1Mx}}}",
     "workloads.bw.transfer_size: '1Mx' is not a size (try 1MiB)"),
    ("bad size in a sweep", "workloads: {bw: {bandwidth: {transfer_size: [64KiB, 1Mx]}}}",
     "workloads.bw.transfer_size[1]: '1Mx' is not a size (try 1MiB)"),
    ("unknown top-level key", "worklods: {bw: bandwidth}", "worklods: unknown key (did you mean 'workloads'?)"),
    ("unknown parameter", "workloads: {bw: {bandwidth: {trasnfer_size: 1MiB}}}",
     "workloads.bw.trasnfer_size: unknown parameter of bandwidth (did you mean 'transfer_size'?)"),
    ("unknown kind", "workloads: {bw: {bandwith: {}}}", "workloads.bw: unknown workload kind 'bandwith' (did you mean 'bandwidth'?)"),
    ("wrong type for a flag", "workloads: {bw: {bandwidth: {direct: maybe}}}", "workloads.bw.direct: 'maybe' is not true or false"),
    ("wrong type for clients", "workloads: {bw: bandwidth}\nclients: [1, two]", "clients: 'two' is not a whole number of clients"),
    ("zero repetitions", "workloads: {bw: bandwidth}\nrepetitions: 0", "repetitions: 0 is not a number of repetitions"),
    ("bad phase", "workloads: {bw: {bandwidth: {phases: [write, raed]}}}",
     "workloads.bw.phases[1]: 'raed' is not one of write, rewrite, read, reread, randread, randwrite"),
    ("iodepth below 1", "workloads: {bw: {bandwidth: {iodepth: 0}}}", "workloads.bw.iodepth: 0 must be at least 1"),
    ("size not a multiple", "workloads: {bw: {bandwidth: {file_size: 10MiB, transfer_size: 3MiB}}}",
     "workloads.bw: file_size 10 MiB is not a whole number of transfers of 3 MiB"),
    ("direct with odd transfers", "workloads: {bw: {bandwidth: {file_size: 1000, transfer_size: 100, direct: true}}}",
     "workloads.bw: direct I/O needs transfer_size to be a multiple of 512 bytes"),
    ("bad phase timeout", "workloads: {bw: bandwidth}\nphase_timeout: soon", "phase_timeout: 'soon' is not a duration"),
    # the study's models (issue 31): each mistake at its own path, the value shown, one line
    ("a flag given as a number", "workloads: {bw: bandwidth}\nkeep_cache: 1", "keep_cache: 1 is not true or false"),
    ("placement out of its choices", "workloads: {bw: bandwidth}\nplacement: packed",
     "placement: 'packed' is not one of spread, pack"),
    ("a sweep's bad value named by its index", "workloads: {bw: bandwidth}\nnetwork: {links: {w: {rtt: [1ms, bad]}}}",
     "network.links.w.rtt[1]: 'bad' is not a duration"),
    ("a host list's bad entry", "workloads: {bw: bandwidth}\nclients: {g: {count: 1, hosts: [a, 5]}}",
     "clients.g.hosts[1]: 5 is not a host name"),
    ("faults not a list", "workloads: {bw: bandwidth}\nfaults: {a: 1}",
     'faults: {"a": 1} is not a list of faults (write faults: [{at: 10s, action: stop, server: NAME, for: 10s}])'),
    ("a fault's two undo times", "workloads: {bw: bandwidth}\n"
     "faults: [{at: 1s, action: kill, server: a, restart_after: 5s, for: 1s}]", "faults[0]: give for or restart_after, not both"),
]


@pytest.mark.parametrize("name,body,message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_study_is_one_precise_line(tmp_path, target, name, body, message):
    text = f"targets:\n  s: {{url: 'file://{target}'}}\n{body}\n"
    with pytest.raises(InputError) as exc:
        load_study(write(tmp_path, text))
    assert str(exc.value).startswith(message), str(exc.value)
    assert "\n" not in str(exc.value)


TARGET_MISTAKES = [
    ("missing url", "targets: {s: {path: /tmp}}", "targets.s.url: missing"),
    ("path that does not exist", "targets: {s: {url: 'file:///nonexistent/storeval/x'}}",
     "targets.s.url: directory /nonexistent/storeval/x does not exist"),
    ("path that is a file", "targets: {s: {url: 'file:///etc/hostname'}}", "targets.s.url: /etc/hostname is not a directory"),
    ("unknown scheme", "targets: {s: {url: 'ftp://host/x'}}", "targets.s.url: target ftp://host/x: unknown scheme 'ftp://'"),
    ("unknown target option", "targets: {s: {url: 'null://', endpiont: x}}", "targets.s.endpiont: unknown key"),
    ("no targets", "targets: {}\nworkloads: {bw: bandwidth}", "no targets"),
    ("not a mapping", "- a\n- b", "the study must be a mapping"),
    ("broken YAML", "targets: {s: [unclosed", "not valid YAML"),
    ("query a driver would ignore", "targets: {s: {url: 's3://bucket/x?endpoint=http://127.0.0.1:1'}}",
     "targets.s.url: s3://bucket/x?endpoint=http://127.0.0.1:1: the s3:// driver does not understand the query"),
    ("credentials in an endpoint", "targets: {s: {url: 's3://b/p', endpoint: 'http://K:S3CR3T@h:9000'}}",
     "targets.s.endpoint: 'http://***@h:9000' holds a password; credentials never go in a URL"),
    ("duplicate key", "targets: {s: {url: 'null://'}, s: {url: 'null://x'}}",
     "study.yaml:1:32: the key 's' appears twice in one mapping (first at line 1); keep one"),
    ("a limit's misspelt key", "targets: {s: {url: 'null://', limits: {netwrk: 1}}}",
     "targets.s.limits.netwrk: unknown key (did you mean 'network'?)"),
    ("a setting swept twice with one value", "targets: {s: {url: 'null://', settings: {a: [1, 1.0]}, setup: 'x {a}'}}",
     "targets.s.settings.a: [1, 1.0] repeats a value: 1.0 at [1] is 1 at [0] again (give each value once)"),
    ("invisible character in a name", 'targets: {"s\\u202e": {url: "null://"}}',
     "targets.s\\u202e: the name holds the invisible character \\u202e"),
]


@pytest.mark.parametrize("name,body,message", TARGET_MISTAKES, ids=[m[0] for m in TARGET_MISTAKES])
def test_target_mistakes(tmp_path, name, body, message):
    if "workloads" not in body and body.startswith("targets"):
        body += "\nworkloads: {bw: bandwidth}"
    with pytest.raises(InputError) as exc:
        load_study(write(tmp_path, body))
    assert message in str(exc.value), str(exc.value)


def test_cli_overrides_select_add_and_sweep(tmp_path, target):
    path = write(tmp_path, EXAMPLE % target)
    study = load_study(path, workloads=["bw"], sets=["file_size=8MiB", "phases=write,reread"], clients="3",
                       repetitions=1)
    cells = plan(study)
    assert [c.clients for c in cells] == [3, 3]
    assert all(c.params.file_size == 8 << 20 and c.params.phases == ["write", "reread"] for c in cells)
    study = load_study(None, targets=[str(target)], workloads=["bandwidth"], sets=["transfer_size=64KiB,1MiB"])
    assert [c.params.transfer_size for c in plan(study)] == [65536, 65536, 1048576, 1048576]
    assert list(study.targets.values())[0].url == f"file://{target}"


def test_set_can_be_scoped_to_one_workload(target):
    study = load_study(None, targets=[str(target)], workloads=["bandwidth", "metadata"],
                       sets=["bandwidth.file_size=8MiB", "metadata.file_size=4KiB,8KiB"])
    cells = plan(study)
    assert {c.params.file_size for c in cells if c.kind == "bandwidth"} == {8 << 20}
    assert {c.params.file_size for c in cells if c.kind == "metadata"} == {4096, 8192}
    study = load_study(None, targets=[str(target)], workloads=["bandwidth", "metadata"], sets=["bandwidth.file_size=8MiB"])
    assert {(c.kind, c.params.file_size) for c in plan(study)} == {("bandwidth", 8 << 20), ("metadata", 0)}


def test_targets_only_study_takes_workloads_from_the_command_line(tmp_path, target):
    path = write(tmp_path, f"targets: {{s: {{url: 'file://{target}'}}}}\n")
    with pytest.raises(InputError, match="defines no workloads"):
        load_study(path)
    study = load_study(path, workloads=["bandwidth"])
    assert list(study.workloads) == ["bandwidth"]


@pytest.mark.parametrize("kwargs,message", [
    ({"sets": ["trasnfer_size=1MiB"]}, "--set trasnfer_size: no selected workload has this parameter (did you mean 'transfer_size'?)"),
    ({"workloads": ["bandwidth"], "sets": ["bandwidth.items=5"]}, "--set bandwidth.items: bandwidth has no parameter items"),
    ({"workloads": ["bandwidth"], "sets": ["metadata.items=5"]}, "--set metadata.items: 'metadata' is not a selected workload or kind"),
    ({"sets": ["file_size"]}, "--set file_size: expected KEY=VALUE"),
    ({"clients": "0"}, "--clients: 0 is not a number of clients"),
    ({"clients": "1,x"}, "--clients: 'x' is not a whole number of clients"),
    ({"workloads": ["nosuch"]}, "--workload nosuch: not a workload of the study"),
    ({"targets": ["/nonexistent/dir"]}, "--target /nonexistent/dir: directory /nonexistent/dir does not exist"),
    # a setting given on the command line over the study's: its errors name the option
    ({"phase_timeout": "0s"}, "--phase-timeout: '0s' must be more than 0 seconds (e.g. 30m)"),
    ({"placement": "packed"}, "--placement: 'packed' is not one of spread, pack"),
    ({"clients_per_host": 0}, "--clients-per-host: 0 is not a number of clients (a whole number, 1 to 1,000,000)"),
])
def test_command_line_mistakes(target, kwargs, message):
    kwargs.setdefault("targets", [str(target)])
    with pytest.raises(InputError) as exc:
        load_study(None, **kwargs)
    assert str(exc.value).startswith(message), str(exc.value)


def test_cli_exit_2_one_line_nothing_written(tmp_path, target):
    """Through the real command: exit 2, one line on stderr, no traceback, no results, no scratch."""
    bad = write(tmp_path, f"targets: {{s: {{url: 'file://{target}'}}}}\nworkloads: {{bw: {{bandwidth: {{transfer_size: 1Mx}}}}}}\n")
    cases = [
        ["run", bad],
        ["run", str(tmp_path / "missing.yaml")],
        ["run", "--target", str(tmp_path / "nope"), "--workload", "bandwidth"],
        ["run", "--target", str(target), "--workload", "bandwidth", "--set", "file_size=big"],
        ["run", "--target", str(target), "--workload", "bandwidth", "--clients", "1,-2"],
        ["run", "--target", str(target), "--workload", "bandwidth", "--repetitions", "many"],
        ["run", "--target", str(target), "--workload", "bandwidth", "--json", str(tmp_path / "no" / "dir" / "x.json")],
        ["run", "--target", "gopher://x", "--workload", "bandwidth"],
        ["run", "--target", str(target), "--bogus-option"],
    ]
    for args in cases:
        r = storeval(*args, cwd=tmp_path)
        assert r.rc == 2, (args, r.err)
        assert len(r.err_lines) == 1 and r.err_lines[0].startswith("error: "), (args, r.err)
        assert "Traceback" not in r.err + r.out
        assert not (tmp_path / "storeval-results").exists()
        assert os.listdir(target) == []
