"""The demo's rollout replicas for ``rlprof demo --rollout vllm``: real vLLM engines, one Ray actor each.

This is verl's agent-loop shape in small: rollout runs in inference-engine replicas, each its own
process, and the engine's own profiler captures the rollout, triggered from outside per generate call.
Each :class:`VllmReplica` holds a vLLM ``LLM`` on the tiny local Llama (:mod:`rlprof.demo.tiny_model`) and
an :class:`~rlprof.integrations.engines.replica.EngineReplica`, which decides (replica ranks, steps,
token window) and moves the engine's traces into the run's layout and manifest.

The training workers keep actor and ref; they consume the replicas' responses, mapped into the demo
policy's vocabulary (:func:`to_policy_tokens`): the engine's tokens are random words of another model,
which is all a GRPO-shaped demo needs.

vLLM on CPU runs with :data:`ENGINE_ENV` and, in the actor's own process, with
``VLLM_ENABLE_V1_MULTIPROCESSING=0``: measured on this 2-core machine, one engine core process less
per replica (no ``VLLM::EngineCore``/``VLLM::Worker`` children), which matters with two replicas and
two training workers on two cores; the engine's profiler works the same (docs/engines.md).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "VLLM_CPU_OMP_THREADS_BIND": "nobind",
    "OMP_NUM_THREADS": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
"""The environment of a replica's process (set before vLLM is imported, through Ray's runtime_env)."""

FIRST_WORD_ID = 4
"""Policy token ``t`` is the tiny model's token ``FIRST_WORD_ID + t`` (its ids below are special tokens)."""


def model_cache_dir() -> Path:
    """Where the tiny model is built once and reused (outside any save_path): ``$XDG_CACHE_HOME/rlprof``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "rlprof" / "tiny-llama"


def to_engine_tokens(prompts: list[list[int]]) -> list[list[int]]:
    return [[FIRST_WORD_ID + t for t in row] for row in prompts]


def to_policy_tokens(responses: list[list[int]], vocab: int, length: int | None = None) -> list[list[int]]:
    """The engine's response tokens in the policy's vocabulary (``id mod vocab``); ``length``: each cut or padded
    (with its last token) to that many, the policy's response length."""
    if length is not None:
        responses = [row[:length] + row[-1:] * (length - len(row)) for row in responses]
    return [[t % vocab for t in row] for row in responses]


SHORT_TOKENS = 2
"""``--long-request``: every other request of the replica generates 1 to this many tokens, in turn (at most 8, as issue
48 plants it). The tail begins when the batch's running requests fall below half, so the decode steps of the batch
before then, slower than the long request's alone, are the long request's decode and not its tail: measured with the
tiny Llama in-process, the tail was 0.84-0.94 of the long request's decode with 1..8, 0.97-0.99 with 1..4, 0.98 with
1..2; in the demo's first step (engines cold, replica 1 profiled over engine steps 3-6) 0.896 with 1..4, two batched
decode steps of 11 ms each before the tail against 2.1 ms a step alone; 1..2 leaves one."""


def request_lengths(count: int, response_len: int, long_tokens: int | None) -> list[int]:
    """How many tokens each of a replica's ``count`` requests generates (``ignore_eos``): ``response_len`` each, or,
    with ``long_tokens`` (``rlprof demo --long-request R:N`` on this replica), ``long_tokens`` for the first and
    1..:data:`SHORT_TOKENS` for the others in turn (a batch that empties, then one request alone: a planted tail)."""
    if long_tokens is None:
        return [response_len] * count
    return [long_tokens] + [1 + i % SHORT_TOKENS for i in range(count - 1)] if count else []


class ReplicaFailed(RuntimeError):
    """A replica could not start or generate: the training stops (as for a failed worker call)."""


class VllmReplica:
    """One rollout replica (a Ray actor): a vLLM ``LLM`` and rlprof's :class:`EngineReplica`."""

    def __init__(self, config: Any, replica_rank: int, num_replicas: int, run_id: str, model_dir: str):
        from rlprof.integrations.engines.replica import EngineReplica

        self.replica = EngineReplica(config, replica_rank=replica_rank, num_replicas=num_replicas, engine="vllm",
                                     run_id=run_id)
        from vllm import LLM

        self.llm = LLM(model_dir, dtype="float32", enforce_eager=True, max_model_len=256, seed=replica_rank,
                       **self.replica.engine_kwargs())

    def ready(self) -> int:
        return os.getpid()

    def generate(self, prompts: list[list[int]], step: int, group_size: int, response_len: int,
                 sent_ns: int | None = None, reason: str | None = None, long_tokens: int | None = None) -> list[list[int]]:
        """``group_size`` responses per prompt (engine token ids), in prompt order, one request each, of
        ``response_len`` tokens (with ``long_tokens``: :func:`request_lengths`). Each request's record goes to the
        step (:meth:`EngineReplica.served`). The engine's profiler is left running: :meth:`finish` (queued by the
        caller right behind this call) stops it and writes the trace while the trainer updates. ``sent_ns``: when
        the caller sent this call; the part of a previous ``finish`` after it is recorded as profiling's wait."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        rows = [row for row in to_engine_tokens(prompts) for _ in range(group_size)]
        params = [SamplingParams(max_tokens=n, min_tokens=n, ignore_eos=True, temperature=1.0)
                  for n in request_lengths(len(rows), response_len, long_tokens)]
        batch = [TokensPrompt(prompt_token_ids=row) for row in rows]
        if reason is not None:  # the controller captures this step though no plan named it
            self.replica.profiler.capture((step,), reason)
        self.replica.start(self.llm, step, sent_ns=sent_ns)
        try:
            outputs = self.llm.generate(batch, params, use_tqdm=False)
        except BaseException as exc:
            self.replica.stop(self.llm, exc)
            raise
        self.replica.served(outputs)  # before finish() closes the region: the step's records are complete with it
        return [list(c.token_ids) for out in outputs for c in out.outputs]

    def finish(self) -> None:
        """The generate call's capture ends: the engine's profiler stops and writes its trace (on this
        actor's thread, the one that started it), the files are listed. The engine is idle since the
        call answered, so it collected nothing more."""
        self.replica.stop(self.llm)

    def close(self) -> list[dict[str, Any]]:
        """Finalize the replica's profiling (its manifest closes) and free the engine; its artifact records."""
        self.replica.finalize()
        artifacts = list(self.replica.profiler.artifacts)
        llm, self.llm = self.llm, None
        del llm
        return artifacts


class Replicas:
    """The demo controller's handle on its N replica actors: started together (the engines load in
    parallel), asked in parallel, closed together. A replica that fails is a failure of the run, named."""

    def __init__(self, controller: Any, count: int, timeout_s: float, say: Any,
                 long_request: tuple[int, int] | None = None):
        """``long_request``: ``(replica, tokens)``, one request of that many tokens per step on that replica, every
        other request at most :data:`SHORT_TOKENS` (``rlprof demo --long-request R:N``)."""
        import time

        import ray

        from rlprof.demo.tiny_model import build_tiny_model

        began = time.perf_counter()
        model_dir = str(build_tiny_model(model_cache_dir()))
        actor = ray.remote(VllmReplica).options(num_cpus=0, runtime_env={"env_vars": dict(ENGINE_ENV)})
        self.controller = controller
        self.long_request = long_request
        self.handles = [actor.remote(controller.config, rank, count, controller.run_id, model_dir) for rank in range(count)]
        self.count = count
        self.finishing: list = []
        """The replicas' :meth:`VllmReplica.finish` calls of the last generate, not awaited by the step."""
        self.timeout_s = max(timeout_s, 180.0)  # an engine takes 10-30 s to start on a loaded machine
        try:
            ray.get([h.ready.remote() for h in self.handles], timeout=self.timeout_s)
        except Exception as exc:
            from rlprof.integrations.ray import describe_error

            raise ReplicaFailed(f"starting the vLLM replicas: {describe_error(exc)}") from exc
        say(f"{count} vLLM replica{'s' if count != 1 else ''} ready in {time.perf_counter() - began:.1f} s")

    def generate(self, prompts: Any, step: int, sizes: Any) -> Any:
        """Every replica generates its share of ``prompts`` (policy tokens); the responses in the policy's
        vocabulary, ``group_size`` per prompt, in prompt order."""
        import ray
        import torch

        from rlprof.integrations.ray import describe_error

        import time

        shares = prompts.tensor_split(self.count)
        asked = [h for h, share in zip(self.handles, shares) if len(share)]
        sent_ns = time.time_ns()
        reason = self.controller.unplanned  # the step in progress's, when the controller captures it unplanned
        long_rank, long_tokens = self.long_request or (None, None)
        refs = [h.generate.remote(share.tolist(), step, sizes.group_size, sizes.response_len, sent_ns, reason,
                                  long_tokens if rank == long_rank else None)
                for rank, (h, share) in enumerate(zip(self.handles, shares)) if len(share)]
        try:
            rows = [row for out in ray.get(refs, timeout=self.timeout_s) for row in out]
        except Exception as exc:
            raise ReplicaFailed(f"rollout generate (vLLM replicas): {describe_error(exc)}") from exc
        # each replica writes its trace while the trainer goes on; a replica's next call queues behind it
        self.finishing = [h.finish.remote() for h in asked]
        return torch.tensor(to_policy_tokens(rows, sizes.vocab, sizes.response_len), dtype=torch.long)

    def close(self, artifacts: list) -> list[str]:
        """Finalize every replica (their manifests close, their engines are freed); failures as lines."""
        import ray

        failures = []
        try:
            ray.get(self.finishing, timeout=self.timeout_s)
        except Exception as exc:
            failures.append(f"finishing the last captures: {type(exc).__name__}: {exc}")
        for rank, handle in enumerate(self.handles):
            try:
                artifacts.extend(ray.get(handle.close.remote(), timeout=self.timeout_s))
            except Exception as exc:
                failures.append(f"replica {rank}: close: {type(exc).__name__}: {exc}")
            ray.kill(handle)
        return failures
