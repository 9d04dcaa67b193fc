"""Faults a hostile suite found: a backend whose ``validate_tool_config`` crashes, and Profilers of one
process that disagree. Each asserts what the user sees: training finishes, the other backend's traces
are complete, and the failure is in the manifest and in ``rlprof report``."""

from __future__ import annotations

import gc
import gzip
import json

import rlprof
from rlprof.manifest import read_records

ACTOR = ["actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"]


def train(prof, steps=(1, 2)):
    import torch

    for step in steps:
        prof.start_step(step)
        with prof.role("actor", "update"):
            torch.randn(32, 32) @ torch.randn(32, 32)
        prof.step_boundary()


def test_a_crashing_validate_tool_config_releases_that_backend_and_torch_captures_on(test_backends, save_path,
                                                                                    rlprof_cli):
    prof = rlprof.Profiler(None, run_id="crash", overrides=[
        "global_profiler.tool=[faulty,torch]", "global_profiler.steps=[1,2]", f"global_profiler.save_path={save_path}",
        "global_profiler.global_tool_config.faulty.crash_validating=true", *ACTOR])  # no exception at start-up
    train(prof)
    prof.finalize()
    traces = sorted(save_path.rglob("*.pt.trace.json.gz"))
    assert len(traces) == 2  # one per profiled step, complete and loadable
    for trace in traces:
        events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
        assert any(e.get("name") == "actor_update" for e in events)
    records = list(read_records([save_path]))
    errors = [r for r in records if r["type"] == "error"]
    assert [(e["backend"], e["hook"]) for e in errors] == [("faulty", "validate_tool_config")]
    assert "crashes on purpose" in errors[0]["error"]
    assert [r["backend"] for r in records if r["type"] == "cleanup"] == ["faulty"]  # released: finalized once
    shown = rlprof_cli("report", save_path)
    assert "faulty" in shown.stdout and "validate_tool_config" in shown.stdout, shown.stdout


def test_a_config_the_backend_rejects_still_stops_the_run_before_training(test_backends, save_path):
    import pytest

    with pytest.raises(rlprof.ConfigError) as info:
        rlprof.Profiler(None, overrides=[
            "global_profiler.tool=faulty", "global_profiler.steps=[1]", f"global_profiler.save_path={save_path}",
            "global_profiler.global_tool_config.faulty.fail_in=[nowhere]", *ACTOR])
    assert "global_profiler.global_tool_config.faulty.fail_in" in str(info.value)


def test_rlprof_check_still_reports_a_crashing_validator(test_backends, tmp_path):
    from rlprof.runtime.checking import check_config
    import pytest

    with pytest.raises(rlprof.ConfigError) as info:
        check_config(None, ["global_profiler.tool=faulty", "global_profiler.steps=[1]",
                            "global_profiler.global_tool_config.faulty.crash_validating=true", *ACTOR], world_size=1)
    assert "failed to validate it: RuntimeError" in str(info.value)


def test_a_dropped_profiler_ends_its_session_and_the_next_one_profiles_with_its_own_config(test_backends, save_path,
                                                                                          rlprof_cli):
    """verl's tests (and a worker rebuilt in the same process) build DistProfilers with other tools and
    finalize none: once the first is garbage-collected, the next one gets a session of its own."""
    first = rlprof.Profiler(None, run_id="rebuilt", overrides=[
        "global_profiler.tool=recorder", "global_profiler.steps=[1]", f"global_profiler.save_path={save_path}", *ACTOR])
    first.start_step(1)
    with first.role("actor", "update"):
        pass  # its step is still open when it is dropped
    del first
    gc.collect()
    second = rlprof.Profiler(None, run_id="rebuilt", overrides=[
        "global_profiler.tool=torch", "global_profiler.steps=[1]", f"global_profiler.save_path={save_path}", *ACTOR])
    assert second.backends is not None and list(second.backends.plugins) == ["torch"]
    train(second, steps=(1,))
    second.finalize()
    records = list(read_records([save_path]))
    finalized = sorted(r["reason"] for r in records if r["type"] == "finalized")
    assert finalized == ["collected", "end"]
    assert [r["backend"] for r in records if r["type"] == "artifact"] == ["recorder", "torch"]  # nothing lost
    assert not [r for r in records if r["type"] in ("warning", "error")]
    assert rlprof_cli("report", save_path).returncode == 0
