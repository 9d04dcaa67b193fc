"""The end of a torch capture, by size: the stop, the save and the free, and what the rest of the process
can do meanwhile, through the fast path (rlprof_torch.nogil: no GIL) and through torch's own calls.

Per size (default 100k, 400k and 1M events), a CPU capture of the tiny MLP's steps (the profiler arguments
the torch backend gives, ``trace_only`` included) is ended in three phases, as the backend ends it:

* ``stop``: ``torch.profiler.profile.stop()`` (Kineto's stop: on the thread that started the profiler);
* ``save``: ``export_chrome_trace`` of plain JSON (the background writer's first step);
* ``free``: the result's C++ destructor (the writer drops the stopped profiler after its save).

Beside each phase runs a Python thread that counts in a loop; its **progress** is its count per second
during the phase over its count per second in a window of the same length just before, with the main
thread asleep (the idle rate: what the machine gives that thread now). 100% is a thread that does not
notice the phase; a phase that holds the GIL shows about 0%. Target: the fast path >= 70% of idle
progress at each size, in every phase; today's path (torch's own calls) is printed beside it, the two
interleaved in one run (``--repeats`` each, medians).

Run: ``python bench/bench_torch_close.py [--sizes 100000,400000,1000000] [--repeats 3]`` (under
``flock /tmp/rlprof-heavy.lock`` on a shared machine). TMPDIR picks the file system the traces go to.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

import torch

from rlprof_torch import nogil
from rlprof_torch.options import profile_arguments
from rlprof_torch.session import quiet_kineto
from torch_bench_workload import step_body, tiny_mlp

PHASES = ("stop", "save", "free")


class Counter:
    """A Python thread counting as fast as it can get the GIL and a core."""

    def __init__(self):
        self.count = 0
        self.paused = True
        """Asleep while a capture is recorded (it would slow the recording down, not the phases)."""
        self._done = False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._done:
            if self.paused:
                time.sleep(0.01)
                continue
            self.count += 1

    def close(self):
        self._done = True
        self._thread.join()


def record(events: int, model, optimizer, batch, per_step: float) -> torch.profiler.profile:
    """A started profiler that has seen about ``events`` events of the MLP's steps."""
    profile = torch.profiler.profile(**profile_arguments((), torch.cuda.is_available()))
    profile.start()
    for _ in range(max(1, round(events / per_step))):
        step_body(model, optimizer, batch, 4, lambda role, stage: torch.autograd.profiler.record_function(f"{role}_{stage}"))
    return profile


def idle_rate(counter: Counter, seconds: float) -> float:
    before, start = counter.count, time.perf_counter()
    time.sleep(seconds)
    return (counter.count - before) / (time.perf_counter() - start)


def end_capture(profile, fast: bool, counter: Counter, path: str) -> dict[str, tuple[float, float]]:
    """``{phase: (seconds, progress)}`` for one capture ended through the fast path or torch's."""
    def stop():
        if fast:
            assert nogil.stop(profile) == nogil.NOGIL, nogil.unavailable()
        else:
            profile.stop()

    def free():
        nogil.free(profile)  # torch's own result: its last reference dropped, its destructor under the GIL

    phases = {"stop": stop, "save": lambda: profile.export_chrome_trace(path), "free": free}
    out = {}
    counter.paused = False
    time.sleep(0.05)  # the counter is running before the first phase
    for phase in PHASES:
        before, start = counter.count, time.perf_counter()
        phases[phase]()
        seconds = time.perf_counter() - start
        rate = (counter.count - before) / seconds
        out[phase] = (seconds, rate / idle_rate(counter, min(max(seconds, 0.05), 2.0)))
    counter.paused = True
    os.unlink(path)
    return out


def events_per_step(model, optimizer, batch) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        profile = record(1, model, optimizer, batch, 1.0)
        profile.stop()
        path = os.path.join(tmp, "probe.json")
        profile.export_chrome_trace(path)
        import json

        with open(path) as handle:
            return float(len(json.load(handle)["traceEvents"]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="100000,400000,1000000", help="events per capture, comma-separated")
    p.add_argument("--repeats", type=int, default=3, help="captures per size and path (medians)")
    a = p.parse_args(argv)
    reason = nogil.unavailable()
    if reason is not None:
        print(f"the fast path is not usable here: {reason}", file=sys.stderr)
        return 1
    quiet_kineto()
    model, optimizer, batch = tiny_mlp()
    per_step = events_per_step(model, optimizer, batch)
    counter = Counter()
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}; {per_step:.0f} events a step; "
          f"medians of {a.repeats} captures per size and path; progress: a Python thread's count rate during the "
          "phase / its rate with the main thread asleep")
    print(f"{'events':>9} {'path':>6} " + " ".join(f"{phase + ' ms':>9} {'progress':>8}" for phase in PHASES))
    worst: dict[bool, float] = {True: float("inf"), False: float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (int(s) for s in a.sizes.split(",") if s):
            results: dict[bool, list[dict]] = {True: [], False: []}
            for repeat in range(a.repeats):
                for fast in ((True, False) if repeat % 2 == 0 else (False, True)):  # interleaved, alternating first
                    profile = record(size, model, optimizer, batch, per_step)
                    results[fast].append(end_capture(profile, fast, counter, os.path.join(tmp, "trace.json")))
                    del profile
            for fast in (True, False):
                cells = []
                for phase in PHASES:
                    seconds = statistics.median(r[phase][0] for r in results[fast])
                    progress = statistics.median(r[phase][1] for r in results[fast])
                    worst[fast] = min(worst[fast], progress)
                    cells.append(f"{seconds * 1e3:>9.0f} {progress:>8.0%}")
                print(f"{size:>9} {'nogil' if fast else 'torch':>6} " + " ".join(cells), flush=True)
    counter.close()
    print(f"lowest progress in any phase: fast path {worst[True]:.0%} (target >= 70%), torch's own {worst[False]:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
