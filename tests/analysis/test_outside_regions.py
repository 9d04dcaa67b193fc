"""What "(outside regions)" holds: its largest gaps, each between the regions around it, by process
(a gap nobody's region covers is time every process spent between calls: the driver's work)."""

from __future__ import annotations

from rlprof.analysis.anatomy import Gap, step_anatomy

from test_writing_time import MS, records  # the same step: a replica generating, then the actor updating


def test_the_largest_gaps_are_named_with_the_regions_around_them_largest_first():
    (step,) = step_anatomy(records(closed_ms=None)).steps  # regions 0..40 (replica 0), 80..95 (rank 0) of 0..100
    assert [g.as_dict() for g in step.gaps] == [
        {"ms": 40.0, "offset_ms": 40.0, "after": "replica 0 rollout_generate", "before": "rank 0 actor_update"},
        {"ms": 5.0, "offset_ms": 95.0, "after": "rank 0 actor_update", "before": None},
    ]
    assert round(sum(g.ms for g in step.gaps), 3) == round(step.untracked_ms, 3)  # they are the outside time
    assert step.gaps[1].line() == "5.0 ms after rank 0 actor_update, at the step's end"
    assert step.as_dict()["outside"][0]["after"] == "replica 0 rollout_generate"


def test_a_capture_being_written_is_not_a_gap_and_its_region_stays_the_neighbour():
    (step,) = step_anatomy(records(closed_ms=70)).steps  # the replica writes 40..70
    assert [(g.ms, g.after, g.before) for g in step.gaps] == [
        (10.0, "replica 0 rollout_generate", "rank 0 actor_update"), (5.0, "rank 0 actor_update", None)]


def test_a_gap_at_the_steps_start_and_overlapping_regions_count_once():
    rows = records(closed_ms=None)
    rows[-2] = {**rows[-2], "start_ns": 10 * MS, "duration_ms": 30.0}  # the replica generates 10..40
    rows.append({**rows[-1], "pid": 3, "rank": 1, "start_ns": 30 * MS, "end_ns": 85 * MS, "duration_ms": 55.0})
    (step,) = step_anatomy(rows).steps
    assert [(g.ms, g.offset_ms, g.after, g.before) for g in step.gaps] == [
        (10.0, 0.0, None, "replica 0 rollout_generate"), (5.0, 95.0, "rank 0 actor_update", None)]
    assert Gap(10.0, 0.0, None, "replica 0 rollout_generate").line() == "10.0 ms at the step's start, before replica 0 rollout_generate"


def test_the_report_names_the_gaps_under_outside_regions(tmp_path, capsys):
    from rlprof.analysis.report import _anatomy_lines

    lines = _anatomy_lines(step_anatomy(records(closed_ms=None)))
    outside = next(i for i, line in enumerate(lines) if line.strip().startswith("(outside regions)"))
    assert lines[outside + 1].strip() == ("outside regions, largest gaps: 40.0 ms after replica 0 rollout_generate, "
                                          "before rank 0 actor_update; 5.0 ms after rank 0 actor_update, at the step's end")


def phase(name, start_ms, end_ms, step=1):
    from rlprof.manifest import phase_record

    return {"type": "phase", "rank": None, "host": "h", "pid": 9,
            **phase_record(step, name, start_ms * MS, end_ms * MS, "verl timing_s")}


def test_the_drivers_phases_name_the_outside_time_innermost_first():
    # verl's trainer: step 0..100 holds gen 0..41, reward 41..60, adv 60..70 and update_actor 79..96
    rows = records(closed_ms=None) + [phase("step", 0, 100), phase("gen", 0, 41), phase("reward", 41, 60),
                                      phase("adv", 60, 70), phase("update_actor", 79, 96), phase("gen", 0, 5, step=2)]
    (step,) = step_anatomy(rows).steps  # outside: 40..80 and 95..100
    # 40..41 gen; 41..60 reward; 60..70 adv; 79..80 and 95..96 update_actor; 70..79 and 96..100 only the step
    assert [(n, round(ms, 3)) for n, ms in step.phases] == [
        ("reward", 19.0), ("step", 13.0), ("adv", 10.0), ("update_actor", 2.0), ("gen", 1.0)]
    assert round(sum(ms for _, ms in step.phases), 3) == round(step.untracked_ms, 3)  # every outside instant once
    assert step.as_dict()["outside_phases"][0] == {"name": "reward", "ms": 19.0, "source": "verl timing_s"}


def test_without_phases_nothing_is_named_and_a_bad_phase_record_is_ignored():
    rows = records(closed_ms=None) + [{"type": "phase", "step": 1, "name": "gen", "start_ns": "x", "end_ns": 3}]
    (step,) = step_anatomy(rows).steps
    assert step.phases == [] and step.as_dict()["outside_phases"] == []
