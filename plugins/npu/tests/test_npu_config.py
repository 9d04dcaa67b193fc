"""``tool_config.npu``: what is accepted, what it normalises to, and the errors for the rest
(through ``rlprof check``, as a user meets them: exit 2, key path, bad value, allowed values)."""

from __future__ import annotations

import pytest

from rlprof.cli import main as rlprof_main
from rlprof_npu.settings import npu_settings

KEY = "actor_rollout_ref.actor.profiler.tool_config.npu"
BASE = ["global_profiler.tool=npu", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"]


@pytest.mark.parametrize("override,expected", [
    (f"{KEY}.level=level3", [f"{KEY}.level: got 'level3'", "level_none, level0, level1, level2"]),
    (f"{KEY}.contents=[npu,gpu]", [f"{KEY}.contents: got 'gpu'", "npu, cpu, memory, shapes, module, stack"]),
    (f"{KEY}.contents=npu", [f"{KEY}.contents: got 'npu' (str)", "a list of"]),
    (f"{KEY}.analysis=maybe", [f"{KEY}.analysis: got 'maybe'", "true or false"]),
    (f"{KEY}.export_type=json", [f"{KEY}.export_type: got 'json'", "db or text"]),
    (f"{KEY}.with_memory=true", [f"{KEY}.with_memory: unknown key", "analysis, contents, export_type, flops, level"]),
    (f"{KEY}.levle=level1", [f"{KEY}.levle: unknown key (did you mean 'level'?)"]),
])
def test_bad_values_are_config_errors_naming_key_value_and_allowed(capsys, override, expected):
    assert rlprof_main(["check", *BASE, override]) == 2
    err = capsys.readouterr().err
    for text in expected:
        assert text in err


def test_verl_generated_section_is_accepted(capsys):
    """verl's composed config writes _target_, discrete, the token window and (newer) name."""
    verl_keys = [f"{KEY}._target_=verl.utils.profiler.config.NPUToolConfig", f"{KEY}.discrete=false",
                 f"{KEY}.contents=[]", f"{KEY}.level=level1", f"{KEY}.analysis=true", f"{KEY}.name=npu",
                 f"{KEY}.profile_token_start=null", f"{KEY}.profile_token_end=null"]
    assert rlprof_main(["check", *BASE, *verl_keys]) == 0


@pytest.mark.parametrize("section,normalised", [
    ({}, {"level": "level0", "contents": ["npu", "cpu"], "analysis": False, "export_type": ["db"], "flops": True}),
    ({"contents": []}, {"level": "level0", "contents": ["npu", "cpu"], "analysis": False, "export_type": ["db"], "flops": True}),
    ({"contents": None, "level": None}, {"level": "level0", "contents": ["npu", "cpu"], "analysis": False, "export_type": ["db"], "flops": True}),
    ({"contents": ["memory", "npu", "memory"], "level": "level_none", "analysis": True, "export_type": "text"},
     {"level": "level_none", "contents": ["memory", "npu"], "analysis": True, "export_type": ["text"], "flops": True}),
    ({"flops": False}, {"level": "level0", "contents": ["npu", "cpu"], "analysis": False, "export_type": ["db"], "flops": False}),
    ({"export_type": ["text", "db"]}, {"level": "level0", "contents": ["npu", "cpu"], "analysis": False, "export_type": ["db", "text"], "flops": True}),
])
def test_normalised_form_and_it_is_stable(section, normalised):
    settings = npu_settings(section)
    assert settings.as_tool_config() == normalised
    assert npu_settings(settings.as_tool_config()) == settings
