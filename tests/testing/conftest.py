"""Fixtures of the testing kit's tests: the example third-party backend ``rlprof-pyspy``, installed
the way a user installs a plugin."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PYSPY_DIST = ROOT / "examples" / "rlprof-pyspy"


@pytest.fixture(scope="session")
def pyspy_site(tmp_path_factory) -> Path:
    """``rlprof-pyspy`` pip-installed into a private directory (real entry points, kept out of the venv)."""
    if shutil.which("py-spy", path=str(Path(sys.executable).parent)) is None and shutil.which("py-spy") is None:
        pytest.skip("py-spy is not installed (scripts/setup.sh installs it)")
    target = tmp_path_factory.mktemp("pyspy-site")
    source = tmp_path_factory.mktemp("pyspy-source") / "rlprof-pyspy"
    shutil.copytree(PYSPY_DIST, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(source)], check=True)
    return target


@pytest.fixture
def pyspy_backend(pyspy_site, monkeypatch) -> Path:
    """Makes ``pyspy`` discoverable through ``importlib.metadata`` for one test; returns its site directory."""
    monkeypatch.syspath_prepend(str(pyspy_site))
    importlib.invalidate_caches()
    for name in list(sys.modules):
        if name.startswith("rlprof_pyspy"):
            del sys.modules[name]
    return pyspy_site
