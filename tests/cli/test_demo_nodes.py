"""``rlprof demo --nodes N``: a simulated cluster of N Ray nodes, each writing under its own root beside
the save path; ``rlprof report <save path>`` then sees every rank, says on which node each file is,
and still gives the timings, and the split inside each region, once the nodes' roots are gone: each
node analysed its own traces and only their rows reached the controller."""

import json
import re
import shutil
import subprocess
import sys

import pytest
from tiers import heavy  # tests/tiers.py


def rlprof(*argv, cwd=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "rlprof.cli", *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)


def test_more_nodes_than_workers_is_refused_before_ray_starts(tmp_path):
    proc = rlprof("demo", "--nodes", "3", "--workers", "2", "--save-path", str(tmp_path / "demo"), timeout=60)
    assert proc.returncode == 2 and "--nodes: got 3; allowed: 1 to --workers (2)" in proc.stderr
    assert not (tmp_path / "demo").exists()


@pytest.mark.slow
def test_demo_on_three_nodes_reports_every_rank_and_where_each_file_lives(tmp_path):
    heavy('an rlprof demo')
    pytest.importorskip("ray")
    pytest.importorskip("rlprof_torch")
    save = tmp_path / "demo"
    proc = rlprof("demo", "--nodes", "3", "--workers", "3", "--save-path", str(save), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "3 simulated nodes" in proc.stdout and "3 Ray nodes" in proc.stdout
    node_roots = tmp_path / "demo-nodes"
    assert sorted(p.name for p in node_roots.iterdir()) == ["node0", "node1", "node2"]
    assert not list(save.rglob("*.json.gz"))  # gather: none: the traces stay on their nodes

    report = rlprof("report", str(save), "--json")
    [run] = json.loads(report.stdout)["runs"]
    assert {p["rank"] for p in run["processes"]} == {0, 1, 2} and len({p["node"] for p in run["processes"]}) == 3
    assert len(run["files"]) == 6 and len({f["node"] for f in run["files"]}) == 3
    for f in run["files"]:
        node_of_rank = {p["rank"]: p["node"] for p in run["processes"]}
        assert f["node"] == node_of_rank[f["rank"]] and f["path"].startswith(str(node_roots)) and f["exists"]

    # Each node analysed its own traces; only their rows crossed, one small file per trace.
    shipped = sorted((save / run["run"] / "breakdown").glob("*.rlprof-breakdown.json"))
    assert len(shipped) == 6
    print("bytes of breakdown rows that crossed to the controller, per trace:", [p.stat().st_size for p in shipped])
    assert all(p.stat().st_size < 64 * 1024 for p in shipped)
    tops = [p.relative_to(save / run["run"]).parts[0] for p in (save / run["run"]).rglob("*") if p.is_file()]
    # no trace here: only the core's own files (the shipped rows, the manifests, the step metrics, the
    # armed run's requests/driver.json, the rollout's request records)
    assert set(tops) <= {"breakdown", "manifest", "step_metrics.jsonl", "requests", "rollout_requests.jsonl.gz"} \
        and tops.count("breakdown") == 6, tops

    shutil.rmtree(node_roots)
    after = rlprof("report", str(save))
    text = after.stdout
    for rank in (0, 1, 2):
        assert f"rank {rank}" in text
    assert "step 1:" in text and "step 2:" in text and "actor_update" in text  # the timings survive the nodes
    assert text.count("(on node ") == 6
    # ... and so does the split inside every region, for every rank, from the rows the nodes shipped
    assert "inside regions (from the traces" in text, text[-3000:]
    [run] = json.loads(rlprof("report", str(save), "--json").stdout)["runs"]
    splits = run["inside"]["splits"]
    regions = {(s["step"], s["region"]) for s in splits}
    assert {"actor_update", "rollout_generate"} <= {region for _, region in regions}
    for step, region in regions:
        assert {s["rank"] for s in splits if (s["step"], s["region"]) == (step, region)} == {0, 1, 2}
    assert not run["inside"]["errors"]
    assert "inside regions" not in rlprof("report", str(save), "--no-traces").stdout


def test_vllm_replicas_on_simulated_nodes_are_refused_before_ray_starts(tmp_path):
    """Until replicas send their records through the controller, a many-node vLLM demo would leave the
    rollout's records on the replicas' nodes: refused, naming both flags."""
    proc = rlprof("demo", "--rollout", "vllm", "--nodes", "2", "--workers", "2", "--save-path", str(tmp_path / "demo"),
                  timeout=60)
    assert proc.returncode == 2 and "--rollout vllm with --nodes 2: not supported yet" in proc.stderr
    assert not (tmp_path / "demo").exists()


@pytest.mark.slow
def test_demo_on_three_nodes_each_node_keeps_its_own_run_budget(tmp_path):
    """The real ``demo --nodes 3`` (4 workers: one node holds two ranks) with a run budget smaller than one
    capture: every rank captures its first step, then capturing stops on every rank, training goes on to the
    end, and each node's count is its own. Under one count for the whole run, a node whose ranks wrote one
    capture could not say it had measured less than the run's total."""
    heavy('an rlprof demo')
    pytest.importorskip("ray")
    pytest.importorskip("rlprof_torch")
    save = tmp_path / "demo"
    proc = rlprof("demo", "--nodes", "3", "--workers", "4", "--steps", "1,2,3", "--save-path", str(save),
                  "global_profiler.run_budget_gb=0.000001", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "budget skipped: rank" in proc.stdout and "over global_profiler.run_budget_gb" in proc.stdout

    [run] = json.loads(rlprof("report", str(save), "--json").stdout)["runs"]
    node_of = {p["rank"]: p["node"] for p in run["processes"]}
    assert sorted(node_of) == [0, 1, 2, 3] and len(set(node_of.values())) == 3
    captured = {(f["rank"], step) for f in run["files"] for step in f["steps"] if f["exists"]}
    skipped = {(s["rank"], step): s for s in run["budget_skipped"] for step in s["steps"]}
    for rank in node_of:
        assert (rank, 1) in captured  # the count starts at zero on every node
        assert skipped[(rank, 3)]["budget"] == "run_budget_gb"  # then every rank of every node stops capturing
        assert not {(rank, step) for step in (1, 2, 3)} & captured & set(skipped)
    bytes_on = {node: sum(f["size"] for f in run["files"] if node_of[f["rank"]] == node) for node in set(node_of.values())}
    for (rank, _step), skip in skipped.items():
        node = node_of[rank]
        assert 0 < skip["measured_bytes"] <= bytes_on[node]  # what this node's ranks wrote, no one else's
    assert max(bytes_on.values()) < sum(bytes_on.values())
    assert {s["steps"][0] for s in run["budget_skipped"]} <= {2, 3}
    assert re.search(r"^step 3 .*actor update .*loss", proc.stdout, re.M)  # training went on to its last step
