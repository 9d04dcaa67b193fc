"""A rollout replica whose real vLLM engine fails, run by tests/integrations/test_engine_vllm.py in its own
interpreter: ``python vllm_engine_faults.py MODE MODEL SAVE``. Three generate calls (steps 1-3, steps 1
and 2 profiled), each bracketed by the replica as verl's server brackets it; the loop goes on whatever
the engine does, and prints one JSON line: what each step's generate did.

* ``no-profiler``: the engine was built without rlprof's settings (no ``profiler_config``), so it cannot
  start its profiler;
* ``dies``: the engine's worker process (``VLLM::Worker``, the one that writes traces) is killed (SIGKILL)
  during step 1's capture.
"""

import json
import os
import signal
import sys

for key, value in {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind", "OMP_NUM_THREADS": "1"}.items():
    os.environ.setdefault(key, value)


def main(mode, model, save):
    import psutil
    from vllm import LLM, SamplingParams

    from rlprof.integrations.engines.replica import EngineReplica

    if mode == "no-profiler":
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    config = {"global_profiler": {"tool": "torch", "steps": [1, 2], "save_path": save},
              "actor_rollout_ref": {"rollout": {"mode": "async", "profiler": {
                  "enable": True, "ranks": [0], "tool_config": {"torch": {"contents": ["cpu"]}}}}}}
    replica = EngineReplica(config, replica_rank=0, num_replicas=1)
    kwargs = {} if mode == "no-profiler" else replica.engine_kwargs()
    llm = LLM(model, dtype="float32", enforce_eager=True, max_model_len=256, **kwargs)
    params = SamplingParams(max_tokens=8, ignore_eos=True)
    outcome = {}
    for step in (1, 2, 3):
        replica.start(llm, step)
        if mode == "dies" and step == 1:
            for child in psutil.Process().children(recursive=True):
                if "VLLM::Worker" in child.name() or "VLLM::Worker" in " ".join(child.cmdline()):
                    child.send_signal(signal.SIGKILL)
                    child.wait(10)
        error = None
        try:
            llm.generate(["the cat", "a dog"], params, use_tqdm=False)
            outcome[step] = "generated"
        except Exception as exc:  # the trainer's business; rlprof must not add to it
            error = exc
            outcome[step] = type(exc).__name__
        replica.stop(llm, error)
    replica.finalize()
    print(json.dumps({"outcome": outcome, "run_dir": str(replica.profiler.run.run_dir)}), flush=True)
    os._exit(0)  # a dead engine's atexit handlers may wait on it


if __name__ == "__main__":
    main(*sys.argv[1:4])
