"""System settings: what a target's storage system is configured as, when that takes a restart or a command.

A target may sweep settings of the system under it — the number of storage servers (seed 002's throughput vs
servers), a replica count, a stripe count, a block size, an erasure set size — that no client option can change.
Two ways bring a setting about, and both are described here as plain data on :class:`~.cell.TargetSpec.system`:

* ``testbed: KIND`` — storeval's testbed starts that system at each combination of settings (``servers: [1, 2,
  4]``, ``type: distribute``) and stops it after the combination's cells; the target's URL comes from the
  running testbed. ``use:`` picks one of the testbed's targets where it has several (Ceph: ``cephfs``).
* ``setup:``/``teardown:`` commands (a real cluster: ``lfs setstripe -c {stripe_count} {path}``), run by
  ``/bin/sh`` before the first and after the last cell of each combination, with ``{setting}``, ``{url}``,
  ``{path}`` and ``{target}`` filled in the way core/shell.py fills a shell line: the line holds
  ``"$STOREVAL_PATH"``, the value travels in that environment variable (never read as code), and a placeholder
  inside the command's own quotes, or inside code another program runs (``sh -c "…{path}"``), is refused.

The settings become factors of every cell (so the report draws figures against them), and what was done — the
commands, their exit status, how long bringing a system up took — is recorded with the run.

Two settings of a testbed system are storeval's own, not the system's (:data:`STATE_SETTINGS`): ``degraded`` —
``0`` healthy, ``N`` with N of its parts down, ``healing`` while it repairs (``storeval/degraded.py`` brings each
about) — and ``heal_fill``, how many bytes the repair of a ``healing`` cell has to make whole.
"""

from __future__ import annotations

import itertools
from typing import Any

from .shell import check_shell_line, env_name, env_of, fields, shell_line, shown

SYSTEM_KEYS = ("testbed", "use", "settings", "setup", "teardown")
DEGRADED, HEAL_FILL, HEALING = "degraded", "heal_fill", "healing"
STATE_SETTINGS = (DEGRADED, HEAL_FILL)  # a testbed system's state, set by storeval, never passed to the system
DEFAULT_HEAL_FILL = 256 * 1024 * 1024


def check_state_setting(name: str, value: Any) -> Any:
    """A value of ``degraded`` (a count ≥ 0, or ``healing``) or ``heal_fill`` (a size > 0, in bytes);
    ValueError saying what it must be."""
    from ..units import parse_size

    if name == DEGRADED:
        if value == HEALING:
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("must be a number of parts down (0 for healthy) or healing")
        return value
    try:
        size = parse_size(value)
    except (TypeError, ValueError):
        raise ValueError("must be a size such as 256MiB") from None
    if size <= 0:
        raise ValueError("must be a size above 0, such as 256MiB")
    return size


def system_options(settings: dict[str, Any]) -> dict[str, Any]:
    """The settings the system itself is started with (its state settings left out)."""
    return {k: v for k, v in settings.items() if k not in STATE_SETTINGS}


def combinations(settings: dict[str, Any]) -> list[dict[str, Any]]:
    """Every combination of the settings, a list value being swept, in the order written."""
    names = list(settings)
    values = [v if isinstance(v, list) else [v] for v in settings.values()]
    return [dict(zip(names, combo)) for combo in itertools.product(*values)]


def swept(settings: dict[str, Any]) -> list[str]:
    """The settings that take more than one value (the ones a reader compares across)."""
    return [k for k, v in settings.items() if isinstance(v, list) and len(v) > 1]


def identity(system: dict[str, Any] | None) -> tuple:
    """Cells whose targets share this run on one configured system: one bring-up, one teardown. Two testbed
    targets of the same kind and settings (Ceph's RGW and CephFS) share it."""
    if not system:
        return ()
    settings = tuple(sorted((k, repr(v)) for k, v in system.get("settings", {}).items()))
    commands = (tuple(system.get("setup", ())), tuple(system.get("teardown", ())))  # targets differing in them
    where = ("testbed", system["testbed"]) if system.get("testbed") else ("commands", system.get("target", ""))
    return (*where, settings, *commands)


def check_command(command: str, names: list[str]) -> None:
    """KeyError (the name) for a placeholder that is not one of ``names``; ValueError (why) for a template that
    is not one, or whose values could be read as code (core/shell.py)."""
    used = [name for _, name in fields(command) if name is not None]
    for name in used:
        if name not in names:
            raise KeyError(name)
    taken: dict[str, str] = {}
    for name in dict.fromkeys(used):
        other = taken.setdefault(env_name(name), name)
        if other != name:
            raise ValueError(f"{{{other}}} and {{{name}}} would both travel as ${env_name(name)}; rename a setting")
    check_shell_line(command)


def fill(command: str, values: dict[str, Any]) -> str:
    """``command`` as a person reads it, each value shell-quoted in place (for events and messages; what runs
    is :func:`command_argv`); KeyError for a placeholder that is not a value."""
    for _, name in fields(command):
        if name is not None and name not in values:
            raise KeyError(name)
    return shown(command, values)


def command_argv(command: str, values: dict[str, Any]) -> list[str]:
    """What runs ``command``: ``env STOREVAL_NAME=VALUE … /bin/sh -c LINE``, the line naming each value by its
    variable, so that no value is ever read as shell code (the watchdog runs the same list)."""
    used = {name for _, name in fields(command) if name is not None}
    env = env_of({k: v for k, v in values.items() if k in used})
    return ["env", *(f"{k}={v}" for k, v in env.items()), "/bin/sh", "-c", shell_line(command)]


def label(settings: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in settings.items())
