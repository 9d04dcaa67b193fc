"""Profiling's own time inside a step — a replica writing its trace while the trainer waits — is shown
as "(writing captures)", apart from "(outside regions)" (the step's own work no region covers)."""

from __future__ import annotations

from rlprof.analysis.anatomy import step_anatomy

MS = 1_000_000


def records(closed_ms):
    """Trainer rank 0's step spans 0..100 ms; replica 0 generates 0..40 ms, then writes its capture
    until ``closed_ms``; the trainer's update runs 80..95 ms."""
    process = [{"type": "process", "rank": 0, "host": "h", "pid": 1, "replica_rank": None},
               {"type": "process", "rank": 0, "host": "h", "pid": 2, "replica_rank": 0}]
    step = {"type": "step", "rank": 0, "host": "h", "pid": 1, "step": 1, "start_ns": 0, "end_ns": 100 * MS,
            "duration_ms": 100.0}
    replica_step = {"type": "step", "rank": 0, "host": "h", "pid": 2, "replica_rank": 0, "step": 1, "start_ns": 0,
                    "end_ns": 40 * MS, "duration_ms": 40.0}
    if closed_ms is not None:
        replica_step["closed_ns"] = closed_ms * MS
    regions = [
        {"type": "region", "rank": 0, "host": "h", "pid": 2, "replica_rank": 0, "step": 1, "role": "rollout",
         "region": "rollout_generate", "parent": None, "depth": 0, "start_ns": 0, "end_ns": 40 * MS, "duration_ms": 40.0},
        {"type": "region", "rank": 0, "host": "h", "pid": 1, "step": 1, "role": "actor", "region": "actor_update",
         "parent": None, "depth": 0, "start_ns": 80 * MS, "end_ns": 95 * MS, "duration_ms": 15.0},
    ]
    return process + [step, replica_step] + regions


def test_a_capture_written_inside_the_step_is_not_outside_regions():
    (step,) = step_anatomy(records(closed_ms=70)).steps
    assert round(step.writing_ms, 3) == 30.0  # 40..70 ms: the replica exporting its trace
    assert round(step.untracked_ms, 3) == 15.0  # 70..80 and 95..100 ms: nobody's region, no capture written
    assert step.as_dict()["writing_ms"] == 30.0


def test_records_without_closed_ns_read_as_before():
    (step,) = step_anatomy(records(closed_ms=None)).steps
    assert step.writing_ms == 0.0 and round(step.untracked_ms, 3) == 45.0


def test_writing_that_overlaps_a_region_is_counted_once():
    (step,) = step_anatomy(records(closed_ms=90)).steps  # 80..90 ms overlaps actor_update
    assert round(step.writing_ms, 3) == 40.0 and round(step.untracked_ms, 3) == 5.0


def test_the_html_step_bar_shows_writing_apart_and_adds_up_to_the_step():
    import re

    from rlprof.analysis.html_charts import step_bars

    svg = step_bars(step_anatomy(records(closed_ms=70)))
    assert 'class="segment writing"' in svg and "30.00 ms writing captures" in svg
    widths = [float(w) for w in re.findall(r'class="segment[^"]*"[^>]*? width="([0-9.]+)"', svg)]
    scale = 760 / 100.0  # the 100 ms window is the longest bar
    assert abs(sum(widths) - 100 * scale) < 1.0  # 40 + 15 regions + 30 writing + 15 outside = the step


def test_the_anatomy_says_where_the_rest_of_the_writing_went_so_it_never_seems_to_contradict_the_cost():
    """Seen in the demo: "(writing captures) 0.5 ms 1%" in the step's table, then "profiling 55.3 ms (41%:
    writing 55.3 ms)" below, with nothing to say they are the same writing, mostly after the step's end."""
    from types import SimpleNamespace

    from rlprof.analysis.cost import ProfilingCost, StepCost
    from rlprof.analysis.report import _anatomy_lines

    step = SimpleNamespace(step=1, writing_ms=0.5, span_ms=80.0, untracked_ms=None, regions=[], gaps=[], phases=[],
                           spread=None)
    anatomy = SimpleNamespace(steps=[step], stragglers=[])
    cost = ProfilingCost(steps=[StepCost(step=1, total_ms=135.2, writing_ms=55.3, waits_ms=0.0)], unprofiled_ms=None,
                         unprofiled_count=0)
    (row,) = [line for line in _anatomy_lines(anatomy, cost) if "(writing captures)" in line]
    assert "+ 54.8 ms after the step's end (profiling cost, below)" in row
    (row,) = [line for line in _anatomy_lines(anatomy) if "(writing captures)" in line]
    assert "after the step's end" not in row
