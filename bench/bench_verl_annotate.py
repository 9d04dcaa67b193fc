"""Idle cost of ``@DistProfiler.annotate`` (nothing profiled now), side by side in one run:

* a pass-through decorator (``functools.wraps`` + ``return func(self, *args, **kwargs)``): the floor
  for any decorator that forwards a worker method's arguments;
* rlprof's drop-in ``rlprof.verl.DistProfiler.annotate`` on a worker whose profiler is enabled and on
  this rank, between profiled steps (the common case: most steps are not profiled);
* verl 0.9.1's own ``verl.utils.profiler.DistProfiler.annotate``, imported from the installed wheel,
  in the same state.

Targets (issue 14): the drop-in at most 1.2x the pass-through decorator and at least 20x cheaper than
verl's (cost = time per call minus a bare method call). Medians of interleaved repeats; ratios are
what carries between runs, absolute numbers drift with the host.

Run: ``.venv/bin/python bench/bench_verl_annotate.py`` (needs verl 0.9.1, see scripts/setup.sh).
"""

from __future__ import annotations

import functools
import statistics
import tempfile
import time

N = 100_000
REPEATS = 15


def passthrough(func):
    @functools.wraps(func)
    def wrapper(self, *args, **kwargs):
        return func(self, *args, **kwargs)

    return wrapper


def make_worker(decorator, profiler):
    class Worker:
        def __init__(self):
            self.profiler = profiler

        def bare(self, x):
            return x

        @decorator
        def annotated(self, x):
            return x

    return Worker()


def loop(method, n):
    start = time.perf_counter_ns()
    for i in range(n):
        method(i)
    return (time.perf_counter_ns() - start) / n


def main() -> None:
    from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig
    from verl.utils.profiler.profile import DistProfiler as VerlDistProfiler

    import rlprof.verl

    assert not rlprof.verl.installed(), "run without rlprof.verl.install(): verl's class is the comparison"
    save = tempfile.mkdtemp(prefix="bench-verl-annotate-")
    tool_config = TorchProfilerToolConfig(contents=["cpu"])
    config = ProfilerConfig(tool="torch", enable=True, all_ranks=True, save_path=save, tool_config=tool_config)
    ours = rlprof.verl.DistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor")
    theirs = VerlDistProfiler(rank=0, config=config, tool_config=tool_config, save_file_prefix="actor")
    assert ours.check_this_rank() and theirs.check_this_rank() and not ours.check_this_step()

    workers = {
        "pass-through decorator": make_worker(passthrough, ours),
        "rlprof drop-in annotate": make_worker(rlprof.verl.DistProfiler.annotate(role="actor_update"), ours),
        "verl 0.9.1 annotate": make_worker(VerlDistProfiler.annotate(role="actor_update"), theirs),
    }
    costs = {name: [] for name in workers}
    bare_ns = []
    for _ in range(REPEATS):
        for name, worker in workers.items():
            bare = loop(worker.bare, N)
            costs[name].append(loop(worker.annotated, N) - bare)
            bare_ns.append(bare)
    median = {name: statistics.median(values) for name, values in costs.items()}
    floor = median["pass-through decorator"]
    print(f"bare method call: {statistics.median(bare_ns):.0f} ns (median of {len(bare_ns)} loops of {N})")
    print(f"{'added per call, idle':<28}{'ns':>8}{'x pass-through':>16}")
    for name, value in median.items():
        print(f"{name:<28}{value:>8.0f}{value / floor:>16.2f}")
    ratio = median["verl 0.9.1 annotate"] / median["rlprof drop-in annotate"]
    print(f"verl 0.9.1 / rlprof drop-in: {ratio:.1f}x")
    print(f"targets: drop-in <= 1.2x pass-through ({median['rlprof drop-in annotate'] / floor:.2f}x), "
          f">= 20x cheaper than verl's ({ratio:.1f}x)")
    ours.finalize()


if __name__ == "__main__":
    main()
