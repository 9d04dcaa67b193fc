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


def written(root, step: int) -> None:
    """Waits until the traces a node's worker captured in ``step`` are at their final paths on its disk (the
    torch backend writes them off the training thread after the step's end; the report counts a file listed
    ``writing`` once it is there). A node lost before that loses them, rightly; the CI flake (the lost rank's
    step 1 missing from the report) was that race, lost on a loaded machine."""
    import time
    from pathlib import Path

    from rlprof.manifest import read_records

    deadline = time.monotonic() + 120  # the bound only ends a failing test
    while time.monotonic() < deadline:
        artifacts = [r for r in read_records([root]) if r["type"] == "artifact" and step in (r.get("steps") or [])]
        if artifacts and all((Path(r["_run_dir"]) / r["path"]).exists() for r in artifacts):
            return
        time.sleep(0.05)
    raise AssertionError(f"the traces of step {step} under {root} were never written")


def gone(handle) -> None:
    """Waits until Ray says the actor on the removed node is dead (the event the rest needs; before, the next
    step raced the node's end, and a loaded machine lost that race)."""
    import time

    deadline = time.monotonic() + 120  # the bound only ends a failing test
    while time.monotonic() < deadline:
        try:
            ray.get(handle.where.remote(), timeout=10)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
            return
        except ray.exceptions.GetTimeoutError:
            continue
        time.sleep(0.1)
    raise AssertionError("the actor on the removed node still answers")


@pytest.mark.timing
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

        written(roots[1], step=1)  # what the node's rank captured in step 1 is on its disk, whole
        cluster.cluster.remove_node(doomed_node)
        gone(controller.workers[lost_label][1])
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
