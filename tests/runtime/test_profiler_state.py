"""What a Profiler answers about itself: the one owner of its step, its end and the open capture.

Integrations (verl's DistProfiler, a rollout replica) ask these instead of keeping their own flags,
so the answers must follow what the trainer did, including a finalize from another thread.
"""

from __future__ import annotations

import rlprof

ACTOR = ["global_profiler.tool=recorder", "global_profiler.steps=[2]", "actor_rollout_ref.actor.profiler.enable=true",
         "actor_rollout_ref.actor.profiler.all_ranks=true"]


def profiler(save_path, *extra):
    return rlprof.Profiler(None, roles=("actor",), run_id="state", overrides=[*ACTOR, f"global_profiler.save_path={save_path}", *extra])


def test_current_step_is_the_step_begun_and_not_ended(test_backends, save_path):
    prof = profiler(save_path)
    assert prof.current_step is None
    prof.start_step(1)  # not profiled: still the caller's step
    assert prof.current_step == 1
    prof.step_boundary()
    assert prof.current_step is None
    prof.start_step(2)
    assert prof.current_step == 2
    prof.finalize()
    assert prof.current_step is None and prof.finalized


def test_a_step_left_out_is_the_count_of_starts(test_backends, save_path):
    prof = profiler(save_path)
    seen = []
    for step in (None, 7, None):
        prof.start_step(step)
        seen.append(prof.current_step)
        prof.step_boundary()
    assert seen == [1, 7, 3]  # every start counts, told or not
    prof.finalize()


def test_open_capture_id_is_the_machines_while_a_profiled_step_is_open(test_backends, save_path):
    prof = profiler(save_path)
    prof.start_step(1)
    assert prof.open_capture_id is None  # step 1 is not profiled
    prof.step_boundary()
    prof.start_step(2)
    assert prof.open_capture_id == "step2"
    prof.step_boundary()
    assert prof.open_capture_id is None
    prof.finalize()
    assert [a["capture"] for a in prof.artifacts] == ["step2"]
