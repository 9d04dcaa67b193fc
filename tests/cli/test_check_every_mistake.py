"""``rlprof check`` lists every independent mistake of a configuration in one run (issue 34), and
the Python API raises them together as one ConfigError."""

import json

import pytest

import rlprof
from rlprof.errors import ConfigError, ConfigErrors

THREE_MISTAKES_AND_A_TYPO = """\
global_profiler:
  tool: [recordr, faulty]
  steps: [1]
  save_pth: out
actor_rollout_ref:
  actor:
    profiler:
      enable: true
      ranks: [0, 9]
      tool_config:
        faulty: {fail_in: [x]}
"""
MISTAKES = {  # key -> what its message says
    "global_profiler.save_pth": "unknown key (did you mean 'save_path'?)",
    "global_profiler.tool": "got 'recordr', but no installed backend has that name (did you mean 'recorder'?)",
    "actor_rollout_ref.actor.profiler.ranks": "got [0, 9]; allowed: ranks 0..3 (rank 9 is outside a world of 4)",
    "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in": "got 'x'; allowed: start_step",
}


@pytest.fixture
def four_mistakes(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(THREE_MISTAKES_AND_A_TYPO)
    return path


def test_check_lists_every_independent_mistake_at_once(test_backends, four_mistakes, rlprof_cli):
    proc = rlprof_cli("check", four_mistakes, "--world-size", "4")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert lines[0] == "rlprof check: invalid configuration, 4 mistakes:"
    assert len(lines) == 5, proc.stderr
    for key, says in MISTAKES.items():
        assert any(line.startswith(f"  - {key}: ") and says in line for line in lines[1:]), (key, proc.stderr)


def test_check_json_gives_the_mistakes_as_a_list_on_stdout(test_backends, four_mistakes, rlprof_cli):
    proc = rlprof_cli("check", four_mistakes, "--world-size", "4", "--json")
    assert proc.returncode == 2
    report = json.loads(proc.stdout)
    assert report["valid"] is False
    by_key = {error["key"]: error for error in report["errors"]}
    assert set(by_key) == set(MISTAKES)
    for key, says in MISTAKES.items():
        assert says in by_key[key]["message"]
    assert by_key["global_profiler.tool"]["value"] == "recordr"
    assert "recorder" in by_key["global_profiler.tool"]["allowed"]
    assert by_key["global_profiler.save_pth"]["value"] == "save_pth"
    assert "save_path" in by_key["global_profiler.save_pth"]["allowed"]
    # the backend raised a message alone: key, value and allowed are read from its standard form
    assert by_key["actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in"]["value"] == "'x'"
    assert by_key["actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in"]["allowed"].startswith("start_step")
    assert by_key["actor_rollout_ref.actor.profiler.ranks"]["allowed"].startswith("ranks 0..3")


def test_check_json_of_a_valid_config_says_valid(test_backends, rlprof_cli):
    proc = rlprof_cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["valid"] is True


def test_one_mistake_reads_as_before(test_backends, rlprof_cli):
    proc = rlprof_cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[0]")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "rlprof check: invalid configuration:",
        "  global_profiler.steps: got [0] (list); allowed: a list of step numbers counted from 1 as verl does, "
        "e.g. [1, 2, 5], or null for no profiling",
    ]
    report = json.loads(rlprof_cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[0]", "--json").stdout)
    assert report == {"valid": False, "errors": [{
        "key": "global_profiler.steps", "value": [0],
        "allowed": "a list of step numbers counted from 1 as verl does, e.g. [1, 2, 5], or null for no profiling",
        "message": proc.stderr.splitlines()[1].strip()}], "warnings": []}


def test_tool_typo_has_a_did_you_mean(test_backends, rlprof_cli, save_path):
    proc = rlprof_cli("check", "global_profiler.tool=torhc", "global_profiler.steps=[1]")
    assert proc.returncode == 2
    assert "got 'torhc', but no installed backend has that name (did you mean 'torch'?)" in proc.stderr
    with pytest.raises(rlprof.BackendError, match=r"did you mean 'torch'\?"):
        rlprof.Profiler(None, overrides=["global_profiler.tool=torhc", "global_profiler.steps=[1]",
                                         f"global_profiler.save_path={save_path}",
                                         "actor_rollout_ref.actor.profiler.enable=true",
                                         "actor_rollout_ref.actor.profiler.all_ranks=true"])


def test_load_config_raises_every_mistake_as_one_config_error():
    with pytest.raises(ConfigError) as info:
        rlprof.load_config({"global_profiler": {"tool": "torch", "steps": [0], "sve_path": "x"},
                            "critic": {"profiler": {"enable": "maybe", "rank": [0]}}})
    assert isinstance(info.value, ConfigErrors)
    keys = [error.key for error in info.value.errors]
    assert keys == ["global_profiler.sve_path", "global_profiler.steps", "critic.profiler.rank", "critic.profiler.enable"]
    text = str(info.value)
    assert text.startswith("4 mistakes:\n- global_profiler.sve_path: unknown key (did you mean 'save_path'?)")
    assert len(text.splitlines()) == 5


def test_load_config_raises_one_mistake_as_itself():
    with pytest.raises(ConfigError) as info:
        rlprof.load_config({"global_profiler": {"tool": "torch", "steps": [0]}})
    assert not isinstance(info.value, ConfigErrors)
    assert info.value.key == "global_profiler.steps"


def test_a_mistake_is_not_reported_again_by_the_checks_that_depend_on_it(test_backends, rlprof_cli):
    # tool is bad, so which tool names tool_config may hold is not known: no "unknown key mytool"
    proc = rlprof_cli("check", "global_profiler.tool=[mytool,mytool]", "global_profiler.steps=[1]",
                      "actor_rollout_ref.actor.profiler.tool_config.mytool.x=1")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == "rlprof check: invalid configuration:", proc.stderr
    assert "global_profiler.tool: got" in proc.stderr and "each backend at most once" in proc.stderr
    # the actor's mode cannot be read: no "roles actor and ref disagree on discrete" on top
    proc = rlprof_cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]",
                      "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
                      "actor_rollout_ref.actor.profiler.discrete=maybe",
                      "actor_rollout_ref.ref.profiler.enable=true", "actor_rollout_ref.ref.profiler.all_ranks=true",
                      "actor_rollout_ref.ref.profiler.discrete=true")
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[0] == "rlprof check: invalid configuration:", proc.stderr
    assert "actor_rollout_ref.actor.profiler.discrete: got 'maybe'" in proc.stderr


def test_ranks_outside_the_world_are_reported_for_every_role(test_backends, rlprof_cli):
    proc = rlprof_cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]", "--world-size", "4",
                      "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[9]",
                      "critic.profiler.enable=true", "critic.profiler.ranks=[7]")
    assert proc.returncode == 2
    assert "actor_rollout_ref.actor.profiler.ranks: got [9]" in proc.stderr
    assert "critic.profiler.ranks: got [7]" in proc.stderr


def test_a_bad_value_in_global_tool_config_is_named_there_once(test_backends, rlprof_cli):
    proc = rlprof_cli("check", "global_profiler.tool=recorder", "global_profiler.steps=[1]",
                      "global_profiler.global_tool_config.recorder.discrete=maybe",
                      "actor_rollout_ref.actor.profiler.enable=true", "critic.profiler.enable=true")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0] == "rlprof check: invalid configuration:", proc.stderr
    assert lines[1].startswith("  global_profiler.global_tool_config.recorder.discrete: got 'maybe'")


def test_a_misspelled_section_does_not_hide_the_other_mistakes(test_backends, rlprof_cli):
    proc = rlprof_cli("check", "global_profilr.tool=recorder", "critic.profilr.enable=true",
                      "actor_rollout_ref.actor.profiler.enable=maybe")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0] == "rlprof check: invalid configuration, 3 mistakes:", proc.stderr
    assert lines[1].startswith("  - global_profilr: unknown top-level section (did you mean 'global_profiler'?)")
    assert lines[2].startswith("  - critic.profilr: unknown key (did you mean 'profiler'?)")
    assert lines[3].startswith("  - actor_rollout_ref.actor.profiler.enable: got 'maybe'")


def test_the_issue_example_with_the_npu_backend(rlprof_cli, tmp_path):
    pytest.importorskip("rlprof_npu")
    path = tmp_path / "bad.yaml"
    path.write_text("global_profiler: {tool: [torhc, npu], steps: [1], save_pth: out}\n"
                    "actor_rollout_ref: {actor: {profiler: {enable: true, ranks: [0, 9],"
                    " tool_config: {npu: {level: level7, contents: [npu, nothing]}}}}}\n")
    report = json.loads(rlprof_cli("check", path, "--world-size", "4", "--json").stdout)
    keys = [error["key"] for error in report["errors"]]
    assert keys[:3] == ["global_profiler.save_pth", "actor_rollout_ref.actor.profiler.ranks", "global_profiler.tool"]
    assert keys[3].startswith("actor_rollout_ref.actor.profiler.tool_config.npu."), keys  # the backend's first


def test_a_backend_that_cannot_be_loaded_hides_no_other_backends_mistakes(test_backends, rlprof_cli):
    proc = rlprof_cli("check", "global_profiler.tool=[broken,nope,faulty]", "global_profiler.steps=[1]",
                      "actor_rollout_ref.actor.profiler.enable=true",
                      "actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in=[x]")
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[0] == "rlprof check: invalid configuration, 3 mistakes:", proc.stderr
    assert 'backend "broken" (rlprof-test-backends 0.0.1): import failed' in lines[1]
    assert "got 'nope', but no installed backend has that name" in lines[2]
    assert lines[3].startswith("  - actor_rollout_ref.actor.profiler.tool_config.faulty.fail_in: got 'x'")
