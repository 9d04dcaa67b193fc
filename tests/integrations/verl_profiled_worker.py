"""The smallest real verl worker that carries ``DistProfilerExtension``, written as verl writes its
own (``verl/workers/engine_workers.py``): verl's ``Worker`` base, the profiler classes imported from
``verl.utils.profiler`` (so it gets rlprof's only when the switch is on), the role section turned
into verl's ``ProfilerConfig`` dataclass with ``omega_conf_to_dataclass``, the update stage
annotated ``scheduled=True`` and advancing the profiler once per mini-batch.

Used by tests/integrations/test_verl_worker.py, which drives it through verl's ``RayWorkerGroup``.
"""

import torch
from omegaconf import OmegaConf

from verl.single_controller.base.decorator import Dispatch, register
from verl.single_controller.base.worker import Worker
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.profiler import DistProfiler, DistProfilerExtension, ProfilerConfig


class ProfiledWorker(Worker, DistProfilerExtension):
    def __init__(self, profiler_section: dict):
        Worker.__init__(self)
        section = OmegaConf.create(profiler_section)
        config = omega_conf_to_dataclass(section, dataclass_type=ProfilerConfig)
        tool_config = omega_conf_to_dataclass(section.tool_config.get(section.tool))
        DistProfilerExtension.__init__(
            self, DistProfiler(rank=self.rank, config=config, tool_config=tool_config, save_file_prefix="actor_rollout_ref"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="red", role="actor_update", scheduled=True)
    def update_actor(self, mini_batches: int) -> str:
        weights = torch.ones(16, 16)
        for _ in range(mini_batches):
            with torch.profiler.record_function("mini_batch"):
                weights = torch.tanh(weights @ weights)
            self.profiler.step()
        return f"{type(self.profiler).__module__}.{type(self.profiler).__name__}"


class ProfiledCritic(Worker, DistProfilerExtension):
    """verl's critic TrainingWorker in miniature: ``save_file_prefix="value_model"``, ``train_batch``."""

    def __init__(self, profiler_section: dict):
        Worker.__init__(self)
        section = OmegaConf.create(profiler_section)
        config = omega_conf_to_dataclass(section, dataclass_type=ProfilerConfig)
        tool_config = omega_conf_to_dataclass(section.tool_config.get(section.tool))
        DistProfilerExtension.__init__(
            self, DistProfiler(rank=self.rank, config=config, tool_config=tool_config, save_file_prefix="value_model"))

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    @DistProfiler.annotate(color="red", role="train_batch")
    def train_batch(self, size: int) -> int:
        return int(torch.ones(size, size).sum())
