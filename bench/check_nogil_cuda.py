"""Check the torch backend's GIL-free capture end (rlprof_torch.nogil) on a CUDA machine.

Self-contained (torch, rlprof and rlprof-torch with its extension built: ``pip install -e plugins/torch``):

1. a small CUDA workload (an MLP's forward and backward, with ``record_function`` ranges) is captured with
   the profiler arguments the torch backend gives (CPU + CUDA activity, ``trace_only``), then ended through
   the fast path and through torch's own calls, interleaved, ``--repeats`` times each after a warm-up
   capture; every capture's trace must hold the same events (count, and each (category, name) as often)
   as the others: the GIL-free end writes what torch writes, kernels and runtime calls included;
2. per path, the stop, save and free times and a Python thread's progress during each (its count rate over
   its rate with the main thread asleep; ~0% where the GIL is held);
3. the real backend through ``rlprof.Profiler`` (``global_profiler.tool=torch``, two profiled steps on CUDA):
   each trace's record says ``stop_path: "nogil"`` and holds CUDA kernels.

Exit 0: all checks passed, or no CUDA device here (said so); 1: a check failed (what differs is printed).

Run: ``python bench/check_nogil_cuda.py [--repeats 3] [--iterations 300]`` (``--device cpu``: the same
checks on the CPU, to try the script where there is no GPU).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import threading
import time


class Counter:
    """A Python thread counting as fast as it can get the GIL and a core (paused between measurements)."""

    def __init__(self):
        self.count, self.paused, self.done = 0, True, False
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.done:
            if self.paused:
                time.sleep(0.01)
                continue
            self.count += 1

    def measure(self, call) -> tuple[float, float]:
        """(seconds ``call`` took, the counter's progress during it over its progress with this thread asleep)."""
        self.paused = False
        time.sleep(0.02)
        before, start = self.count, time.perf_counter()
        call()
        seconds = time.perf_counter() - start
        rate = (self.count - before) / seconds if seconds > 0 else 0.0
        before, idle_start = self.count, time.perf_counter()
        time.sleep(min(max(seconds, 0.05), 2.0))
        idle = (self.count - before) / (time.perf_counter() - idle_start)
        self.paused = True
        return seconds, (rate / idle if idle else 0.0)


def workload(torch, device: str, iterations: int):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(64, 256, device=device)

    def run():
        for _ in range(iterations):
            with torch.autograd.profiler.record_function("actor_update"):
                model(batch).pow(2).mean().backward()
                optimizer.step()
                optimizer.zero_grad()
        if device == "cuda":
            torch.cuda.synchronize()

    return run


def shape(path: str) -> collections.Counter:
    with open(path) as handle:
        events = json.load(handle)["traceEvents"]
    return collections.Counter((e.get("cat"), e.get("name")) for e in events if e.get("ph") != "M")


def one_capture(torch, nogil, arguments, run, fast: bool, counter: Counter, directory: str, index: int):
    profile = torch.profiler.profile(**arguments)
    profile.start()
    run()
    path = os.path.join(directory, f"{'nogil' if fast else 'torch'}{index}.json")
    phases = {}

    def stop():
        taken = nogil.stop(profile) if fast else (profile.stop() or nogil.TORCH)
        assert taken == (nogil.NOGIL if fast else nogil.TORCH), (taken, nogil.unavailable())

    def free():
        nogil.free(profile)  # torch's own result: its last reference dropped, its destructor under the GIL

    for name, call in (("stop", stop), ("save", lambda: profile.export_chrome_trace(path)), ("free", free)):
        phases[name] = counter.measure(call)
    found = shape(path)
    os.unlink(path)
    return found, phases


def check_backend(torch, device: str, iterations: int, directory: str) -> list[str]:
    """Two profiled steps through rlprof's Profiler: the records say nogil, the traces hold the device's work."""
    import gzip

    import rlprof

    problems = []
    run = workload(torch, device, iterations)
    config = {"global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": os.path.join(directory, "run")},
              "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True}}}}
    prof = rlprof.Profiler(config, roles=("actor",))
    for step in (1, 2):
        prof.start_step(step)
        with prof.role("actor", "update"):
            run()
        prof.step_boundary()
    records = [r for r in prof.finalize() if r.get("backend") == "torch"]
    if [r.get("stop_path") for r in records] != ["nogil", "nogil"]:
        problems.append(f"the backend's records say {[r.get('stop_path') for r in records]}, not nogil twice")
    for record in records:
        with gzip.open(os.path.join(prof.run.run_dir, record["path"]), "rt") as handle:
            events = json.load(handle)["traceEvents"]
        kernels = sum(e.get("cat") == "kernel" for e in events)
        if device == "cuda" and not kernels:
            problems.append(f"{record['path']}: no CUDA kernel in the trace")
        print(f"backend: {record['path']}: {len(events)} events, {kernels} kernels, stop_path {record.get('stop_path')}")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--iterations", type=int, default=300, help="training iterations per capture")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    a = p.parse_args(argv)
    import torch

    if a.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device here (torch.cuda.is_available() is False): nothing to check; run this on a GPU machine "
              "(--device cpu runs the same checks on the CPU)")
        return 0
    from rlprof_torch import nogil
    from rlprof_torch.options import profile_arguments
    from rlprof_torch.session import quiet_kineto

    reason = nogil.unavailable()
    if reason is not None:
        print(f"FAILED: the fast path is not usable here: {reason}")
        return 1
    quiet_kineto()
    device_name = torch.cuda.get_device_name(0) if a.device == "cuda" else "CPU"
    print(f"torch {torch.__version__} on {device_name}; {a.iterations} iterations a capture, {a.repeats} captures a path")
    arguments = profile_arguments((), a.device == "cuda")
    run = workload(torch, a.device, a.iterations)
    counter = Counter()
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as directory:
        one_capture(torch, nogil, arguments, run, False, counter, directory, 0)  # warm-up: lazy CUDA/CUPTI setup
        shapes, phases = {True: [], False: []}, {True: [], False: []}
        for index in range(a.repeats):
            for fast in ((True, False) if index % 2 == 0 else (False, True)):
                found, measured = one_capture(torch, nogil, arguments, run, fast, counter, directory, index + 1)
                shapes[fast].append(found)
                phases[fast].append(measured)
        reference = shapes[False][0]
        for fast in (True, False):
            for index, found in enumerate(shapes[fast]):
                if found != reference:
                    differ = {k: (found.get(k, 0), reference.get(k, 0)) for k in set(found) | set(reference)
                              if found.get(k, 0) != reference.get(k, 0)}
                    problems.append(f"{'nogil' if fast else 'torch'} capture {index + 1}: {sum(found.values())} events "
                                    f"against {sum(reference.values())}; (category, name): (this, first torch) "
                                    f"{dict(list(differ.items())[:10])}")
        kernels = sum(n for (cat, _), n in reference.items() if cat == "kernel")
        print(f"events per capture: {sum(reference.values())} ({kernels} kernels); "
              f"{'identical' if not problems else 'NOT identical'} across all {2 * a.repeats} captures")
        print(f"{'path':>6} " + " ".join(f"{name + ' ms':>9} {'progress':>8}" for name in ("stop", "save", "free")))
        for fast in (True, False):
            cells = [f"{statistics.median(m[name][0] for m in phases[fast]) * 1e3:>9.1f} "
                     f"{statistics.median(m[name][1] for m in phases[fast]):>8.0%}" for name in ("stop", "save", "free")]
            print(f"{'nogil' if fast else 'torch':>6} " + " ".join(cells))
        problems += check_backend(torch, a.device, a.iterations // 4 or 1, directory)
    counter.done = True
    for problem in problems:
        print(f"FAILED: {problem}")
    print("ok: the GIL-free end writes what torch writes" if not problems else f"{len(problems)} check(s) failed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
