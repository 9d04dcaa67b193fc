"""Issue 12's acceptance with the real torch backend, each case in a fresh process (as a rank runs):
nested discrete regions, a continuous run resumed mid-run, colocated actor + critic Profilers.

Each process trains a small model through real Profilers selecting ``torch`` by name (its entry
point), exits, and the test reads the manifest and the Chrome traces torch.profiler wrote.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rlprof.manifest import read_records
from rlprof.installed import discover

pytestmark = pytest.mark.skipif("torch" not in discover(), reason="rlprof-torch is not installed (pip install rlprof-torch)")

SCRIPT = textwrap.dedent("""
    import json, sys
    import torch
    import rlprof

    spec = json.loads(sys.argv[1])
    model = torch.nn.Linear(16, 16)
    batch = torch.randn(8, 16)

    def work():
        model(batch).pow(2).mean().backward()

    profilers = [rlprof.Profiler(spec["config"], rank=0, world_size=1, roles=roles, run_id="acceptance")
                 for roles in spec["profilers"]]
    owner = {role: prof for prof in profilers for role in prof.run.roles}
    for step in spec["steps"]:
        for prof in profilers:
            prof.start_step(step)
        if spec["nested"]:
            with owner["actor"].role("actor", "update"):
                work()
                with owner["ref"].role("ref", "compute_log_prob"), torch.no_grad():
                    model(batch)
        else:
            for role, stage in spec["regions"]:
                with owner[role].role(role, stage):
                    work()
        for prof in profilers:
            prof.step_boundary()
    for prof in profilers:
        prof.finalize()
""")


def config(save_path: Path, *, steps, discrete=False, continuous=False, roles=("actor",)) -> dict:
    section = {"enable": True, "all_ranks": True, "tool_config": {"torch": {"discrete": discrete}}}
    out = {"global_profiler": {"tool": "torch", "steps": list(steps), "save_path": str(save_path),
                               "profile_continuous_steps": continuous}}
    if "actor" in roles:
        out["actor_rollout_ref"] = {"actor": {"profiler": section}}
    if "critic" in roles:
        out["critic"] = {"profiler": section}
    return out


def run_process(tmp_path: Path, **spec) -> Path:
    spec.setdefault("nested", False)
    spec.setdefault("regions", [])
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert proc.returncode == 0, f"the training process failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return tmp_path / "profile" / "acceptance"


def trace_of(run_dir: Path, record: dict) -> list[dict]:
    with gzip.open(run_dir / record["path"], "rt") as handle:
        return json.load(handle)["traceEvents"]


def ranges(events: list[dict], name: str) -> list[dict]:
    return [e for e in events if e.get("cat") == "user_annotation" and e.get("name") == name]


def records(run_dir: Path, kind: str) -> list[dict]:
    return [r for r in read_records([run_dir]) if r["type"] == kind]


def test_discrete_nested_regions_give_a_trace_per_step_with_the_inner_range_inside(tmp_path):
    run_dir = run_process(tmp_path, config=config(tmp_path / "profile", steps=(1, 2), discrete=True),
                          profilers=[["actor", "ref"]], steps=[1, 2, 3], nested=True)
    assert records(run_dir, "error") == []
    artifacts = records(run_dir, "artifact")
    assert [a["capture"] for a in artifacts] == ["step1.actor_update", "step2.actor_update"]
    for record in artifacts:
        events = trace_of(run_dir, record)
        [outer], [inner] = ranges(events, "actor_update"), ranges(events, "ref_compute_log_prob")
        assert outer["ts"] <= inner["ts"] and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"]
    timed = [(r["step"], r["region"], r["parent"], r["depth"], r["capture"]) for r in records(run_dir, "region")]
    assert timed == [(1, "ref_compute_log_prob", "actor_update", 1, "step1.actor_update"),
                     (1, "actor_update", None, 0, "step1.actor_update"),
                     (2, "ref_compute_log_prob", "actor_update", 1, "step2.actor_update"),
                     (2, "actor_update", None, 0, "step2.actor_update")]


def test_a_continuous_run_resumed_mid_run_gives_one_trace_over_the_steps_seen(tmp_path):
    run_dir = run_process(tmp_path, config=config(tmp_path / "profile", steps=(1, 2, 3), continuous=True),
                          profilers=[["actor"]], steps=[2, 3, 4], regions=[["actor", "update"]])
    assert records(run_dir, "error") == []
    [artifact] = records(run_dir, "artifact")
    assert artifact["capture"] == "step2-3" and artifact["steps"] == [2, 3]
    events = trace_of(run_dir, artifact)
    assert len(ranges(events, "actor_update")) == 2
    assert [e["name"] for e in ranges(events, "ProfilerStep#2") + ranges(events, "ProfilerStep#3")] == [
        "ProfilerStep#2", "ProfilerStep#3"]
    assert [r["step"] for r in records(run_dir, "step")] == [2, 3]


def test_colocated_actor_and_critic_profilers_share_one_trace_per_step(tmp_path):
    run_dir = run_process(tmp_path, config=config(tmp_path / "profile", steps=(1, 2), roles=("actor", "critic")),
                          profilers=[["actor"], ["critic"]], steps=[1, 2, 3],
                          regions=[["actor", "update"], ["critic", "update"]])
    assert records(run_dir, "error") == []
    artifacts = records(run_dir, "artifact")
    assert [a["capture"] for a in artifacts] == ["step1", "step2"]  # one torch.profiler session per step, shared
    paths = [run_dir / a["path"] for a in artifacts]
    assert len(set(paths)) == 2 and all(p.stat().st_size == a["size"] > 0 for p, a in zip(paths, artifacts))
    for record in artifacts:
        events = trace_of(run_dir, record)
        assert len(ranges(events, "actor_update")) == 1 and len(ranges(events, "critic_update")) == 1
    manifests = list((run_dir / "manifest").iterdir())
    assert len(manifests) == 1  # one process, one manifest file: nothing overwritten
    processes = records(run_dir, "process")
    assert sorted(tuple(p["roles"]) for p in processes) == [("actor",), ("critic",)]
    assert [f["reason"] for f in records(run_dir, "finalized")] == ["end", "end"]
