"""``rlprof check`` says what a run will not capture (issue 40): in agent-loop mode a rollout replica
is captured only by its engine's own profiler, which stands in for torch or npu only (verl's rule,
:data:`rlprof.config.sections.ENGINE_TOOLS`); with any other tool the replica's ``rollout_generate`` is
timed and nothing is captured in it. The same sentence is the replicas' ``skip`` reason, which the
report's verdict shows (tests/integrations/test_verl_rollout_engine.py)."""

import json

import pytest

from rlprof.config.sections import ENGINE_TOOLS, replica_not_captured

AGENT_LOOP = ["global_profiler.steps=[1]", "actor_rollout_ref.rollout.mode=async",
              "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"]


def check(rlprof_cli, tool, *more):
    return rlprof_cli("check", f"global_profiler.tool={tool}", *AGENT_LOOP, *more)


@pytest.mark.parametrize("tool", ["nsys", "precision_debugger", "torch_memory", "[nsys,torch_memory]"])
def test_a_tool_no_engine_stands_in_for_leaves_the_replicas_timed_not_captured(tool, rlprof_cli):
    tools = tool.strip("[]").split(",")
    proc = check(rlprof_cli, tool)
    assert proc.returncode == 0, proc.stderr
    (rollout,) = [line for line in proc.stdout.splitlines() if line.startswith("  rollout ")]
    assert "replica ranks 0-1" in rollout
    why = replica_not_captured(tools)
    assert f"not captured: {why}" in rollout, rollout
    assert why.startswith(f"{', '.join(tools)} do" + ("es" if len(tools) == 1 else "") + " not capture the rollout engine")
    assert "rlprof still times rollout_generate" in why

    report = json.loads(check(rlprof_cli, tool, "--json").stdout)
    assert report["not_captured"] == {"rollout": why}


@pytest.mark.parametrize("tool", [*ENGINE_TOOLS, "[nsys,torch]"])
def test_an_engine_that_stands_in_captures_the_replicas(tool, rlprof_cli):
    proc = check(rlprof_cli, tool)
    assert proc.returncode == 0, proc.stderr
    assert "not captured" not in proc.stdout
    assert json.loads(check(rlprof_cli, tool, "--json").stdout)["not_captured"] == {}


def test_without_agent_loop_or_with_rollout_off_nothing_is_said(rlprof_cli):
    hybrid = rlprof_cli("check", "global_profiler.tool=nsys", *[o for o in AGENT_LOOP if "mode=async" not in o], "--json")
    assert json.loads(hybrid.stdout)["not_captured"] == {}
    off = check(rlprof_cli, "nsys", "actor_rollout_ref.rollout.profiler.enable=false", "--json")
    assert json.loads(off.stdout)["not_captured"] == {}
