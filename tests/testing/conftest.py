"""Fixtures of the testing kit's tests: the example third-party backend ``rlprof-pyspy``, installed
the way a user installs a plugin."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from installing import discoverable, private_site  # tests/installing.py

ROOT = Path(__file__).resolve().parents[2]
PYSPY_DIST = ROOT / "examples" / "rlprof-pyspy"


@pytest.fixture(scope="session")
def pyspy_site(tmp_path_factory) -> Path:
    """``rlprof-pyspy`` pip-installed into a private directory (real entry points, kept out of the venv)."""
    if shutil.which("py-spy", path=str(Path(sys.executable).parent)) is None and shutil.which("py-spy") is None:
        pytest.skip("py-spy is not installed (scripts/setup.sh installs it)")
    return private_site(tmp_path_factory, PYSPY_DIST, "pyspy")


@pytest.fixture
def pyspy_backend(pyspy_site, monkeypatch) -> Path:
    """Makes ``pyspy`` discoverable through ``importlib.metadata`` for one test; returns its site directory."""
    return discoverable(pyspy_site, monkeypatch, "rlprof_pyspy")
