"""The ``hf`` rollout for verl's agent loop: a transformers ``generate()`` behind verl's server API.

Three pieces, as verl's vLLM rollout has them:

- ``HFReplica`` (a ``RolloutReplica``): launches one ``HFServer`` Ray actor per replica node;
- ``HFServer``: token-in/token-out ``generate`` with log-probs (each request timed as an engine times it:
  arrival, the start of its generation, its first and last token, handed to rlprof's replica profiler
  as a request record when rlprof's drop-in built it), ``update_weights``,
  ``start_profile``/``stop_profile`` through a profiler controller built with
  ``build_rollout_dist_profiler(replica_rank, replica_world_size, ...)``, and the
  sleep/wake/kv-cache calls as no-ops, and ``abort_all_requests``/``resume_generation`` as
  verl's servers' submission gate (requests that arrive during a weight sync wait for the resume).
  The model generates on a thread of the server's own, as an engine would in its own process, so the
  event loop stays free to answer calls; the profiler starts and stops on that thread (torch records
  the ops of the thread it started on), and the stop is handed to it after ``stop_profile`` answers
  (``stop(executor=...)``);
- ``HFServerAdapter`` (a ``BaseRollout``): hands weights to the server: inside the hybrid training
  worker after each step (sync trainer), or inside the replica's ``CheckpointEngineWorker`` as a
  checkpoint engine receives them (fully async trainer, standalone replicas).

Imported lazily (the replica loader that ``verl_cpu_bridge`` registers), like verl imports its
vLLM server, so the module-level import of ``build_rollout_dist_profiler`` below sees whatever
``verl.utils.profiler`` holds at that time.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import json
import logging
import os
import socket
import time
from typing import Any, Optional

import ray
import torch

from verl.utils.config import omega_conf_to_dataclass
from verl.utils.profiler import build_rollout_dist_profiler
from verl.workers.config import HFModelConfig
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import RolloutMode, RolloutReplica, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from fully_async import EVENTS_ENV

logger = logging.getLogger(__name__)

SERVER_NAME_PREFIX = "hf_"


def _server_name(replica_rank: int, node_rank: int) -> str:
    return f"{SERVER_NAME_PREFIX}server_{replica_rank}_{node_rank}"


class _Events:
    """The server's own record of when it generated and when it was paused, in the file that
    ``EVENTS_ENV`` names (off when unset; ``run.py --async`` sets it to show the overlap): one JSON
    line per request it generated (``t0``, ``t1``, the parameter version it generated with) and per
    step of a weight sync it saw (``pause``, ``weights``, ``version``, ``resume``), wall-clock seconds."""

    def __init__(self, replica_rank: int):
        path = os.environ.get(EVENTS_ENV)
        self.replica_rank = replica_rank
        self._file = open(path, "a", buffering=1) if path else None

    def __call__(self, event: str, **fields) -> None:
        if self._file is not None:
            self._file.write(json.dumps({"event": event, "replica": self.replica_rank, **fields}) + "\n")


class _TokenClock:
    """A transformers streamer that only notes when the first and the last generated token came (``generate``
    hands it the prompt first, then each new token): the server's own per-request times, as an engine keeps them."""

    def __init__(self):
        self.puts = 0
        self.first_ns = None
        self.last_ns = None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts > 1:  # the first put is the prompt
            self.last_ns = time.time_ns()
            if self.first_ns is None:
                self.first_ns = self.last_ns

    def end(self) -> None:
        pass


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


class HFServer:
    """One rollout server: a transformers causal LM that generates one request at a time."""

    def __init__(
        self,
        config,
        model_config,
        rollout_mode: RolloutMode,
        workers: list,
        replica_rank: int,
        node_rank: int,
        gpus_per_node: int,
        nnodes: int,
    ):
        from transformers import AutoModelForCausalLM

        os.environ["VERL_REPLICA_RANK"] = str(replica_rank)
        self.config = omega_conf_to_dataclass(config)
        self.model_config = omega_conf_to_dataclass(model_config, dataclass_type=HFModelConfig)
        self.rollout_mode = rollout_mode
        self.workers = workers
        self.replica_rank = replica_rank
        self.node_rank = node_rank
        self.gpus_per_node = gpus_per_node
        self.nnodes = nnodes
        self.global_steps = None

        torch.manual_seed(self.config.seed + replica_rank if self.config.seed is not None else replica_rank)
        path = self.model_config.local_path or self.model_config.path
        self.model = AutoModelForCausalLM.from_pretrained(
            path, torch_dtype=torch.float32, attn_implementation="eager"
        ).eval()
        gen_cfg = self.model.generation_config
        eos = gen_cfg.eos_token_id if gen_cfg.eos_token_id is not None else self.model.config.eos_token_id
        self.eos_token_id = eos
        pad = gen_cfg.pad_token_id if gen_cfg.pad_token_id is not None else self.model.config.pad_token_id
        self.pad_token_id = pad if pad is not None else (eos[0] if isinstance(eos, list) else eos)

        self._address = ray.util.get_node_ip_address().strip("[]")
        self._port = _free_port()
        self._lock = asyncio.Lock()
        # the submission gate of verl's servers: closed by abort_all_requests (a weight sync),
        # opened by resume_generation; requests that arrive meanwhile are parked (or refused)
        self._admitting = asyncio.Event()
        self._admitting.set()
        self._rejecting = False
        self._events = _Events(replica_rank)
        self._generating = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generate")
        """The one thread the model generates on (and the profiler starts and stops on), in call order."""

        # profiler controller: the same call verl's vLLM server makes
        profiler_config = self.config.profiler
        tool_config = None
        if profiler_config is not None:
            if profiler_config.tool in ["torch", "npu"]:
                tool_config = omega_conf_to_dataclass((profiler_config.tool_config or {}).get(profiler_config.tool))
            else:
                logger.warning("agent loop only supports torch and npu profilers, got %s", profiler_config.tool)
                profiler_config = None
        self.replica_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.profiler_controller = build_rollout_dist_profiler(
            self.replica_rank, self.replica_world_size, config=profiler_config, tool_config=tool_config
        )

    # ---- addresses ------------------------------------------------------------------------
    def get_server_address(self):
        return self._address, self._port

    def get_rollout_config(self):
        return self.config

    # ---- generation -----------------------------------------------------------------------
    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Optional[list[Any]] = None,
        video_data: Optional[list[Any]] = None,
        audio_data: Optional[list[Any]] = None,
        mm_processor_kwargs: Optional[dict[str, Any]] = None,
        priority: int = 0,
        **kwargs,
    ) -> TokenOutput:
        prompt_ids = [int(t) for t in prompt_ids]
        params = dict(sampling_params)
        max_possible = self.config.max_model_len - len(prompt_ids) if self.config.max_model_len else None
        if "max_tokens" in params:
            max_tokens = params.pop("max_tokens")
        elif "max_new_tokens" in params:
            max_tokens = params.pop("max_new_tokens")
        else:
            max_tokens = self.config.response_length
        max_tokens = min(max_tokens, self.config.response_length)
        if max_possible is not None:
            max_tokens = min(max_tokens, max_possible)
        max_tokens = max(1, int(max_tokens))
        want_logprobs = bool(params.pop("logprobs", False))

        # one request at a time (self._lock): the model is tiny and the host has few cores. It runs on
        # the generating thread; an abort closes the gate and waits for the request in flight, so it
        # never lands in the middle of one, and the next waits for resume_generation.
        arrival_ns = time.time_ns()
        while True:
            if not self._admitting.is_set():
                if self._rejecting:
                    return TokenOutput(
                        token_ids=[], log_probs=None, stop_reason="aborted", extra_fields={"global_steps": self.global_steps}
                    )
                await self._admitting.wait()
                continue
            async with self._lock:
                if self._admitting.is_set():
                    t0 = time.time()
                    token_ids, log_probs, times = await asyncio.get_running_loop().run_in_executor(
                        self._generating, self._generate, prompt_ids, params, max_tokens)
                    self._events("generate", t0=t0, t1=time.time(), version=self.global_steps)
                    self._record(request_id, arrival_ns, times, len(prompt_ids), token_ids)
                    break
        return TokenOutput(
            token_ids=token_ids,
            log_probs=log_probs if want_logprobs else None,
            stop_reason="completed",
            extra_fields={"global_steps": self.global_steps},
        )

    def _record(self, request_id: str, arrival_ns: int, times: tuple, prompt_tokens: int, token_ids: list[int]) -> None:
        """The request's record, to rlprof's replica profiler (verl's own profiler takes none): when it arrived
        (and joined the queue for the model), when its generation began, its first and last token, its tokens,
        why it stopped, and the parameter version it was generated with."""
        record_requests = getattr(self.profiler_controller, "record_requests", None)
        if record_requests is None:
            return
        from rlprof.request_records import RequestRecord

        scheduled_ns, first_ns, last_ns = times
        eos = self.eos_token_id if isinstance(self.eos_token_id, list) else [self.eos_token_id]
        finish = "stop" if token_ids and token_ids[-1] in eos else "length"
        record = RequestRecord(str(request_id), self.replica_rank, None, arrival_ns, arrival_ns, scheduled_ns, first_ns,
                               last_ns, prompt_tokens, len(token_ids), finish, 0)
        record_requests([record], version=self.global_steps)

    @torch.no_grad()
    def _generate(self, prompt_ids: list[int], params: dict[str, Any], max_tokens: int):
        scheduled_ns = time.time_ns()
        clock = _TokenClock()
        temperature = float(params.get("temperature", 1.0) or 0.0)
        top_p = float(params.get("top_p", 1.0) or 1.0)
        top_k = int(params.get("top_k", -1) or -1)
        do_sample = temperature > 0
        gen_kwargs = dict(max_new_tokens=max_tokens, do_sample=do_sample)
        if do_sample:
            gen_kwargs.update(temperature=temperature, top_p=top_p, top_k=top_k if top_k > 0 else 0)
        input_ids = torch.tensor([prompt_ids], dtype=torch.long)
        out = self.model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            return_dict_in_generate=True,
            output_logits=True,
            streamer=clock,
            **gen_kwargs,
        )
        response = out.sequences[0, input_ids.shape[1] :]
        # log-probs of the sampled tokens under the model's raw (untempered) distribution
        logits = torch.stack(out.logits, dim=1)[0].float()[: response.shape[0]]
        log_probs = torch.log_softmax(logits, dim=-1).gather(-1, response.unsqueeze(-1)).squeeze(-1)
        return response.tolist(), log_probs.tolist(), (scheduled_ns, clock.first_ns, clock.last_ns)

    # ---- weights --------------------------------------------------------------------------
    async def update_weights(self, state_dict: dict[str, torch.Tensor]):
        async with self._lock:  # never while a request generates (the weights change under it otherwise)
            t0 = time.time()
            missing, unexpected = self.model.load_state_dict(state_dict, strict=False)
            self._events("weights", t0=t0, t1=time.time())
        # tied embeddings arrive once; anything else missing means the names do not match
        missing = [k for k in missing if k != "lm_head.weight"]
        if missing or unexpected:
            raise RuntimeError(f"update_weights: missing {missing[:5]}, unexpected {unexpected[:5]}")
        return len(state_dict)

    async def set_global_steps(self, global_steps: int):
        self.global_steps = global_steps
        self._events("version", t=time.time(), version=global_steps)

    # ---- memory and request control: nothing to release on the CPU; abort/resume gate requests
    async def wake_up(self, tags: list[str] | None = None):
        return None

    async def sleep(self):
        return None

    async def clear_kv_cache(self):
        return None

    async def release_kv_cache(self):
        return None

    async def resume_kv_cache(self):
        return None

    async def wait_for_requests_to_drain(self):
        async with self._lock:
            return None

    async def abort_all_requests(self, reset_prefix_cache: bool = True, reject_request: bool = False):
        # close the gate, then wait for the request in flight (on the generating thread): nothing is
        # mid-generation once this returns
        self._rejecting = reject_request
        self._admitting.clear()
        async with self._lock:
            pass
        self._events("pause", t=time.time())
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, reset_prefix_cache: bool = True):
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self):
        self._rejecting = False
        self._admitting.set()
        self._events("resume", t=time.time())

    # ---- profiling ------------------------------------------------------------------------
    def _should_profile(self) -> bool:
        # generation runs in this process, so the controller profiles it itself (no engine
        # profiler to drive, unlike vLLM's discrete-mode-only gate)
        return self.profiler_controller.check_enable() and self.profiler_controller.check_this_rank()

    async def start_profile(self, **kwargs):
        if self.node_rank == 0 and self._should_profile():  # on the generating thread: torch records that thread
            await asyncio.get_running_loop().run_in_executor(
                self._generating, functools.partial(self.profiler_controller.start, **kwargs))

    async def stop_profile(self):
        if self.node_rank == 0 and self._should_profile():  # answers at once; the thread stops the capture next
            stop = self.profiler_controller.stop
            if "executor" in inspect.signature(stop).parameters:  # rlprof's: it knows the close is pending
                stop(executor=self._generating)
            else:  # verl's own profiler: stopped (and exported) on the thread it started on
                self._generating.submit(stop)


class HFReplica(RolloutReplica):
    """A replica of ``HFServer`` actors, one per node of the replica (one on this machine)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.server_class = ray.remote(HFServer)

    async def launch_servers(self):
        assert len(self.workers) == self.world_size, (
            f"worker number {len(self.workers)} not equal to world size {self.world_size}"
        )
        for node_rank in range(self.nnodes):
            workers = self.workers[node_rank * self.gpus_per_replica_node : (node_rank + 1) * self.gpus_per_replica_node]
            server = self.server_class.options(
                name=_server_name(self.replica_rank, node_rank) + self.name_suffix,
                num_cpus=0,
                max_concurrency=self.max_concurrency,
            ).remote(
                config=self.config,
                model_config=self.model_config,
                rollout_mode=self.rollout_mode,
                workers=workers,
                replica_rank=self.replica_rank,
                node_rank=node_rank,
                gpus_per_node=self.gpus_per_replica_node,
                nnodes=self.nnodes,
            )
            self.servers.append(server)
        address, port = await self.servers[0].get_server_address.remote()
        self._server_handle = self.servers[0]
        self._server_address = f"{address}:{port}"


class HFServerAdapter(BaseRollout):
    """The rollout object inside the hybrid training worker: forwards weights to its server."""

    def __init__(self, config, model_config, device_mesh, replica_rank: int = -1):
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", 0))
        local_world_size = int(os.environ.get("RAY_LOCAL_WORLD_SIZE", 1))
        rollout_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // rollout_world_size if replica_rank == -1 else replica_rank
        self.rollout_rank = rank % rollout_world_size
        self.node_rank = self.rollout_rank // local_world_size
        self._has_server = self.rollout_rank == 0
        self.server_handle = None
        self.sleep_level = 1

    def _ensure_server_handle(self) -> bool:
        if not self._has_server:
            return False
        if self.server_handle is None:
            self.server_handle = ray.get_actor(_server_name(self.replica_rank, self.node_rank))
        return True

    async def resume(self, tags: list[str]):
        if self.config.free_cache_engine and self._ensure_server_handle():
            await self.server_handle.wake_up.remote(tags=tags)

    async def release(self):
        if self.config.free_cache_engine and self._ensure_server_handle():
            await self.server_handle.sleep.remote()

    @torch.no_grad()
    async def update_weights(self, weights, global_steps: int = None, wire_format: str = "named_tensors", **kwargs):
        assert wire_format == "named_tensors", f"hf rollout takes named_tensors, got {wire_format!r}"
        state = {}
        # a list or generator from the training engine (sync mode), an async generator from a
        # checkpoint engine's receive_weights (a standalone replica's CheckpointEngineWorker)
        async for name, tensor in ensure_async_iterator(weights):
            if hasattr(tensor, "full_tensor"):  # DTensor: every rank takes part in the gather
                tensor = tensor.full_tensor()
            state[name] = tensor.detach().to("cpu", copy=True)
        if self._ensure_server_handle():
            await self.server_handle.update_weights.remote(state)
            if global_steps is not None:
                await self.server_handle.set_global_steps.remote(global_steps)


if os.environ.get("RLPROF_VERL"):  # under rlprof's drop-in: the server's calls are the replica's async regions
    from rlprof.integrations.verl.server_regions import wrap_server

    wrap_server(HFServer, generate="_generate")
