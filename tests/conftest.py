"""Shared fixtures of rlprof's own tests."""

from __future__ import annotations

import importlib
import os
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


CACHE = Path(os.environ.get("RLPROF_TEST_CACHE", Path.home() / ".cache" / "rlprof-tests"))


def pip_download(requirement: str, filename_prefix: str) -> Path:
    """Download a wheel once (``pip download --no-deps``) into the test cache; skip if impossible."""
    CACHE.mkdir(parents=True, exist_ok=True)
    found = sorted(CACHE.glob(f"{filename_prefix}*.whl"))
    if not found:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", requirement, "-d", str(CACHE)],
                              capture_output=True, text=True)
        found = sorted(CACHE.glob(f"{filename_prefix}*.whl"))
        if not found:
            pytest.skip(f"cannot download {requirement}: {proc.stderr.strip()[-300:]}")
    return found[-1]


@pytest.fixture(scope="session")
def verl_generated_config(tmp_path_factory) -> Path:
    """verl 0.9.1's own composed trainer config, ``verl/trainer/config/_generated_ppo_trainer.yaml``."""
    import zipfile

    wheel = pip_download("verl==0.9.1", "verl-0.9.1-")
    target = tmp_path_factory.mktemp("verl") / "_generated_ppo_trainer.yaml"
    with zipfile.ZipFile(wheel) as zf:
        target.write_bytes(zf.read("verl/trainer/config/_generated_ppo_trainer.yaml"))
    return target
