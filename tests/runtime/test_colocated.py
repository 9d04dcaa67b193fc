"""Colocated roles: Profilers of one process with the same run id and rank share one process session.

verl puts several worker classes in one process (the critic in the actor's process) and each may
build its own Profiler. They must share one instance per backend, one capture per step holding every
role's ranges, one manifest file, and one finalize of the backends; their configs must agree.
"""

from __future__ import annotations

import pytest

import rlprof
from rlprof.manifest import read_records

BOTH = ["actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        "critic.profiler.enable=true", "critic.profiler.all_ranks=true"]


def pair(save_path, *extra, run_id="colocated", critic_extra=()):
    base = ["global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]", *BOTH]
    actor = rlprof.Profiler(None, roles=("actor", "ref"), run_id=run_id, overrides=[*base, *extra])
    critic = rlprof.Profiler(None, roles=("critic",), run_id=run_id, overrides=[*base, *extra, *critic_extra])
    return actor, critic


def train(actor, critic, steps=(1, 2, 3)):
    for step in steps:
        actor.start_step(step)
        critic.start_step(step)
        with actor.role("actor", "update"):
            pass
        with critic.role("critic", "update"):
            pass
        actor.step_boundary()
        critic.step_boundary()


def test_two_profilers_share_one_backend_one_capture_per_step_and_one_finalize(test_backends, save_path):
    actor, critic = pair(save_path)
    assert actor.backends is critic.backends
    recorder = actor.backends.plugins["recorder"]
    train(actor, critic)
    actor.finalize()
    assert "finalize:None" not in recorder.sequence()  # the critic is still running
    critic.finalize()
    assert recorder.sequence() == [
        "start_step:1+", "start_role:actor_update", "stop_role:actor_update", "start_role:critic_update",
        "stop_role:critic_update", "step_boundary:1-",
        "start_step:2+", "start_role:actor_update", "stop_role:actor_update", "start_role:critic_update",
        "stop_role:critic_update", "step_boundary:2-",
        "finalize:None",
    ]
    assert [a["capture"] for a in critic.artifacts] == ["step1", "step2"]
    assert {tuple(a["roles"]) for a in critic.artifacts} == {("actor", "ref", "critic")}  # ref follows actor
    records = list(read_records([save_path]))
    assert len({r["_manifest"] for r in records}) == 1  # one manifest file for the process
    assert sorted(r["roles"] for r in records if r["type"] == "process") == [["actor", "ref"], ["critic"]]
    assert [r["step"] for r in records if r["type"] == "step"] == [1, 2]  # one step record per process, not per Profiler


def test_the_step_closes_after_the_last_participant_ends_it(test_backends, save_path):
    actor, critic = pair(save_path)
    recorder = actor.backends.plugins["recorder"]
    actor.start_step(1)
    critic.start_step(1)
    actor.step_boundary()
    with critic.role("critic", "update"):
        pass
    assert "step_boundary:1-" not in recorder.sequence()
    critic.step_boundary()
    assert recorder.sequence()[-1] == "step_boundary:1-"
    actor.finalize()
    critic.finalize()


def test_finalize_at_exit_finalizes_every_participant_once(test_backends, save_path):
    from rlprof.runtime import exits

    actor, critic = pair(save_path)
    recorder = actor.backends.plugins["recorder"]
    actor.start_step(1)
    critic.start_step(1)
    exits.finalize_all("exit")
    assert recorder.sequence()[-2:] == ["step_boundary:1-", "finalize:None"]
    assert [r["reason"] for r in read_records([save_path]) if r["type"] == "finalized"] == ["exit", "exit"]


def test_profilers_of_different_runs_do_not_share(test_backends, save_path):
    first = rlprof.Profiler(None, roles=("actor",), run_id="a", overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]", *BOTH])
    second = rlprof.Profiler(None, roles=("critic",), run_id="b", overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1]", *BOTH])
    assert first.backends is not second.backends
    first.finalize()
    second.finalize()


@pytest.mark.parametrize("critic_extra, key, words", [
    (["global_profiler.tool=recorder2"], "global_profiler.tool", "disagree on the tools: the one hosting actor+ref has "
     "[recorder], the one hosting critic has [recorder2]"),
    (["critic.profiler.tool_config.recorder.discrete=true"], "critic.profiler.tool_config.recorder.discrete",
     "disagree on the mode (tool_config.<tool>.discrete): the one hosting actor+ref has end-to-end, the one hosting "
     "critic has discrete"),
    (["global_profiler.steps=[1,3]"], "global_profiler.steps", "the one hosting actor+ref has steps 1, 2, the one "
     "hosting critic has steps 1, 3"),
])
def test_colocated_configs_that_disagree_warn_naming_both_and_the_later_one_stays_idle(
        test_backends, save_path, critic_extra, key, words, caplog):
    """A Profiler's mistake never stops training: no exception from the later Profiler's constructor; it
    is said once (both configs named), recorded in the manifest, and the first one profiles on."""
    import logging

    with caplog.at_level(logging.WARNING, logger="rlprof"):
        actor, critic = pair(save_path, critic_extra=critic_extra)
    warned = [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]
    assert len(warned) == 1 and key in warned[0] and words in warned[0] and "stays idle" in warned[0]
    assert critic.backends is None and actor.backends is not None
    train(actor, critic)
    actor.finalize()
    critic.finalize()
    records = list(read_records([save_path]))
    recorded = [r for r in records if r["type"] == "warning"]
    assert [(r["kind"], r["key"], r["roles"]) for r in recorded] == [("colocated", key, ["critic"])]
    assert words in recorded[0]["message"]
    profiled = [(r["step"], r["region"]) for r in records if r["type"] == "region"]
    assert sorted(profiled) == [(1, "actor_update"), (2, "actor_update")]  # the first Profiler profiled on


def test_next_iteration_marks_iterations_torch_profiler_step_style(test_backends, save_path):
    prof = rlprof.Profiler(None, roles=("actor",), overrides=[
        "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true",
        "actor_rollout_ref.actor.profiler.schedule.wait=1", "actor_rollout_ref.actor.profiler.schedule.active=2"])
    recorder = prof.backends.plugins["recorder"]
    for step in (1, 2):
        prof.start_step(step)
        with prof.role("actor", "update"):
            for _ in range(4):
                prof.next_iteration()  # verl's DistProfiler.step(): the end of each micro-batch
        prof.step_boundary()
    prof.finalize()
    windows = [(h, f.get("iterations"), f.get("iteration")) for h, f in recorder.calls
               if h in ("start_role", "iteration_boundary", "stop_role")]
    assert windows == [("start_role", (1, 1), None), ("iteration_boundary", None, 1), ("stop_role", (1, 2), None)] * 2
    regions = [r for r in read_records([save_path]) if r["type"] == "region"]
    assert [(r["iterations"], r["marked_iterations"]) for r in regions] == [([1, 2], 4), ([1, 2], 4)]


def test_a_disagreement_is_said_once_per_process_through_notices(test_backends, save_path, caplog):
    import logging

    from rlprof import notices

    notices.forget()
    extra = ["critic.profiler.tool_config.recorder.discrete=true"]
    with caplog.at_level(logging.WARNING, logger="rlprof"):
        actor, critic = pair(save_path, run_id="said-once", critic_extra=extra)
        again = rlprof.Profiler(None, roles=("critic",), run_id="said-once", overrides=[
            "global_profiler.tool=recorder", f"global_profiler.save_path={save_path}", "global_profiler.steps=[1,2]",
            *BOTH, *extra])
    warned = [r.getMessage() for r in caplog.records if "disagree" in r.getMessage()]
    assert len(warned) == 1 and again.backends is None
    records = [r for r in read_records([save_path]) if r["type"] == "warning"]
    assert len(records) == 2  # each idle Profiler is recorded in the manifest, the log says it once
    for prof in (actor, critic, again):
        prof.finalize()
