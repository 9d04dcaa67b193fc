"""Issue 42: every region of an enabled role is timed on every step, profiled or not, and a plain Profiler
turns the timings into per-step metrics: its run's step_metrics.jsonl and the step_metrics hook."""

from __future__ import annotations

import json
import time

import pytest

import rlprof
from rlprof.runtime import profiler as profiler_module
from rlprof.step_metrics import check_names, metrics_files, read_step_metrics


def make(save_path, *extra, tool="recorder", world_size=1, rank=0, roles=("actor",)):
    return rlprof.Profiler(None, rank=rank, world_size=world_size, roles=roles, overrides=[
        f"global_profiler.save_path={save_path}", f"global_profiler.tool={tool}",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])


def train(prof, steps, between=False):
    for step in range(1, steps + 1):
        prof.start_step(step)
        with prof.role("actor", "update"):
            time.sleep(0.002)
        with prof.role("actor", "compute_log_prob"):
            pass
        prof.step_boundary()
        if between:  # a region outside every step (a validation pass): no step holds it
            with prof.role("actor", "update"):
                time.sleep(0.004)
    prof.finalize()


def lines(prof, kind="step"):
    (path,) = metrics_files(prof.run.run_dir)
    return [r for r in read_step_metrics(path) if r.kind == kind]


@pytest.mark.timing
def test_every_step_profiled_or_not_has_its_regions_figures(test_backends, save_path):
    prof = make(save_path, "global_profiler.steps=[2]")
    train(prof, 4, between=True)
    got = lines(prof)
    assert [(r.step, r.profiled) for r in got] == [(1, False), (2, True), (3, False), (4, False)]
    for record in got:
        update = record.metrics["rlprof/actor/update/slowest_s"]
        assert update >= 0.002
        assert record.timings["actor/actor_update"]["rank"] == [0]  # the region between steps belongs to no step
        assert record.metrics["rlprof/actor/update/slowest_rank"] == 0
        assert "rlprof/actor/compute_log_prob/median_s" in record.metrics
        assert record.metrics["rlprof/step/time_s"] >= update
        assert check_names(record.metrics) == []
    # the profiled step's region is the one its capture timed: the session's record and the metric agree
    records = [json.loads(line) for f in (prof.run.run_dir / "manifest").glob("*.jsonl") for line in open(f)]
    (region,) = [r for r in records if r["type"] == "region" and r["region"] == "actor_update"]
    assert got[1].metrics["rlprof/actor/update/slowest_s"] == pytest.approx((region["end_ns"] - region["start_ns"]) / 1e9,
                                                                           abs=1e-6)


def test_a_step_without_a_capture_anywhere_is_timed_too(test_backends, save_path):
    """steps: null, a tool set, a role enabled: nothing is captured, every step is timed; the manifest holds only the
    armed run's word on why nothing was (its ``armed`` record)."""
    import json

    prof = make(save_path)
    assert not prof.active
    train(prof, 3)
    assert [r.step for r in lines(prof)] == [1, 2, 3]
    records = [json.loads(line) for f in (prof.run.run_dir / "manifest").glob("*.jsonl") for line in f.read_text().splitlines()]
    assert [r["type"] for r in records] == ["armed"] and records[0]["outcome"].startswith("nothing captured: ")


def test_step_metrics_off_times_nothing(test_backends, save_path):
    # on_demand=false: an armed run (issue 42) writes requests/driver.json for rlprof capture
    prof = make(save_path, "global_profiler.step_metrics=false", "global_profiler.on_demand=false")
    region = prof.role("actor", "update")
    assert type(region).__name__ == "IdleRegion" and prof.timings is None
    train(prof, 2)
    assert not save_path.exists()


def test_a_role_not_enabled_is_not_timed(test_backends, save_path):
    prof = make(save_path, roles=("actor", "critic"))
    assert type(prof.role("critic", "update")).__name__ == "IdleRegion"
    assert type(prof.role("actor", "update")).__name__ == "TimedRegion"
    prof.finalize()


def test_a_rank_of_many_without_a_driver_writes_its_own_file_and_calls_no_hook(test_backends, save_path, tmp_path,
                                                                                 monkeypatch):
    sink = tmp_path / "sink.jsonl"
    monkeypatch.setenv("RLPROF_TEST_SINK", str(sink))
    prof = make(save_path, tool="[recorder,sink]", world_size=2, rank=1)
    train(prof, 2)
    (path,) = metrics_files(prof.run.run_dir)
    assert path.parent.name == "step_metrics" and path.name.startswith("rank1-")
    assert [r.step for r in read_step_metrics(path)] == [1, 2]
    assert not sink.exists()  # each rank's figures under the same names would overwrite one another in a sink


def test_hook_step_metrics(test_backends, save_path, tmp_path, monkeypatch):
    """A backend implementing step_metrics alone (a sink) gets every step's figures, in step order, as the
    file has them, off the training thread."""
    sink = tmp_path / "sink.jsonl"
    monkeypatch.setenv("RLPROF_TEST_SINK", str(sink))
    prof = make(save_path, tool="[recorder,sink]", world_size=1)
    train(prof, 3)
    calls = [json.loads(line) for line in sink.read_text().splitlines()]
    assert [c["step"] for c in calls] == [1, 2, 3]
    assert [c["metrics"] for c in calls] == [r.metrics for r in lines(prof)]
    assert {c["run_id"] for c in calls} == {prof.run.run_id}


def test_a_sink_that_raises_costs_its_calls_not_the_training(test_backends, save_path, tmp_path, monkeypatch):
    monkeypatch.setenv("RLPROF_TEST_SINK", str(tmp_path / "no-such-dir" / "sink.jsonl"))  # every call raises
    prof = make(save_path, tool="[recorder,sink]", world_size=1)
    train(prof, 3)
    assert [r.step for r in lines(prof)] == [1, 2, 3]


@pytest.mark.timing
def test_timings_leave_the_training_thread_without_waiting_for_the_sink(test_backends, save_path, monkeypatch):
    """A sink that never returns until told does not hold up the training: step 2's regions and boundary
    finish while the flusher is still inside the sink with step 1's batch. Events, not durations: the sink
    says when it is entered and waits for the test's release (before, the test timed 200 regions beside a
    1 s sink and needed the machine to keep up)."""
    import threading

    from rlprof.runtime import process_book as step_book

    entered, release = threading.Event(), threading.Event()
    send = step_book.ProcessSink.send

    def blocked(self, batch):
        entered.set()
        release.wait(120)
        send(self, batch)

    monkeypatch.setattr(step_book.ProcessSink, "send", blocked)
    prof = make(save_path)
    try:
        prof.start_step(1)
        with prof.role("actor", "update"):
            pass
        prof.step_boundary()
        assert entered.wait(60), "the flusher never took step 1's batch to the sink"

        def step_two():
            prof.start_step(2)
            for _ in range(200):
                with prof.role("actor", "update"):
                    pass
            prof.step_boundary()

        training = threading.Thread(target=step_two)
        training.start()
        training.join(60)  # only a training thread stuck behind the sink runs into this bound
        assert not training.is_alive() and not release.is_set(), "step 2 waited for the sink"
    finally:
        release.set()
    prof.finalize()
    assert [r.step for r in lines(prof)] == [1, 2]


def test_the_clock_is_the_wall_clock(monkeypatch):
    """Timings are time.time_ns(): the clock every process of a host shares (a driver places a worker's region in
    its own step windows by it)."""
    before = time.time_ns()
    assert before <= profiler_module._now() <= time.time_ns()


def test_regions_stay_timed_after_finalize_where_a_driver_combines_the_steps(test_backends, save_path):
    """verl finalizes its workers at the last profiled step while its trainer's steps go on: a Profiler whose
    timings go to a driver (``outlives``) keeps timing its regions and never says it is final (seen failing in
    verl's real trainer: steps after the last profiled one had no actor figures)."""
    prof = make(save_path, "global_profiler.steps=[1]")
    batches = []

    class Driver:
        def send(self, batch):
            batches.append(batch)

    prof.timings.sink, prof.timings.outlives = Driver(), True
    prof.start_step(1)
    with prof.role("actor", "update"):
        pass
    prof.step_boundary()
    prof.finalize()
    with prof.role("actor", "update"):  # the driver's step 2, after this worker's profiling ended
        pass
    prof.timings.flush()
    assert [t[1] for b in batches for t in b.timings] == ["actor_update", "actor_update"]
    assert not any(b.final for b in batches)


def test_after_a_batch_with_timings_the_next_flush_says_how_far_the_process_is_then_heartbeats_only():
    """A worker's last region of a step often ends just before its driver ends the step (verl: the actor update,
    then ``_stop_profiling``); the batch that carries it was taken before that end. The next flush sends one empty
    batch more, so the driver learns within a flush that the worker has passed the end; before, it learned at the
    next heartbeat (0.5 s), which verl's logger waited for. Idle after that, the heartbeats only."""
    from rlprof.runtime.step_timings import FLUSH_S, HEARTBEAT_S, RegionTimes

    times = RegionTimes("run", "rank0-host-1", 0, sink=None)
    clock = [100.0]

    def take():
        return times.take(now=lambda: clock[0])

    times.done.append(("actor", "actor_update", time.time_ns() - 10**6, time.time_ns()))
    first = take()
    assert first.timings and first.through_ns
    clock[0] += FLUSH_S
    follow = take()
    assert follow is not None and not follow.timings and follow.through_ns >= first.through_ns
    clock[0] += FLUSH_S
    assert take() is None  # idle: nothing until the heartbeat
    clock[0] += HEARTBEAT_S
    assert take() is not None


def test_a_process_that_sends_request_records_only_keeps_its_region_timings_and_splits():
    """A rollout replica's server (verl tells it only of profiled steps, so its regions would say nothing of the
    others) and an agent-loop worker: their batches carry request records and how far they have sent, never region
    timings or splits, and say so (a trainer's logger does not wait for them); what they timed does not pile up."""
    from rlprof.runtime.step_timings import RegionTimes

    times = RegionTimes("run", "rank0-host-1", 0, sink=None)
    times.requests_only = True
    times.done.append(("rollout", "rollout_generate", time.time_ns() - 10**6, time.time_ns()))
    times.splits.append((1, None))
    times.requests.append("a record")
    batch = times.take()
    assert (batch.timings, batch.splits, batch.requests, batch.requests_only) == ([], [], ["a record"], True)
    assert batch.through_ns and not times.done and not times.splits
