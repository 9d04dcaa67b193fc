"""What vLLM's log stats cost a generate call (issue 48: at most 1.03x), measured side by side in one run.

rlprof turns vLLM's log stats on wherever it builds an engine whose rollout is timed (``disable_log_stats=False``:
``RequestOutput.metrics`` is filled only then; ``LLM`` and verl turn them off). Two engines on the demo's tiny Llama
in this one process (vLLM in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``, as the demo's replicas run): ``off``, log
stats off (vLLM's default for ``LLM``); ``rlprof``, as rlprof builds it (the vLLM adapter's ``request_kwargs`` and
``request_engine``: the stats on, the stat loggers that log stats start dropped); ``loggers``, vLLM's own log stats
(stats and its Prometheus and logging loggers). Each is asked the same generate call in turn, the order rotated every
round, :data:`ROUNDS` rounds. The call: :data:`REQUESTS` requests of the demo's prompt length, each :data:`TOKENS`
tokens (``ignore_eos``), one batch, as a replica's step. Printed: each engine's median call, the ratios of medians to
``off``, and the spread of the per-round ratio.

Run: ``flock /tmp/rlprof-cpu.lock .venv/bin/python bench/bench_vllm_log_stats.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                   "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})

ROUNDS = 60
REQUESTS = 16
TOKENS = 32


def main() -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from rlprof.demo.replicas import model_cache_dir
    from rlprof.demo.tiny_model import build_tiny_model

    from rlprof.integrations.engines.contract import load_engine

    adapter = load_engine("vllm")
    model = str(build_tiny_model(model_cache_dir()))
    engines = {name: LLM(model, dtype="float32", enforce_eager=True, max_model_len=256, seed=0,
                         **(adapter.request_kwargs() if name != "off" else {}))
               for name in ("off", "rlprof", "loggers")}
    adapter.request_engine(engines["rlprof"])
    prompts = [TokensPrompt(prompt_token_ids=[4 + (i * 7 + j) % 60 for j in range(4)]) for i in range(REQUESTS)]
    params = SamplingParams(max_tokens=TOKENS, min_tokens=TOKENS, ignore_eos=True, temperature=1.0)
    for llm in engines.values():  # warm both up on the same shapes
        for _ in range(3):
            llm.generate(prompts, params, use_tqdm=False)
    names = list(engines)
    times: dict[str, list[float]] = {name: [] for name in names}
    for round_ in range(ROUNDS):
        for name in names[round_ % 3:] + names[:round_ % 3]:
            began = time.perf_counter()
            outputs = engines[name].generate(prompts, params, use_tqdm=False)
            times[name].append(time.perf_counter() - began)
            assert (outputs[0].metrics is not None) == (name != "off")
    median = {name: statistics.median(t) for name, t in times.items()}
    print(f"generate of {REQUESTS} requests x {TOKENS} tokens, {ROUNDS} rounds interleaved:")
    print("  " + "   ".join(f"{name}: median {median[name] * 1e3:.1f} ms" for name in names))
    for name in ("rlprof", "loggers"):
        per_round = sorted(a / b for a, b in zip(times[name], times["off"]))
        print(f"  {name}/off: {median[name] / median['off']:.3f}x{' (target <= 1.03x)' if name == 'rlprof' else ''}   "
              f"per round p25 {per_round[len(per_round) // 4]:.3f}  median {statistics.median(per_round):.3f}  "
              f"p75 {per_round[3 * len(per_round) // 4]:.3f}")


if __name__ == "__main__":
    main()
