"""``global_profiler.global_tool_config.<tool>`` is validated on its own key path, by the Profiler and by
``rlprof check``, also when no role is enabled (a typo there used to be reported under a role's path,
or not at all)."""

from __future__ import annotations

import pytest

import rlprof
from rlprof.runtime.checking import check_config
from rlprof.installed import discover

pytestmark = pytest.mark.skipif("torch" not in discover(), reason="rlprof-torch is not installed (its validator is used)")

TYPO = "global_profiler.global_tool_config.torch.contnets=[cpu]"
KEY = "global_profiler.global_tool_config.torch.contnets"


def test_the_profiler_names_the_global_section(tmp_path):
    with pytest.raises(rlprof.ConfigError) as info:
        rlprof.Profiler(None, roles=("actor",), overrides=[
            "global_profiler.tool=torch", f"global_profiler.save_path={tmp_path}", "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true", TYPO])
    assert KEY in str(info.value) and "actor_rollout_ref" not in str(info.value)


def test_rlprof_check_names_the_global_section_with_no_role_enabled(tmp_path):
    with pytest.raises(rlprof.ConfigError) as info:
        check_config(None, ["global_profiler.tool=torch", f"global_profiler.save_path={tmp_path}",
                            "global_profiler.steps=[1]", TYPO])
    assert KEY in str(info.value)


def test_a_valid_global_section_reaches_the_backend_merged_under_the_role(tmp_path):
    prof = rlprof.Profiler(None, roles=("actor",), overrides=[
        "global_profiler.tool=torch", f"global_profiler.save_path={tmp_path}", "global_profiler.steps=[1]",
        "global_profiler.global_tool_config.torch.contents=[cpu]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    try:
        assert prof.tool_configs["actor"]["torch"]["contents"] == ("cpu",)
    finally:
        prof.finalize()
