"""A scripted Ray worker: the Ray glue and a backend under a real cluster, without a trainer.

Use it when a test needs worker actors that behave like verl's (regions per role and stage,
iterations inside them) but must start fast: it imports neither torch nor a model. Importable on
every node (it ships with rlprof), so Ray can create it anywhere::

    Worker = ray.remote(ScriptedWorker)
    spec = WorkerSpec(rank=0, world_size=2, roles=("actor", "rollout", "ref"), stages=HYBRID_ENGINE_STAGES)
    handle = Worker.options(**controller.worker_options(spec)).remote(HYBRID_ENGINE_STAGES)
"""

from __future__ import annotations

import os
import time
from typing import Mapping, Sequence

from rlprof.integrations.ray import ProfiledWorker


class ScriptedWorker(ProfiledWorker):
    """Runs ``stages`` (``{role: [stage, ...]}``, in order) as one training step on demand.

    :param iterations: iterations (``prof.iteration()``) inside every region.
    :param seconds: how long each iteration sleeps, so traces hold measurable ranges.
    """

    def __init__(self, stages: Mapping[str, Sequence[str]], iterations: int = 2, seconds: float = 0.002):
        self.stages = {role: tuple(names) for role, names in stages.items()}
        self.iterations = iterations
        self.seconds = seconds

    def run_step(self, stages: Mapping[str, Sequence[str]] | None = None, seconds: float | None = None,
                 delay_s: float = 0.0) -> list[str]:
        """One training step's work (``stages``/``seconds`` override the constructor's for this step; ``delay_s``:
        sleep that long before the first region, a rank made late on purpose); returns the regions it ran
        (``role_stage``)."""
        seconds = self.seconds if seconds is None else seconds
        if delay_s > 0:
            time.sleep(delay_s)
        ran = []
        for role, names in (self.stages if stages is None else stages).items():
            for stage in names:
                with self.profiler.role(role, stage):
                    for _ in range(self.iterations):
                        with self.profiler.iteration():
                            time.sleep(seconds)
                ran.append(f"{role}_{stage}")
        return ran

    def hang(self, seconds: float) -> None:
        """Block the actor (a hung worker, for timeout tests)."""
        time.sleep(seconds)

    def where(self) -> dict[str, object]:
        """The worker's pid and Ray node id (to check where a scheduling strategy put it)."""
        import ray

        return {"pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}
