"""What rlprof costs verl's real trainer, on this CPU (examples/verl-cpu). Prints numbers; asserts nothing.

    python bench/bench_verl_trainer.py [--steps 6] [--profiled 2,3] [--out /tmp/rlprof-bench-verl]

Three runs of the same GRPO training (``run.py``, same seed and data), one after the other:

* ``plain``  — no profiler;
* ``rlprof`` — ``python -m rlprof.verl``, torch backend, ``--profiled`` steps, actor and rollout on every rank;
* ``verl``   — the same profiler overrides without the drop-in: verl 0.9.1's own torch profiler.

Per step, verl's own ``timing_s/step`` (the trainer's wall time of the step) read from its console
log. Two comparisons, medians side by side:

* steps *not* profiled (after the profiled ones; step 1 is warm-up and left out): rlprof against plain —
  what rlprof costs a step it does not profile;
* profiled steps: rlprof against verl's own torch profiler — what rlprof's capture costs over verl's.

Each run takes about a minute here (most of it Ray and model start-up); the machine's load moves
step times by tens of percent, so read the numbers with the spread printed next to them.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_demo_cost import print_cost  # bench/: the same figures as for rlprof demo
from rlprof.analysis.report import build_reports

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "examples" / "verl-cpu" / "run.py"
STEP_LINE = re.compile(r"step:(\d+) - (.*)")
TIMING = re.compile(r"timing_s/([\w/]+):([0-9.eE+-]+)")
UPDATE_WEIGHTS_TARGET = 1.5
STEP_TARGET = 1.15


def profile_overrides(steps: list[int], save: Path) -> list[str]:
    return [
        "global_profiler.tool=torch",
        f"global_profiler.steps=[{','.join(map(str, steps))}]",
        f"global_profiler.save_path={save}",
        "actor_rollout_ref.actor.profiler.enable=true",
        "actor_rollout_ref.actor.profiler.all_ranks=true",
        "actor_rollout_ref.actor.profiler.tool_config.torch.contents=[cpu]",
        "actor_rollout_ref.rollout.profiler.enable=true",
        "actor_rollout_ref.rollout.profiler.all_ranks=true",
    ]


def step_times(out: Path, name: str, steps: int, extra: list[str], rlprof: bool) -> tuple[dict[int, dict[str, float]], float]:
    """verl's ``timing_s/*`` of each step of one run (``{step: {"step": s, "update_weights": s, ...}}``), and
    the run's wall time. The run's console log is kept as ``<out>/<name>.log``."""
    cmd = [sys.executable, str(RUN), "--out", str(out), "--steps", str(steps), *(["--rlprof"] if rlprof else []), *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
    wall = time.monotonic() - start
    text = proc.stdout + proc.stderr
    (out / f"{name}.log").write_text(text)
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    times = {}
    for line in STEP_LINE.finditer(text):
        phases = {k: float(v) for k, v in TIMING.findall(line.group(2))}
        if "step" in phases:
            times[int(line.group(1))] = phases
    return times, wall


def median(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):7.2f} s (min {min(values):.2f}, max {max(values):.2f}, n={len(values)})"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--profiled", default="2,3", help="profiled steps, comma-separated")
    p.add_argument("--out", default="/tmp/rlprof-bench-verl", help="working directory (short: Ray's sockets live in it)")
    p.add_argument("--runs", default="plain,rlprof,verl", help="which runs, comma-separated (the others print n/a)")
    a = p.parse_args(argv)
    profiled = [int(s) for s in a.profiled.split(",") if s]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")  # this invocation's save paths: a rerun never reads an earlier run
    unprofiled = [s for s in range(max(profiled) + 1, a.steps + 1)]

    chosen = set(a.runs.split(","))
    runs: dict[str, dict[int, dict[str, float]]] = {name: {} for name in ("plain", "rlprof", "verl")}
    for name, rlprof, extra in (
        ("plain", False, []),
        ("rlprof", True, profile_overrides(profiled, out / f"profile-rlprof-{stamp}")),
        ("verl", False, profile_overrides(profiled, out / f"profile-verl-{stamp}")),
    ):
        if name not in chosen:
            continue
        times, wall = step_times(out, name, a.steps, extra, rlprof)
        runs[name] = times
        print(f"{name:7s} run: {wall:6.1f} s wall; timing_s/step " +
              " ".join(f"{s}:{t['step']:.2f}" for s, t in sorted(times.items())) + "; update_weights " +
              " ".join(f"{s}:{t.get('update_weights', float('nan')) * 1e3:.0f}ms" for s, t in sorted(times.items())),
              flush=True)

    def pick(name: str, steps: list[int], phase: str = "step") -> list[float]:
        return [runs[name][s][phase] for s in steps if s in runs[name] and phase in runs[name][s]]

    print(f"\nsteps not profiled ({', '.join(map(str, unprofiled))}), median step time:")
    print(f"  without rlprof     {median(pick('plain', unprofiled))}")
    print(f"  under rlprof       {median(pick('rlprof', unprofiled))}")
    print(f"\nprofiled steps ({', '.join(map(str, profiled))}), median step time, torch backend:")
    print(f"  rlprof             {median(pick('rlprof', profiled))}")
    print(f"  verl's own         {median(pick('verl', profiled))}")
    print(f"  (no profiler       {median(pick('plain', profiled))})")
    if runs["rlprof"]:
        unprofiled_median = statistics.median(pick("rlprof", unprofiled) or [float("nan")])
        ratios = [runs["rlprof"][s]["step"] / unprofiled_median for s in profiled if s in runs["rlprof"]]
        print("\nunder rlprof, each profiled step over the median unprofiled step of the same run (timing_s/step): " +
              ", ".join(f"step {s} {r:.2f}x" for s, r in zip(profiled, ratios)) +
              f"; median {statistics.median(ratios):.2f}x (target <= {STEP_TARGET}x)")
        weights = statistics.median(pick("rlprof", unprofiled, "update_weights") or [float("nan")])
        print(f"update_weights (timing_s/update_weights), unprofiled median {weights * 1e3:.0f} ms; profiled: " +
              ", ".join(f"step {s} {runs['rlprof'][s]['update_weights'] * 1e3:.0f} ms "
                        f"({runs['rlprof'][s]['update_weights'] / weights:.2f}x)"
                        for s in profiled if "update_weights" in runs["rlprof"].get(s, {})) +
              f" (target <= {UPDATE_WEIGHTS_TARGET}x)")
        print("the run's report (its cost: each profiled step beyond the median unprofiled step, by verl's timing_s/step):")
        (report,) = build_reports([out / f"profile-rlprof-{stamp}"])
        print_cost("rlprof run", report)
        for s in report.cost.steps:
            if s.step in runs["rlprof"]:
                verl = (runs["rlprof"][s.step]["step"] - unprofiled_median) * 1e3
                print(f"  step {s.step}: the report's cost {s.profiling_ms:.0f} ms; verl's timing_s/step over its unprofiled "
                      f"median {verl:.0f} ms")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
