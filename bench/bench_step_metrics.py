"""What the always-on step metrics cost the training thread, and that nothing on the way to a tracker waits.

Side by side in one run (issue 42, target: at most 5 us per region on the training thread):

1. **Per region, an unprofiled step.** ``with prof.role("actor", "update"): pass`` on a Profiler that times
   its role on every step (a tool set, the role enabled, ``global_profiler.step_metrics`` on, this step not
   profiled) against the same Profiler with ``step_metrics=false`` (the region idle) and a bare ``pass``.
   The cost of a region is its time per call minus the bare loop's. Medians of interleaved repeats.
2. **A slow sink.** The same steps (8 regions each) while the process's timings go to a sink that takes
   :data:`SLOW_SINK_S` per batch (a tracker that blocks, a wedged network) against a sink that returns at
   once: the step's time must not move (the sink runs on rlprof's flusher thread, never the training's).
3. **The driver's side.** :meth:`StepBook.for_tracker` on the trainer's thread as verl's ``Tracking.log``
   asks for a step of 8 ranks x 6 regions whose timings have arrived (the arithmetic of one step; it waits
   for nothing in that case), and its ``step_metrics`` hook call happens on the collector's thread.

Run: ``flock /tmp/rlprof-heavy.lock python bench/bench_step_metrics.py`` (needs rlprof installed; the torch
backend is named, never loaded: no step is profiled).
"""

from __future__ import annotations

import statistics
import tempfile
import time

import rlprof

N = 20_000
REPEATS = 15
SLOW_SINK_S = 0.5
STEPS = 40
REGIONS_PER_STEP = 8


def make(save_path: str, *extra: str) -> rlprof.Profiler:
    return rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
        f"global_profiler.save_path={save_path}", "global_profiler.tool=torch", "global_profiler.steps=[]",
        "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.all_ranks=true", *extra])


def per_call(fn) -> float:
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / N / 1e3


def region_loop(prof: rlprof.Profiler):
    region = prof.role("actor", "update")

    def loop() -> None:
        for _ in range(N):
            with region:
                pass

    return loop


def bare_loop() -> None:
    for _ in range(N):
        pass


def part1(tmp: str) -> None:
    timed, idle = make(f"{tmp}/timed"), make(f"{tmp}/idle", "global_profiler.step_metrics=false")
    assert timed.timings is not None and idle.timings is None
    timed.start_step(1)
    idle.start_step(1)
    loops = {"bare pass": bare_loop, "region, step_metrics=false (idle)": region_loop(idle),
             "region, timed (unprofiled step)": region_loop(timed)}
    results: dict[str, list[float]] = {name: [] for name in loops}
    for _ in range(REPEATS):  # interleaved: drift hits every variant alike
        for name, loop in loops.items():
            results[name].append(per_call(loop))
            timed.timings.done.clear()  # the flusher would send these: keep the list short between repeats
    bare = statistics.median(results["bare pass"])
    print(f"1. per region on the training thread (median of {REPEATS} x {N} calls, us per call; cost = minus bare)")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"   {name:<38} {median:7.3f} us   cost {median - bare:6.3f} us")
    cost = statistics.median(results["region, timed (unprofiled step)"]) - bare
    print(f"   target <= 5 us per region: {'met' if cost <= 5 else 'MISSED'} ({cost:.3f} us)")
    timed.step_boundary()
    idle.step_boundary()
    timed.finalize()
    idle.finalize()


class FastSink:
    def __init__(self) -> None:
        self.batches = 0

    def send(self, batch) -> None:
        self.batches += 1


class SlowSink(FastSink):
    def send(self, batch) -> None:
        time.sleep(SLOW_SINK_S)
        self.batches += 1


def steps_with(prof: rlprof.Profiler) -> list[float]:
    region = prof.role("actor", "update")
    times = []
    for step in range(1, STEPS + 1):
        start = time.perf_counter()
        prof.start_step(step)
        for _ in range(REGIONS_PER_STEP):
            with region:
                time.sleep(0.001)  # the region's work
        prof.step_boundary()
        times.append(time.perf_counter() - start)
    return times


def part2(tmp: str) -> None:
    print(f"2. a step of {REGIONS_PER_STEP} regions (1 ms of work each), {STEPS} steps, timings sent to a sink that "
          f"returns at once vs one that takes {SLOW_SINK_S} s a batch")
    fast_prof, slow_prof = make(f"{tmp}/fast"), make(f"{tmp}/slow")
    fast, slow = FastSink(), SlowSink()
    fast_prof.timings.sink, slow_prof.timings.sink = fast, slow
    fast_times, slow_times = [], []
    for _ in range(3):  # interleaved
        fast_times += steps_with(fast_prof)
        slow_times += steps_with(slow_prof)
    f, s = statistics.median(fast_times) * 1e3, statistics.median(slow_times) * 1e3
    print(f"   step median: fast sink {f:.3f} ms, slow sink {s:.3f} ms (ratio {s / f:.3f}); "
          f"max: fast {max(fast_times) * 1e3:.3f} ms, slow {max(slow_times) * 1e3:.3f} ms")
    print(f"   batches sent meanwhile: fast sink {fast.batches}, slow sink {slow.batches} (a slow sink holds up the "
          f"process's one flusher thread, so every Profiler's batches of the process, never its steps)")
    slow_prof.timings.sink = fast  # finalize sends the rest without waiting out the bench
    fast_prof.finalize()
    slow_prof.finalize()


def part3(tmp: str) -> None:
    from pathlib import Path

    from rlprof.runtime.step_book import StepBook
    from rlprof.runtime.step_timings import Batch

    ranks, regions = 8, ("update", "compute_log_prob", "ref_log_prob", "values", "generate", "weights")
    book = StepBook(Path(tmp) / "step_metrics.jsonl", "bench", ())
    base = time.time_ns() - 10**12
    samples = []
    for step in range(1, 31):
        start = base + step * 10**9
        book.began(step, start)
        for rank in range(ranks):
            timings = [("actor", f"actor_{name}", start + i * 10**8 + rank * 10**5, start + (i + 1) * 10**8)
                       for i, name in enumerate(regions)]
            book.receive(Batch("bench", f"rank{rank}", rank, timings, [], start + 2 * 10**9))
        book.ended(step, start + 10**9 - 1)
        began = time.perf_counter_ns()
        figures = book.for_tracker(step)
        samples.append((time.perf_counter_ns() - began) / 1e3)
        assert figures
    book.close()
    print(f"3. StepBook.for_tracker on the trainer's thread, a step of {ranks} ranks x {len(regions)} regions "
          f"arrived: median {statistics.median(samples):.1f} us, max {max(samples):.1f} us (no wait)")


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        part1(tmp)
        part2(tmp)
        part3(tmp)


if __name__ == "__main__":
    main()
