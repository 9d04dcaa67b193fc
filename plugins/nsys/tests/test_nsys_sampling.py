"""Sampling (``profiler.schedule``) seen by a real NVTX tool: the core cuts a region into windows of
iterations; the backend must open exactly those windows and no more."""

from __future__ import annotations

from nsys_harness import verl_config


def loop_spec(config, iterations=16):
    return {"config": config, "roles": ["actor"], "stages": {"actor": ["update"]}, "run_steps": [1],
            "regions": [["actor", "update", iterations]], "without_torch": True}


def test_one_active_iteration_of_sixteen_is_one_window_and_one_range(profiled, tmp_path):
    config = verl_config(tmp_path / "out", steps=[1], mode="discrete", schedule={"active": 1})
    (loop,) = profiled(loop_spec(config))

    rec = loop.recording
    assert rec.outline() == [("step1", ["actor_update"])]
    assert rec.windows() == ["step1.actor_update"]
    assert loop.result["windows_opened"] == loop.result["expected_captures"] == 1
    assert loop.result["worker_options"]["runtime_env"]["nsight"]["capture-range-end"] == "repeat-shutdown:1"
    # the single active iteration closes its window at once: no iteration marks inside it
    assert [m for m in rec.marks() if "iteration" in m] == []


def test_repeating_windows_are_counted_exactly(profiled, tmp_path):
    # wait 1, active 2, twice: iterations 1-2 and 4-5 of 8 -> two windows, one iteration mark in each
    config = verl_config(tmp_path / "out", steps=[1], mode="discrete", schedule={"wait": 1, "active": 2, "repeat": 2})
    (loop,) = profiled(loop_spec(config, iterations=8))

    rec = loop.recording
    assert rec.outline() == [("step1", ["actor_update", "actor_update"])]
    assert rec.windows() == ["step1.actor_update", "step1.actor_update.1"]
    assert [m for m in rec.marks_with_payload() if "iteration" in m[0]] == [("actor_update iteration", 1), ("actor_update iteration", 4)]
    assert loop.result["windows_opened"] == loop.result["expected_captures"] == 2
    assert loop.result["worker_options"]["runtime_env"]["nsight"]["capture-range-end"] == "repeat-shutdown:2"
