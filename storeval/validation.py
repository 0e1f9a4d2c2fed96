"""A pydantic ``ValidationError`` as the one line storeval prints: the YAML path, the value (short, secrets
masked, invisible characters escaped) and what is expected — for the study's models (spec.py), the fault plan
(core/faultplan.py), workload parameters and driver options alike."""

from __future__ import annotations

import difflib
import json
import types
import typing
from typing import Annotated, Any

from pydantic import BaseModel, ValidationError, model_validator

from .errors import InputError
from .redact import redact_text, visible


def mapping_only(message: str, *, none_is_empty: bool = False) -> Any:
    """A model's before-validator: the value is a mapping (None an empty one, with ``none_is_empty``), or the
    model fails with ``message`` (``is not a mapping (write …)``), which the formatter puts after the key's path.
    Use in a model's body: ``_mapping = mapping_only("is not a mapping (write …)")``."""
    def check(cls: type, v: Any) -> Any:
        if v is None and none_is_empty:
            return {}
        if not isinstance(v, dict):
            raise ValueError(message)
        return v

    return model_validator(mode="before")(classmethod(check))


def show(value: Any) -> str:
    """A value as an error line quotes it: short, secrets masked, invisible characters escaped."""
    text = visible(redact_text(repr(value) if isinstance(value, str) else json.dumps(value, default=str)))
    return text if len(text) <= 60 else text[:57] + "..."


def suggest(word: str, choices: typing.Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean '{close[0]}'?" if close else f"known: {', '.join(sorted(choices))}"


def _where(prefix: str, loc: tuple, names: dict[str, str] | None = None) -> str:
    """The YAML path of an error; ``names`` renames a top-level key (a command-line option that gave it)."""
    out = prefix
    for i, part in enumerate(loc):
        if i == 0 and not prefix and names and part in names:
            out = names[part]
            continue
        if part == "[key]":  # pydantic's mark of a mapping's key, named by the part before it
            continue
        out += f"[{part}]" if isinstance(part, int) else (f".{visible(str(part))}" if out else visible(str(part)))
    return out


def _reason(err: dict[str, Any]) -> str:
    kind, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
    if kind in ("value_error", "assertion_error"):
        return msg.split(", ", 1)[1] if ", " in msg else msg
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return "is not a whole number"
    if kind in ("bool_parsing", "bool_type"):
        return "is not true or false"
    if kind in ("float_parsing", "float_type"):
        return "is not a number"
    if kind in ("string_type",):
        return "is not a string"
    if kind == "literal_error":
        return "is not one of " + str(ctx.get("expected", "")).replace("'", "").replace(" or ", ", ")
    if kind in ("list_type",):
        return "is not a list"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return "is not a mapping of keys to values"
    if kind == "greater_than_equal":
        return f"must be at least {ctx.get('ge')}"
    if kind == "less_than_equal":
        return f"must be at most {ctx.get('le')}"
    if kind == "greater_than":
        return f"must be more than {ctx.get('gt')}"
    return msg[0].lower() + msg[1:] if msg else kind


_HIDDEN = object()


class FieldError(ValueError):
    """A model's check that concerns one of its keys (``at``: keys and list indexes under the model) and, where
    given, one value there (``value``: quoted before the reason; not given, the reason stands alone)."""

    def __init__(self, reason: str, *at: str | int, value: Any = _HIDDEN) -> None:
        super().__init__(reason)
        self.reason, self.at, self.value = reason, at, value


def _fields_at(model: Any, loc: tuple) -> list[str]:
    """The keys of the model that ``loc`` (a path into ``model``, through mappings and lists) leads to."""
    kind: Any = model
    for part in loc:
        while True:
            origin, args = typing.get_origin(kind), typing.get_args(kind)
            if origin is Annotated:
                kind = args[0]
            elif origin in (typing.Union, types.UnionType):
                kind = next((a for a in args if a is not type(None)), kind)
            else:
                break
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            fields = {f.alias or name: f for name, f in kind.model_fields.items()}
            kind = fields[part].annotation if part in fields else None
        elif origin is dict:
            kind = args[1]
        elif origin is list:
            kind = args[0]
        else:
            return []
    while typing.get_origin(kind) in (Annotated, typing.Union, types.UnionType):
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
    if isinstance(kind, type) and issubclass(kind, BaseModel):
        return [f.alias or name for name, f in kind.model_fields.items()]
    return []


def pydantic_error(exc: ValidationError, prefix: str, known: typing.Iterable[str] = (),
                   names: dict[str, str] | None = None) -> InputError:
    """The first error of ``exc`` as one line under the YAML path ``prefix`` (``names``: see :func:`_where`)."""
    errs = exc.errors()
    err = errs[0]
    where = _where(prefix, tuple(err["loc"]), names)
    more = f" (and {len(errs) - 1} more problem{'s' if len(errs) > 2 else ''})" if len(errs) > 1 else ""
    if err["type"] == "extra_forbidden":
        key = str(err["loc"][-1])
        if isinstance(known, types.GenericAlias) or isinstance(known, type) and issubclass(known, BaseModel):
            known = _fields_at(known, tuple(err["loc"][:-1]))
        return InputError(f"{where}: unknown key ({suggest(key, known)}){more}")
    if err["type"] == "missing":
        return InputError(f"{where}: missing (it is required){more}")
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, FieldError):  # a check that names the key (and value) it concerns
        where = _where(where, error.at)
        shown = "" if error.value is _HIDDEN else f"{show(error.value)} "
        return InputError(f"{where}: {shown}{error.reason}{more}")
    if isinstance(err.get("input"), dict):  # a check across parameters: the message names them
        return InputError(f"{where}: {_reason(err)}{more}")
    return InputError(f"{where}: {show(err.get('input'))} {_reason(err)}{more}")
