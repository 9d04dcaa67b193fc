"""The torch backend's cost over raw torch.profiler, on the same workload (target: ratio <= 1.05).

One traced training step of a tiny MLP (ref log-probs + actor update in 4 micro-batches) is the unit:

* raw (torch gz): ``torch.profiler.profile`` (with the arguments rlprof gives it: :func:`raw_profile`)
  start, ``record_function`` per region, stop,
  ``export_chrome_trace("....json.gz")`` (torch's own gzip path: what most scripts do);
* raw (same gz):  the same, but exported as plain JSON and compressed in the same way
  (:func:`rlprof.runtime.trace_writer.gzip_beside`), on the training thread, as a script does;
* raw (same output): raw (same gz) writing what rlprof writes, by hand: the ``ProfilerStep#<step>``
  range, the two metadata blocks, the capture's three directories (``os.mkdir``), the ``.gz`` in
  them and the manifest lines (artifact, step, one per region) appended to an open file. Against this
  one the ratio is the cost of rlprof's machinery alone (contexts, capture machine, hook dispatch,
  fault isolation, links refused on the way down), not of the files it writes;
* rlprof: ``prof.start_step`` / ``prof.role`` per region / ``prof.step_boundary`` with
  ``global_profiler.tool=torch`` in end-to-end mode: what the training thread waits for (start, stop,
  contexts, layout, metadata, the ``ProfilerStep#`` range, manifest lines). The trace is exported and
  compressed by the background writer (:mod:`rlprof.runtime.trace_writer`); the unit waits for it
  after its timing, so one round's writing never runs into the next one's;
* rlprof (written): the same, its timing ending once the writer has put the trace in place: the
  same work as raw (same output), so against it the ratio is rlprof's machinery alone (the issue's
  target, <= 1.05, is set on this one).

Units run in interleaved rounds, in a shuffled order every round (see :func:`interleaved`), so all
sides see the same machine; each ratio is the median of per-round ratios, beside the medians of each
side's wall and CPU time. raw (torch gz) runs in a shorter block of its own against rlprof.
Profiler creation (config, entry point) is a one-time cost per process and is reported apart.

Run: ``.venv/bin/python bench/bench_torch_overhead.py``
"""

from __future__ import annotations

import json
import logging
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.autograd.profiler import record_function

import rlprof
from rlprof_torch.options import profile_arguments
from rlprof_torch.session import quiet_kineto
from rlprof.runtime.trace_writer import gzip_beside, gzip_into, process_writer
from torch_bench_workload import step_body, tiny_mlp

ROUNDS = 60
TORCH_GZ_ROUNDS = 20
"""torch's own gz export is 3x slower than the rest and only a reference: a short block of its own."""
WARMUP = 3
STEPS = ROUNDS + TORCH_GZ_ROUNDS + 2 * WARMUP
MICRO_BATCHES = 4


def raw_profile():
    """The raw sides' profiler, with the arguments rlprof's torch backend gives its own (``trace_only``
    included: the same trace, less work at ``stop()``), so the ratios measure the machinery, not a setting."""
    return torch.profiler.profile(**profile_arguments((), torch.cuda.is_available()))


def raw_region(role: str, stage: str):
    return record_function(f"{role}_{stage}")


def main() -> None:
    logging.disable(logging.WARNING)
    quiet_kineto()  # raw sides may start the process's first profiler: Kineto's console lines off for all
    model, optimizer, batch = tiny_mlp()
    with tempfile.TemporaryDirectory() as tmp:
        raw_dir = Path(tmp) / "raw"
        raw_dir.mkdir()
        mkdir_us = mkdir_cost_us(Path(tmp))
        config = {
            "global_profiler": {"tool": "torch", "steps": list(range(1, STEPS + 1)), "save_path": str(Path(tmp) / "rlprof")},
            "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}},
        }
        created = time.perf_counter()
        prof = rlprof.Profiler(config, roles=("actor", "ref"))
        creation = time.perf_counter() - created

        def raw_unit(step: int, torch_gzip: bool) -> None:
            session = raw_profile()
            session.start()
            step_body(model, optimizer, batch, MICRO_BATCHES, raw_region)
            session.stop()
            if torch_gzip:
                session.export_chrome_trace(str(raw_dir / f"step{step}.pt.trace.json.gz"))
            else:
                plain = raw_dir / f"step{step}.same.pt.trace.json"
                session.export_chrome_trace(str(plain))
                gzip_beside(plain)

        manifest = open(Path(tmp) / "raw-manifest.jsonl", "a")
        same_output = SameOutput(Path(tmp) / "raw-same-output", manifest, (model, optimizer, batch))

        def rlprof_unit(step: int) -> None:
            prof.start_step(step)
            step_body(model, optimizer, batch, MICRO_BATCHES, prof.role)
            prof.step_boundary()

        def rlprof_written_unit(step: int) -> None:
            rlprof_unit(step)
            process_writer().wait_idle(60)

        after = {"rlprof": lambda: process_writer().wait_idle(60)}

        same_gz = lambda step: raw_unit(step, torch_gzip=False)  # noqa: E731
        steps = iter(range(1, STEPS + 1))  # verl counts steps from 1
        main_block = interleaved({"raw (same gz)": same_gz, "raw (same output)": same_output.unit, "rlprof": rlprof_unit,
                                  "rlprof (written)": rlprof_written_unit}, ROUNDS, steps, after)
        torch_gz_block = interleaved({"raw (torch gz)": lambda step: raw_unit(step, torch_gzip=True), "rlprof": rlprof_unit},
                                     TORCH_GZ_ROUNDS, steps, after)
        prof.finalize()
        manifest.close()

    print(f"unit: one traced step (ref + actor update in {MICRO_BATCHES} micro-batches, start/stop/export); "
          f"{ROUNDS} rounds in shuffled order after {WARMUP} warm-up rounds")
    print(f"{'median ms per step':28}{'wall':>10}{'CPU':>10}")
    for side, times in main_block.items():
        wall, cpu = (statistics.median(t[i] for t in times) * 1e3 for i in (0, 1))
        print(f"{side:28}{wall:>10.2f}{cpu:>10.2f}")
    for label, block, side, raw, what in (
        ("rlprof / same gz", main_block, "rlprof", "raw (same gz)", "what the step pays, against a script's step"),
        ("rlprof written / same output", main_block, "rlprof (written)", "raw (same output)",
         "rlprof's machinery alone, the same files complete (target <= 1.05)"),
        ("rlprof written / same gz", main_block, "rlprof (written)", "raw (same gz)", "the files beside the trace included"),
        ("same output / same gz", main_block, "raw (same output)", "raw (same gz)", "the files beside the trace alone"),
        ("rlprof / torch gz", torch_gz_block, "rlprof", "raw (torch gz)", "ratio"),
    ):
        pairs = list(zip(block[side], block[raw]))
        ratio = [statistics.median(o[i] / r[i] for o, r in pairs) for i in (0, 1)]
        extra = [statistics.median((o[i] - r[i]) * 1e3 for o, r in pairs) for i in (0, 1)]
        print(f"{label:28}{ratio[0]:>10.3f}{ratio[1]:>10.3f}   {what}; "
              f"median difference {extra[0]:+.2f} ms wall, {extra[1]:+.2f} ms CPU per step")
    print(f"Profiler creation (once per process, not in the ratio): {creation * 1e3:.1f} ms")
    print(f"mkdir in {tempfile.gettempdir()} (rlprof makes 3 directories per capture; raw writes into one): "
          f"{mkdir_us:.1f} us median (TMPDIR picks the file system)")


class SameOutput:
    """What rlprof writes per capture, written by hand with no bookkeeping (the "raw (same output)" side)."""

    def __init__(self, root: Path, manifest, training: tuple):
        self.root, self.manifest, self.training = root, manifest, training
        root.mkdir()
        self.common = {"run": "20261123-000000-abcdef", "rank": 0, "host": "host", "pid": os.getpid()}
        self.regions: list[dict] = []
        """The timing records of the unit's regions so far (one unit at a time)."""

    def region(self, role: str, stage: str):
        return TimedRegion(self, role, stage)

    def unit(self, step: int) -> None:
        session = raw_profile()
        session.start()
        self.regions = []
        started = time.time_ns()
        step_range = record_function(f"ProfilerStep#{step}")
        step_range.__enter__()
        step_body(*self.training, MICRO_BATCHES, self.region)
        step_range.__exit__(None, None, None)
        ended = time.time_ns()
        info = {**self.common, "capture": f"step{step}", "training_steps": [step], "roles": ["ref", "actor"],
                "regions": ["ref_compute_log_prob", "actor_update"]}
        session.add_metadata_json("rlprof", json.dumps(info))
        session.add_metadata_json("distributedInfo", json.dumps({"backend": "none", "rank": 0, "world_size": 1}))
        session.stop()
        capture = self.root / f"step{step}"
        directory = capture / "rank0-host-1" / "torch"
        for level in (capture, directory.parent, directory):  # the capture's, the process's, the backend's
            os.mkdir(level)
        plain = self.root / "plain.pt.trace.json"
        session.export_chrome_trace(str(plain))
        packed = gzip_into(plain, directory / "rank0.pt.trace.json.gz", self.root)
        plain.unlink()
        self.write({"type": "artifact", **self.common, "backend": "torch", "step": step, "steps": [step],
                    "roles": ["actor", "ref"], "capture": f"step{step}", "mode": "e2e", "world_size": 1,
                    "path": str(packed.relative_to(self.root)), "size": packed.stat().st_size, "kind": "file"})
        self.write({"type": "step", **self.common, "step": step, "start_ns": started, "end_ns": ended,
                    "duration_ms": (ended - started) / 1e6, "closed_ns": time.time_ns()},
                   *({"type": "region", **self.common, "step": step, **region} for region in self.regions))

    def write(self, *records: dict) -> None:
        self.manifest.write("".join(json.dumps({**record, "time": round(time.time(), 3)}) + "\n" for record in records))
        self.manifest.flush()


class TimedRegion:
    """``record_function`` plus the region's wall time kept for its manifest line."""

    def __init__(self, owner: SameOutput, role: str, stage: str):
        self.owner, self.role, self.name = owner, role, f"{role}_{stage}"

    def __enter__(self):
        self.range = record_function(self.name)
        self.range.__enter__()
        self.start = time.time_ns()

    def __exit__(self, *exc):
        end = time.time_ns()
        self.range.__exit__(*exc)
        self.owner.regions.append({"role": self.role, "region": self.name, "start_ns": self.start, "end_ns": end,
                                   "duration_ms": (end - self.start) / 1e6})


def interleaved(units: dict, rounds: int, steps, after: dict | None = None) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds per round for each unit, every round in a fresh order; ``after[side]()``
    runs after that side's unit, outside its timing.

    The order is shuffled (seeded), not rotated: a unit runs slower after some others (about 0.9 ms
    after torch's own gz export here, which leaves the caches and the allocator cold), and a fixed
    rotation makes one side follow the slow one more often than the other (with four sides rotated,
    raw (same gz) followed torch's export in 3 rounds of 4 and rlprof in none, which hid 0.7 ms of
    rlprof's cost). Shuffled, each side meets every predecessor equally often on average."""
    order = random.Random(0)
    names = list(units)
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
    for round_index in range(WARMUP + rounds):
        step = next(steps)
        order.shuffle(names)
        for side in names:
            wall, cpu = time.perf_counter(), time.process_time()
            units[side](step)
            if round_index >= WARMUP:
                times[side].append((time.perf_counter() - wall, time.process_time() - cpu))
            if after and side in after:
                after[side]()
    return times


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
