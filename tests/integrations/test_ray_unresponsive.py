"""A worker that hangs in a backend hook and later answers again is taken back by the controller.

(That a hung worker costs the timeout once per run, is recorded once and skipped afterwards is the
Ray case of tests/runtime/test_fault_suite.py.) Real local Ray, ScriptedWorker actors, the ``hanging`` test backend."""

from __future__ import annotations

import json
import logging

import pytest

from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.testing.ray_worker import ScriptedWorker

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow

HYBRID = ("actor", "rollout", "ref")
TIMEOUT_S = 2.0


@pytest.fixture(scope="module")
def cluster(test_backends_site):
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             runtime_env={"env_vars": {"PYTHONPATH": str(test_backends_site)}})
    yield ray.remote(ScriptedWorker)
    ray.shutdown()


def config(save_path, steps, **hanging):
    return {
        "global_profiler": {"tool": "hanging", "steps": list(steps), "save_path": str(save_path)},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True,
                                                     "tool_config": {"hanging": hanging}}}},
    }


def start(cluster, cfg, workers=3):
    controller = ProfilingController(cfg, timeout_s=TIMEOUT_S)
    for rank in range(workers):
        spec = WorkerSpec(rank=rank, world_size=workers, roles=HYBRID, stages=HYBRID_ENGINE_STAGES)
        controller.add(spec, cluster.options(num_cpus=0).remote(HYBRID_ENGINE_STAGES, iterations=1, seconds=0.001))
    saved, controller.timeout_s = controller.timeout_s, 120.0  # actors start slowly on a busy host
    assert controller.setup().ok
    controller.timeout_s = saved
    return controller


def responsive(controller):
    return [h for label, (_, h) in controller.workers.items()
            if label not in controller.dead and label not in controller.unresponsive]


def failure_records(save_path):
    records = []
    for path in save_path.rglob("manifest/controller-*.jsonl"):
        records += [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["type"] == "worker_failure"]


@pytest.mark.timing
def test_worker_that_answers_again_rejoins(cluster, tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="rlprof")
    controller = start(cluster, config(tmp_path, steps=[1, 2, 3], hang_in=["step_boundary"], ranks=[0],
                                       seconds=TIMEOUT_S + 2, times=1), workers=2)
    controller.start_step(1)
    ray.get([h.run_step.remote() for h in responsive(controller)], timeout=60)
    assert [f.kind for f in controller.step_boundary().failures] == ["timeout"]
    assert controller.start_step(2).skipped == ["workers/rank0"]
    ray.get([h.run_step.remote() for h in responsive(controller)], timeout=60)
    controller.step_boundary()
    # its hook returns meanwhile: wait for that event, the stuck call's ref done (before: a sleep until
    # 1 s after the hook's planned end, which a busy machine could overrun)
    [stuck] = controller.unresponsive.values()
    ray.wait([stuck.ref], timeout=120)
    began = controller.start_step(3)
    assert began.ok and began.skipped == [] and sorted(began.results) == ["workers/rank0", "workers/rank1"]
    ray.get([h.run_step.remote() for h in responsive(controller)], timeout=60)
    assert controller.step_boundary().ok
    final = controller.finalize()
    assert final.ok
    assert sorted(a["steps"] for a in final.results["workers/rank0"]) == [[1], [3]]  # it missed step 2 only
    assert sorted(a["steps"] for a in final.results["workers/rank1"]) == [[1], [2], [3]]
    assert any("answered again" in r.getMessage() for r in caplog.records)
    assert len(failure_records(tmp_path)) == 1
    for _, handle in controller.workers.values():
        ray.kill(handle)
