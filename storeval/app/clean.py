"""Clean up after dead runs: the scratch directories (``storeval-RUN/``) they left on targets, and the testbeds
they brought up (recorded in the results store). Two steps, so the caller can show and confirm in between:
:func:`survey` finds and measures what may go, :func:`remove` removes it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ..errors import InputError, StorevalError
from . import Say


@dataclass
class Found:
    """A scratch directory on a target: ``remove`` if it will be removed, else why it is kept."""

    target: Any  # core.cell.TargetSpec
    driver: Any
    dir: Any  # clean.RunDir
    remove: bool


@dataclass
class LeftTestbed:
    """A testbed directory a run that did not end on its own brought systems up in (its servers may still run);
    ``owned``: the run's own directory (else the study's ``testbed:``, which another run may use now)."""

    run_id: str
    status: str
    directory: str
    kinds: list[str]
    owned: bool


@dataclass
class Survey:
    """Target by target, in order: ``("dir", Found)``; ``("none", url)`` (no storeval scratch directory);
    ``("system", name)`` (a testbed system a run brings up and removes itself: nothing to clean);
    ``("unreachable", line)``. Then the dead runs' testbeds."""

    seen: list[tuple[str, Any]] = field(default_factory=list)
    testbeds: list[LeftTestbed] = field(default_factory=list)

    @property
    def found(self) -> list[Found]:
        return [f for kind, f in self.seen if kind == "dir"]

    @property
    def failed(self) -> bool:
        return any(kind == "unreachable" for kind, _ in self.seen)

    @property
    def chosen(self) -> list[Found]:
        return [f for f in self.found if f.remove]

    def close(self) -> None:
        for driver in {id(f.driver): f.driver for f in self.found}.values():
            try:
                driver.shutdown()
            except Exception:  # noqa: BLE001 - a driver that cannot say goodbye changes nothing cleaned
                pass


def survey(targets: list[str], study: str | None, results: str, *, force: bool, say: Say) -> Survey:
    """What dead runs left on the named targets (measured, where it will be removed) and which testbeds."""
    from ..clean import measure, scan
    from ..drivers import make_driver
    from ..errors import one_line

    out = Survey()
    for t in _targets(targets, study):
        if not t.url:
            out.seen.append(("system", t.name))
            continue
        driver = make_driver(t.url, t.options)
        try:
            driver.connect()
            dirs = scan(driver)
        except Exception as e:  # noqa: BLE001 - one unreachable target does not keep the others dirty
            out.seen.append(("unreachable", f"target {t.name} ({t.url}): {one_line(e)}"))
            continue
        if not dirs:
            out.seen.append(("none", t.url))
        for d in dirs:
            chosen = d.state == "dead" or (force and d.state == "unknown")
            if chosen:
                measure(driver, d)
            out.seen.append(("dir", Found(t, driver, d, chosen)))
    out.testbeds = _dead_runs_testbeds(results, say)
    return out


def remove(found: Found) -> tuple[bool, str]:
    """Remove one chosen directory: (gone, why not)."""
    from ..clean import remove_run_dir
    from ..errors import one_line

    try:
        gone = remove_run_dir(found.driver, found.dir)
    except Exception as e:  # noqa: BLE001
        return False, one_line(e)
    return gone, "" if gone else "something in it could not be removed"


def stop_testbed(left: LeftTestbed, say: Say) -> str | None:
    """Stop a dead run's own testbed; None, or the one line why it could not."""
    from ..testbed import Testbed, TestbedError

    try:
        Testbed(left.directory).down(log=say.info)
    except (TestbedError, StorevalError) as e:
        return str(e)
    return None


def _dead_runs_testbeds(results: str, say: Say) -> list[LeftTestbed]:
    """Every testbed directory a run that did not end on its own (interrupted, or its processes proven gone)
    brought systems up in and that is still there. The results store records each before its systems start; a
    run that ended took its own down."""
    from ..store import Store

    if not os.path.isfile(os.path.join(results, "storeval.duckdb")):
        return []
    try:
        runs = Store(results, create=False).testbeds()
    except StorevalError as e:
        say.warn(f"{results}: {e} (the testbeds of dead runs are not looked for)")
        return []
    return [LeftTestbed(t.run_id, t.status, d, kinds, owned) for t in runs if t.ended and t.status == "interrupted"
            for d, kinds, owned in t.dirs if os.path.isdir(d)]


def _targets(items: list[str], study: str | None) -> list:
    """The targets ``storeval clean`` names: URLs or paths, names of the study's targets, or study files."""
    from ..drivers import normalize_url
    from ..spec import make_target, read_yaml, targets_of

    def of_study(path: str) -> dict:
        raw = read_yaml(path)
        found = targets_of(raw) if isinstance(raw, dict) else {}  # like: and targets_from: as `run` reads them
        if not found:
            raise InputError(f"{path}: defines no targets (clean a URL instead: storeval clean file:///path)")
        return found

    defined = of_study(study) if study else {}
    if not items:
        if not defined:
            raise InputError("clean: name a target (a URL, a path, a study file, or --study FILE)")
        return _once(defined.values())
    out = []
    for item in items:
        if item in defined:
            out.append(defined[item])
        elif item.endswith((".yaml", ".yml")) and os.path.isfile(item):
            out += of_study(item).values()
        else:
            url = normalize_url(item)
            if url.startswith("file://") and "://" not in item and not os.path.isdir(item):
                raise InputError(f"clean {item}: no such directory" + (f" and not a target of {study}" if study else
                                                                       " (give a target URL or path)"))
            out.append(make_target(item, {"url": url}, f"clean {item}", f"clean {item}"))
    return _once(out)


def _once(targets) -> list:
    """Each place surveyed once: targets ``like:`` another (other settings, one server) share its URL."""
    seen: dict[str, Any] = {}
    for t in targets:
        seen.setdefault(t.url, t)
    return list(seen.values())
