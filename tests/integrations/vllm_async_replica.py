"""A rollout replica on a real vLLM ``AsyncLLM`` (the engine verl's rollout server runs in-process), run by
tests/integrations/test_engine_vllm.py in its own interpreter: ``python vllm_async_replica.py MODEL SAVE``.

Three steps (1 and 2 profiled, token window 2..6), four concurrent requests each, bracketed by
``await replica.start_async(engine, step)`` / ``await replica.stop_async(engine)``; vLLM's default
multiprocess engine (an ``EngineCore`` process), as verl runs it. Prints one JSON line: the run directory.
"""

import asyncio
import json
import os
import sys

for key, value in {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}.items():
    os.environ.setdefault(key, value)


async def main(model, save):
    from vllm import SamplingParams
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from rlprof.integrations.engines.replica import EngineReplica

    config = {"global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": save},
              "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {
                  "enable": True, "ranks": [0], "tool_config": {"torch": {
                      "contents": ["cpu"], "profile_token_start": 2, "profile_token_end": 6}}}}}}
    replica = EngineReplica(config, replica_rank=0, num_replicas=1)
    engine = AsyncLLM.from_engine_args(AsyncEngineArgs(model=model, dtype="float32", enforce_eager=True,
                                                       max_model_len=256, **replica.engine_kwargs()))
    params = SamplingParams(max_tokens=16, ignore_eos=True)

    async def request(step, i):
        async for _ in engine.generate("the cat sat", params, request_id=f"step{step}-{i}"):
            pass

    for step in (1, 2, 3):
        await replica.start_async(engine, step)
        await asyncio.gather(*(request(step, i) for i in range(4)))
        await replica.stop_async(engine)
    await replica.finalize_async()  # the last capture exports in the background: wait for it
    engine.shutdown()
    print(json.dumps({"run_dir": str(replica.profiler.run.run_dir)}), flush=True)
    os._exit(0)  # AsyncLLM.__del__ at interpreter exit only adds noise


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
