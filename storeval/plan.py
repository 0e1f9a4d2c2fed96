"""Study -> ordered list of cells.

A cell is one target x one workload x one value of every factor x one
repetition. Repetitions are the outer loop, so the repetitions of one
configuration are spread over the run instead of back to back: a slow drift of
the system (cache warming, a neighbour's job) then shows as spread between
repetitions instead of hiding inside one configuration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .spec import Study, TargetSpec


@dataclass(frozen=True)
class Cell:
    index: int
    config: int  # cells with the same config differ only by repetition
    target: TargetSpec
    workload: str
    kind: str
    params: dict[str, Any]
    factors: dict[str, Any]
    clients: int
    repetition: int
    phase_timeout: float = 3600.0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label(self) -> str:
        shown = ", ".join(f"{k}={v}" for k, v in self.factors.items() if k != "clients")
        return f"{self.target.name} · {self.workload}{f' ({shown})' if shown else ''} · {self.clients} client{'s' if self.clients > 1 else ''}"


def plan(study: Study) -> list[Cell]:
    configs = []
    for target in study.targets.values():
        for wl in study.workloads.values():
            for combo in wl.combos:
                factors = {k: combo[k] for k in wl.sweeps}
                for n in study.clients:
                    configs.append((target, wl, combo, {**factors, "clients": n}, n))
    cells = []
    for rep in range(study.repetitions):
        for config, (target, wl, combo, factors, n) in enumerate(configs):
            cells.append(Cell(index=len(cells), config=config, target=target, workload=wl.name, kind=wl.kind,
                              params=combo, factors=factors, clients=n, repetition=rep,
                              phase_timeout=study.phase_timeout))
    return cells
