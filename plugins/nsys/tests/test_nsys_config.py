"""tool_config validation, the worker's nsight runtime_env, the driver's helpers, missing nsys."""

from __future__ import annotations

import logging
import stat
import subprocess
import sys

import pytest

from nsys_harness import verl_config
from rlprof import ConfigError
from rlprof.checking import check_config
from rlprof.context import RuntimeEnvContext
from rlprof.ray import worker_options
from rlprof_nsys import controller_command, controller_runtime_env
from rlprof_nsys.backend import NsysBackend
from rlprof_nsys.options import validate

KEY = "actor_rollout_ref.actor.profiler.tool_config.nsys"

VERL_NSYS_SECTION = {  # global_profiler.global_tool_config.nsys as verl's ppo_trainer.yaml ships it
    "_target_": "verl.utils.profiler.config.NsightToolConfig",
    "discrete": False,
    "name": "nsight",
    "controller_nsight_options": {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph"},
    "worker_nsight_options": {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph",
                              "capture-range": "cudaProfilerApi", "capture-range-end": None, "kill": "none"},
}


def test_verls_own_section_is_accepted(tmp_path):
    config = verl_config(tmp_path, steps=[1], nsys=VERL_NSYS_SECTION)
    result = check_config(config, world_size=1)
    worker = result.validated["actor"]["nsys"]["worker_nsight_options"]
    assert worker == {"trace": "cuda,nvtx,cublas,ucx", "cuda-memory-usage": "true", "cuda-graph-trace": "graph",
                      "capture-range": "cudaProfilerApi", "kill": "none"}  # the null is "unset"


def test_unknown_key_names_its_path_and_the_known_keys(tmp_path):
    config = verl_config(tmp_path, steps=[1], nsys={"worker_nsight_option": {}})
    with pytest.raises(ConfigError) as error:
        check_config(config, world_size=1)
    message = str(error.value)
    assert "tool_config.nsys.worker_nsight_option: unknown key" in message
    assert "did you mean 'worker_nsight_options'" in message and "ray_nsight_dir" in message


def test_options_are_normalised_for_ray():
    result = validate({"worker_nsight_options": {"--trace": ["cuda", "nvtx"], "cuda-memory-usage": True, "output": "w_%p",
                                                 "sampling-frequency": 1000, "delay": None}}, KEY)
    assert result["worker_nsight_options"] == {"trace": "cuda,nvtx", "cuda-memory-usage": "true", "o": "w_%p",
                                               "sampling-frequency": "1000"}
    assert result["controller_nsight_options"] == {} and result["ray_nsight_dir"] is None


@pytest.mark.parametrize("section, where, allowed", [
    ({"worker_nsight_options": {"capture-range": "nvtx"}}, "worker_nsight_options.capture-range", "cudaProfilerApi"),
    ({"worker_nsight_options": {"c": "hotkey"}}, "worker_nsight_options.capture-range", "cudaProfilerApi"),
    ({"worker_nsight_options": {"capture-range-end": "stop-shutdown"}}, "worker_nsight_options.capture-range-end", "repeat-shutdown:N"),
    ({"worker_nsight_options": ["trace=cuda"]}, "worker_nsight_options", "a mapping"),
    ({"controller_nsight_options": {"trace": {"cuda": True}}}, "controller_nsight_options.trace", "a string"),
    ({"worker_nsight_options": {"o": "a", "output": "b"}}, "worker_nsight_options", "one of them"),
    ({"worker_nsight_options": {"bad name": "x"}}, "worker_nsight_options.bad name", "option name"),
    ({"ray_nsight_dir": 3}, "ray_nsight_dir", "a directory path"),
])
def test_bad_values_say_where_and_what_is_allowed(section, where, allowed):
    with pytest.raises(ConfigError) as error:
        validate(section, KEY)
    assert f"{KEY}.{where}" in str(error.value) and allowed in str(error.value)


def runtime_env(tool_config, *, captures=True, expected=3):
    ctx = RuntimeEnvContext(backend="nsys", tool_config=validate(tool_config, KEY), rank=0, world_size=1,
                            roles=("actor",), captures=captures, expected_captures=expected)
    return NsysBackend().worker_runtime_env(ctx=ctx)


def test_worker_runtime_env_keeps_the_users_options_and_sets_the_capture():
    env = runtime_env({"worker_nsight_options": {"trace": "cuda,nvtx", "cuda-memory-usage": "true"}})
    assert env == {"nsight": {"trace": "cuda,nvtx", "cuda-memory-usage": "true", "capture-range": "cudaProfilerApi",
                              "capture-range-end": "repeat-shutdown:3", "kill": "none"},
                   "env_vars": {"RLPROF_NSYS_WORKER": "1"}}
    assert runtime_env({}, captures=False) is None


def test_an_explicit_capture_range_end_wins_but_is_questioned(caplog):
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        env = runtime_env({"worker_nsight_options": {"capture-range-end": "repeat-shutdown:18"}}, expected=3)
    assert env["nsight"]["capture-range-end"] == "repeat-shutdown:18"
    assert "exactly 3 capture window(s)" in caplog.text and "only at process exit" in caplog.text


def test_the_controller_gets_its_own_options(tmp_path):
    config = verl_config(tmp_path, steps=[1], nsys=VERL_NSYS_SECTION)
    assert controller_runtime_env(config) == {"nsight": VERL_NSYS_SECTION["controller_nsight_options"]}
    assert controller_runtime_env(verl_config(tmp_path, steps=[1])) == {"nsight": "default"}
    assert controller_command(["python", "main.py"], config) == [
        "nsys", "profile", "--trace=cuda,nvtx,cublas,ucx", "--cuda-memory-usage=true", "--cuda-graph-trace=graph",
        "python", "main.py"]
    short = controller_command(["python"], overrides=["+global_profiler.global_tool_config.nsys.controller_nsight_options.t=nvtx"])
    assert short == ["nsys", "profile", "-t", "nvtx", "python"]


def test_the_controller_command_from_the_command_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "rlprof_nsys", "controller-command",
         "global_profiler.global_tool_config.nsys.controller_nsight_options.trace=cuda", "--", "python", "main.py", "x=1"],
        capture_output=True, text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "nsys profile --trace=cuda python main.py x=1"


def fake_nsys(directory):
    path = directory / "nsys"
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_missing_nsys_is_a_clear_error_before_rays(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    config = verl_config(tmp_path / "out", steps=[1])
    with caplog.at_level(logging.ERROR, logger="rlprof"):
        options = worker_options(config, 0, 1, ("actor",), {"actor": ["update"]})
    assert options["runtime_env"]["nsight"]["capture-range-end"] == "repeat-shutdown:1"
    assert "nsys (Nsight Systems CLI) is not on PATH" in caplog.text and "'nsight is not installed'" in caplog.text
    assert any("not on PATH" in p for p in NsysBackend().check_environment())

    fake_nsys(tmp_path)
    assert not any("not on PATH" in p for p in NsysBackend().check_environment())
