"""How long the controller's fan-out of one profiled step takes: ``start_step`` + ``step_boundary``
to every worker and back, over 1, 2, 4 and 8 local worker actors.

The backend does nothing (what is measured is rlprof's controller and worker path plus Ray's round
trips, not a profiler's start/stop). For comparison: one bare Ray round trip to every worker (a
method that does nothing, the same wait pattern), and an unprofiled step, which makes no remote call. Usage::

    python bench/bench_ray_fanout.py [--rounds 200] [--workers 1,2,4,8]
    python bench/bench_ray_fanout.py --hung [--rounds 50] [--workers 4] [--timeout 2]

``--hung``: one worker (rank 1) hangs in its backend's ``step_boundary`` at step 1 and never comes
back. Printed side by side with a healthy run of the same workers: the hung run's step 1 costs the
timeout, its later steps what a healthy step costs (the controller does not wait for that worker again).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import tempfile
import time

import ray

from rlprof import hookimpl
from rlprof.ray import HYBRID_ENGINE_STAGES, ProfilingController, WorkerSpec
from rlprof.testing.ray_worker import ScriptedWorker


class NoOpBackend:
    """Implements the step hooks and does nothing in them."""

    @hookimpl
    def start_step(self, ctx):
        return None

    @hookimpl
    def step_boundary(self, ctx):
        return None


class HangsOnRank1:
    """No-op backend whose ``step_boundary`` on rank 1 sleeps for an hour (a hung profiler)."""

    @hookimpl
    def start_step(self, ctx):
        return None

    @hookimpl
    def step_boundary(self, ctx):
        if ctx.run.rank == 1:
            time.sleep(3600)
        return None


def measure_hung(actor_class, n: int, rounds: int, timeout_s: float, save_path: str) -> dict[str, list[float]]:
    """Per-step fan-out seconds (start_step + step_boundary) of a healthy run and of a run whose
    rank 1 hangs at step 1, each on fresh workers."""
    out = {}
    for name, backend in (("healthy", NoOpBackend), ("hung", HangsOnRank1)):
        handles = [actor_class.options(num_cpus=0).remote(HYBRID_ENGINE_STAGES) for _ in range(n)]
        ray.get([h.where.remote() for h in handles])
        config = {"global_profiler": {"tool": "noop", "steps": list(range(1, rounds + 1)), "save_path": save_path},
                  "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
        controller = ProfilingController(config, timeout_s=120)
        for rank, handle in enumerate(handles):
            controller.add(WorkerSpec(rank=rank, world_size=n, roles=("actor", "rollout", "ref"),
                                      stages=HYBRID_ENGINE_STAGES), handle)
        assert controller.setup(backends={"noop": backend}).ok
        controller.timeout_s = timeout_s
        steps = []
        for step in range(1, rounds + 1):
            began = time.perf_counter()
            controller.start_step(step)
            controller.step_boundary()
            steps.append(time.perf_counter() - began)
        controller.finalize()
        for handle in handles:
            ray.kill(handle)
        out[name] = steps
    return out


def main_hung(opts) -> None:
    n = int(opts.workers.split(",")[-1]) if opts.workers != "1,2,4,8" else 4
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    logging.getLogger("rlprof").setLevel(logging.CRITICAL)  # the hung worker's warnings are expected here
    with tempfile.TemporaryDirectory() as save_path:
        r = measure_hung(ray.remote(ScriptedWorker), n, opts.rounds, opts.timeout, save_path)
    ray.shutdown()
    healthy, hung = r["healthy"], r["hung"]
    print(f"{n} workers, rank 1 hung in step_boundary at step 1, timeout {opts.timeout:g} s; "
          f"fan-out per profiled step (start_step + step_boundary), ms")
    print(f"{'':>22}  {'healthy':>9}  {'rank 1 hung':>11}")
    print(f"{'step 1':>22}  {healthy[0] * 1e3:>9.2f}  {hung[0] * 1e3:>11.2f}")
    print(f"{'steps 2..' + str(opts.rounds) + ' median':>22}  {statistics.median(healthy[1:]) * 1e3:>9.2f}  "
          f"{statistics.median(hung[1:]) * 1e3:>11.2f}")
    print(f"{'steps 2..' + str(opts.rounds) + ' max':>22}  {max(healthy[1:]) * 1e3:>9.2f}  {max(hung[1:]) * 1e3:>11.2f}")


def measure(handles: list, rounds: int, save_path: str) -> dict[str, float]:
    n = len(handles)
    config = {"global_profiler": {"tool": "noop", "steps": list(range(1, rounds + 1)), "save_path": save_path},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    controller = ProfilingController(config, timeout_s=60)
    for rank, handle in enumerate(handles):
        controller.add(WorkerSpec(rank=rank, world_size=n, roles=("actor", "rollout", "ref"), stages=HYBRID_ENGINE_STAGES), handle)
    assert controller.setup(backends={"noop": NoOpBackend}).ok
    starts, boundaries = [], []
    for step in range(1, rounds + 1):
        began = time.perf_counter()
        assert controller.start_step(step).ok
        middle = time.perf_counter()
        assert controller.step_boundary().ok
        starts.append(middle - began)
        boundaries.append(time.perf_counter() - middle)
    unprofiled = []
    for step in range(rounds + 1, rounds + 1 + rounds):
        began = time.perf_counter()
        controller.start_step(step)
        controller.step_boundary()
        unprofiled.append(time.perf_counter() - began)
    controller.finalize()
    bare = []
    for _ in range(rounds):  # the same fan-out pattern around a method that does nothing: Ray's own share
        began = time.perf_counter()
        refs = [h.hang.remote(0) for h in handles]
        ray.wait(refs, num_returns=len(refs), timeout=60)
        ray.get(refs)
        bare.append(time.perf_counter() - began)
    both = sorted(a + b for a, b in zip(starts, boundaries))
    return {
        "start_step": statistics.median(starts) * 1e3,
        "step_boundary": statistics.median(boundaries) * 1e3,
        "both": statistics.median(both) * 1e3,
        "both_p90": both[int(0.9 * (len(both) - 1))] * 1e3,
        "unprofiled_us": statistics.median(unprofiled) * 1e6,
        "bare": statistics.median(bare) * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--hung", action="store_true", help="one worker hangs at step 1 (see above)")
    parser.add_argument("--timeout", type=float, default=2.0, help="controller timeout for --hung (s)")
    opts = parser.parse_args()
    if opts.hung:
        return main_hung(opts)
    counts = [int(n) for n in opts.workers.split(",")]
    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level=logging.WARNING)
    actor_class = ray.remote(ScriptedWorker)
    handles = [actor_class.options(num_cpus=0).remote(HYBRID_ENGINE_STAGES) for _ in range(max(counts))]
    ray.get([h.where.remote() for h in handles])
    print(f"controller fan-out per profiled step, median of {opts.rounds} rounds (ms); no-op backend")
    print(f"{'workers':>7}  {'start_step':>10}  {'step_boundary':>13}  {'both':>7}  {'both p90':>8}  "
          f"{'bare Ray call':>13}  {'unprofiled step (us)':>20}")
    with tempfile.TemporaryDirectory() as save_path:
        for n in counts:
            r = measure(handles[:n], opts.rounds, save_path)
            print(f"{n:>7}  {r['start_step']:>10.2f}  {r['step_boundary']:>13.2f}  {r['both']:>7.2f}  {r['both_p90']:>8.2f}  "
                  f"{r['bare']:>13.2f}  {r['unprofiled_us']:>20.1f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
