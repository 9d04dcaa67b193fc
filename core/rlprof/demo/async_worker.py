"""A trainer rank of ``rlprof demo --async``: takes samples from the queue, trains, sends the new weights.

Each public method is one phase of a parameter version (the trainer's step ``N`` makes version ``N``),
called by the controller (:mod:`rlprof.demo.async_trainer`) and wrapped in the region verl's fully
async trainer records for it (docs/analysis.md, "Async overlap"):

* ``actor_wait_samples``: waiting on the sample queue for this rank's share of the step's batch;
* ``actor_update``: GRPO on those samples (the replicas' behaviour log-probs are the "old" policy, the
  initial weights the reference), gradients all-reduced over the ranks;
* ``actor_weight_send``: gathering the weights and sending them to every replica; rank 0 sends and waits
  until each replica paused, loaded and resumed, the other ranks wait for it (a barrier), as every
  rank of an FSDP trainer takes part in the gather.
"""

from __future__ import annotations

import copy
import datetime

import torch
import torch.distributed as dist

from rlprof.demo.grpo import (Sizes, TinyPolicy, average_gradients, grpo_loss, group_advantages, response_log_probs,
                              toy_reward)
from rlprof.integrations.ray import ProfiledWorker


class AsyncPolicyWorker(ProfiledWorker):
    def __init__(self, rank: int, world_size: int, sizes: Sizes, queue_handle, replicas: list, seed: int = 0):
        """``queue_handle``: the :class:`~rlprof.demo.samples.SampleQueue` actor; ``replicas``: the
        :class:`~rlprof.demo.async_replica.RolloutReplica` actors rank 0 sends the weights to."""
        torch.set_num_threads(1)
        torch.manual_seed(seed)  # the replicas start from the same weights (version 0)
        self.rank, self.world_size, self.sizes = rank, world_size, sizes
        self.policy = TinyPolicy(sizes)
        self.ref = copy.deepcopy(self.policy).requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.policy.parameters(), lr=1e-2)
        self.queue = queue_handle
        self.replicas = list(replicas)
        self.groups: list = []

    def join_process_group(self, init_method: str) -> None:
        dist.init_process_group("gloo", init_method=init_method, rank=self.rank, world_size=self.world_size,
                                timeout=datetime.timedelta(seconds=120))

    def wait_samples(self, step: int, timeout_s: float) -> list[int]:
        """This rank's share of step ``step``'s samples; the parameter versions they were generated with."""
        import ray

        with self.profiler.role("actor", "wait_samples"):
            self.groups = ray.get(self.queue.take.remote(step, self.rank, timeout_s))
        return [g.version for g in self.groups]

    def update(self) -> dict[str, float]:
        """One optimiser step over this rank's groups (a micro-batch each), gradients averaged over ranks."""
        sizes = self.sizes
        prompts = torch.stack([g.prompt for g in self.groups]).repeat_interleave(sizes.group_size, dim=0)
        responses = torch.cat([g.responses for g in self.groups])
        old = torch.cat([g.log_probs for g in self.groups])
        losses, kls = [], []
        with self.profiler.role("actor", "update", module=self.policy):
            advantages = group_advantages(toy_reward(prompts, responses), sizes.group_size)
            self.optimizer.zero_grad()
            rows = prompts.shape[0]
            for start in range(0, rows, sizes.micro_batch):
                part = slice(start, start + sizes.micro_batch)
                with self.profiler.iteration():
                    log_probs = response_log_probs(self.policy, prompts[part], responses[part])
                    with torch.no_grad():
                        ref = response_log_probs(self.ref, prompts[part], responses[part])
                    loss, kl = grpo_loss(log_probs, old[part], ref, advantages[part])
                    (loss * (log_probs.shape[0] / rows)).backward()
                    losses.append(loss.item())
                    kls.append(kl.item())
            average_gradients(self.policy, self.world_size)
            self.optimizer.step()
        return {"loss": sum(losses) / len(losses), "kl": sum(kls) / len(kls)}

    def send_weights(self, version: int) -> list[dict[str, float]]:
        """Version ``version``'s weights to every replica (rank 0), every rank waiting until they have them;
        each replica's pause and load (ms) as it answered."""
        import ray

        answers: list[dict[str, float]] = []
        with self.profiler.role("actor", "weight_send"):
            if self.rank == 0:
                state = {name: value.detach().clone() for name, value in self.policy.state_dict().items()}
                weights = ray.put(state)
                answers = ray.get([replica.sync.remote(version, [weights]) for replica in self.replicas])
            dist.barrier()
        return answers

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
