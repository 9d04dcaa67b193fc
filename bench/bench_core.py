"""Core overheads, side by side in one run (medians of interleaved repeats).

1. An unselected region: ``with prof.role("actor", "update"): f()`` and a ``@prof.role``-decorated
   ``f()``, each against the cheapest Python wrapper doing the same job, measured in the same repeat:
   a ``with`` over a minimal context-manager class (``__enter__``/``__exit__`` that do nothing) and a
   minimal pass-through decorator (``def wrapper(*args, **kwargs): return fn(*args, **kwargs)``).
   Target: at most 1.2x the wrapper's added cost (the ratio of the fastest repeats: on a shared host
   the minimum is the run least disturbed by other work).
2. Hook dispatch per region with a do-nothing backend, on a selected rank and profiled steps of 100
   regions: enter and exit through the capture state machine, one start_role and one stop_role per
   backend, the region's timing kept for the manifest (target: <= 5 us; the step's own start_step and
   step_boundary are outside the timed part). Printed beside it: what the step's end costs per region
   (closing the capture, writing the buffered timing records in one go).
3. A step that is not profiled (``start_step`` + ``step_boundary``) on a process whose role is
   selected, with 3 and with 10,000 steps listed in ``global_profiler.steps``: the cost must not
   grow with the list (printed side by side; no target of its own).
4. ``python -c "import rlprof"`` over ``python -c pass`` (target: at most 40 ms).

Run: ``.venv/bin/python bench/bench_core.py``. The host's speed drifts between runs (a bare call
measured 37-53 ns on the same VM within minutes), so every case is paired with the bare call of the
same repeat and the ratios come from one run.
"""

from __future__ import annotations

import functools
import statistics
import subprocess
import sys
import tempfile
import time

import rlprof

N = 20_000
REPEATS = 61
REGIONS_PER_STEP = 100
LISTED = (3, 10_000)


class DoNothing:
    @rlprof.hookimpl
    def start_step(self, ctx):
        pass

    @rlprof.hookimpl
    def start_role(self, ctx):
        pass

    @rlprof.hookimpl
    def stop_role(self, ctx):
        pass

    @rlprof.hookimpl
    def step_boundary(self, ctx):
        pass


class MinimalContext:
    """The cheapest context manager a Python class can be."""

    def __enter__(self):
        return None

    def __exit__(self, exc_type, exc, tb):
        return False


def passthrough(fn):
    """The cheapest decorator that keeps the function's name and signature."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def f():
    return None


def per_call_ns(fn, n):
    """Nanoseconds per call of ``fn(n)``'s loop; a case may return the nanoseconds of its timed part."""
    start = time.perf_counter_ns()
    timed = fn(n)
    return (timed if timed is not None else time.perf_counter_ns() - start) / n


def interleaved(cases: dict, n: int) -> dict:
    """Per case, the median over repeats of (case - bare) measured back to back in the same repeat;
    pairing cancels most of the host's noise, which drifts on the scale of a repeat."""
    samples = {name: [] for name in cases}
    for _ in range(REPEATS):
        for name, fn in cases.items():
            samples[name].append(per_call_ns(fn, n))
    bare = samples["bare"]
    out = {"bare": statistics.median(bare)}
    for name, values in samples.items():
        if name != "bare":
            out[name] = statistics.median(v - b for v, b in zip(values, bare))
    out["_samples"] = samples
    out["_min"] = {name: min(values) - (min(bare) if name != "bare" else 0) for name, values in samples.items()}
    return out


def ratio(samples: dict, case: str, reference: str) -> float:
    """(case - bare) / (reference - bare) from the fastest repeat of each: on a shared host the
    minimum is the run least disturbed by other work, and all three come from the same interleaved run."""
    bare = min(samples["bare"])
    return (min(samples[case]) - bare) / (min(samples[reference]) - bare)


def main() -> None:
    save = tempfile.mkdtemp(prefix="rlprof-bench-")
    base = [f"global_profiler.save_path={save}", "global_profiler.tool=noop", "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0]"]
    # 1. unselected: rank 1 is not in ranks=[0]
    idle = rlprof.Profiler(None, rank=1, world_size=2, roles=("actor",), overrides=base, backends={"noop": DoNothing()})
    idle.start_step(1)
    decorated = idle.role("actor", "update")(f)
    wrapped = passthrough(f)
    minimal = MinimalContext()

    def bare(n):
        for _ in range(n):
            f()

    def with_region(n):
        prof = idle
        for _ in range(n):
            with prof.role("actor", "update"):
                f()

    def with_minimal(n):
        cm = minimal
        for _ in range(n):
            with cm:
                f()

    def decorated_call(n):
        for _ in range(n):
            decorated()

    def passthrough_call(n):
        for _ in range(n):
            wrapped()

    # 2. selected rank and profiled steps, do-nothing backend; a step of REGIONS_PER_STEP regions at a
    #    time (a real step has a handful to a few hundred), its timing records written at its end
    busy = rlprof.Profiler(None, rank=0, world_size=2, roles=("actor",), backends={"noop": DoNothing()},
                           run_id="bench-busy", overrides=[*base[:2], f"global_profiler.steps=[{','.join(map(str, range(1, 10_000)))}]",
                                                           *base[3:]])
    steps = iter(range(1, 10_000))
    flushes = []

    def dispatched(n):
        prof, clock, timed = busy, time.perf_counter_ns, 0
        for _ in range(0, n, REGIONS_PER_STEP):
            prof.start_step(next(steps))
            started = clock()
            for _ in range(REGIONS_PER_STEP):
                with prof.role("actor", "update"):
                    f()
            ended = clock()
            prof.step_boundary()
            flushes.append((clock() - ended) / REGIONS_PER_STEP)
            timed += ended - started
        return timed

    # 3. a step that is not profiled (step 1), with few and with many profiled steps listed (even steps)
    listed = {count: rlprof.Profiler(None, rank=0, world_size=2, roles=("actor",), backends={"noop": DoNothing()},
                                     run_id=f"bench-listed-{count}",
                                     overrides=[*base[:2], f"global_profiler.steps=[{','.join(str(2 * i) for i in range(1, count + 1))}]",
                                                *base[3:]])
              for count in LISTED}

    def unprofiled_step(prof):
        def case(n):
            for _ in range(n):
                prof.start_step(1)
                prof.step_boundary()
        return case

    t = interleaved({"bare": bare, "with_region": with_region, "with_minimal": with_minimal,
                     "decorated": decorated_call, "passthrough": passthrough_call}, N)
    d = interleaved({"bare": bare, "dispatched": dispatched}, N // 20)
    u = interleaved({"bare": bare, **{f"listed {count}": unprofiled_step(prof) for count, prof in listed.items()}}, N // 10)
    flush_ns = statistics.median(flushes)
    for prof in listed.values():
        prof.finalize()
    busy.finalize()
    idle.finalize()

    # 4. import time
    runs = {"pass": [], "import rlprof": []}
    for _ in range(15):
        for name, code in (("pass", "pass"), ("import rlprof", "import rlprof")):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True)
            runs[name].append((time.perf_counter() - start) * 1000)
    imp = {k: statistics.median(v) for k, v in runs.items()}

    samples = t["_samples"]
    print(f"{'measurement':<62}{'median':>12}{'target':>14}")
    print(f"{'bare f()':<62}{t['bare']:>9.1f} ns")
    print(f"{'`with MinimalContext()` (cheapest Python context manager): added':<62}{t['with_minimal']:>9.1f} ns")
    print(f"{'unselected `with prof.role(...)`: added':<62}{t['with_region']:>9.1f} ns"
          f"{'<= 1.2x':>14}   (= {ratio(samples, 'with_region', 'with_minimal'):.2f}x the minimal context manager)")
    print(f"{'pass-through decorator (cheapest Python decorator): added':<62}{t['passthrough']:>9.1f} ns")
    print(f"{'unselected decorated call: added':<62}{t['decorated']:>9.1f} ns"
          f"{'<= 1.2x':>14}   (= {ratio(samples, 'decorated', 'passthrough'):.2f}x the pass-through decorator)")
    print(f"{'selected region, do-nothing backend: added per region':<62}{d['dispatched'] / 1000:>9.2f} us{'<= 5 us':>14}"
          f"   (fastest repeat: {d['_min']['dispatched'] / 1000:.2f} us = {d['_min']['dispatched'] / d['_min']['bare']:.0f} bare calls)")
    print(f"{'  step_boundary (capture closed, timing records written), per region':<62}{flush_ns / 1000:>9.2f} us"
          f"   ({REGIONS_PER_STEP} regions a step)")
    for count in LISTED:
        label = f"step not profiled, {count:,} steps listed: start_step + step_boundary"
        print(f"{label:<62}{u[f'listed {count}'] / 1000:>9.2f} us")
    print(f"{'python -c pass':<62}{imp['pass']:>9.1f} ms")
    label = 'python -c "import rlprof": added over pass'
    print(f"{label:<62}{imp['import rlprof'] - imp['pass']:>9.1f} ms{'<= 40 ms':>14}")


if __name__ == "__main__":
    main()
