"""Which steps a process profiles, and the run of steps each belongs to, for any ``steps`` list.

The plan answers these on every training step (``start_step`` of an unprofiled step included), from
a table built once; these properties pin the answers to the rule: a step is profiled exactly when it
is listed (on a process with a selected role), and with ``profile_continuous_steps`` a listed step's
run is the longest stretch of consecutive listed steps around it.
"""

from hypothesis import given, settings
from hypothesis import strategies as st

from rlprof import load_config
from rlprof.runtime.plan import resolve_plan

STEPS = st.lists(st.integers(min_value=1, max_value=60), min_size=1, max_size=25, unique=True)


def plan_for(steps, continuous, enable=True):
    config = load_config({
        "global_profiler": {"tool": "torch", "steps": steps, "profile_continuous_steps": continuous},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": enable, "all_ranks": True}}},
    })
    return resolve_plan(config, rank=0, world_size=1, roles=("actor",))


@settings(max_examples=150, deadline=None)
@given(steps=STEPS, continuous=st.booleans())
def test_a_step_is_profiled_exactly_when_listed(steps, continuous):
    plan = plan_for(steps, continuous)
    for step in range(0, 62):
        assert plan.is_profiled(step) == (step in steps), step


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_continuous_runs_are_the_stretches_of_consecutive_listed_steps(steps):
    plan = plan_for(steps, True)
    listed = set(steps)
    for step in range(0, 62):
        run = plan.run_of(step)
        if step not in listed:
            assert run == (step,)
            continue
        first, last = step, step
        while first - 1 in listed:
            first -= 1
        while last + 1 in listed:
            last += 1
        assert run == tuple(range(first, last + 1)), step


@settings(max_examples=50, deadline=None)
@given(steps=STEPS)
def test_without_continuous_every_step_is_its_own_run(steps):
    plan = plan_for(steps, False)
    assert all(plan.run_of(step) == (step,) for step in range(0, 62))
    assert plan.steps == tuple(sorted(steps))


def test_no_selected_role_profiles_no_step():
    plan = plan_for([1, 2, 3], False, enable=False)
    assert not plan.active
    assert not any(plan.is_profiled(step) for step in (1, 2, 3))
    assert plan.selected_roles == ()
