"""Issue 42: a profiled step's split, sent by each process as its traces are analysed (``Batch.splits``), is
combined by the driver's StepBook into one ``split`` line per step: when the step's own line is written and
every file announced for it has its answer (or after SPLIT_WAIT_S, or at close); per region the fractions of
the process with the longest window, the largest peak."""

from __future__ import annotations

import time

import pytest

from rlprof.runtime import step_book
from rlprof.runtime.step_book import StepBook, combine
from rlprof.runtime.step_timings import Batch
from rlprof.step_metrics import SPLIT_STEP, read_step_metrics

S = 10**9
UPDATE = ("actor", "actor_update")


def figures(compute, comm, memory, idle, peak=None):
    return {"compute_ms": compute, "exposed_comm_ms": comm, "exposed_memory_ms": memory, "idle_ms": idle,
            "window_ms": compute + comm + memory + idle, "peak_allocated_bytes": peak}


def batch(process, through, splits, rank=0):
    return Batch("run", process, rank, [], [], through, splits=splits)


@pytest.fixture
def book(tmp_path):
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", ())
    yield book
    book.close()


def a_step(book, step, start):
    book.began(step, start, profiled=True)
    book.ended(step, start + S)


def splits(book):
    book.pump()
    return [r for r in read_step_metrics(book.path) if r.kind == "split"] if book.path.exists() else []


def test_one_line_when_every_announced_file_is_answered_fractions_of_the_slowest_peak_the_largest(book):
    start = time.time_ns() - 10 * S
    a_step(book, 2, start)
    done = start + 2 * S  # both processes are past the step's end: its line is written
    book.receive(batch("rank0", done, [(2, None)]))
    book.receive(batch("rank1", done, [(2, None)], rank=1))
    book.receive(batch("rank0", done, [(2, {UPDATE: figures(60.0, 20.0, 0.0, 20.0, peak=5e9)})]))
    assert splits(book) == []  # rank 1's trace is still being analysed
    book.receive(batch("rank1", done, [(2, {UPDATE: figures(100.0, 50.0, 25.0, 25.0, peak=3e9)})], rank=1))
    (line,) = splits(book)
    assert line.step == 2 and line.metrics[SPLIT_STEP] == 2 and line.processes == 2
    m = line.metrics
    # rank 1's window (200 ms) was the longest: its fractions; rank 0's peak (5e9) the largest
    assert (m["rlprof/actor/update/compute_frac"], m["rlprof/actor/update/exposed_comm_frac"],
            m["rlprof/actor/update/exposed_memory_frac"], m["rlprof/actor/update/idle_frac"]) == (0.5, 0.25, 0.125, 0.125)
    assert m["rlprof/actor/update/peak_allocated_bytes"] == 5e9
    assert book.for_tracker(3)["rlprof/actor/update/compute_frac"] == 0.5  # the tracker gets it at its next step


def test_not_before_the_steps_own_line_a_later_process_may_still_announce_a_file(book):
    start = time.time_ns() - 10 * S
    a_step(book, 2, start)
    book.expect(2)
    book.receive(batch("rank0", start + 2 * S, [(2, None), (2, {UPDATE: figures(1.0, 0.0, 0.0, 1.0)})]))
    assert splits(book) == []  # rank 1 has not been heard from: step 2's line waits, and so does its split
    book.receive(batch("rank1", start + 2 * S, [(2, None)], rank=1))
    assert splits(book) == []
    book.receive(batch("rank1", start + 2 * S, [(2, {UPDATE: figures(3.0, 0.0, 0.0, 1.0)})], rank=1))
    (line,) = splits(book)
    assert line.metrics["rlprof/actor/update/compute_frac"] == 0.75
    steps = [r.kind for r in read_step_metrics(book.path)]
    assert steps == ["step", "split"]


def test_two_files_of_one_process_in_a_step_add_up(book):
    start = time.time_ns() - 10 * S
    a_step(book, 1, start)
    book.receive(batch("rank0", start + 2 * S, [(1, None), (1, None)]))
    book.receive(batch("rank0", start + 2 * S, [(1, {UPDATE: figures(1.0, 0.0, 0.0, 3.0, peak=7.0)})]))
    assert splits(book) == []
    book.receive(batch("rank0", start + 2 * S, [(1, {UPDATE: figures(3.0, 0.0, 0.0, 1.0, peak=9.0)})]))
    (line,) = splits(book)
    assert line.metrics["rlprof/actor/update/compute_frac"] == 0.5
    assert line.metrics["rlprof/actor/update/peak_allocated_bytes"] == 9.0


def test_a_file_never_answered_is_waited_for_at_most_split_wait_s_and_a_later_answer_is_left_out(book, monkeypatch):
    start = time.time_ns() - 10 * S
    a_step(book, 1, start)
    book.receive(batch("rank0", start + 2 * S, [(1, None), (1, {UPDATE: figures(1.0, 0.0, 0.0, 1.0)})]))
    book.receive(batch("rank1", start + 2 * S, [(1, None)], rank=1))  # its process dies before answering
    assert splits(book) == []
    monkeypatch.setattr(step_book, "SPLIT_WAIT_S", 0.0)
    (line,) = splits(book)
    assert line.metrics["rlprof/actor/update/compute_frac"] == 0.5
    book.receive(batch("rank1", start + 3 * S, [(1, {UPDATE: figures(9.0, 0.0, 0.0, 1.0)})], rank=1))
    assert len(splits(book)) == 1


def test_at_close_whatever_came_is_written_and_a_step_with_no_figures_has_no_line(tmp_path):
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", ())
    start = time.time_ns() - 10 * S
    a_step(book, 1, start)
    a_step(book, 2, start + 2 * S)
    book.receive(batch("rank0", start + 4 * S, [(1, None), (1, {}), (2, None), (2, None),
                                                (2, {UPDATE: figures(1.0, 1.0, 0.0, 0.0)})]))
    book.close()  # step 1's file was no trace (no figures); step 2's second file never answered
    (line,) = [r for r in read_step_metrics(book.path) if r.kind == "split"]
    assert line.step == 2 and line.metrics["rlprof/actor/update/exposed_comm_frac"] == 0.5


def test_combine_leaves_out_what_no_process_knows():
    got = combine([{UPDATE: figures(0.0, 0.0, 0.0, 0.0)}, {("ref", "ref"): {**figures(1.0, 0.0, 0.0, 1.0), "peak_allocated_bytes": None}}])
    assert got == {("ref", "ref"): {"compute_frac": 0.5, "exposed_comm_frac": 0.0, "exposed_memory_frac": 0.0, "idle_frac": 0.5}}


def test_a_file_handed_on_is_not_waited_for_and_its_step_goes_to_the_late_split(tmp_path, monkeypatch):
    """Issue 49: the book starts the late split of a step some of whose files were handed on, with the figures
    already answered and the files to analyse; it writes no partial split line itself."""
    started = []
    monkeypatch.setattr(step_book, "start_late", lambda job, folder, root: started.append((job, folder, root)))
    book = StepBook(tmp_path / "step_metrics.jsonl", "run", (), root=tmp_path)
    start = time.time_ns() - 10 * S
    a_step(book, 2, start)
    done = start + 2 * S
    book.receive(batch("rank0", done, [(2, None), (2, None)]))
    book.receive(batch("rank0", done, [(2, {UPDATE: figures(60.0, 20.0, 0.0, 20.0)})]))
    book.receive(batch("rank0", done, [(2, ("late", "/r/rank0.pt.trace.json.gz", ["actor"]))]))
    assert splits(book) == []  # nothing partial
    ((job, folder, root),) = started
    assert (job["run"], job["metrics"], folder, root) == ("run", str(book.path), tmp_path / "late_splits", tmp_path)
    ((step, process),) = [(entry["step"], p) for entry in job["steps"] for p in entry["processes"]]
    assert step == 2
    assert process["late"] == [["/r/rank0.pt.trace.json.gz", ["actor"]]]
    assert process["figures"] == [["actor", "actor_update", figures(60.0, 20.0, 0.0, 20.0)]]
    book.close()
    assert len(started) == 1 and splits(book) == []
