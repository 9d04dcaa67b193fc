"""The manifest's step and region times are the training's own time, not the profiler's.

A backend that is slow to open and close its captures (torch.profiler start, a trace export) must
not make the training look slow in ``rlprof report``: the core takes a region's start after its
capture opened and its end before the capture closes, and likewise for a step."""

import time

import pytest

import rlprof
from rlprof.manifest import read_records

SLOW_S = 0.15


class SlowCaptures:
    """Takes SLOW_S to open or close any capture; marking a range is free."""

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            time.sleep(SLOW_S)

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            time.sleep(SLOW_S)

    @rlprof.hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            time.sleep(SLOW_S)

    @rlprof.hookimpl
    def stop_role(self, ctx):
        if ctx.closes_capture:
            time.sleep(SLOW_S)


@pytest.mark.parametrize("discrete", [False, True], ids=["e2e", "discrete"])
def test_opening_and_closing_captures_is_not_counted_as_training_time(tmp_path, discrete):
    prof = rlprof.Profiler(None, roles=("actor",), backends={"slow": SlowCaptures()}, overrides=[
        "global_profiler.tool=slow", f"global_profiler.save_path={tmp_path}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        f"actor_rollout_ref.actor.profiler.tool_config.slow.discrete={str(discrete).lower()}"])
    prof.start_step(1)
    with prof.role("actor", "update"):
        time.sleep(0.02)
    prof.step_boundary()
    prof.finalize()
    records = list(read_records([tmp_path]))
    (region,) = [r for r in records if r["type"] == "region"]
    (step,) = [r for r in records if r["type"] == "step"]
    # the region's own 20 ms are there; none of the 150 ms opens or closes
    assert 20 <= region["duration_ms"] < 20 + SLOW_S * 1000 / 2, region
    if discrete:  # the region's capture opens and closes inside the step
        assert step["duration_ms"] >= 20 + 2 * SLOW_S * 1000 * 0.9, step
    else:
        assert 20 <= step["duration_ms"] < 20 + SLOW_S * 1000 / 2, step
