"""A trainer's logger asks the book for a step's figures (``StepBook.for_tracker``, on the trainer's thread) while
the book's pump, on the thread that delivers the workers' timings, writes the steps that are complete."""

from __future__ import annotations

import dataclasses
import sys
import threading
import time

from rlprof.runtime.step_book import KEEP, StepBook
from rlprof.runtime.step_timings import Batch

S = 10**9


def test_the_logger_asking_while_the_pump_writes_steps_always_gets_its_figures():
    """CI's verl e2e run logged step 3 without any ``rlprof/`` figure: the logger searched the steps written so far
    (a deque) while the pump appended one (outside the book's lock), which raises ``deque mutated during
    iteration``, and the figures were dropped with it. Here a thread appends written steps to the book's deque as
    the pump does, as fast as it can (a stand-in for the pump's append: the real pump does so too rarely for a test
    to meet it), while the logger asks for step 0, written first, with the interpreter switching threads every
    microsecond: every answer has its figures. Before the fix some raised (4 of 20,000 here; 17 of 20,000 in a first try)."""
    book = StepBook(None, "run", ())
    start = time.time_ns() - 10 * S
    book.began(0, start)
    book.ended(0, start + S)
    book.receive(Batch("run", "rank0", 0, [("actor", "actor_update", start, start + S // 2)], [], start + 2 * S))
    book.pump()
    (written,) = book.recent()
    stop = threading.Event()

    def appending():  # later steps written, without figures of their own; fewer than KEEP, so step 0 stays
        while not stop.is_set():
            for step in range(1, KEEP // 2):
                book._recent.append(dataclasses.replace(written, step=step))
            while len(book._recent) > 1:
                book._recent.pop()

    failures = []
    switch = sys.getswitchinterval()
    writer = threading.Thread(target=appending)
    sys.setswitchinterval(1e-6)
    try:
        writer.start()
        for _ in range(20000):
            try:
                figures = book.for_tracker(0)
            except RuntimeError as exc:
                failures.append(repr(exc))
                continue
            if "rlprof/actor/update/slowest_s" not in figures:
                failures.append(sorted(figures))
    finally:
        sys.setswitchinterval(switch)
        stop.set()
        writer.join()
    assert failures == [], (len(failures), failures[:3])


def test_the_logger_asking_while_the_pump_writes_that_very_step_gets_its_figures():
    """The pump takes a complete step out of the open windows, then, off the lock, writes its request records and
    computes its figures, and only then lists it written. A logger asking in between (verl's logger waits for the
    same timings the pump does, so it asks just as the pump writes) found the step neither open nor written and
    got none of its figures: CI's verl e2e run logged step 3 as ``(3, [])``, a run here step 2 with the previous
    step's split only. Here the pump's writing of the records is held until the logger has asked."""
    book = StepBook(None, "run", ())
    start = time.time_ns() - 10 * S
    book.began(1, start)
    book.ended(1, start + S)
    book.receive(Batch("run", "rank0", 0, [("actor", "actor_update", start, start + S // 2)], [], start + 2 * S))
    writing, asked = threading.Event(), threading.Event()
    keep = book.requests_kept.keep

    def slow_keep(*args):  # writing the step's records (a gzip file) takes a while
        writing.set()
        asked.wait(30)
        return keep(*args)

    book.requests_kept.keep = slow_keep
    pump = threading.Thread(target=book.pump)
    pump.start()
    try:
        assert writing.wait(30)
        figures = book.for_tracker(1, wait_s=1.0)
    finally:
        asked.set()
        pump.join()
    assert figures.get("rlprof/actor/update/slowest_s") == 0.5, sorted(figures)
    assert [f.step for f in book.recent()] == [1]
