"""The exact hook sequence a backend receives, through a real pip-installed distribution.

The ``recorder`` backend comes from tests/fixtures/rlprof-test-backends, installed by pip and found
through the ``rlprof.backends`` entry point (see conftest.py); nothing is monkeypatched.
"""

import json
from importlib import metadata

import pytest

import rlprof
from rlprof.manifest import read_records


def run_loop(save_path, overrides, *, rank=0, world=2, roles=("actor", "ref"), steps=3, tool="recorder"):
    prof = rlprof.Profiler(None, rank=rank, world_size=world, roles=roles, overrides=[
        f"global_profiler.tool={tool}", f"global_profiler.save_path={save_path}", *overrides])
    for step in range(1, steps + 1):
        prof.start_step(step)
        if "ref" in roles:
            with prof.role("ref", "compute_log_prob"):
                pass
        if "actor" in roles:
            with prof.role("actor", "update"):
                pass
        prof.step_boundary()
    prof.finalize()
    return prof


def seq(prof, name="recorder"):
    return prof.backends.plugins[name].sequence() if prof.backends else []


def test_found_through_entry_point(test_backends):
    eps = {ep.name: ep for ep in metadata.entry_points(group="rlprof.backends")}
    assert eps["recorder"].dist.metadata["Name"] == "rlprof-test-backends"


def test_end_to_end(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[1,3]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.all_ranks=true"])
    # ref follows actor (no section of its own)
    assert seq(prof) == [
        "start_step:1+", "start_role:ref_compute_log_prob", "stop_role:ref_compute_log_prob",
        "start_role:actor_update", "stop_role:actor_update", "step_boundary:1-",
        "start_step:3+", "start_role:ref_compute_log_prob", "stop_role:ref_compute_log_prob",
        "start_role:actor_update", "stop_role:actor_update", "step_boundary:3-",
        "finalize:None",
    ]
    files = sorted(a["path"] for a in prof.artifacts)
    assert files == [f"step1/rank0-{prof.run.host}-{prof.run.pid}/recorder/calls.json",
                     f"step3/rank0-{prof.run.host}-{prof.run.pid}/recorder/calls.json"]
    trace = json.loads((prof.run.run_dir / files[0]).read_text())
    assert [c[1].get("region") for c in trace["calls"] if c[0] == "start_role"] == ["ref_compute_log_prob", "actor_update"]


def test_discrete(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[2]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.all_ranks=true",
                                "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true"])
    assert seq(prof) == [
        "start_step:2", "start_role:ref_compute_log_prob+", "stop_role:ref_compute_log_prob-",
        "start_role:actor_update+", "stop_role:actor_update-", "step_boundary:2", "finalize:None",
    ]
    assert sorted(a["capture"] for a in prof.artifacts) == ["step2.actor_update", "step2.ref_compute_log_prob"]
    assert {a["roles"][0] for a in prof.artifacts} == {"actor", "ref"}


def test_continuous_steps(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[1,2,3]", "global_profiler.profile_continuous_steps=true",
                                "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"],
                    roles=("actor",), steps=4)
    assert seq(prof) == [
        "start_step:1+", "start_role:actor_update", "stop_role:actor_update", "step_boundary:1",
        "start_step:2", "start_role:actor_update", "stop_role:actor_update", "step_boundary:2",
        "start_step:3", "start_role:actor_update", "stop_role:actor_update", "step_boundary:3-",
        "finalize:None",
    ]
    assert [a["capture"] for a in prof.artifacts] == ["step1-3"]
    assert prof.artifacts[0]["steps"] == [1, 2, 3]


@pytest.mark.parametrize("rank, expected_active", [(0, False), (1, True)])
def test_rank_subsets(test_backends, save_path, rank, expected_active):
    prof = run_loop(save_path, ["global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.ranks=[1]"], rank=rank)
    assert prof.active is expected_active
    if not expected_active:
        assert prof.backends is None  # backends not even imported on an unselected rank
        # no capture and no manifest: only the rank's step metrics (its regions are timed on every rank), and
        # rank 0's answer to rlprof capture for every rank of the armed run (issue 42), selected here or not
        assert sorted(p.relative_to(save_path).parts[1:] for p in save_path.rglob("*") if p.is_file()) == [
            ("requests", "driver.json"), ("step_metrics", f"rank0-{prof.run.host}-{prof.run.pid}.jsonl")]
    else:
        assert seq(prof)[0] == "start_step:1+"


def test_roles_follow_actor_only_when_absent(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.all_ranks=true",
                                "actor_rollout_ref.ref.profiler.enable=false"])
    assert seq(prof) == ["start_step:1+", "start_role:actor_update", "stop_role:actor_update", "step_boundary:1-", "finalize:None"]


def test_process_hosting_actor_and_ref_shares_one_capture(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.all_ranks=true",
                                "actor_rollout_ref.ref.profiler.enable=true", "actor_rollout_ref.ref.profiler.all_ranks=true"], steps=1)
    assert len(prof.artifacts) == 1
    assert prof.artifacts[0]["roles"] == ["actor", "ref"]


def test_two_tools_at_once(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.all_ranks=true"], tool="[recorder,recorder2]", steps=1)
    assert seq(prof, "recorder") == seq(prof, "recorder2")
    assert sorted(a["backend"] for a in prof.artifacts) == ["recorder", "recorder2"]


def test_sampled_region_windows(test_backends, save_path):
    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true",
        "actor_rollout_ref.actor.profiler.schedule.wait=1", "actor_rollout_ref.actor.profiler.schedule.active=2",
        "actor_rollout_ref.actor.profiler.schedule.repeat=2"])
    prof.start_step(1)
    with prof.role("actor", "update"):
        for _ in range(8):
            with prof.iteration():
                pass
    prof.step_boundary()
    prof.finalize()
    calls = [c for c in prof.backends.plugins["recorder"].calls if c[0] in ("start_role", "stop_role", "iteration_boundary", "step_boundary")]
    assert [(h, f.get("iterations"), f.get("iteration")) for h, f in calls] == [
        ("start_role", (1, 1), None), ("iteration_boundary", None, 1), ("stop_role", (1, 2), None),
        ("start_role", (4, 4), None), ("iteration_boundary", None, 4), ("stop_role", (4, 5), None),
        ("step_boundary", None, None),
    ]
    assert [a["capture"] for a in prof.artifacts] == ["step1.actor_update", "step1.actor_update.1"]
    assert [a["iterations"] for a in prof.artifacts] == [[1, 2], [4, 5]]


def test_manifest_lists_every_artifact_with_its_fields(test_backends, save_path):
    prof = run_loop(save_path, ["global_profiler.steps=[1,2]", "actor_rollout_ref.actor.profiler.enable=true",
                                "actor_rollout_ref.actor.profiler.all_ranks=true"], rank=1)
    records = list(read_records([save_path]))
    kinds = [r["type"] for r in records]
    assert kinds[0] == "process" and kinds[-1] == "finalized"
    artifacts = [r for r in records if r["type"] == "artifact"]
    assert [(a["step"], a["rank"], a["backend"], a["run"]) for a in artifacts] == [(1, 1, "recorder", prof.run.run_id), (2, 1, "recorder", prof.run.run_id)]
    for a in artifacts:
        assert (save_path / a["run"] / a["path"]).stat().st_size == a["size"] > 0
        assert a["host"] == prof.run.host and a["pid"] == prof.run.pid


def test_two_runs_never_overwrite(test_backends, save_path):
    args = ["global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"]
    first = run_loop(save_path, args, steps=1)
    second = run_loop(save_path, args, steps=1)
    assert first.run.run_id != second.run.run_id
    paths = [first.run.run_dir / a["path"] for a in first.artifacts] + [second.run.run_dir / a["path"] for a in second.artifacts]
    assert len(set(paths)) == 2 and all(p.exists() for p in paths)


def test_decorated_function_is_a_region(test_backends, save_path):
    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[2]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])

    @prof.role("actor", "update")
    def update(x):
        return x * 2

    for step in (1, 2):
        prof.start_step(step)
        assert update(step) == step * 2
        prof.step_boundary()
    prof.finalize()
    assert seq(prof) == ["start_step:2+", "start_role:actor_update", "stop_role:actor_update", "step_boundary:2-", "finalize:None"]


def test_sampled_region_without_iteration_marks_warns_once(test_backends, save_path, caplog):
    import logging

    prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        "actor_rollout_ref.actor.profiler.schedule.active=1"])
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        for step in (1, 2):
            prof.start_step(step)
            with prof.role("actor", "update"):
                pass
            prof.step_boundary()
    prof.finalize()
    warned = [r for r in caplog.records if "marked no iterations" in r.getMessage()]
    assert len(warned) == 1 and "actor_update" in warned[0].getMessage()


def test_trace_switch_prints_every_hook_call(test_backends, save_path, monkeypatch, capsys):
    monkeypatch.setenv("RLPROF_TRACE_HOOKS", "1")
    run_loop(save_path, ["global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                         "actor_rollout_ref.actor.profiler.all_ranks=true"], roles=("actor",), steps=1)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlprof[")]
    calls = [line.split("] ", 1)[1].split("(")[0] for line in lines]
    assert calls == ["recorder.validate_tool_config", "recorder.start_step", "recorder.start_role",
                     "recorder.stop_role", "recorder.step_boundary", "recorder.finalize"]
    assert "rank0" in lines[0] and "actor_update" in lines[2]
