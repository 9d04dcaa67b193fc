"""What a run with ``precision_debugger`` leaves: one msprobe dump per dumped region, step and rank,
listed in the manifest with its step, role, rank and stage; a skip saying why for every other region;
an error record (never an exception into training) with ``strict``."""

from __future__ import annotations

import pytest

pytest.importorskip("msprobe")

import rlprof  # noqa: E402
from msprobe_workload import run, shared_config, tiny_model, write_config  # noqa: E402
from rlprof.analysis.verdict import verdict  # noqa: E402
from rlprof.manifest import read_records  # noqa: E402
from rlprof_msprobe.dumps import details, dump_files  # noqa: E402

A = "actor_rollout_ref.actor.profiler"
G = "global_profiler.global_tool_config.precision_debugger"


def train(save_path, overrides, *, steps=2, models=None, nested=False):
    """Two steps of an actor+rollout+ref process; ``models``: role -> the model its regions name."""
    models = {"actor": tiny_model(), "ref": tiny_model(), "rollout": tiny_model()} if models is None else models
    prof = rlprof.Profiler(None, roles=("actor", "rollout", "ref"), overrides=[
        "global_profiler.tool=precision_debugger", f"global_profiler.steps={list(range(1, steps + 1))}",
        f"global_profiler.save_path={save_path}", f"{A}.enable=true", *overrides])
    for step in range(1, steps + 1):
        prof.start_step(step)
        for role, stage in (("rollout", "generate"), ("ref", "compute_log_prob"), ("actor", "update")):
            model = models.get(role)
            with prof.role(role, stage, module=model):
                if model is not None:
                    run(model)
                if nested and role == "actor":
                    with prof.role("actor", "compute_log_prob", module=model):
                        run(model)
        prof.step_boundary()
    prof.finalize()
    return prof, list(read_records([prof.run.run_dir]))


def of_type(records, kind):
    return [r for r in records if r.get("type") == kind]


def test_one_dump_per_dumped_region_step_and_rank_in_the_manifest_and_the_verdict_is_ok(tmp_path):
    config = shared_config()
    prof, records = train(tmp_path / "profile", [f"{G}.config_path={config}"])
    dumps = [r for r in of_type(records, "artifact") if r.get("kind") == "msprobe_dump"]
    assert sorted((r["step"], r["roles"], r["region"], r["stage"], r["rank"]) for r in dumps) == [
        (1, ["actor"], "actor_update", "actor_update", 0), (1, ["ref"], "ref_compute_log_prob", "ref_compute_log_prob", 0),
        (2, ["actor"], "actor_update", "actor_update", 0), (2, ["ref"], "ref_compute_log_prob", "ref_compute_log_prob", 0)]
    for r in dumps:
        files = dump_files(prof.run.run_dir / r["path"])
        assert len(files) == 1 and r["path"].endswith(f"precision_debugger/{r['region']}")
        [line] = details(prof.run.run_dir / r["path"])
        assert "tensors dumped" in line and "msprobe task statistics, level L0" in line
    skipped = of_type(records, "skip")
    assert {(s["region"], s["reason"]) for s in skipped} == {
        ("rollout_generate", f"rollout_generate is not a precision_debugger stage to dump (stages: actor_update, "
                             "actor_compute_log_prob, ref_compute_log_prob, compute_values, critic_update, compute_rm_score)")}
    assert verdict([tmp_path / "profile"]).ok


def test_stages_narrow_what_is_dumped(tmp_path):
    config = shared_config()
    _, records = train(tmp_path / "profile", [f"{G}.config_path={config}", f"{G}.stages=[actor_update]"])
    dumps = [r["region"] for r in of_type(records, "artifact") if r.get("kind") == "msprobe_dump"]
    assert dumps == ["actor_update", "actor_update"]
    assert "ref_compute_log_prob" in {s["region"] for s in of_type(records, "skip")}


def test_a_region_without_a_model_says_so_once_per_region_and_never_raises(tmp_path):
    config = shared_config()
    _, records = train(tmp_path / "profile", [f"{G}.config_path={config}", f"{G}.stages=[actor_update]"],
                       models={"ref": tiny_model()})
    reasons = [s["reason"] for s in of_type(records, "skip") if s["region"] == "actor_update"]
    assert reasons == ["no model for stage actor_update: the trainer passes none to its region "
                       "(prof.role('actor', ..., module=model))"] * 2  # one per region, each step
    assert not of_type(records, "error")


def test_strict_turns_cannot_dump_into_an_error_record_and_training_goes_on(tmp_path):
    config = shared_config()
    prof, records = train(tmp_path / "profile", [f"{G}.config_path={config}", f"{G}.stages=[actor_update]",
                                                 f"{G}.strict=true"], models={"ref": tiny_model()})
    [error] = [e for e in of_type(records, "error") if e.get("backend") == "precision_debugger"]
    assert error["hook"] == "start_role" and "no model for stage actor_update" in error["error"]
    assert "precision_debugger.strict is true" in error["error"]


def test_a_region_inside_a_dumped_region_cannot_be_dumped_and_says_why(tmp_path):
    config = shared_config()
    _, records = train(tmp_path / "profile", [f"{G}.config_path={config}"], steps=1, nested=True)
    dumps = [r["region"] for r in of_type(records, "artifact") if r.get("kind") == "msprobe_dump"]
    assert dumps == ["ref_compute_log_prob", "actor_update"]
    [inner] = [s for s in of_type(records, "skip") if s["region"] == "actor_compute_log_prob"]
    assert inner["reason"] == "msprobe dumps one region at a time per process and is dumping actor_update"


def test_discrete_mode_dumps_the_same_regions_one_capture_each(tmp_path):
    config = shared_config()
    _, records = train(tmp_path / "profile", [f"{G}.config_path={config}", f"{G}.discrete=true"], steps=1)
    dumps = {r["capture"]: r["region"] for r in of_type(records, "artifact") if r.get("kind") == "msprobe_dump"}
    assert dumps == {"step1.ref_compute_log_prob": "ref_compute_log_prob", "step1.actor_update": "actor_update"}


def test_a_second_config_in_one_process_cannot_apply_and_says_why(tmp_path):
    """msprobe's debugger is one per process, made with the first config it was given."""
    train(tmp_path / "first", [f"{G}.config_path={shared_config()}"], steps=1)
    other = write_config(tmp_path)
    _, records = train(tmp_path / "profile", [f"{G}.config_path={other}", f"{G}.stages=[actor_update]"], steps=1)
    [skip] = [s for s in of_type(records, "skip") if s["region"] == "actor_update"]
    assert skip["reason"] == (f"msprobe's PrecisionDebugger is one per process and was made with {str(shared_config())!r}; "
                              f"this role's config_path {str(other)!r} cannot apply in the same process")
