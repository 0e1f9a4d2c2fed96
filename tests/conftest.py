"""Fixtures shared by the tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def target(tmp_path: Path) -> Path:
    """An empty directory to use as a file:// target."""
    d = tmp_path / "target"
    d.mkdir()
    return d
