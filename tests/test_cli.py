"""The ``rlprof`` command: backends, check, exit codes, and that the core stays light."""

import json
import os
import subprocess
import sys

import pytest

RLPROF = [sys.executable, "-m", "rlprof.cli"]


def cli(*args, site=None):
    env = dict(os.environ)
    if site is not None:
        env["PYTHONPATH"] = str(site) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([*RLPROF, *args], capture_output=True, text=True, env=env)


def test_import_rlprof_imports_nothing_big():
    code = ("import sys, rlprof; big = [m for m in ('torch', 'ray', 'nvtx', 'torch_npu', 'omegaconf', 'yaml', 'pluggy', 'numpy') "
            "if m in sys.modules]; print(big)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_profiler_on_an_unselected_rank_imports_no_backend(test_backends, tmp_path):
    code = (f"import sys; sys.path.insert(0, {str(test_backends)!r}); import rlprof; "
            f"p = rlprof.Profiler(None, rank=1, world_size=2, overrides=['global_profiler.tool=recorder', "
            f"'global_profiler.save_path={tmp_path}', 'global_profiler.steps=[1]', "
            f"'actor_rollout_ref.actor.profiler.enable=true', 'actor_rollout_ref.actor.profiler.ranks=[0]']); "
            "print(p.active, 'rlprof_test_backends.recorder' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False False False"


def test_backends_lists_name_distribution_version_hooks_and_import_errors(test_backends):
    proc = cli("backends", "--json", site=test_backends)
    assert proc.returncode == 0, proc.stderr
    infos = {i["name"]: i for i in json.loads(proc.stdout)}
    rec = infos["recorder"]
    assert (rec["distribution"], rec["version"], rec["imports"]) == ("rlprof-test-backends", "0.0.1", True)
    assert rec["hooks"] == ["validate_tool_config", "start_step", "start_role", "iteration_boundary", "stop_role",
                            "step_boundary", "finalize"]
    assert infos["broken"]["imports"] is False
    assert "No module named 'rlprof_this_module_does_not_exist'" in infos["broken"]["error"]
    text = cli("backends", site=test_backends).stdout
    assert "broken" in text and "IMPORT FAILED" in text and "recorder       rlprof-test-backends 0.0.1" in text


def test_check_valid_prints_plan_and_exits_0(test_backends, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("global_profiler: {tool: recorder, steps: [1, 2]}\n"
                   "actor_rollout_ref: {actor: {profiler: {enable: true, ranks: [0, 2, 3], tool_config: {recorder: {discrete: true}}}}}\n"
                   "critic: {profiler: {enable: true, all_ranks: true}}\n")
    proc = cli("check", str(cfg), "global_profiler.steps=[2]", "--world-size", "4", site=test_backends)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "tools: recorder   steps: [2]   save_path: outputs/profile   world size: 4",
        "step 2:",
        "  actor   discrete  ranks 0,2-3",
        "  rollout discrete  ranks 0,2-3",
        "  ref     discrete  ranks 0,2-3",
        "  critic  e2e       ranks 0-3",
        "  reward  off       (enable=false)",
    ]
    plan = json.loads(cli("check", str(cfg), "--world-size", "4", "--json", site=test_backends).stdout)
    assert plan["roles"]["critic"] == {"ranks": [0, 1, 2, 3], "mode": "e2e", "schedule": None}
    assert plan["captures"] == [[1], [2]]


@pytest.mark.parametrize("args, message", [
    (["global_profiler.tool=recorder", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
      "actor_rollout_ref.actor.profiler.ranks=[5]", "--world-size", "4"],
     "actor_rollout_ref.actor.profiler.ranks: got [5]; allowed: ranks 0..3 (rank 5 is outside a world of 4)"),
    (["global_profiler.tool=recorder", "global_profiler.steps=[1]", "global_profiler.profile_continuous_steps=true",
      "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.tool_config.recorder.discrete=true"],
     "global_profiler.profile_continuous_steps: got True together with discrete mode"),
    (["global_profiler.tool=faulty", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
      "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in=[x]"],
     "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in: got 'x'; allowed: start_step"),
    (["global_profiler.tool=broken", "global_profiler.steps=[1]"], 'Error importing backend "broken"'),
])
def test_check_invalid_exits_2_with_the_message(test_backends, args, message):
    proc = cli("check", *args, site=test_backends)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_check_prints_warnings(test_backends):
    proc = cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]", "critic.profiler.enable=true", site=test_backends)
    assert proc.returncode == 0
    assert "warning: critic.profiler: enable=true but ranks=[] and all_ranks=false: this role collects nothing" in proc.stdout


def test_unknown_command_and_help():
    assert cli("frobnicate").returncode == 2
    assert "rlprof backends" in cli("--help").stdout
