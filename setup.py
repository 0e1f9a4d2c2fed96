"""The native engines (native/ → storeval._native), built by setuptools-rust where a Rust toolchain is there.

Everything else about the package is in pyproject.toml. The extension is optional for users (without cargo,
storeval runs its Python loop and says so), but not for the test suite: with STOREVAL_NATIVE=required in the
environment (the README's test command sets it) a failed Rust build fails the install, loudly.
"""

import os

from setuptools import setup
from setuptools_rust import Binding, RustExtension

REQUIRED = os.environ.get("STOREVAL_NATIVE", "").strip().lower() == "required"

setup(rust_extensions=[RustExtension("storeval._native", path="native/Cargo.toml", binding=Binding.PyO3,
                                     optional=not REQUIRED, debug=False)])
