"""The hook watchdog reports a hook stuck past its limit — backend, hook, rank and where it is stuck —
while the caller keeps waiting; quick hooks are never reported."""

from __future__ import annotations

import threading
import time

import pytest

from rlprof.errors import ConfigError
from rlprof.runtime.watchdog import DEFAULT_LIMIT_S, HookWatchdog, limit_from_env


class Reports:
    def __init__(self):
        self.items: list[tuple] = []
        self.times: list[float] = []
        self.arrived = threading.Event()

    def __call__(self, backend, hook, rank, elapsed, stack):
        self.items.append((backend, hook, rank, elapsed, stack))
        self.times.append(time.monotonic())
        self.arrived.set()


def a_backend_hook_that_hangs(reports):
    reports.arrived.wait(120)  # stuck until the watchdog has reported it (or, if it never does, long past the limit)


@pytest.mark.timing
def test_hook_sleeping_past_limit_is_reported_within_the_limit():
    """The one real-time smoke test: the watchdog's own thread and clock report a hook stuck past its limit,
    while it is still stuck and never before the limit. The hook is stuck until the report arrives, so nothing
    here depends on how soon a busy machine runs the watchdog's thread (how late it may be, two ticks, is
    tested below on a fake clock)."""
    reports = Reports()
    watchdog = HookWatchdog(0.5, reports)
    try:
        start = time.monotonic()
        with watchdog.watch("slowpoke", "stop_role", 3):
            a_backend_hook_that_hangs(reports)
        finished = time.monotonic()
    finally:
        watchdog.close()
    assert len(reports.items) == 1  # once per call
    backend, hook, rank, elapsed, stack = reports.items[0]
    assert (backend, hook, rank) == ("slowpoke", "stop_role", 3)
    assert elapsed >= 0.5 and reports.times[0] - start >= 0.5  # never before the limit
    assert reports.times[0] <= finished  # reported while the hook was still stuck, the caller waiting
    assert "a_backend_hook_that_hangs" in stack and "reports.arrived.wait(120)" in stack
    assert "test_hook_sleeping_past_limit_is_reported_within_the_limit" in stack
    assert stack.index("test_hook_sleeping") < stack.index("a_backend_hook_that_hangs")  # most recent last


class FakeClock:
    """Seconds that pass only when a test says so."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def driven(limit_s, report):
    """A watchdog without its thread, on a fake clock: the test ticks it and moves time."""
    clock = FakeClock()
    return HookWatchdog(limit_s, report, clock=clock, ticking=False), clock


def test_a_stuck_call_is_reported_once_when_the_limit_has_passed():
    reports = Reports()
    watchdog, clock = driven(10, reports)

    def a_backend_hook_that_hangs(_):
        watchdog.tick()  # first seen
        clock.now += 9.9
        watchdog.tick()  # not yet
        assert reports.items == []
        clock.now += 0.1
        watchdog.tick()  # reported, with the stack of this (stuck) thread
        clock.now += 100
        watchdog.tick()  # once per call

    watchdog.call("slowpoke", "stop_role", 3, a_backend_hook_that_hangs, None)
    assert [(b, h, r, elapsed) for b, h, r, elapsed, _ in reports.items] == [("slowpoke", "stop_role", 3, 10.0)]
    assert "a_backend_hook_that_hangs" in reports.items[0][4]


def test_quick_hooks_are_never_reported():
    reports = Reports()
    watchdog, clock = driven(10, reports)
    for _ in range(2000):
        with watchdog.watch("fast", "start_role", 0):
            pass
    with watchdog.watch("fast", "step_boundary", 0):
        watchdog.tick()
        clock.now += 9
        watchdog.tick()
    clock.now += 100
    watchdog.tick()
    assert reports.items == []


def test_each_stuck_call_is_reported_and_threads_are_told_apart():
    reports = Reports()
    watchdog, clock = driven(10, reports)
    inside, release = threading.Barrier(3), threading.Event()

    def worker(rank):
        with watchdog.watch("hangs", "finalize", rank):
            inside.wait()
            release.wait()

    threads = [threading.Thread(target=worker, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    try:
        with watchdog.watch("hangs", "start_step", 0):
            inside.wait()
            watchdog.tick()
            clock.now += 10
            watchdog.tick()
    finally:
        release.set()
        for t in threads:
            t.join()
    with watchdog.watch("hangs", "start_step", 0):  # a second stuck call of the same hook
        watchdog.tick()
        clock.now += 10
        watchdog.tick()
    assert sorted((r[1], r[2]) for r in reports.items) == [
        ("finalize", 1), ("finalize", 2), ("start_step", 0), ("start_step", 0)]
    for backend, hook, rank, elapsed, stack in reports.items:
        assert ("worker" in stack) == (hook == "finalize")


def test_nested_watched_calls_restore_the_outer_one():
    reports = Reports()
    watchdog, clock = driven(10, reports)
    with watchdog.watch("outer", "finalize", 0):
        with watchdog.watch("inner", "stop_role", 0):
            pass
        watchdog.tick()
        clock.now += 10
        watchdog.tick()
    assert [(r[0], r[1]) for r in reports.items] == [("outer", "finalize")]


def test_exception_in_hook_passes_through_and_clears_the_call():
    reports = Reports()
    watchdog, clock = driven(10, reports)
    with pytest.raises(KeyError):
        with watchdog.watch("raises", "start_role", 0):
            watchdog.tick()
            raise KeyError("x")
    clock.now += 10
    watchdog.tick()
    assert reports.items == []


def test_failing_report_does_not_end_the_watchdog(caplog):
    calls = []

    def report(*args):
        calls.append(args)
        raise RuntimeError("report broke")

    watchdog, clock = driven(10, report)
    for _ in range(2):
        with watchdog.watch("b", "h", 0):
            watchdog.tick()
            clock.now += 10
            watchdog.tick()
    assert len(calls) == 2
    assert "report failed" in caplog.text


def test_disabled_watchdog_starts_no_thread():
    before = threading.active_count()
    for limit in (None, 0, -1):
        watchdog = HookWatchdog(limit, lambda *a: pytest.fail("reported"))
        assert not watchdog.active
        with watchdog.watch("b", "h", 0):
            pass
        watchdog.close()
    assert threading.active_count() == before


def test_close_stops_the_thread():
    watchdog = HookWatchdog(0.05, lambda *a: None)
    thread = watchdog._thread
    assert thread.is_alive() and thread.daemon
    watchdog.close()
    watchdog.close()
    assert not thread.is_alive()


def test_limit_from_env():
    assert limit_from_env({}) == DEFAULT_LIMIT_S == 60
    assert limit_from_env({"RLPROF_HOOK_TIMEOUT_S": "2.5"}) == 2.5
    assert limit_from_env({"RLPROF_HOOK_TIMEOUT_S": "0"}) is None
    assert limit_from_env({"RLPROF_HOOK_TIMEOUT_S": " "}) == 60
    for bad in ("soon", "nan", "inf"):
        with pytest.raises(ConfigError) as info:
            limit_from_env({"RLPROF_HOOK_TIMEOUT_S": bad})
        assert info.value.key == "RLPROF_HOOK_TIMEOUT_S" and repr(bad) in str(info.value)


def test_call_form_reports_and_passes_results_and_errors_through():
    reports = Reports()
    watchdog, clock = driven(10, reports)

    def stuck(_):
        watchdog.tick()
        clock.now += 10
        watchdog.tick()

    assert watchdog.call("b", "finalize", 5, lambda ctx: ctx * 2, 21) == 42
    with pytest.raises(ZeroDivisionError):
        watchdog.call("b", "finalize", 5, lambda ctx: 1 / 0, None)
    assert watchdog.call("slow", "finalize", 5, stuck, None) is None
    with watchdog.watch("outer", "step_boundary", 5):
        watchdog.call("inner", "step_boundary", 5, stuck, None)  # nested: outer stays watched
    assert [(r[0], r[1], r[2]) for r in reports.items] == [("slow", "finalize", 5), ("outer", "step_boundary", 5)]
    assert "stuck" in reports.items[0][4]
