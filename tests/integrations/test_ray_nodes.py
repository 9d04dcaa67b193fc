"""Three Ray nodes (``ray.cluster_utils.Cluster``), each with its own disk (``RLPROF_NODE_SAVE_PATH`` in
the node's environment), the controller's save path elsewhere: every rank's manifest records reach
the controller's run directory through Ray, ``gather: traces`` moves the traces there with verified
checksums, and a node removed mid-run is reported as lost with its records up to its last step.

The workers are :class:`~rlprof.testing.ray_worker.ScriptedWorker` actors with the real ``torch``
backend, one pinned on each node.
"""

import hashlib
import json
import logging
import shutil
import subprocess
import sys

import pytest

from rlprof.analysis.report import build_reports
from rlprof.cli.report import main
from rlprof.integrations.nodes import pinned, simulated_cluster
from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.testing.ray_worker import ScriptedWorker
from test_node_rows import kineto

ray = pytest.importorskip("ray")
pytest.importorskip("rlprof_torch")
pytestmark = pytest.mark.slow

HYBRID = ("actor", "rollout", "ref")
NODES = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    base = tmp_path_factory.mktemp("nodes")
    roots = [base / f"node{i}" for i in range(NODES)]
    cluster = simulated_cluster(roots)
    workers = [ray.remote(ScriptedWorker).options(num_cpus=1, **pinned(node)).remote(HYBRID_ENGINE_STAGES)
               for node in cluster.node_ids]
    yield roots, workers
    ray.shutdown()
    cluster.shutdown()


def config(save_path, **global_keys):
    return {"global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": str(save_path), **global_keys},
            "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}


def run(controller, workers, steps=3):
    for rank, handle in enumerate(workers):
        controller.add(WorkerSpec(rank=rank, world_size=len(workers), roles=HYBRID, stages=HYBRID_ENGINE_STAGES), handle)
    assert controller.setup().ok
    for step in range(1, steps + 1):
        assert controller.start_step(step).ok
        ray.get([w.run_step.remote() for w in controller.handles], timeout=60)
        assert controller.step_boundary().ok
    return controller.finalize()


def sha256(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_every_node_records_reach_the_controller_and_files_stay_on_their_node(cluster, tmp_path, capsys):
    roots, workers = cluster
    controller = ProfilingController(config(tmp_path / "controller"), timeout_s=120)
    assert run(controller, workers).ok
    nodes = {info["node"] for info in controller.infos.values()}
    assert len(nodes) == NODES  # one worker per node
    for rank in range(NODES):  # worker r is pinned on node r, which writes under roots[r]
        assert controller.infos[f"workers/rank{rank}"]["run_dir"] == str(roots[rank] / controller.run_id)
    assert not list((tmp_path / "controller").rglob("*.json.gz"))  # gather: none moves no trace

    [report] = build_reports([tmp_path / "controller"])
    assert report.run_id == controller.run_id and report.problem_count == 0
    assert {p.rank for p in report.processes} == {0, 1, 2} and {p.node for p in report.processes} == nodes
    assert {(c.step, c.rank) for c in report.cells} == {(s, r) for s in (1, 2) for r in range(NODES)}
    timed = json.dumps(report.anatomy.as_dict())
    assert all(f'"name": "rank {r}"' in timed for r in range(NODES))  # every rank's timings
    assert len(report.files) == 2 * NODES and all(f.exists and f.node in nodes for f in report.files)
    for f in report.files:  # each file is listed where it is: under its own node's root
        [process] = [p for p in report.processes if p.rank == f.rank]
        assert f.node == process.node and f.path.startswith(str(roots[f.rank] / controller.run_id) + "/")
    assert main([str(tmp_path / "controller"), "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["runs"][0]["files"]
    assert all(entry["node"] in nodes and entry["path"] for entry in listed)
    text_before = main([str(tmp_path / "controller")]) == 0 and capsys.readouterr().out
    assert "3 Ray nodes" in text_before and "problems: none" in text_before

    # each node read its own traces (a scripted worker's hold no ops: one reason each, no rows shipped)
    assert sorted(controller.node_rows.failed) == sorted(f.path for f in report.files)
    assert all(reason == "NotKineto: no device events and no host ops" for reason in controller.node_rows.failed.values())
    # rlprof breakdown --address: a file is read on the node that holds it; only rows come back
    trace = str(kineto(roots[1] / "elsewhere" / "rank0.pt.trace.json"))
    by_address = breakdown_on_cluster(trace, str(roots[1] / "absent.json"))
    answer = json.loads(by_address.stdout)
    assert by_address.returncode == 0 and {(r["path"], r["region"]) for r in answer["rows"]} >= {(trace, "actor_update")}
    assert answer["errors"] == [{"path": str(roots[1] / "absent.json"), "reason": "on no node of the cluster"}]

    for root in roots:  # the nodes' disks are gone: the timings are not
        shutil.rmtree(root / controller.run_id)
    [after] = build_reports([tmp_path / "controller"])
    assert after.anatomy.as_dict() == report.anatomy.as_dict()
    assert not any(f.exists for f in after.files)
    main([str(tmp_path / "controller")])
    text = capsys.readouterr().out
    assert text.count("(on node ") == 2 * NODES and "on other nodes" in text
    for node in nodes:
        assert f"(on node {node[:8]}" in text


def breakdown_on_cluster(*paths):
    """``rlprof breakdown --address`` in its own process (a driver of its own, as a user runs it)."""
    address = ray.get_runtime_context().gcs_address
    return subprocess.run([sys.executable, "-m", "rlprof.cli", "breakdown", "--address", address, "--json", *paths],
                          capture_output=True, text=True, timeout=300)


def test_gather_traces_moves_every_trace_with_a_verified_checksum(cluster, tmp_path, caplog):
    roots, workers = cluster
    controller = ProfilingController(config(tmp_path / "controller", gather="traces", gather_delete_local=True), timeout_s=120)
    final = run(controller, workers)
    assert final.ok and controller.gathered.files == 2 * NODES and not controller.gathered.failed
    records = [json.loads(line) for line in
               next((tmp_path / "controller").rglob("manifest/controller-*.jsonl")).read_text().splitlines()]
    gathered = [r for r in records if r["type"] == "gathered"]
    assert len(gathered) == 2 * NODES and {r["status"] for r in gathered} == {"verified"}
    for r in gathered:
        here = tmp_path / "controller" / controller.run_id / r["path"]
        assert sha256(here) == r["sha256"] and here.stat().st_size == r["size"] > 0
        assert r["deleted_local"] and not any((root / controller.run_id / r["path"]).exists() for root in roots)
    [report] = build_reports([tmp_path / "controller"])
    assert report.problem_count == 0 and len(report.files) == 2 * NODES
    assert all(f.exists and f.gathered_from and f.path.startswith(str(tmp_path / "controller")) for f in report.files)


def test_a_gather_budget_stops_gathering_not_training(cluster, tmp_path, caplog):
    roots, workers = cluster
    controller = ProfilingController(config(tmp_path / "controller", gather="traces", gather_budget_gb=1e-9), timeout_s=120)
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        assert run(controller, workers).ok
    assert controller.gathered.files == 0 and len(controller.gathered.over_budget) == 2 * NODES
    assert "gather_budget_gb" in caplog.text
    [report] = build_reports([tmp_path / "controller"])
    assert len(report.not_gathered) == 2 * NODES and all(f.exists and not f.gathered_from for f in report.files)


def test_the_finish_hook_runs_once_per_node_with_that_nodes_directories(cluster, tmp_path):
    roots, workers = cluster
    extra = ray.remote(ScriptedWorker).options(num_cpus=0, **pinned(ray.get(workers[0].where.remote())["node_id"])
                                               ).remote(HYBRID_ENGINE_STAGES)  # a second worker on node 0
    said = tmp_path / "hooks.txt"
    command = f'echo "$RLPROF_NODE_ID|$RLPROF_NODE_RANKS|$RLPROF_NODE_RUN_DIRS|$RLPROF_RANK" >> {said}'
    controller = ProfilingController(config(tmp_path / "controller", finish_hook_cmd=command), timeout_s=120)
    try:
        assert run(controller, [*workers, extra]).ok
    finally:
        ray.kill(extra)
    lines = sorted(said.read_text().splitlines())
    assert len(lines) == NODES and controller.finish_hooks == {"workers/rank0": 0, "workers/rank1": 0, "workers/rank2": 0}
    by_node = {line.split("|")[0]: line.split("|")[1:] for line in lines}
    assert set(by_node) == {info["node"] for info in controller.infos.values()}
    node0 = controller.infos["workers/rank0"]["node"]
    ranks, run_dirs, rank = by_node[node0]
    assert (ranks, rank) == ("0,3", "0") and run_dirs == str(roots[0] / controller.run_id)
