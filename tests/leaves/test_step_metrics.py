"""Issue 42: per-step metrics (rlprof.step_metrics): names every tracker accepts, and what a step's
timings say (the slowest rank, the spread, the late rank beyond the run's noise, time outside regions)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlprof.layout import safe_name
from rlprof.request_figures import names as request_names
from rlprof.roles import ROLES
from rlprof.step_metrics import (NO_RANK, REGION_FIGURES, SPLIT_FIGURES, SPLIT_STEP, STEP_FIGURES, Timing, check_names,
                                 metric_name, split_metrics, step_figures)

MS = 1_000_000


def every_name(regions: list[tuple[str, str]]) -> dict[tuple, str]:
    names = {("step", f): metric_name("", None, f) for f in STEP_FIGURES}
    names[("split step",)] = SPLIT_STEP
    names.update({("requests", name): name for name in request_names(range(3))})  # rlprof/requests/... (issue 48)
    for role, region in regions:
        for figure in (*REGION_FIGURES, *SPLIT_FIGURES):
            names[(role, region, figure)] = metric_name(role, region, figure)
    return names


stages = st.one_of(st.none(), st.text(min_size=1, max_size=40), st.sampled_from(ROLES),
                   st.sampled_from(["update", "compute_log_prob", "generate", "update_weights", "a/b", "x.y", ".."]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(ROLES), stages), min_size=1, max_size=12))
def test_names_keep_the_rules_for_any_regions_rlprof_can_name(pairs):
    """Whatever the stages (the trainer's own words), the regions rlprof names from them give names of
    [A-Za-z0-9_./-] only, one per (role, region, figure), none a prefix of another."""
    regions = list(dict.fromkeys((role, safe_name(f"{role}_{stage}" if stage else role)) for role, stage in pairs))
    names = every_name(regions)
    assert check_names(names.values()) == []
    assert len(set(names.values())) == len(names), "two figures share a name"


def test_names_read_as_the_plan_says():
    assert metric_name("actor", "actor_update", "slowest_s") == "rlprof/actor/update/slowest_s"
    assert metric_name("rollout", "rollout_generate", "late_rank") == "rlprof/rollout/generate/late_rank"
    assert metric_name("", None, "outside_regions_s") == "rlprof/step/outside_regions_s"
    assert metric_name("requests", None, "count") == "rlprof/requests/count"  # a figure of a topic itself
    # a region named as its role, or <role>_<role>, keeps its whole name: still one segment per region
    assert metric_name("actor", "actor", "spread_s") == "rlprof/actor/actor/spread_s"
    assert metric_name("actor", "actor_actor", "spread_s") == "rlprof/actor/actor_actor/spread_s"


def test_check_names_says_what_breaks_a_rule():
    assert check_names(["rlprof/a/b", "rlprof/a/b/c_s"]) == ["'rlprof/a/b' is a prefix of 'rlprof/a/b/c_s'"]
    assert check_names(["rlprof/a b/x_s"]) == ["'rlprof/a b/x_s': a character outside [A-Za-z0-9_./-]"]
    assert check_names(["rlprof/actor/update/late_rank", "rlprof/actor/update/late_by_s"]) == []
    # a path prefix breaks a tracker that nests by "/"; a name beginning another's last segment does not
    assert check_names(["rlprof/requests/replica0/tail_s", "rlprof/requests/replica0/tail_share"]) == []
    assert check_names(["rlprof/a/b-x", "rlprof/a/b", "rlprof/a/b/c"]) == ["'rlprof/a/b' is a prefix of 'rlprof/a/b/c'"]


def timing(rank, start_ms, end_ms, region="actor_update", role="actor"):
    return Timing(rank, role, region, 1_000 * MS + start_ms * MS, 1_000 * MS + end_ms * MS)


def test_a_step_gives_the_slowest_rank_the_spread_and_the_time_outside_regions():
    timings = [timing(0, 10, 40), timing(1, 10, 60), timing(2, 12, 45),  # update: 30, 50, 33 ms
               timing(0, 70, 80, "actor_compute_log_prob"), timing(0, 82, 84, "actor_compute_log_prob")]
    figures = step_figures(3, 1_000 * MS, 1_100 * MS, timings, processes=3)
    update = figures.regions[("actor", "actor_update")]
    assert (update.slowest_rank, update.slowest_s, update.median_s) == (1, pytest.approx(0.05), pytest.approx(0.033))
    assert update.spread_s == pytest.approx(0.02)
    assert figures.regions[("actor", "actor_compute_log_prob")].times_s == {0: pytest.approx(0.012)}  # entered twice: both
    # covered: 10-60, 70-80, 82-84 of a 100 ms step
    assert figures.outside_regions_s == pytest.approx(0.1 - 0.05 - 0.01 - 0.002)
    metrics = figures.metrics()
    assert metrics["rlprof/actor/update/slowest_s"] == pytest.approx(0.05)
    assert metrics["rlprof/step/time_s"] == pytest.approx(0.1)
    assert check_names(metrics) == []


def steady(step, late=None, by_ms=0):
    """A step of 4 ranks entering update within 1 ms of each other (``late`` enters ``by_ms`` later)."""
    return [timing(r, 10 + 0.3 * ((r + step) % 4) + (by_ms if r == late else 0), 60 + (by_ms if r == late else 0))
            for r in range(4)]


def test_a_late_rank_is_named_when_it_stands_clear_of_the_runs_noise():
    recent = []
    for step in range(1, 6):
        recent.append(step_figures(step, 1_000 * MS, 1_100 * MS, steady(step)))
        assert recent[-1].regions[("actor", "actor_update")].late_rank == NO_RANK  # ranks a few tenths of a ms apart
    late = step_figures(6, 1_000 * MS, 1_100 * MS, steady(6, late=2, by_ms=15), recent)
    update = late.regions[("actor", "actor_update")]
    assert update.late_rank == 2
    assert update.late_by_s == pytest.approx(0.015, abs=0.001)
    assert late.metrics()["rlprof/actor/update/late_rank"] == 2


def test_a_rank_late_by_no_more_than_the_ranks_differ_anyway_is_not_named():
    noisy = []
    for step in range(1, 6):  # ranks wander by 20 ms from step to step
        timings = [timing(r, 10 + (20 if (r + step) % 4 == 0 else 0), 60) for r in range(4)]
        noisy.append(step_figures(step, 1_000 * MS, 1_100 * MS, timings, noisy))
    again = step_figures(6, 1_000 * MS, 1_100 * MS, [timing(r, 10 + (15 if r == 1 else 0), 60) for r in range(4)], noisy)
    assert again.regions[("actor", "actor_update")].late_rank == NO_RANK


def test_a_split_carries_the_step_it_describes():
    metrics = split_metrics(4, {("actor", "actor_update"): {"compute_frac": 0.5, "idle_frac": 0.25,
                                                            "peak_allocated_bytes": 1024}})
    assert metrics == {SPLIT_STEP: 4, "rlprof/actor/update/compute_frac": 0.5, "rlprof/actor/update/idle_frac": 0.25,
                       "rlprof/actor/update/peak_allocated_bytes": 1024}


def test_with_two_ranks_a_rank_late_from_some_step_on_is_named_at_the_first_such_step():
    """With two ranks each one's deviation mirrors the other's: a step's own lateness counted as noise hid
    it (seen failing before the noise came from earlier, not-late steps only)."""
    recent = []
    for step in range(1, 11):
        by = 250 if step >= 6 else 0
        timings = [timing(0, 10 + 0.3 * (step % 2), 60), timing(1, 10 + by, 60 + by)]
        recent.append(step_figures(step, 1_000 * MS, 1_400 * MS, timings, recent))
    assert [f.regions[("actor", "actor_update")].late_rank for f in recent][:6] == [NO_RANK] * 5 + [1]
