"""The manifest's step and region times are the training's own time, not the profiler's.

A backend that is slow to open and close its captures (torch.profiler start, a trace export) must
not make the training look slow in ``rlprof report``: the core takes a region's start after its
capture opened and its end before the capture closes, and likewise for a step. The sessions' clock
is a fake one here that the slow backend and the region's work advance: the durations are exact."""

import time

import pytest

import rlprof
from rlprof.manifest import read_records
from rlprof.runtime.session import ProcessSession
from fake_clock import FakeClock  # tests/fake_clock.py

SLOW_MS = 150
WORK_MS = 20


class SlowCaptures:
    """Takes ``slow`` (a callable) to open or close any capture; marking a range is free."""

    def __init__(self, slow):
        self.slow = slow

    @rlprof.hookimpl
    def start_step(self, ctx):
        if ctx.opens_capture:
            self.slow()

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        if ctx.closes_capture:
            self.slow()

    @rlprof.hookimpl
    def start_role(self, ctx):
        if ctx.opens_capture:
            self.slow()

    @rlprof.hookimpl
    def stop_role(self, ctx):
        if ctx.closes_capture:
            self.slow()


def one_profiled_step(save_path, discrete, slow, work):
    prof = rlprof.Profiler(None, roles=("actor",), backends={"slow": SlowCaptures(slow)}, overrides=[
        "global_profiler.tool=slow", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        f"actor_rollout_ref.actor.profiler.tool_config.slow.discrete={str(discrete).lower()}"])
    prof.start_step(1)
    with prof.role("actor", "update"):
        work()
    prof.step_boundary()
    prof.finalize()
    records = list(read_records([save_path]))
    (region,) = [r for r in records if r["type"] == "region"]
    (step,) = [r for r in records if r["type"] == "step"]
    return region, step


@pytest.mark.timing
@pytest.mark.parametrize("discrete", [False, True], ids=["e2e", "discrete"])
def test_opening_and_closing_captures_is_not_counted_as_training_time(tmp_path, discrete, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(ProcessSession, "clock_ns", clock)
    region, step = one_profiled_step(tmp_path, discrete, lambda: clock.advance_ms(SLOW_MS),
                                     lambda: clock.advance_ms(WORK_MS))
    # the region's own 20 ms are there; none of the 150 ms opens or closes
    assert region["duration_ms"] == WORK_MS, region
    if discrete:  # the region's capture opens and closes inside the step
        assert step["duration_ms"] == WORK_MS + 2 * SLOW_MS, step
    else:
        assert step["duration_ms"] == WORK_MS, step


@pytest.mark.timing
def test_real_clock_smoke(tmp_path):
    """The same with the real clock, once: the records' times come from it, and lie between the capture's
    slow open and its slow close, as the backend saw them on the same clock (an order of events, so no
    bound on a duration that a busy machine could stretch)."""
    opens_and_closes = []

    def slow():
        began = time.time_ns()
        time.sleep(SLOW_MS / 1000)
        opens_and_closes.append((began, time.time_ns()))

    region, step = one_profiled_step(tmp_path, False, slow, lambda: time.sleep(WORK_MS / 1000))
    [(_, opened), (closing, _)] = opens_and_closes  # end-to-end: the step's capture opens and closes once
    assert opened <= step["start_ns"] <= region["start_ns"] and region["end_ns"] <= step["end_ns"] <= closing
    assert region["duration_ms"] >= WORK_MS and step["duration_ms"] >= WORK_MS
