"""What the training thread pays when a torch capture closes, by trace size.

One capture per step of the tiny MLP (bench/torch_bench_workload.py) with N micro-batches (more
micro-batches, larger trace); per size, the median over the steps of:

* ``step_boundary``: wall and CPU time of the call that closes the capture (stop, plain JSON export,
  handing the file to the background writer, manifest lines): what the step waits for;
* ``written after``: how long after ``step_boundary`` returned the trace was in place (compression,
  sha256, placing under its name, on the writer thread), waited for before the next step so sizes
  do not mix;
* ``held off``: of that time, how long the training thread could not have run Python. While it
  waits, the training thread wakes every millisecond; each wake-up later than that is time another
  thread held the GIL. Kineto's export (``ProfilerResult.save``) holds it from start to end (measured
  here: 67 ms for the 200-micro-batch trace, after a 92 ms ``stop()``), so a training thread that
  needs the GIL while the writer exports waits for it: inside ``step_boundary`` when the export
  starts before the call returns, here when after. The writer's thread spares the training thread
  the compression and the hashing (zlib and hashlib release the GIL), not the export.

Run: ``.venv/bin/python bench/bench_torch_close.py [micro-batches ...]`` (default 4 40 200). TMPDIR
picks the file system written to. To compare with another checkout, run this file under that
checkout's packages (``PYTHONPATH=<checkout>/core:<checkout>/plugins/torch``): a core whose torch
backend compresses on the training thread shows that time inside ``step_boundary``.
"""

from __future__ import annotations

import logging
import statistics
import sys
import tempfile
import time

import rlprof
from torch_bench_workload import step_body, tiny_mlp

STEPS = 12
WARMUP = 2


TICK_S = 0.001


def wait_watching_the_gil(writer, timeout_s: float = 120.0) -> float:
    """Wait for ``writer`` to be idle as a training thread would: waking every :data:`TICK_S`. The
    seconds the wake-ups came late in all (another thread held the GIL)."""
    held, deadline = 0.0, time.perf_counter() + timeout_s
    while not writer.wait_idle(0) and time.perf_counter() < deadline:
        before = time.perf_counter()
        time.sleep(TICK_S)
        held += max(0.0, time.perf_counter() - before - 2 * TICK_S)
    return held


def measure(micro_batches: int) -> tuple[float, float, float | None, float, float | None]:
    """Medians (step_boundary wall ms, its CPU ms, written-after ms or None, trace KiB, held-off ms or None)."""
    import rlprof_torch.backend as backend

    writer = getattr(backend, "writer", None)  # None: a checkout whose backend writes on the training thread
    process_writer = writer.process_writer if writer is not None else None
    model, optimizer, batch = tiny_mlp()
    walls, cpus, after, held = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        prof = rlprof.Profiler({"global_profiler": {"tool": "torch", "steps": list(range(1, STEPS + 1)), "save_path": tmp},
                                "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}},
                               roles=("actor", "ref"))
        for step in range(1, STEPS + 1):
            prof.start_step(step)
            step_body(model, optimizer, batch, micro_batches, prof.role)
            wall, cpu = time.perf_counter(), time.process_time()
            prof.step_boundary()
            returned = time.perf_counter()
            walls.append(returned - wall)
            cpus.append(time.process_time() - cpu)
            if process_writer is not None:
                held.append(wait_watching_the_gil(process_writer()))
                after.append(time.perf_counter() - returned)
        sizes = [a["size"] for a in prof.finalize()]
    ms = lambda values: statistics.median(values[WARMUP:]) * 1e3  # noqa: E731
    return ms(walls), ms(cpus), ms(after) if after else None, statistics.median(sizes) / 1024, ms(held) if held else None


def main() -> None:
    logging.disable(logging.WARNING)
    sizes = [int(a) for a in sys.argv[1:]] or [4, 40, 200]
    print(f"one capture per step, {STEPS - WARMUP} steps measured per size after {WARMUP}; medians")
    print(f"{'micro-batches':>14}{'trace KiB gz':>14}{'step_boundary wall':>20}{'CPU':>12}{'written after':>16}"
          f"{'held off':>12}")
    for micro_batches in sizes:
        wall, cpu, after, kib, held = measure(micro_batches)
        written = f"{after:.1f} ms" if after is not None else "inline"
        held_off = f"{held:.1f} ms" if held is not None else "-"
        print(f"{micro_batches:>14}{kib:>14.0f}{wall:>17.1f} ms{cpu:>9.1f} ms{written:>16}{held_off:>12}")


if __name__ == "__main__":
    main()
