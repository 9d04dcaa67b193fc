"""The demo's worker actor: one rank of a hybrid engine (actor + rollout + ref in one process).

Each public method is one phase of a GRPO step, called by the controller (:mod:`rlprof.demo.trainer`)
and wrapped in the role region it belongs to, exactly as a verl worker would be, naming the model the
region runs (``module=``: the policy, or the reference copy) for backends that dump it (``precision_debugger``),
and saying after it how many tokens it ran the model on (``record_tokens``: the step's tokens/s and MFU). The batch stays on
the worker between phases; only prompts, responses and advantages travel.
"""

from __future__ import annotations

import copy
import datetime
import time

import torch
import torch.distributed as dist

from rlprof.integrations.ray import ProfiledWorker
from rlprof.request_records import RequestRecord
from rlprof.demo.grpo import Sizes, TinyPolicy, average_gradients, generate, grpo_loss, response_log_probs


def batch_records(rank: int, call: int, began_ns: int, token_times: list[int], shape: tuple) -> list[RequestRecord]:
    """The request records of one batched generate call (``shape``: its prompts' rows and length): every row arrived
    and was scheduled as the call began, and gave its tokens as the batch's decode steps did. No step is named:
    the driver gives them the step whose window holds their arrival (the worker is not told unprofiled steps)."""
    rows, prompt_len = shape[0], shape[1]
    first, last = (token_times[0], token_times[-1]) if token_times else (None, None)
    return [RequestRecord(f"w{rank}-{call}-{row}", rank, None, began_ns, began_ns, began_ns, first, last, prompt_len,
                          len(token_times), "length", 0) for row in range(rows)]


class PolicyWorker(ProfiledWorker):
    def __init__(self, rank: int, world_size: int, sizes: Sizes, seed: int = 0, perturb: str | None = None,
                 late_ms: float = 0.0, slow_in: str | None = None, slow_from: int = 1):
        """``late_ms``: enter actor update that late (``rlprof demo --slow-rank``): a rank whose hand-off from
        rollout to training lags, which the others then wait for in the gradient all-reduce. With ``slow_in``
        (a region: ``rollout_generate``, ``ref_compute_log_prob``, ``actor_compute_log_prob``; ``rlprof demo
        --slow-in``) the rank spends ``late_ms`` more inside that region instead: a straggler, which no
        collective hides (the others wait for it between regions). ``slow_from``: late from that step on only
        (``--slow-from-step``; the worker counts its steps by its rollouts, one a step)."""
        torch.set_num_threads(1)  # several workers share few cores
        self.late_ms = late_ms
        self.slow_in = slow_in
        self.slow_from = slow_from
        self.steps = 0
        """Steps begun (rollouts taken): step 1 is the first."""
        torch.manual_seed(seed)  # the same initial weights on every rank, as after a broadcast
        self.rank, self.world_size, self.sizes = rank, world_size, sizes
        self.policy = TinyPolicy(sizes)
        self.ref = copy.deepcopy(self.policy).requires_grad_(False)
        if perturb is not None:  # rlprof demo --perturb: the policy departs from an unperturbed run at that layer
            with torch.no_grad():
                for weight in self.policy.get_submodule(perturb).parameters():
                    weight.mul_(1.0001)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)
        self.sampler = torch.Generator().manual_seed(seed + 1000 * (rank + 1))
        self.batch: dict[str, torch.Tensor] = {}

    def join_process_group(self, init_method: str) -> None:
        """Join the gloo group the actor's gradients are all-reduced in (all ranks call this together)."""
        dist.init_process_group("gloo", init_method=init_method, rank=self.rank, world_size=self.world_size,
                                timeout=datetime.timedelta(seconds=120))

    def generate(self, prompts: torch.Tensor) -> torch.Tensor:
        """Rollout: sample ``group_size`` responses per prompt, one decode step per iteration; each response is a
        request record (its rank the replica: this hybrid worker generates its own rollout)."""
        self.steps += 1
        prompts = prompts.repeat_interleave(self.sizes.group_size, dim=0)
        with self.profiler.role("rollout", "generate", module=self.policy):
            began, token_times = time.time_ns(), []
            responses = generate(self.policy, prompts, self.sizes.response_len, self.sampler, self.profiler.iteration,
                                 token_times)
            self.profiler.record_requests(batch_records(self.rank, self.steps, began, token_times, prompts.shape))
            self._slow("rollout_generate")
        # the prompt's forward, then one token per decode step (the last one's forward included)
        self.profiler.record_tokens("rollout", "generate", responses.numel() + prompts.numel(), model=self.policy)
        self.batch = {"prompts": prompts, "responses": responses}
        return responses

    def take_rollout(self, prompts: torch.Tensor, responses: torch.Tensor) -> None:
        """Agent-loop mode (``rlprof demo --rollout vllm``): the rollout replicas generated ``responses``
        (``group_size`` per prompt, in the policy's vocabulary); keep them for the phases that follow."""
        self.steps += 1
        self.batch = {"prompts": prompts.repeat_interleave(self.sizes.group_size, dim=0), "responses": responses}

    def compute_ref_log_prob(self) -> None:
        with self.profiler.role("ref", "compute_log_prob", module=self.ref), torch.no_grad():
            self.batch["ref_log_probs"] = self._log_probs(self.ref)
            self._slow("ref_compute_log_prob")
        self.profiler.record_tokens("ref", "compute_log_prob", self._scored_tokens(), model=self.ref)

    def compute_log_prob(self) -> None:
        """The actor's log-probs before the update (GRPO's "old" policy)."""
        with self.profiler.role("actor", "compute_log_prob", module=self.policy), torch.no_grad():
            self.batch["old_log_probs"] = self._log_probs(self.policy)
            self._slow("actor_compute_log_prob")
        self.profiler.record_tokens("actor", "compute_log_prob", self._scored_tokens(), model=self.policy)

    def update_actor(self, advantages: torch.Tensor) -> dict[str, float]:
        """One optimiser step over all micro-batches (one iteration each), gradients averaged over ranks."""
        batch = self.batch
        rows = batch["prompts"].shape[0]
        losses, kls = [], []
        if self.late_ms and self.slow_in is None and self.steps >= self.slow_from:
            time.sleep(self.late_ms / 1000.0)
        with self.profiler.role("actor", "update", module=self.policy):
            self.optimizer.zero_grad()
            for part in self._micro_batches():
                with self.profiler.iteration():
                    log_probs = response_log_probs(self.policy, batch["prompts"][part], batch["responses"][part])
                    loss, kl = grpo_loss(log_probs, batch["old_log_probs"][part], batch["ref_log_probs"][part], advantages[part])
                    (loss * (log_probs.shape[0] / rows)).backward()
                    losses.append(loss.item())
                    kls.append(kl.item())
            average_gradients(self.policy, self.world_size)
            self.optimizer.step()
        self.profiler.record_tokens("actor", "update", self._scored_tokens(), model=self.policy, train=True)
        return {"loss": sum(losses) / len(losses), "kl": sum(kls) / len(kls)}

    def _scored_tokens(self) -> int:
        """The tokens a log-prob pass runs the policy on: every sequence but its last token (prompt + response - 1)."""
        prompts, responses = self.batch["prompts"], self.batch["responses"]
        return prompts.shape[0] * (prompts.shape[1] + responses.shape[1] - 1)

    def _slow(self, region: str) -> None:
        """Inside ``region``: spend ``late_ms`` more in it when it is the one this rank is slow in (``--slow-in``)."""
        if self.late_ms and self.slow_in == region and self.steps >= self.slow_from:
            time.sleep(self.late_ms / 1000.0)

    def _micro_batches(self) -> list[slice]:
        rows, size = self.batch["prompts"].shape[0], self.sizes.micro_batch
        return [slice(start, start + size) for start in range(0, rows, size)]

    def _log_probs(self, model: TinyPolicy) -> torch.Tensor:
        """Log-probs of the batch's responses under ``model``, one micro-batch per iteration."""
        parts = []
        for part in self._micro_batches():
            with self.profiler.iteration():
                parts.append(response_log_probs(model, self.batch["prompts"][part], self.batch["responses"][part]))
        return torch.cat(parts)


    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
