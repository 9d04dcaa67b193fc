"""A tiny actor/ref training loop driven through the real Profiler, for rlprof-npu's tests.

The backend is selected by name (``global_profiler.tool: npu``) and loaded through its entry point,
as in a real run; nothing passes backend instances to the Profiler.
"""

from __future__ import annotations

from pathlib import Path

import rlprof

ROLES = ("actor", "ref")
REGIONS = ("ref_compute_log_prob", "actor_update")
"""The regions one training step enters, in order."""


def npu_config(save_path: Path, *, npu: dict | None = None, mode: str = "e2e", steps=(1, 2)) -> dict:
    """A verl-shaped config: tool npu, actor (ref follows it) on every rank."""
    tool_config = {"npu": {**(npu or {}), "discrete": mode == "discrete"}}
    return {
        "global_profiler": {"tool": "npu", "steps": list(steps), "save_path": str(save_path)},
        "actor_rollout_ref": {"actor": {"profiler": {"enable": True, "all_ranks": True, "tool_config": tool_config}}},
    }


def train(config: dict, *, n_steps: int = 3) -> rlprof.Profiler:
    """A tiny training loop (ref log-prob, actor update) driven through the Profiler; returns it finalized."""
    import torch

    prof = rlprof.Profiler(config, rank=0, world_size=1, roles=ROLES, stages={"actor": ["update"], "ref": ["compute_log_prob"]})
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    data = torch.randn(8, 4)
    for step in range(1, n_steps + 1):
        prof.start_step(step)
        with prof.role("ref", "compute_log_prob"), torch.no_grad():
            model(data)
        with prof.role("actor", "update"):
            loss = model(data).pow(2).mean()
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
        prof.step_boundary()
    prof.finalize()
    return prof
