"""Study specification: YAML (plus command-line overrides) to a validated :class:`Study`.

A study names targets (name -> URL + driver options), workloads (name -> kind
-> parameters), the number of clients, and repetitions. Any workload
parameter may be a list, which makes it a factor to sweep (a list-valued
parameter such as ``phases`` sweeps when given a list of lists). Every mistake
becomes one :class:`InputError` line naming the YAML path, the bad value and
what is expected; unknown keys are errors so typos cannot pass unnoticed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import stat
import typing
import dataclasses
from dataclasses import dataclass
from functools import lru_cache
from typing import Annotated, Any, Literal

import yaml
from pydantic import (BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictStr, TypeAdapter,
                      ValidationError, model_validator)

from . import safeyaml
from .core.cell import TargetSpec
from .core.faultplan import Fault, parse_plan
from .core.network import LINK_KEYS, Group, NetworkSpec, group_combinations
from .core.shell import fields
from .core.system import STATE_SETTINGS, check_command, check_state_setting, combinations, system_options
from .drivers import NeedsExtra, driver_class, normalize_url
from .errors import InputError, one_line
from .fields import Duration, Rate
from .redact import redact_text, visible
from .validation import FieldError, mapping_only, pydantic_error, show as _show, suggest as _suggest
from .units import UnitError, parse_duration, parse_rate
from .workloads import WORKLOADS
from .workloads.base import Params

DEFAULT_PROBE_INTERVAL = 1.0
MAX_CLIENTS = 1_000_000  # beyond any machine or allocation; bounds what is sized by it before the host check
MAX_REPETITIONS = 10_000  # every repetition is planned up front
MAX_COMBOS = 10_000  # parameter combinations of one workload: a few lines of YAML must not plan billions
MAX_CELLS = 100_000  # cells of a study (a cell takes seconds at least: this is days of measuring)


class Limits(BaseModel):
    """What the hardware can deliver, declared per target; a figure above one is flagged not-physical (and a
    phase without progress for longer than ``stall`` is flagged stalled)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    network: Rate | None = None  # per host, e.g. 10Gbit
    device_read: Rate | None = None  # e.g. 3GB/s
    device_write: Rate | None = None
    iops: Annotated[float, Field(gt=0)] | None = None  # operations per second
    stall: Annotated[Duration, Field(ge=1)] | None = None  # no progress this long is a stall (default 2 s)
DEFAULT_PHASE_TIMEOUT = 3600.0


def _whole(low: int, high: int, what: str) -> BeforeValidator:
    def check(v: Any) -> int:
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            raise ValueError(f"is not a number of {what} (a whole number, {low} to {high:,})")
        return v
    return BeforeValidator(check)


def _seconds(positive: bool, hint: str) -> BeforeValidator:
    def check(v: Any) -> float:
        try:
            seconds = parse_duration(v)
        except UnitError as e:
            raise ValueError(f"{e} {hint}") from None
        if positive and seconds <= 0:
            raise ValueError(f"must be more than 0 seconds {hint}")
        return seconds
    return BeforeValidator(check)


def _directory(v: Any) -> str | None:
    if v is None:
        return None
    if not isinstance(v, str) or not v.strip():
        raise ValueError("is not a directory (the one `storeval testbed up --dir` used)")
    return v.strip()


class StudySettings(BaseModel):
    """How a study runs: top-level keys of the study file, each also a command-line option that overrides it."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    repetitions: Annotated[int, _whole(1, MAX_REPETITIONS, "repetitions")] = 1
    phase_timeout: Annotated[float, _seconds(True, "(e.g. 30m)")] = DEFAULT_PHASE_TIMEOUT
    probe_interval: Annotated[float, _seconds(False, "(0 turns the sampling off)")] = DEFAULT_PROBE_INTERVAL
    keep_cache: StrictBool = False
    placement: Literal["spread", "pack"] = "spread"  # MPI: the ranks a cell of k clients uses
    clients_per_host: Annotated[int | None, _whole(1, MAX_CLIENTS, "clients")] = None  # MPI: at most this many
    testbed: Annotated[str | None, BeforeValidator(_directory)] = None  # the testbed whose fault handles it names
    description: Annotated[str | None, BeforeValidator(lambda v: None if v is None else str(v))] = None


MAX_PRICE = 1e15  # per TB or per GB/s: more than the world's GDP is a typo, and a bigger int overflows a float


def _price(v: Any) -> Any:
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_PRICE):
        raise ValueError(f"is not a price (a number from 0 to {MAX_PRICE:.0e})")
    return v


def _currency(v: Any) -> str:
    if not isinstance(v, str) or not v.strip() or len(v) > 8:
        raise ValueError("is not a currency code (e.g. USD, EUR)")
    return visible(v.strip())


class Price(BaseModel):
    """What a system costs per TB of capacity and per GB/s of bandwidth (the report's cost table: the cost of
    the best measured aggregate)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    per_tb: Annotated[Any, BeforeValidator(_price)] = None
    per_gbps: Annotated[Any, BeforeValidator(_price)] = None
    currency: Annotated[str, BeforeValidator(_currency)] = "USD"

    _mapping = mapping_only("is not a mapping (e.g. {per_tb: 40, currency: USD})")

    @model_validator(mode="after")
    def _priced(self) -> Price:
        if self.per_tb is None and self.per_gbps is None:
            raise ValueError("give per_tb or per_gbps (the price of a TB of capacity or of a GB/s)")
        return self


def _prices_mapping(v: Any) -> Any:
    if v is not None and not isinstance(v, dict):
        raise ValueError("is not a mapping of target → prices (e.g. prices: {fast: {per_tb: 40, per_gbps: 1200, "
                         "currency: USD}})")
    return v



# The study `storeval run` runs when given nothing: about a minute, honest (O_DIRECT where the file system allows
# it), each data phase timed for about a second (a stonewall deadline; the file size is only an upper bound),
# repeated so that every figure carries a spread, each skim client reading its own file. Metadata times its
# creates (stonewalled at 1 s), stats and reads (passes repeated for 1 s); the tree and the removes, over in a
# few ms on a local file system and too short to time, are done untimed (the full mdtest set: --workload metadata).
DEFAULT_WORKLOADS: dict[str, dict[str, dict[str, Any]]] = {
    "bandwidth": {"bandwidth": {"file_size": "2GiB", "transfer_size": "1MiB", "deadline": "1s",
                                "phases": ["write", "read", "randread"], "direct": True}},
    "metadata": {"metadata": {"items": 20000, "depth": 1, "branching": 4, "mode": "unique", "deadline": "1s",
                              "repeat_for": "1s",
                              "phases": ["dir-create", "dir-stat", "file-create", "file-stat", "file-read"]}},
    "skim": {"skim": {"files_per_client": 1, "file_size": "32MiB", "fraction": 0.5}},
}
DEFAULT_REPETITIONS = 3
DEFAULT_CLIENTS = [1, 2]


@dataclass(frozen=True)
class WorkloadSpec:
    """One workload with its fixed parameters and the values of each swept parameter."""

    name: str
    kind: str
    fixed: dict[str, Any]
    sweeps: dict[str, list[Any]]
    combos: list[Params]  # every parameter set in sweep order, validated once: the clients get these objects
    swept: list[dict[str, Any]]  # each combination's swept values as JSON (its cells' factors)
    targets: tuple[str, ...] | None = None  # `targets: [...]` of the entry: the only targets it runs on

    def as_dict(self) -> dict[str, Any]:
        return {self.kind: {**self.fixed, **self.sweeps}, **({"targets": list(self.targets)} if self.targets else {})}

    def runs_on(self, target: str, combo: Params) -> bool:
        """Whether a cell of ``combo`` runs on ``target``: one the entry's ``targets`` allow, and not one that a
        parameter names as the other end (tpc's source: a copy onto itself measures nothing)."""
        if self.targets is not None and target not in self.targets:
            return False
        return all(getattr(combo, param) != target for param in WORKLOADS[self.kind].target_params)


@dataclass(frozen=True)
class Study:
    targets: dict[str, TargetSpec]
    workloads: dict[str, WorkloadSpec]
    clients: list[int]
    repetitions: int
    phase_timeout: float
    source: str | None = None
    description: str | None = None
    keep_cache: bool = False
    probe_interval: float = DEFAULT_PROBE_INTERVAL
    placement: str = "spread"  # MPI: which ranks a cell of k clients uses (spread across hosts, or pack)
    clients_per_host: int | None = None  # MPI: at most this many clients per host
    faults: list[Fault] = dataclasses.field(default_factory=list)  # the fault plan (core/faultplan.py)
    testbed: str | None = None  # the testbed directory whose fault handles the plan names
    groups: dict[str, Group] | None = None  # client groups (core/network.py); None: every client alike
    network: NetworkSpec | None = None  # emulated hosts and links of the testbed network
    prices: dict[str, dict[str, Any]] | None = None  # target → {per_tb, per_gbps, currency}: the report's cost table
    others: dict[str, TargetSpec] = dataclasses.field(default_factory=dict)  # named by a workload (tpc's source)
    # but left out of the cells by --target: still connected as the other end

    def client_combinations(self) -> list[dict[str, int] | int]:
        """What one configuration's cells vary in clients: the counts, or each combination of the groups'."""
        return list(group_combinations(self.groups)) if self.groups else list(self.clients)

    def resolved(self) -> dict[str, Any]:
        """The fully resolved study, JSON-able (stored with every run, hashed for identity)."""
        return {
            "targets": {n: {**({"url": t.url} if t.url else {}), **t.options,
                            **({"limits": t.limits} if t.limits else {}), **({"system": t.system} if t.system else {})}
                        for n, t in self.targets.items()},
            "workloads": {n: w.as_dict() for n, w in self.workloads.items()},
            "clients": list(self.clients),
            "repetitions": self.repetitions,
            "phase_timeout": self.phase_timeout,
            "keep_cache": self.keep_cache,
            "probe_interval": self.probe_interval,
            "placement": self.placement,
            **({"clients_per_host": self.clients_per_host} if self.clients_per_host else {}),
            **({"description": self.description} if self.description else {}),
            **({"faults": [f.state() for f in self.faults]} if self.faults else {}),
            **({"testbed": self.testbed} if self.testbed else {}),
            **({"groups": {n: g.to_json() for n, g in self.groups.items()}} if self.groups else {}),
            **({"network": self.network.to_json()} if self.network else {}),
            **({"prices": self.prices} if self.prices else {}),
            **({"others": {n: {"url": t.url, **t.options} for n, t in self.others.items()}} if self.others else {}),
        }

    def hash(self) -> str:
        blob = json.dumps(self.resolved(), sort_keys=True, separators=(",", ":")).encode()
        return hashlib.sha256(blob).hexdigest()[:16]


# -- error messages -----------------------------------------------------------------------------
def refuse_repeats(values: list[Any], keys: list[Any], where: str) -> None:
    """The one rule of every swept list (workload parameters, client counts, group counts, link and system
    settings, --target, --workload): a value given twice — compared as normalised (``keys``: 64KiB is 65536) —
    would only make identical cells, so it is refused in one line naming it."""
    reason = repeated(values, keys)
    if reason:
        raise InputError(f"{where}: {_show(values)} {reason}")


def repeated(values: list[Any], keys: list[Any]) -> str | None:
    """Why ``values`` (compared as ``keys``) break :func:`refuse_repeats`' rule, or None."""
    seen: dict[Any, int] = {}
    for j, key in enumerate(keys):
        i = seen.setdefault(key, j)
        if i != j:
            a, b = _show(values[i]), _show(values[j])
            same = f"{a} is given at [{i}] and [{j}]" if a == b else f"{b} at [{j}] is {a} at [{i}] again"
            return f"repeats a value: {same} (give each value once)"
    return None


def _same(value: Any) -> Any:
    """A setting's value as compared for repeats: numbers by value (1 is 1.0), text without its outer spaces."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    return ("text", str(value).strip())


def check_name(name: str, where: str) -> str:
    """A target or workload name is printed in tables, progress bars and reports: only visible characters."""
    if not name.strip():
        raise InputError(f"{where}: the name is empty (name it with letters, digits or punctuation)")
    bad = next((ch for ch in name if not ch.isprintable()), None)
    if bad is not None:
        raise InputError(f"{where}: the name holds the invisible character {visible(bad)} (names are printed; use "
                         "letters, digits, spaces and punctuation)")
    return name


# -- parameters and sweeps -------------------------------------------------------------------------
def _field_type(model: type[Params], key: str) -> Any:
    info = model.model_fields[key]
    return typing.Annotated[(info.annotation, *info.metadata)] if info.metadata else info.annotation


@lru_cache(maxsize=None)
def _adapter(model: type[Params], key: str) -> TypeAdapter:
    return TypeAdapter(_field_type(model, key))


def is_list_param(model: type[Params], key: str) -> bool:
    ann = model.model_fields[key].annotation
    return typing.get_origin(ann) is list


def _is_sweep(model: type[Params], key: str, value: Any) -> bool:
    if is_list_param(model, key):
        return isinstance(value, list) and bool(value) and all(isinstance(v, list) for v in value)
    return isinstance(value, list)


def _validate_value(model: type[Params], key: str, value: Any, where: str) -> Any:
    try:
        v = _adapter(model, key).validate_python(value)
        return _adapter(model, key).dump_python(v, mode="json")
    except ValidationError as e:
        raise pydantic_error(e, where) from None


def expand_workload(name: str, kind: str, raw: dict[str, Any], where: str,
                    study_dir: str | None = None, origins: dict[str, str] | None = None) -> WorkloadSpec:
    """A workload's fixed and swept parameters and every combination, validated; ``study_dir`` (the study
    file's directory) is the validation context relative paths in parameters are taken from (a replay's trace);
    ``origins`` names where a parameter came from when not the study (``--set transfer_size``)."""
    model = WORKLOADS[kind].Params
    fixed: dict[str, Any] = {}
    sweeps: dict[str, list[Any]] = {}
    for key, value in raw.items():
        if key not in model.model_fields:
            raise InputError(f"{where}.{key}: unknown parameter of {kind} ({_suggest(key, model.model_fields)})")
        if _is_sweep(model, key, value):
            if not value:
                raise InputError(f"{where}.{key}: is an empty list (give a value, or a list of values to sweep)")
            sweeps[key] = [_validate_value(model, key, v, f"{where}.{key}[{i}]") for i, v in enumerate(value)]
            refuse_repeats(value, [json.dumps(v, sort_keys=True) for v in sweeps[key]],
                           (origins or {}).get(key, f"{where}.{key}"))
        else:
            fixed[key] = _validate_value(model, key, value, f"{where}.{key}")
    count = math.prod(len(v) for v in sweeps.values())
    if count > MAX_COMBOS:
        raise InputError(f"{where}: the swept parameters make {count:,} combinations (at most {MAX_COMBOS:,}); sweep "
                         "fewer values")
    combos: list[Params] = []
    swept: list[dict[str, Any]] = []
    for values in itertools.product(*sweeps.values()):
        combo = dict(zip(sweeps, values))
        try:
            params = model.model_validate({**fixed, **combo}, context={"study_dir": study_dir})
        except ValidationError as e:
            err = pydantic_error(e, where)
            with_ = ", ".join(f"{k}={_show(v)}" for k, v in combo.items())
            raise InputError(f"{err}{f' (with {with_})' if with_ else ''}") from None
        combos.append(params)
        dumped = params.model_dump(mode="json", include=set(sweeps)) if sweeps else {}
        swept.append({k: dumped[k] for k in sweeps})
    return WorkloadSpec(name=name, kind=kind, fixed=fixed, sweeps=sweeps, combos=combos, swept=swept)


def _workload_entry(name: str, entry: Any, where: str) -> tuple[str, dict[str, Any]]:
    check_name(name, where)
    kinds = ", ".join(sorted(WORKLOADS))
    if isinstance(entry, str):
        entry = {entry: {}}
    if isinstance(entry, dict):  # the workload's own fault plan (_fault_plan) and targets (_workload_targets)
        entry = {k: v for k, v in entry.items() if k not in ("faults", "targets")}
    if not isinstance(entry, dict) or len(entry) != 1:
        raise InputError(f"{where}: {_show(entry)} is not a workload (write {name}: {{KIND: {{parameters}}}} with KIND one of {kinds})")
    kind, params = next(iter(entry.items()))
    if kind not in WORKLOADS:
        refused = WORKLOADS.refused.get(kind) if isinstance(kind, str) else None
        if refused:  # a plug-in that is installed but could not be used: say why, not "unknown"
            raise InputError(f"{where}: workload kind '{kind}' cannot be used: {refused}")
        raise InputError(f"{where}: unknown workload kind '{kind}' ({_suggest(str(kind), WORKLOADS)})")
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InputError(f"{where}.{kind}: {_show(params)} is not a mapping of parameters")
    return kind, dict(params)


def _like(name: str, entry: Any, targets: dict[Any, Any]) -> Any:
    """A target written ``{like: OTHER, replication: 1}``: OTHER's URL and options, with these on top (the
    same server under other settings, e.g. each replication of seed 003's matrix)."""
    if not isinstance(entry, dict) or "like" not in entry:
        return entry
    other = entry["like"]
    base = targets.get(other)
    if not isinstance(other, str) or base is None or other == name:
        known = ", ".join(sorted(str(n) for n in targets if n != name)) or "none"
        raise InputError(f"targets.{visible(name)}.like: {_show(other)} is not another target (one of {known})")
    if isinstance(base, dict) and "like" in base:
        raise InputError(f"targets.{visible(name)}.like: {other} is itself like another target (name the first one)")
    base = {"url": base} if isinstance(base, str) else dict(base)
    return {**base, **{k: v for k, v in entry.items() if k != "like"}}


def _file(v: Any) -> str:
    if not isinstance(v, str) or not v.strip():
        raise ValueError("is not a file name (e.g. storeval-testbed.yaml)")
    return v


class TargetsFrom(BaseModel):
    """``targets_from: FILE`` or ``{file: FILE, allow_commands: true, only: [NAME, …]}``: a file whose ``targets:``
    the study uses (all of them, or those ``only`` names: a testbed's file may offer more than a study measures)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    file: Annotated[str, BeforeValidator(_file)]
    allow_commands: StrictBool = False  # a target there may have setup/teardown commands
    only: list[StrictStr] | None = None  # the file's targets the study uses (default: all of them)


TARGETS_FROM_KEYS = tuple(TargetsFrom.model_fields)


def _targets_from(raw: Any) -> tuple[str, dict[str, Any]]:
    """(file, its ``targets:``) of ``targets_from: FILE`` or ``targets_from: {file: FILE, allow_commands: true}``
    (relative to the current directory, as `storeval testbed up` writes its storeval-testbed.yaml there). A file
    meant to list targets runs nothing: a target there with ``setup:``/``teardown:`` commands is refused unless
    the study itself says ``allow_commands: true``."""
    try:
        given = TargetsFrom.model_validate(raw if isinstance(raw, dict) else {"file": raw})
    except ValidationError as e:
        if isinstance(raw, dict):
            raise pydantic_error(e, "targets_from", TargetsFrom) from None
        raise pydantic_error(e, "", names={"file": "targets_from"}) from None
    source, allow = given.file, given.allow_commands
    where = "targets_from.file" if isinstance(raw, dict) else "targets_from"
    if not os.path.lexists(source):
        raise InputError(f"{where}: {visible(source)} does not exist (start the servers with `storeval testbed up` in "
                         "this directory, or give the path of a file with targets:)")
    other = read_yaml(source, "targets file")
    found = other.get("targets") if isinstance(other, dict) else None
    if not isinstance(found, dict) or not found:
        raise InputError(f"{where}: {visible(source)} has no targets: mapping")
    if given.only is not None:
        missing = [n for n in given.only if n not in found]
        if missing:
            raise InputError(f"targets_from.only: {visible(missing[0])} is not a target of {visible(source)} "
                             f"(it has {', '.join(visible(str(n)) for n in found)})")
        found = {n: e for n, e in found.items() if n in given.only}
    if not allow:
        for name, entry in found.items():
            keys = [k for k in ("setup", "teardown") if isinstance(entry, dict) and entry.get(k)]
            if keys:
                raise InputError(f"{where}: target {visible(str(name))} of {visible(source)} has {keys[0]} commands, "
                                 "which storeval would run on this host; a targets file runs no command unless the "
                                 f"study allows it (targets_from: {{file: {visible(source)}, allow_commands: true}})")
    return source, found


def _fault_plan(raw: dict[str, Any], raw_workloads: dict[str, Any], specs: dict[str, WorkloadSpec],
                targets: dict[str, TargetSpec]) -> list[Fault]:
    """The study's fault plan (top-level ``faults``, and each workload's own), checked against the phases the
    selected workloads run and the deadlines that end them."""
    phases: dict[str, tuple[str, ...]] = {}
    bounds: dict[str, dict[str, float]] = {}
    for name, spec in specs.items():
        cls = WORKLOADS[spec.kind]
        runs: list[str] = []
        for combo in spec.combos:
            runs += [ph for ph in cls.phases_of(combo) if ph not in runs]
            deadline = getattr(combo, "deadline", None)
            if isinstance(deadline, (int, float)) and deadline > 0:
                for ph in cls.PHASES:
                    bounds.setdefault(name, {})[ph] = min(bounds.get(name, {}).get(ph, math.inf), float(deadline))
        phases[name] = tuple(runs)
    plan = parse_plan(raw.get("faults"), "faults", phases, bounds)
    for name, entry in raw_workloads.items():
        if name in specs and isinstance(entry, dict) and "faults" in entry:
            plan += parse_plan(entry["faults"], f"workloads.{visible(str(name))}.faults", phases, bounds, str(name))
    for fault in plan:
        if fault.target is not None and fault.target not in targets:
            raise InputError(f"{fault.where}.target: {_show(fault.target)} is not a target of the study (one of "
                             f"{', '.join(sorted(targets))})")
    return plan


def _workload_targets(raw_workloads: dict[str, Any], specs: dict[str, WorkloadSpec],
                      study_targets: dict[str, TargetSpec], chosen: dict[str, TargetSpec]) -> dict[str, TargetSpec]:
    """Each workload's ``targets: [...]`` (the only targets it runs on) into its spec, and the targets its
    parameters name as the other end (tpc's ``source``), checked against the study's; returns those other
    targets that ``--target`` left out of the cells (they are still connected as the other end)."""
    others: dict[str, TargetSpec] = {}
    for name, spec in list(specs.items()):
        where = f"workloads.{visible(name)}"
        entry = raw_workloads.get(name)
        if isinstance(entry, dict) and "targets" in entry:
            listed = entry["targets"]
            if isinstance(listed, str):
                listed = [listed]
            if not isinstance(listed, list) or not listed or not all(isinstance(t, str) for t in listed):
                raise InputError(f"{where}.targets: {_show(listed)} is not a list of target names (write targets: "
                                 "[NAME, ...])")
            for t in listed:
                if t not in study_targets:
                    raise InputError(f"{where}.targets: {_show(t)} is not a target of the study (one of "
                                     f"{', '.join(sorted(study_targets))})")
            refuse_repeats(listed, listed, f"{where}.targets")
            specs[name] = spec = dataclasses.replace(spec, targets=tuple(listed))
        for param in WORKLOADS[spec.kind].target_params:
            for combo in spec.combos:
                other = getattr(combo, param)
                if other not in study_targets and other not in chosen:
                    raise InputError(f"{where}.{param}: {_show(other)} is not a target of the study (one of "
                                     f"{', '.join(sorted({*study_targets, *chosen}))})")
                if other not in chosen:
                    others[other] = study_targets[other]
    return others


# -- targets --------------------------------------------------------------------------------------
def _under(where: str, error: InputError) -> InputError:
    """``error`` under the place it concerns, without repeating a URL the place already names."""
    text = str(error)
    head = where.split(" ", 1)[1] if " " in where else None
    if head and (text.startswith(head + " ") or text.startswith(head + ": ")):
        text = text[len(head):].removeprefix(":").lstrip()
    return InputError(f"{where}: {text}")


def _commands(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list) or not items or not all(isinstance(c, str) and c.strip() for c in items):
        raise ValueError("is not a command or a list of commands (e.g. lfs setstripe -c {stripe_count} {path})")
    return tuple(c.strip() for c in items)


def _setting(value: Any) -> Any:
    values = value if isinstance(value, list) else [value]
    if not values or not all(isinstance(v, (str, int, float, bool)) for v in values):
        raise ValueError("is not a value or a list of values")
    if isinstance(value, list):
        reason = repeated(value, [_same(v) for v in value])
        if reason:
            raise ValueError(reason)
    return value


def _settings_mapping(v: Any) -> Any:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise ValueError("is not a mapping of setting names to values (e.g. settings: {stripe_count: [1, 4]})")
    return v


Setting = Annotated[Any, BeforeValidator(_setting)]
Commands = Annotated[tuple[str, ...], BeforeValidator(_commands)]


class TargetEntry(BaseModel):
    """A target of the study: where it is (``url``), or the testbed system storeval brings up for it (``testbed``,
    ``use``), what its hardware can deliver (``limits``), the settings it is configured at between cells with the
    commands that apply them; every other key is an option of its driver (validated by the driver's ``Options``),
    or for a testbed target one of the system's own settings."""

    model_config = ConfigDict(extra="allow", frozen=True)
    url: Any = None
    description: Any = None
    limits: Annotated[Limits, BeforeValidator(lambda v: v or {})] = Limits()
    testbed: Any = None
    use: Any = None
    settings: Annotated[dict[Name, Setting], BeforeValidator(_settings_mapping)] = {}
    setup: Commands = ()
    teardown: Commands = ()

    @property
    def rest(self) -> dict[str, Any]:
        """The keys the target's driver (or testbed system) reads."""
        return dict(self.model_extra or {})

    def system(self, **more: Any) -> dict[str, Any]:
        return {**more, "settings": dict(self.settings), "setup": list(self.setup), "teardown": list(self.teardown)}


TARGET_KEYS = tuple(TargetEntry.model_fields)


def _entry(entry: dict[str, Any], where: str) -> TargetEntry:
    try:
        return TargetEntry.model_validate(entry)
    except ValidationError as e:
        raise pydantic_error(e, where, TargetEntry) from None


def _check_commands(system: dict[str, Any], where: str) -> None:
    """Every setup/teardown command a template of the target's settings (and url, path, target) whose values
    can never be read as code (core/shell.py)."""
    settings = system["settings"]
    names = [*settings, "url", "path", "target"]
    for key in ("setup", "teardown"):
        for command in system[key]:
            try:
                fields(command)
            except ValueError:
                raise InputError(f"{where}.{key}: {_show(command)} is not a command template (only {{name}} "
                                 "fields; write {{{{ and }}}} for literal braces)") from None
            try:
                check_command(command, names)
            except KeyError as e:
                raise InputError(f"{where}.{key}: {{{e.args[0]}}} is not a setting of the target (settings: "
                                 f"{', '.join(settings) or 'none'}; also url, path, target)") from None
            except ValueError as e:
                raise InputError(f"{where}.{key}: {e}") from None


def _testbed_target(name: str, entry: dict[str, Any], where: str) -> TargetSpec:
    """A target whose system storeval's testbed brings up at each combination of its settings (core/system.py)."""
    from .testbed import SERVERS, server_class
    from .testbed.base import TestbedError

    kind = entry["testbed"]
    if not isinstance(kind, str) or kind not in SERVERS:
        raise InputError(f"{where}.testbed: {_show(kind)} is not a testbed system (one of {', '.join(SERVERS)})")
    if "url" in entry:
        raise InputError(f"{where}: give url or testbed, not both (a testbed target's URL is the running server's)")
    cls = server_class(kind)
    schemes = cls.target_schemes
    use = entry.get("use", next(iter(schemes), None))
    if use not in schemes:
        raise InputError(f"{where}.use: {_show(use)} is not a target of the {kind} testbed "
                         f"(one of {', '.join(schemes) or 'none'})")
    # the system's own settings (host: every kind's check says if it can run on one), and the state storeval sets
    own = (*cls.options_help, "host", *STATE_SETTINGS)
    driver = driver_class(f"{schemes[use]}://")
    known = [*TARGET_KEYS, *own, *driver.Options.model_fields]
    target = _entry(entry, where)
    settings = dict(target.settings)
    for key in own:
        if key in target.rest:
            try:
                settings[key] = _setting(target.rest[key])
            except ValueError as e:
                raise InputError(f"{where}.{key}: {_show(target.rest[key])} {e}") from None
    for key in (k for k in STATE_SETTINGS if k in settings):
        for value in settings[key] if isinstance(settings[key], list) else [settings[key]]:
            try:
                check_state_setting(key, value)
            except ValueError as e:
                raise InputError(f"{where}.{key}: {_show(value)} {e}") from None
    configured: dict[str, dict[str, Any]] = {}
    for combo in combinations(settings):
        try:
            options = cls.check_options(system_options(combo))
        except TestbedError as e:
            raise InputError(f"{where}: {one_line(e)}") from None
        state = {k: combo[k] for k in STATE_SETTINGS if k in combo}
        same = configured.setdefault(json.dumps([options, state], sort_keys=True, default=str), combo)
        if same is not combo:
            raise InputError(f"{where}: settings {_show(same)} and {_show(combo)} configure the same {kind} system "
                             "(give each value once)")
    try:
        options = driver.Options.model_validate({k: v for k, v in target.rest.items() if k not in own})
    except ValidationError as e:
        raise pydantic_error(e, where, known=known) from None
    check_name(name, where)
    system = {**target.system(testbed=kind, use=use, scheme=schemes[use]), "settings": settings}
    _check_commands(system, where)
    return TargetSpec(name=name, url="", options=options.model_dump(mode="json", exclude_defaults=True),
                      limits=target.limits.model_dump(exclude_none=True), system=system)


def make_target(name: str, entry: Any, where: str, url_where: str | None = None) -> TargetSpec:
    if isinstance(entry, str):
        entry = {"url": entry}
    if not isinstance(entry, dict):
        raise InputError(f"{where}: {_show(entry)} is not a target (write {name}: {{url: file:///path}})")
    if "testbed" in entry:
        return _testbed_target(name, entry, where)
    if "use" in entry:
        raise InputError(f"{where}.use: only a testbed target picks one of the testbed's targets (add testbed: KIND)")
    url_where = url_where or f"{where}.url"
    if "url" not in entry:
        raise InputError(f"{where}.url: missing (every target needs a URL such as file:///mnt/lustre/x or s3://bucket/prefix)")
    url = entry["url"]
    if not isinstance(url, str) or not url.strip():
        raise InputError(f"{url_where}: {_show(url)} is not a URL (e.g. file:///mnt/lustre/x)")
    url = normalize_url(url.strip())
    try:
        cls = driver_class(url)
        cls.parse(url)  # every part of the URL is one the driver reads, or this says which is not
    except NeedsExtra as e:  # target NAME (s3://…) needs the s3 extra: pip install 'storeval[s3]'
        raise InputError(f"target {visible(name)} ({e.shown}) {e.need}") from None
    except InputError as e:
        raise _under(url_where, e) from None
    check_name(name, where)
    known = [*TARGET_KEYS, *cls.Options.model_fields]
    target = _entry(entry, where)
    try:
        options = cls.Options.model_validate(target.rest)
    except ValidationError as e:
        raise pydantic_error(e, where, known=known) from None
    try:
        cls.check_url(url, options)
    except InputError as e:
        raise _under(url_where, e) from None
    system = None
    if any(k in entry for k in ("settings", "setup", "teardown")):
        system = target.system(target=name)
        if not target.setup and not target.teardown and any(isinstance(v, list) for v in target.settings.values()):
            raise InputError(f"{where}.settings: sweeping a setting needs a setup command that applies it (add "
                             "setup: a command using {" + next(iter(target.settings)) + "})")
        _check_commands(system, where)
    return TargetSpec(name=name, url=url, options=options.model_dump(mode="json", exclude_defaults=True),
                      limits=target.limits.model_dump(exclude_none=True), system=system)


def target_path_of(url: str) -> str:
    """The path part of a target URL (what ``{path}`` means in a setup command)."""
    from urllib.parse import unquote, urlsplit

    return unquote(urlsplit(url).path)


def _target_name(url: str, taken: typing.Container[str]) -> str:
    name = url[len("file://"):] if url.startswith("file://") else url
    base, i = name, 2
    while name in taken:
        name, i = f"{base}#{i}", i + 1
    return name


# -- the whole study -------------------------------------------------------------------------------
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def _not_regular(mode: int) -> str | None:
    """What a file that is not a regular file is (a FIFO would block a reader forever, /dev/zero never end)."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def read_regular(path: str, what: str, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of a regular file ``what`` names (study file, targets file, hostfile): anything
    else — a directory, a FIFO, a device — is refused in one line, before it is opened for reading (and opened
    without blocking, checked again once open)."""
    shown = visible(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{what} {shown} does not exist (check the path)") from None
    except OSError as e:
        raise InputError(f"{what} {shown}: cannot read it ({e.strerror})") from None
    kind = _not_regular(st.st_mode)
    if kind is not None:
        raise InputError(f"{what} {shown} is {kind}, not a file (give {'a text' if what == 'hostfile' else 'a YAML'} "
                         "file)")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise InputError(f"{what} {shown}: cannot read it ({e.strerror})") from None
    try:
        kind = _not_regular(os.fstat(fd).st_mode)  # replaced between the two looks
        if kind is not None:
            raise InputError(f"{what} {shown} is {kind}, not a file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    except OSError as e:
        raise InputError(f"{what} {shown}: cannot read it ({e.strerror})") from None
    finally:
        os.close(fd)


def read_yaml(path: str, what: str = "study file") -> dict[str, Any]:
    raw = read_regular(path, what, safeyaml.MAX_BYTES)
    if len(raw) > safeyaml.MAX_BYTES:
        raise InputError(f"{what} {visible(path)} is larger than {safeyaml.MAX_BYTES >> 20} MiB (a study is a few "
                         f"KiB; check that this is the {what})")
    try:
        data = safeyaml.load(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not valid YAML (byte {e.start} is not UTF-8); save the file as UTF-8") from None
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark
        at = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        if isinstance(e, safeyaml.Refused):
            raise InputError(f"{path}{at}: {e.problem}") from None
        raise InputError(f"{path}{at}: not valid YAML ({e.problem}; check indentation and quoting)") from None
    except yaml.YAMLError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise InputError(f"{path}: not valid YAML ({visible(first)}); check the file") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InputError(f"{path}: the study must be a mapping with keys such as targets and workloads, not {type(data).__name__}")
    return data


def _as_list(value: Any) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


MIN_LINK_RATE, MAX_LINK_RATE = 1e3, 1.25e11  # bytes/s: what tbf can shape (testbed/network.py)
RESERVED_HOSTS = ("controller",)  # storeval's own end of the emulated network
MAX_RTT = 10.0  # seconds: beyond any real path; a typo (12s for 12ms) should not hold a link for minutes
MAX_HOST_NAME = 64


def host_name(value: Any, where: str) -> str:
    """An emulated host's name as given (a study's or a command's), or one line saying why it cannot be one."""
    try:
        return _host(value)
    except ValueError as e:
        raise InputError(f"{where}: {_show(value)} {e}") from None


def _host(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_HOST_NAME:
        raise ValueError(f"is not a host name (a word such as server1, at most {MAX_HOST_NAME} characters)")
    if value.strip() in RESERVED_HOSTS:
        raise ValueError("names storeval's own end of the emulated network; call the host otherwise")
    return _name(value.strip())


def _name(name: Any) -> str:
    """A name of the study (a key), checked as :func:`check_name` checks it, for a model's validator."""
    try:
        return check_name(str(name), "")
    except InputError as e:
        raise FieldError(str(e).removeprefix(": ")) from None


def link_value(key: str, value: Any, where: str) -> Any:
    """One value of a link setting: rate in bytes/s (None: unlimited), rtt/jitter in seconds, loss a fraction."""
    try:
        return _link_value(key, value)
    except ValueError as e:
        raise InputError(f"{where}: {_show(value)} {e}") from None


def _link_value(key: str, value: Any) -> Any:
    try:
        if key == "rate":
            if value is None or (isinstance(value, str) and value.strip().lower() in ("unlimited", "none")):
                return None
            rate = parse_rate(value)
            if not MIN_LINK_RATE <= rate <= MAX_LINK_RATE:
                raise UnitError("is not a rate an emulated link can have (8kbit to 1tbit, e.g. 1Gbit)")
            return rate
        if key in ("rtt", "jitter"):
            seconds = parse_duration(value)
            if seconds > MAX_RTT:
                raise UnitError(f"is longer than {MAX_RTT:g} s (write milliseconds: 12ms)")
            return seconds
        if isinstance(value, str) and value.strip().endswith("%"):
            fraction = float(value.strip()[:-1]) / 100
        elif isinstance(value, (int, float, str)) and not isinstance(value, bool):
            fraction = float(value)  # a fraction (a command line's text too)
        else:
            raise ValueError
        if not 0 <= fraction < 1 or fraction != fraction:
            raise UnitError("is not a loss between 0 and 100 % (e.g. 0.1% or 0.001)")
        return fraction
    except UnitError as e:
        raise ValueError(str(e)) from None
    except ValueError:
        raise ValueError("is not a loss (e.g. 0.1% or 0.001)") from None


def _link_setting(key: str) -> BeforeValidator:
    """A link setting's value, or a list of values to sweep (each checked, none repeated)."""
    def check(value: Any) -> Any:
        if not isinstance(value, list):
            return _link_value(key, value)
        if not value:
            raise FieldError("is an empty list (give a value, or a list of values to sweep)")
        values = []
        for i, v in enumerate(value):
            try:
                values.append(_link_value(key, v))
            except ValueError as e:
                raise FieldError(str(e), i, value=v) from None
        reason = repeated(value, values)
        if reason:
            raise ValueError(reason)
        return values if len(values) > 1 else values[0]
    return BeforeValidator(check)


def _mapping_or_none(what: str) -> BeforeValidator:
    def check(v: Any) -> Any:
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise ValueError(f"is not {what}")
        return v
    return BeforeValidator(check)


Name = Annotated[str, BeforeValidator(_name)]
HostName = Annotated[str, BeforeValidator(_host)]


class Link(BaseModel):
    """An emulated link (testbed/network.py): a list value is swept, one link per setting."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    rate: Annotated[Any, _link_setting("rate")] = None  # bytes/s; None: unlimited
    rtt: Annotated[Any, _link_setting("rtt")] = None  # seconds
    jitter: Annotated[Any, _link_setting("jitter")] = None  # seconds
    loss: Annotated[Any, _link_setting("loss")] = None  # a fraction

    _mapping = mapping_only("is not a mapping of settings (rate, rtt, jitter, loss)", none_is_empty=True)

    @model_validator(mode="after")
    def _jitter(self) -> Link:
        jitter = max(_as_list(self.jitter) or [0.0])
        rtt = min(_as_list(self.rtt) or [0.0])
        if jitter > rtt / 2 + 1e-12:
            raise FieldError(f"{jitter * 1e3:g}ms is more than half the rtt {rtt * 1e3:g}ms (the jitter of each way's "
                             "delay); lower it or raise the rtt", "jitter")
        return self

    def settings(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in LINK_KEYS if k in self.model_fields_set}


class HostLink(BaseModel):
    """An emulated host's place on the network: the link that attaches it (None: unshaped)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    link: Any = None

    @model_validator(mode="before")
    @classmethod
    def _mapping(cls, v: Any) -> Any:
        v = v or {}
        if not isinstance(v, dict) or any(k != "link" for k in v):
            raise ValueError("is not {link: NAME} (or nothing, for an unshaped host)")
        return v


def _unknown_link(link: Any, links: typing.Collection[str], *at: str) -> FieldError | None:
    if link is None or (isinstance(link, str) and link in links):
        return None
    known = ", ".join(sorted(links)) or "none: declare it under network.links"
    return FieldError(f"is not a link of network.links ({known})", *at, value=link)


class Network(BaseModel):
    """``network: {links: {NAME: {rate, rtt, jitter, loss}}, hosts: {HOST: {link: NAME}}}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    links: Annotated[dict[Name, Link], _mapping_or_none("a mapping of link names to settings")] = {}
    hosts: Annotated[dict[HostName, HostLink], _mapping_or_none("a mapping of host names to {link: NAME}")] = {}

    _mapping = mapping_only("is not a mapping (write network: {links: {wan: {rtt: 12ms}}})")

    @model_validator(mode="after")
    def _consistent(self) -> Network:
        for host, entry in self.hosts.items():
            error = _unknown_link(entry.link, self.links, "hosts", host, "link")
            if error:
                raise error
        sweeps: dict[str, str] = {}
        for name, link in self.links.items():
            for key, value in link.settings().items():
                if isinstance(value, list):
                    if key in sweeps:
                        raise FieldError(f"links {sweeps[key]} and {name} both sweep {key}; sweep it on one link (the "
                                         f"factor is named {key})", "links", name, key)
                    sweeps[key] = name
        return self

    def spec(self) -> NetworkSpec:
        return NetworkSpec(links={n: link.settings() for n, link in self.links.items()},
                           hosts={h: e.link for h, e in self.hosts.items()})


class StudyFile(StudySettings):
    """A study file's top level, typed: the settings and prices here; the sections that need the installed
    plug-ins (targets: drivers; workloads: their Params; faults: the phases those run; clients and network:
    the hosts the targets' servers run on) are checked against each other by :func:`load_study`."""

    targets: Any = None
    targets_from: Any = None
    workloads: Any = None
    clients: Any = None
    network: Network | None = None
    faults: Any = None
    prices: Annotated[dict[str, Price] | None, BeforeValidator(_prices_mapping)] = None


TOP_KEYS = tuple(StudyFile.model_fields)
NETWORK_KEYS = tuple(Network.model_fields)


def _ranks(value: Any) -> tuple[int, ...]:
    """``0-3,8`` or ``[0, 1, 2]`` -> the ranks."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else str(value).split(",")
    out: list[int] = []
    for item in items:
        text = str(item).strip()
        try:
            if isinstance(item, bool):
                raise ValueError
            first, _, last = text.partition("-")
            lo, hi = int(first), int(last) if last else int(first)
        except ValueError:
            raise FieldError("is not a rank or a range of ranks (e.g. 0-3,8)", value=item) from None
        if lo < 0 or hi < lo or hi >= MAX_CLIENTS:
            raise FieldError("is not a range of ranks (e.g. 0-3)", value=item)
        out += [r for r in range(lo, hi + 1) if r not in out]
    if not out:
        raise FieldError("no ranks given (e.g. 0-3,8)")
    return tuple(out)


def _counts(value: Any) -> tuple[int, ...]:
    counts = value if isinstance(value, list) else [value]
    for c in counts:
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_CLIENTS:
            raise FieldError(f"is not a number of clients (a whole number, 0 to {MAX_CLIENTS:,})", value=c)
    reason = repeated(counts, counts)
    if reason:
        raise ValueError(reason)
    if not counts:
        raise FieldError("no client counts given (e.g. [2, 4])")
    return tuple(counts)


def _hosts(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ValueError("is not a list of host names")
    out = []
    for i, h in enumerate(value):
        try:
            out.append(_host(h))
        except ValueError as e:
            raise FieldError(str(e), i, value=h) from None
    return tuple(out)


def _file_name(v: Any) -> str | None:
    if v is not None and (not isinstance(v, str) or not v.strip()):
        raise ValueError("is not a file name (an MPI hostfile: one host per line)")
    return v


class ClientGroup(BaseModel):
    """``clients: {NAME: {count: [2, 4], host: H, link: L}}``: one group of a cell's clients, placed on an emulated
    host (local clients) or on real hosts and ranks (MPI); ``NAME: [2, 4]`` is its count alone."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    count: Annotated[tuple[int, ...] | None, BeforeValidator(_counts)] = None
    host: Annotated[str | None, BeforeValidator(lambda v: None if v is None else _host(v))] = None
    link: Any = None  # a link of network.links, checked with the study's network
    hosts: Annotated[tuple[str, ...], BeforeValidator(_hosts)] = ()
    hostfile: Annotated[str | None, BeforeValidator(_file_name)] = None
    ranks: Annotated[tuple[int, ...], BeforeValidator(_ranks)] = ()

    @model_validator(mode="before")
    @classmethod
    def _entry(cls, v: Any) -> Any:
        if isinstance(v, (int, list)) and not isinstance(v, bool):
            return {"count": v}
        if not isinstance(v, dict):
            raise ValueError("is not a client group (write NAME: {count: [2, 4], host: server1})")
        return v

    @model_validator(mode="after")
    def _placed(self) -> ClientGroup:
        if self.count is None:
            raise FieldError("missing (how many clients this group runs, e.g. [2, 4])", "count")
        if self.link is not None and not self.host:
            raise FieldError("a link attaches an emulated host; add host: NAME (the clients run there)", "link")
        if self.host and (self.hosts or self.hostfile or self.ranks):
            raise ValueError("give host (an emulated host, local clients) or hosts/hostfile/ranks (MPI), not both")
        return self


GROUP_KEYS = tuple(ClientGroup.model_fields)


def _hostfile(path: Any, where: str) -> tuple[str, ...]:
    """The host names of an MPI hostfile (``node1``, ``node1:4``, ``node1 slots=4``; ``#`` comments)."""
    if not isinstance(path, str) or not path.strip():
        raise InputError(f"{where}: {_show(path)} is not a file name (an MPI hostfile: one host per line)")
    try:
        os.stat(path)
    except OSError as e:
        raise InputError(f"{where}: cannot read {visible(path)}: {e.strerror}") from None
    try:
        lines = read_regular(path, "hostfile", 1 << 20)[:1 << 20].decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError(f"{where}: cannot read {visible(path)}: not a text file") from None
    except InputError as e:
        raise InputError(f"{where}: {e}") from None
    hosts: list[str] = []
    for n, line in enumerate(lines, 1):
        word = line.split("#", 1)[0].split()
        if word:
            name = host_name(word[0].split(":", 1)[0], f"{where} ({visible(path)} line {n})")
            if name not in hosts:
                hosts.append(name)
    if not hosts:
        raise InputError(f"{where}: {visible(path)} names no host (one host name per line)")
    return tuple(hosts)


def _groups(raw: dict[str, Any], network: NetworkSpec, where: str = "clients") -> tuple[dict[str, Group], NetworkSpec]:
    """The study's client groups, and the network with the hosts they imply."""
    try:
        entries = TypeAdapter(dict[Name, ClientGroup]).validate_python(raw)
    except ValidationError as e:
        raise pydantic_error(e, where, dict[Name, ClientGroup]) from None
    groups: dict[str, Group] = {}
    hosts = dict(network.hosts)
    for name, entry in entries.items():
        at = f"{where}.{visible(name)}"
        if name == "all":
            raise InputError(f"{at}: 'all' names every client in the reports; call the group otherwise")
        error = _unknown_link(entry.link, network.links)
        if error:
            raise InputError(f"{at}.link: {_show(error.value)} {error.reason}")
        real = entry.hosts
        if entry.hostfile is not None:
            real += tuple(h for h in _hostfile(entry.hostfile, f"{at}.hostfile") if h not in real)
        if entry.host:
            had = hosts.get(entry.host, entry.link)
            if entry.link is not None and had != entry.link:
                raise InputError(f"{at}.link: host {entry.host} is attached by link {had or 'none'} elsewhere in the "
                                 "study; a host has one link (use another host name)")
            hosts[entry.host] = had
        groups[name] = Group(name=name, counts=entry.count or (), host=entry.host, link=entry.link, hosts=real,
                             ranks=entry.ranks)
    if not groups:
        raise InputError(f"{where}: no client groups (write {where}: {{onboard: {{count: [2]}}}} or a list of counts)")
    if not any(any(g.counts) for g in groups.values()):
        raise InputError(f"{where}: every group's count is 0: no cell would run a client")
    return groups, NetworkSpec(links=network.links, hosts=hosts)


def parse_int_list(text: Any, where: str) -> list[int]:
    items = text if isinstance(text, list) else [text] if isinstance(text, int) else str(text).split(",")
    out: list[int] = []
    for item in items:
        try:
            if isinstance(item, bool):
                raise ValueError
            n = int(str(item).strip())
        except ValueError:
            raise InputError(f"{where}: {_show(item)} is not a whole number of clients (e.g. 1,2,4)") from None
        if n < 1:
            raise InputError(f"{where}: {n} is not a number of clients (at least 1)")
        if n > MAX_CLIENTS:
            raise InputError(f"{where}: {n:,} clients is more than storeval runs ({MAX_CLIENTS:,} at most; lower it)")
        out.append(n)
    if len(out) > 1:
        refuse_repeats(items, out, where)
    if not out:
        raise InputError(f"{where}: no client counts given (e.g. 1,2,4)")
    return out


def _split_set(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise InputError(f"--set {item}: expected KEY=VALUE (e.g. --set file_size=64MiB)")
    key, value = item.split("=", 1)
    if not key.strip():
        raise InputError(f"--set {item}: the key is empty (e.g. --set file_size=64MiB)")
    return key.strip(), value.strip()


def _set_yaml(key: str, text: str) -> Any:
    """A --set value read as YAML (through the same bounded loader as study files); text if it is not YAML."""
    try:
        return safeyaml.load(text)
    except safeyaml.Refused as e:
        raise InputError(f"--set {key}: column {e.problem_mark.column + 1}: {e.problem}") from None
    except yaml.YAMLError:
        return text


def _parse_set_value(model: type[Params], key: str, text: str) -> Any:
    """A --set value: YAML scalar or flow list; a bare comma list sweeps (or is the list of a list parameter)."""
    value = _set_yaml(key, text) if text else ""
    if isinstance(value, str) and "," in value:
        value = [_set_yaml(key, part.strip()) for part in value.split(",")]
    if is_list_param(model, key) and not isinstance(value, list):
        value = [value]
    return value


def targets_of(raw: dict[str, Any]) -> dict[str, TargetSpec]:
    """A study's targets, validated: its ``targets:`` (``like:`` resolved) and those of its ``targets_from:`` file
    (relative to the current directory) — what ``storeval run`` and ``storeval clean STUDY`` both act on."""
    raw_targets = raw.get("targets") or {}
    if not isinstance(raw_targets, dict):
        raise InputError(f"targets: {_show(raw_targets)} is not a mapping of target names to URLs")
    origin: dict[str, str] = {}  # imported target -> its file (its commands are printed with it)
    if raw.get("targets_from") is not None:  # e.g. the storeval-testbed.yaml `storeval testbed up` wrote
        source, imported = _targets_from(raw["targets_from"])
        origin = {str(n): source for n in imported if n not in raw_targets}
        # the imported targets are the study's targets; when it names its own, they are what those can be like
        own = set(raw_targets)
        raw_targets = {**imported, **raw_targets}
        raw_targets = {n: _like(str(n), e, raw_targets) for n, e in raw_targets.items()}
        if own:
            raw_targets = {n: e for n, e in raw_targets.items() if n in own}
    else:
        raw_targets = {n: _like(str(n), e, raw_targets) for n, e in raw_targets.items()}
    found = {str(n): make_target(str(n), e, f"targets.{visible(str(n))}") for n, e in raw_targets.items()}
    for n, source in origin.items():
        t = found.get(n)
        if t is not None and t.system and (t.system.get("setup") or t.system.get("teardown")):
            found[n] = dataclasses.replace(t, system={**t.system, "from": source})
    return found


def load_study(path: str | None = None, *, targets: list[str] | None = None, workloads: list[str] | None = None,
               sets: list[str] | None = None, clients: str | None = None, repetitions: int | None = None,
               phase_timeout: str | None = None, default_dir: str | None = None, keep_cache: bool | None = None,
               probe_interval: str | None = None, placement: str | None = None,
               clients_per_host: int | None = None) -> Study:
    """Read, merge and validate a study; raise InputError (one line) at the first mistake."""
    WORKLOADS.announce()  # a plug-in left out says so, in one line, before anything else
    raw = read_yaml(path) if path else {}
    # the settings: the study's, a command-line option over each (its errors name the option)
    given = {"repetitions": repetitions, "phase_timeout": phase_timeout, "probe_interval": probe_interval,
             "placement": placement, "clients_per_host": clients_per_host, "keep_cache": keep_cache or None}
    given = {k: v for k, v in given.items() if v is not None}
    try:
        doc = StudyFile.model_validate({**{str(k): v for k, v in raw.items()}, **given})
    except ValidationError as e:
        raise pydantic_error(e, "", StudyFile, names={k: f"--{k.replace('_', '-')}" for k in given}) from None

    study_targets = targets_of(raw)
    chosen_targets: dict[str, TargetSpec] = {}
    if targets:
        refuse_repeats(list(targets), [t if t in study_targets else normalize_url(t) for t in targets], "--target")
    for item in targets or []:
        if item in study_targets:
            chosen_targets[item] = study_targets[item]
        else:
            url = normalize_url(item)
            name = _target_name(url, chosen_targets)
            where = f"--target {visible(redact_text(item))}"
            chosen_targets[name] = make_target(name, {"url": url}, where, where)
    if not targets:
        chosen_targets = study_targets
    if not chosen_targets:
        if path:
            raise InputError(f"{path}: no targets (add targets: {{name: {{url: file:///path}}}} or use --target URL)")
        here = default_dir or os.getcwd()
        chosen_targets = {"cwd": make_target("cwd", {"url": normalize_url(here)}, "current directory", "current directory")}

    # workloads
    raw_workloads = raw.get("workloads") or {}
    if not isinstance(raw_workloads, dict):
        raise InputError(f"workloads: {_show(raw_workloads)} is not a mapping of workload names to kinds")
    entries = {str(n): _workload_entry(str(n), e, f"workloads.{visible(str(n))}") for n, e in raw_workloads.items()}
    where_of = {n: f"workloads.{visible(n)}" for n in entries}
    default_study = False  # the default workloads: repeated, so that even a first look carries a spread
    if workloads:
        refuse_repeats(list(workloads), list(workloads), "--workload")
        selected = {}
        for item in workloads:
            if item in entries:
                selected[item] = entries[item]
            elif item in WORKLOADS:
                selected[item] = (item, {})
                where_of[item] = f"--workload {item}"
            elif item in WORKLOADS.refused:  # installed, but refused: say why, not "unknown"
                raise InputError(f"--workload {item}: workload kind '{item}' cannot be used: {WORKLOADS.refused[item]}")
            else:
                names = ", ".join(sorted(entries)) or "none"
                raise InputError(f"--workload {item}: not a workload of the study ({names}) nor a kind "
                                 f"({_suggest(item, [*entries, *WORKLOADS])})")
        entries = selected
    elif not entries:
        if path:
            raise InputError(f"{path}: defines no workloads (add --workload KIND, KIND one of {', '.join(sorted(WORKLOADS))})")
        entries = {n: _workload_entry(n, e, n) for n, e in DEFAULT_WORKLOADS.items()}
        where_of = {n: f"default workload {n}" for n in entries}
        default_study = True

    set_origins: dict[str, dict[str, str]] = {}  # workload -> parameter -> the --set that gave it
    for item in sets or []:
        key, text = _split_set(item)
        scope, param = key.split(".", 1) if "." in key else (None, key)
        chosen = {n: e for n, e in entries.items() if scope is None or scope in (n, e[0])}
        if scope is not None and not chosen:
            raise InputError(f"--set {key}: '{scope}' is not a selected workload or kind "
                             f"(selected: {', '.join(sorted({*entries, *(k for k, _ in entries.values())}))})")
        applied = False
        for name, (kind, params) in chosen.items():
            model = WORKLOADS[kind].Params
            if param in model.model_fields:
                params[param] = _parse_set_value(model, param, text)
                set_origins.setdefault(name, {})[param] = f"--set {visible(key)}"
                applied = True
        if not applied:
            known = sorted({k for kind, _ in chosen.values() for k in WORKLOADS[kind].Params.model_fields})
            what = "no selected workload has this parameter" if scope is None else f"{scope} has no parameter {param}"
            raise InputError(f"--set {key}: {what} ({_suggest(param, known)})")

    study_dir = os.path.dirname(os.path.abspath(path)) if path else None
    specs = {n: expand_workload(n, kind, params, where_of[n], study_dir, set_origins.get(n))
             for n, (kind, params) in entries.items()}

    # factors and engine settings
    network = doc.network.spec() if doc.network is not None else NetworkSpec()
    groups: dict[str, Group] | None = None
    if clients is not None:
        if isinstance(raw.get("clients"), dict):
            raise InputError("--clients: the study splits its clients into groups (clients: in the study); change "
                             "their counts there")
        client_counts = parse_int_list(clients, "--clients")
    elif isinstance(raw.get("clients"), dict):
        groups, network = _groups(raw["clients"], network)
        client_counts = []  # each combination's total, once the number of cells is known to be bounded
    elif "clients" in raw:
        client_counts = parse_int_list(raw["clients"], "clients")
    else:
        client_counts = list(DEFAULT_CLIENTS) if not path else [1]
    server_hosts = []
    from .testbed import server_class

    for t in chosen_targets.values():  # a testbed server placed on an emulated host: that host is the network's
        settings = (t.system or {}).get("settings") or {}
        cls = server_class(t.system["testbed"]) if t.system and t.system.get("testbed") else None
        keys = ("host", *cls.target_hosts.values()) if cls is not None else ("host",)
        mine = cls.target_hosts.get(t.system.get("use") or "", "host") if cls is not None else "host"
        server_hosts.append(set(_as_list(settings.get(mine))))  # where the target's own server runs
        for host in (h for key in keys for h in _as_list(settings.get(key))):
            network.hosts.setdefault(host, None)
    for g in (groups or {}).values():
        if g.link and server_hosts and all(hosts == {g.host} for hosts in server_hosts):
            raise InputError(f"clients.{visible(g.name)}.link: the group runs on host {g.host}, where every target's "
                             f"server runs: its traffic never crosses link {g.link}; put the group on another host, or "
                             "drop link")
    reps = doc.repetitions if "repetitions" in doc.model_fields_set else DEFAULT_REPETITIONS if default_study else 1
    variants = sum(len(combinations(t.system["settings"])) if t.system else 1 for t in chosen_targets.values())
    client_variants = math.prod(len(g.counts) for g in groups.values()) if groups else len(client_counts)
    cells = (variants * sum(len(w.combos) for w in specs.values()) * client_variants
             * math.prod(len(network.links[link][key]) for key, link in network.swept().items())
             * reps)
    if cells > MAX_CELLS:
        raise InputError(f"the study has {cells:,} cells (targets and their settings × parameter combinations × client counts × "
                         f"repetitions; at most {MAX_CELLS:,}): sweep fewer values or repeat less")
    if groups:
        client_counts = sorted({sum(c.values()) for c in group_combinations(groups)})
    others = _workload_targets(raw_workloads, specs, study_targets, chosen_targets)
    faults = _fault_plan(raw, raw_workloads, specs, {**study_targets, **chosen_targets})  # --target narrows
    prices = _prices(doc.prices, study_targets)
    return Study(targets=chosen_targets, workloads=specs, clients=client_counts, repetitions=reps,
                 phase_timeout=doc.phase_timeout, source=os.path.abspath(path) if path else None,
                 description=doc.description, keep_cache=doc.keep_cache, probe_interval=doc.probe_interval,
                 placement=doc.placement, clients_per_host=doc.clients_per_host, faults=faults,
                 testbed=doc.testbed, groups=groups,
                 network=network if (network.links or network.hosts) else None,
                 prices={n: p for n, p in prices.items() if n in chosen_targets} or None, others=others)


def _prices(prices: dict[str, Price] | None, targets: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``prices: {TARGET: {per_tb: 40, per_gbps: 1200, currency: USD}}``, each naming a target of the study."""
    out = {}
    for name, price in (prices or {}).items():
        if name not in targets:
            raise InputError(f"prices.{visible(name)}: no target of that name (targets: "
                             f"{', '.join(map(str, targets)) or 'none'})")
        out[name] = price.model_dump(exclude_none=True)
    return out


def default_study_params(kind: str) -> dict[str, Any]:
    """The parameters of workload ``kind`` that `storeval run` without a study sets (DEFAULT_WORKLOADS),
    validated as a run validates them, so they print as the run resolves them; {} when it does not run it."""
    from .workloads import workload_class

    model = workload_class(kind).Params
    given = next((params for entry in DEFAULT_WORKLOADS.values() for k, params in entry.items() if k == kind), None)
    if given is None:
        return {}
    resolved = model.model_validate(given)
    return {k: getattr(resolved, k) for k in given}
