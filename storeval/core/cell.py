"""A cell — one target × one workload × one value of every factor × one repetition — and the target it runs on.

These are the one shape of a cell every layer shares: the planner makes them, the engines run them, the runner
stores them, the watchdog rebuilds one from the state file of a run that died (:meth:`Cell.from_state`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .faultplan import Fault
from .network import LINK_KEYS, factor_text


@dataclass(frozen=True)
class TargetSpec:
    name: str
    url: str
    options: dict[str, Any] = field(default_factory=dict)
    limits: dict[str, float] = field(default_factory=dict)  # bytes/s (iops: ops/s), only those declared
    # a target whose system storeval configures between cells (core/system.py): a testbed it brings up at each
    # size, or a user's setup/teardown commands; its url is known once the system is up
    system: dict[str, Any] | None = None


def params_json(params: Any) -> dict[str, Any]:
    """A workload's parameters as JSON: a ``Params`` model dumped, a dict (already JSON) as it is."""
    return params if isinstance(params, dict) else params.model_dump(mode="json")


@dataclass(frozen=True)
class Cell:
    index: int
    config: int  # cells with the same config differ only by repetition
    target: TargetSpec
    workload: str
    kind: str
    # the workload's ``Params``, validated once by the spec and handed to the clients as is (core/job.py); a
    # dict only in a cell rebuilt from a state file or imported from a peer tool's output (``settings``: JSON)
    params: Any
    factors: dict[str, Any]
    clients: int
    repetition: int
    phase_timeout: float = 3600.0
    extra: dict[str, Any] = field(default_factory=dict)
    faults: tuple[Fault, ...] = ()  # the study's fault plan, as it applies to this cell
    # client groups in rank order ({"name", "count", "host"}; core/network.py), () when every client is alike
    groups: tuple[dict[str, Any], ...] = ()
    # the emulated network this cell runs on: {"hosts": {host: link or None}, "links": {link: settings now}}
    network: dict[str, Any] | None = None

    @property
    def settings(self) -> dict[str, Any]:
        """The parameters as JSON (stored with the cell, kept in the state file)."""
        return params_json(self.params)

    @property
    def label(self) -> str:
        shown = ", ".join(f"{k}={factor_text(k, v) if k in LINK_KEYS else v}" for k, v in self.factors.items()
                          if k != "clients" and not k.startswith("clients."))
        if self.groups:
            shown = ", ".join(x for x in (shown, " + ".join(f"{g['count']} {g['name']}" for g in self.groups)) if x)
        return f"{self.target.name} · {self.workload}{f' ({shown})' if shown else ''} · {self.clients} client{'s' if self.clients > 1 else ''}"

    def state(self, cell_dir: str | None) -> dict[str, Any]:
        """The cell as the run's state file keeps it (JSON), for the watchdog to clean up and record after it."""
        return {"index": self.index, "config": self.config, "target": self.target.name, "url": self.target.url,
                "options": self.target.options, **({"system": self.target.system} if self.target.system else {}), "workload": self.workload, "kind": self.kind, "params": self.settings,
                "factors": self.factors, "nclients": self.clients, "repetition": self.repetition,
                "cell_dir": cell_dir, "faults": [f.state() for f in self.faults],
                **({"groups": list(self.groups)} if self.groups else {}),
                **({"network": self.network} if self.network else {})}

    @classmethod
    def from_state(cls, d: dict[str, Any]) -> Cell:
        return cls(index=d["index"], config=d["config"], target=TargetSpec(d["target"], d["url"], d.get("options", {}),
                                                                system=d.get("system")),
                   workload=d["workload"], kind=d["kind"], params=d["params"], factors=d["factors"],
                   clients=d["nclients"], repetition=d["repetition"],
                   faults=tuple(Fault.from_state(f) for f in d.get("faults", ())),
                   groups=tuple(d.get("groups", ())), network=d.get("network"))
