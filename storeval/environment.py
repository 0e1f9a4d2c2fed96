"""The environment record stored with every run: the machine, the software, the targets.

Numbers without their context cannot be compared; this is the context. Only
facts are recorded, never credentials: targets are described by URL (any
credential masked, see redact.py) and driver options hold names of environment
variables, not their values.
"""

from __future__ import annotations

import os
import sys
from datetime import datetime, timezone
from importlib import metadata
from typing import Any

from . import __version__
from .core.process import host_facts

# what a batch system said about the job the run is part of (Slurm's output environment variables)
SLURM_FACTS = {"SLURM_JOB_ID": "job_id", "SLURM_CLUSTER_NAME": "cluster", "SLURM_JOB_PARTITION": "partition",
               "SLURM_JOB_NODELIST": "nodes", "SLURM_JOB_NUM_NODES": "node_count",
               "SLURM_TASKS_PER_NODE": "tasks_per_node", "SLURM_NTASKS": "tasks", "SLURM_JOB_NAME": "job_name",
               "SLURM_SUBMIT_HOST": "submit_host"}
LIBRARIES = ("numpy", "duckdb", "pydantic", "typer", "rich", "psutil", "obstore", "hdfs-native", "xrootd", "uproot",
             "awkward", "mpi4py", "mpich", "plotly")


def library_versions() -> dict[str, str]:
    out = {}
    for name in LIBRARIES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def collect_environment(study: Any, command_line: str) -> dict[str, Any]:
    """Facts about this machine, the software and the targets of ``study``."""
    from .drivers import driver_class
    from .probes.topology import client_tunables, mount_of, target_path

    targets: dict[str, Any] = {}
    for name, t in study.targets.items():
        if not t.url:  # a testbed system brought up during the run: what it was is recorded then (systems.py)
            targets[name] = {"system": t.system}
            continue
        driver = driver_class(t.url)  # what each target is, its driver says: no branch per scheme here
        info: dict[str, Any] = {**driver.describe_target(t.url, t.options), "path": target_path(t.url, t.options)}
        carrier = driver.carrier(t.url, t.options)
        if carrier.path is not None:
            info["mount"] = mount_of(carrier.path)
            tunables = client_tunables(carrier.path, info["mount"])
            if tunables:
                info["client_tunables"] = tunables
        if t.limits:
            info["limits"] = t.limits
        targets[name] = info
    return {
        **host_facts(),
        "python": sys.version.split()[0],
        "storeval_version": __version__,
        "libraries": library_versions(),
        "command_line": command_line,
        "start_time": datetime.now(timezone.utc).isoformat(),
        "study_hash": study.hash(),
        "targets": targets,
        **({"batch": batch} if (batch := batch_job()) else {}),
    }


def batch_job() -> dict[str, Any] | None:
    """The Slurm job this process runs in (job id, nodes, tasks per node …), None outside one."""
    if "SLURM_JOB_ID" not in os.environ:
        return None
    return {"system": "slurm", **{key: os.environ[name] for name, key in SLURM_FACTS.items() if name in os.environ}}
