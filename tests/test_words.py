"""Units and words (issue 19): what the terminal prints of a real multi-factor run, and what `storeval workloads`
says of every parameter.

One small run is shared by the output tests: two targets, a bandwidth sweep over two transfer sizes, a skim and a
copy, at 1 and 2 clients. Its terminal output must print sizes as sizes, plurals right, every scaling line with
the factor it holds fixed, and each figure in one unit everywhere it appears (the phase table, Table 1, the
scaling lines, the JSON). `storeval workloads` must explain every parameter of every kind with its unit, and
print the defaults a run really resolves — checked against a real `storeval run --workload bandwidth` and the
default study as `spec.load_study` resolves it.
"""

from __future__ import annotations

import re

import pytest
import yaml

from storeval.units import format_duration, format_size_compact, parse_duration, parse_size, plural, sig
from storeval.workloads import WORKLOADS
from storeval.workloads.base import param_text

from .helpers import load_json, storeval



@pytest.fixture(scope="module")
def multi(tmp_path_factory):
    """One run of a small multi-factor study: (terminal output, JSON document)."""
    base = tmp_path_factory.mktemp("words")
    for name in ("one", "two"):
        (base / name).mkdir()
    study = {
        "targets": {"scratch": "one", "other": "two"},
        "workloads": {
            "bw": {"bandwidth": {"file_size": "2MiB", "transfer_size": ["64KiB", "1MiB"], "phases": ["write", "read"]}},
            "sk": {"skim": {"files_per_client": 1, "file_size": "1MiB", "cluster_size": "256KiB", "fraction": 0.3}},
            "cp": {"copy": {"chunk_size": "2MiB", "transfer_size": "1MiB", "stagger": "0s", "direction": "download"}},
        },
        "clients": [1, 2],
    }
    (base / "study.yaml").write_text(yaml.safe_dump(study, sort_keys=False))
    r = storeval("run", "study.yaml", "--no-html", "--json", "run.json", "--results", "res", cwd=base, timeout=900)
    assert r.rc in (0, 1), r.err  # 1: a flag such as busy-host on this shared machine is not a failure here
    doc = load_json(base / "run.json")
    assert all(c["status"] == "ok" for c in doc["cells"]), [c["error"] for c in doc["cells"]]
    return r.out, r.err, doc  # the tables and messages on stdout, the progress lines on stderr


def rows_of(out: str, title: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows of the rich table whose title line starts with ``title``. Output to a pipe is 160
    columns wide, so a cell may be folded over several lines: they are joined with a space (rich folds at
    spaces where it can)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip().startswith(title))
    header: list[list[str]] = []
    rows: list[list[list[str]]] = []
    for line in lines[start + 1:]:
        if line.startswith("└"):
            break
        if line.startswith("┃"):
            cells = [c.strip() for c in line.strip()[1:-1].split("┃")]
            header = [h + [c] for h, c in zip(header, cells)] if header else [[c] for c in cells]
        elif line.startswith("│"):
            cells = [c.strip() for c in line.strip()[1:-1].split("│")]
            if cells[0] or not rows:
                rows.append([[c] for c in cells])
            else:  # a folded row goes on
                rows[-1] = [r + [c] for r, c in zip(rows[-1], cells)]
    join = lambda parts: " ".join(p for p in parts if p)  # noqa: E731
    return [join(h) for h in header], [[join(c) for c in row] for row in rows]


def test_sizes_are_printed_as_sizes(multi):
    out, _, doc = multi
    assert set(re.findall(r"transfer_size=(\S+?)[)\s,;]", out)) == {"64KiB", "1MiB"}
    for bare in ("65536", "1048576", "2097152", "262144"):  # the run's sizes in bytes never appear as such
        assert bare not in out
    assert not re.search(r"\b[a-z_]+=\d{4,}\b", out)  # no factor printed as a bare number of bytes
    assert "bw: 2MiB per client" in out and "cp: 2MiB per worker, in 1MiB pieces, all workers start together" in out
    assert "sk: 1 file per client, its own, of 1MiB" in out


def test_plural_forms(multi):
    out, err, _ = multi
    for text in (out, err):
        assert not re.search(r"\b1 (clients|files|workers|repetitions|reps)\b", text)
        assert "(s)" not in text
    assert "· 1 client " in err and "· 2 clients " in err  # the progress lines
    assert re.search(r"saturation at (1 client|2 clients)\b", out)
    assert "of 1 reps" not in out


def test_the_progress_lines_print_sizes_as_sizes(multi):
    _, err, _ = multi
    assert "transfer_size=64KiB" in err and "65536" not in err


def test_every_scaling_line_names_the_factor_it_holds_fixed(multi):
    out, _, doc = multi
    lines = [line for line in out.splitlines() if line.startswith("scaling ")]
    bw = [line for line in lines if " · bw" in line]
    held = {(m.group(1), m.group(2), m.group(3)) for line in bw
            if (m := re.match(r"scaling (\w+) · bw \(transfer_size=(64KiB|1MiB)\) · (write|read): clients 1→", line))}
    assert len(bw) == 8 and held == {(t, ts, ph) for t in ("scratch", "other") for ts in ("64KiB", "1MiB")
                                      for ph in ("write", "read")}
    assert all(line.endswith(("saturation at 1 client", "saturation at 2 clients")) for line in bw)
    # the JSON says the same: each line's label, legend and unit
    for s in doc["scaling"]:
        if s["workload"] == "bw":
            assert s["label"] == f"transfer_size={format_size_compact(s['factors']['transfer_size'])}"
            assert s["legend"] == f"{s['target']} ({s['label']})" and s["unit"] == "MiB/s"
        else:
            assert s["label"] == "" and s["legend"] == s["target"] and s["unit"] == "MB/s"


def test_one_unit_per_figure_across_tables(multi):
    out, _, doc = multi
    units = {"bw": "MiB/s", "sk": "MB/s", "cp": "MB/s"}  # bandwidth as IOR; the skim and copies as their seeds
    titles = {"bw": "bandwidth —", "sk": "skim —", "cp": "copy —"}
    for workload, unit in units.items():
        other = "MB/s" if unit == "MiB/s" else "MiB/s"
        header, rows = rows_of(out, titles[workload])
        assert unit in header and not any(other in h for h in header), header  # the phase table
        assert not any(other in cell for row in rows for cell in row)
        lines = [line for line in out.splitlines() if line.startswith("scaling ") and f" · {workload}" in line]
        assert lines and all(f" {unit}; saturation" in line for line in lines)  # the scaling lines
        assert {s["unit"] for s in doc["scaling"] if s["workload"] == workload} == {unit}
    # Table 1: read in each workload's own unit (the column mixes them, so each cell names its unit); the JSON row
    # carries the figure in that unit and, as ever, in MiB/s
    header, rows = rows_of(out, "Summary — storage × workload")
    assert header[:6] == ["target", "workload", "clients", "read", "write MiB/s", "rate"]
    table = {(r["target"], r["workload"], r["factors"].get("transfer_size")): r for r in doc["table"]}
    for cells in rows:
        target, name = cells[0], cells[1].split()[0]
        factors = dict(f.split("=") for f in cells[1].split()[1:])
        row = table[(target, name, parse_size(factors["transfer_size"]) if factors else None)]
        read = row["read"]
        assert read["unit"] == units[name]
        assert cells[3] == f"{sig(read['mean'])} {units[name]} @{read['clients']}"
        assert row["read_MiBps"]["mean"] == pytest.approx(read["mean"] * (1e6 if units[name] == "MB/s" else 2**20)
                                                          / 2**20)
    # the skim's MB/s of Table 1 is the best of the phase table's MB/s column (the same figure, the same unit)
    header, rows = rows_of(out, "skim —")
    mbps = header.index("MB/s")
    for target in ("scratch", "other"):
        best = max((s for s in doc["summary"] if s["target"] == target and s["workload"] == "sk"),
                   key=lambda s: s["MBps"]["mean"])
        assert table[(target, "sk", None)]["read"]["mean"] == best["MBps"]["mean"]
        assert [r[mbps] for r in rows if r[0] == target and r[2] == str(best["factors"]["clients"])] == [
            sig(best["MBps"]["mean"])]


def test_table_one_puts_the_targets_of_a_workload_side_by_side(multi):
    out, _, doc = multi
    order = [(r["workload"], str(r["factors"]), r["target"]) for r in doc["table"]]
    assert order == [(w, f, t) for w, f in (("bw", "{'transfer_size': 65536}"), ("bw", "{'transfer_size': 1048576}"),
                                            ("sk", "{}"), ("cp", "{}")) for t in ("scratch", "other")]
    # and so does the terminal's Table 1
    _, rows = rows_of(out, "Summary — storage × workload")
    assert [(row[1].split()[0], row[0]) for row in rows] == [(w, t) for w, f, t in order]


def test_messages_name_the_configuration_in_words(multi):
    out, _, _ = multi
    messages = [line for line in out.splitlines() if line.startswith(("✗ ", "⚠ "))]
    assert messages  # short phases at least: the run moves a few MiB
    for line in messages:
        m = re.search(r"\[(\w+) · (\w+)( transfer_size=(64KiB|1MiB))? · (1 client|2 clients) · [\w-]+\]$", line)
        assert m, line
        assert (m.group(2) == "bw") == bool(m.group(3))


def table_of_workloads(out: str) -> dict[str, dict[str, dict[str, str]]]:
    """`storeval workloads` as {kind: {parameter: {column: text}}}, from its tables."""
    kinds: dict[str, dict[str, dict[str, str]]] = {}
    lines = out.splitlines()
    for i, line in enumerate(lines):
        kind = line.split(" — ")[0].strip()
        if kind in WORKLOADS and " — " in line:
            header, rows = rows_of("\n".join(lines[i:]), line.strip())
            kinds[kind] = {row[0]: dict(zip(header, row)) for row in rows if row[0]}
    return kinds


def test_workloads_explains_every_parameter_with_its_unit_and_default():
    r = storeval("workloads")
    assert r.rc == 0 and r.err == "", r.err
    shown = table_of_workloads(r.out)
    assert set(shown) == set(WORKLOADS)
    for kind, cls in WORKLOADS.items():
        model = cls.Params
        assert set(shown[kind]) == set(model.model_fields), kind
        for name, info in model.model_fields.items():
            row = shown[kind][name]
            assert row["unit"] not in ("", "—") and row["what it does"] not in ("", "—"), (kind, name)
            want = "(required)" if info.is_required() else param_text(model, name, info.default, ", ")
            assert row["default"] == want, (kind, name)
    # sizes as sizes, durations as durations: what `stagger 0.1` used to say
    assert shown["copy"]["stagger"]["default"] == "100ms" and shown["copy"]["stagger"]["unit"] == "s (duration)"
    assert shown["copy"]["chunk_size"]["default"] == "256MiB" and shown["copy"]["chunk_size"]["unit"] == "bytes (size)"
    assert "worker k starts k × stagger" in shown["copy"]["stagger"]["what it does"]
    assert shown["jobs"]["duration"]["default"] == "(required)"
    # one kind alone; an unknown kind is one line
    one = storeval("workloads", "copy")
    assert one.rc == 0 and set(table_of_workloads(one.out)) == {"copy"}
    bad = storeval("workloads", "nosuch")
    assert bad.rc == 2 and bad.err_lines == ["error: workload kind 'nosuch' is not installed here (known: bandwidth, "
                                             "command, concurrent, copy, io500, jobs, metadata, replay, skim, tpc; "
                                             "install the package that adds it)"]


def test_the_defaults_printed_are_those_a_run_resolves(tmp_path):
    r = storeval("workloads")
    shown = table_of_workloads(r.out)
    target = tmp_path / "t"
    target.mkdir()
    run = storeval("run", "--workload", "bandwidth", "--target", str(target), "--clients", "1", "--no-html",
                   "--json", "run.json", "--results", "res", cwd=tmp_path, timeout=900)
    assert run.rc in (0, 1), run.err
    cell, = load_json(tmp_path / "run.json")["cells"]
    model = WORKLOADS["bandwidth"].Params
    assert set(cell["params"]) == set(shown["bandwidth"])
    for name, value in cell["params"].items():
        assert shown["bandwidth"][name]["default"] == param_text(model, name, value, ", "), name
    # `storeval run` without a study: the default study's parameters, as the run resolves them
    from storeval.spec import load_study

    study = load_study(default_dir=str(target))
    assert {w.kind for w in study.workloads.values()} == {"bandwidth", "metadata", "skim"}
    for spec in study.workloads.values():
        model, resolved = WORKLOADS[spec.kind].Params, spec.combos[0].model_dump(mode="json")
        for name, value in resolved.items():
            row = shown[spec.kind][name]
            assert (row["default study"] or row["default"]) == param_text(model, name, value, ", "), (spec.kind, name)
    assert shown["bandwidth"]["file_size"]["default study"] == "2GiB"
    assert shown["bandwidth"]["transfer_size"]["default study"] == ""  # the default itself


def test_words_of_units():
    assert [format_size_compact(n) for n in (0, 1500, 65536, 1 << 20, 32_000_000, 3 << 30)] == [
        "0B", "1500B", "64KiB", "1MiB", "32MB", "3GiB"]
    assert all(parse_size(format_size_compact(n)) == n for n in (1, 1000, 1500, 65536, 32_000_000, 10**12 + 1))
    assert [format_duration(s) for s in (0, 0.1, 1, 1.5, 120, 7200, 0.0005)] == [
        "0s", "100ms", "1s", "1.5s", "2m", "2h", "500us"]
    assert all(parse_duration(format_duration(s)) == pytest.approx(s) for s in (0.1, 1.5, 90, 120, 0.0005))
    assert [plural(1, "client"), plural(2, "client"), plural(0, "repetition"), plural(1000, "file")] == [
        "1 client", "2 clients", "0 repetitions", "1,000 files"]
