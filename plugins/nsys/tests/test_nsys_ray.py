"""On a real local Ray cluster: the controller starts a profiled worker under nsys through Ray's
nsight runtime_env, an unselected one without it, and the worker's reports, which nsys writes only
when the worker exits, reach the run layout through the pending records and relocate_pending.

``nsys`` is the stand-in of nsys_standin.py (it runs the worker as its child and writes one report
per expected window when the worker exits, as nsys does in its default mode). The worker's windows
go through a stand-in for cudaProfilerStart/Stop, as they would on a GPU node.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rlprof.ray import ProfilingController, WorkerSpec
from rlprof.testing.ray_worker import ScriptedWorker
from rlprof_nsys import relocate_pending
from rlprof_nsys.windows import CaptureWindows

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
STAGES = {"actor": ("update",)}


class Windows:
    def start(self):
        pass

    def stop(self):
        pass


class NsysWorker(ScriptedWorker):
    """A scripted worker whose capture windows count as started (no torch imported: it starts fast)."""

    def __init__(self):
        sys.modules.setdefault("torch", None)
        super().__init__(STAGES, iterations=1, seconds=0)

    def rlprof_setup(self, config, **kwargs):
        info = super().rlprof_setup(config, **kwargs)
        if self.profiler.backends is not None:
            self.profiler.backends.plugins["nsys"].windows = CaptureWindows(Windows())
        return info

    def leave(self):
        ray.actor.exit_actor()


@pytest.fixture
def cluster(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nsys").write_text(f"#!/bin/sh\nexec {sys.executable} {HERE / 'nsys_standin.py'} \"$@\"\n")
    (bin_dir / "nsys").chmod(0o755)
    # Ray's nsight plugin runs `nsys profile ... python`: whatever `python` is on PATH, not sys.executable
    (bin_dir / "python").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bin_dir / "python").chmod(0o755)
    log = tmp_path / "nsys.jsonl"
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("NSYS_STANDIN_LOG", str(log))
    temp_dir = tempfile.mkdtemp(prefix="rlprof-nsys-ray-", dir="/tmp")  # short: Ray's socket paths have a length limit
    ray.init(num_cpus=2, include_dashboard=False, logging_level=logging.WARNING, _temp_dir=temp_dir,
             runtime_env={"env_vars": {"PYTHONPATH": str(HERE)}})
    try:
        yield Path(temp_dir) / "session_latest" / "logs" / "nsight", log
    finally:
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_profiled_worker_runs_under_nsys_and_its_reports_are_relocated(cluster, tmp_path):
    nsight_dir, log = cluster
    config = {
        "global_profiler": {"tool": "nsys", "steps": [1, 3], "save_path": str(tmp_path / "out"), "relocate_results": True,
                            "global_tool_config": {"nsys": {"ray_nsight_dir": str(nsight_dir),
                                                            "worker_nsight_options": {"trace": "cuda,nvtx"}}}},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "ranks": [0]}}},
    }
    controller = ProfilingController(config, timeout_s=60)
    Worker = ray.remote(NsysWorker)
    for rank in (0, 1):
        spec = WorkerSpec(rank=rank, world_size=2, roles=("actor",), stages=STAGES)
        controller.add(spec, Worker.options(num_cpus=0, **controller.worker_options(spec)).remote())
    setup = controller.setup()
    assert setup.ok, setup.failures
    pids = {label: info["pid"] for label, info in setup.results.items()}
    for step in (1, 2, 3):
        assert controller.start_step(step).ok
        ray.get([w.run_step.remote() for w in controller.handles], timeout=120)
        assert controller.step_boundary().ok
    final = controller.finalize()
    assert final.ok, final.failures
    pending = [a for a in final.results["workers/rank0"] if a["kind"] == "pending"]
    assert sorted(a["capture"] for a in pending) == ["step1", "step3"]
    assert final.results["workers/rank1"] == []

    for handle in controller.handles:
        handle.leave.remote()
    launched, deadline = [], time.monotonic() + 120
    while time.monotonic() < deadline:  # the stand-in writes the reports once the worker exited
        launched = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        launched = [entry for entry in launched if any("default_worker" in word for word in entry["program"])]
        if launched:
            break
        time.sleep(0.5)
    [worker] = launched  # only the selected rank runs under nsys
    assert worker["pid"] == pids["workers/rank0"]
    assert worker["options"]["capture-range"] == "cudaProfilerApi"
    assert worker["options"]["capture-range-end"] == "repeat-shutdown:2"
    assert worker["options"]["kill"] == "none" and worker["options"]["trace"] == "cuda,nvtx"

    outcomes = relocate_pending(tmp_path / "out", settle_seconds=0)
    assert sorted(o.status for o in outcomes) == ["moved", "moved"]
    moved = sorted(p.relative_to(tmp_path / "out" / controller.run_id).parts[0] for p in (tmp_path / "out").rglob("*.nsys-rep"))
    assert moved == ["step1", "step3"]
