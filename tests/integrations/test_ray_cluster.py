"""The Ray glue on a real local cluster: one controller, several worker actors, one run directory.

Workers are :class:`rlprof.testing.ray_worker.ScriptedWorker` actors running verl's hybrid-engine
regions; the backend is the real ``torch`` one unless a test says otherwise. One cluster and one
pool of workers serve the whole module.
"""

import logging
import time

import pytest

from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.analysis.report import build_reports
from rlprof.testing.ray_worker import ScriptedWorker

ray = pytest.importorskip("ray")
pytest.importorskip("rlprof_torch")
pytestmark = pytest.mark.slow

HYBRID = ("actor", "rollout", "ref")
REGIONS = {"rollout_generate", "ref_compute_log_prob", "actor_compute_log_prob", "actor_update"}


class WorkerPool:
    """ScriptedWorker actors shared by the module's tests: a worker process pays for importing torch
    and warming up its profiler once. Each test sets the workers up again with its own config
    (``rlprof_setup`` replaces the Profiler); a test that kills a worker discards it."""

    def __init__(self):
        self.actor_class = ray.remote(ScriptedWorker)
        self.handles: list = []

    def take(self, n: int) -> list:
        while len(self.handles) < n:
            self.handles.append(self.actor_class.options(num_cpus=0).remote(HYBRID_ENGINE_STAGES))
        return self.handles[:n]

    def discard(self, handle) -> None:
        self.handles.remove(handle)
        ray.kill(handle)


@pytest.fixture(scope="module")
def pool(test_backends_site):
    # the 'recorder' test backend (a real distribution with entry points) is visible to every worker
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING,
             runtime_env={"env_vars": {"PYTHONPATH": str(test_backends_site)}})
    yield WorkerPool()
    ray.shutdown()


def profiler_config(save_path, *, tool="torch", steps=(1, 2), **role) -> dict:
    role = {"enable": True, **(role or {"all_ranks": True})}
    return {"global_profiler": {"tool": tool, "steps": list(steps), "save_path": str(save_path)},
            "actor_rollout_ref": {"actor": {"profiler": role}}}


def start(pool, config, workers, *, specs=None):
    controller = ProfilingController(config, timeout_s=60.0)
    specs = specs or [WorkerSpec(rank=r, world_size=workers, roles=HYBRID, stages=HYBRID_ENGINE_STAGES) for r in range(workers)]
    for spec, handle in zip(specs, pool.take(len(specs))):
        controller.add(spec, handle)
    assert controller.setup().ok
    return controller


def train(controller, steps=3, stages=None):
    for step in range(1, steps + 1):
        assert controller.start_step(step).ok
        ray.get([w.run_step.remote(stages) for w in controller.handles], timeout=60)
        assert controller.step_boundary().ok
    return controller.finalize()


def test_end_to_end_every_rank_writes_one_trace_per_step_into_one_run(pool, tmp_path):
    controller = start(pool, profiler_config(tmp_path), workers=2)
    final = train(controller)
    assert final.ok
    for label, artifacts in final.results.items():
        assert sorted(a["steps"] for a in artifacts) == [[1], [2]], label
        assert all(a["path"].endswith(".pt.trace.json.gz") for a in artifacts)
    assert [p.name for p in tmp_path.iterdir()] == [controller.run_id]  # every rank wrote into one run
    [report] = build_reports([tmp_path])
    assert report.problem_count == 0
    rows = {(c.step, c.role, c.rank): c for c in report.cells}
    assert set(rows) == {(s, role, r) for s in (1, 2) for role in HYBRID for r in (0, 1)}
    for (step, role, rank), cell in rows.items():
        regions = {name for name in REGIONS if name.startswith(role + "_")}
        assert set(cell.ranges) == regions and all(v["ms"] > 0 for v in cell.ranges.values()), (step, role, rank)


def test_discrete_one_capture_per_region_as_the_plan_expects(pool, tmp_path):
    config = profiler_config(tmp_path, all_ranks=True, discrete=True)
    final = train(start(pool, config, workers=2))
    assert final.ok
    for artifacts in final.results.values():
        assert sorted((a["step"], a["region"]) for a in artifacts) == sorted((s, r) for s in (1, 2) for r in REGIONS)
    [report] = build_reports([tmp_path])
    assert report.problem_count == 0 and report.short_captures == []
    assert {p.expected_captures for p in report.processes} == {8}


def test_ranks_subset_only_selected_ranks_write(pool, tmp_path):
    final = train(start(pool, profiler_config(tmp_path, ranks=[1]), workers=2))
    assert final.results["workers/rank0"] == []
    assert {a["path"].split("/")[1].split("-")[0] for a in final.results["workers/rank1"]} == {"rank1"}
    [report] = build_reports([tmp_path])
    assert [p.rank for p in report.processes] == [1]  # rank 0 profiles nothing, so writes no manifest
    assert {c.rank for c in report.cells} == {1} and report.problem_count == 0


def test_agent_loop_rollout_is_selected_by_replica_rank(pool, tmp_path):
    config = {
        "global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": str(tmp_path)},
        "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {"enable": True, "ranks": [1], "discrete": True}}},
    }
    # two rollout replicas of two processes each (tensor parallel 2): global ranks 2 and 3 are replica 1
    stages = {"rollout": ("generate",)}
    specs = [WorkerSpec(rank=r, world_size=4, roles=("rollout",), stages=stages, replica_rank=r // 2, num_replicas=2,
                        group="rollout") for r in range(4)]
    final = train(start(pool, config, workers=4, specs=specs), stages=stages)
    assert final.ok
    produced = {label: {(a["step"], a["region"], a["mode"]) for a in artifacts} for label, artifacts in final.results.items()}
    assert produced["rollout/rank0"] == produced["rollout/rank1"] == set()
    assert produced["rollout/rank2"] == produced["rollout/rank3"] == {(1, "rollout_generate", "discrete"), (2, "rollout_generate", "discrete")}
    [report] = build_reports([tmp_path])
    assert sorted((p.rank, p.replica_rank) for p in report.processes) == [(2, 1), (3, 1)]
    assert report.problem_count == 0


def test_two_tools_at_once_each_writes_every_step_role_rank(pool, tmp_path, test_backends):
    config = profiler_config(tmp_path, tool=["torch", "recorder"])  # 'recorder' found through its entry point
    assert train(start(pool, config, workers=2)).ok
    [report] = build_reports([tmp_path])
    assert report.problem_count == 0
    assert {(c.step, c.role, c.rank, c.backend) for c in report.cells} == {
        (s, role, r, b) for s in (1, 2) for role in HYBRID for r in (0, 1) for b in ("torch", "recorder")}


@pytest.mark.timing
def test_worker_killed_mid_step_is_reported_and_the_others_complete(pool, tmp_path):
    controller = start(pool, profiler_config(tmp_path), workers=3)
    victim = controller.workers["workers/rank1"][1]
    for step in (1, 2, 3):
        controller.start_step(step)
        # in step 2 the victim's regions last a minute: it is killed inside them however slow the machine
        # (before: 0.1 s regions and a kill 0.3 s later, a race with the regions' end)
        refs = {label: handle.run_step.remote(seconds=60 if step == 2 and handle is victim else 0.1)
                for label, (_, handle) in controller.workers.items() if label not in controller.dead}
        if step == 2:
            time.sleep(0.3)
            pool.discard(victim)  # killed in the middle of step 2's regions
        for label, ref in refs.items():
            if step == 2 and label == "workers/rank1":
                with pytest.raises(ray.exceptions.RayActorError):
                    ray.get(ref, timeout=60)
            else:
                ray.get(ref, timeout=60)
        boundary = controller.step_boundary()
        if step == 2:
            [failure] = boundary.failures
            assert (failure.worker, failure.rank, failure.call, failure.step, failure.kind) == ("workers/rank1", 1, "step_boundary", 2, "died")
    final = controller.finalize()
    assert final.ok and sorted(final.results) == ["workers/rank0", "workers/rank2"]
    for label in final.results:
        assert sorted(a["steps"] for a in final.results[label]) == [[1], [2]]
    assert [str(f) for f in controller.failures] == [str(failure)]

    [report] = build_reports([tmp_path])
    assert [p.rank for p in report.unfinalized] == [1]
    assert {(m["rank"], m["step"]) for m in report.missing} == {(1, 2)}  # rank 1 kept step 1, lost step 2
    assert [(f["worker"], f["kind"], f["step"]) for f in report.worker_failures] == [("workers/rank1", "died", 2)]
    assert {(c.step, c.rank) for c in report.cells} == {(1, 0), (1, 1), (1, 2), (2, 0), (2, 2)}


@pytest.mark.timing
def test_hung_worker_times_out_without_hanging_the_controller(pool, tmp_path):
    controller = start(pool, profiler_config(tmp_path, steps=[1]), workers=2)
    controller.timeout_s = 2.0
    hung = controller.workers["workers/rank1"][1]
    controller.start_step(1)
    hung.hang.remote(120)
    ray.get(controller.workers["workers/rank0"][1].run_step.remote(), timeout=60)
    began = time.perf_counter()
    boundary = controller.step_boundary()
    final = controller.finalize()
    assert time.perf_counter() - began < 60  # the timeout (2 s) once, never the hang's 120 s
    assert [(f.worker, f.kind, f.call) for f in boundary.failures] == [("workers/rank1", "timeout", "step_boundary")]
    assert final.failures == [] and final.skipped == ["workers/rank1"]  # not waited for a second time
    assert [a["steps"] for a in final.results["workers/rank0"]] == [[1]]
    pool.discard(hung)
    [report] = build_reports([tmp_path])
    assert [f["kind"] for f in report.worker_failures] == ["timeout"]


def test_one_machine_one_save_path_nothing_is_copied_twice(pool, tmp_path):
    """The controller reads the workers' manifests where they write them: no line is appended twice,
    no ``node`` head is written, and ``gather: traces`` has nothing to move."""
    config = profiler_config(tmp_path)
    config["global_profiler"]["gather"] = "traces"
    controller = start(pool, config, workers=2)
    assert train(controller).ok
    manifests = sorted(tmp_path.rglob("manifest/rank*.jsonl"))
    assert len(manifests) == 2 and len(controller.collector.visible) == 2
    for manifest in manifests:
        lines = manifest.read_text().splitlines()
        assert len(lines) == len(set(lines)) and '"type": "node"' not in manifest.read_text()
    assert controller.gathered.files == 0 and not controller.gathered.failed
    [report] = build_reports([tmp_path])
    assert report.problem_count == 0 and len(report.processes) == 2
