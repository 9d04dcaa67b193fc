"""What arming a run costs a step that is not captured (issue 42), side by side in one run.

An armed run (a tool set, a role enabled; ``global_profiler.on_demand`` true, the default) asks its decider at
every step start whether the step is captured (:mod:`rlprof.runtime.unplanned`): one ``os.stat`` of the run's
``requests/`` directory, a dict lookup. Printed: ``start_step`` + ``step_boundary`` of a plain Profiler with
nothing planned, armed and disarmed (``on_demand: false``), medians of interleaved repeats, and the difference.
No target of its own: it is paid once per step, not per region.

Run: ``.venv/bin/python bench/bench_unplanned.py``.
"""

from __future__ import annotations

import statistics
import tempfile
import time

import rlprof
from rlprof.testing.recorder import RecordingBackend

STEPS, REPEATS = 5000, 7


def per_step_us(on_demand: bool, repeat: int) -> float:
    save = tempfile.mkdtemp(prefix="rlprof-bench-unplanned-")
    config = {"global_profiler": {"tool": "rec", "steps": None, "save_path": save, "on_demand": on_demand,
                                  "step_metrics": False},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    prof = rlprof.Profiler(config, run_id=f"bench-{on_demand}-{repeat}", backends={"rec": RecordingBackend()})
    began = time.perf_counter()
    for step in range(1, STEPS + 1):
        prof.start_step(step)
        prof.step_boundary()
    took = (time.perf_counter() - began) / STEPS * 1e6
    prof.finalize()
    return took


def main() -> None:
    disarmed, armed = [], []
    for repeat in range(REPEATS):
        disarmed.append(per_step_us(False, repeat))
        armed.append(per_step_us(True, repeat))
    a, b = statistics.median(disarmed), statistics.median(armed)
    print(f"an unprofiled step (start_step + step_boundary), nothing planned, {STEPS} steps x {REPEATS} repeats:")
    print(f"  disarmed (on_demand: false): {a:.2f} us   armed: {b:.2f} us   armed costs {b - a:+.2f} us a step")


if __name__ == "__main__":
    main()
