"""Bad input: one exception type whose message names the key path, the bad value and what is allowed."""

import pytest

import rlprof
from rlprof import ConfigError, load_config
from rlprof.runtime.plan import resolve_plan

BASE = ["global_profiler.tool=recorder", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true"]


def err(overrides, **plan):
    with pytest.raises(ConfigError) as info:
        cfg = load_config(None, overrides)
        if plan:
            resolve_plan(cfg, **plan)
    return str(info.value)


def test_config_error_is_a_value_error():
    assert issubclass(ConfigError, ValueError)


def test_typo_in_global_key_has_did_you_mean():
    msg = err(["global_profiler.stesp=[1]"])
    assert msg.startswith("global_profiler.stesp: unknown key (did you mean 'steps'?)")
    assert "save_path" in msg


def test_typo_in_role_key_has_did_you_mean():
    msg = err(BASE + ["actor_rollout_ref.actor.profiler.all_rank=true"])
    assert "actor_rollout_ref.actor.profiler.all_rank: unknown key (did you mean 'all_ranks'?)" in msg


def test_typo_in_section_names():
    assert "global_profilr: unknown top-level section (did you mean 'global_profiler'?)" in err(["global_profilr.steps=[1]"])
    assert "actor_rollout_ref.actor.profiller: unknown key (did you mean 'profiler'?)" in err(["actor_rollout_ref.actor.profiller.enable=true"])


def test_unknown_tool_section():
    msg = err(BASE + ["actor_rollout_ref.actor.profiler.tool_config.nsyss.discrete=true"])
    assert "actor_rollout_ref.actor.profiler.tool_config.nsyss: unknown key (did you mean 'nsys'?)" in msg


def test_bad_ranks_type():
    msg = err(BASE + ["actor_rollout_ref.actor.profiler.ranks=zero"])
    assert msg == "actor_rollout_ref.actor.profiler.ranks: got 'zero' (str); allowed: a list of non-negative integer ranks, e.g. [0, 1] ([] collects nothing)"
    assert "got [0, -1] (list)" in err(BASE + ["actor_rollout_ref.actor.profiler.ranks=[0,-1]"])


def test_bad_steps_and_bools():
    assert "global_profiler.steps: got 'all' (str); allowed: a list of step numbers counted from 1" in err(["global_profiler.steps=all"])
    assert "global_profiler.steps: got [1, 1] (list); allowed: each step at most once" in err(["global_profiler.steps=[1,1]"])
    assert "actor_rollout_ref.actor.profiler.enable: got 'maybe' (str); allowed: true or false" in err(["actor_rollout_ref.actor.profiler.enable=maybe"])


def test_rank_outside_world():
    msg = err(BASE + ["actor_rollout_ref.actor.profiler.ranks=[0,8]"], rank=0, world_size=8, roles=("actor",))
    assert msg == "actor_rollout_ref.actor.profiler.ranks: got [0, 8]; allowed: ranks 0..7 (rank 8 is outside a world of 8)"


def test_replica_rank_outside_replicas():
    msg = err(BASE + ["actor_rollout_ref.rollout.mode=async", "actor_rollout_ref.rollout.profiler.enable=true",
                      "actor_rollout_ref.rollout.profiler.ranks=[2]", "actor_rollout_ref.rollout.profiler.tool_config.recorder.discrete=true"],
              rank=0, world_size=8, roles=("rollout",), replica_rank=0, num_replicas=2)
    assert "replica ranks 0..1 (replica rank 2 is outside a world of 2)" in msg


def test_discrete_with_continuous_steps():
    msg = err(BASE + ["global_profiler.profile_continuous_steps=true", "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true"])
    assert msg.startswith("global_profiler.profile_continuous_steps: got True together with discrete mode for actor")
    assert "set discrete=false or profile_continuous_steps=false" in msg


def test_disagreeing_colocated_roles():
    msg = err(BASE + ["actor_rollout_ref.actor.profiler.all_ranks=true",
                      "actor_rollout_ref.ref.profiler.enable=true", "actor_rollout_ref.ref.profiler.all_ranks=true",
                      "actor_rollout_ref.ref.profiler.tool_config.recorder.discrete=true"],
              rank=0, world_size=2, roles=("actor", "ref"))
    assert msg.startswith("roles ref and actor share this process (rank 0) but disagree on discrete")
    assert "actor_rollout_ref.ref.profiler is discrete, actor_rollout_ref.actor.profiler is end-to-end" in msg


def test_disagreeing_roles_in_different_processes_are_fine():
    cfg = load_config(None, BASE + ["actor_rollout_ref.actor.profiler.all_ranks=true", "critic.profiler.enable=true",
                                    "critic.profiler.all_ranks=true", "critic.profiler.tool_config.recorder.discrete=true"])
    assert not resolve_plan(cfg, rank=0, world_size=2, roles=("actor",)).discrete
    assert resolve_plan(cfg, rank=0, world_size=2, roles=("critic",)).discrete


def test_discrete_disagreeing_inside_one_role_between_tools():
    msg = err(["global_profiler.tool=[recorder,recorder2]", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
               "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true",
               "actor_rollout_ref.actor.profiler.tool_config.recorder2.discrete=false"])
    assert "actor_rollout_ref.actor.profiler: discrete disagrees between" in msg


def test_bad_tool_value():
    assert "global_profiler.tool: got 5 (int); allowed: a backend name, a list of names" in err(["global_profiler.tool=5"])


def test_empty_ranks_warns_that_it_collects_nothing():
    cfg = load_config(None, BASE)
    assert any("enable=true but ranks=[] and all_ranks=false: this role collects nothing" in w for w in cfg.warnings)
    assert not resolve_plan(cfg, rank=0, world_size=1, roles=("actor",)).active


def test_unknown_tool_names_package_and_installed(test_backends, save_path):
    with pytest.raises(rlprof.BackendError) as info:
        rlprof.Profiler(None, overrides=["global_profiler.tool=torchh", f"global_profiler.save_path={save_path}",
                                         "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                         "actor_rollout_ref.actor.profiler.all_ranks=true"])
    msg = str(info.value)
    assert "global_profiler.tool: got 'torchh', but no installed backend has that name" in msg
    assert "recorder" in msg and "faulty" in msg


def test_unknown_tool_of_ours_names_its_package(monkeypatch):
    from rlprof.runtime import registry

    monkeypatch.setattr(registry, "discover", lambda: {})
    err_ = registry.not_installed_error("nsys", [])
    assert "It is provided by the package 'rlprof-nsys': pip install rlprof-nsys." in str(err_)
    assert "Installed backends: (none)" in str(err_)


def test_broken_backend_import_names_entry_point_distribution_version(test_backends):
    from rlprof.runtime.registry import load_backend

    with pytest.raises(rlprof.BackendError) as info:
        load_backend("broken")
    msg = str(info.value)
    assert msg.startswith('backend "broken" (rlprof-test-backends 0.0.1): import failed: ')
    assert "ModuleNotFoundError: No module named 'rlprof_this_module_does_not_exist'" in msg
    assert "(entry point rlprof_test_backends.broken:Broken)" in msg


def test_misspelled_hook_fails_at_load(test_backends, save_path):
    import pluggy

    with pytest.raises(pluggy.PluginValidationError, match="start_stepp"):
        rlprof.Profiler(None, overrides=["global_profiler.tool=misspelled", f"global_profiler.save_path={save_path}",
                                         "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                         "actor_rollout_ref.actor.profiler.all_ranks=true"])


def test_backend_validation_error_is_raised_at_creation(test_backends, save_path):
    with pytest.raises(ConfigError, match=r"tool_config.faulty.fail_in: got 'nope'; allowed: start_step"):
        rlprof.Profiler(None, overrides=["global_profiler.tool=faulty", f"global_profiler.save_path={save_path}",
                                         "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                                         "actor_rollout_ref.actor.profiler.all_ranks=true",
                                         "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in=[nope]"])


def test_config_sources_agree(tmp_path):
    from omegaconf import OmegaConf

    data = {"global_profiler": {"tool": "torch", "steps": [2, 4]}, "critic": {"profiler": {"enable": True, "ranks": [1]}}}
    path = tmp_path / "c.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(data)))
    from_dict = load_config(data)
    from_yaml = load_config(path)
    from_omega = load_config(OmegaConf.create(data))
    from_overrides = load_config(None, ["global_profiler.tool=torch", "global_profiler.steps=[2,4]", "critic.profiler.enable=true", "critic.profiler.ranks=[1]"])
    assert from_dict.global_ == from_yaml.global_ == from_omega.global_ == from_overrides.global_
    assert from_dict.roles == from_yaml.roles == from_omega.roles == from_overrides.roles
    # overrides win over the file
    assert load_config(path, ["global_profiler.steps=[7]", "+global_profiler.tool=nsys"]).global_.steps == (7,)


def test_missing_file_and_bad_override():
    assert "config file 'nope.yaml': not found" in err_source("nope.yaml")
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(None, ["global_profiler.steps"])


def err_source(source):
    with pytest.raises(ConfigError) as info:
        load_config(source)
    return str(info.value)


def test_a_parsed_config_reloaded_with_overrides_keeps_its_roles():
    cfg = load_config(None, ["global_profiler.tool=torch", "global_profiler.steps=[1]", "actor_rollout_ref.rollout.mode=async",
                             "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[1]"])
    moved = cfg.with_overrides(save_path="/tmp/elsewhere")
    again = load_config(moved, ["global_profiler.steps=[2]"])
    assert again.roles == cfg.roles and again.agent_loop
    assert again.global_.steps == (2,) and again.global_.save_path == "/tmp/elsewhere"
    caller = load_config(cfg.with_overrides(caller_steps=True), ["global_profiler.save_path=x"])
    assert caller.global_.caller_steps


def test_the_legacy_migration_does_not_import_the_config_schema():
    """rlprof.roles and rlprof.config.values end the schema <-> legacy import circle (the layer test,
    tests/architecture/test_layers.py, forbids every circle; this names the one that existed)."""
    import ast
    from pathlib import Path

    import rlprof.config.legacy as legacy

    tree = ast.parse(Path(legacy.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not {name for name in imported if name in ("rlprof.config", "rlprof.config.schema")}


def test_nest_profiler_puts_a_section_at_the_role_path():
    from rlprof.roles import nest_profiler

    doc = {"actor_rollout_ref": {"rollout": {"mode": "async"}}}
    nest_profiler(doc, "rollout", {"enable": True})
    nest_profiler(doc, "reward", {"enable": False})
    assert doc == {"actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {"enable": True}}},
                   "reward_model": {"profiler": {"enable": False}}}
