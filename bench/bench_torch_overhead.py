"""The torch backend's cost over raw torch.profiler, on the same workload (target: ratio <= 1.05).

One traced training step of a tiny MLP (ref log-probs + actor update in 4 micro-batches) is the unit:

* raw (torch gz): ``torch.profiler.profile`` start, ``record_function`` per region, stop,
  ``export_chrome_trace("....json.gz")`` (torch's own gzip path: what most scripts do);
* raw (same gz):  the same, but exported the way the backend exports (plain JSON, then
  :func:`rlprof_torch.session.gzip_beside`): against this one the ratio is rlprof's bookkeeping alone;
* rlprof: ``prof.start_step`` / ``prof.role`` per region / ``prof.step_boundary`` with
  ``global_profiler.tool=torch`` in end-to-end mode (start/stop/export plus contexts, layout,
  metadata, the ``ProfilerStep#`` range and a manifest line).

Units run in interleaved rounds (the order rotates every round), so all sides see the same machine;
each ratio is the median of per-round ratios, beside the medians of each side's wall and CPU time.
Profiler creation (config, entry point) is a one-time cost per process and is reported apart.

Run: ``.venv/bin/python bench/bench_torch_overhead.py``
"""

from __future__ import annotations

import logging
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.autograd.profiler import record_function

import rlprof
from rlprof_torch.session import gzip_beside
from torch_bench_workload import step_body, tiny_mlp

ROUNDS = 30
WARMUP = 3
MICRO_BATCHES = 4


def raw_region(role: str, stage: str):
    return record_function(f"{role}_{stage}")


def main() -> None:
    logging.disable(logging.WARNING)
    model, optimizer, batch = tiny_mlp()
    with tempfile.TemporaryDirectory() as tmp:
        raw_dir = Path(tmp) / "raw"
        raw_dir.mkdir()
        mkdir_us = mkdir_cost_us(Path(tmp))
        config = {
            "global_profiler": {"tool": "torch", "steps": list(range(1, ROUNDS + WARMUP + 1)), "save_path": str(Path(tmp) / "rlprof")},
            "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}},
        }
        created = time.perf_counter()
        prof = rlprof.Profiler(config, roles=("actor", "ref"))
        creation = time.perf_counter() - created

        def raw_unit(step: int, torch_gzip: bool) -> None:
            session = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            session.start()
            step_body(model, optimizer, batch, MICRO_BATCHES, raw_region)
            session.stop()
            if torch_gzip:
                session.export_chrome_trace(str(raw_dir / f"step{step}.pt.trace.json.gz"))
            else:
                plain = raw_dir / f"step{step}.same.pt.trace.json"
                session.export_chrome_trace(str(plain))
                gzip_beside(plain)

        def rlprof_unit(step: int) -> None:
            prof.start_step(step)
            step_body(model, optimizer, batch, MICRO_BATCHES, prof.role)
            prof.step_boundary()

        units = {
            "raw (torch gz)": lambda step: raw_unit(step, torch_gzip=True),
            "raw (same gz)": lambda step: raw_unit(step, torch_gzip=False),
            "rlprof": rlprof_unit,
        }
        names = list(units)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for step in range(1, ROUNDS + WARMUP + 1):  # verl counts steps from 1
            shift = step % len(names)
            for side in names[shift:] + names[:shift]:
                wall, cpu = time.perf_counter(), time.process_time()
                units[side](step)
                if step > WARMUP:
                    times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
        prof.finalize()

    print(f"unit: one traced step (ref + actor update in {MICRO_BATCHES} micro-batches, start/stop/export); "
          f"{ROUNDS} interleaved rounds after {WARMUP} warm-up rounds")
    print(f"{'median ms per step':28}{'wall':>10}{'CPU':>10}")
    for side in names:
        wall, cpu = (statistics.median(t[i] for t in times[side]) * 1e3 for i in (0, 1))
        print(f"{side:28}{wall:>10.2f}{cpu:>10.2f}")
    for raw in names[:2]:
        pairs = list(zip(times["rlprof"], times[raw]))
        ratio = [statistics.median(o[i] / r[i] for o, r in pairs) for i in (0, 1)]
        extra = [statistics.median((o[i] - r[i]) * 1e3 for o, r in pairs) for i in (0, 1)]
        print(f"{'rlprof / ' + raw:28}{ratio[0]:>10.3f}{ratio[1]:>10.3f}   ratio (target <= 1.05); "
              f"median difference {extra[0]:+.2f} ms wall, {extra[1]:+.2f} ms CPU per step")
    print(f"Profiler creation (once per process, not in the ratio): {creation * 1e3:.1f} ms")
    print(f"mkdir in {tempfile.gettempdir()} (rlprof makes 3 directories per capture; raw writes into one): "
          f"{mkdir_us:.1f} us median (TMPDIR picks the file system)")


def mkdir_cost_us(base: Path, count: int = 30) -> float:
    """The median cost of one ``mkdir`` where both sides write (it differs by file system)."""
    costs = []
    for index in range(count):
        started = time.perf_counter()
        (base / f"mkdir-probe-{index}").mkdir()
        costs.append(time.perf_counter() - started)
    return statistics.median(costs) * 1e6


if __name__ == "__main__":
    main()
