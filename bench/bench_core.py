"""Core overheads, side by side in one run (medians of interleaved repeats).

1. An unselected region: ``with prof.role("actor", "update"): f()`` and a ``@prof.role``-decorated
   ``f()``, each against the cheapest Python wrapper doing the same job, measured in the same repeat:
   a ``with`` over a minimal context-manager class (``__enter__``/``__exit__`` that do nothing) and a
   minimal pass-through decorator (``def wrapper(*args, **kwargs): return fn(*args, **kwargs)``).
   Target: at most 1.2x the wrapper's added cost.
2. Hook dispatch per region with a do-nothing backend, on a selected rank and step: enter and exit
   through the capture state machine, one start_role and one stop_role per backend, the region's
   timing kept for the manifest (target: <= 5 us). Printed beside it: what writing the buffered timing
   records costs per region at the step's end.
3. ``python -c "import rlprof"`` over ``python -c pass`` (target: at most 40 ms).

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

N = 100_000
REPEATS = 21


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
    start = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - start) / n


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
    return out


def paired_ratio(samples: dict, case: str, reference: str) -> float:
    """Median over repeats of (case - bare) / (reference - bare), each repeat's own bare call."""
    ratios = []
    for c, r, b in zip(samples[case], samples[reference], samples["bare"]):
        if r - b > 0:
            ratios.append((c - b) / (r - b))
    return statistics.median(ratios)


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

    # 2. selected rank and profiled step, do-nothing backend
    busy = rlprof.Profiler(None, rank=0, world_size=2, roles=("actor",), overrides=base, backends={"noop": DoNothing()},
                           run_id="bench-busy")
    busy.start_step(1)

    def dispatched(n):
        prof = busy
        for _ in range(n):
            with prof.role("actor", "update"):
                f()

    t = interleaved({"bare": bare, "with_region": with_region, "with_minimal": with_minimal,
                     "decorated": decorated_call, "passthrough": passthrough_call}, N)
    d = interleaved({"bare": bare, "dispatched": dispatched}, N // 20)
    buffered = len(busy._session._closed)
    started = time.perf_counter_ns()
    busy.step_boundary()  # writes the step's buffered region records
    flush_ns = (time.perf_counter_ns() - started) / max(buffered, 1)
    busy.finalize()
    idle.finalize()

    # 3. import time
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
          f"{'<= 1.2x':>14}   (= {paired_ratio(samples, 'with_region', 'with_minimal'):.2f}x the minimal context manager)")
    print(f"{'pass-through decorator (cheapest Python decorator): added':<62}{t['passthrough']:>9.1f} ns")
    print(f"{'unselected decorated call: added':<62}{t['decorated']:>9.1f} ns"
          f"{'<= 1.2x':>14}   (= {paired_ratio(samples, 'decorated', 'passthrough'):.2f}x the pass-through decorator)")
    print(f"{'selected region, do-nothing backend: added per region':<62}{d['dispatched'] / 1000:>9.2f} us{'<= 5 us':>14}")
    print(f"{'  then, at step_boundary: timing records written per region':<62}{flush_ns / 1000:>9.2f} us"
          f"   ({buffered} regions in one step)")
    print(f"{'python -c pass':<62}{imp['pass']:>9.1f} ms")
    label = 'python -c "import rlprof": added over pass'
    print(f"{label:<62}{imp['import rlprof'] - imp['pass']:>9.1f} ms{'<= 40 ms':>14}")


if __name__ == "__main__":
    main()
