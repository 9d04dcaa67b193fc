"""``tool_config.precision_debugger`` as verl writes it: accepted, normalised, or refused naming the key,
the bad value and what is allowed; refused before training without msprobe."""

from __future__ import annotations

import sys

import pytest

from rlprof import ConfigError
from rlprof.runtime.checking import check_config
from rlprof_msprobe.settings import STAGES, precision_settings

A = "actor_rollout_ref.actor.profiler"


def test_verls_generated_section_is_accepted():
    """verl 0.9.1's PrecisionDebuggerToolConfig defaults, with its bookkeeping ``name`` and deprecated ``steps``."""
    settings = precision_settings({"name": "precision_debugger", "config_path": None, "steps": None, "stages": None,
                                   "strict": False})
    assert settings.as_tool_config() == {"config_path": None, "stages": None, "strict": False}


def test_stages_are_verls_names_and_rollout_generate_is_accepted_and_never_dumped():
    settings = precision_settings({"stages": ["actor_update", "compute_values", "rollout_generate"]})
    assert settings.stages == ("actor_update", "compute_values")
    assert settings.stage_of("actor_update") == "actor_update"
    assert settings.stage_of("critic_compute_values") == "compute_values"
    assert settings.stage_of("ref_compute_log_prob") is None
    assert settings.stage_of("rollout_generate") is None


def test_an_unknown_stage_is_refused_with_the_allowed_list():
    with pytest.raises(ConfigError) as info:
        precision_settings({"stages": ["actor_updat"]}, "global_profiler.global_tool_config.precision_debugger")
    assert str(info.value) == (
        "global_profiler.global_tool_config.precision_debugger.stages: got 'actor_updat' (str); allowed: null or a list "
        f"drawn from {', '.join(STAGES)} (rollout_generate is accepted and never dumped)")


def test_strict_refuses_what_cannot_dump_before_training(tmp_path):
    with pytest.raises(ConfigError, match=r"t\.config_path: config_path is null: msprobe needs its JSON config"):
        precision_settings({"strict": True}, "t")
    with pytest.raises(ConfigError, match=r"msprobe's config '.*missing.json' cannot be read: FileNotFoundError"):
        precision_settings({"strict": True, "config_path": str(tmp_path / "missing.json")}, "t")
    (tmp_path / "list.json").write_text("[1]")
    with pytest.raises(ConfigError, match="holds list, not a JSON object"):
        precision_settings({"strict": True, "config_path": str(tmp_path / "list.json")}, "t")
    # without strict the same sections pass: each region says why it dumped nothing instead
    assert precision_settings({"config_path": str(tmp_path / "missing.json")}).config_path.endswith("missing.json")


def test_bad_values_name_the_key():
    with pytest.raises(ConfigError, match=r"t\.strict: got 'yes' \(str\); allowed: true or false"):
        precision_settings({"strict": "yes"}, "t")
    with pytest.raises(ConfigError, match=r"t\.config_path: got 3 \(int\)"):
        precision_settings({"config_path": 3}, "t")
    with pytest.raises(ConfigError, match=r"t\.stage: unknown key \(did you mean 'stages'\?\)"):
        precision_settings({"stage": ["actor_update"]}, "t")


def test_without_msprobe_the_tool_is_refused_before_training_naming_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "msprobe", None)  # as if mindstudio-probe were not installed (find_spec: None)
    with pytest.raises(ConfigError) as info:
        check_config(None, ["global_profiler.tool=precision_debugger", "global_profiler.steps=[1]", f"{A}.enable=true"],
                     world_size=2)
    assert "precision_debugger needs msprobe, which is not installed: pip install mindstudio-probe==26.2.0" in str(info.value)

