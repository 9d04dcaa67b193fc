"""A profiled training loop run in its own process: ``python nsys_scenario.py SPEC.json RESULT.json``.

A fresh process because NVTX loads its tool (NVTX_INJECTION64_PATH) once, at the first NVTX call:
each test process starts with the recorder attached from the first instruction, as under nsys.

SPEC keys: ``config`` (a verl-shaped dict), ``rank``, ``world_size``, ``roles``, ``stages``,
``run_id``, ``run_steps`` (the steps the trainer runs, profiled or not), ``regions`` (``[role, stage,
iterations]`` run every step, in order; iterations > 0 wraps each in ``prof.iteration()``),
``raise_in``/``raise_at_step`` (a region that raises once), ``cuda`` (do a matmul on the GPU in
every iteration), ``without_torch`` (make ``import torch`` fail, as where torch is not installed:
the backend must still emit its ranges and count its windows; it also spares each CPU test
process the seconds torch takes to import).

RESULT: what the backend itself says it did (windows opened and really started), what the plan
expected, and the runtime_env the controller would give this worker (``rlprof.ray.worker_options``).
"""

from __future__ import annotations

import json
import os
import sys


class ScriptedFailure(RuntimeError):
    pass


def main(spec_path: str, result_path: str) -> None:
    with open(spec_path) as handle:
        spec = json.load(handle)
    if spec.get("without_torch"):
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
    import rlprof
    from rlprof.ray import worker_options

    kwargs = dict(rank=spec.get("rank", 0), world_size=spec.get("world_size", 1), roles=tuple(spec["roles"]),
                  stages=spec.get("stages"))
    prof = rlprof.Profiler(spec["config"], run_id=spec.get("run_id"), **kwargs)
    work = _work(spec.get("cuda", False))
    caught = []
    for step in spec["run_steps"]:
        prof.start_step(step)
        for role, stage, iterations in spec["regions"]:
            try:
                with prof.role(role, stage):
                    for _ in range(iterations):
                        with prof.iteration():
                            work()
                    if not iterations:
                        work()
                    if spec.get("raise_in") == f"{role}_{stage}" and spec.get("raise_at_step") == step:
                        raise ScriptedFailure(f"{role}_{stage} at step {step}")
            except ScriptedFailure as exc:
                caught.append(str(exc))
        prof.step_boundary()
    artifacts = prof.finalize()
    backend = prof.backends.plugins["nsys"] if prof.backends is not None else None
    result = {
        "pid": os.getpid(),
        "active": prof.active,
        "windows_opened": backend.windows_opened if backend else 0,
        "windows_started": backend.windows.started if backend else 0,
        "expected_captures": prof.plan.expected_captures(spec.get("stages")),
        "worker_options": worker_options(spec["config"], **kwargs),
        "caught": caught,
        "errors": prof.errors,
        "artifacts": artifacts,
    }
    with open(result_path, "w") as handle:
        json.dump(result, handle, default=str)


def _work(cuda: bool):
    if not cuda:
        return lambda: sum(range(100))
    import torch

    a = torch.ones(256, 256, device="cuda")
    return lambda: (a @ a).sum().item()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
