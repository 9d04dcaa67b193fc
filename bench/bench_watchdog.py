"""What the hook watchdog adds to one hook call, side by side with the bare call in one run.

Cases, each a loop of N calls of a hook that does nothing, repeated and interleaved so the host's
drift hits every case alike; the result is the median over repeats of (case - bare) per call:

* ``bare``       — ``hook(ctx)``
* ``watched``    — ``with watchdog.watch("b", "h", 0): hook(ctx)``, watchdog on (60 s limit, its thread running)
* ``call``       — ``watchdog.call("b", "h", 0, hook, ctx)``, watchdog on (the with-free form)
* ``disabled``   — the same with ``RLPROF_HOOK_TIMEOUT_S=0`` (limit None)

Target (contract C3): watched ≤ ~0.3 µs per call. Run: ``.venv/bin/python bench/bench_watchdog.py``.
"""

from __future__ import annotations

import statistics
import time

from rlprof.runtime.watchdog import HookWatchdog

N = 200_000
REPEATS = 15


def hook(ctx):
    return None


def bare(n):
    for _ in range(n):
        hook(None)


def make_watched(watchdog):
    watch = watchdog.watch

    def loop(n):
        for _ in range(n):
            with watch("b", "h", 0):
                hook(None)

    return loop


def make_called(watchdog):
    call = watchdog.call

    def loop(n):
        for _ in range(n):
            call("b", "h", 0, hook, None)

    return loop


def per_call_ns(fn, n):
    start = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - start) / n


def main() -> None:
    on = HookWatchdog(60.0, lambda *a: None)
    off = HookWatchdog(None, lambda *a: None)
    cases = {"bare": bare, "watched": make_watched(on), "call": make_called(on), "disabled": make_watched(off)}
    samples = {name: [] for name in cases}
    for fn in cases.values():
        fn(10_000)  # warm up
    for _ in range(REPEATS):
        for name, fn in cases.items():
            samples[name].append(per_call_ns(fn, N))
    on.close()
    bare_ns = statistics.median(samples["bare"])
    print(f"hook watchdog, {N} calls x {REPEATS} interleaved repeats, medians per call")
    print(f"  {'case':10s} {'ns/call':>9s} {'added ns':>9s} {'added, in bare calls':>21s}")
    for name, values in samples.items():
        added = statistics.median(v - b for v, b in zip(values, samples["bare"])) if name != "bare" else 0.0
        print(f"  {name:10s} {statistics.median(values):9.1f} {added:9.1f} {added / bare_ns:21.1f}")
    print(f"  (target: added <= ~300 ns. The host's speed drifts; a bare call is ~40-55 ns on an idle one,"
          f" {bare_ns:.0f} ns in this run, so the last column is the figure that carries over)")


if __name__ == "__main__":
    main()
