"""The capture state machine as a table: pure, no backends, no files.

Each case drives :class:`rlprof.runtime.capture_machine.CaptureMachine` the way a trainer drives a Profiler and
compares the hook calls it decides with the expected ones, written compactly:
``start_role:actor_update+@step1.actor_update`` (``+`` opens the capture named after ``@``, ``-``
closes it, ``(late)`` is a close after the step already ended).
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass

import pytest

from rlprof.runtime.capture_machine import (TRANSITIONS, UNREACHABLE, ActionLog, CaptureMachine, CaptureStateError, Event,
                                    Holder, OpenCapture, OpenRegion)
from rlprof.runtime.plan import step_runs
from rlprof.config.schedule import Schedule


@dataclass(frozen=True)
class FakeCapture:
    capture_id: str
    steps: tuple
    regions: tuple


def machine(steps=(1, 2), *, discrete=False, continuous=False):
    runs = step_runs(steps, continuous)

    def run_of(step):
        return next((run for run in runs if step in run), (step,))

    log = ActionLog()
    m = CaptureMachine(discrete=discrete, run_of=run_of, make_capture=FakeCapture, hooks=log)
    m.profiled = lambda step: any(step in run for run in runs)
    return m, log.actions


def play(m, script):
    """Run a trainer script: ``("step", n)``, ``("end",)``, ``("enter", name[, schedule])``, ``("exit", name[, error])``,
    ``("it+",)``, ``("it-"[, error])``, ``("leave",)``."""
    regions = {}
    for op, *args in script:
        if op == "step":
            m.start_step(args[0], m.profiled(args[0]))
        elif op == "end":
            m.end_step()
        elif op == "enter":
            role = args[0].split("_")[0]
            regions[args[0]] = region = OpenRegion(role, args[0], args[1] if len(args) > 1 else None)
            m.enter(region)
        elif op == "exit":
            m.exit(regions[args[0]], args[1] if len(args) > 1 else None)
        elif op == "it+":
            m.iteration_begins()
        elif op == "it-":
            m.iteration_ends(args[0] if args else None)
        elif op == "leave":
            m.leave()
        else:
            raise ValueError(op)


def labels(actions):
    return [a.label() for a in actions]


def test_every_pair_is_a_transition_or_unreachable_with_a_reason():
    pairs = set(itertools.product(Holder, Event))
    assert set(TRANSITIONS) | UNREACHABLE == pairs
    assert not set(TRANSITIONS) & UNREACHABLE


@pytest.mark.parametrize("holder, event", sorted(UNREACHABLE), ids=lambda v: v.name)
def test_reaching_an_unreachable_pair_raises_capture_state_error_and_sends_nothing(holder, event):
    m, actions = machine((1,))
    region = OpenRegion("actor", "actor_update")
    m.open_capture = {
        Holder.NONE: None,
        Holder.STEP: OpenCapture(FakeCapture("step1", (1,), ()), run=(1,), last_step=1),
        Holder.REGION: OpenCapture(FakeCapture("step1.actor_update", (1,), ("actor_update",)), region=region),
    }[holder]
    assert m.holder is holder
    with pytest.raises(CaptureStateError, match=f"held by '{holder.value}' when {re.escape(event.value)}"):
        m._transition(event, region, None)
    assert actions == []


CASES = {
    "end-to-end: one capture per step": (
        dict(steps=(1, 3)),
        [("step", 1), ("enter", "actor_update"), ("exit", "actor_update"), ("end",),
         ("step", 2), ("end",), ("step", 3), ("end",)],
        ["start_step:1+@step1", "start_role:actor_update@step1", "stop_role:actor_update@step1",
         "step_boundary:1-@step1", "start_step:3+@step3", "step_boundary:3-@step3"],
    ),
    "continuous run: one capture over the merged steps": (
        dict(steps=(1, 2, 3), continuous=True),
        [("step", 1), ("end",), ("step", 2), ("end",), ("step", 3), ("end",)],
        ["start_step:1+@step1-3", "step_boundary:1@step1-3", "start_step:2@step1-3", "step_boundary:2@step1-3",
         "start_step:3@step1-3", "step_boundary:3-@step1-3"],
    ),
    "continuous run entered in the middle (training resumed at step 2) opens at the first step seen": (
        dict(steps=(1, 2, 3), continuous=True),
        [("step", 2), ("end",), ("step", 3), ("end",)],
        ["start_step:2+@step2-3", "step_boundary:2@step2-3", "start_step:3@step2-3", "step_boundary:3-@step2-3"],
    ),
    "continuous run left early (training stops at step 2) is closed late at finalize": (
        dict(steps=(1, 2, 3), continuous=True),
        [("step", 1), ("end",), ("step", 2), ("end",), ("leave",)],
        ["start_step:1+@step1-3", "step_boundary:1@step1-3", "start_step:2@step1-3", "step_boundary:2@step1-3",
         "step_boundary:2-(late)@step1-3"],
    ),
    "continuous run left for an unprofiled step is closed late when that step begins": (
        dict(steps=(1, 2, 3), continuous=True),
        [("step", 1), ("end",), ("step", 7), ("end",)],
        ["start_step:1+@step1-3", "step_boundary:1@step1-3", "step_boundary:1-(late)@step1-3"],
    ),
    "continuous run left for another run closes before the new one opens": (
        dict(steps=(1, 2, 5, 6), continuous=True),
        [("step", 1), ("end",), ("step", 5), ("end",), ("step", 6), ("end",)],
        ["start_step:1+@step1-2", "step_boundary:1@step1-2", "step_boundary:1-(late)@step1-2",
         "start_step:5+@step5-6", "step_boundary:5@step5-6", "start_step:6@step5-6", "step_boundary:6-@step5-6"],
    ),
    "discrete: one capture per region": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "ref_compute_log_prob"), ("exit", "ref_compute_log_prob"),
         ("enter", "actor_update"), ("exit", "actor_update"), ("end",)],
        ["start_step:1", "start_role:ref_compute_log_prob+@step1.ref_compute_log_prob",
         "stop_role:ref_compute_log_prob-@step1.ref_compute_log_prob",
         "start_role:actor_update+@step1.actor_update", "stop_role:actor_update-@step1.actor_update", "step_boundary:1"],
    ),
    "discrete, nested: the inner region is a range inside the outer capture": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update"), ("enter", "ref_compute_log_prob"), ("exit", "ref_compute_log_prob"),
         ("exit", "actor_update"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update",
         "start_role:ref_compute_log_prob@step1.actor_update", "stop_role:ref_compute_log_prob@step1.actor_update",
         "stop_role:actor_update-@step1.actor_update", "step_boundary:1"],
    ),
    "end-to-end, nested: both are ranges of the step capture": (
        dict(steps=(1,)),
        [("step", 1), ("enter", "actor_update"), ("enter", "ref_compute_log_prob"), ("exit", "ref_compute_log_prob"),
         ("exit", "actor_update"), ("end",)],
        ["start_step:1+@step1", "start_role:actor_update@step1", "start_role:ref_compute_log_prob@step1",
         "stop_role:ref_compute_log_prob@step1", "stop_role:actor_update@step1", "step_boundary:1-@step1"],
    ),
    "a region repeated in a step gets a numbered capture": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update"), ("exit", "actor_update"), ("enter", "actor_update"),
         ("exit", "actor_update"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update", "stop_role:actor_update-@step1.actor_update",
         "start_role:actor_update+@step1.actor_update.1", "stop_role:actor_update-@step1.actor_update.1", "step_boundary:1"],
    ),
    "start_step without step_boundary ends the open step first": (
        dict(steps=(1, 2)),
        [("step", 1), ("step", 2), ("end",)],
        ["start_step:1+@step1", "step_boundary:1-@step1", "start_step:2+@step2", "step_boundary:2-@step2"],
    ),
    "a step ending inside regions exits them, innermost first": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update"), ("enter", "ref_compute_log_prob"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update",
         "start_role:ref_compute_log_prob@step1.actor_update", "stop_role:ref_compute_log_prob@step1.actor_update",
         "stop_role:actor_update-@step1.actor_update", "step_boundary:1"],
    ),
    "an outer region exiting before its inner one closes the inner first": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update"), ("enter", "ref_compute_log_prob"), ("exit", "actor_update"),
         ("exit", "ref_compute_log_prob"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update",
         "start_role:ref_compute_log_prob@step1.actor_update", "stop_role:ref_compute_log_prob@step1.actor_update",
         "stop_role:actor_update-@step1.actor_update", "step_boundary:1"],
    ),
    "sampled, discrete: each window of active iterations is a capture": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update", Schedule(wait=1, active=1, repeat=2)),
         *[("it+",), ("it-",)] * 4, ("exit", "actor_update"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update", "stop_role:actor_update-@step1.actor_update",
         "start_role:actor_update+@step1.actor_update.1", "stop_role:actor_update-@step1.actor_update.1", "step_boundary:1"],
    ),
    "sampled, end-to-end: windows are ranges, iterations inside them marked": (
        dict(steps=(1,)),
        [("step", 1), ("enter", "actor_update", Schedule(active=3)), *[("it+",), ("it-",)] * 4,
         ("exit", "actor_update"), ("end",)],
        ["start_step:1+@step1", "start_role:actor_update@step1", "iteration_boundary:actor_update#0@step1",
         "iteration_boundary:actor_update#1@step1", "stop_role:actor_update@step1", "step_boundary:1-@step1"],
    ),
    "a sampled region nested in a discrete capture: its windows are ranges of it": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update"), ("enter", "rollout_generate", Schedule(active=1)), ("it+",), ("it-",),
         ("exit", "rollout_generate"), ("exit", "actor_update"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update",
         "start_role:rollout_generate@step1.actor_update", "stop_role:rollout_generate@step1.actor_update",
         "stop_role:actor_update-@step1.actor_update", "step_boundary:1"],
    ),
    "a window ending while a region entered inside it runs closes that region's range first": (
        dict(steps=(1,), discrete=True),
        [("step", 1), ("enter", "actor_update", Schedule(active=1)), ("it+",), ("enter", "ref_compute_log_prob"),
         ("it-",), ("exit", "ref_compute_log_prob"), ("exit", "actor_update"), ("end",)],
        ["start_step:1", "start_role:actor_update+@step1.actor_update",
         "start_role:ref_compute_log_prob@step1.actor_update", "stop_role:ref_compute_log_prob@step1.actor_update",
         "stop_role:actor_update-@step1.actor_update", "step_boundary:1"],
    ),
    "finalize inside a step closes regions, then the step's capture": (
        dict(steps=(1,)),
        [("step", 1), ("enter", "actor_update"), ("leave",)],
        ["start_step:1+@step1", "start_role:actor_update@step1", "stop_role:actor_update@step1", "step_boundary:1-@step1"],
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_transitions(name):
    kwargs, script, expected = CASES[name]
    m, actions = machine(**kwargs)
    play(m, script)
    assert labels(actions) == expected
    assert m.open_capture_ids == []  # every script ends its last step or leaves: all it opened is closed


def test_an_iteration_raising_at_the_end_of_a_window_reaches_stop_role_with_the_error():
    m, actions = machine((1,), discrete=True)
    error = ValueError("boom")
    play(m, [("step", 1), ("enter", "actor_update", Schedule(active=2)), ("it+",), ("it-",), ("it+",), ("it-", error),
             ("exit", "actor_update", error)])
    stops = [a for a in actions if a.hook == "stop_role"]
    assert len(stops) == 1 and stops[0].error is error and stops[0].closes and stops[0].iterations == (0, 1)


def test_a_region_raising_inside_an_iteration_closes_the_window_with_the_error():
    m, actions = machine((1,), discrete=True)
    error = ValueError("boom")
    play(m, [("step", 1), ("enter", "actor_update", Schedule(active=3)), ("it+",), ("it-",), ("it+",),
             ("exit", "actor_update", error)])
    stop = [a for a in actions if a.hook == "stop_role"][0]
    assert stop.error is error and stop.iterations == (0, 1)  # the iteration in progress is in the window


@pytest.mark.parametrize("discrete, expected", [
    (True, ["stop_role:ref_compute_log_prob@step1.actor_update", "stop_role:actor_update-@step1.actor_update"]),
    (False, ["stop_role:ref_compute_log_prob@step1", "stop_role:actor_update@step1", "step_boundary:1-@step1"]),
])
def test_release_actions_close_everything_open_innermost_first_without_changing_state(discrete, expected):
    m, actions = machine((1,), discrete=discrete)
    play(m, [("step", 1), ("enter", "actor_update"), ("enter", "ref_compute_log_prob")])
    before = len(actions)
    assert labels(m.release_actions()) == expected
    assert len(actions) == before and len(m.stack) == 2 and m.open_capture_ids


def test_release_between_steps_of_a_merged_run_is_a_late_close():
    m, _ = machine((1, 2), continuous=True)
    play(m, [("step", 1), ("end",)])
    assert labels(m.release_actions()) == ["step_boundary:1-(late)@step1-2"]


@pytest.mark.parametrize("seed", range(300))
def test_random_trainers_never_nest_captures_and_close_only_what_was_opened(seed):
    """Random trainer scripts in both modes: one capture open at most, every close matches an open,
    every opened capture is closed at the end, stop_role pairs with start_role."""
    rng = random.Random(seed)
    discrete, continuous = rng.random() < 0.5, rng.random() < 0.5
    steps = sorted(rng.sample(range(1, 9), rng.randint(1, 5)))
    m, actions = machine(tuple(steps), discrete=discrete, continuous=continuous and not discrete)
    names = ["actor_update", "ref_compute_log_prob", "rollout_generate"]
    schedules = [None, Schedule(active=1), Schedule(wait=1, active=2, repeat=2)]
    step, regions = 0, []
    for _ in range(rng.randint(5, 60)):
        roll = rng.random()
        if roll < 0.15:
            step += rng.choice((1, 1, 1, 2, -1))
            m.start_step(max(step, 1), m.profiled(max(step, 1)))
        elif roll < 0.25:
            m.end_step()
        elif m.step is not None and roll < 0.5:
            region = OpenRegion("x", rng.choice(names), rng.choice(schedules))
            m.enter(region)
            regions.append(region)
        elif roll < 0.7 and regions:
            m.exit(regions.pop(rng.randrange(len(regions))), rng.choice((None, ValueError("x"))))
        elif roll < 0.85:
            m.iteration_begins()
        else:
            m.iteration_ends()
    m.leave()
    open_now, ranges = None, []
    for action in actions:
        if action.opens:
            assert open_now is None, f"{action.label()} opened while {open_now} was open"
            open_now = action.capture.capture_id
        if action.closes:
            assert open_now == action.capture.capture_id, f"{action.label()} closes what was not opened"
            open_now = None
        if action.hook == "start_role":
            ranges.append(action.region)
        elif action.hook == "stop_role":
            assert ranges and ranges[-1] is action.region, "stop_role must close the innermost started range"
            ranges.pop()
        elif action.hook == "iteration_boundary":
            assert action.region in ranges
        if action.capture is not None and not action.opens and not action.closes:
            assert action.capture.capture_id == open_now, f"{action.label()} names a capture that is not open"
    assert open_now is None and not ranges


def test_release_from_inside_an_opening_call_closes_that_capture_as_the_current_step():
    """What the session does when a backend raises while the machine emits: the state is already the new one."""
    seen = []

    class Releasing(ActionLog):
        def __getattribute__(self, name):
            method = super().__getattribute__(name)
            if name not in ("start_step", "step_boundary", "start_role", "iteration_boundary", "stop_role"):
                return method

            def call(*args):
                method(*args)
                seen.append((self.actions[-1].label(), labels(m.release_actions())))
            return call

    runs = step_runs((1, 2, 3), True)
    m = CaptureMachine(discrete=False, run_of=lambda s: next((r for r in runs if s in r), (s,)),
                       make_capture=FakeCapture, hooks=Releasing())
    m.start_step(1, True)
    m.end_step()
    m.start_step(5, False)  # leaves the run: a late close
    m.start_step(2, True)
    assert seen == [
        ("start_step:1+@step1-3", ["step_boundary:1-@step1-3"]),
        ("step_boundary:1@step1-3", ["step_boundary:1-(late)@step1-3"]),
        ("step_boundary:1-(late)@step1-3", []),
        ("start_step:2+@step2-3", ["step_boundary:2-@step2-3"]),
    ]
