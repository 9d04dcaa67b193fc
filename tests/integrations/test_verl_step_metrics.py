"""Issue 42: verl's own ``Tracking`` (the real class from verl's wheel, its real file backend) logs the
``rlprof/`` step metrics at the step they belong to, once the drop-in wrapped ``Tracking.log``; a step rlprof
has no window for passes unchanged; a late split goes with the next step under its own step key; the
trainer waits for a step's timings at most the documented bound. verl's real trainer does the same end to
end in tests/integrations/test_verl_trainer.py."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("verl.utils.tracking")

from rlprof.integrations.verl import step_metrics  # noqa: E402
from rlprof.runtime.step_book import StepBook  # noqa: E402
from rlprof.runtime.step_timings import Batch  # noqa: E402
from rlprof.step_metrics import SPLIT_STEP  # noqa: E402

S = 10**9


@pytest.fixture
def tracked(tmp_path, monkeypatch):
    """verl's Tracking with its file logger, ``Tracking.log`` wrapped, a book active; yields (tracking, book, path)."""
    import verl.utils.tracking as module

    original = module.Tracking.log
    step_metrics._patch(module)
    path = tmp_path / "verl.jsonl"
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(path))
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", ())
    step_metrics.ACTIVE = step_metrics.TrainerMetrics(book, collector=None)
    tracking = module.Tracking(project_name="p", experiment_name="e", default_backend=["file"])
    yield tracking, book, path
    step_metrics.ACTIVE = None
    step_metrics.forget()
    assert module.Tracking.log is original
    tracking.finish()


def a_step(book, step, start, late_ms=0):
    book.began(step, start)
    book.receive(Batch("run", "rank0", 0, [("actor", "actor_update", start + S // 10, start + S // 2)], [], start + 2 * S))
    book.receive(Batch("run", "rank1", 1, [("actor", "actor_update", start + S // 10 + late_ms * 10**6,
                                            start + S // 2)], [], start + 2 * S))
    book.ended(step, start + S)


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_verls_file_logger_gets_each_steps_rlprof_metrics_at_that_step(tracked):
    tracking, book, path = tracked
    base = time.time_ns() - 100 * S
    tracking.log(data={"val/score": 1.0}, step=0)  # validation before training: no step window
    for step in (1, 2):
        a_step(book, step, base + step * 2 * S)
        tracking.log(data={"timing_s/step": 1.0}, step=step)
    got = lines(path)
    assert [line["step"] for line in got] == [0, 1, 2]
    assert got[0]["data"] == {"val/score": 1.0}
    for line in got[1:]:
        assert line["data"]["timing_s/step"] == 1.0
        assert line["data"]["rlprof/actor/update/slowest_s"] == pytest.approx(0.4)
        assert line["data"]["rlprof/actor/update/slowest_rank"] == 0
        assert line["data"]["rlprof/step/time_s"] == pytest.approx(1.0)


def test_a_split_known_later_goes_with_the_next_step_under_its_own_step_key(tracked):
    tracking, book, path = tracked
    base = time.time_ns() - 100 * S
    a_step(book, 1, base)
    tracking.log(data={}, step=1)
    book.split(1, {("actor", "actor_update"): {"compute_frac": 0.75}})  # step 1's trace, analysed after its log
    a_step(book, 2, base + 2 * S)
    tracking.log(data={}, step=2)
    got = lines(path)
    assert "rlprof/actor/update/compute_frac" not in got[0]["data"]
    assert got[1]["step"] == 2 and got[1]["data"][SPLIT_STEP] == 1
    assert got[1]["data"]["rlprof/actor/update/compute_frac"] == 0.75


class SteppedTime:
    """``time`` for :mod:`rlprof.runtime.step_book` whose seconds pass only in its ``sleep`` (the wait's poll),
    and at given moments delivers what another thread would: how long the trainer waited is then exact,
    whatever the machine's load (before, a 50 ms timer thread and a 0.1 s slack on the bound)."""

    def __init__(self):
        self.now, self.due = 1000.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for when, deliver in [d for d in self.due if d[0] <= self.now]:
            self.due.remove((when, deliver))
            deliver()


@pytest.mark.timing
def test_the_trainer_waits_for_timings_on_their_way_but_no_longer_than_the_bound(tracked, monkeypatch):
    from rlprof.runtime import step_book

    clock = SteppedTime()
    monkeypatch.setattr(step_book, "time", clock)
    tracking, book, path = tracked
    start = time.time_ns() - 5 * S
    book.began(1, start)
    book.receive(Batch("run", "rank0", 0, [], [], start))  # rank 0 reports, but not yet past the step
    book.ended(1, start + S)
    began = clock.now
    clock.due.append((began + 0.05, lambda: book.receive(  # 50 ms into the wait, rank 0's timings arrive
        Batch("run", "rank0", 0, [("actor", "actor_update", start + S // 10, start + S // 2)], [], start + 2 * S))))
    tracking.log(data={}, step=1)
    assert 0.05 <= clock.now - began < 0.06  # it waited for them, and no longer
    assert lines(path)[0]["data"]["rlprof/actor/update/slowest_s"] == pytest.approx(0.4)
    book.began(2, start + 2 * S)  # nothing comes for step 2: logged after the bound, with what there is
    book.ended(2, start + 3 * S)
    began = clock.now
    tracking.log(data={}, step=2)
    assert step_metrics.TRACKER_WAIT_S <= clock.now - began < step_metrics.TRACKER_WAIT_S + 0.01
    assert [line["step"] for line in lines(path)] == [1, 2]


@pytest.mark.timing
def test_the_loggers_bound_is_set_by_the_environment_and_a_bad_value_keeps_the_default(monkeypatch, caplog):
    """``RLPROF_TRACKER_WAIT_S``: the suite's real verl runs wait for every figure (a bound no busy machine
    reaches); a bad value is said once and the default kept, never the trainer's failure."""
    monkeypatch.setenv(step_metrics.TRACKER_WAIT_ENV, "600")
    assert step_metrics.TrainerMetrics(None, None).wait_s == 600.0
    monkeypatch.setenv(step_metrics.TRACKER_WAIT_ENV, "soon")
    assert step_metrics.TrainerMetrics(None, None).wait_s == step_metrics.TRACKER_WAIT_S
    assert "RLPROF_TRACKER_WAIT_S: got 'soon'" in caplog.text


@pytest.mark.timing
def test_a_v1_step_is_logged_once_the_workers_passed_its_stop_not_the_end_of_verls_step_phase(tracked, monkeypatch):
    """verl's V1 trainer calls ``_stop_profiling`` inside its ``step`` phase, which goes on with ``on_step_end`` (the
    weight sync, a switch to rollout), where no worker times a region; the step's window is the phase (its time is
    ``timing_s/step``), and verl logs the step right after it. The logger waits for every worker's timings up to the
    stop, not up to the phase's end: a worker idle since then sends its next heartbeat only every 0.5 s, which the
    logger waited for (0.3-0.5 s a step in colocate_async and separate_async runs, on the training's path)."""
    from rlprof.integrations.verl.trainer_steps import StepTimer
    from rlprof.runtime import step_book

    clock = SteppedTime()
    monkeypatch.setattr(step_book, "time", clock)
    tracking, book, path = tracked
    timer = StepTimer({"global_profiler": {}})
    timer.metrics = step_metrics.ACTIVE
    start = time.time_ns() - 5 * S
    timer.phase_began(1, start)  # marked_timer("step"): on_step_begin
    timer.clock_ns = lambda: start + S // 10
    timer.begin(1)  # _start_profiling
    book.receive(Batch("run", "rank0", 0, [("actor", "actor_update", start + S // 5, start + 7 * S // 10)], [],
                       start + 8 * S // 10 + 10**6))  # the worker's batch after its update: its last before the log
    timer.clock_ns = lambda: start + 8 * S // 10
    timer.end(1)  # _stop_profiling
    timer.phase_ended(1, start + 13 * S // 10)  # on_step_end's weight sync ended: the phase ends
    began = clock.now
    tracking.log(data={}, step=1)
    assert clock.now - began < 0.01  # before: the bound (1 s), waiting for a heartbeat past the phase's end
    logged = lines(path)[0]["data"]
    assert logged["rlprof/actor/update/slowest_s"] == pytest.approx(0.5)
    assert logged["rlprof/step/time_s"] == pytest.approx(1.3)  # the window is still verl's step phase



@pytest.mark.timing
def test_the_logger_waits_for_the_workers_timings_not_for_a_replica_that_only_sends_request_records(tracked, monkeypatch):
    """A rollout replica (and an agent-loop worker) sends its driver request records only, each as its request
    finishes; paused while the trainer trains (verl's V1 async modes), it sends nothing new, so it says how far it
    is at its heartbeat only (0.5 s). The logger waits for the processes that time the step's regions and logs the
    records that arrived (the step's line in step_metrics.jsonl waits for every process). Before, it waited for the
    paused replica's heartbeat: 0.15-0.42 s a step in colocate_async and separate_async runs."""
    from rlprof.request_records import RequestRecord
    from rlprof.runtime import step_book

    clock = SteppedTime()
    monkeypatch.setattr(step_book, "time", clock)
    tracking, book, path = tracked
    start = time.time_ns() - 5 * S
    book.began(1, start)
    served = RequestRecord("q1", 0, 1, start + S // 10, start + S // 10, start + S // 10, start + S // 5, start + 3 * S // 10,
                           5, 8, "length", 0)
    replica = Batch("run", "replica0", 0, [], [], start + 4 * S // 10, requests=[served])
    replica.requests_only = True  # what a replica's and an agent-loop worker's batches say
    book.receive(replica)  # its last batch: the request it served, before the pause
    book.receive(Batch("run", "rank0", 0, [("actor", "actor_update", start + S // 2, start + 9 * S // 10)], [],
                       start + S + 10**6))  # the training worker, past the step's end
    book.ended(1, start + S)
    began = clock.now
    tracking.log(data={}, step=1)
    assert clock.now - began < 0.01
    logged = lines(path)[0]["data"]
    assert logged["rlprof/requests/count"] == 1 and logged["rlprof/actor/update/slowest_s"] == pytest.approx(0.4)


def test_a_step_logged_while_its_line_is_being_written_keeps_its_figures(tracked, monkeypatch):
    """The run's collector thread writes a step's line once every worker has passed its end: it takes the step's
    window, then computes its figures outside the book's lock. A logger asking in between (the batch that ends
    its wait is the one that completes the line) found neither the window nor the line: before, verl's line of the
    last step of a separate_async run held no ``rlprof/`` figure at all."""
    from rlprof.runtime import step_book

    tracking, book, path = tracked
    a_step(book, 1, time.time_ns() - 100 * S)
    original = step_book.step_figures
    logged = []

    def figures_being_computed(*args, **kwargs):
        if not logged:  # the line's figures, on the collector's thread: the trainer logs the step now
            logged.append(1)
            tracking.log(data={}, step=1)
        return original(*args, **kwargs)

    monkeypatch.setattr(step_book, "step_figures", figures_being_computed)
    assert book.pump() == 1
    [line] = lines(path)
    assert line["data"]["rlprof/actor/update/slowest_s"] == pytest.approx(0.4)
    assert line["data"]["rlprof/step/time_s"] == pytest.approx(1.0)
