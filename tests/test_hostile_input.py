"""Hostile input (issue 12, cases 11–14): YAML bombs, URLs with parts a driver would ignore, credentials in
URLs, and names that are markup or control characters. Each is refused with one line before anything runs,
or shown as data; no secret reaches the terminal, the JSON, the HTML or the results store."""

from __future__ import annotations

import json
import os
from pathlib import Path

import duckdb
import pytest

from storeval.drivers import make_driver
from storeval.errors import InputError
from storeval.redact import redact, redact_text, register_secret, visible
from storeval.report.console import safe
from storeval.spec import load_study

from .helpers import load_json, storeval


def _study(tmp_path: Path, text: str, name: str = "study.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _refused(tmp_path: Path, *args: str) -> str:
    """Run storeval; it must refuse with exit 2 and one `error:` line, writing nothing. Returns that line."""
    r = storeval(*args, cwd=tmp_path)
    assert r.rc == 2, (r.rc, r.err, r.out)
    assert len(r.err_lines) == 1 and r.err_lines[0].startswith("error: "), r.err
    assert "Traceback" not in r.err + r.out and "internal error" not in r.err
    assert not (tmp_path / "storeval-results").exists()
    return r.err_lines[0]


# -- case 11: YAML that would exhaust the machine or hide a mistake ---------------------------------------
def _bomb(levels: int = 9) -> str:
    lines = ['a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        prev, name = chr(ord("a") + i - 1), chr(ord("a") + i)
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 9) + "]")
    return "\n".join("  " + line for line in lines)


def test_an_alias_bomb_in_a_free_text_field_is_refused_with_its_place(tmp_path, target):
    study = _study(tmp_path, f"targets: {{s: {{url: 'file://{target}'}}}}\nworkloads: {{bw: bandwidth}}\n"
                             f"description:\n{_bomb()}\n")
    line = _refused(tmp_path, "run", str(study))
    assert line == (f"error: {study}:8:10: aliases expand to more than 10,000 values (nested aliases multiply; "
                    "write the values out or use fewer aliases)")
    assert os.listdir(target) == []


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path):
    study = _study(tmp_path, "description: " + "[" * 50_000 + "]" * 50_000 + "\n")
    assert _refused(tmp_path, "run", str(study)) == \
        f"error: {study}:1:45: nested more than 32 levels deep (a study needs about 6; flatten it)"
    block = _study(tmp_path, "".join(" " * i + f"k{i}:\n" for i in range(40)), "block.yaml")
    assert _refused(tmp_path, "run", str(block)) == \
        f"error: {block}:32:32: nested more than 32 levels deep (a study needs about 6; flatten it)"


@pytest.mark.parametrize("body,where,message", [
    ("targets: {s: {url: 'file://T'}}\nworkloads: {bw: bandwidth}\nclients: [1]\nclients: [8]\n", "4:1",
     "the key 'clients' appears twice in one mapping (first at line 3); keep one"),
    ("targets:\n  s:\n    url: file://T\n    url: file:///elsewhere\nworkloads: {bw: bandwidth}\n", "4:5",
     "the key 'url' appears twice in one mapping (first at line 3); keep one"),
    ("targets: {s: {url: 'file://T'}}\nworkloads:\n  bw: {bandwidth: {file_size: 1MiB}}\n  bw: metadata\n", "4:3",
     "the key 'bw' appears twice in one mapping (first at line 3); keep one"),
    ("targets: {s: {url: 'file://T'}}\nworkloads: {bw: {bandwidth: {iodepth: 1, 0x1: 2, 1: 3}}}\n", "2:50",
     "the key '1' appears twice in one mapping (first at line 2); keep one"),
    ("targets: {s: &t {self: *t, url: 'file://T'}}\n", "1:24",
     "the alias *t is used inside the node it names, which would contain itself (write the value out)"),
])
def test_duplicate_keys_and_self_containing_aliases_are_refused(tmp_path, target, body, where, message):
    study = _study(tmp_path, body.replace("file://T", f"file://{target}"))
    with pytest.raises(InputError) as exc:
        load_study(str(study))
    assert str(exc.value) == f"{study}:{where}: {message}"


def test_anchors_and_merge_keys_still_work(tmp_path, target):
    study = _study(tmp_path, f"""\
targets:
  a: &disk {{url: "file://{target}"}}
  b: *disk
workloads:
  small: {{bandwidth: &small {{file_size: 1MiB, transfer_size: 64KiB, phases: [write, read]}}}}
  big: {{bandwidth: {{<<: *small, file_size: 4MiB}}}}
""")
    s = load_study(str(study))
    assert [t.url for t in s.targets.values()] == [f"file://{target}"] * 2
    assert s.workloads["small"].combos[0].file_size == 1 << 20
    assert s.workloads["big"].combos[0].file_size == 4 << 20  # the explicit key wins over the merged one
    assert s.workloads["big"].combos[0].transfer_size == 64 << 10


def test_set_values_go_through_the_same_bounded_loader(target):
    bomb = "[" + ", ".join(f"&x{i} [" + ", ".join([f"*x{i - 1}" if i else "write"] * 12) + "]"
                           for i in range(5)) + "]"
    with pytest.raises(InputError) as exc:
        load_study(None, targets=[str(target)], workloads=["bandwidth"], sets=[f"phases={bomb}"])
    assert str(exc.value).startswith("--set phases: column ")
    assert str(exc.value).endswith(": aliases expand to more than 10,000 values (nested aliases multiply; write "
                                   "the values out or use fewer aliases)")


def test_oversized_study_and_bad_tagged_values_are_one_line(tmp_path):
    big = _study(tmp_path, "description: '" + "x" * (1 << 20) + "'\n", "big.yaml")
    assert _refused(tmp_path, "run", str(big)) == (f"error: study file {big} is larger than 1 MiB (a study is a few "
                                                   "KiB; check that this is the study file)")
    tagged = _study(tmp_path, "repetitions: !!int many\n", "tagged.yaml")
    assert _refused(tmp_path, "run", str(tagged)) == (f"error: {tagged}: not valid YAML (a tagged value cannot be read: "
                                                      "invalid literal for int() with base 10: 'many'); check the file")


def test_sweeps_that_would_plan_billions_of_cells_are_refused_before_expanding(target):
    values = ",".join(str(i) for i in range(1, 101))
    with pytest.raises(InputError) as exc:
        load_study(None, targets=[str(target)], workloads=["bandwidth"],
                   sets=[f"iodepth={values}", f"random_seed={values}", "verify=true,false"])
    assert str(exc.value) == ("--workload bandwidth: the swept parameters make 20,000 combinations (at most 10,000); "
                              "sweep fewer values")
    with pytest.raises(InputError) as exc:
        load_study(None, targets=[str(target)], workloads=["bandwidth"], sets=[f"iodepth={values}"],
                   clients=values, repetitions=11)
    assert str(exc.value) == ("the study has 110,000 cells (targets and their settings × parameter combinations × "
                              "client counts × repetitions; at most 100,000): sweep fewer values or repeat less")


# -- case 12: every part of a URL is understood, or refused ------------------------------------------------
@pytest.mark.parametrize("url,message", [
    ("s3://bucket/x?endpoint=http://127.0.0.1:1",
     "s3://bucket/x?endpoint=http://127.0.0.1:1: the s3:// driver does not understand the query "
     "'?endpoint=http://127.0.0.1:1', so it would be ignored (give settings as keys of the target (endpoint, "
     "region, …), not in the URL)"),
    ("file://T#2", "file://T#2: the file:// driver does not understand the fragment '#2', so it would be ignored "
                   "(a '#' in a name is written %23)"),
    ("file://T?x=1", "file://T?x=1: the file:// driver does not understand the query '?x=1', so it would be "
                     "ignored (give settings as keys of the target, not in the URL; a '?' in a name is written %3F)"),
    ("file://T?", "file://T?: the file:// driver does not understand the query '?', so it would be ignored (give "
                  "settings as keys of the target, not in the URL; a '?' in a name is written %3F)"),
    ("file://localhost:99/data", "file://localhost:99/data: the file:// driver does not understand the port 99, so "
                                 "it would be ignored (file:// URLs name a local path, not a server)"),
    ("s3://bucket:9000/p", "s3://bucket:9000/p: the s3:// driver does not understand the port 9000, so it would be "
                           "ignored (an s3:// URL names a bucket; the server is the endpoint option, e.g. endpoint: "
                           "http://HOST:9000)"),
    ("root://host:1094//data#x", "root://host:1094//data#x: the root:// driver does not understand the fragment "
                                 "'#x', so it would be ignored (a '#' in a name is written %23)"),
    ("hdfs://nn:8020/data?user=x", "hdfs://nn:8020/data?user=x: the hdfs:// driver does not understand the query "
                                   "'?user=x', so it would be ignored (give settings as keys of the target, not in "
                                   "the URL; a '?' in a name is written %3F)"),
    ("hdfs://nn:80x/data", "hdfs://nn:80x/data: the port is not a number from 1 to 65535"),
    ("null://x#y", "null://x#y: the null:// driver does not understand the fragment '#y', so it would be ignored "
                   "(a '#' in a name is written %23)"),
    ("file://T/a\tb", "file://T/a\\x09b: holds the invisible character \\x09 (write the URL on one line, without "
                      "control characters)"),
])
def test_url_parts_a_driver_would_ignore_are_refused(tmp_path, target, url, message):
    url, message = url.replace("file://T", f"file://{target}"), message.replace("file://T", f"file://{target}")
    with pytest.raises(InputError) as exc:
        load_study(str(_study(tmp_path, f"targets: {{s: {{url: {json.dumps(url)}}}}}\nworkloads: {{bw: bandwidth}}\n")))
    assert str(exc.value) == f"targets.s.url: {message}"
    with pytest.raises(InputError) as exc:  # the clients and the watchdog build drivers from URLs too
        make_driver(url)
    assert str(exc.value) == message


def test_url_refusal_through_the_command_line_writes_nothing(tmp_path, target):
    line = _refused(tmp_path, "run", "--target", f"file://{target}#2", "--workload", "bandwidth")
    assert line == (f"error: --target file://{target}#2: the file:// driver does not understand the fragment '#2', "
                    "so it would be ignored (a '#' in a name is written %23)")
    assert os.listdir(target) == []
    (target / "hd#2").mkdir()  # what the user meant, written as a path: it is that directory
    s = load_study(None, targets=[str(target / "hd#2")], workloads=["bandwidth"])
    assert [t.url for t in s.targets.values()] == [f"file://{target}/hd%232"]
    assert make_driver(f"file://{target}/hd%232").root == str(target / "hd#2")


def test_parts_a_driver_reads_are_accepted(target):
    assert make_driver("root://alice@host:1094//data").server == "root://alice@host:1094"
    assert make_driver("hdfs://[::1]:8020/data").namenode == "hdfs://[::1]:8020"
    assert make_driver(f"file://localhost{target}").root == str(target)


# -- case 13: credentials never in a URL, and never in any output --------------------------------------------
KEY, SECRET, SIG = "AKIAPLANTEDKEY7Q", "pl4nted/Secret+Vb7Q", "5ec0ffee5ec0ffee5ec0ffee"


@pytest.mark.parametrize("args,study,message", [
    (["--target", f"s3://{KEY}:{SECRET}@bucket/p"], None,
     "--target s3://***@bucket/p: holds a password; credentials never go in a URL, where they would be stored and "
     "printed (give the keys through access_key_env/secret_key_env, which name environment variables, or "
     "credentials_file)"),
    (["--target", f"s3://{KEY}@bucket/p"], None,
     "--target s3://***@bucket/p: the s3:// driver does not understand a user name, so it would be ignored (give "
     "the keys through access_key_env/secret_key_env, which name environment variables, or credentials_file)"),
    (["--target", f"root://user:{SECRET}@host//p"], None,
     "--target root://***@host//p: holds a password; credentials never go in a URL, where they would be stored "
     "and printed (use XRootD's own authentication: a token, Kerberos or an X.509 proxy from the environment)"),
    (["--target", f"root://host//p?authz={SECRET}"], None,
     "--target root://host//p?authz=***: the root:// driver does not understand the query '?authz=***', so it "
     "would be ignored (files are opened by host and path, so ?xrd.… settings would be dropped; set them as XRD_… "
     "environment variables instead)"),
    (["--target", f"hdfs://user:{SECRET}@host/p"], None,
     "--target hdfs://***@host/p: holds a password; credentials never go in a URL, where they would be stored and "
     "printed (the HDFS user comes from Kerberos, or from HADOOP_USER_NAME in the environment)"),
    ([], f"targets: {{m: {{url: 's3://bucket/p', endpoint: 'http://{KEY}:{SECRET}@127.0.0.1:9000'}}}}\n",
     "targets.m.endpoint: 'http://***@127.0.0.1:9000' holds a password; credentials never go in a URL, where they "
     "would be stored and printed (give the keys through access_key_env/secret_key_env, which name environment "
     "variables, or credentials_file)"),
    ([], f"targets: {{m: {{url: 's3://bucket/p?X-Amz-Signature={SIG}&X-Amz-Credential={KEY}'}}}}\n",
     "targets.m.url: s3://bucket/p?X-Amz-Signature=***&X-Amz-Credential=***: the s3:// driver does not understand "
     "the query '?X-Amz-Signature=***&X-Amz-Credential=***', so it would be ignored (give settings as keys of the "
     "target (endpoint, region, …), not in the URL)"),
])
def test_credentials_in_urls_are_refused_without_repeating_them(tmp_path, args, study, message):
    if study is not None:
        args = [str(_study(tmp_path, study + "workloads: {bw: bandwidth}\n")), *args]
    line = _refused(tmp_path, "run", *args, "--workload", "bandwidth")
    assert line == f"error: {message}"
    for secret in (SECRET, SIG, "pl4nted"):
        assert secret not in line


def _everything(*paths: Path) -> bytes:
    """The raw bytes of every file under ``paths`` (the results store, its WAL, the JSON, the HTML …)."""
    blob = b""
    for path in paths:
        for p in [path] if path.is_file() else sorted(q for q in path.rglob("*") if q.is_file()):
            blob += p.read_bytes()
    return blob


def test_secrets_planted_everywhere_reach_no_output(tmp_path, target):
    """A run whose description, study path (hence command line), S3 keys and error texts all carry secrets:
    stdout, stderr, the JSON, the HTML and the raw bytes of the results store hold none of them."""
    canary = "canary-Zq8-visible"
    planted = tmp_path / f"dir?X-Amz-Signature={SIG}"
    planted.mkdir()
    description = (f"{canary} keys {KEY} and {SECRET}; mirror s3://{KEY}:{SECRET}@bucket/p; signed "
                   f"https://h/o?X-Amz-Credential={KEY}%2F20240101&X-Amz-Signature={SIG}; header Authorization: "
                   f"AWS4-HMAC-SHA256 Credential={KEY}/20240101/us-east-1/s3/aws4_request, Signature={SIG}; "
                   f"aws_secret_access_key = {SECRET}")
    study = _study(planted, f"""\
description: {json.dumps(description)}
targets:
  local: {{url: "file://{target}"}}
  s3down: {{url: "s3://bucket/p", endpoint: "http://127.0.0.1:1", access_key_env: SV_PLANTED_KEY,
           secret_key_env: SV_PLANTED_SECRET, timeout: 2s}}
workloads:
  md: {{metadata: {{items: 10}}}}
""")
    results, out_json = tmp_path / "results", tmp_path / "out.json"
    r = storeval("run", str(study), "--results", str(results), "--json", str(out_json), cwd=tmp_path,
                 env={"SV_PLANTED_KEY": KEY, "SV_PLANTED_SECRET": SECRET})
    assert r.rc == 1, r.err  # the S3 cell fails (nothing listens on port 1); the local one runs
    doc = load_json(out_json)
    assert [c["status"] for c in doc["cells"]] == ["ok", "failed"]
    assert doc["cells"][1]["error"].startswith("target s3down: listing of the bucket failed: connection refused by "
                                               "127.0.0.1:1 ")
    html = list(results.glob("report-*.html"))
    assert len(html) == 1
    blob = (r.out + r.err).encode() + _everything(results, out_json)
    assert canary.encode() in _everything(results / "storeval.duckdb") and canary in doc["study"]["description"]
    assert canary.encode() in html[0].read_bytes()
    for secret in (KEY, SECRET, SIG):
        assert secret.encode() not in blob, secret
    assert doc["study"]["description"] == (
        f"{canary} keys *** and ***; mirror s3://***@bucket/p; signed https://h/o?X-Amz-Credential=***"
        "&X-Amz-Signature=***; header Authorization: ***")
    assert "?X-Amz-Signature=***" in doc["command_line"]


def test_stored_runs_of_older_versions_are_redacted_when_read(tmp_path, target):
    results = tmp_path / "results"
    assert storeval("run", "--target", str(target), "--workload", "metadata", "--set", "items=10", "--clients", "1",
                    "--results", str(results), "--no-html", cwd=tmp_path).rc == 0
    with duckdb.connect(str(results / "storeval.duckdb")) as con:  # what an older storeval could have stored
        con.execute("UPDATE cells SET target_url = ?, status = 'failed', error = ?",
                    [f"s3://{KEY}:{SECRET}@bucket/p", f"PUT https://h/o?X-Amz-Signature={SIG} failed"])
    r = storeval("report", str(results), "--json", str(tmp_path / "old.json"), "--html", str(tmp_path / "old.html"),
                 cwd=tmp_path)
    assert r.rc == 0, r.err
    out = " ".join(r.out.split())  # the terminal wraps long lines where the temporary path's length puts them
    assert "cell 0 (" in out and "failed: PUT https://h/o?X-Amz-Signature=*** failed" in out
    blob = (r.out + r.err).encode() + _everything(tmp_path / "old.json", tmp_path / "old.html")
    unwrapped = (r.out + r.err).replace("\n", "").replace(" ", "").encode()  # a secret a wrap cut in two
    for secret in (KEY, SECRET, SIG):
        assert secret.encode() not in blob and secret.encode() not in unwrapped


def test_redaction_masks_each_credential_shape():
    register_secret("registered-s3cret-42")
    cases = {
        "s3://K:S/with+slash@bucket/p": "s3://***@bucket/p",
        "s3://KEYONLY@bucket/p": "s3://***@bucket/p",
        "root://alice@host//p": "root://alice@host//p",  # an XRootD user name is data
        "file:///data/a@b and s3://bucket/dir@2/x": "file:///data/a@b and s3://bucket/dir@2/x",
        "GET /o?uploadId=7&X-Amz-Security-Token=tok&sig=abc": "GET /o?uploadId=7&X-Amz-Security-Token=***&sig=***",
        "Authorization: Bearer abc.def": "Authorization: ***",
        "Bearer abc.def rest": "Bearer *** rest",
        "password=hunter2; passwd: 'x'": "password=***; passwd: '***'",
        "secret_key_env=MY_VARIABLE": "secret_key_env=MY_VARIABLE",  # a name, not a secret
        "error quoting registered-s3cret-42 here": "error quoting *** here",
    }
    for text, expected in cases.items():
        assert redact_text(text) == expected, text
    assert redact({"a": ["s3://K:S@b/p", ("password=x",)], "n": 1}) == {"a": ["s3://***@b/p", ("password=***",)], "n": 1}


# -- case 14: names are data --------------------------------------------------------------------------------
def test_safe_and_visible_show_text_as_itself():
    assert visible("a\x1b[31mb\u202ec\nd\u200b\U000e0041é日本") == "a\\x1b[31mb\\u202ec\\x0ad\\u200b\\U000e0041é日本"
    assert safe("[/red]") == "\\[/red]"
    assert safe("x\\") == "x\\"
    assert safe("a\\[b]") == "a\\\\\\[b]"
    assert safe("\x1b]0;title\x07") == "\\x1b]0;title\\x07"


def test_markup_names_print_as_themselves_in_run_report_and_compare(tmp_path, target):
    study = _study(tmp_path, f"""\
targets:
  "[/red]": {{url: "null://"}}
  ":warning: [bold]x\\\\": {{url: "file://{target}"}}
workloads:
  "[/]": {{metadata: {{items: 10}}}}
""")
    results = tmp_path / "results"
    r = storeval("run", str(study), "--results", str(results), "--no-html", cwd=tmp_path)
    assert r.rc == 0, r.err
    for text in (r.out, storeval("report", str(results), cwd=tmp_path).out,
                 storeval("compare", str(results), str(results), cwd=tmp_path).out):
        rows = [line for line in text.splitlines() if "tree-create" in line or "file-create" in line]
        assert any(line.startswith("│ [/red] ") for line in rows), text
        assert any(line.startswith("│ :warning: [bold]x\\ ") for line in rows), text
        assert "│ [/]" in text
    assert "[/red] · [/] · 1 client" in r.err and "✓" in r.err  # the progress bars
    assert "Traceback" not in r.err and "internal error" not in r.err


@pytest.mark.parametrize("body,message", [
    ('targets: {"red\\e[31m": {url: "null://"}}\nworkloads: {bw: bandwidth}\n',
     "targets.red\\x1b[31m: the name holds the invisible character \\x1b (names are printed; use letters, digits, "
     "spaces and punctuation)"),
    ('targets: {s: {url: "null://"}}\nworkloads: {"gnp\\u202exe": bandwidth}\n',
     "workloads.gnp\\u202exe: the name holds the invisible character \\u202e (names are printed; use letters, "
     "digits, spaces and punctuation)"),
])
def test_names_with_control_or_bidi_characters_are_refused(tmp_path, body, message):
    line = _refused(tmp_path, "run", str(_study(tmp_path, body)))
    assert line == f"error: {message}"
    assert "\x1b" not in line and "\u202e" not in line


def test_control_characters_in_a_stored_run_reach_the_terminal_as_escapes(tmp_path, target):
    """A store written before names were checked (or edited by hand) still prints safely."""
    results = tmp_path / "results"
    assert storeval("run", "--target", str(target), "--workload", "metadata", "--set", "items=10", "--clients", "1",
                    "--results", str(results), "--no-html", cwd=tmp_path).rc == 0
    with duckdb.connect(str(results / "storeval.duckdb")) as con:
        con.execute("UPDATE cells SET target = ?, workload = ?, status = 'failed', error = ?",
                    ["evil\x1b[31m\u202e[/red]", "w\x1b]0;pwned\x07", "boom \x1b[2J[bold]"])
    r = storeval("report", str(results), cwd=tmp_path)
    assert r.rc == 0, r.err
    for bad in ("\x1b", "\u202e", "\x07"):
        assert bad not in r.out + r.err
    assert "cell 0 (evil\\x1b[31m\\u202e[/red] · w\\x1b]0;pwned\\x07 · 1 client) failed: boom \\x1b[2J[bold]" in r.out
    assert "│ evil\\x1b[31m\\u202e[/red] " in r.out
