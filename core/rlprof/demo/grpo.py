"""The demo's model and algorithm: a tiny autoregressive policy and GRPO's pieces, in plain torch.

Small enough to run on two CPU cores in seconds, shaped like the real thing so the profile is:
rollout decodes token by token, ref and actor compute per-token log-probs of the responses, the
actor minimises the clipped policy-gradient loss with a KL penalty to the reference, with
advantages normalised inside each group of responses to the same prompt.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from typing import Callable, ContextManager

import torch
from torch import nn


@dataclass(frozen=True)
class Sizes:
    vocab: int = 16
    hidden: int = 32
    prompt_len: int = 4
    response_len: int = 8
    """Decode steps per rollout: each is one ``prof.iteration()``."""
    prompts_per_worker: int = 4
    group_size: int = 4
    """Responses sampled per prompt (GRPO's group)."""
    micro_batch: int = 4
    """Sequences per actor micro-batch: prompts_per_worker * group_size / micro_batch iterations per update."""


class TinyPolicy(nn.Module):
    """Embedding -> GRU -> vocabulary logits."""

    def __init__(self, sizes: Sizes):
        super().__init__()
        self.embed = nn.Embedding(sizes.vocab, sizes.hidden)
        self.rnn = nn.GRU(sizes.hidden, sizes.hidden, batch_first=True)
        self.head = nn.Linear(sizes.hidden, sizes.vocab)

    def forward(self, tokens: torch.Tensor, state: torch.Tensor | None = None):
        out, state = self.rnn(self.embed(tokens), state)
        return self.head(out), state


@torch.no_grad()
def generate(policy: TinyPolicy, prompts: torch.Tensor, new_tokens: int, generator: torch.Generator,
             iteration: Callable[[], ContextManager] = contextlib.nullcontext,
             token_times: list[int] | None = None) -> torch.Tensor:
    """Sample ``new_tokens`` tokens after each prompt; ``iteration()`` wraps every decode step; ``token_times``, when
    given, gains ``time.time_ns()`` as each token of the batch is sampled (its rows' request records)."""
    logits, state = policy(prompts)
    logits = logits[:, -1]
    tokens = []
    for _ in range(new_tokens):
        with iteration():
            token = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator)
            if token_times is not None:
                token_times.append(time.time_ns())
            tokens.append(token)
            logits, state = policy(token, state)
            logits = logits[:, -1]
    return torch.cat(tokens, dim=1)


def response_log_probs(policy: TinyPolicy, prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """Per-token log-probabilities of ``responses`` given ``prompts``: shape (batch, response_len)."""
    sequence = torch.cat([prompts, responses], dim=1)
    logits, _ = policy(sequence[:, :-1])
    log_probs = torch.log_softmax(logits, dim=-1).gather(-1, sequence[:, 1:, None]).squeeze(-1)
    return log_probs[:, prompts.shape[1] - 1:]


def toy_reward(prompts: torch.Tensor, responses: torch.Tensor) -> torch.Tensor:
    """The fraction of response tokens that repeat the prompt's first token (a copy task)."""
    return (responses == prompts[:, :1]).float().mean(dim=1)


def group_advantages(rewards: torch.Tensor, group_size: int, eps: float = 1e-6) -> torch.Tensor:
    """GRPO: each reward minus its group's mean, over the group's standard deviation."""
    groups = rewards.view(-1, group_size)
    normalised = (groups - groups.mean(dim=1, keepdim=True)) / (groups.std(dim=1, keepdim=True) + eps)
    return normalised.view(-1)


def grpo_loss(log_probs: torch.Tensor, old_log_probs: torch.Tensor, ref_log_probs: torch.Tensor,
              advantages: torch.Tensor, clip: float = 0.2, kl_coef: float = 0.04) -> tuple[torch.Tensor, torch.Tensor]:
    """Clipped surrogate plus the k3 KL estimate to the reference; returns (loss, mean KL)."""
    ratio = torch.exp(log_probs - old_log_probs)
    adv = advantages[:, None]
    surrogate = -torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    log_ratio_ref = ref_log_probs - log_probs
    kl = torch.exp(log_ratio_ref) - log_ratio_ref - 1
    return (surrogate + kl_coef * kl).mean(), kl.mean().detach()


def average_gradients(model: nn.Module, world_size: int) -> None:
    """Average ``model``'s gradients over the process group in one flat all-reduce (the demo's data parallelism:
    the collective whose wait and transfer the report splits)."""
    import torch.distributed as dist

    grads = [p.grad for p in model.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()
