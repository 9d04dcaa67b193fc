"""Resolver tables: every configuration example of shared/seeds/, with its outcome written out.

Each case gives the config (YAML as the guide shows it, or the guide's key=value override list),
a world size, and the expected outcome per role: the ranks that profile, the mode and the
capture runs of steps. The hybrid-engine worker hosts actor+rollout+ref on every rank; critic and
reward run in their own worker groups.
"""

import textwrap

import pytest
import yaml

from rlprof.errors import ConfigError
from rlprof.runtime.checking import check_config

OFF = None


def outcome(source, overrides=(), world=4):
    result = check_config(source, overrides, world_size=world, validate_backends=False)
    selection = result.selection()
    roles = {name: (sorted(entry["ranks"]), entry["mode"]) if entry["ranks"] else OFF for name, entry in selection.items()}
    runs = [list(r) for r in result.plans[0].runs] if result.plans else []
    return roles, runs, list(result.config.warnings)


def y(text):
    return yaml.safe_load(textwrap.dedent(text))


ALL4 = [0, 1, 2, 3]

CASES = {
    # ---- 000 / 001 (English NPU guide) -----------------------------------------------------
    "000 disabling collection": (
        y("""
        global_profiler:
           steps: null # disable profile
        """), (),
        {"actor": OFF, "rollout": OFF, "ref": OFF, "critic": OFF, "reward": OFF}, [],
    ),
    "000 end-to-end collection": (
        y("""
        global_profiler:
           tool: npu
           steps: [1, 2, 5]
           save_path: ./outputs/profile
        actor_rollout_ref:
           actor:
              profiler:
                 enable: True
                 all_ranks: True
                 tool_config:
                    npu:
                       discrete: False
                       contents: [npu, cpu]
        """), (),
        # "rollout & ref follow actor settings"
        {"actor": (ALL4, "e2e"), "rollout": (ALL4, "e2e"), "ref": (ALL4, "e2e"), "critic": OFF, "reward": OFF},
        [[1], [2], [5]],
    ),
    "000 discrete mode collection": (
        y("""
        global_profiler:
           tool: npu
           steps: [1, 2, 5]
           save_path: ./outputs/profile
        actor_rollout_ref:
           actor:
              profiler:
                 enable: True
                 all_ranks: False
                 ranks: [0]
                 tool_config:
                    npu:
                       discrete: True
                       contents: [npu, cpu]
           rollout:
              profiler:
                 enable: True
                 all_ranks: False
                 ranks: [0]
                 tool_config:
                    npu:
                       discrete: True
        """), (),
        # ref follows actor
        {"actor": ([0], "discrete"), "rollout": ([0], "discrete"), "ref": ([0], "discrete"), "critic": OFF, "reward": OFF},
        [[1], [2], [5]],
    ),
    # ---- 003 (practitioner's guide, verl v0.6 command lines) --------------------------------
    "003 e2e command line": (
        None,
        ["global_profiler.tool=npu", "global_profiler.steps=[2]", "global_profiler.save_path=outputs/profile",
         "actor_rollout_ref.actor.profiler.enable=True", "actor_rollout_ref.actor.profiler.ranks=[0]",
         "actor_rollout_ref.actor.profiler.tool_config.npu.level=level1",
         "actor_rollout_ref.actor.profiler.tool_config.npu.discrete=False",
         "actor_rollout_ref.actor.profiler.tool_config.npu.contents=['npu']",
         "actor_rollout_ref.actor.profiler.tool_config.npu.analysis=True"],
        {"actor": ([0], "e2e"), "rollout": ([0], "e2e"), "ref": ([0], "e2e"), "critic": OFF, "reward": OFF},
        [[2]],
    ),
    "003 discrete command line": (
        None,
        ["global_profiler.tool=npu", "global_profiler.steps=[2]", "global_profiler.save_path=outputs/profile",
         "actor_rollout_ref.actor.profiler.enable=True", "actor_rollout_ref.rollout.profiler.enable=False",
         "actor_rollout_ref.actor.profiler.ranks=[0]", "actor_rollout_ref.ref.profiler.enable=False",
         "actor_rollout_ref.ref.profiler.ranks=[0]", "actor_rollout_ref.actor.profiler.tool_config.npu.level=level0",
         "actor_rollout_ref.actor.profiler.tool_config.npu.discrete=True",
         "actor_rollout_ref.actor.profiler.tool_config.npu.contents=['npu']",
         "actor_rollout_ref.actor.profiler.tool_config.npu.analysis=True"],
        {"actor": ([0], "discrete"), "rollout": OFF, "ref": OFF, "critic": OFF, "reward": OFF},
        [[2]],
    ),
    "003 tool line alone profiles nothing": (
        None, ["global_profiler.tool=npu"],
        {"actor": OFF, "rollout": OFF, "ref": OFF, "critic": OFF, "reward": OFF}, [],
    ),
    # ---- 002 (older Chinese NPU guide: trainer.profile_steps + actor_rollout_ref.profiler) ----
    "002 disabled": (
        y("""
        trainer:
            profile_steps: null # disable profile
        """), (),
        {"actor": OFF, "rollout": OFF, "ref": OFF, "critic": OFF, "reward": OFF}, [],
    ),
    "002 end-to-end": (
        y("""
        trainer:
            profile_steps: [1, 2, 5]
        actor_rollout_ref:
             profiler:
                 discrete: False
                 all_ranks: True
        """), (),
        {"actor": (ALL4, "e2e"), "rollout": (ALL4, "e2e"), "ref": (ALL4, "e2e"), "critic": OFF, "reward": OFF},
        [[1], [2], [5]],
    ),
    "002 discrete": (
        y("""
        trainer:
            profile_steps: [1, 2, 5]
        actor_rollout_ref:
             profiler:
                 discrete: True
                 all_ranks: False
                 ranks: [0, 1]
        """), (),
        {"actor": ([0, 1], "discrete"), "rollout": ([0, 1], "discrete"), "ref": ([0, 1], "discrete"), "critic": OFF, "reward": OFF},
        [[1], [2], [5]],
    ),
    # ---- 004 (Nsight guide: profile_ranks / profile_discrete per component) -----------------
    "004 disabled": (
        y("""
        trainer:
            profile_steps: null # disable profile
        """), (),
        {"actor": OFF, "rollout": OFF, "ref": OFF, "critic": OFF, "reward": OFF}, [],
    ),
    "004 end-to-end per component": (
        y("""
        trainer:
            profile_steps: [1, 2, 5]  # Profile steps 1, 2, and 5
        actor_rollout_ref:
            actor:
                profile_discrete: False
                profile_ranks: [0, 1]  # Only profile ranks 0 and 1 for actor
            rollout:
                profile_discrete: False
                profile_ranks: null    # Profile all ranks for rollout
            ref:
                profile_discrete: False  # Disable profiling for ref policy
        critic:
            profile_discrete: False
            profile_ranks: [0]      # Only profile rank 0 for critic
        """), (),
        # the guide's rule text: "null and [] means no ranks" (its comment disagrees; the migration warns)
        {"actor": ([0, 1], "e2e"), "rollout": OFF, "ref": OFF, "critic": ([0], "e2e"), "reward": OFF},
        [[1], [2], [5]],
    ),
    "004 discrete per component": (
        y("""
        trainer:
            profile_steps: [1, 2, 5]
        actor_rollout_ref:
            actor:
                profile_discrete: True
                profile_ranks: [0, 1]
            rollout:
                profile_discrete: True
                profile_ranks: null
            ref:
                profile_discrete: False
        critic:
            profile_discrete: True
            profile_ranks: [0]
        """), (),
        {"actor": ([0, 1], "discrete"), "rollout": OFF, "ref": OFF, "critic": ([0], "discrete"), "reward": OFF},
        [[1], [2], [5]],
    ),
    "004 profile_ranks_all": (
        y("""
        trainer:
            profile_steps: [3]
        actor_rollout_ref:
            actor:
                profile_ranks_all: True
        """), (),
        {"actor": (ALL4, "e2e"), "rollout": (ALL4, "e2e"), "ref": (ALL4, "e2e"), "critic": OFF, "reward": OFF},
        [[3]],
    ),
    # ---- DESIGN.md: continuous steps, agent loop -------------------------------------------
    "continuous steps merge runs": (
        None,
        ["global_profiler.tool=torch", "global_profiler.steps=[1,2,3,5,7,8]", "global_profiler.profile_continuous_steps=true",
         "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[1,3]"],
        {"actor": ([1, 3], "e2e"), "rollout": ([1, 3], "e2e"), "ref": ([1, 3], "e2e"), "critic": OFF, "reward": OFF},
        [[1, 2, 3], [5], [7, 8]],
    ),
    "agent loop: rollout counts replica ranks, discrete": (
        None,
        ["global_profiler.tool=npu", "global_profiler.steps=[1]", "actor_rollout_ref.rollout.mode=async",
         "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[2]",
         "actor_rollout_ref.actor.profiler.tool_config.npu.discrete=true",
         "actor_rollout_ref.rollout.profiler.enable=true", "actor_rollout_ref.rollout.profiler.ranks=[0]",
         "actor_rollout_ref.rollout.profiler.tool_config.npu.discrete=true"],
        {"actor": ([2], "discrete"), "rollout": ([0], "discrete"), "ref": ([2], "discrete"), "critic": OFF, "reward": OFF},
        [[1]],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_seed_example(name):
    source, overrides, expected_roles, expected_runs = CASES[name]
    roles, runs, _ = outcome(source, overrides)
    assert roles == expected_roles
    assert runs == expected_runs


def test_legacy_002_resolves_like_its_modern_equivalent():
    legacy = outcome(CASES["002 discrete"][0])
    modern = outcome(None, ["global_profiler.tool=npu", "global_profiler.steps=[1,2,5]",
                            "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0,1]",
                            "actor_rollout_ref.actor.profiler.tool_config.npu.discrete=true"])
    assert legacy[:2] == modern[:2]
    assert "trainer.profile_steps is deprecated: use global_profiler.steps=[1, 2, 5]" in legacy[2]
    assert "actor_rollout_ref.profiler.discrete is deprecated: use actor_rollout_ref.actor.profiler.tool_config.npu.discrete=true" in legacy[2]
    assert "actor_rollout_ref.profiler.ranks is deprecated: use actor_rollout_ref.actor.profiler.ranks=[0, 1]" in legacy[2]
    assert "the legacy keys imply global_profiler.tool=npu: set it explicitly" in legacy[2]
    assert not modern[2]


def test_legacy_004_resolves_like_its_modern_equivalent():
    legacy = outcome(CASES["004 discrete per component"][0])
    modern = outcome(y("""
        global_profiler: {tool: nsys, steps: [1, 2, 5]}
        actor_rollout_ref:
          actor: {profiler: {enable: true, ranks: [0, 1], tool_config: {nsys: {discrete: true}}}}
          rollout: {profiler: {enable: false, ranks: [], tool_config: {nsys: {discrete: true}}}}
          ref: {profiler: {enable: false, tool_config: {nsys: {discrete: false}}}}
        critic: {profiler: {enable: true, ranks: [0], tool_config: {nsys: {discrete: true}}}}
        """))
    assert legacy[:2] == modern[:2]
    warnings = legacy[2]
    assert "actor_rollout_ref.actor.profile_ranks is deprecated: use actor_rollout_ref.actor.profiler.ranks=[0, 1]" in warnings
    assert "actor_rollout_ref.actor.profile_discrete is deprecated: use actor_rollout_ref.actor.profiler.tool_config.nsys.discrete=true" in warnings
    assert "critic.profile_ranks is deprecated: use critic.profiler.ranks=[0]" in warnings
    assert any("actor_rollout_ref.rollout.profile_ranks=null means no ranks" in w for w in warnings)
    assert "the legacy keys imply global_profiler.tool=nsys: set it explicitly" in warnings
    # one warning per legacy key, no duplicates
    assert len(warnings) == len(set(warnings))


def test_legacy_npu_profile_options_map_to_contents():
    raw = y("""
        trainer:
          profile_steps: [1]
          npu_profile:
            options:
              save_path: ./profiler_data
              level: level1
              with_memory: False
              record_shapes: True
              with_npu: True
              with_cpu: True
              with_module: False
              with_stack: False
              analysis: True
        actor_rollout_ref:
          profiler: {discrete: False, all_ranks: True}
        """)
    result = check_config(raw, validate_backends=False)
    actor = result.config.roles["actor"]
    assert actor.tool_config["npu"] == {"level": "level1", "analysis": True, "contents": ["shapes", "npu", "cpu"]}
    assert result.config.global_.save_path == "./profiler_data"
    assert any("use actor_rollout_ref.actor.profiler.tool_config.npu.contents=[shapes, npu, cpu]" in w for w in result.config.warnings)
    assert "trainer.npu_profile.options.level is deprecated: use actor_rollout_ref.actor.profiler.tool_config.npu.level=level1" in result.config.warnings


# ---- verl's precision guide: precision_debugger selects every rank of an enabled role ------------------


PRECISION_GUIDE = y("""
    global_profiler:
      tool: precision_debugger
      steps: [1, 2]
      global_tool_config:
        precision_debugger: {config_path: ./config.json, stages: [actor_update], strict: false}
    actor_rollout_ref:
      actor: {profiler: {enable: true, all_ranks: false, ranks: []}}
    critic: {profiler: {enable: false, ranks: [0]}}
    """)


def test_precision_debugger_selects_every_rank_of_an_enabled_role_whatever_ranks_says():
    """verl's DistProfiler keeps its rank gate open for this tool (msprobe's config.json filters ranks),
    and its precision guide writes ``ranks: []``; before, rlprof selected no rank and warned."""
    roles, runs, warnings = outcome(PRECISION_GUIDE)
    assert roles == {"actor": (ALL4, "e2e"), "rollout": (ALL4, "e2e"), "ref": (ALL4, "e2e"), "critic": OFF, "reward": OFF}
    assert runs == [[1], [2]]
    assert not [w for w in warnings if "collects nothing" in w]
    roles, _, _ = outcome(PRECISION_GUIDE, ["actor_rollout_ref.actor.profiler.ranks=[1]"])
    assert roles["actor"] == (ALL4, "e2e")


def test_rlprof_check_says_the_precision_debugger_rank_rule():
    result = check_config(PRECISION_GUIDE, (), world_size=2, validate_backends=False)
    lines = result.render().splitlines()
    assert "  actor   e2e       ranks 0-1  (every rank of the role: precision_debugger follows verl, ranks/all_ranks not read)" in lines
    assert "  critic  off       (enable=false)" in lines


def test_other_tools_keep_the_ranks_rule():
    roles, _, warnings = outcome(PRECISION_GUIDE, ["global_profiler.tool=torch"])
    assert roles["actor"] is OFF
    assert any("enable=true but ranks=[] and all_ranks=false: this role collects nothing" in w for w in warnings)


AGENT_LOOP_TP4 = ["global_profiler.tool=torch", "global_profiler.steps=[1]", "actor_rollout_ref.rollout.mode=async",
                  "actor_rollout_ref.rollout.tensor_model_parallel_size=4",
                  "actor_rollout_ref.rollout.profiler.enable=true",
                  "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=true"]


def test_000_rollout_ranks_count_replicas_of_the_world_of_gpus():
    """Seed 000: "ranks in the Rollout configuration refers to Replica Rank (inference instance index),
    not Global Rank". tp=4 on 8 GPUs is 2 replicas; ranks=[1] is the second of them."""
    result = check_config(None, [*AGENT_LOOP_TP4, "actor_rollout_ref.rollout.profiler.ranks=[1]"], world_size=8,
                          validate_backends=False)
    assert sorted(result.selection()["rollout"]["ranks"]) == [1]
    assert result.config.gpus_per_replica == 4


@pytest.mark.parametrize("ranks, hint", [
    ("[4]", "global rank 4 is held by replica 1 (4 GPUs per replica): write ranks: [1]"),
    ("[0,4,6]", "global rank 4 is held by replica 1 (4 GPUs per replica): write ranks: [0, 1]"),
    ("[9]", None),  # past the GPUs too: no replica holds it, so no hint
])
def test_a_global_gpu_rank_written_for_rollout_names_the_replica_that_holds_it(ranks, hint):
    with pytest.raises(ConfigError) as raised:
        check_config(None, [*AGENT_LOOP_TP4, f"actor_rollout_ref.rollout.profiler.ranks={ranks}"], world_size=8,
                     validate_backends=False)
    message = str(raised.value)
    assert "actor_rollout_ref.rollout.profiler.ranks" in message and "outside a world of 2" in message
    if hint is None:
        assert "held by" not in message
    else:
        assert hint in message
