"""What profiling costs a step of ``rlprof demo``, in the figures issue 33 sets its targets in.

Runs ``rlprof demo`` for 6 steps profiling steps 2 and 3 (torch, and with ``--rollout vllm`` where vLLM
is installed), then reads the run's report (:mod:`rlprof.analysis.cost`) and prints, per profiled step:

* its whole time (first start to the last moment any process was done with it, writing included)
  over the median unprofiled step of the same run (the Ray controller times those): target <= 1.3x;
* what profiling cost it: the report's "profiling cost", what the step took beyond the median unprofiled
  step (by the trainer's own timing where it timed every step: verl's ``timing_s/step``), and its share
  of the step (the verdict warns above 20%);
* the anatomy's "(writing captures)" row as a share of the step window (target <= 5%): the writing
  inside the step's own window only, which leaves out the export at the step's end, so it reads lower.

Run: ``.venv/bin/python bench/bench_demo_cost.py [--rollout vllm] [--keep]``. Each demo run's save path
is a temporary directory, deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from rlprof.analysis.report import build_reports

STEPS = "2,3"
TRAIN_STEPS = 6
RATIO_TARGET = 1.3
WRITING_TARGET = 0.05


def demo_cost(rollout: str, keep: bool) -> None:
    save_path = Path(tempfile.mkdtemp(prefix=f"bench-demo-cost-{rollout}-"))
    command = [str(Path(sys.executable).with_name("rlprof")), "demo", "--rollout", rollout, "--steps", STEPS,
               "--train-steps", str(TRAIN_STEPS), "--save-path", str(save_path)]
    env = {**os.environ, "RAY_ADDRESS": "local"}  # a cluster of its own, never one found on the host
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            print(f"rlprof demo --rollout {rollout}: exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
            return
        (report,) = build_reports([save_path])
        print_cost(f"rlprof demo --rollout {rollout}, {TRAIN_STEPS} steps, profiled {STEPS}", report)
    finally:
        if keep:
            print(f"  kept: {save_path}")
        else:
            shutil.rmtree(save_path, ignore_errors=True)


def print_cost(run: str, report) -> None:
    """Each profiled step of ``report``'s run beside its unprofiled steps (bench_verl_trainer.py prints it too)."""
    cost, windows = report.cost, {s.step: s for s in report.anatomy.steps}
    plain = cost.unprofiled_ms
    print(f"{run}: unprofiled step median {plain:.1f} ms over {cost.unprofiled_count}" if plain is not None
          else f"{run}: no unprofiled step recorded")
    print(f"  {'step':>4}  {'whole_ms':>9}  {'x unprofiled':>12}  {'profiling':>15}  {'(writing captures)':>22}  timed by")
    for s in cost.steps:
        ratio = f"{s.total_ms / s.unprofiled_ms:.2f}x" if s.unprofiled_ms else "-"
        window = windows.get(s.step)
        span = window.span_ms if window is not None else None
        writing = f"{window.writing_ms:.1f} ms {window.writing_ms / span:.0%}" if span else "-"
        print(f"  {s.step:>4}  {s.total_ms:>9.1f}  {ratio:>12}  {s.profiling_ms:>8.1f} ms {s.share:>4.0%}  {writing:>22}  "
              f"{s.timed_by} (unprofiled {s.unprofiled_ms} ms)")
    print(f"  targets: <= {RATIO_TARGET}x the unprofiled step; (writing captures) <= {WRITING_TARGET:.0%} of the step")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollout", action="append", choices=["torch", "vllm"],
                        help="default: torch, and vllm where it is installed")
    parser.add_argument("--keep", action="store_true", help="keep each run's save path")
    args = parser.parse_args()
    rollouts = args.rollout or ["torch"] + (["vllm"] if importlib.util.find_spec("vllm") else [])
    for rollout in rollouts:
        demo_cost(rollout, args.keep)


if __name__ == "__main__":
    main()
