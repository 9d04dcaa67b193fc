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
STEP_LINE = re.compile(r"step:(\d+) - .*?timing_s/step:([0-9.]+)")


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


def step_times(out: Path, name: str, steps: int, extra: list[str], rlprof: bool) -> tuple[dict[int, float], float]:
    """verl's ``timing_s/step`` of each step of one run, and the run's wall time. The run's console
    log is kept as ``<out>/<name>.log`` (verl's other ``timing_s/*`` figures say where a step went)."""
    cmd = [sys.executable, str(RUN), "--out", str(out), "--steps", str(steps), *(["--rlprof"] if rlprof else []), *extra]
    start = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=out)
    wall = time.monotonic() - start
    text = proc.stdout + proc.stderr
    (out / f"{name}.log").write_text(text)
    if proc.returncode != 0:
        sys.exit(f"run failed ({proc.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    times = {int(m.group(1)): float(m.group(2)) for m in STEP_LINE.finditer(text)}
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
    runs: dict[str, dict[int, float]] = {name: {} for name in ("plain", "rlprof", "verl")}
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
              " ".join(f"{s}:{t:.2f}" for s, t in sorted(times.items())), flush=True)

    def pick(name: str, steps: list[int]) -> list[float]:
        return [runs[name][s] for s in steps if s in runs[name]]

    print(f"\nsteps not profiled ({', '.join(map(str, unprofiled))}), median step time:")
    print(f"  without rlprof     {median(pick('plain', unprofiled))}")
    print(f"  under rlprof       {median(pick('rlprof', unprofiled))}")
    print(f"\nprofiled steps ({', '.join(map(str, profiled))}), median step time, torch backend:")
    print(f"  rlprof             {median(pick('rlprof', profiled))}")
    print(f"  verl's own         {median(pick('verl', profiled))}")
    print(f"  (no profiler       {median(pick('plain', profiled))})")
    if runs["rlprof"]:
        unprofiled_median = statistics.median(pick("rlprof", unprofiled) or [float("nan")])
        print("\nunder rlprof, each profiled step over the median unprofiled step of the same run (timing_s/step): " +
              ", ".join(f"step {s} {runs['rlprof'][s] / unprofiled_median:.2f}x" for s in profiled if s in runs["rlprof"]))
        print("the run's report (rlprof's own step records; the trainer's unprofiled steps timed by the drop-in):")
        (report,) = build_reports([out / f"profile-rlprof-{stamp}"])
        print_cost("rlprof run", report)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
