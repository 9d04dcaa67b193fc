"""Shared fixtures of rlprof's own tests."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DIST = ROOT / "tests" / "fixtures" / "rlprof-test-backends"


@pytest.fixture(scope="session")
def test_backends_site(tmp_path_factory) -> Path:
    """``rlprof-test-backends`` pip-installed into a private directory (a real distribution with real
    entry points, kept out of the venv so users' ``rlprof backends`` never lists it)."""
    target = tmp_path_factory.mktemp("test-backends-site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--target", str(target), str(FIXTURE_DIST)],
        check=True,
    )
    return target


@pytest.fixture
def test_backends(test_backends_site, monkeypatch) -> Path:
    """Makes the test backends discoverable through ``importlib.metadata`` for one test."""
    monkeypatch.syspath_prepend(str(test_backends_site))
    importlib.invalidate_caches()
    for name in list(sys.modules):
        if name.startswith("rlprof_test_backends"):
            del sys.modules[name]
    return test_backends_site


@pytest.fixture
def save_path(tmp_path) -> Path:
    return tmp_path / "profile"


@pytest.fixture(scope="session")
def verl_generated_config(tmp_path_factory) -> Path:
    """verl 0.9.1's own composed trainer config, ``verl/trainer/config/_generated_ppo_trainer.yaml``."""
    import zipfile

    from rlprof.testing.downloads import cached_wheel

    wheel = cached_wheel("verl==0.9.1", "verl-0.9.1-")
    target = tmp_path_factory.mktemp("verl") / "_generated_ppo_trainer.yaml"
    with zipfile.ZipFile(wheel) as zf:
        target.write_bytes(zf.read("verl/trainer/config/_generated_ppo_trainer.yaml"))
    return target
