"""The small training loop both torch benchmarks profile: a tiny MLP, two roles per step.

``step_body(model, optimizer, batch, micro_batches, region, iteration)`` runs one step; ``region(name)``
and ``iteration()`` are context-manager factories, so the same body is profiled by raw torch.profiler
(``record_function`` / nothing) and through rlprof (``prof.role`` / ``prof.iteration``).
"""

from __future__ import annotations

import contextlib

import torch


def tiny_mlp(layers: int = 4, width: int = 64):
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    return model, torch.optim.SGD(model.parameters(), lr=0.01), torch.randn(32, width)


def step_body(model, optimizer, batch, micro_batches: int, region, iteration=contextlib.nullcontext) -> None:
    """ref log-probs, then the actor update in ``micro_batches`` iterations, then the optimizer."""
    with region("ref", "compute_log_prob"), torch.no_grad():
        model(batch).log_softmax(-1)
    with region("actor", "update"):
        for _ in range(micro_batches):
            with iteration():
                model(batch).pow(2).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
