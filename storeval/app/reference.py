"""docs/reference.md, generated from the code: every study-file key, testbed setting, target option, workload
parameter, flag, warning and event code, exit status, ``STOREVAL_*`` variable and unit storeval reads.

``render()`` builds the page from what the code validates against (spec.py's key tuples, the drivers' ``Options``
models, the workloads' ``Params`` as `storeval workloads` prints them, the catalogs in core/studykeys.py and
core/codes.py); the checks below say where code and catalog disagree, and tests/test_reference.py runs them.
Regenerate with ``python -m storeval.app.reference > docs/reference.md``."""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel

import storeval

from .. import app, spec, units
from ..analysis.timeline import FAILING_FLAGS
from ..core import faultplan, network
from ..core.system import STATE_SETTINGS
from ..core.codes import CODES, ENVIRONMENT, EVENT, EXITS, FLAG, WARNING
from ..core.studykeys import SECTIONS, Section
from ..drivers import DRIVERS
from ..drivers.base import DriverOptions
from ..fields import _rate
from ..plugins import own_entry_points
from ..report.catalog import workload_docs
from ..testbed import SERVERS
from ..testbed.base import HOST_OPTION
from ..workloads.base import param_description, param_text, param_unit

REGENERATE = "python -m storeval.app.reference > docs/reference.md"
PACKAGE = Path(storeval.__file__).parent
REPO = PACKAGE.parent
# besides storeval's sources: the build script and the test suite's settings, whose STOREVAL_* variables a person sets
ENV_SOURCES = ("setup.py", "tests/conftest.py", "tests/helpers.py")


# -- what the code accepts -----------------------------------------------------------------------------------
def code_keys() -> dict[str, tuple[str, ...]]:
    """Section of core/studykeys.py → the keys the code accepts there."""
    return {
        "study": tuple(spec.TOP_KEYS),
        "targets_from": tuple(spec.TARGETS_FROM_KEYS),
        # like: spec._like; host: a testbed target's placement; degraded, heal_fill: a testbed system's state
        "target": (*spec.TARGET_KEYS, "like", HOST_OPTION, *STATE_SETTINGS),
        "limits": tuple(spec.Limits.model_fields),
        "group": tuple(spec.GROUP_KEYS),
        "network": tuple(spec.NETWORK_KEYS),
        "link": tuple(spec.Link.model_fields),
        "network_host": tuple(spec.HostLink.model_fields),  # a host's entry is {link: NAME} or nothing
        "workload": ("KIND", "faults", "targets"),  # spec._workload_entry: one kind, its own faults and targets
        "fault": tuple(faultplan.KEYS),
        "price": tuple(spec.Price.model_fields),
    }


def key_problems(code: dict[str, tuple[str, ...]], catalog: dict[str, Section]) -> list[str]:
    """One line per disagreement between the keys the code accepts and the catalog that documents them."""
    out = []
    for section in sorted(set(code) | set(catalog)):
        if section not in catalog:
            out.append(f"section {section}: accepted by the code, not in core/studykeys.py SECTIONS")
            continue
        if section not in code:
            out.append(f"section {section}: in core/studykeys.py, but no key tuple of the code is compared with it")
            continue
        where = catalog[section].path
        for key in code[section]:
            if key not in catalog[section].keys:
                out.append(f"{where}.{key}: accepted by the code, undocumented (add it to core/studykeys.py)")
        for key in catalog[section].keys:
            if key not in code[section]:
                out.append(f"{where}.{key}: documented in core/studykeys.py, but the code no longer accepts it")
    return out


def own(kind: str) -> list[str]:
    """storeval's own plug-ins of ``kind``, in the order its lists show them (another installed package's are
    its own to document)."""
    mine = own_entry_points(kind)
    registry = {"drivers": DRIVERS, "testbed": SERVERS}.get(kind)
    listed = list(registry.plugins()) if registry is not None else []
    return [n for n in listed if n in mine] + sorted(n for n in mine if n not in listed)


def option_models() -> dict[str, type[BaseModel]]:
    """Each own driver's scheme → its Options model."""
    return {scheme: DRIVERS[scheme].Options for scheme in own("drivers")}


def _nested(model: type[BaseModel], name: str) -> type[BaseModel] | None:
    todo = [model.model_fields[name].annotation]
    while todo:
        t = todo.pop()
        if isinstance(t, type) and issubclass(t, BaseModel):
            return t
        todo.extend(typing.get_args(t))
    return None


def option_fields(model: type[BaseModel], prefix: str = "") -> list[tuple[str, type[BaseModel], str]]:
    """(shown name, model, field) for every field of ``model``, nested models' fields after their own row."""
    out = []
    for name in model.model_fields:
        out.append((prefix + name, model, name))
        inner = _nested(model, name)
        if inner is not None:
            out += option_fields(inner, f"{prefix}{name}.")
    return out


def option_problems(models: dict[str, type[BaseModel]] | None = None) -> list[str]:
    """Options fields without a description, and storeval's DriverOptions subclasses that no driver's Options
    reaches (``models``: scheme → Options, the own drivers' when None)."""
    out, reached = [], set()
    for scheme, model in (option_models() if models is None else models).items():
        for shown, m, name in option_fields(model):
            reached.add(m)
            if not m.model_fields[name].description:
                out.append(f"{scheme}:// option {shown} ({m.__module__}.{m.__name__}): no description (add "
                           "Field(description=...))")
    todo = [DriverOptions] if models is None else []
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("storeval.") and cls not in reached:
            out.append(f"{cls.__module__}.{cls.__name__}: a DriverOptions no storeval driver's Options reaches")
    return out


# -- codes, environment variables, exit statuses in the sources -------------------------------------------------
def _sources() -> list[Path]:
    """storeval's sources, but the catalog itself (its words name what they document)."""
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "core" / "codes.py")


@functools.lru_cache(maxsize=None)
def _parsed(path: Path, mtime_ns: int) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"))


def _tree(path: Path) -> ast.Module:
    """A source's syntax tree, parsed once while the file is unchanged (the checks read every source twice)."""
    return _parsed(path, path.stat().st_mtime_ns)


def _constants(trees: dict[Path, ast.Module]) -> dict[str, set[str]]:
    """Module-level ``NAME = "text"`` of every source: what a ``{"code": NAME}`` may stand for."""
    out: dict[str, set[str]] = {}
    for tree in trees.values():
        for node in tree.body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and \
                    isinstance(node.value.value, str):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        out.setdefault(target.id, set()).add(node.value.value)
    return out


def _texts(node: ast.AST | None, constants: dict[str, set[str]]) -> set[str]:
    """The strings an expression may be: a literal, either side of ``a if c else b``, a module constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _texts(node.body, constants) | _texts(node.orelse, constants)
    if isinstance(node, ast.Name):
        return constants.get(node.id, set())
    return set()


def scan_codes(paths: list[Path] | None = None) -> dict[str, set[str]]:
    """Code → where it is used (``path:line``): every ``{"code": …}`` (flags and warnings), every
    ``warn(rec, "code", …)``, every event ``{"kind": …, "message": …}`` and ``_event(…, "kind", …)``."""
    trees = {p: _tree(p) for p in (paths or _sources())}
    constants = _constants(trees)
    found: dict[str, set[str]] = {}
    for path, tree in trees.items():
        rel = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        for node in ast.walk(tree):
            codes: set[str] = set()
            if isinstance(node, ast.Dict) and None not in node.keys:
                keys = [k.value if isinstance(k, ast.Constant) else None for k in node.keys]
                if "code" in keys:
                    codes |= _texts(node.values[keys.index("code")], constants)
                if "kind" in keys and "message" in keys:
                    codes |= _texts(node.values[keys.index("kind")], constants)
            elif isinstance(node, ast.Call) and len(node.args) >= 3:
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
                if name in ("warn", "_event"):
                    codes |= _texts(node.args[1], constants)
            for code in codes:
                found.setdefault(code, set()).add(f"{rel}:{node.lineno}")
    return found


def code_problems(found: dict[str, set[str]], catalog: dict[str, Any], texts: str) -> list[str]:
    """Codes the sources use that the catalog lacks, and catalog codes no source names any more (``texts``:
    every source's text — an event kind may be passed through a variable)."""
    out = [f"code {c!r} (used at {', '.join(sorted(found[c])[:3])}): not in core/codes.py CODES"
           for c in sorted(found) if c not in catalog]
    out += [f"code {c!r}: in core/codes.py CODES, but no source uses it" for c in sorted(catalog)
            if c not in found and f'"{c}"' not in texts]
    return out


_ENV = re.compile(r"\bSTOREVAL_[A-Z0-9][A-Z0-9_]*")


def scan_environment(paths: list[Path] | None = None) -> dict[str, set[str]]:
    """``STOREVAL_*`` in the sources' string literals (docstrings aside: they name examples)."""
    if paths is None:
        paths = _sources() + [REPO / p for p in ENV_SOURCES if (REPO / p).exists()]
    found: dict[str, set[str]] = {}
    for path in paths:
        tree = _tree(path)
        docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
        docs |= {id(c) for n in tree.body if isinstance(n, ast.Assign) and  # __all__ names Python names
                 any(isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets) for c in ast.walk(n.value)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for name in _ENV.findall(node.value):
                    found.setdefault(name, set()).add(f"{path.name}:{node.lineno}")
    return found


def environment_problems(found: dict[str, set[str]], catalog: dict[str, Any], texts: str) -> list[str]:
    out = [f"environment variable {v} (at {', '.join(sorted(found[v])[:3])}): not in core/codes.py ENVIRONMENT"
           for v in sorted(found) if v not in catalog]
    out += [f"environment variable {v}: in core/codes.py ENVIRONMENT, but no source names it" for v in sorted(catalog)
            if v not in found and v not in texts]
    return out


def exit_codes() -> dict[str, int]:
    return {name: value for name, value in vars(app).items() if name.startswith("EXIT_") and isinstance(value, int)}


def source_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in
                     _sources() + [REPO / p for p in ENV_SOURCES if (REPO / p).exists()])


def problems() -> list[str]:
    """Every disagreement between the code and the catalogs the reference is made from; [] when none."""
    texts = source_text()
    exits = exit_codes()
    return (key_problems(code_keys(), SECTIONS) + option_problems()
            + code_problems(scan_codes(), CODES, texts)
            + environment_problems(scan_environment(), ENVIRONMENT, texts)
            + [f"{n}: exit status without a meaning in core/codes.py EXITS" for n in exits if n not in EXITS]
            + [f"{n}: in core/codes.py EXITS, not in storeval.app" for n in EXITS if n not in exits])


# -- the page ----------------------------------------------------------------------------------------------------
def _cell(text: Any) -> str:
    """Text for one Markdown table cell: one line, pipes escaped, rst literals as Markdown's."""
    return " ".join(str(text).replace("``", "`").replace("|", "\\|").split())


def _sentence(text: str) -> str:
    text = text.strip().rstrip(".")
    return f"{text[:1].upper()}{text[1:]}." if text else ""


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head),
            *("| " + " | ".join(_cell(c) for c in row) + " |" for row in rows), ""]


def _code_defaults() -> dict[tuple[str, str], str]:
    """Defaults the code states (spec.py's, faultplan's, network's constants) over the catalog's words."""
    study = {f.name: f.default for f in dataclasses.fields(spec.Study) if f.default is not dataclasses.MISSING}
    out = {("study", "phase_timeout"): units.format_duration(spec.DEFAULT_PHASE_TIMEOUT),
           ("study", "probe_interval"): units.format_duration(spec.DEFAULT_PROBE_INTERVAL),
           ("study", "repetitions"): f"1 (the default study: {spec.DEFAULT_REPETITIONS})",
           ("study", "clients"): f"[1] (the default study: {spec.DEFAULT_CLIENTS})",
           ("study", "placement"): str(study["placement"]),
           ("study", "keep_cache"): str(study["keep_cache"]).lower(),
           ("fault", "timeout"): units.format_duration(faultplan.DEFAULT_EXEC_TIMEOUT)}
    for key, value in network.LINK_DEFAULTS.items():
        out[("link", key)] = "unlimited" if value is None else (
            units.format_duration(value) if key in ("rtt", "jitter") else f"{value:g}")
    return out


def _study_keys() -> list[str]:
    defaults = _code_defaults()
    out = ["## Study file keys", "",
           "A study is a YAML file; every key below is checked, and an unknown one is refused in one line naming the "
           "closest known key. Sizes, rates and durations are written as in [Units](#units). Any workload parameter, "
           "client count, group count, link setting or target setting given as a list is swept.", ""]
    for name, section in SECTIONS.items():
        out += [f"### `{section.path}`", "", section.about[0].upper() + section.about[1:] + ".", ""]
        out += _table(["key", "type", "default", "meaning"],
                      [[f"`{k}`", key.type, defaults.get((name, k), key.default), key.meaning]
                       for k, key in section.keys.items()])
    return out


def _testbed() -> list[str]:
    out = ["## Testbed settings", "",
           "What a `testbed: KIND` target takes (under `settings:` or beside `testbed:`; a list sweeps, each value "
           "a system of its own) and what `storeval testbed up KIND` takes as options; `use:` picks one of the "
           "kind's targets.", ""]
    for kind in own("testbed"):
        cls = SERVERS[kind]
        uses = ", ".join(f"`{u}` ({s}://)" for u, s in cls.target_schemes.items()) or "none"
        out += [f"### `{kind}`", "", f"{_sentence(cls.summary)} Targets (`use:`): {uses}.", ""]
        out += _table(["setting", "meaning"], [[f"`{k}`", v] for k, v in cls.options_help.items()]) \
            if cls.options_help else ["No settings.", ""]
    return out


def _unit(model: type[BaseModel], name: str) -> str:
    info = model.model_fields[name]
    found = [*info.metadata]
    todo = [info.annotation]
    while todo:
        t = todo.pop()
        found += getattr(t, "__metadata__", ())
        todo.extend(typing.get_args(t) if typing.get_origin(t) is not typing.Literal else ())
    if any(getattr(m, "func", None) is _rate for m in found):
        return "bytes/s (rate)"
    if _nested(model, name) is not None:
        return "mapping (below)"
    unit = param_unit(model, name)
    many = any(typing.get_origin(t) is list for t in [info.annotation, *typing.get_args(info.annotation)])
    return f"list ({unit})" if many and not unit.startswith("list") else unit


def _options() -> list[str]:
    out = ["## Target options", "",
           "The keys of a target besides the study-file keys above, by the URL's scheme: each driver's options "
           "(its `Options` model). `server_pids` is every driver's.", ""]
    for scheme, model in option_models().items():
        rows = []
        for shown, m, name in option_fields(model):
            info = m.model_fields[name]
            default = "(required)" if info.is_required() else param_text(m, name, info.get_default(
                call_default_factory=True), ", ")
            rows.append([f"`{shown}`", _unit(m, name), default, param_description(m, name)])
        out += [f"### `{scheme}://`", ""] + _table(["option", "type", "default", "meaning"], rows)
    return out


def _workloads() -> list[str]:
    out = ["## Workload parameters", "",
           "Each workload kind's parameters, as `storeval workloads KIND` prints them. *default*: what a study that "
           "leaves the parameter out uses; *default study*: what `storeval run` without a study uses, where it "
           "differs.", ""]
    mine = set(own("workloads"))
    for w in workload_docs()["workloads"]:
        if w["kind"] not in mine:
            continue
        out += [f"### `{w['kind']}`", "", f"{_sentence(w['summary'])} Phases: {', '.join(w['phases'])}.", ""]
        out += _table(["parameter", "default", "default study", "unit", "meaning"],
                      [[f"`{p['name']}`", "(required)" if p["required"] else p["default"], p.get("default_study", ""),
                        p["unit"], p["description"]] for p in w["parameters"]])
    return out


def _codes() -> list[str]:
    out = ["## Flags, warnings and events", "",
           "A **flag** (✗) says a phase's figure is not what it claims to be; a **warning** (⚠) says to read it "
           "with care; both are shown beside the figure in every report, by code. An **event** is stored with the "
           "run, with its time and message. A run with "
           f"{' or '.join(f'`{c}`' for c in FAILING_FLAGS)} exits {exit_codes()['EXIT_FAILED']}.", ""]
    for kind, title in ((FLAG, "Flags"), (WARNING, "Warnings"), (EVENT, "Events")):
        rows = [[f"`{c}`", code.meaning, code.action] for c, code in sorted(CODES.items()) if kind in code.kinds]
        out += [f"### {title}", ""] + _table(["code", "meaning", "what to do"], rows)
    return out


def _exits() -> list[str]:
    rows = [[str(v), f"`{n}`", EXITS.get(n, "")] for n, v in sorted(exit_codes().items(), key=lambda i: i[1])]
    return ["## Exit status", ""] + _table(["status", "name (storeval.app)", "meaning"], rows)


def _environment() -> list[str]:
    rows = [[f"`{n}`", e.scope, e.meaning] for n, e in sorted(ENVIRONMENT.items())]
    return ["## Environment variables", ""] + _table(["variable", "read by", "meaning"], rows)


def _spell(unit: str) -> str:
    """A unit as the page writes it (parsing ignores case): ``kib`` → ``KiB``, ``gbit`` → ``Gbit``."""
    if unit in ("", "b"):
        return {"": "", "b": "B"}[unit]
    if unit.endswith(("bit", "bps")):
        return unit if unit in ("bit", "bps") else unit[0].upper() + unit[1:]
    return unit[0].upper() + unit[1:].replace("ib", "iB").replace("b", "B") if len(unit) > 1 else unit


def _written(spellings: list[str]) -> str:
    return ", ".join(f"`{s}`" if s else "a plain number" for s in spellings)


def _units() -> list[str]:
    sizes: dict[int, list[str]] = {}
    for u, n in units._SIZE_UNITS.items():
        sizes.setdefault(n, []).append(_spell(u))
    bits: dict[int, list[str]] = {}
    for u, n in units._BIT_UNITS.items():
        bits.setdefault(n, []).append(_spell(u))
    secs: dict[float, list[str]] = {}
    for u, n in units._DURATION_UNITS.items():
        secs.setdefault(n, []).append(u)
    printed = (units.__doc__ or "").split("\n\n", 2)[-1]
    out = ["## Units", "",
           "How a study writes sizes, rates and durations (storeval/units.py; case does not matter). MB is 10^6 "
           f"bytes, MiB 2^20: `32MB` is {units.parse_size('32MB'):,} bytes, `32MiB` "
           f"{units.parse_size('32MiB'):,}; a bare letter (`4k`, `1M`) is the binary unit, as in fio and IOZone.", "",
           "### Sizes", ""]
    out += _table(["written", "bytes"], [[_written(v), f"{n:,}"] for n, v in sorted(sizes.items())])
    out += ["### Rates", "", "A size unit per second (`800MiB/s`, `3GB/s`; the `/s` may be left out), a bit rate "
            "(`10Gbit`, `10Gbps`), or a plain number of bytes/s.", ""]
    out += _table(["written", "bits per second"], [[_written(v), f"{n:,}"]
                                                   for n, v in sorted(bits.items())])
    out += ["### Durations", "", "A number with a unit, or a plain number of seconds.", ""]
    out += _table(["written", "seconds"], [[_written(v), f"{n:g}"] for n, v in sorted(secs.items())])
    out += ["### Units storeval prints", ""]
    for para in printed.split("\n\n"):  # the module docstring's paragraphs and bullets, as Markdown
        items = re.split(r"\n(?=\* )", para.strip())
        out += [" ".join(i.split()).replace("``", "`") for i in items] + [""]
    return out


def render() -> str:
    """The whole page, the same for the same code and catalogs."""
    lines = ["# storeval reference", "",
             f"Generated from the code by `{REGENERATE}` (storeval/app/reference.py); do not edit by hand: "
             "tests/test_reference.py fails when this page and the code disagree. The descriptions live beside the "
             "code: study-file keys in storeval/core/studykeys.py, codes, exit statuses and environment variables in "
             "storeval/core/codes.py, target options in the drivers' `Options` models, workload parameters in the "
             "workloads' `Params`.", "",
             "Contents: [Study file keys](#study-file-keys) · [Testbed settings](#testbed-settings) · "
             "[Target options](#target-options) · [Workload parameters](#workload-parameters) · "
             "[Flags, warnings and events](#flags-warnings-and-events) · [Exit status](#exit-status) · "
             "[Environment variables](#environment-variables) · [Units](#units)", ""]
    for part in (_study_keys, _testbed, _options, _workloads, _codes, _exits, _environment, _units):
        lines += part()
    return "\n".join(lines).rstrip("\n") + "\n"


if __name__ == "__main__":
    import sys

    sys.stdout.write(render())
