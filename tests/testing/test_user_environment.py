"""rlprof added to a user's own environment, as a verl user would: wheels for the core and the backends
they want, pip-installed into a virtualenv that already holds torch, with no editable install and
nothing of this repository on the path (README, "Add rlprof to your own environment")."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, env=env, cwd=kwargs.pop("cwd", None),
                          timeout=600, **kwargs)


@pytest.fixture(scope="module")
def user_env(tmp_path_factory) -> Path:
    """A fresh venv with torch 2.13 (the user's), then only the wheels of rlprof and rlprof-torch."""
    work = tmp_path_factory.mktemp("user-env")
    dist, source = work / "dist", work / "source"  # built from a copy: setuptools leaves build/ beside the sources
    skip = shutil.ignore_patterns("build", "*.egg-info", "__pycache__", "tests")
    for part in ("core", "plugins/torch", "plugins/nsys", "plugins/npu"):
        shutil.copytree(ROOT / part, source / part, ignore=skip)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", dist, source,
                source / "plugins" / "torch", source / "plugins" / "nsys", source / "plugins" / "npu")
    assert built.returncode == 0, built.stderr
    wheels = sorted(p.name for p in dist.glob("*.whl"))
    assert [w.split("-")[0] for w in wheels] == ["rlprof", "rlprof_npu", "rlprof_nsys", "rlprof_torch"], wheels
    venv = work / "venv"
    assert run(sys.executable, "-m", "venv", venv).returncode == 0
    python = venv / "bin" / "python"
    torch = run(python, "-m", "pip", "install", "-q", "torch==2.13.0")  # the user's environment: torch is already there
    assert torch.returncode == 0, torch.stderr
    ours = run(python, "-m", "pip", "install", "-q", *dist.glob("rlprof-*.whl"), *dist.glob("rlprof_torch-*.whl"))
    assert ours.returncode == 0, ours.stderr
    return venv


def test_only_the_chosen_backends_are_installed_and_listed(user_env):
    listed = run(user_env / "bin" / "rlprof", "backends", cwd=user_env)
    assert listed.returncode == 0, listed.stderr
    assert "torch" in listed.stdout and "torch_memory" in listed.stdout and "rlprof-torch" in listed.stdout
    assert "nsys" not in listed.stdout and "npu" not in listed.stdout
    where = run(user_env / "bin" / "python", "-c", "import rlprof, rlprof_torch; print(rlprof.__file__, rlprof_torch.__file__)",
                cwd=user_env)
    assert where.returncode == 0 and str(ROOT) not in where.stdout  # the wheels, not this checkout


def test_one_profiled_step_writes_a_trace_and_reports_ok(user_env, tmp_path):
    script = textwrap.dedent("""
        import sys, torch, rlprof
        prof = rlprof.Profiler(None, overrides=["global_profiler.tool=torch", "global_profiler.steps=[1]",
                               "global_profiler.save_path=" + sys.argv[1], "actor_rollout_ref.actor.profiler.enable=true",
                               "actor_rollout_ref.actor.profiler.all_ranks=true"])
        prof.start_step(1)
        with prof.role("actor", "update"):
            torch.randn(64, 64) @ torch.randn(64, 64)
        prof.step_boundary()
        print(len(prof.finalize()))
    """)
    ran = run(user_env / "bin" / "python", "-c", script, tmp_path / "profile", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert int(ran.stdout.split()[-1]) >= 1
    assert list((tmp_path / "profile").rglob("*.pt.trace.json.gz"))
    report = run(user_env / "bin" / "rlprof", "report", tmp_path / "profile", cwd=tmp_path)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "actor_update" in report.stdout


def test_a_backend_not_installed_names_the_package_to_install(user_env, tmp_path):
    checked = run(user_env / "bin" / "rlprof", "check", "global_profiler.tool=nsys", "global_profiler.steps=[1]",
                  "actor_rollout_ref.actor.profiler.enable=true", cwd=tmp_path)
    assert checked.returncode == 2
    assert "pip install rlprof-nsys" in checked.stderr + checked.stdout
    assert "Traceback" not in checked.stderr
