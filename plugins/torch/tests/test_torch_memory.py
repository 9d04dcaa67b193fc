"""The torch_memory backend: configuration, the CPU-only path, and (with CUDA) a real snapshot."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest
import torch

import rlprof
from rlprof_torch.memory import NO_CUDA, TorchMemoryBackend

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
without_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")


def memory_config(make_config, section: dict | None = None, tool="torch_memory") -> dict:
    config = make_config(tool=tool)
    config["actor_rollout_ref"]["actor"]["profiler"]["tool_config"] = {"torch_memory": dict(section or {})}
    return config


@without_cuda
def test_without_cuda_it_warns_once_writes_nothing_and_training_goes_on(make_config, run_training, caplog):
    with caplog.at_level(logging.WARNING):
        run = run_training(memory_config(make_config))
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and "no CUDA device" in warnings[0].getMessage()
    assert run.artifacts == [] and not run.profiler.errors
    assert not list(run.run_dir.rglob("*.pickle"))


@without_cuda
def test_without_cuda_the_environment_check_says_why():
    assert TorchMemoryBackend().check_environment() == [NO_CUDA]


@without_cuda
def test_with_torch_beside_it_the_traces_still_come(make_config, run_training):
    run = run_training(memory_config(make_config, tool=["torch", "torch_memory"]))
    assert [r["backend"] for r in run.artifacts] == ["torch", "torch"]


def test_verl_keys_are_accepted_and_defaults_filled(make_config):
    section = {"trace_alloc_max_entries": 1000, "stack_depth": 16, "stacks": "python", "kw_args": {},
               "memory_snapshot_num_steps": 2, "dump_on_oom": False, "name": "torch_memory"}
    prof = rlprof.Profiler(memory_config(make_config, section), roles=("actor",))
    assert prof.tool_configs["actor"]["torch_memory"] == {
        "trace_alloc_max_entries": 1000, "stack_depth": 16, "context": "all", "stacks": "python"}
    prof.finalize()


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"trace_alloc_max_entries": 0}, "trace_alloc_max_entries: got 0 (int); allowed: a positive integer"),
        ({"stack_depth": "32"}, "stack_depth: got '32' (str); allowed: a positive integer"),
        ({"stack_depth": True}, "stack_depth: got True (bool)"),
        ({"context": "everything"}, "context: got 'everything' (str); allowed: null, state, alloc, all"),
        ({"stack": "all"}, "stack: unknown key (did you mean 'stacks'?)"),
    ],
)
def test_bad_values_are_config_errors_naming_the_key(make_config, section, message):
    with pytest.raises(rlprof.ConfigError) as caught:
        rlprof.Profiler(memory_config(make_config, section), roles=("actor",))
    assert f"actor_rollout_ref.actor.profiler.tool_config.torch_memory.{message}" in str(caught.value)


@pytest.mark.cuda
@needs_cuda
def test_a_real_snapshot_per_capture_opens_in_the_memory_viewer(make_config, run_training, tmp_path):
    import pickle

    run = run_training(memory_config(make_config, tool=["torch", "torch_memory"]), device="cuda")
    snapshots = run.files("torch_memory")
    assert [p.name for p in snapshots] == ["rank0.memory_snapshot.pickle"] * 2
    for path in snapshots:
        snapshot = pickle.loads(path.read_bytes())
        events = [e for trace in snapshot["device_traces"] for e in trace]
        assert any(e["action"] == "alloc" for e in events)
        html = tmp_path / f"{path.parent.parent.parent.name}.html"
        subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", str(path), "-o", str(html)], check=True)
        assert html.stat().st_size > 0
