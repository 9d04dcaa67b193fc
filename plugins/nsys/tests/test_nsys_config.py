"""tool_config validation, the worker's nsight runtime_env, the driver's helpers, missing nsys."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import sys

import pytest

from nsys_harness import verl_config
from rlprof import ConfigError
from rlprof.runtime.checking import check_config
from rlprof.context import RuntimeEnvContext
from rlprof.ray import worker_options
from rlprof_nsys import controller_command, controller_runtime_env, cpu_sampling
from rlprof_nsys.backend import NsysBackend
from rlprof_nsys.options import validate

KEY = "actor_rollout_ref.actor.profiler.tool_config.nsys"
HOST_CANNOT_SAMPLE = cpu_sampling.sampling_problem() is not None  # the real probe, before any test patches it

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


@pytest.fixture(autouse=True)
def host_can_sample(monkeypatch):
    """Most tests here are about the options themselves: pretend this host has performance counters."""
    monkeypatch.setattr(cpu_sampling, "sampling_problem", lambda: None)


def test_worker_runtime_env_keeps_the_users_options_and_sets_the_capture():
    env = runtime_env({"worker_nsight_options": {"trace": "cuda,nvtx", "cuda-memory-usage": "true"}})
    assert env == {"nsight": {"trace": "cuda,nvtx", "cuda-memory-usage": "true", "capture-range": "cudaProfilerApi",
                              "capture-range-end": "repeat-shutdown:3", "kill": "none"},
                   "env_vars": {"RLPROF_NSYS_WORKER": "1", "PATH": os.path.dirname(sys.executable) + ":${PATH}",
                                "RLPROF_NSYS_RANK": "0"}}  # unique per worker: Ray would queue identical ones
    assert runtime_env({}, captures=False) is None


def test_workers_start_with_this_interpreter_first_on_path():
    # Ray's nsight plugin runs "nsys profile ... python": a bare name, looked up on the worker's PATH
    path = runtime_env({})["env_vars"]["PATH"]
    first, rest = path.split(":", 1)
    assert os.path.samefile(os.path.join(first, "python"), sys.executable) or os.path.samefile(first, os.path.dirname(sys.executable))
    assert rest == "${PATH}"  # Ray expands it to the worker's own PATH


def test_capture_range_nvtx_makes_windows_nvtx_ranges():
    env = runtime_env({"capture_range": "nvtx"}, expected=2)
    assert env["nsight"]["capture-range"] == "nvtx"
    assert env["nsight"]["nvtx-capture"] == "rlprof_capture@rlprof"
    assert env["nsight"]["capture-range-end"] == "repeat-shutdown:2"


@pytest.mark.parametrize("section, where, allowed", [
    ({"capture_range": "cuda"}, "capture_range", "'nvtx'"),
    ({"capture_range": "nvtx", "worker_nsight_options": {"capture-range": "cudaProfilerApi"}},
     "worker_nsight_options.capture-range", "follows the section's capture_range"),
    ({"capture_range": "nvtx", "worker_nsight_options": {"nvtx-capture": "mine@x"}},
     "worker_nsight_options.nvtx-capture", "leave it out"),
])
def test_capture_range_errors_name_the_key(section, where, allowed):
    with pytest.raises(ConfigError) as err:
        validate(section, KEY)
    assert f"{KEY}.{where}" in str(err.value) and allowed in str(err.value)


def test_without_performance_counters_nsys_gets_no_cpu_sampling(monkeypatch, caplog):
    monkeypatch.setattr(cpu_sampling, "sampling_problem", lambda: "this host has no hardware performance counters")
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        env = runtime_env({"worker_nsight_options": {"trace": "nvtx"}})
    assert env["nsight"]["sample"] == env["nsight"]["cpuctxsw"] == "none"
    assert "no hardware performance counters" in caplog.text and "sample=none" in caplog.text
    mine = runtime_env({"worker_nsight_options": {"sample": "process-tree"}})  # the user's choice wins
    assert mine["nsight"]["sample"] == "process-tree" and "cpuctxsw" not in mine["nsight"]
    # the driver-side actor too, also with Ray's "default" options spelled out
    controller = controller_runtime_env({"global_profiler": {"tool": "nsys", "steps": [1]}})["nsight"]
    assert controller["sample"] == controller["cpuctxsw"] == "none" and controller["t"] == "cuda,cudnn,cublas,nvtx"


def test_an_explicit_capture_range_end_wins_but_is_questioned(caplog):
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        env = runtime_env({"worker_nsight_options": {"capture-range-end": "repeat-shutdown:18"}}, expected=3)
    assert env["nsight"]["capture-range-end"] == "repeat-shutdown:18"
    assert "exactly 3 capture window(s)" in caplog.text and "only at process exit" in caplog.text


def test_the_controller_gets_its_own_options(tmp_path):
    config = verl_config(tmp_path, steps=[1], nsys=VERL_NSYS_SECTION)
    path = {"PATH": os.path.dirname(sys.executable) + ":${PATH}"}  # Ray runs a bare `python` for the actor too
    assert controller_runtime_env(config) == {"nsight": VERL_NSYS_SECTION["controller_nsight_options"], "env_vars": path}
    assert controller_runtime_env(verl_config(tmp_path, steps=[1])) == {"nsight": "default", "env_vars": path}
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
    no_sampling = " --sample=none --cpuctxsw=none" if HOST_CANNOT_SAMPLE else ""
    assert proc.stdout.strip() == f"nsys profile --trace=cuda{no_sampling} python main.py x=1"


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
