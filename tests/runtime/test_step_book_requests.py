"""Issue 48: rollout request records reach the run's driver on the step timings' path (Batch.requests) and
become, per step, request figures in the step's line and the tracker, and a line of the run's records file; a
plain Profiler's own records (record_requests) do the same in its process."""

from __future__ import annotations

import time

import pytest

import rlprof
from rlprof.request_records import RequestRecord, read_run
from rlprof.runtime.step_book import StepBook
from rlprof.runtime.step_timings import Batch
from rlprof.step_metrics import metrics_files, read_step_metrics

S = 1_000_000_000


def record(i, replica, start, end, tokens=8, step=None):
    return RequestRecord(id=f"q{i}", replica=replica, step=step, arrival_ns=start, scheduled_ns=start,
                         first_token_ns=start + S // 100, last_token_ns=end, generated_tokens=tokens)


def test_records_go_to_their_steps_and_become_figures_and_a_file(tmp_path):
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", None, root=tmp_path)
    t0 = time.time_ns() - 100 * S
    book.began(1, t0)
    book.ended(1, t0 + 10 * S)
    book.began(2, t0 + 10 * S)
    book.ended(2, t0 + 20 * S)
    step1 = [record(i, 0, t0 + S, t0 + (2 + i) * S) for i in range(3)] + [record(9, 1, t0 + S, t0 + 9 * S, tokens=90)]
    later = record(20, 0, t0 + 11 * S, t0 + 12 * S, step=2)  # names its step
    book.receive(Batch("run", "replica0", 0, [("rollout", "rollout_generate", t0 + S, t0 + 9 * S)], [], t0 + 30 * S,
                       requests=[*step1, later]))
    assert book.for_tracker(1)["rlprof/requests/waited_for_replica"] == 1  # before the line: from what arrived
    assert book.pump() == 2
    (path,) = metrics_files(tmp_path)
    lines = {r.step: r.metrics for r in read_step_metrics(path) if r.kind == "step"}
    assert lines[1]["rlprof/requests/count"] == 4 and lines[2]["rlprof/requests/count"] == 1
    assert lines[1]["rlprof/requests/slowest/tokens"] == 90 and lines[1]["rlprof/requests/slowest/replica"] == 1
    assert lines[1]["rlprof/requests/finish_spread_s"] == pytest.approx(5.0)  # replica 0 last ends at 4 s, replica 1 at 9 s
    assert book.latest.requests.waited_for_replica == 0  # step 2: replica 0 alone
    # after step 1 was written: a record that names it still reaches the file (a line of its own, joined on reading;
    # the step's figures were written without it), one that names no step and falls in it is left out, and counted
    book.receive(Batch("run", "replica1", 1, [], [], t0 + 40 * S, requests=[record(30, 0, t0 + S, t0 + 2 * S),
                                                                             record(31, 1, t0 + S, t0 + 2 * S, step=1)]))
    book.pump()
    book.close()
    assert (book.requests_kept.late, book.requests_kept.kept_after) == (1, 1)
    kept = read_run(tmp_path)
    assert {step: sorted(r.id for r in part.records) for step, part in kept.items()} == {
        1: ["q0", "q1", "q2", "q31", "q9"], 2: ["q20"]}
    assert kept[1].records[0].last_token_ns - t0 in (2 * S, 3 * S, 4 * S, 9 * S)


def test_a_step_without_records_has_no_request_figures(tmp_path):
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", None, root=tmp_path)
    t0 = time.time_ns() - 100 * S
    book.began(1, t0)
    book.ended(1, t0 + S)
    book.receive(Batch("run", "w", 0, [("actor", "actor_update", t0, t0 + S // 2)], [], t0 + 5 * S))
    book.close()
    (line,) = [r for r in read_step_metrics(tmp_path / "step_metrics.jsonl") if r.kind == "step"]
    assert not any(name.startswith("rlprof/requests/") for name in line.metrics)
    assert not (tmp_path / "rollout_requests.jsonl.gz").exists()


def test_a_plain_profiler_records_its_rollout_requests(test_backends, save_path):
    prof = rlprof.Profiler(None, roles=("rollout",), overrides=[
        f"global_profiler.save_path={save_path}", "global_profiler.tool=recorder",
        "actor_rollout_ref.rollout.profiler.enable=true", "actor_rollout_ref.rollout.profiler.all_ranks=true"])
    for step in (1, 2):
        prof.start_step(step)
        with prof.role("rollout", "generate"):
            began = time.time_ns()
            time.sleep(0.002)
            prof.record_requests([RequestRecord(id=f"{step}-{i}", replica=0, arrival_ns=began, scheduled_ns=began,
                                                last_token_ns=time.time_ns(), generated_tokens=step + i) for i in range(3)])
        prof.step_boundary()
    prof.finalize()
    (path,) = metrics_files(prof.run.run_dir)
    counts = {r.step: r.metrics["rlprof/requests/count"] for r in read_step_metrics(path) if r.kind == "step"}
    assert counts == {1: 3, 2: 3}
    assert sorted(r.generated_tokens for r in read_run(prof.run.run_dir)[2].records) == [2, 3, 4]


def test_a_trainer_waits_for_the_line_of_a_step_of_many_requests_instead_of_computing_it(tmp_path, monkeypatch):
    """The figures of thousands of requests are the delivering thread's to compute, not the trainer's: its logger
    waits (within its wait) for the step's line; a step of few requests is computed at once."""
    import threading

    from rlprof.runtime import step_requests

    book = StepBook(tmp_path / "step_metrics.jsonl", "run", None, root=tmp_path)
    t0 = time.time_ns() - 100 * S
    book.began(1, t0)
    book.ended(1, t0 + 10 * S)
    many = [record(i, i % 2, t0 + S, t0 + 2 * S + i) for i in range(step_requests.ON_CALLER + 1)]
    book.receive(Batch("run", "replicas", 0, [], [], t0 + 30 * S, requests=many))
    callers = []
    real = step_requests.request_figures
    monkeypatch.setattr(step_requests, "request_figures",
                        lambda *a: callers.append(threading.current_thread().name) or real(*a))
    pumper = threading.Timer(0.2, book.pump)
    pumper.name = "delivering"
    pumper.start()
    got = book.for_tracker(1, wait_s=5.0)
    pumper.join()
    assert got.get("rlprof/requests/count") == step_requests.ON_CALLER + 1 and callers == ["delivering"], (sorted(got)[:3], callers)
    book.close()
