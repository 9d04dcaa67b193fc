"""Core overheads, side by side in one run (medians of interleaved repeats).

1. An unselected region: ``with prof.role("actor", "update"): f()`` and a ``@prof.role``-decorated
   ``f()`` over a bare ``f()`` (target: at most 150 ns added).
2. Hook dispatch per region with a do-nothing backend, on a selected rank and step (target: <= 5 us).
3. ``python -c "import rlprof"`` over ``python -c pass`` (target: at most 40 ms).

Run: ``.venv/bin/python bench/bench_core.py``. The host's speed drifts between runs (a bare call
measured 37-53 ns on the same VM within minutes), so the idle-path costs are also printed in units
of a bare call, which stays put.
"""

from __future__ import annotations

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
    return out


def main() -> None:
    save = tempfile.mkdtemp(prefix="rlprof-bench-")
    base = [f"global_profiler.save_path={save}", "global_profiler.tool=noop", "global_profiler.steps=[1]",
            "actor_rollout_ref.actor.profiler.enable=true", "actor_rollout_ref.actor.profiler.ranks=[0]"]
    # 1. unselected: rank 1 is not in ranks=[0]
    idle = rlprof.Profiler(None, rank=1, world_size=2, roles=("actor",), overrides=base, backends={"noop": DoNothing()})
    idle.start_step(1)
    decorated = idle.role("actor", "update")(f)

    def bare(n):
        for _ in range(n):
            f()

    def with_region(n):
        prof = idle
        for _ in range(n):
            with prof.role("actor", "update"):
                f()

    def decorated_call(n):
        for _ in range(n):
            decorated()

    # 2. selected rank and profiled step, do-nothing backend
    busy = rlprof.Profiler(None, rank=0, world_size=2, roles=("actor",), overrides=base, backends={"noop": DoNothing()})
    busy.start_step(1)

    def dispatched(n):
        prof = busy
        for _ in range(n):
            with prof.role("actor", "update"):
                f()

    t = interleaved({"bare": bare, "with_region": with_region, "decorated": decorated_call}, N)
    d = interleaved({"bare": bare, "dispatched": dispatched}, N // 20)
    busy.step_boundary()
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

    print(f"{'measurement':<58}{'median':>12}{'target':>12}")
    print(f"{'bare f()':<58}{t['bare']:>9.1f} ns")
    print(f"{'unselected `with prof.role(...)`: added over bare':<58}{t['with_region']:>9.1f} ns{'<= 150 ns':>12}"
          f"   (= {t['with_region'] / t['bare']:.1f} bare calls)")
    print(f"{'unselected decorated call: added over bare':<58}{t['decorated']:>9.1f} ns{'<= 150 ns':>12}"
          f"   (= {t['decorated'] / t['bare']:.1f} bare calls)")
    print(f"{'selected region, do-nothing backend: added per region':<58}{d['dispatched'] / 1000:>9.2f} us{'<= 5 us':>12}")
    print(f"{'python -c pass':<58}{imp['pass']:>9.1f} ms")
    label = 'python -c "import rlprof": added over pass'
    print(f"{label:<58}{imp['import rlprof'] - imp['pass']:>9.1f} ms{'<= 40 ms':>12}")


if __name__ == "__main__":
    main()
