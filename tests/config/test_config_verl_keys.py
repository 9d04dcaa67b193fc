"""Keys verl accepts that rlprof used to refuse (issue 24): the legacy ``npu_profile.options.roles``
filter, ``global_profiler.discrete`` from verl's nsight guide, and the ``precision_debugger`` tool
(msprobe's PrecisionDebugger: the ``rlprof-msprobe`` backend, refused naming it when not installed)."""

import pytest

from rlprof import ConfigError, load_config
from rlprof.runtime.checking import check_config

A = "actor_rollout_ref.actor.profiler"
NPU_ERA = {"trainer": {"profile_steps": [1]},
           "actor_rollout_ref": {"profiler": {"discrete": True, "all_ranks": True, "ranks": []}}}


def npu_era(roles, **sections):
    options = {"save_path": "./profiler_data", "roles": roles, "level": "level0", "with_npu": True, "with_cpu": True}
    return {**NPU_ERA, "npu_profile": {"options": options}, **sections}


def enabled(cfg):
    return {role: cfg.roles[role].enable for role in ("actor", "rollout", "ref")}


# ------------------------------------------------------------------ npu_profile.options.roles


def test_roles_all_keeps_every_role_and_says_the_key_is_deprecated():
    cfg = load_config(npu_era(["all"]))
    assert enabled(cfg) == {"actor": True, "rollout": True, "ref": True}
    assert ("npu_profile.options.roles=[all] is deprecated: every role is selected by its profiler.enable "
            "(rollout and ref follow the actor's)") in cfg.warnings


def test_listed_regions_enable_their_roles_and_switch_the_others_off():
    cfg = load_config(npu_era(["actor_update", "rollout_generate"]))
    assert enabled(cfg) == {"actor": True, "rollout": True, "ref": False}
    rollout = cfg.roles["rollout"]
    assert rollout.follows is None and rollout.discrete and rollout.all_ranks  # the actor's settings, its own enable
    assert cfg.roles["actor"].tool_config["npu"]["level"] == "level0"
    assert rollout.tool_config == cfg.roles["actor"].tool_config  # whatever order the options came in
    assert ("npu_profile.options.roles=[actor_update, rollout_generate] is deprecated: use "
            f"{A}.enable=true, actor_rollout_ref.rollout.profiler.enable=true, actor_rollout_ref.ref.profiler.enable=false "
            "(actor_update selects the whole actor role: actor_compute_log_prob is profiled too)") in cfg.warnings


def test_an_enable_the_user_wrote_wins_over_the_filter():
    cfg = load_config(npu_era(["ref_compute_log_prob"], actor_rollout_ref={
        **NPU_ERA["actor_rollout_ref"], "actor": {"profiler": {"enable": True, "all_ranks": True}}}))
    assert enabled(cfg) == {"actor": True, "rollout": False, "ref": True}


def test_a_rollout_section_that_is_not_a_mapping_is_named_not_a_traceback():
    with pytest.raises(ConfigError) as info:
        load_config(npu_era(["actor_update"], actor_rollout_ref={**NPU_ERA["actor_rollout_ref"], "rollout": {"profiler": [1]}}))
    assert info.value.key == "actor_rollout_ref.rollout.profiler"


@pytest.mark.parametrize("roles, shown", [
    (["actor_updat"], "got 'actor_updat' (did you mean 'actor_update'?)"),
    ([1], "got [1] (list)"),
    ([], "got [] (list)"),
])
def test_a_bad_roles_filter_is_named(roles, shown):
    with pytest.raises(ConfigError) as info:
        load_config(npu_era(roles))
    assert str(info.value).startswith(f"npu_profile.options.roles: {shown}; allowed: a list of all, rollout_generate, "
                                      "actor_compute_log_prob, actor_update, ref_compute_log_prob")
    assert info.value.key == "npu_profile.options.roles"


def test_verls_own_npu_profile_yaml_is_accepted():
    import os

    import yaml

    verl = pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")
    shipped = os.path.join(os.path.dirname(verl.__file__), "trainer", "config", "npu_profile", "npu_profile.yaml")
    with open(shipped) as f:
        options = yaml.safe_load(f)
    cfg = load_config({**NPU_ERA, "trainer": {"profile_steps": [1], "npu_profile": options}})
    assert cfg.global_.tools == ("npu",) and enabled(cfg) == {"actor": True, "rollout": True, "ref": True}
    assert cfg.roles["actor"].tool_config["npu"]["contents"] == ["npu", "cpu"]


# ------------------------------------------------------------------ global_profiler.discrete


def test_global_discrete_applies_to_roles_that_say_nothing():
    cfg = load_config(None, ["global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]", "global_profiler.discrete=true",
                             f"{A}.enable=true", f"{A}.all_ranks=true", "critic.profiler.enable=true",
                             "critic.profiler.all_ranks=true", "critic.profiler.tool_config.nsys.discrete=false"])
    assert cfg.roles["actor"].discrete and cfg.roles["rollout"].discrete  # rollout follows the actor
    assert not cfg.roles["critic"].discrete  # a role's own setting wins


def test_global_discrete_beats_the_defaults_of_verls_generated_config(verl_generated_config):
    """verl's generated tool sections carry discrete: false (nsys by interpolation of
    global_tool_config.nsys.discrete): those are defaults, so the guide's global_profiler.discrete counts."""
    result = check_config(verl_generated_config, ["global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]",
                                                  "global_profiler.discrete=true", f"{A}.enable=true", f"{A}.all_ranks=true"],
                          validate_backends=False)
    assert result.config.roles["actor"].discrete
    off = check_config(verl_generated_config, ["global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]",
                                               f"{A}.enable=true", f"{A}.all_ranks=true"], validate_backends=False)
    assert not off.config.roles["actor"].discrete


def test_global_discrete_and_continuous_steps_are_an_error_as_anywhere():
    with pytest.raises(ConfigError) as info:
        load_config(None, ["global_profiler.tool=nsys", "global_profiler.steps=[1,2]", "global_profiler.discrete=true",
                           "global_profiler.profile_continuous_steps=true", f"{A}.enable=true", f"{A}.all_ranks=true"])
    assert info.value.key == "global_profiler.profile_continuous_steps"


def test_global_discrete_must_be_a_boolean():
    with pytest.raises(ConfigError) as info:
        load_config({"global_profiler": {"discrete": "yes"}})
    assert str(info.value) == "global_profiler.discrete: got 'yes' (str); allowed: true or false"


# ------------------------------------------------------------------ precision_debugger


def test_precision_debugger_is_a_tool_like_the_others():
    """It used to be dropped from the tools with a warning (no backend); rlprof-msprobe provides it now."""
    cfg = load_config(None, ["global_profiler.tool=[torch,precision_debugger]", "global_profiler.steps=[1]",
                             f"{A}.enable=true", f"{A}.all_ranks=true",
                             f"{A}.tool_config.precision_debugger.stages=[actor_update]"])
    assert cfg.global_.tools == ("torch", "precision_debugger")
    assert [w for w in cfg.warnings if "precision_debugger" in w] == []


def test_precision_debugger_without_its_plugin_is_refused_before_training_naming_the_package(monkeypatch):
    import rlprof.installed
    import rlprof.runtime.registry

    def without_msprobe(group=rlprof.installed.GROUP):
        return {n: ep for n, ep in found(group).items() if n != "precision_debugger"}

    found = rlprof.installed.discover
    monkeypatch.setattr(rlprof.installed, "discover", without_msprobe)
    monkeypatch.setattr(rlprof.runtime.registry, "discover", without_msprobe)
    with pytest.raises(ConfigError) as info:
        check_config(None, ["global_profiler.tool=precision_debugger", "global_profiler.steps=[1]",
                            f"{A}.enable=true", f"{A}.all_ranks=true"], world_size=1)
    assert ("global_profiler.tool: got 'precision_debugger', but no installed backend has that name. It is provided "
            "by the package 'rlprof-msprobe': pip install rlprof-msprobe.") in str(info.value)
