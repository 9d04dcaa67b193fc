"""The training loop rlprof-torch's tests profile; also runnable as one rank of a multi-process run::

    python torch_workload.py '{"config": {...}, "rank": 1, "world_size": 2, "run_id": "r"}'
"""

from __future__ import annotations

import json
import sys

import rlprof


def train(prof: rlprof.Profiler, steps=(1, 2, 3), micro_batches: int = 2, device: str = "cpu") -> None:
    """Two roles sharing one process, each step: ref log-probs (no grad), then the actor update in
    ``micro_batches`` iterations, each marked ``micro_batch`` so sampling can be counted."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(16, 32, device=device)
    for step in steps:
        prof.start_step(step)
        with prof.role("ref", "compute_log_prob"), torch.no_grad():
            model(batch).log_softmax(-1)
        with prof.role("actor", "update"):
            for _ in range(micro_batches):
                with prof.iteration(), torch.autograd.profiler.record_function("micro_batch"):
                    model(batch).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
        prof.step_boundary()


def main(spec: dict) -> None:
    prof = rlprof.Profiler(spec["config"], rank=spec["rank"], world_size=spec["world_size"], roles=("actor", "ref"),
                           run_id=spec["run_id"])
    train(prof, steps=spec.get("steps", (1, 2, 3)), micro_batches=spec.get("micro_batches", 2))
    prof.finalize()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
