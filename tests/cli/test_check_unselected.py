"""``rlprof check`` checks the tool sections of installed backends that are not selected (issue 40):
a bad value there is a warning, in text and in ``--json``, whether the configuration is valid or
not, so a user who switches tools later does not meet it then. The selected tools' mistakes stay
errors (exit 2). Runs the real installed backends (rlprof-npu, rlprof-nsys) through their entry points."""

import json

import yaml

TYPO = """\
global_profiler: {tool: torhc, steps: [1]}
actor_rollout_ref:
  actor:
    profiler:
      enable: true
      ranks: [0]
      tool_config:
        npu: {level: level7}
"""
LEVEL7 = "actor_rollout_ref.actor.profiler.tool_config.npu.level: got 'level7' (str); allowed: level_none, level0, level1, level2"

VALID_WITH_BAD_UNSELECTED = """\
global_profiler:
  tool: torch
  steps: [1]
  global_tool_config: {nsys: {capture_rang: cudaProfilerApi}}
actor_rollout_ref:
  actor:
    profiler:
      enable: true
      ranks: [0]
      tool_config:
        npu: {level: level7}
        torch: {contents: [cpu]}
critic:
  profiler:
    enable: false
    tool_config:
      npu: {contents: [cpu, gpu]}
"""


def written(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_a_typo_in_the_tool_does_not_hide_a_bad_value_for_another_installed_backend(tmp_path, rlprof_cli):
    config = written(tmp_path, TYPO)
    proc = rlprof_cli("check", config)
    assert proc.returncode == 2
    lines = proc.stderr.splitlines()
    assert lines[:2] == ["rlprof check: invalid configuration:",
                         "  global_profiler.tool: got 'torhc', but no installed backend has that name (did you mean 'torch'?). "
                         "Installed backends: npu, nsys, precision_debugger, torch, torch_memory"], proc.stderr
    warned = [line for line in lines if line.startswith("warning: ")]
    assert len(warned) == 1, proc.stderr
    assert warned[0].startswith(f"warning: {LEVEL7}")
    assert "npu is not a selected tool" in warned[0]

    report = json.loads(rlprof_cli("check", config, "--json").stdout)
    assert report["valid"] is False
    assert [e["key"] for e in report["errors"]] == ["global_profiler.tool"]
    assert len(report["warnings"]) == 1 and report["warnings"][0].startswith(LEVEL7), report["warnings"]


def test_bad_values_for_unselected_backends_are_warnings_of_a_valid_config(tmp_path, rlprof_cli):
    config = written(tmp_path, VALID_WITH_BAD_UNSELECTED)
    proc = rlprof_cli("check", config)
    assert proc.returncode == 0, proc.stderr
    expected = [
        LEVEL7,
        "global_profiler.global_tool_config.nsys.capture_rang: unknown key (did you mean 'capture_range'?)",
        # a role that is not enabled: its section is still read once npu is selected and the role enabled
        "critic.profiler.tool_config.npu.contents: got 'gpu' (str); allowed: a list of npu, cpu",
    ]
    for says in expected:
        assert any(line.startswith(f"warning: {says}") for line in proc.stderr.splitlines()), (says, proc.stderr)
    report = json.loads(rlprof_cli("check", config, "--json").stdout)
    assert report["valid"] is True
    for says in expected:
        assert any(w.startswith(says) for w in report["warnings"]), (says, report["warnings"])


def test_the_selected_tools_mistakes_stay_errors(tmp_path, rlprof_cli):
    config = written(tmp_path, TYPO.replace("torhc", "npu"))
    proc = rlprof_cli("check", config)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[:2] == ["rlprof check: invalid configuration:", f"  {LEVEL7}"]
    assert "warning: actor_rollout_ref.actor.profiler.tool_config.npu" not in proc.stderr


def test_verl_s_generated_sections_give_no_warning(verl_generated_config, tmp_path, rlprof_cli):
    """verl writes a section with its defaults for every tool: every installed backend accepts them."""
    doc = yaml.safe_load(verl_generated_config.read_text())
    doc["global_profiler"].update(tool="torch", steps=[1], save_path=str(tmp_path / "out"))
    doc["actor_rollout_ref"]["actor"]["profiler"].update(enable=True, ranks=[0])
    proc = rlprof_cli("check", written(tmp_path, yaml.safe_dump(doc)))
    assert proc.returncode == 0, proc.stderr
    assert "is not a selected tool" not in proc.stderr, proc.stderr
