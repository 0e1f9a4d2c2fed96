"""Study -> ordered list of cells.

A cell is one target x one workload x one value of every factor x one
repetition. Repetitions are the outer loop, so the repetitions of one
configuration are spread over the run instead of back to back: a slow drift of
the system (cache warming, a neighbour's job) then shows as spread between
repetitions instead of hiding inside one configuration.

A target whose system storeval configures (core/system.py: a testbed size, a
setup command) is the exception one level up: each combination of its settings
is a block of cells of its own — brought up once, measured with repetitions as
outer loop inside the block, then taken down — and targets that share one
configured system (same testbed kind and settings) share the block.

Link settings of the emulated network (core/network.py) are factors like a workload's parameters: changing one
between cells costs nothing. With client groups, a configuration's cells are the combinations of the groups'
counts, each cell carrying its groups in rank order. A workload whose parameters fix its client count
(``Workload.fixed_clients``: a replay's one client per traced stream) runs at that count only.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .core.cell import Cell, TargetSpec
from .core.network import cell_groups, group_factors
from .core.system import combinations, identity, swept
from .spec import Study
from .errors import InputError
from .redact import visible
from .workloads import WORKLOADS, Params, Workload, make_workload, workload_class


def _variants(target: TargetSpec) -> list[tuple[TargetSpec, dict]]:
    """The target once per combination of its system settings (``system["settings"]`` then holds one value
    each), with the swept settings to add to the cells' factors (all of them stay in the target's system)."""
    if not target.system:
        return [(target, {})]
    varied = swept(target.system["settings"])  # a setting with one value is the system's, not a factor
    out = []
    for combo in combinations(target.system["settings"]):
        out.append((dataclasses.replace(target, system={**target.system, "settings": combo}),
                    {k: v for k, v in combo.items() if k in varied}))
    return out


def _fixed_clients(wl, k: int, combo: Params, memo: dict[tuple[str, int], int | None]) -> int | None:
    """The client count workload ``wl``'s combination ``k`` fixes, worked out once per combination (not once per
    target too), and without making the workload where its class leaves the count to the study: a plan of
    100,000 cells is made in a moment."""
    key = (wl.name, k)
    if key not in memo:
        cls = workload_class(wl.kind)
        memo[key] = None if cls.fixed_clients is Workload.fixed_clients else make_workload(wl.kind, combo).fixed_clients()
    return memo[key]


def plan(study: Study) -> list[Cell]:
    blocks: dict[tuple, list[tuple[TargetSpec, dict]]] = {}  # configured system -> its targets; () = plain ones
    for target in study.targets.values():
        for variant, settings in _variants(target):
            blocks.setdefault(identity(variant.system), []).append((variant, settings))
    # each combination of the swept link settings: the links are changed between cells, nothing is restarted
    networks: list[tuple[dict | None, dict]] = [(None, {})]
    if study.network is not None:
        networks = [({"hosts": dict(study.network.hosts), "links": links}, chosen)
                    for links, chosen in study.network.combinations()]
    cells: list[Cell] = []
    config = 0
    fixed_memo: dict[tuple[str, int], int | None] = {}
    for targets in blocks.values():
        configs = []
        for target, settings in targets:
            for wl in study.workloads.values():
                for k, combo in enumerate(wl.combos):
                    if not wl.runs_on(target.name, combo):  # its targets: list, or the other end it names
                        continue
                    fixed = _fixed_clients(wl, k, combo, fixed_memo)
                    if fixed is not None and study.groups:
                        raise InputError(f"workloads.{visible(wl.name)}: its parameters fix the number of clients "
                                         f"({fixed}), so it cannot run with client groups; remove clients: groups or "
                                         "run it in a study of its own")
                    for network, link_factors in networks:
                        factors = {**settings, **wl.swept[k], **link_factors}
                        for clients in ([fixed] if fixed is not None else study.client_combinations()):
                            if isinstance(clients, dict):  # client groups: one count of each
                                groups, n = cell_groups(study.groups, clients), sum(clients.values())
                                more = {"clients": n, **group_factors(clients)}
                            else:
                                groups, n, more = (), clients, {"clients": clients}
                            configs.append((config, target, wl, combo, {**factors, **more}, n, groups, network))
                            config += 1
        for rep in range(study.repetitions):
            for number, target, wl, combo, factors, n, groups, network in configs:
                runs = set(WORKLOADS[wl.kind].phases_of(combo))
                faults = tuple(f for f in study.faults if f.workload in (None, wl.name)
                               and f.target in (None, target.name) and f.phase in runs)
                cells.append(Cell(index=len(cells), config=number, target=target, workload=wl.name, kind=wl.kind,
                                  params=combo, factors=factors, clients=n, repetition=rep,
                                  phase_timeout=study.phase_timeout, faults=faults, groups=groups,
                                  network=network))
    return cells


def check_placement(study: Study, engine: Any) -> None:
    """The study's rules on where its clients run, for the engine that will run them (``engine``: the MPI engine,
    or None for local processes): one line naming the setting and the fix when they cannot hold."""
    from .units import plural

    if study.network is not None and os.geteuid() != 0:
        raise InputError("network: emulated hosts and links are network namespaces, which need root: run storeval "
                         "as root (or drop network: and the groups' host:)")
    groups = list((study.groups or {}).values())
    most = max(study.clients)
    if engine is not None:
        if most > engine.capacity():
            per = f" with at most {study.clients_per_host} per host" if study.clients_per_host else ""
            raise InputError(f"clients {most}: mpiexec started {plural(engine.size, 'rank')}, room for "
                             f"{plural(engine.capacity(), 'client')}{per} (start more ranks or lower --clients)")
        placed = next((g for g in groups if g.host), None)
        if placed is not None:
            raise InputError(f"clients.{placed.name}.host: emulated hosts are this machine's network namespaces, for "
                             "local clients; under mpiexec give the group hosts: [real host names] or ranks: 0-3")
        return
    real = next((g for g in groups if g.hosts or g.ranks), None)
    if real is not None:
        raise InputError(f"clients.{real.name}.{'hosts' if real.hosts else 'ranks'}: real hosts and ranks are for "
                         "the MPI engine (run under mpiexec); locally, place the group on an emulated host with "
                         "host: NAME")
    if study.clients_per_host is not None and most > study.clients_per_host:
        raise InputError(f"clients {most}: without mpiexec every client runs on this host, and "
                         f"clients_per_host is {study.clients_per_host} (lower --clients, or run under mpiexec "
                         "across hosts)")
