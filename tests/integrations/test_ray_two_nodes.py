"""Two Ray nodes (simulated with ``ray.cluster_utils.Cluster``, one CPU each), one worker pinned on
each, every node with its own save path: the run id reaches the workers through ``worker_options``'
runtime_env, each node keeps only its own files, and ``rlprof report`` merges the two directories."""

import pytest

from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.analysis.report import build_reports
from rlprof.cli.report import main
from rlprof.testing.ray_worker import ScriptedWorker

ray = pytest.importorskip("ray")
pytest.importorskip("rlprof_torch")
pytestmark = pytest.mark.slow

HYBRID = ("actor", "rollout", "ref")


@pytest.fixture(scope="module")
def two_nodes():
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    yield [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    ray.shutdown()
    cluster.shutdown()


def test_each_node_writes_locally_and_the_report_merges_them(two_nodes, tmp_path, capsys):
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    assert len(two_nodes) == 2
    config = {"global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": str(tmp_path / "unused")},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    controller = ProfilingController(config, timeout_s=120)
    actor_class = ray.remote(ScriptedWorker)
    save_paths = [tmp_path / f"node{i}" for i in range(2)]
    setups = []
    for rank, node_id in enumerate(two_nodes):
        spec = WorkerSpec(rank=rank, world_size=2, roles=HYBRID, stages=HYBRID_ENGINE_STAGES)
        placement = NodeAffinitySchedulingStrategy(node_id, soft=False)
        handle = actor_class.options(num_cpus=1, scheduling_strategy=placement, **controller.worker_options(spec)).remote(HYBRID_ENGINE_STAGES)
        controller.add(spec, handle)
        # a node-local save path; no run_id passed: the worker finds it in its environment (RLPROF_RUN_ID)
        node_config = controller.config.with_overrides(save_path=str(save_paths[rank]))
        setups.append(handle.rlprof_setup.remote(node_config, **spec.profiler_kwargs()))
    infos = ray.get(setups, timeout=120)
    assert {info["run_dir"] for info in infos} == {str(p / controller.run_id) for p in save_paths}
    where = ray.get([h.where.remote() for h in controller.handles], timeout=60)
    assert sorted(w["node_id"] for w in where) == sorted(two_nodes)  # one worker on each node

    for step in (1, 2, 3):
        assert controller.start_step(step).ok
        ray.get([h.run_step.remote() for h in controller.handles], timeout=60)
        assert controller.step_boundary().ok
    assert controller.finalize().ok

    for rank, path in enumerate(save_paths):
        tags = {p.parent.parent.name.split("-")[0] for p in path.rglob("*.pt.trace.json.gz")}
        assert tags == {f"rank{rank}"}  # each node holds only its own rank's traces
    [report] = build_reports(save_paths)
    assert report.run_id == controller.run_id and len(report.run_dirs) == 2
    assert report.problem_count == 0
    assert {(c.step, c.role, c.rank) for c in report.cells} == {(s, r, k) for s in (1, 2) for r in HYBRID for k in (0, 1)}
    assert main([str(p) for p in save_paths]) == 0
    assert "problems: none" in capsys.readouterr().out
