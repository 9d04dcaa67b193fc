"""On a machine without CANN (this one): ``rlprof check`` explains why torch_npu is unusable and
still exits 0; a run warns once, captures nothing, writes no NPU files, and training completes."""

from __future__ import annotations

import importlib.util
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from npu_tiny_training import npu_config, train

CHECK = ["check", "global_profiler.tool=npu", "global_profiler.steps=[1]",
         "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"]


def torch_npu_imports() -> bool:
    if importlib.util.find_spec("torch_npu") is None:
        return False
    try:
        importlib.import_module("torch_npu")
    except Exception:
        return False
    return True


needs_no_torch_npu = pytest.mark.skipif(torch_npu_imports(), reason="torch_npu imports here: these tests are for machines without it")


def rlprof_check(env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlprof.cli", *CHECK], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})})


@needs_no_torch_npu
def test_check_explains_torch_npu_is_missing_and_exits_0():
    proc = rlprof_check()
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stderr.splitlines() if line.startswith("warning: backend 'npu'"))
    assert "torch_npu cannot be imported (ModuleNotFoundError: No module named 'torch_npu')" in warning
    assert "pip install torch-npu==" in warning and "CANN" in warning
    assert "actor   e2e" in proc.stdout  # the plan is still printed: the configuration is valid


@needs_no_torch_npu
def test_check_with_the_real_torch_npu_but_no_cann_shows_the_import_error(torch_npu_wheel, tmp_path_factory):
    """The real wheel on sys.path: importing it fails for want of CANN's libhccl.so."""
    site = tmp_path_factory.mktemp("torch-npu-site")
    with zipfile.ZipFile(torch_npu_wheel) as wheel:
        wheel.extractall(site)
    proc = rlprof_check({"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 0, proc.stderr
    warning = next(line for line in proc.stderr.splitlines() if line.startswith("warning: backend 'npu'"))
    assert "torch_npu cannot be imported (ImportError: libhccl.so: cannot open shared object file" in warning
    assert "set_env.sh" in warning


@needs_no_torch_npu
def test_a_run_warns_once_writes_no_npu_files_and_training_completes(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    prof = train(npu_config(tmp_path, npu={"level": "level1", "contents": ["npu", "cpu"]}, mode="e2e", steps=(1, 2)), n_steps=3)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("rlprof") and r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "torch_npu cannot be imported" in warnings[0], warnings
    assert prof.artifacts == [] and prof.errors == []
    written = sorted(p.relative_to(prof.run.run_dir).as_posix() for p in prof.run.run_dir.rglob("*"))
    # nothing of the npu backend's: only the core's own (manifest, step metrics, the armed run's requests/)
    assert all(p.split("/")[0] in ("manifest", "requests", "step_metrics.jsonl") for p in written), written


@needs_no_torch_npu
def test_without_check_environment_the_backend_says_it_once_itself(tmp_path, caplog):
    """Whoever drives the backend, the reason is logged once and nothing is created."""
    from rlprof.context import Capture, RunInfo, StepContext
    from rlprof_npu.backend import NpuBackend

    caplog.set_level(logging.WARNING)
    backend = NpuBackend()
    run = RunInfo(run_id="r", rank=0, world_size=1, host="h", pid=1, run_dir=tmp_path / "r", roles=("actor",))
    for step in (1, 2):
        capture = Capture(capture_id=f"step{step}", steps=(step,), regions=(), directory=run.run_dir / f"step{step}")
        backend.start_step(StepContext(run=run, backend="npu", tool_config={}, capture=capture, step=step, opens_capture=True))
        backend.step_boundary(StepContext(run=run, backend="npu", tool_config={}, capture=capture, step=step, closes_capture=True))
    assert len(caplog.records) == 1 and "torch_npu cannot be imported" in caplog.records[0].getMessage()
    assert not Path(tmp_path / "r").exists()
