"""Study -> ordered list of cells.

A cell is one target x one workload x one value of every factor x one
repetition. Repetitions are the outer loop, so the repetitions of one
configuration are spread over the run instead of back to back: a slow drift of
the system (cache warming, a neighbour's job) then shows as spread between
repetitions instead of hiding inside one configuration.
"""

from __future__ import annotations

from .core.cell import Cell
from .spec import Study
from .workloads import WORKLOADS


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
            runs = set(combo.get("phases") or WORKLOADS[wl.kind].PHASES)
            faults = tuple(f for f in study.faults if f.workload in (None, wl.name) and f.target in (None, target.name)
                           and f.phase in runs)
            cells.append(Cell(index=len(cells), config=config, target=target, workload=wl.name, kind=wl.kind,
                              params=combo, factors=factors, clients=n, repetition=rep,
                              phase_timeout=study.phase_timeout, faults=faults))
    return cells
