"""Every profiler configuration verl ships is accepted twice: by ``rlprof check`` (on verl 0.9.1's own
composed trainer config) and by the drop-in's worker construction, done as verl's workers do it
(``omega_conf_to_dataclass`` of the role section, the tool's section as its dataclass, then
``DistProfiler(rank, config, tool_config, save_file_prefix)``).

The table lists each source's overrides with the script's defaults filled in (the sources themselves
live in verl's repository, not in the wheel): ``examples/profile/*.sh``, ``docs/perf/*.md``, the
Ascend guides (shared/seeds/) and ``verl/trainer/config/profiler/profiler.yaml`` (the defaults and
its tool list). The legacy ``npu_profile.yaml`` is in ``tests/config/test_config_verl_keys.py``.
"""

import pytest

from rlprof.runtime.checking import check_config

verl = pytest.importorskip("verl", reason="verl 0.9.1 is not installed (scripts/setup.sh installs it)")

A = "actor_rollout_ref.actor.profiler"
R = "actor_rollout_ref.rollout.profiler"
F = "actor_rollout_ref.ref.profiler"

SHIPPED = {
    "profiler.yaml defaults (profiling off)": [],
    "run_qwen2_5_7b_torch_profile.sh": [
        f"{A}.enable=True", f"{A}.ranks=[0]", f"{A}.all_ranks=False", f"{A}.tool_config.torch.discrete=False",
        f"{A}.tool_config.torch.contents=['cpu','cuda']", f"{A}.tool_config.torch.schedule.active=0",
        f"{A}.tool_config.torch.schedule.skip_first=0", f"{A}.tool_config.torch.schedule.wait=0",
        f"{A}.tool_config.torch.schedule.warmup=0", f"{A}.tool_config.torch.schedule.repeat=0",
        f"{R}.enable=True", f"{R}.ranks=[0]", f"{R}.all_ranks=False", f"{R}.tool_config.torch.discrete=True",
        f"{R}.tool_config.torch.contents=['cpu','cuda']", f"{R}.tool_config.torch.profile_token_start=null",
        f"{R}.tool_config.torch.profile_token_end=null", "global_profiler.tool=torch", "global_profiler.steps=[1,2]",
        "global_profiler.save_path=PROFILE", "global_profiler.relocate_results=True", "global_profiler.finish_hook_cmd=null",
    ],
    "run_qwen2_5_vl_7b_torch_memory.sh": [
        "global_profiler.tool=torch_memory", "global_profiler.save_path=PROFILE", "global_profiler.steps=[1,2]",
        "global_profiler.global_tool_config.torch_memory.trace_alloc_max_entries=100000",
        "global_profiler.global_tool_config.torch_memory.stack_depth=32", f"{A}.enable=True", f"{A}.all_ranks=True",
    ],
    "run_qwen3_8b_npu_profile_discrete.sh": [
        f"{A}.enable=True", f"{A}.ranks=[1,2]", f"{A}.all_ranks=False", f"{A}.tool_config.npu.discrete=True",
        f"{A}.tool_config.npu.contents=['npu','cpu']", f"{A}.tool_config.npu.level=level0", f"{A}.tool_config.npu.analysis=True",
        f"{F}.enable=True", f"{F}.ranks=[1,2]", f"{F}.all_ranks=False", f"{F}.tool_config.npu.discrete=True",
        f"{F}.tool_config.npu.contents=['npu','cpu']", f"{F}.tool_config.npu.level=level0", f"{F}.tool_config.npu.analysis=True",
        "global_profiler.tool=npu", "global_profiler.steps=[2,4]", "global_profiler.save_path=PROFILE",
    ],
    "run_qwen3_8b_npu_profile_e2e.sh": [
        f"{A}.enable=True", f"{A}.all_ranks=True", f"{A}.tool_config.npu.discrete=False",
        f"{A}.tool_config.npu.contents=['npu','cpu']", f"{A}.tool_config.npu.level=level0", f"{A}.tool_config.npu.analysis=True",
        f"{F}.enable=True", f"{F}.all_ranks=True", f"{F}.tool_config.npu.discrete=False",
        f"{F}.tool_config.npu.contents=['npu','cpu']", f"{F}.tool_config.npu.level=level0", f"{F}.tool_config.npu.analysis=True",
        "global_profiler.tool=npu", "global_profiler.steps=[2,4]", "global_profiler.save_path=PROFILE",
    ],
    "docs/perf/nsight_profiling.md finish hook": [
        "global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]", "global_profiler.save_path=PROFILE",
        "global_profiler.relocate_results=True",
        "global_profiler.finish_hook_cmd='hdfs dfs -put -f $VERL_PROFILE_SAVE_PATH hdfs:///my/profiles/'",
        f"{A}.enable=True", f"{A}.all_ranks=True",
    ],
    "docs/perf/nsight_profiling.md one database per step": [
        "global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]", f"{A}.enable=True", f"{A}.all_ranks=True",
        "critic.profiler.enable=True", "critic.profiler.all_ranks=True",
    ],
    "docs/perf/nsight_profiling.md discrete": [
        "global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]", "global_profiler.global_tool_config.nsys.discrete=True",
        f"{A}.enable=True", f"{A}.all_ranks=True",
    ],
    "docs/perf/nsight_profiling.md global_profiler.discrete": [
        "global_profiler.tool=nsys", "global_profiler.steps=[1,2,5]", "global_profiler.discrete=True",
        f"{A}.enable=True", f"{A}.all_ranks=True",
    ],
    "profiler.yaml's fifth tool, precision_debugger (msprobe)": [
        "global_profiler.tool=precision_debugger", "global_profiler.steps=[1]", "global_profiler.save_path=PROFILE",
        f"{A}.enable=True", f"{A}.all_ranks=True", f"{A}.tool_config.precision_debugger.stages=[actor_update]",
    ],
    "docs/perf/torch_profiling.md end-to-end": [
        "global_profiler.tool=torch", "global_profiler.steps=[1,2,5]", "global_profiler.save_path=PROFILE",
        f"{A}.enable=True", f"{A}.all_ranks=True", f"{A}.tool_config.torch.discrete=False",
        f"{A}.tool_config.torch.contents=[cpu,cuda]",
    ],
    "docs/perf/torch_profiling.md discrete with rollout token window": [
        "global_profiler.tool=torch", "global_profiler.steps=[1]", f"{A}.enable=True", f"{A}.ranks=[0]",
        f"{A}.tool_config.torch.discrete=True", f"{A}.tool_config.torch.contents=[cpu,cuda]",
        f"{R}.enable=True", f"{R}.ranks=[0]", f"{R}.tool_config.torch.discrete=True",
        f"{R}.tool_config.torch.profile_token_start=12", f"{R}.tool_config.torch.profile_token_end=46",
    ],
    "docs/perf/torch_profiling.md schedule, continuous": [
        "global_profiler.tool=torch", "global_profiler.steps=[1]", f"{A}.enable=True", f"{A}.all_ranks=True",
        f"{A}.tool_config.torch.discrete=False", f"{A}.tool_config.torch.schedule.active=1",
    ],
    "docs/perf/torch_profiling.md schedule, discrete": [
        "global_profiler.tool=torch", "global_profiler.steps=[1]", f"{A}.enable=True", f"{A}.all_ranks=True",
        f"{A}.tool_config.torch.discrete=True", f"{A}.tool_config.torch.schedule.skip_first=1",
        f"{A}.tool_config.torch.schedule.wait=1", f"{A}.tool_config.torch.schedule.warmup=1",
        f"{A}.tool_config.torch.schedule.active=2",
    ],
    "Ascend guide: discrete, level1, rollout token window": [
        "global_profiler.tool=npu", "global_profiler.steps=[2]", "global_profiler.save_path=PROFILE",
        f"{A}.enable=True", f"{A}.ranks=[0]", f"{A}.all_ranks=False", f"{A}.tool_config.npu.discrete=True",
        f"{A}.tool_config.npu.contents=[npu,cpu]", f"{A}.tool_config.npu.level=level1", f"{A}.tool_config.npu.analysis=False",
        f"{R}.enable=True", f"{R}.ranks=[0]", f"{R}.all_ranks=False",
        f"{R}.tool_config.npu.profile_token_start=30", f"{R}.tool_config.npu.profile_token_end=60",
    ],
}

WORLD = 4


def composed(verl_generated_config, overrides, save):
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(verl_generated_config)
    dotlist = [o.replace("PROFILE", str(save)) for o in overrides]
    return OmegaConf.merge(cfg, OmegaConf.from_dotlist(dotlist)), dotlist


@pytest.mark.parametrize("name", list(SHIPPED))
def test_rlprof_check_accepts_it(name, verl_generated_config, tmp_path):
    _, dotlist = composed(verl_generated_config, SHIPPED[name], tmp_path)
    result = check_config(verl_generated_config, dotlist, world_size=WORLD)  # backends' own validation included
    given = dict(o.split("=", 1) for o in dotlist if o.startswith("global_profiler.") and "=" in o)
    tool = given.get("global_profiler.tool")
    # verl's default: no tool, profiling off
    assert result.config.global_.tools == ((tool,) if tool else ())
    if "global_profiler.discrete" in given:
        assert all(r.discrete for r in result.config.roles.values() if r.enable)
    steps = given.get("global_profiler.steps")
    assert result.config.global_.steps == (tuple(int(s) for s in steps.strip("[]").split(",")) if steps else None)
    assert {r for c in result.classes for r in range(c.first, c.last + 1)} == set(range(WORLD))  # every rank planned


@pytest.mark.parametrize("name", list(SHIPPED))
def test_drop_in_worker_construction_accepts_it(name, verl_generated_config, tmp_path, monkeypatch):
    """As verl's ActorRolloutRefWorker (save_file_prefix = its role) and the critic's TrainingWorker
    (``value_model``) build their profilers from the resolved trainer config (verl's TaskRunner
    resolves it before it makes workers: a role section alone no longer reaches ``global_profiler``);
    then one profiled step runs on every rank, and exactly the selected ranks of an enabled role with
    an installed tool profile it."""
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass
    from verl.utils.profiler import ProfilerConfig

    from rlprof.installed import discover
    from rlprof.verl import DistProfiler

    monkeypatch.setenv("RLPROF_RUN_ID", "shipped")
    monkeypatch.setenv("WORLD_SIZE", str(WORLD))
    monkeypatch.chdir(tmp_path)
    cfg, _ = composed(verl_generated_config, SHIPPED[name], tmp_path)
    OmegaConf.resolve(cfg)
    workers = [("actor_rollout_ref", cfg.actor_rollout_ref.actor.profiler), ("value_model", cfg.critic.profiler)]
    made = []
    try:
        for prefix, section in workers:
            config = omega_conf_to_dataclass(section, dataclass_type=ProfilerConfig)
            tool = section.get("tool")
            tool_config = omega_conf_to_dataclass(section.tool_config.get(tool)) if tool in section.tool_config else None
            for rank in range(WORLD):
                profiler = DistProfiler(rank=rank, config=config, tool_config=tool_config, save_file_prefix=prefix)
                made.append(profiler)
                selected = bool(section.enable) and (section.all_ranks or rank in section.ranks)
                assert profiler.check_enable() == bool(section.enable)
                assert profiler.check_this_rank() == bool(section.all_ranks or rank in section.ranks)
                assert profiler.profiler.active == (selected and tool in discover()), (prefix, rank)
                profiler.start(role="train", profile_step=1)
                assert profiler.check_this_step() == selected, (prefix, rank)
                profiler.stop(run_command=False)
                assert not profiler.check_this_step()
                profiler.finalize()
    finally:
        for profiler in made:  # a failed assertion must not leave live profilers (exit handlers) to later tests
            profiler.finalize()
    assert len(made) == 2 * WORLD


def test_rollout_ranks_inherited_from_the_actor_are_left_out_past_the_replicas_with_a_warning(
        verl_generated_config, caplog):
    """verl's generated config writes rollout's ranks as the actor's (``${oc.select:...}``): verl's discrete NPU
    script sets actor ranks ``[1, 2]`` on 8 GPUs with rollout tp=4, 2 replicas. Read as replica ranks, 2 is past
    them: left out with one warning naming what to write, not refused (the user wrote no rollout rank)."""
    import logging

    from rlprof import notices

    notices.forget()
    overrides = [*SHIPPED["run_qwen3_8b_npu_profile_discrete.sh"], "actor_rollout_ref.rollout.tensor_model_parallel_size=4"]
    overrides = [o.replace("PROFILE", "/tmp/rlprof-unused") for o in overrides]
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        result = check_config(verl_generated_config, overrides, world_size=8, validate_backends=False)
    said = [r.getMessage() for r in caplog.records if "follows actor's profiler section" in r.getMessage()]
    assert len(said) == 1 and "Write actor_rollout_ref.rollout.profiler.ranks" in said[0], said
    assert "global rank 2 is held by replica 0" in said[0]
    rollout = {c.first: c.plan.roles["rollout"].selected for c in result.classes if "rollout" in c.plan.roles}
    assert rollout.get(1) is True and not rollout.get(0)
