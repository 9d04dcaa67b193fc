"""How long a plain Profiler's ``finalize`` takes with step metrics on and off, after a 100k-event capture (issue 49).

Before issue 49, ``finalize`` waited for the in-run analysis of its last traces (the step metrics' split): 5.7-5.9 s
with step metrics on against 1.9 s off on this VM, the full 10 s beside busy processes, then the split was dropped.
Now it hands them on (``SplitAnalyser.hand_off``) and the split is finished after the run
(:mod:`rlprof.analysis.late_split`). Target: on - off <= 1 s, quiet and beside two busy processes; and each
profiled step's split in ``step_metrics.jsonl`` and in ``rlprof report`` afterwards.

Each trial is a fresh interpreter (``--child``): a Profiler with the torch backend profiles step 1 of the torch
benchmarks' tiny MLP, as many micro-batches as make about 100k events, trains step 2 unprofiled, then times
``finalize()`` (which also waits for the trace's compression, as it always did). Trials alternate on, off, three
of each, quiet, then again beside two ``while True: pass`` processes this bench starts and stops. After each "on"
trial the bench waits for the late split, then reads ``step_metrics.jsonl`` and ``rlprof report --json``.

Run: ``flock /tmp/rlprof-cpu.lock .venv/bin/python bench/bench_finalize.py [--events 100000] [--trials 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def child(save: str, step_metrics: bool, micro_batches: int) -> None:
    import logging

    import rlprof
    from torch_bench_workload import step_body, tiny_mlp

    logging.disable(logging.WARNING)
    prof = rlprof.Profiler({
        "global_profiler": {"tool": "torch", "steps": [1], "save_path": save, "step_metrics": step_metrics},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}},
    }, roles=("actor", "ref"))
    model, optimizer, batch = tiny_mlp()
    for step in (1, 2):
        prof.start_step(step)
        step_body(model, optimizer, batch, micro_batches if step == 1 else 4, prof.role)
        prof.step_boundary()
    start = time.perf_counter()
    prof.finalize()
    print(json.dumps({"finalize_s": time.perf_counter() - start, "run_dir": str(prof.run.run_dir)}))


def micro_batches_for(events: int) -> int:
    """How many micro-batches of the tiny MLP make about ``events`` trace events (counted on a raw capture)."""
    import torch
    from torch.autograd.profiler import record_function
    from torch_bench_workload import step_body, tiny_mlp

    model, optimizer, batch = tiny_mlp()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        step_body(model, optimizer, batch, 20, lambda role, stage: record_function(f"{role}_{stage}"))
    return max(1, round(events / (len(prof.events()) / 20)))


def trial(save: str, on: bool, micro_batches: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", save, "on" if on else "off", str(micro_batches)],
                          capture_output=True, text=True, timeout=600, cwd=HERE, env={**os.environ, "PYTHONPATH": str(HERE)})
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def splits_afterwards(run_dir: str) -> tuple[float, bool, bool]:
    """Seconds until the late split was written, and whether step 1's split is in step_metrics.jsonl and in the report."""
    from rlprof.analysis.late_split import wait
    from rlprof.step_metrics import read_step_metrics

    start = time.perf_counter()
    wait(Path(run_dir), 600)
    waited = time.perf_counter() - start
    lines = [r for r in read_step_metrics(Path(run_dir) / "step_metrics.jsonl") if r.kind == "split"]
    report = subprocess.run([sys.executable, "-m", "rlprof.cli", "report", run_dir, "--json"], capture_output=True, text=True)
    (run,) = json.loads(report.stdout)["runs"]
    in_report = any(s["step"] == 1 and s["region"] == "actor_update" for s in (run["inside"] or {}).get("splits", []))
    return waited, [line.step for line in lines] == [1], in_report


def block(label: str, trials: int, micro_batches: int) -> None:
    times: dict[bool, list[float]] = {True: [], False: []}
    checks = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(trials):
            for on in (True, False) if index % 2 == 0 else (False, True):
                result = trial(f"{tmp}/{'on' if on else 'off'}{index}", on, micro_batches)
                times[on].append(result["finalize_s"])
                if on:
                    checks.append(splits_afterwards(result["run_dir"]))
    on, off = statistics.median(times[True]), statistics.median(times[False])
    print(f"{label}: finalize with step metrics on {on:.2f} s [{', '.join(f'{t:.2f}' for t in times[True])}], "
          f"off {off:.2f} s [{', '.join(f'{t:.2f}' for t in times[False])}]: on - off {on - off:+.2f} s (target <= 1 s)")
    print(f"  after each 'on' run: the late split written {', '.join(f'{w:.1f} s' for w, _, _ in checks)} later; "
          f"in step_metrics.jsonl {sum(c[1] for c in checks)}/{len(checks)}, in rlprof report {sum(c[2] for c in checks)}/{len(checks)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--child", nargs=3, metavar=("SAVE", "ON", "MICRO_BATCHES"))
    opts = parser.parse_args()
    if opts.child:
        save, on, micro = opts.child
        child(save, on == "on", int(micro))
        return
    sys.path.insert(0, str(HERE))
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")  # no profiler_start/stop lines (rlprof_torch.session.quiet_kineto)
    micro_batches = micro_batches_for(opts.events)
    print(f"{micro_batches} micro-batches of the tiny MLP in the profiled step: about {opts.events} events")
    block("quiet", opts.trials, micro_batches)
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        block("beside two busy processes", opts.trials, micro_batches)
    finally:
        for process in busy:
            process.kill()
            process.wait()


if __name__ == "__main__":
    main()
