"""One ``torch_npu.profiler.profile`` window, and the mstx ranges marked inside it.

Here, and in :mod:`rlprof_npu.analyse`'s offline parse, are all the calls into torch_npu; the module
arrives as an argument named ``torch_npu`` (see :mod:`rlprof_npu.torch_npu_import`). Every
``torch_npu.…`` name used in this package is checked against the real torch-npu wheel by
``tests/test_npu_api_conformance.py``, which reads this package's source, so a name the real
package lacks fails there, not on an Ascend cluster.

The mapping follows verl's Ascend profiling guide (docs/ascend_tutorial/ascend_profiling_en.rst) and
torch_npu's own API:

* ``level``    -> ``_ExperimentalConfig(profiler_level=ProfilerLevel.Level_none/Level0/Level1/Level2)``,
  and ``aic_metrics`` to match: AI Core metrics come with level1 and up (the guide), torch_npu's
  default ``PipeUtilization`` there; ``AiCoreNone`` below, where torch_npu would otherwise reset it
  with a warning at every capture
* ``contents`` -> ``activities`` (``npu`` -> ``ProfilerActivity.NPU``; ``ProfilerActivity.CPU`` always,
  because the region ranges are host events and the trace would lose them without it),
  ``memory`` -> ``profile_memory``, ``shapes`` -> ``record_shapes``, ``module`` -> ``with_modules``,
  ``stack`` -> ``with_stack``
* ``export_type`` -> ``_ExperimentalConfig(export_type=[ExportType.Db/Text])``
* ``analysis`` -> ``tensorboard_trace_handler(<capture dir>, analyse_flag=analysis)``
* the ranges are recorded only when ``_ExperimentalConfig(mstx=True)`` (torch_npu 2.13's name;
  ``msprof_tx`` is its deprecated alias), so every capture sets it.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from .settings import NpuSettings

ARTIFACT_KIND = "ascend_pt"
"""Manifest ``kind`` of a torch_npu output directory, as a capture lists it (what ``rlprof npu-analyse`` looks for)."""

OUTPUT_GLOB = "*_ascend_pt"
"""What torch_npu names a capture's directory: ``<host>_<pid>_<timestamp>_ascend_pt``."""


def profiler_level(torch_npu: ModuleType, level: str) -> Any:
    return {
        "level_none": torch_npu.profiler.ProfilerLevel.Level_none,
        "level0": torch_npu.profiler.ProfilerLevel.Level0,
        "level1": torch_npu.profiler.ProfilerLevel.Level1,
        "level2": torch_npu.profiler.ProfilerLevel.Level2,
    }[level]


def aic_metrics(torch_npu: ModuleType, level: str) -> Any:
    if level in ("level_none", "level0"):
        return torch_npu.profiler.AiCMetrics.AiCoreNone
    return torch_npu.profiler.AiCMetrics.PipeUtilization


def export_type(torch_npu: ModuleType, name: str) -> Any:
    return {
        "db": torch_npu.profiler.ExportType.Db,
        "text": torch_npu.profiler.ExportType.Text,
    }[name]


def activities(torch_npu: ModuleType, contents: tuple[str, ...]) -> list[Any]:
    """CPU always (see the module docstring), NPU when ``contents`` has ``npu``."""
    chosen = [torch_npu.profiler.ProfilerActivity.CPU]
    if "npu" in contents:
        chosen.append(torch_npu.profiler.ProfilerActivity.NPU)
    return chosen


class NpuCapture:
    """A torch_npu profiler writing into ``directory``; built, started and stopped by the backend
    when the core opens and closes a capture window."""

    def __init__(self, torch_npu: ModuleType, settings: NpuSettings, directory: Path):
        self.directory = directory
        self._before: set[Path] = set()
        """The ``*_ascend_pt`` directories already there when it started: not this capture's."""
        self.analysis = settings.analysis
        """Whether torch_npu parses the data at :meth:`stop` (else ``rlprof npu-analyse`` does, later)."""
        experimental_config = torch_npu.profiler._ExperimentalConfig(
            profiler_level=profiler_level(torch_npu, settings.level),
            aic_metrics=aic_metrics(torch_npu, settings.level),
            export_type=[export_type(torch_npu, name) for name in settings.export_types],
            mstx=True,
        )
        contents = settings.contents
        self._profile = torch_npu.profiler.profile(
            activities=activities(torch_npu, contents),
            record_shapes="shapes" in contents,
            profile_memory="memory" in contents,
            with_modules="module" in contents,
            with_stack="stack" in contents,
            with_flops=settings.flops,
            experimental_config=experimental_config,
            on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(str(directory), analyse_flag=settings.analysis),
        )

    def start(self) -> None:
        self._before = set(self.directory.glob(OUTPUT_GLOB))
        self._profile.start()

    def stop(self) -> list[Path]:
        """Stop (torch_npu writes, and parses when ``analysis`` is on); return the ``*_ascend_pt``
        directories it wrote: those that were not in the directory when it started (another Profiler
        of this run and rank in this process, set up before this one, wrote its own there)."""
        self._profile.stop()
        return sorted(set(self.directory.glob(OUTPUT_GLOB)) - self._before)


def range_start(torch_npu: ModuleType, message: str) -> int:
    """Open a host-side mstx range (no stream: a region is host code); returns its id."""
    return torch_npu.npu.mstx.range_start(message=message)


def range_end(torch_npu: ModuleType, range_id: int) -> None:
    torch_npu.npu.mstx.range_end(range_id)
