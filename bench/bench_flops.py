"""What recording FLOPs costs a profiled step, and what the analytic figures cost an unprofiled one (issue 49).

1. **A profiled step, FLOPs on and off.** Two Profilers of one process, ``tool_config.torch.flops`` true and false,
   each profiling every step of the same workload in end-to-end mode, their steps interleaved in a shuffled order
   (bench_torch_overhead's :func:`interleaved`); the unit is one step as the trainer sees it (``start_step`` to
   ``step_boundary``: torch.profiler's start, the recording, the stop) and the same step until its trace is
   written (the background writer's export and compression). Target: on/off <= 1.03, the median of per-round
   ratios. Two workloads: the torch benchmarks' tiny MLP (width 64: every op a few microseconds, the recording's
   per-op cost at its largest share) and the same MLP at width 1024 (each op's arithmetic dominates).
   ``with_flops`` costs what ``record_shapes`` costs: torch 2.13 forces it on, to record every op's input shapes.
   Beside each, the same step under a bare ``torch.profiler.profile`` with ``with_flops`` on and off: what torch
   itself charges for FLOPs, which rlprof can only avoid by not asking (``flops: false``).
2. **An unprofiled step.** ``Profiler.record_tokens`` on a timed role (what the demo and verl's drop-in call once
   per region) against none: microseconds per call, beside the region's own cost (bench_step_metrics).

Run: ``flock /tmp/rlprof-cpu.lock .venv/bin/python bench/bench_flops.py [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import torch

import rlprof
from bench_torch_overhead import interleaved
from rlprof.runtime.trace_writer import process_writer
from rlprof_torch.session import quiet_kineto
from torch_bench_workload import step_body, tiny_mlp

MICRO_BATCHES = 4


def profiler(save: str, flops: bool, steps: int) -> rlprof.Profiler:
    return rlprof.Profiler({
        "global_profiler": {"tool": "torch", "steps": list(range(1, steps + 1)), "save_path": save, "step_metrics": False},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True,
                                                     "tool_config": {"torch": {"flops": flops}}}}},
    }, roles=("actor", "ref"))


def profiled_steps(width: int, rounds: int) -> None:
    import bench_torch_overhead

    model, optimizer, batch = tiny_mlp(width=width)
    batch = torch.randn(32 if width <= 64 else 256, width)
    steps = bench_torch_overhead.WARMUP + rounds
    with tempfile.TemporaryDirectory() as tmp:
        on, off = profiler(f"{tmp}/on", True, steps), profiler(f"{tmp}/off", False, steps)

        def unit(prof, written):
            def run(step):
                prof.start_step(step)
                step_body(model, optimizer, batch, MICRO_BATCHES, prof.role)
                prof.step_boundary()
                if written:
                    process_writer().wait_idle(120)
            return run

        after = {side: (lambda: process_writer().wait_idle(120)) for side in ("on", "off")}
        times = interleaved({"on": unit(on, False), "off": unit(off, False), "on (written)": unit(on, True),
                             "off (written)": unit(off, True)}, rounds, iter(range(1, steps + 1)), after)
        on.finalize()
        off.finalize()
    print(f"width {width}: median ms per profiled step (wall)   on {statistics.median(t[0] for t in times['on']) * 1e3:.2f}   "
          f"off {statistics.median(t[0] for t in times['off']) * 1e3:.2f}   "
          f"on written {statistics.median(t[0] for t in times['on (written)']) * 1e3:.2f}   "
          f"off written {statistics.median(t[0] for t in times['off (written)']) * 1e3:.2f}")
    for side, base in (("on", "off"), ("on (written)", "off (written)")):
        ratio = statistics.median(a[0] / b[0] for a, b in zip(times[side], times[base]))
        print(f"  {side} / {base}: {ratio:.3f}  (target <= 1.03)")


def raw_steps(width: int, rounds: int) -> None:
    """The same step under a bare ``torch.profiler.profile`` (CPU activity, nothing exported), ``with_flops`` on and
    off, interleaved the same way: torch's own price of FLOPs, beside rlprof's (the ratio above)."""
    import contextlib

    import bench_torch_overhead

    model, optimizer, _ = tiny_mlp(width=width)
    batch = torch.randn(32 if width <= 64 else 256, width)

    def unit(flops: bool):
        def run(step):
            with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=flops):
                step_body(model, optimizer, batch, MICRO_BATCHES, lambda *_: contextlib.nullcontext())
        return run

    times = interleaved({"on": unit(True), "off": unit(False)}, rounds, iter(range(bench_torch_overhead.WARMUP + rounds)))
    ratio = statistics.median(a[0] / b[0] for a, b in zip(times["on"], times["off"]))
    print(f"width {width}, bare torch.profiler: median ms per step   with_flops {statistics.median(t[0] for t in times['on']) * 1e3:.2f}   "
          f"without {statistics.median(t[0] for t in times['off']) * 1e3:.2f}   on / off: {ratio:.3f}  (torch's own price)")


def unprofiled_calls(n: int = 20_000) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        prof = rlprof.Profiler(None, rank=0, world_size=1, roles=("actor",), overrides=[
            f"global_profiler.save_path={tmp}", "global_profiler.tool=torch", "global_profiler.steps=[]",
            "global_profiler.peak_tflops=1", "actor_rollout_ref.actor.profiler.enable=true",
            "actor_rollout_ref.actor.profiler.all_ranks=true"])
        model = torch.nn.Linear(8, 8)
        prof.start_step(1)
        prof.record_tokens("actor", "update", 10, model=model, train=True)  # the first: formula and peak, once
        costs = []
        for _ in range(7):
            start = time.perf_counter_ns()
            for _ in range(n):
                prof.record_tokens("actor", "update", 10, model=model, train=True)
            costs.append((time.perf_counter_ns() - start) / n / 1e3)
            prof.timings.work.clear()
        prof.step_boundary()
        prof.finalize()
    print(f"record_tokens on an unprofiled step: {statistics.median(costs):.2f} us a call (median of 7 x {n}); "
          "none when the role is not timed")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=30)
    opts = parser.parse_args()
    logging.disable(logging.WARNING)
    quiet_kineto()
    profiled_steps(64, opts.rounds)
    raw_steps(64, opts.rounds)
    profiled_steps(1024, max(10, opts.rounds // 3))
    raw_steps(1024, max(10, opts.rounds // 3))
    unprofiled_calls()


if __name__ == "__main__":
    main()
