"""The backend template works the way a third party would use it: pip-installed into a fresh,
plain virtualenv (no system site-packages), found through its entry point, selected by
``global_profiler.tool=walltime`` in ``rlprof demo``, its traces listed in the manifest, and its own
tests (entry point + conformance suite) passing there.

rlprof and rlprof-walltime are installed fresh on every run, from copies of this checkout (so no
build files land in the repository). torch, ray and pytest, which only the demo and the template's
tests need, come from a directory built once with ``pip install --target`` and kept in
``$RLPROF_TEST_CACHE`` (default ``~/.cache/rlprof-tests``), keyed by their versions, and reach the
venv through a ``.pth`` file: they are what takes minutes to install, and they are not under test.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import venv
from importlib import metadata
from pathlib import Path

import pytest

from rlprof.manifest import artifacts
from rlprof.testing.downloads import cache_dir
from tiers import heavy  # tests/tiers.py

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "examples" / "backend-template"
CACHE = cache_dir()
BUILD_LEFTOVERS = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "dist", ".pytest_cache")


def heavy_requirements() -> list[str]:
    """torch, ray and pytest pinned to the versions of this environment (the cache key)."""
    pins = []
    for name in ("torch", "ray", "pytest"):
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            pytest.skip(f"{name} is not installed here (bash scripts/setup.sh installs it)")
        pins.append(f"{name}=={version.split('+')[0]}")
    return pins


@pytest.fixture(scope="module")
def heavy_site() -> Path:
    """torch, ray and pytest for the venv, installed once into the cache."""
    pins = heavy_requirements()
    key = "-".join([f"py{sys.version_info.major}{sys.version_info.minor}", *(p.replace("==", "") for p in pins)])
    target = CACHE / f"template-site-{key}"
    if not (target / ".complete").exists():
        partial = CACHE / f"template-site-{key}.{os.getpid()}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        pip(sys.executable, "install", "-q", "--target", str(partial), *pins)
        (partial / ".complete").touch()
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


def pip(python: str | Path, *args: str) -> None:
    proc = subprocess.run([str(python), "-m", "pip", *args], capture_output=True, text=True,
                          env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"


@pytest.fixture(scope="module")
def template_venv(tmp_path_factory, heavy_site) -> Path:
    """A plain venv with rlprof and rlprof-walltime pip-installed from copies of this checkout."""
    heavy('a virtualenv')
    base = tmp_path_factory.mktemp("template")
    core = base / "src" / "rlprof"
    core.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, core / name)
    shutil.copytree(ROOT / "core", core / "core", ignore=BUILD_LEFTOVERS)
    template = base / "src" / "backend-template"
    shutil.copytree(TEMPLATE, template, ignore=BUILD_LEFTOVERS)

    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    python = env_dir / "bin" / "python"
    pip(python, "install", "-q", str(core), str(template))
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "rlprof-test-heavy-deps.pth").write_text(f"{heavy_site}\n")
    return env_dir


def run_in(env_dir: Path, *command: str, cwd: Path, timeout: float = 180) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "RLPROF_STRICT")}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(list(command), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_the_venv_is_clean_and_rlprof_comes_from_it(template_venv, tmp_path):
    proc = run_in(template_venv, str(template_venv / "bin" / "python"), "-c",
                  "import sys, rlprof, rlprof_walltime; print(sys.prefix == sys.base_prefix, rlprof.__file__, rlprof_walltime.__file__)",
                  cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    is_base, core_file, template_file = proc.stdout.split()
    assert is_base == "False"
    assert core_file.startswith(str(template_venv)) and template_file.startswith(str(template_venv))


def test_rlprof_backends_lists_walltime_from_its_distribution(template_venv, tmp_path):
    proc = run_in(template_venv, str(template_venv / "bin" / "rlprof"), "backends", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    listed = {b["name"]: b for b in json.loads(proc.stdout)}
    assert listed["walltime"]["distribution"] == "rlprof-walltime" and listed["walltime"]["imports"]
    assert "stop_role" in listed["walltime"]["hooks"]


def test_the_demo_profiles_with_walltime_and_lists_the_traces(template_venv, tmp_path):
    save_path = tmp_path / "profile"
    proc = run_in(template_venv, str(template_venv / "bin" / "rlprof"), "demo", "--tool", "walltime",
                  "--steps", "1,2", "--save-path", str(save_path), cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, f"rlprof demo --tool walltime failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    found = [a for a in artifacts([save_path]) if a["backend"] == "walltime"]
    assert found, f"no walltime artifact in the manifest under {save_path}:\n{proc.stdout[-2000:]}"
    assert {a["step"] for a in found} == {1, 2}
    for record in found:
        trace = Path(record["_run_dir"]) / record["path"]
        events = json.loads(trace.read_text())["traceEvents"]
        assert any(e["ph"] == "X" for e in events) and not record["outside_output_dir"]


def test_the_templates_own_tests_pass_in_the_venv(template_venv, tmp_path):
    tests = tmp_path / "tests"
    shutil.copytree(TEMPLATE / "tests", tests)  # run from outside the source tree: the installed package is used
    proc = run_in(template_venv, str(template_venv / "bin" / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
                  str(tests), cwd=tmp_path)
    assert proc.returncode == 0, f"the template's tests failed in a fresh venv:\n{proc.stdout[-4000:]}\n{proc.stderr[-2000:]}"
    assert " passed" in proc.stdout and "failed" not in proc.stdout
