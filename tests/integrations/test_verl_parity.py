"""verl parity: verl's real composed config, the finish hook, and the DistProfiler drop-in."""

import subprocess
import sys
import textwrap

import pytest

import rlprof
from rlprof.runtime.checking import check_config
from rlprof.manifest import read_records

def test_verl_config_passes_with_profiler_off(verl_generated_config, rlprof_cli):
    proc = rlprof_cli("check", str(verl_generated_config))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("profiling is off (no global_profiler.tool); the configuration is valid")


def test_verl_config_passes_with_torch_on_all_ranks(verl_generated_config, rlprof_cli):
    proc = rlprof_cli("check", str(verl_generated_config), "global_profiler.tool=torch", "global_profiler.steps=[1]",
                      "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
                      "--world-size", "4")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "tools: torch   steps: [1]   save_path: outputs/profile   world size: 4"
    assert lines[1:7] == [
        "step 1:",
        "  actor   e2e       ranks 0-3",
        # verl's rollout section follows the actor by interpolation; verl 0.9 runs rollout as agent loop,
        # its replicas of tensor_model_parallel_size=2 GPUs: 2 of them on 4 GPUs
        "  rollout discrete  replica ranks 0-1",
        "  ref     off       (enable=false)",
        "  critic  off       (enable=false)",
        "  reward  off       (enable=false)",
    ]
    assert any("agent-loop mode" in line for line in proc.stderr.splitlines())  # warnings go to stderr


def test_every_verl_profiler_key_is_understood(verl_generated_config):
    """verl's per-role tool/save_path mirrors, _target_, tool sections for tools rlprof lacks
    (precision_debugger), torch_memory's context/stacks/kw_args: none of it is 'unknown'."""
    result = check_config(verl_generated_config, ["global_profiler.tool=torch", "global_profiler.steps=[1]",
                                                  "critic.profiler.enable=true", "critic.profiler.ranks=[0]"],
                          validate_backends=False)
    assert result.config.roles["critic"].tool_config["torch_memory"]["stacks"] == "all"
    assert "precision_debugger" in result.config.roles["critic"].tool_config


def test_a_key_verl_does_not_define_is_still_an_error(verl_generated_config, rlprof_cli):
    proc = rlprof_cli("check", str(verl_generated_config), "actor_rollout_ref.actor.profiler.enabel=true")
    assert proc.returncode == 2
    assert "actor_rollout_ref.actor.profiler.enabel: unknown key (did you mean 'enable'?)" in proc.stderr


def test_rlprof_check_accepts_verls_generated_precision_debugger_sections(verl_generated_config, rlprof_cli):
    """verl's fifth tool (msprobe's PrecisionDebugger) is rlprof-msprobe's backend: its generated sections
    (``config_path: null``, ``stages: null``, ``strict: false``, ``steps: null``) pass its validation."""
    pytest.importorskip("rlprof_msprobe")
    proc = rlprof_cli("check", str(verl_generated_config), "global_profiler.tool=precision_debugger",
                      "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
                      "actor_rollout_ref.actor.profiler.all_ranks=true")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("tools: precision_debugger   steps: [1]")


def test_a_tool_nobody_provides_is_still_refused(verl_generated_config, rlprof_cli):
    proc = rlprof_cli("check", str(verl_generated_config), "global_profiler.tool=recorder", "global_profiler.steps=[1]",
                      "actor_rollout_ref.actor.profiler.enable=true")
    assert proc.returncode == 2
    assert "global_profiler.tool: got 'recorder', but no installed backend has that name." in proc.stderr


def test_check_migrate_prints_todays_keys(tmp_path, rlprof_cli):
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text(textwrap.dedent("""
        trainer:
          profile_steps: [1, 2, 5]
        actor_rollout_ref:
          actor:
            profile_discrete: False
            profile_ranks: [0, 1]
    """))
    proc = rlprof_cli("check", str(legacy), "--migrate")
    assert proc.returncode == 0, proc.stderr
    import yaml

    doc = yaml.safe_load(proc.stdout)
    assert doc == {
        "global_profiler": {"steps": [1, 2, 5], "tool": "nsys"},
        "actor_rollout_ref": {"actor": {"profiler": {"ranks": [0, 1], "tool_config": {"nsys": {"discrete": False}}, "enable": True}}},
    }
    assert "warning: trainer.profile_steps is deprecated: use global_profiler.steps=[1, 2, 5]" in proc.stderr


# ------------------------------------------------------------------------------------ finish hook

HOOK = 'env | grep ^RLPROF_ | sort > "$RLPROF_SAVE_PATH/hook-rank$RLPROF_RANK-$$.env"'


def run_rank(save_path, site, rank, extra=()):
    overrides = ["global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]",
                 f"global_profiler.finish_hook_cmd='{HOOK}'", "actor_rollout_ref.actor.profiler.enable=true",
                 "actor_rollout_ref.actor.profiler.ranks=[0,2]", *extra]
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(site)!r})
        import rlprof
        prof = rlprof.Profiler(None, rank={rank}, world_size=3, roles=("actor",), run_id="hookrun", overrides={overrides!r})
        for step in range(1, 5):
            prof.start_step(step)
            with prof.role("actor", "update"):
                pass
            prof.step_boundary()
        prof.finalize()
    """)
    subprocess.run([sys.executable, "-c", code], check=True)


def test_finish_hook_runs_once_per_profiled_rank_after_last_step(test_backends, save_path):
    for rank in range(3):
        run_rank(save_path, test_backends, rank)
    files = sorted(p.name.split("-")[1] for p in save_path.glob("hook-*.env"))
    assert files == ["rank0", "rank2"]  # default: the profiled ranks, once each
    env = dict(line.split("=", 1) for line in sorted(save_path.glob("hook-rank2-*.env"))[0].read_text().splitlines())
    assert env["RLPROF_RANK"] == "2" and env["RLPROF_TOOL"] == "recorder" and env["RLPROF_ROLE"] == "actor"
    assert env["RLPROF_SAVE_PATH"] == str(save_path) and env["RLPROF_RUN_DIR"] == str(save_path / "hookrun")
    assert env["RLPROF_STEPS"] == "1,2" and env["RLPROF_PID"].isdigit()
    # it ran after the last profiled step's capture was written
    traces = [r for r in read_records([save_path]) if r["type"] == "artifact" and r["rank"] == 2]
    assert [t["step"] for t in traces] == [1, 2]


def test_finish_hook_ranks_and_all_ranks(test_backends, save_path):
    for rank in range(3):
        run_rank(save_path / "a", test_backends, rank, ["global_profiler.finish_hook_ranks=[1]"])
        run_rank(save_path / "b", test_backends, rank, ["global_profiler.finish_hook_all_ranks=true"])
    assert sorted(p.name.split("-")[1] for p in (save_path / "a").glob("hook-*.env")) == ["rank1"]
    assert sorted(p.name.split("-")[1] for p in (save_path / "b").glob("hook-*.env")) == ["rank0", "rank1", "rank2"]


def test_failing_or_missing_finish_hook_never_stops_training(test_backends, save_path, caplog, capfd):
    import logging

    for cmd in ("exit 3", "this-command-does-not-exist-rlprof"):
        prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
            "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
            f"global_profiler.finish_hook_cmd='{cmd}'", "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.all_ranks=true"])
        with caplog.at_level(logging.INFO, logger="rlprof"):
            prof.start_step(1)
            prof.step_boundary()
            prof.finalize()
        assert prof._finish.returncode not in (0, None)
    assert any("finish_hook_cmd exited with status 3" in r.getMessage() for r in caplog.records)
    # the shell's message reaches the process's stdout (a Ray worker's log), labelled with the rank
    out = capfd.readouterr().out
    assert "[rlprof finish_hook] rank 0: command exited with 3" in out
    assert "[rlprof finish_hook] rank 0: " in out and "not found" in out


# ------------------------------------------------------------------------------------ DistProfiler drop-in

VERL_STYLE_WORKER = """
import sys
sys.path.insert(0, {site!r})
from rlprof.verl import DistProfiler, DistProfilerExtension


class ActorRolloutRefWorker(DistProfilerExtension):
    '''Written the way verl's workers use DistProfiler (engine_workers.py): only the import differs.'''

    def __init__(self, rank, profiler_config):
        self.rank = rank
        tool_config = profiler_config["tool_config"].get(profiler_config["tool"], {{}})
        DistProfilerExtension.__init__(self, DistProfiler(rank=rank, config=profiler_config, tool_config=tool_config,
                                                          save_file_prefix="actor_rollout_ref", world_size=2))

    @DistProfiler.annotate(color="olive", role="ref_compute_log_prob")
    def compute_ref_log_prob(self, data):
        return data + 1

    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self, data):
        return data * 2

    @DistProfiler.annotate(color="red", role={odd_role!r})
    def odd(self):
        return "ok"


config = {{"tool": "recorder", "enable": True, "all_ranks": False, "ranks": [1], "save_path": {save!r},
          "finish_hook_cmd": {hook!r}, "finish_hook_all_ranks": False, "finish_hook_ranks": [],
          "tool_config": {{"recorder": {{"discrete": {discrete}}}}}}}
for rank in (0, 1):
    worker = ActorRolloutRefWorker(rank, config)
    for step in (1, 2):
        worker.start_profile(role="train", profile_step=step)   # the trainer calls this only on profiled steps
        assert worker.compute_ref_log_prob(1) == 2
        assert worker.update_actor(3) == 6
        assert worker.odd() == "ok"
        worker.stop_profile(run_command=(step == 2))
    print(rank, worker.profiler.check_enable(), worker.profiler.check_this_rank(), worker.profiler.is_discrete_mode())
    worker.profiler.finalize()
"""


@pytest.mark.parametrize("discrete", [False, True])
def test_verl_style_worker_runs_unchanged_against_the_adapter(test_backends, tmp_path, discrete):
    save = tmp_path / "save"
    sentinel = tmp_path / "pwned"
    odd_role = f"../../escape; touch {sentinel}; $(touch {sentinel})"
    code = VERL_STYLE_WORKER.format(site=str(test_backends), save=str(save), hook='echo "$RLPROF_ROLE" > "$RLPROF_SAVE_PATH/hook-$RLPROF_RANK"',
                                    discrete=discrete, odd_role=odd_role)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if not line.startswith("[rlprof finish_hook]")] == [f"0 True False {discrete}", f"1 True True {discrete}"]
    # the finish hook reports on stdout: skipped on rank 0 (not profiled), run and exit status on rank 1
    assert any(line.startswith("[rlprof finish_hook] rank 0: not run on this rank") for line in lines)
    assert "[rlprof finish_hook] rank 1: command exited with 0" in lines
    records = list(read_records([save]))
    artifacts = [r for r in records if r["type"] == "artifact"]
    assert {a["rank"] for a in artifacts} == {1}
    if discrete:
        regions = sorted({a["region"] for a in artifacts})
        assert len(regions) == 3 and "ref_compute_log_prob" in regions and "actor_update" in regions
        odd = [r for r in regions if r not in ("ref_compute_log_prob", "actor_update")][0]
        assert odd.startswith("actor_") and "/" not in odd and ";" not in odd and "$" not in odd and " " not in odd
        assert len(artifacts) == 2 * 3
    else:
        assert [a["capture"] for a in artifacts] == ["step1", "step2"]
    # the odd role changed nothing outside save_path and ran nothing
    assert not sentinel.exists()
    outside = [p for p in tmp_path.rglob("*") if save not in p.parents and p != save]
    assert outside == []
    for a in artifacts:
        assert (save / a["run"] / a["path"]).resolve().is_relative_to(save.resolve())
    # the finish hook ran once, on the profiled rank, after the last profiled step
    assert [p.name for p in save.glob("hook-*")] == ["hook-1"]
