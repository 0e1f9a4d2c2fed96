"""One registry (issue 31): workloads, drivers and testbed systems are found through entry points only —
storeval's own are the ones its pyproject.toml declares, an outside package adds its own the same way, a class
of the wrong sort is refused in one line, and a source tree run without its metadata says how to install it."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib

import pytest

from storeval.drivers import DRIVERS
from storeval.plugins import GROUPS, Plugin, own_entry_points
from storeval.testbed import LISTED, SERVERS
from storeval.workloads import WORKLOADS

from .helpers import REPO, storeval
from .test_plugins import make_package

REGISTRIES = {"workloads": WORKLOADS, "drivers": DRIVERS, "testbed": SERVERS}


def declared(kind: str) -> dict[str, str]:
    """The entry points of ``kind`` that storeval's pyproject.toml declares, in its order."""
    with open(REPO / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["entry-points"][GROUPS[kind]]


@pytest.mark.parametrize("kind", REGISTRIES)
def test_every_declared_entry_point_loads_and_passes_its_check(kind):
    registry = REGISTRIES[kind]
    for name, value in declared(kind).items():
        plugin = Plugin(name, value, "storeval")
        obj = plugin.load()
        registry.check(obj, plugin)  # raises PluginError if it is not what the group holds
        assert registry[name] is obj, name
    assert registry.refused == {}


@pytest.mark.parametrize("kind", REGISTRIES)
def test_each_registry_lists_exactly_the_declared_entry_points(kind):
    # the installed metadata is pyproject's (an install older than pyproject would not be), and the registry lists
    # those and nothing else (the drivers once lacked nfs, which pyproject registered)
    assert own_entry_points(kind) == declared(kind)
    assert sorted(REGISTRIES[kind]) == sorted(declared(kind))
    assert set(REGISTRIES[kind].packages.values()) == {"storeval"}


def test_testbed_systems_are_listed_in_storeval_s_order():
    assert tuple(SERVERS) == LISTED == tuple(declared("testbed"))


# an outside package's testbed system, and a class in the testbed group that is no Server
SYSTEMS = '''
from storeval.testbed.base import Server


class MemStore(Server):
    """Never started here: only found, and its settings checked."""

    kind = "memstore"

    def install(self):
        pass

    def start(self):
        pass

    def ready(self):
        return True

    def targets(self):
        return {}


class NotAServer:
    kind = "notbed"
'''

SYSTEM_ENTRY_POINTS = '''
[storeval.testbed]
memstore = touchplug.workload:MemStore
notbed = touchplug.workload:NotAServer
'''

REFUSED = ("warning: testbed system 'notbed' of package touchplug is not a storeval.testbed.base.Server subclass; "
           "it is left out")


@pytest.fixture(scope="module")
def outside(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("registry")
    return tmp, {"PYTHONPATH": str(make_package(tmp / "site", SYSTEMS, SYSTEM_ENTRY_POINTS))}


def test_an_outside_package_adds_a_testbed_system_through_its_entry_point_alone(outside):
    tmp, env = outside
    r = storeval("testbed", "up", "lustre", cwd=tmp, env=env)
    assert r.rc == 2
    assert r.err_lines == [REFUSED, "error: testbed up lustre: unknown system (choose from minio, minio-ec, xrootd, "
                                    "xcache, xrootd-tpc, hdfs, glusterfs, ceph, nfs, slurm, memstore)"]
    # its class is the one asked: its own settings check answers (nothing is started)
    r = storeval("testbed", "up", "memstore", "--servers", "3", cwd=tmp, env=env)
    assert r.rc == 2
    assert r.err_lines == [REFUSED, "error: testbed memstore: no setting 'servers' (it takes: none)"]
    assert sorted(os.listdir(tmp)) == ["site"]  # no testbed directory, no targets file


def test_a_class_that_is_no_server_is_refused_in_one_line(outside):
    tmp, env = outside
    code = ("from storeval.testbed import server_class\n"
            "try:\n    server_class('notbed')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp, capture_output=True, text=True, timeout=300,
                       env={**os.environ, **env})
    assert r.returncode == 0, r.stderr
    assert r.stderr.splitlines() == [REFUSED]
    assert r.stdout.splitlines() == ["TestbedError testbed system 'notbed' cannot be used: " + REFUSED[9:]]


def test_a_source_tree_without_its_metadata_says_how_to_install_it(tmp_path):
    """storeval imported from its source tree, its dependencies from the environment, but no metadata of its own
    (every entry of site-packages but storeval's, no .pth files run): one line naming the fix, exit 2."""
    site = next(p for p in sys.path if p.endswith("site-packages") and os.path.isdir(os.path.join(p, "numpy")))
    (tmp_path / "site").mkdir()
    for entry in os.listdir(site):
        if "storeval" not in entry.lower() and not entry.endswith(".pth"):
            os.symlink(os.path.join(site, entry), tmp_path / "site" / entry)
    (tmp_path / "src").mkdir()
    os.symlink(REPO / "storeval", tmp_path / "src" / "storeval")
    code = (f"import sys; sys.path[:0] = [{str(tmp_path / 'src')!r}, {str(tmp_path / 'site')!r}]\n"
            "from storeval.cli import main\n"
            "main(['run', '--target', 'null://', '--workload', 'bandwidth'])\n")
    r = subprocess.run([sys.executable, "-S", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "error: storeval's own workloads are not registered: its package metadata is missing (storeval is run from "
        "a source tree that was never installed); install it: `pip install -e .` in its source tree, or "
        "`pip install storeval`"]
    assert sorted(os.listdir(tmp_path)) == ["site", "src"]  # nothing made: no results, no scratch


# an outside package that adds all three at once: a testbed system serving the plug-in driver's targets, run by a
# study with the plug-in workload; storeval is not edited and knows none of them by name
DIRBED = '''
import sys
from pathlib import Path

from storeval.testbed.base import Server


class DirBed(Server):
    """A directory served by a process of its own: the testbed starts it, hands out a dir:// target, stops it."""

    kind = "dirbed"
    target_schemes = {"dirbed": "dir"}

    @property
    def data(self):
        return Path(self.root) / "data"

    def install(self):
        pass

    def start(self):
        self.make_root()
        self.mkdir(self.data)
        log = Path(self.root) / "server.log"
        self._spawn([sys.executable, "-c", "import time; time.sleep(3600)", MARK], name="dirbed", log=log)

    def ready(self):
        return all(p.alive() for p in self.state.procs) and bool(self.state.procs)

    def targets(self):
        return {"dirbed": {"url": f"dir://{self.data}"}}
'''

EVERYTHING_ENTRY_POINTS = '''
[storeval.drivers]
dir = touchplug.driver:DirDriver

[storeval.workloads]
touch = touchplug.workload:Touch

[storeval.testbed]
dirbed = touchplug.workload:DirBed
'''


def test_an_outside_testbed_system_driver_and_workload_run_one_study_together(tmp_path):
    import json
    import psutil
    import uuid

    from .test_plugins import WORKLOAD

    mark = f"dirbed-{uuid.uuid4().hex}"
    site = make_package(tmp_path / "site", WORKLOAD + f"\nMARK = {mark!r}\n" + DIRBED, EVERYTHING_ENTRY_POINTS)
    study = tmp_path / "study.yaml"
    study.write_text("targets:\n  bed:\n    testbed: dirbed\n"
                     "workloads:\n  t:\n    touch:\n      files: 7\n      size: 1000\n"
                     "clients: [2]\nrepetitions: 1\n")
    r = storeval("run", str(study), "--results", "res", "--json", "out.json", "--no-html", "-q", cwd=tmp_path,
                 env={"PYTHONPATH": str(site)})
    assert r.rc == 0, r.err
    doc = json.loads((tmp_path / "out.json").read_text())
    (cell,) = doc["cells"]
    (phase,) = cell["phases"]
    assert cell["status"] == "ok" and phase["phase"] == "touch"
    assert phase["ops"] == 2 * 7 and phase["bytes"] == 2 * 7 * 1000 and phase["touched"] == 14
    assert doc["environment"]["targets"]["bed"]["system"] == {"testbed": "dirbed", "use": "dirbed", "scheme": "dir",
                                                              "settings": {}, "setup": [], "teardown": []}
    # the system was brought up for the cell and taken down after it: its process is gone
    assert [e["kind"] for e in doc["events"]] == ["system-up", "system-down"]
    assert doc["events"][1]["message"] == "dirbed stopped"
    assert not [p for p in psutil.process_iter(["cmdline"]) if mark in (p.info["cmdline"] or [])]
    assert sorted(os.listdir(tmp_path)) == ["out.json", "res", "site", "study.yaml"]
