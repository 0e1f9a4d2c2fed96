"""The native engines (native/ → storeval._native), built by setuptools-rust where a Rust toolchain is there; and
the HTML report's partial plotly.js bundle, fetched from the npm registry while installing (storeval/report/assets).

Everything else about the package is in pyproject.toml. The extension is optional for users (without cargo,
storeval runs its Python loop and says so), but not for the test suite: with STOREVAL_NATIVE=required in the
environment (the README's test command sets it) a failed Rust build fails the install, loudly. The bundle is
optional too (offline, the report embeds the full plotly.js and says so); the test suite requires it
(tests/test_report_size.py).
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools_rust import Binding, RustExtension

REQUIRED = os.environ.get("STOREVAL_NATIVE", "").strip().lower() == "required"
HERE = Path(__file__).resolve().parent
ASSETS = HERE / "storeval" / "report" / "assets"
PROBE = "from plotly.offline import get_plotlyjs_version as v; print(v())"


def _assets():
    """storeval/report/assets loaded by path: stdlib only, before storeval's dependencies are installed."""
    spec = importlib.util.spec_from_file_location("_storeval_assets", ASSETS / "__init__.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _plotly_js_version(assets):
    """The plotly.js of the plotly storeval will run with: the one already in the environment installed into
    (isolated python: its own site-packages, not the build's), else this build's (pyproject's build requires,
    resolved as the install's own dependency is)."""
    try:
        probe = subprocess.run([sys.executable, "-I", "-c", PROBE], capture_output=True, text=True, timeout=300)
        if probe.returncode == 0 and probe.stdout.strip():
            return probe.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return assets.plotly_version()


class BuildWithBundle(build_py):
    """build_py that first fetches the basic plotly.js bundle into the source tree (git-ignored; an editable
    install reads it there) and then copies it into the build (a wheel). Never fails the install."""

    def run(self):
        fetched = None
        try:
            assets = _assets()
            version = _plotly_js_version(assets)
            if version is None:
                print("storeval: plotly not found while building: the HTML report will embed the full plotly.js; "
                      "after installing run `python -m storeval.report.assets`", file=sys.stderr)
            else:
                fetched = assets.fetch(version, ASSETS)
                print(f"storeval: {assets.PACKAGE} {version} in {fetched}", file=sys.stderr)
        except Exception as e:  # offline, registry refused, hash mismatch: the report falls back and says so
            print(f"storeval: the HTML report's partial plotly.js bundle was not fetched ({e}): reports will embed "
                  "the full plotly.js; run `python -m storeval.report.assets` when online", file=sys.stderr)
        super().run()
        if fetched is not None and not getattr(self, "editable_mode", False):
            out = Path(self.build_lib) / "storeval" / "report" / "assets" / fetched.name
            if not out.exists():
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(fetched, out)


setup(cmdclass={"build_py": BuildWithBundle},
      rust_extensions=[RustExtension("storeval._native", path="native/Cargo.toml", binding=Binding.PyO3,
                                     optional=not REQUIRED, debug=False)])
