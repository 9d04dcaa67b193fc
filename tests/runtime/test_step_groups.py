"""Step grouping is the core's (rlprof.runtime.groups): which close of a capture ends a group of
captures, told to the backend as ``ctx.ends_group``."""

from __future__ import annotations

from pathlib import Path

import pytest

import rlprof
from rlprof.context import Capture
from rlprof.runtime.groups import GROUP_KEY, StepGroups


def capture(*steps: int) -> Capture:
    return Capture(capture_id="step" + "-".join(map(str, steps)), steps=steps, regions=(), directory=Path("/x"))


@pytest.mark.parametrize(
    ("size", "closes", "ends", "left"),
    [
        (None, [(1,), (2,)], [(1,), (2,)], ()),                 # no key: every close ends its own group
        (1, [(1, 2), (3,)], [(1, 2), (3,)], ()),                # a merged window is one group
        (2, [(1,), (2,), (3,)], [(), (1, 2), ()], (3,)),        # groups of two step numbers; 3 left for finalize
        (3, [(1, 2), (3, 4)], [(), (1, 2, 3, 4)], ()),          # a window is never split across groups
        (2, [(1,), (1,), (2,)], [(), (), (1, 2)], ()),          # step numbers, not windows (discrete: one per region)
    ],
)
def test_the_core_groups_closed_captures_by_step_numbers(size, closes, ends, left):
    groups, config = StepGroups(), ({} if size is None else {GROUP_KEY: size})
    assert [groups.close("b", config, capture(*steps)) for steps in closes] == ends
    assert groups.finish("b", config, None) == left
    assert groups.finish("b", config, None) == ()  # nothing twice


def test_groups_are_kept_per_backend():
    groups = StepGroups()
    assert groups.close("memory", {GROUP_KEY: 2}, capture(1)) == ()
    assert groups.close("trace", {}, capture(1)) == (1,)
    assert groups.close("memory", {GROUP_KEY: 2}, capture(2)) == (1, 2)


class Grouping:
    """A backend asking for groups of two steps through its validated tool_config, recording what it is told."""

    def __init__(self):
        self.told: list[tuple[str, int | None, tuple[int, ...]]] = []

    @rlprof.hookimpl
    def validate_tool_config(self, tool_config, key_path):
        return {GROUP_KEY: 2}

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        self.told.append(("step_boundary", ctx.step, ctx.ends_group))

    @rlprof.hookimpl
    def finalize(self, ctx):
        self.told.append(("finalize", None, ctx.ends_group))


def test_a_backend_is_told_which_close_ends_its_group(save_path):
    backend = Grouping()
    prof = rlprof.Profiler(None, run_id="groups", backends={"grouping": backend}, overrides=[
        "global_profiler.tool=grouping", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2,3]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true"])
    for step in (1, 2, 3, 4):
        prof.start_step(step)
        with prof.role("actor", "update"):
            pass
        prof.step_boundary()
    prof.finalize()
    assert backend.told == [("step_boundary", 1, ()), ("step_boundary", 2, (1, 2)), ("step_boundary", 3, ()),
                            ("finalize", None, (3,))]
