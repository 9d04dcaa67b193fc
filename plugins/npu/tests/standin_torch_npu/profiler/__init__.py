"""Stand-in for ``torch_npu.profiler`` (see the package docstring)."""

import enum

from .experimental_config import AiCMetrics, ExportType, ProfilerLevel, _ExperimentalConfig
from .profiler import profile, tensorboard_trace_handler


class ProfilerActivity(enum.Enum):
    """The real one is a compiled enum (``torch_npu._C._profiler.ProfilerActivity``)."""

    CPU = 0
    NPU = 1


__all__ = ["profile", "ProfilerActivity", "tensorboard_trace_handler", "_ExperimentalConfig", "ProfilerLevel", "AiCMetrics", "ExportType"]
