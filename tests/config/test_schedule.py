"""Sampling inside a role region: iteration index -> captured, for the seed guide's examples."""

import pytest

from rlprof import ConfigError
from rlprof.config.schedule import Schedule, parse_schedule, token_window


@pytest.mark.parametrize(
    "name, schedule, iterations, captured",
    [
        # Seed 000, compute_log_prob / update_policy: "wait=0, warmup=0, active=1: directly collect first micro-batch"
        ("first micro-batch only", dict(wait=0, warmup=0, active=1, repeat=1), 16, [0]),
        # rlprof's own short form: repeat defaults to 1 when left out
        ("active=1 alone", dict(active=1), 16, [0]),
        # Seed 000/003 vLLM example: "Skip first step, warmup one step, collect 3 steps, repeat 1 time"
        ("skip 1, warm 1, active 3", dict(wait=1, warmup=1, active=3, repeat=1), 10, [2, 3, 4]),
        # Seed 000: "collect decode steps 30~70": 0-based decode iterations 30..70 inclusive
        ("decode steps 30-70", dict(wait=29, warmup=1, active=41, repeat=1), 100, list(range(30, 71))),
        # Seed 003: skip_first for dynamic shapes (skip the first 10), then one window of 2
        ("skip_first 10", dict(skip_first=10, wait=0, warmup=0, active=2, repeat=1), 20, [10, 11]),
        # torch semantics: repeat=0 cycles until the region ends
        ("repeat 0 is unbounded", dict(wait=1, warmup=0, active=1, repeat=0), 6, [1, 3, 5]),
        ("two windows", dict(wait=2, warmup=0, active=2, repeat=2), 12, [2, 3, 6, 7]),
    ],
)
def test_captured_iterations(name, schedule, iterations, captured):
    parsed = parse_schedule(schedule, "actor_rollout_ref.actor.profiler.schedule")
    assert parsed.captured(iterations) == captured, name


def test_active_zero_means_off():
    assert parse_schedule({"active": 0, "wait": 3}, "x.schedule") is None
    # verl's default torch schedule section (all zeros) is off
    assert parse_schedule({"_target_": "verl...", "skip_first": 0, "wait": 0, "warmup": 0, "active": 0, "repeat": 0}, "x", default_repeat=0) is None


def test_window_ends_and_counts():
    s = Schedule(wait=1, warmup=0, active=2, repeat=2)
    assert [i for i in range(8) if s.window_end(i)] == [2, 5]
    assert s.windows() == 2
    assert Schedule(active=1, repeat=0).windows() is None


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"active": -1}, "x.schedule.active: got -1 (int); allowed: a non-negative integer"),
        ({"active": "3"}, "x.schedule.active: got '3' (str)"),
        ({"activ": 3}, "x.schedule.activ: unknown key (did you mean 'active'?)"),
        ([1, 2], "x.schedule: got [1, 2] (list)"),
    ],
)
def test_bad_schedules(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_schedule(raw, "x.schedule")
    assert message in str(err.value)


def test_profile_token_window_is_a_schedule():
    s = token_window(30, 71, "actor_rollout_ref.rollout.profiler.tool_config.torch")
    assert s.captured(100) == list(range(30, 71))
    assert token_window(None, None, "k") is None
    with pytest.raises(ConfigError, match="profile_token_end: got 5; allowed: an integer greater than profile_token_start"):
        token_window(10, 5, "k")
    with pytest.raises(ConfigError, match="profile_token_end: got None"):
        token_window(10, None, "k")


def test_verl_knobs_map_onto_the_role_schedule():
    from rlprof import load_config

    cfg = load_config(None, [
        "global_profiler.tool=torch", "global_profiler.steps=[1]",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.wait=1",
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active=2",
        "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.repeat=1",
        "actor_rollout_ref.rollout.profiler.enable=true",
        "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_start=30",
        "actor_rollout_ref.rollout.profiler.tool_config.torch.profile_token_end=71",
        "actor_rollout_ref.rollout.profiler.tool_config.torch.discrete=true",
    ])
    assert cfg.roles["actor"].schedule == Schedule(wait=1, active=2, repeat=1)
    assert cfg.roles["rollout"].schedule.captured(100) == list(range(30, 71))
    # the backend never sees the core's keys
    assert "schedule" not in cfg.roles["actor"].tool_config["torch"]
    assert "profile_token_start" not in cfg.roles["rollout"].tool_config["torch"]


def test_a_schedule_set_twice_differently_is_an_error():
    from rlprof import load_config

    with pytest.raises(ConfigError, match="sampling schedules disagree"):
        load_config(None, ["global_profiler.tool=torch", "global_profiler.steps=[1]",
                           "actor_rollout_ref.actor.profiler.schedule.active=1",
                           "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active=3"])


def test_a_schedule_of_an_unselected_tool_is_ignored():
    from rlprof import load_config

    cfg = load_config(None, ["global_profiler.tool=npu", "global_profiler.steps=[1]",
                             "actor_rollout_ref.actor.profiler.tool_config.torch.schedule.active=3"])
    assert cfg.roles["actor"].schedule is None
