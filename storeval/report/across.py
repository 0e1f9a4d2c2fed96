"""Several runs in one report (``storeval report RESULTS --runs all|ID,ID``) and what differed between them.

Each run is analysed on its own (its outliers, its flags, its summaries are its own), then the analyses are
put side by side as if they were one run: cells and configurations renumbered so their ids do not collide
(each run's samples and events follow its cells), and a target name that more than one run used told apart by
the run it came from (``local (run 20261126-1213)``), so that every table and every chart of the report shows
the runs' systems beside each other without a line of one run joining a line of another. Runs that are still
running or that failed are shown with their status, never left out.

What differed between runs that a reader must know before trusting a side-by-side figure is listed one fact
per line: the environment each run recorded (host, kernel, CPU, RAM, library and storeval versions, each
target's mount and file system, host load …) and, for a report across runs, the study (its hash and each
parameter). ``storeval compare`` lists its two runs' differences with the same function, in the same words.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..analysis.figures import CellFigures, ConfigSummary
from ..errors import InputError
from ..redact import visible
from ..store import RunData

# environment keys that differ between any two runs by design (the runs' own records say them)
NOT_ENVIRONMENT = frozenset({"command_line", "start_time", "study_hash"})


@dataclass
class Analysed:
    """One run as loaded and analysed: the input of ``combine``."""

    run: RunData
    cells: list[CellFigures]
    summary: list[ConfigSummary]
    samples: list[tuple]


@dataclass
class Across:
    """Several runs as one: what the terminal, the JSON document, the HTML page and the figure files show."""

    run: RunData  # the runs merged: renumbered cells, events of every run, the targets under their shown names
    cells: list[CellFigures]
    summary: list[ConfigSummary]
    samples: list[tuple]
    runs: list[dict[str, Any]]  # per run: run_id, label, started, finished, command_line, engine, targets, status …
    differences: list[str]  # one line per fact that differed (``kernel: 6.1 (run A) vs 6.5 (run B)``)


def parse_runs(text: str, known: list[str], resolve) -> list[str]:
    """The run ids ``--runs`` names: ``all`` (every run of the store, oldest first) or a comma list of ids or
    unique prefixes (``resolve`` turns one into its id or raises the store's one-line error). An empty list or
    a run named twice is refused in one line."""
    names = [n.strip() for n in text.split(",")]
    shown = _echo(text)
    if text.strip() == "all":
        if not known:
            raise InputError("--runs all: the results directory holds no runs yet (run storeval run first)")
        return list(known)
    if not any(names):
        raise InputError("--runs: name the runs to show side by side (--runs all, or --runs ID,ID)")
    if "" in names:
        raise InputError(f"--runs {shown}: an empty run id in the list (give ids separated by single commas)")
    ids = []
    for name in names:
        if len(name) > MAX_RUN_ID or not name.isprintable():
            raise InputError(f"--runs {shown}: {_echo(name, 40)} is not a run id (ids look like 20261126-121314-ab12)")
        run_id = resolve(name)
        if run_id in ids:
            raise InputError(f"--runs {shown}: run {run_id} is named twice (name each run once)")
        ids.append(run_id)
    return ids


MAX_RUN_ID = 64  # a run id is ~21 characters; anything much longer is not one, and is not echoed whole


def _echo(text: str, limit: int = 80) -> str:
    """User text as an error line quotes it: invisible characters escaped, at most ``limit`` characters (a
    pasted 100 KB must not come back whole)."""
    text = visible(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def run_labels(run_ids: list[str]) -> dict[str, str]:
    """A short name per run that still tells them apart: ``20261126-1213`` (day, hour and minute of a run id
    ``YYYYMMDD-HHMMSS-xxxx``), with the seconds or the whole id where two runs share the shorter one."""
    def shortened(run_id: str, parts: int) -> str:
        pieces = run_id.split("-")
        if parts == 0 and len(pieces) >= 2 and len(pieces[1]) == 6:
            return f"{pieces[0]}-{pieces[1][:4]}"
        if parts == 1 and len(pieces) >= 2:
            return f"{pieces[0]}-{pieces[1]}"
        return run_id

    for parts in (0, 1):
        labels = {r: shortened(r, parts) for r in run_ids}
        if len(set(labels.values())) == len(run_ids):
            return labels
    return {r: r for r in run_ids}


def combine(analysed: list[Analysed]) -> Across:
    """The runs side by side as one analysed run (see the module's docstring)."""
    labels = run_labels([a.run.run_id for a in analysed])
    runs_of: dict[str, set[str]] = {}
    for a in analysed:
        for c in a.run.cells:
            runs_of.setdefault(c.target, set()).add(a.run.run_id)
    shared = {name for name, ids in runs_of.items() if len(ids) > 1}
    cells: list[CellFigures] = []
    summary: list[ConfigSummary] = []
    samples: list[tuple] = []
    events: list[dict[str, Any]] = []
    targets: dict[str, Any] = {}
    prices: dict[str, Any] = {}
    described_targets: dict[str, Any] = {}  # environment["targets"]: the overview's limits (efficiency) read it
    runs: list[dict[str, Any]] = []
    cell_offset = config_offset = 0
    for a in analysed:
        label = labels[a.run.run_id]

        def shown(name: str, label: str = label) -> str:
            return f"{name} (run {label})" if name in shared else name

        def cell_id(cid: Any, offset: int = cell_offset) -> Any:
            return cid + offset if isinstance(cid, int) else cid

        for cf in a.cells:
            c = cf.cell
            cells.append(dataclasses.replace(cf, cell=dataclasses.replace(
                c, cell_id=c.cell_id + cell_offset, config=c.config + config_offset, target=shown(c.target))))
        summary += [_renamed(s, shown(s.target), cell_id) for s in a.summary]
        samples += [(cell_id(row[0]), *row[1:]) for row in a.samples]
        events += [{**e, "cell": cell_id(e.get("cell"))} for e in a.run.events]
        for name, spec in ((a.run.study or {}).get("targets") or {}).items():
            targets[shown(name)] = spec
        for name, price in ((a.run.study or {}).get("prices") or {}).items():  # each run's prices, under its names
            prices[shown(name)] = price
        for name, described in ((a.run.environment or {}).get("targets") or {}).items():
            described_targets[shown(name)] = described
        ids = [c.cell_id + cell_offset for c in a.run.cells]
        names = list(dict.fromkeys(c.target for c in a.run.cells))
        runs.append({"run_id": a.run.run_id, "label": label, "started": a.run.started, "finished": a.run.finished,
                     "command_line": a.run.command_line, "engine": a.run.engine,
                     "targets": [shown(n) for n in names], "target_names": {shown(n): n for n in names},
                     "status": a.run.status, "cells": [min(ids), max(ids)] if ids else [],
                     "storeval_version": a.run.storeval_version, "study_hash": a.run.study_hash})
        cell_offset += max((c.cell_id for c in a.run.cells), default=-1) + 1
        config_offset += max((c.config for c in a.run.cells), default=-1) + 1
    first = analysed[0].run
    probe = {(a.run.study or {}).get("probe_interval", 1.0) for a in analysed}

    def one(values: list[Any]) -> str:
        distinct = [str(v) for v in dict.fromkeys(values) if v is not None]
        return ", ".join(distinct)

    study = {"targets": targets, **({"prices": prices} if prices else {}),
             **({"probe_interval": probe.pop()} if len(probe) == 1 else {}),
             "runs": {a.run.run_id: a.run.study for a in analysed}}
    finished = [a.run.finished for a in analysed]
    merged = RunData(
        run_id=" + ".join(a.run.run_id for a in analysed), started=min(a.run.started for a in analysed),
        finished=None if None in finished else max(finished), status=one([a.run.status for a in analysed]),
        storeval_version=one([a.run.storeval_version for a in analysed]),
        command_line="\n".join(a.run.command_line for a in analysed), study=study,
        study_hash=first.study_hash if len({a.run.study_hash for a in analysed}) == 1 else "per run",
        engine=one([a.run.engine for a in analysed]), cells=[cf.cell for cf in cells],
        environment={"targets": described_targets, "runs": {a.run.run_id: a.run.environment for a in analysed}},
        events=events)
    differences = environment_differences([a.run for a in analysed], [f"run {labels[a.run.run_id]}"
                                                                      for a in analysed], study=True)
    return Across(run=merged, cells=cells, summary=summary, samples=samples, runs=runs, differences=differences)


def _renamed(s: ConfigSummary, target: str, cell_id) -> ConfigSummary:
    """A configuration's summary under its shown target name, its outliers' cells renumbered."""
    outliers = [{**o, "cell": cell_id(o.get("cell"))} for o in s.outliers]
    groups = {name: _renamed(g, target, cell_id) for name, g in s.groups.items()}
    return dataclasses.replace(s, target=target, outliers=outliers, groups=groups)


# -- what differed --------------------------------------------------------------------------------------------

def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, list) and _measured(prefix) and value:  # per-phase or per-sample loads: the worst
        numbers = [v for v in value if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if len(numbers) == len(value):
            return {f"{prefix} (max)": max(numbers)}
        if all(isinstance(v, dict) for v in value):
            fields: dict[str, list] = {}
            for item in value:
                for k, v in _flatten(item).items():
                    fields.setdefault(k, []).append(v)
            return {f"{prefix}.{k} (max)": max(vs) for k, vs in fields.items()
                    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vs)}
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


MEASURED = ("load", "busy", "steal", "swap", "pressure", "free", "avail", "skew")


def _measured(key: str) -> bool:
    """A figure measured during the run (host load, free space), not a fixed fact: it is never equal twice.
    Only the environment's facts (never the study's parameters, whose every change matters), matched on the
    key's parts (``host_load.vm.mean``, ``disk_free_bytes``), not anywhere in it (``workloads``)."""
    if key.startswith(("study", "target.")):
        return False
    parts = [w for part in key.split(".") for w in part.replace(" ", "_").split("_")]
    return any(p.startswith(word) or p.endswith(word) for p in parts for word in MEASURED)


def _differ(key: str, x: Any, y: Any) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (x, y))
    if not (numbers and _measured(key)):
        return x != y
    big = max(abs(x), abs(y))
    return abs(x - y) > (0.25 if big <= 1 else 0.2 * big)  # shares: 25 points; counts and rates: 20 %


def _show(v: Any) -> str:
    from ..units import sig

    if v is None:
        return "–"
    if isinstance(v, float):
        return sig(v)
    if isinstance(v, list):
        return "[" + ", ".join(_show(x) for x in v) + "]"
    return str(v)


def _show_fact(key: str, value: Any) -> str:
    """A fact as a study writes it: a workload parameter (``study.workloads.bw.bandwidth.file_size``) through its
    workload's own formatting (sizes as sizes, durations with their unit); anything else as it is."""
    from ..workloads import WORKLOADS
    from ..workloads.base import param_text

    parts = key.split(".")
    if parts[0] == "study" and "workloads" in parts and value is not None:
        kind = next((p for p in parts[parts.index("workloads") + 1:] if p in WORKLOADS), None)
        name = parts[-1]
        if kind is not None and name in WORKLOADS[kind].Params.model_fields:
            return param_text(WORKLOADS[kind].Params, name, value, ", ")
    return _show(value)


def _facts(run: Any, study: bool) -> dict[str, tuple[str | None, Any]]:
    """Every fact a run recorded, flattened (``libraries.numpy``), each with the target it describes (None: the
    host or the study)."""
    out: dict[str, tuple[str | None, Any]] = {}

    def add(value: Any, prefix: str, target: str | None) -> None:
        out.update({k: (target, v) for k, v in _flatten(value, prefix).items()})

    for key, value in (run.environment or {}).items():
        if key in NOT_ENVIRONMENT:
            continue
        if key == "targets" and isinstance(value, dict):  # each target as the driver described it (mount, fs)
            for name, described in value.items():
                add(described, f"targets.{name}", name)
        elif key.startswith("target:"):
            add(value, key, key.removeprefix("target:"))
        elif key == "host_load" and isinstance(value, dict):  # each host's load; how many phases it spans is no fact
            add({host: {k: v for k, v in load.items() if k != "phases"} if isinstance(load, dict) else load
                 for host, load in value.items()}, key, None)
        else:
            add(value, key, None)
    spec = run.study or {}
    for name, target in (spec.get("targets") or {}).items():  # each target's URL and options in the study
        add(target, f"target.{name}", name)
    if study:
        out["study hash"] = (None, run.study_hash)
        add({k: v for k, v in spec.items() if k != "targets"}, "study", None)
    return out


def environment_differences(runs: list[Any], labels: list[str], *, study: bool = False) -> list[str]:
    """What differed between the runs, one line per fact: ``kernel: Linux 6.1 (run A, run B) vs Linux 6.5 (run C)``
    (runs with the same value named together, a fact a run did not record shown as ``–``), for every key any run
    recorded — host, kernel, CPU, RAM, Python and library versions, storeval's version, each target's URL, mount
    and file system, host load — and every target's URL and options in its study; with ``study`` also the
    study's hash and each of its parameters. A target's facts are compared among the runs that measured a target
    of that name (three runs on three systems differ in their systems by design; one system measured twice
    should not); the same fact recorded under several keys (a target's URL in the study and as its driver
    describes it) is said once. Measured figures (loads, free space) count only when two runs' values are more than 25 points
    (shares: one phase's load swings by 10–20 points between identical runs on a shared host) or 20 % apart."""
    facts = [_facts(run, study) for run in runs]
    has = [{target for target, _ in f.values() if target is not None} for f in facts]
    lines, said = [], set()
    for key in dict.fromkeys(k for f in facts for k in f):
        target = next(f[key][0] for f in facts if key in f)
        mine = [(f[key][1] if key in f else None, label) for f, names, label in zip(facts, has, labels)
                if target is None or target in names]
        values = [v for v, _ in mine]
        if not any(_differ(key, x, y) for i, x in enumerate(values) for y in values[i + 1:]):
            continue
        shown: dict[str, list[str]] = {}
        for value, label in mine:
            shown.setdefault(_show_fact(key, value), []).append(label)
        text = " vs ".join(f"{value} ({', '.join(names)})" for value, names in shown.items())
        if (key.rsplit(".", 1)[-1], text) not in said:  # a target's URL as the study, the driver and the mount say it
            said.add((key.rsplit(".", 1)[-1], text))
            lines.append(f"{key}: {text}")
    return lines
