"""A testbed system's state as a swept setting: healthy, N parts down, or healing (issue 35.2).

``degraded: [0, 1, healing]`` on a testbed target (core/system.py's state settings) runs the block's cells on the
system in each state, so the tables put the healthy, degraded and healing rates side by side:

* ``N`` — once the system is up, its last N parts (the handles of ``Server.fault_nodes``: bricks, OSDs,
  datanodes, data servers, MinIO nodes) are killed (SIGKILL, their data kept) and stay down through the block;
  a system that heals around a lost part (HDFS) is first waited for until it declares them lost (the reading's
  ``lost``): until then its NameNode still hands the dead datanodes to writers.
  After it they are started again; a system the run did not start is then waited for until it is whole.
* ``healing`` — before each cell the system is made to repair: once it is whole (``Server.healing``: no more
  pending than its first reading, nothing down), its last part is killed and ``heal_fill`` bytes are written
  through the cell's own target. A system that heals a part once it is back (GlusterFS, Ceph:
  ``Server.heals_when == "back"``) gets the part back; one that heals around a lost part (HDFS: ``"lost"``) has
  the fill written before the kill and the part stays down. The cell starts once the system says it is short.
  During the cell the system's word is read once a second; a cell that ended after the system was whole again
  says how much of it ran while the system healed.

Every cell records what the system said at its start and end (an event ``system-state``); a state the system
never reached is a one-line failure of the cell (or of the block), never a healthy figure labelled degraded.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .core.system import DEFAULT_HEAL_FILL, DEGRADED, HEAL_FILL, HEALING
from .errors import StorevalError, one_line
from .units import format_size

WAIT_S = 600.0  # for a system to be whole before a healing cell, or to say it is short after the kill
POLL_S = 1.0  # between two readings of the system's own word
FILL_FILE = 4 * 1024 * 1024  # bytes per file of the fill
MAX_SAMPLES = 3600  # readings kept per cell (an hour at one a second)


def _short(reading: dict[str, Any], baseline: int, lost: bool) -> bool:
    """The system says it has something to repair (a part down counts, except where the system heals around a
    part it declared lost: that part stays down once it is healed)."""
    return int(reading.get("pending") or 0) > baseline or (not lost and bool(reading.get("down")))


@dataclass
class _Watch:
    """The system's word once a second while a cell runs (a thread of its own)."""

    read: Callable[[], dict[str, Any] | None]
    baseline: int
    lost: bool
    samples: list[list[Any]] = field(default_factory=list)
    whole_after_s: float | None = None  # the first reading while the cell ran that said it was whole
    whole_at_end: bool | None = None  # what the reading as the cell ended said
    errors: int = 0
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="storeval-degraded-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            self._sample(final=False)
            if self._stop.wait(POLL_S):
                return

    def _sample(self, final: bool) -> None:
        try:
            reading = self.read()
        except Exception:  # noqa: BLE001 - a reading that failed is counted, the watch goes on
            self.errors += 1
            return
        t = round(time.monotonic() - self._t0, 3)
        if reading is None:
            return
        self.first = self.first or reading
        self.last = reading
        if len(self.samples) < MAX_SAMPLES:
            self.samples.append([t, int(reading.get("pending") or 0), len(reading.get("down") or [])])
        whole = not _short(reading, self.baseline, self.lost)
        if final:
            self.whole_at_end = whole
        elif whole and self.whole_after_s is None:
            self.whole_after_s = t

    def stop(self) -> float:
        """Stop watching, with a last reading as the cell ends; the seconds the cell ran."""
        seconds = round(time.monotonic() - self._t0, 3)
        self._stop.set()
        self._thread.join(30)
        self._sample(final=True)
        return seconds


def _moved(source: Callable[[], dict[str, Any] | None], first: dict[str, Any] | None,
           last: dict[str, Any] | None, healed: bool) -> int | None:
    """Bytes the system's servers wrote between two readings (their own counters), where it counts them; once the
    system ``healed`` in the cell, read until they stand still where it serves them from a cache (faults.py's
    ``bytes_settled``: HDFS's JMX) — while it still heals they would go on growing with repair after the cell, so
    the last reading stands. None without two readings."""
    if first is None or last is None or first is last:
        return None
    if not isinstance(first.get("bytes"), dict) or not isinstance(last.get("bytes"), dict):
        return None
    from .faults import bytes_settled

    start = {k: float(v) for k, v in first["bytes"].items()}
    return int(sum(max(0.0, v) for v in bytes_settled(source, last if healed else {**last, "bytes_still_s": 0},
                                                       start).values()))


class Degraded:
    """The state one block's system is kept in (see the module docstring); made by :meth:`of` for a system whose
    settings ask for one."""

    def __init__(self, testbed_dir: str, kind: str, value: int | str, fill: int, heals_when: str,
                 log: Callable[[str], None]) -> None:
        self.testbed_dir, self.kind, self.value, self.fill = testbed_dir, kind, value, fill
        self.lost = heals_when == "lost"
        self.log = log
        self.down: list[str] = []  # handles killed and not started again
        self.baseline = 0  # what the system had pending when healthy (a volume may hold entries of its own)
        self.watch: _Watch | None = None
        self.fill_paths: list[str] = []
        self.fill_dir: str | None = None
        self.driver: Any = None
        self._buf: bytearray | None = None
        self._asked: str | None = None  # the part the system's word is read through

    @classmethod
    def of(cls, system: dict[str, Any], testbed_dir: str | None, log: Callable[[str], None]) -> Degraded | None:
        settings = system.get("settings") or {}
        value = settings.get(DEGRADED, 0)
        if not system.get("testbed") or value == 0 or testbed_dir is None:
            return None
        from .testbed import server_class
        from .units import parse_size

        kind = system["testbed"]
        fill = parse_size(settings.get(HEAL_FILL, DEFAULT_HEAL_FILL))
        return cls(testbed_dir, kind, value, fill, server_class(kind).heals_when, log)

    # -- the system's parts and word ---------------------------------------------------------------------
    def parts(self) -> list[str]:
        """The handles of the system's parts a kill takes down alone, in the system's order."""
        from .testbed.faults import fault_handles

        return [h.name for h in fault_handles(self.testbed_dir).values()
                if h.kind == self.kind and h.name.startswith(f"{self.kind}.") and "kill" in h.actions]

    def reading(self) -> dict[str, Any] | None:
        """What the system says of its repair now, asked through its first part (found once: the handles are
        the system's for its whole life)."""
        from .testbed.faults import healing

        if self._asked is None:
            parts = self.parts()
            if not parts:
                return None
            self._asked = parts[0]
        return healing(self.testbed_dir, self._asked)

    def _act(self, handle: str, action: str) -> str:
        from .testbed.faults import act

        said = act(self.testbed_dir, handle, action)
        self.log(f"degraded={self.value}: {said}")
        return said

    # -- the block -----------------------------------------------------------------------------------------
    def enter(self) -> list[dict[str, Any]]:
        """Once the system is up: N parts killed, or (healing) the system's first word read. StorevalError (one
        line) when the system cannot be put in that state."""
        from .testbed.base import TestbedError

        try:
            parts = self.parts()
            if self.value == HEALING:
                first = self.reading() if parts else None
                if first is None:
                    raise StorevalError(f"degraded: healing: the {self.kind} testbed reports no repair to follow (it "
                                        "keeps one copy of its data, or does not say what it heals); degraded: N "
                                        "still runs it with N parts down")
                self.baseline = int(first.get("pending") or 0)
                return [self._event(f"{self.kind}: healing before each cell (its last part "
                                    f"{parts[-1]} killed, {format_size(self.fill)} written, "
                                    f"{'the part back' if not self.lost else 'the part left down'})",
                                    {"parts": parts, "pending_before": self.baseline})]
            n = int(self.value)
            if n >= len(parts):
                raise StorevalError(f"degraded: {n} needs more than {n} parts of the {self.kind} testbed "
                                    f"(it has {len(parts)}: {', '.join(parts) or 'none'}); lower degraded or raise "
                                    "its servers")
            said = []
            for handle in parts[-n:]:
                said.append(self._act(handle, "kill"))
                self.down.append(handle)
            if self.lost:  # until it declares them lost it still hands them to clients (HDFS: a write pipeline)
                said.append(f"declared lost after {self._await(lambda r: int(r.get('lost') or 0) >= n, 'rid of them')} s")
            reading = self._try_reading()
            return [self._event(f"{self.kind}: {n} of {len(parts)} parts down for the block ({', '.join(self.down)})",
                                {"parts": parts, "down": list(self.down), "said": said, "system_says": reading})]
        except TestbedError as e:
            raise StorevalError(f"degraded: {self.value}: {one_line(e)}") from None

    def leave(self, stopping: bool) -> list[dict[str, Any]]:
        """After the block: the parts killed started again — unless the system is about to be stopped — and a
        system the run keeps waited for until whole. Never raises: what fails is a warning event."""
        events: list[dict[str, Any]] = []
        if stopping:
            return events
        try:
            for handle in list(self.down):
                self._act(handle, "start")
                self.down.remove(handle)
            waited = self._await(lambda r: not _short(r, self.baseline, False), "whole again")
            events.append(self._event(f"{self.kind}: parts started again, whole after {waited:g} s", {}))
        except Exception as e:  # noqa: BLE001 - the results come first; the message says what stays
            events.append({"kind": "warning", "message": f"degraded={self.value}: could not restore the {self.kind} "
                                                         f"testbed: {one_line(e)} (`storeval testbed status --dir "
                                                         f"{self.testbed_dir}` says what is down)"})
        return events

    # -- each cell ---------------------------------------------------------------------------------------
    def before_cell(self, driver: Any, where: str) -> list[dict[str, Any]]:
        """Right before the cell's clients start: the healing state made anew (see the module docstring) and the
        watch begun. StorevalError (one line) when the system never got there: the cell fails."""
        from .testbed.base import TestbedError

        self.driver = driver
        try:
            if self.value != HEALING:
                self.watch = _Watch(self.reading, self.baseline, self.lost)
                return []
            for handle in list(self.down):  # the last cell's part, left down (HDFS): back before the next heal
                self._act(handle, "start")
                self.down.remove(handle)
            whole = self._await(lambda r: not _short(r, self.baseline, False), "whole before the cell")
            part = self.parts()[-1]
            began = time.monotonic()
            if self.lost:
                self._write_fill(where)
                self._act(part, "kill")
                self.down.append(part)
            else:
                self._act(part, "kill")
                self.down.append(part)
                self._write_fill(where)
                self._act(part, "start")
                self.down.remove(part)
            short = self._await(lambda r: _short(r, self.baseline, self.lost), "short of what it missed")
            self.watch = _Watch(self.reading, self.baseline, self.lost)
            return [self._event(f"{self.kind}: {part} killed, {format_size(self.fill)} written"
                                f"{', the part back' if not self.lost else ''}; the system said it was short "
                                f"{short:g} s later",
                                {"part": part, "whole_before_s": whole, "fill_bytes": self.fill,
                                 "made_in_s": round(time.monotonic() - began, 3)})]
        except TestbedError as e:
            raise StorevalError(f"degraded: {self.value}: {one_line(e)}") from None

    def after_cell(self) -> list[dict[str, Any]]:
        """After the cell: what the system said while it ran (its first and last word, when it was whole again),
        the fill removed. Never raises."""
        events: list[dict[str, Any]] = []
        watch, self.watch = self.watch, None
        if watch is not None:
            seconds = watch.stop()
            detail = {"state": self.value, "down": list(self.down), "cell_s": seconds,
                      "pending_at_start": None if watch.first is None else int(watch.first.get("pending") or 0),
                      "pending_at_end": None if watch.last is None else int(watch.last.get("pending") or 0),
                      "down_at_end": None if watch.last is None else list(watch.last.get("down") or []),
                      "unit": (watch.last or {}).get("unit"), "source": (watch.last or {}).get("source"),
                      "samples": watch.samples, "errors": watch.errors}
            if self.value == HEALING:
                healing_s = watch.whole_after_s if watch.whole_after_s is not None else seconds
                detail.update(whole_after_s=watch.whole_after_s, whole_at_end=watch.whole_at_end,
                              healing_s=round(healing_s, 3),
                              healing_share=round(healing_s / seconds, 3) if seconds > 0 else None,
                              bytes_moved=_moved(self.reading, watch.first, watch.last,
                                                 watch.whole_after_s is not None or bool(watch.whole_at_end)))
                said = (f"whole again {watch.whole_after_s:g} s into the cell of {seconds:g} s"
                        if watch.whole_after_s is not None else f"healing through the whole cell ({seconds:g} s)"
                        + (", whole as it ended" if watch.whole_at_end else ""))
            else:
                said = (f"{len(self.down)} part(s) down; the system said {detail['pending_at_end']} "
                        f"{detail['unit'] or ''} pending at the end".replace("  ", " "))
            events.append(self._event(f"{self.kind} degraded={self.value}: {said}", detail, kind="system-state"))
            if self.value == HEALING and watch.whole_after_s is not None:
                events.append({"kind": "warning", "message": (
                    f"degraded=healing: the {self.kind} system was whole again {watch.whole_after_s:g} s into a cell "
                    f"of {seconds:g} s: only {detail['healing_share']:.0%} of its figures were measured while it "
                    f"healed (raise heal_fill above {format_size(self.fill)})")})
        events += self._remove_fill()
        self.driver = None
        return events

    # -- helpers ---------------------------------------------------------------------------------------------
    def _event(self, message: str, detail: dict[str, Any], kind: str = "system-degraded") -> dict[str, Any]:
        return {"kind": kind, "message": message, "detail": {"degraded": self.value, **detail}}

    def _try_reading(self) -> dict[str, Any] | None:
        try:
            return self.reading()
        except Exception:  # noqa: BLE001 - a figure of the state, not a reason to fail
            return None

    def _await(self, condition: Callable[[dict[str, Any]], bool], what: str) -> float:
        """Seconds until the system's word meets ``condition`` (read once a second); TestbedError after WAIT_S."""
        from .testbed.base import TestbedError

        t0 = time.monotonic()
        last = None
        while True:
            reading = self.reading()
            if reading is not None and condition(reading):
                return round(time.monotonic() - t0, 3)
            last = reading
            if time.monotonic() - t0 > WAIT_S:
                shown = "no reading" if last is None else (f"{last.get('pending')} {last.get('unit') or ''} pending, "
                                                            f"down: {', '.join(last.get('down') or []) or 'none'}")
                raise TestbedError(f"the {self.kind} system was not {what} within {WAIT_S:g} s ({shown})")
            time.sleep(POLL_S)

    def _write_fill(self, where: str) -> None:
        """``heal_fill`` bytes in files of FILL_FILE through the cell's own target, in a directory of the run's
        scratch (removed after the cell, and with the scratch should the run die)."""
        driver = self.driver
        if self._buf is None:
            self._buf = bytearray(os.urandom(FILL_FILE))  # incompressible: the repair moves every byte
        driver.ensure_dir(where)
        self.fill_dir = where
        left, k = self.fill, 0
        while left > 0:
            n = min(left, FILL_FILE)
            path = f"{where.rstrip('/')}/fill-{k:05d}"
            self.fill_paths.append(path)
            driver.put(path, memoryview(self._buf)[:n])
            left -= n
            k += 1

    def _remove_fill(self) -> list[dict[str, Any]]:
        driver, paths = self.driver, self.fill_paths
        self.fill_paths = []
        if driver is None or not paths:
            return []
        try:
            for path in paths:
                driver.remove_quietly(path)
            if self.fill_dir:
                driver.rmdir_quietly(self.fill_dir)
        except Exception as e:  # noqa: BLE001 - the scratch directory's own removal takes what stays
            return [{"kind": "warning", "message": f"degraded=healing: the fill could not be removed now "
                                                   f"({one_line(e)}); the run's clean-up removes it"}]
        return []

