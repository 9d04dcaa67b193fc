"""The ``rlprof`` command: backends, check, exit codes, and that the core stays light."""

import json
import re
import subprocess
import sys

import pytest

RLPROF = [sys.executable, "-m", "rlprof.cli"]


@pytest.fixture
def cli(rlprof_cli):
    """``rlprof ARGS`` in this process (tests/conftest.py); the test backends are discoverable when
    the test asks for the ``test_backends`` fixture."""
    return rlprof_cli


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


def test_backends_lists_name_distribution_version_hooks_and_import_errors(test_backends, cli):
    proc = cli("backends", "--json")
    assert proc.returncode == 0, proc.stderr
    infos = {i["name"]: i for i in json.loads(proc.stdout)}
    rec = infos["recorder"]
    assert (rec["distribution"], rec["version"], rec["imports"]) == ("rlprof-test-backends", "0.0.1", True)
    assert rec["hooks"] == ["validate_tool_config", "start_step", "start_role", "iteration_boundary", "stop_role",
                            "step_boundary", "finalize"]
    assert infos["broken"]["imports"] is False
    assert "No module named 'rlprof_this_module_does_not_exist'" in infos["broken"]["error"]
    text = cli("backends").stdout
    assert "broken" in text and "IMPORT FAILED" in text
    assert re.search(r"^recorder +rlprof-test-backends 0\.0\.1 +ok$", text, re.M), text  # columns sized to the longest name


def test_check_valid_prints_plan_and_exits_0(test_backends, tmp_path, cli):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("global_profiler: {tool: recorder, steps: [1, 2]}\n"
                   "actor_rollout_ref: {actor: {profiler: {enable: true, ranks: [0, 2, 3], tool_config: {recorder: {discrete: true}}}}}\n"
                   "critic: {profiler: {enable: true, all_ranks: true}}\n")
    proc = cli("check", str(cfg), "global_profiler.steps=[2]", "--world-size", "4")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "tools: recorder   steps: [2]   save_path: outputs/profile   world size: 4",
        "step 2:",
        "  actor   discrete  ranks 0,2-3",
        "  rollout discrete  ranks 0,2-3",
        "  ref     discrete  ranks 0,2-3",
        "  critic  e2e       ranks 0-3",
        "  reward  off       (enable=false)",
        "armed (global_profiler.on_demand: true, a tool set, a role enabled): `rlprof capture outputs/profile` captures "
        "the next steps of a running job on actor ranks 0,2-3, rollout ranks 0,2-3, ref ranks 0,2-3, critic ranks 0-3",
        "no trigger (global_profiler.trigger: null): nothing is captured on anomaly",
    ]
    plan = json.loads(cli("check", str(cfg), "--world-size", "4", "--json").stdout)
    assert plan["roles"]["critic"] == {"ranks": [[0, 3]], "mode": "e2e", "schedule": None}
    assert plan["roles"]["actor"]["ranks"] == [[0, 0], [2, 3]]
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
    (["global_profiler.tool=broken", "global_profiler.steps=[1]"], 'backend "broken" (rlprof-test-backends 0.0.1): import failed'),
])
def test_check_invalid_exits_2_with_the_message(test_backends, args, message, cli):
    proc = cli("check", *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_check_prints_warnings_to_stderr_once(test_backends, cli):
    proc = cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]", "critic.profiler.enable=true")
    assert proc.returncode == 0
    assert "warning: critic.profiler: enable=true but ranks=[] and all_ranks=false: this role collects nothing" in proc.stderr
    assert "warning" not in proc.stdout
    # rollout and ref follow the actor: one warning for the section the user wrote, not three
    proc = cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]", "actor_rollout_ref.actor.profiler.enable=true",
               "actor_rollout_ref.actor.profiler.schedule={active: 1}")
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: actor_rollout_ref.actor.profiler: enable=true but ranks=[] and all_ranks=false: this role collects nothing "
        "(set ranks or all_ranks=true) (rollout and ref follow it)",
        "warning: actor_rollout_ref.actor.profiler.schedule: in end-to-end mode a schedule narrows the role's ranges to the "
        "sampled iterations but the step capture still holds the whole step; use discrete mode to shrink the capture "
        "(rollout and ref follow it)",
    ]


def test_migrate_prints_yaml_to_stdout_and_warnings_to_stderr(tmp_path, cli):
    legacy = tmp_path / "legacy.yaml"
    legacy.write_text("trainer: {profile_steps: [1]}\nactor_rollout_ref: {actor: {profile_ranks: [0]}}\n")
    proc = cli("check", str(legacy), "--migrate")
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stdout and "deprecated" in proc.stderr
    import yaml

    assert yaml.safe_load(proc.stdout)["global_profiler"]["steps"] == [1]


def test_no_arguments_prints_short_help_and_exits_2(cli):
    proc = cli()
    assert proc.returncode == 2
    assert proc.stderr.startswith("usage: rlprof")
    assert "  check " in proc.stderr and "  backends " in proc.stderr and "Traceback" not in proc.stderr


def test_help_is_plain_text_and_shows_every_command_and_check_option(cli):
    proc = cli("--help")
    assert proc.returncode == 0
    assert "``" not in proc.stdout
    for text in ("check", "backends", "demo", "report", "timeline", "compare", "--version", "--json", "--replicas",
                 "--world-size", "--migrate"):
        assert text in proc.stdout, text
    check_help = cli("check", "--help").stdout
    assert "--replicas N" in check_help and "--json" in check_help and "``" not in check_help


def test_version(cli):
    from rlprof import __version__

    proc = cli("--version")
    assert (proc.returncode, proc.stdout.strip()) == (0, f"rlprof {__version__}")


def test_unknown_command_has_did_you_mean(cli):
    proc = cli("chek")
    assert proc.returncode == 2
    assert proc.stderr.startswith("rlprof: unknown command 'chek' (did you mean 'check'?); commands: check, backends")
    assert cli("frobnicate").returncode == 2
    assert cli("--frobnicate").returncode == 2


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_check_world_size_must_be_positive(value, cli):
    proc = cli("check", "global_profiler.tool=torch", "--world-size", value)
    assert proc.returncode == 2
    assert "argument --world-size: got" in proc.stderr and "allowed: a positive whole number" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_check_cost_does_not_depend_on_the_largest_rank():
    """A plan per rank made rank 123456789 hang; ranks that resolve alike are resolved once. (A
    subprocess: its timeout turns a hang back into a failure.)"""
    proc = subprocess.run([*RLPROF, "check", "global_profiler.tool=torch", "global_profiler.steps=[1]",
                           "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0,123456789]"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "world size: 123456790" in proc.stdout and "actor   e2e       ranks 0,123456789" in proc.stdout
    proc = subprocess.run([*RLPROF, "check", "global_profiler.tool=torch", "global_profiler.steps=[1]", "--world-size", "123456789",
                           "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"],
                          capture_output=True, text=True, timeout=60)
    assert "actor   e2e       ranks 0-123456788" in proc.stdout


def test_check_unusable_save_path_exits_2(tmp_path, cli):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    proc = cli("check", "global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={a_file}",
               "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true")
    assert proc.returncode == 2
    assert f"global_profiler.save_path: got '{a_file}'" in proc.stderr and "Traceback" not in proc.stderr
    assert a_file.read_text() == "x"


def test_hydra_delete_override_is_not_taken_for_a_file(tmp_path, cli):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("global_profiler: {tool: torch, steps: [1]}\n")
    proc = cli("check", str(cfg), "~global_profiler.tool")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("profiling is off (no global_profiler.tool)")
    proc = cli("check", str(cfg), "~global_profiler.save_path")
    assert proc.returncode == 2
    assert "override '~global_profiler.save_path': global_profiler.save_path is not set, so there is nothing to delete" in proc.stderr


def test_a_bad_override_is_named(tmp_path, cli):
    proc = cli("check", "global_profiler.tool=torch", "global_profiler.steps=[1,", "critic.profiler.enable=true")
    assert proc.returncode == 2
    assert "override 'global_profiler.steps=[1,': not valid YAML" in proc.stderr


def test_yaml_top_level_list_is_a_plain_error(tmp_path, cli):
    cfg = tmp_path / "list.yaml"
    cfg.write_text("- global_profiler\n- tool\n")
    proc = cli("check", str(cfg))
    assert proc.returncode == 2
    assert f"config file '{cfg}': the top level is a list" in proc.stderr
    assert "Index" not in proc.stderr and "Traceback" not in proc.stderr


def test_backends_columns_align_for_long_names(tmp_path, cli, monkeypatch):
    """A backend name longer than the old fixed 14-character column still lines up."""
    site = tmp_path / "site"
    dist = site / "rlprof_long_name_backend-0.0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: rlprof-long-name-backend\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text("[rlprof.backends]\na_very_long_backend_name_indeed = rlprof_long_missing:B\n")
    monkeypatch.syspath_prepend(str(site))
    proc = cli("backends")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    head = [line for line in lines if line and not line.startswith(" ")]
    columns = {line.index("rlprof-") for line in head}
    assert len(columns) == 1, lines
    indents = {len(line) - len(line.lstrip()) for line in lines if line.startswith(" ")}
    assert indents == columns, lines


def test_report_counts_one_profiling_process_in_the_singular(tmp_path, capsys):
    from rlprof.cli.report import main as report_main
    from rlprof.testing.generated_run import generate_run

    generate_run(tmp_path, run_id="20260101-000000-abcdef", ranks=1, steps=(1,))
    report_main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "; 1 profiling process on 1 host" in out and "1 profiling processes" not in out


def test_output_piped_into_a_reader_that_stops_early_is_not_a_failure(tmp_path):
    """`rlprof report RUN | head -3`: the reader closing the pipe ends the command quietly, exit 0.
    (A subprocess: the closed pipe and the interpreter's last flush are the process's own.)"""
    from rlprof.testing.generated_run import generate_run

    run_dir = generate_run(tmp_path, ranks=32, steps=(1, 2, 3))
    proc = subprocess.run(f"{' '.join(RLPROF)} report {run_dir} | head -3", shell=True,
                          capture_output=True, text=True)
    assert len(proc.stdout.splitlines()) == 3
    assert "failed" not in proc.stderr and "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
