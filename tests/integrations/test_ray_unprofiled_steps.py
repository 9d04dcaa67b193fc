"""The steps a Ray run does not profile appear in its report beside the profiled ones.

The controller sends nothing to the workers for an unprofiled step (they cost nothing), so the workers
cannot time it: the controller does, from ``start_step`` to ``step_boundary`` (or the next
``start_step``), and writes them as ``unprofiled_steps`` records in its own manifest. Before, a demo
run of 4 steps profiling 1 and 2 reported "unprofiled steps: none recorded" (seen)."""

from __future__ import annotations

import sys

import pytest

from rlprof.analysis.report import build_reports
from rlprof.manifest import read_records
from rlprof.ray import ProfilingController, WorkerSpec
from fake_clock import FakeClock  # tests/fake_clock.py
from test_ray_fanout import Handle, fake_ray


@pytest.fixture
def ray_stand_in(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", fake_ray())


def controller_run(save_path, clock, steps):
    config = {"global_profiler": {"tool": "recorder", "steps": [2], "save_path": str(save_path)},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    controller = ProfilingController(config, [(WorkerSpec(rank=0, world_size=1, roles=("actor",)), Handle())],
                                     run_id="plain-run")
    controller.clock_ns = clock
    controller.setup()
    for step in steps:
        controller.start_step(step)
        clock.advance_ms(100 + step)  # the step's work, as the trainer waits for it
        controller.step_boundary()
        clock.advance_ms(1000)  # between steps: no step's time
    controller.finalize()
    return controller


def test_the_controller_times_the_steps_it_does_not_profile(ray_stand_in, test_backends, tmp_path):
    clock = FakeClock()
    controller = controller_run(tmp_path, clock, steps=range(1, 6))
    (report,) = build_reports([controller.run_dir])
    assert report.cost.unprofiled_count == 3  # steps 3, 4, 5; step 2 was profiled, step 1 is warm-up (issue 49)
    assert report.cost.unprofiled_ms == 104.0  # median of 103, 104, 105 ms: the time between steps is no step's
    records = [r for r in read_records([controller.run_dir]) if r["type"] == "unprofiled_steps"]
    assert [r["steps"] for r in records] == [[1], [3, 4, 5]]  # written as profiled step 2 began, and at finalize
    assert {r["rank"] for r in records} == {None}  # the controller's own manifest


def test_the_controllers_own_fan_outs_are_phases_of_the_profiled_step(ray_stand_in, test_backends, tmp_path):
    """'(outside regions)' of a Ray run holds the controller's own calls: while it starts the step on one
    worker after another, the first worker's step has begun and no region runs. They are ``phase`` records
    of the controller, so the report names them (issue 32: "rlprof's Ray controller knows its own calls")."""
    clock = FakeClock()
    controller = controller_run(tmp_path, clock, steps=range(1, 4))
    phases = [r for r in read_records([controller.run_dir]) if r["type"] == "phase"]
    assert [(r["step"], r["name"], r["source"]) for r in phases] == [
        (2, "rlprof start_step", "rlprof's Ray controller"), (2, "rlprof step_boundary", "rlprof's Ray controller")]
    assert all(r["end_ns"] >= r["start_ns"] for r in phases)
