"""``storeval workloads``: every workload kind as a table of its parameters — default, the default study's value
where it differs, unit and what each does — as the workload declares them."""

from __future__ import annotations

from rich.table import Table

from ..spec import DEFAULT_CLIENTS, DEFAULT_REPETITIONS, DEFAULT_WORKLOADS, default_study_params
from ..units import plural
from ..workloads import WORKLOADS, workload_class
from ..workloads.base import Params, param_description, param_text, param_unit
from ..workloads.degraded import DegradedParams
from .console import safe


def workload_tables(kind: str | None = None) -> list[Table]:
    """One table per workload kind (``kind``: only that one; an unknown kind is one line listing the known)."""
    kinds = {kind: workload_class(kind)} if kind is not None else dict(WORKLOADS.items())
    return [_table(name, cls) for name, cls in kinds.items()]


def _table(name: str, cls: type) -> Table:
    model = cls.Params
    study = default_study_params(name)
    caption = [f"phases: {', '.join(cls.PHASES)}.",
               "default: what `storeval run --workload KIND` and a study that leaves the parameter out use."]
    if study:
        caption.append(f"default study: what `storeval run` without a study uses where it differs (with "
                       f"{', '.join(DEFAULT_WORKLOADS)}, clients {','.join(map(str, DEFAULT_CLIENTS))}, "
                       f"{plural(DEFAULT_REPETITIONS, 'repetition')}); blank: the default.")
    table = Table(title=f"{name} — {cls.summary}" if cls.summary else name, caption=" ".join(caption),
                  caption_justify="left", title_justify="left")
    table.add_column("parameter", no_wrap=True)
    table.add_column("default", overflow="fold", max_width=28)
    if study:
        table.add_column("default study", overflow="fold", max_width=28)
    table.add_column("unit", overflow="fold")
    table.add_column("what it does", overflow="fold", ratio=1)
    common = set(Params.model_fields) | set(DegradedParams.model_fields)  # record, on_error …: after its own
    fields = sorted(model.model_fields.items(), key=lambda item: item[0] in common)
    for field, info in fields:
        default = "(required)" if info.is_required() else param_text(model, field, info.default, ", ")
        row = [field, default]
        if study:
            differs = field in study and (info.is_required() or study[field] != info.default)
            row.append(param_text(model, field, study[field], ", ") if differs else "")
        table.add_row(*map(safe, [*row, param_unit(model, field), param_description(model, field)]))
    return table


def workload_docs(kind: str | None = None) -> dict:
    """The same as :func:`workload_tables`, as data (``storeval workloads --json``): values as a study writes them."""
    kinds = {kind: workload_class(kind)} if kind is not None else dict(WORKLOADS.items())
    out = []
    for name, cls in kinds.items():
        model, study = cls.Params, default_study_params(name)
        params = []
        for field, info in model.model_fields.items():
            entry = {"name": field, "required": info.is_required(),
                     "default": None if info.is_required() else param_text(model, field, info.default, ", "),
                     "unit": param_unit(model, field), "description": param_description(model, field)}
            if field in study and (info.is_required() or study[field] != info.default):
                entry["default_study"] = param_text(model, field, study[field], ", ")
            params.append(entry)
        out.append({"kind": name, "summary": cls.summary, "phases": list(cls.PHASES),
                    "package": WORKLOADS.packages.get(name, "?"), "parameters": params})
    return {"workloads": out}
