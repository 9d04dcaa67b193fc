"""Installing a distribution the way a user installs a plugin, for the tests: pip into a private
directory (real entry points, never the venv), then discoverable for one test. Used by
tests/conftest.py (the test backends) and tests/testing/conftest.py (the rlprof-pyspy example)."""

from __future__ import annotations

import importlib
import shutil
import subprocess
import sys
from pathlib import Path


def private_site(tmp_path_factory, dist: Path, name: str) -> Path:
    """``dist`` pip-installed into a private directory: a real distribution with real entry points, kept
    out of the venv so users' ``rlprof backends`` never lists it. Built from a copy of its sources
    (setuptools leaves ``build/`` beside what it builds)."""
    target = tmp_path_factory.mktemp(f"{name}-site")
    source = tmp_path_factory.mktemp(f"{name}-source") / dist.name
    shutil.copytree(dist, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target",
                    str(target), str(source)], check=True)
    return target


def discoverable(site: Path, monkeypatch, package: str) -> Path:
    """Makes what ``site`` holds discoverable through ``importlib.metadata`` for one test, with
    ``package`` imported afresh."""
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    for name in list(sys.modules):
        if name.startswith(package):
            del sys.modules[name]
    return site
