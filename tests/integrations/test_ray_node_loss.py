"""A Ray node removed mid-run (``Cluster.remove_node``): training goes on with the workers on the other
node, the controller's run directory keeps the lost node's manifest records up to its last profiled
step, and ``rlprof report`` says the node was lost. Its own cluster: the node does not come back."""

import pytest

from rlprof.analysis.report import build_reports
from rlprof.cli.report import main
from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.testing.ray_worker import ScriptedWorker

from rlprof.integrations.nodes import pinned, simulated_cluster

ray = pytest.importorskip("ray")
pytest.importorskip("rlprof_torch")
pytestmark = pytest.mark.slow

HYBRID = ("actor", "rollout", "ref")


def config(save_path):
    return {"global_profiler": {"tool": "torch", "steps": [1, 2, 3], "save_path": str(save_path)},
            "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}


def test_a_lost_node_keeps_its_records_up_to_its_last_step(tmp_path, capsys):
    roots = [tmp_path / f"node{i}" for i in range(2)]
    cluster = simulated_cluster(roots)
    try:
        [doomed_node] = cluster.cluster.worker_nodes
        doomed = cluster.node_ids[1]
        actor = ray.remote(ScriptedWorker)
        workers = [actor.options(num_cpus=1, **pinned(node)).remote(HYBRID_ENGINE_STAGES) for node in cluster.node_ids]
        controller = ProfilingController(config(tmp_path / "controller"), timeout_s=60)
        for rank, handle in enumerate(workers):
            controller.add(WorkerSpec(rank=rank, world_size=2, roles=HYBRID, stages=HYBRID_ENGINE_STAGES), handle)
        assert controller.setup().ok
        lost_label = next(label for label, info in controller.infos.items() if info["node"] == doomed)
        assert controller.start_step(1).ok
        ray.get([w.run_step.remote() for w in controller.handles], timeout=60)
        assert controller.step_boundary().ok

        cluster.cluster.remove_node(doomed_node)
        for step in (2, 3):  # training goes on with the workers that are left
            controller.start_step(step)
            ray.get([w.run_step.remote() for w in controller.handles], timeout=60)
            controller.step_boundary()
        controller.finalize()
        assert lost_label in controller.dead and len(controller.handles) == 1
    finally:
        ray.shutdown()
        cluster.shutdown()

    [report] = build_reports([tmp_path / "controller"])
    lost_rank = int(lost_label.rsplit("rank", 1)[1])
    assert [n["node"] for n in report.nodes_lost] == [doomed] and report.nodes_lost[0]["step"] == 1
    steps_of = {r: {c.step for c in report.cells if c.rank == r} for r in (0, 1)}
    assert steps_of[lost_rank] == {1} and steps_of[1 - lost_rank] == {1, 2, 3}
    main([str(tmp_path / "controller")])
    text = capsys.readouterr().out
    assert f"node {doomed[:8]}" in text and "was LOST after step 1" in text
