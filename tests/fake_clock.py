"""A nanosecond clock for the tests that time what the core records (``ProcessSession.clock_ns``): it
moves only when the test (or the work it scripts) says so, so durations are exact, never wall-clock
bounds. A callable object, read through the session class without being bound to the session."""

from __future__ import annotations


class FakeClock:
    def __init__(self):
        self.now_ns = 1_700_000_000 * 10**9

    def __call__(self) -> int:
        return self.now_ns

    def advance_ms(self, ms: float) -> None:
        self.now_ns += int(ms * 1_000_000)
